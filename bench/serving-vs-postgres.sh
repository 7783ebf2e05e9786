#!/usr/bin/env bash
# Point reads against Weir and against a throwaway local PostgreSQL 15 in one
# run: the same 1,000,000-row table `kv (id BIGINT PRIMARY KEY, v TEXT)`, the
# same pgbench script (`SELECT v FROM kv WHERE id = :id`, prepared), 1 and 4
# clients. Prints QPS per system and client count and Weir / PostgreSQL.
#
#   cargo build --release --bin weir
#   bench/serving-vs-postgres.sh
#   ROWS=100000 SECONDS_PER_RUN=5 bench/serving-vs-postgres.sh
set -euo pipefail

rows=${ROWS:-1000000}
seconds=${SECONDS_PER_RUN:-10}
clients=${CLIENTS:-1 4}
port=${PORT:-6688}
. "$(dirname "$0")/throwaway.sh"

load_sql="CREATE TABLE kv (id BIGINT PRIMARY KEY, v TEXT);
INSERT INTO kv SELECT g, 'value-' || g FROM generate_series(0, $((rows - 1))) AS t(g);"
echo "\\set id random(0, $((rows - 1)))
SELECT v FROM kv WHERE id = :id;" >"$work/point.sql"

declare -A qps

run_pgbench() { # system, port, user, database
    local system=$1 p=$2 user=$3 db=$4
    for c in $clients; do
        local out
        out=$(pgbench -n -h 127.0.0.1 -p "$p" -U "$user" -M prepared -f "$work/point.sql" \
            -c "$c" -j "$c" -T "$seconds" "$db" 2>&1) || {
            echo "pgbench against $system failed:" >&2
            echo "$out" >&2
            exit 1
        }
        qps[$system,$c]=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
        echo "$system, $c client(s): ${qps[$system,$c]} QPS"
    done
}

# PostgreSQL 15: throwaway cluster, fsync off (reads only).
start_postgres postgres fsync=off
psql -q -h 127.0.0.1 -p $pg_port -U postgres postgres -v ON_ERROR_STOP=1 -c "$load_sql" -c "VACUUM ANALYZE kv"
run_pgbench postgres $pg_port postgres postgres
su postgres -c "$pg_bin/pg_ctl -D $work/pg -m fast stop" >/dev/null

# Weir with its embedded defaults.
start_weir
psql -q -h 127.0.0.1 -p $port -U weir weir -v ON_ERROR_STOP=1 -c "$load_sql"
run_pgbench weir $port weir weir

echo
echo "| clients | PostgreSQL 15 QPS | Weir QPS | Weir / PostgreSQL |"
echo "|---|---|---|---|"
for c in $clients; do
    ratio=$(awk -v w="${qps[weir,$c]}" -v p="${qps[postgres,$c]}" 'BEGIN { printf "%.2f", w / p }')
    printf "| %s | %.0f | %.0f | %s |\n" "$c" "${qps[postgres,$c]}" "${qps[weir,$c]}" "$ratio"
done
