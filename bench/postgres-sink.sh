#!/usr/bin/env bash
# The postgres sink's throughput against PostgreSQL's own COPY of the same
# rows, in one run: a throwaway PostgreSQL 15 (default settings, fsync on),
# Weir with its embedded defaults, a nexmark bid source of EVENTS events
# and `CREATE SINK ... FROM bid WITH (connector = 'postgres')` into a table
# of that database. Times from CREATE SINK until every bid is committed
# (staged at each barrier, moved into the target after each seal), with the
# CPU seconds of the Weir process and of the PostgreSQL server over that
# time. The peer: the same rows copied out to a file and loaded into an
# empty table of the same shape with COPY, PostgreSQL alone.
#
#   cargo build --release --bin weir
#   bench/postgres-sink.sh
#   EVENTS=200000 bench/postgres-sink.sh
set -euo pipefail

events=${EVENTS:-1000000}
port=${PORT:-6788}
. "$(dirname "$0")/throwaway.sh"

# Clock ticks of user + system time of a process and its exited children.
cpu_ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat"; }
# ... of this PostgreSQL cluster: its postmaster (whose children's time,
# once they exit, is added to its own) and its live children.
pg_ticks() {
    local postmaster total pid
    postmaster=$(head -1 "$work/pg/postmaster.pid")
    total=$(cpu_ticks "$postmaster")
    for pid in $(pgrep -P "$postmaster"); do
        total=$((total + $(cpu_ticks "$pid" 2>/dev/null || echo 0)))
    done
    echo $total
}

start_postgres weir
pg() { psql -q -X -h 127.0.0.1 -p $pg_port -U weir postgres -v ON_ERROR_STOP=1 "$@"; }
columns="auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT, date_time TIMESTAMP, extra TEXT"
pg -c "CREATE TABLE bids ($columns); CREATE TABLE bids_copy ($columns)"

start_weir
w() { psql -q -X -A -t -h 127.0.0.1 -p $port -U weir weir -v ON_ERROR_STOP=1 "$@"; }
w -c "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '$events')"
bids=$((events * 46 / 50))

weir_before=$(cpu_ticks $weir_pid)
pg_before=$(pg_ticks)
start=$(now)
w -c "CREATE SINK all_bids FROM bid WITH (connector = 'postgres',
        dsn = 'host=127.0.0.1 port=$pg_port user=weir dbname=postgres', table = 'bids')"
while :; do
    state=$(w -c "SELECT status || ' ' || committed_rows FROM weir_catalog.sinks WHERE name = 'all_bids'")
    case $state in
        "running $bids") break ;;
        failed*) echo "the sink failed:"; w -c "SELECT error FROM weir_catalog.sinks"; exit 1 ;;
    esac
    sleep 0.05
done
end=$(now)
weir_cpu=$(awk -v a="$weir_before" -v b="$(cpu_ticks $weir_pid)" -v hz="$hz" 'BEGIN { print (b - a) / hz }')
pg_cpu=$(awk -v a="$pg_before" -v b="$(pg_ticks)" -v hz="$hz" 'BEGIN { print (b - a) / hz }')
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')
delivered=$(pg -A -t -c "SELECT count(*) FROM bids")
[ "$delivered" = "$bids" ] || { echo "bids holds $delivered rows, expected $bids"; exit 1; }

pg -c "COPY bids TO '$work/bids.copy'"
pg_before=$(pg_ticks)
start=$(now)
pg -c "COPY bids_copy FROM '$work/bids.copy'"
end=$(now)
copy_cpu=$(awk -v a="$pg_before" -v b="$(pg_ticks)" -v hz="$hz" 'BEGIN { print (b - a) / hz }')
copy_wall=$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')

echo
echo "$bids bids (of $events nexmark events)"
echo "| path | wall s | rows/s | Weir CPU s | PostgreSQL CPU s | rows per CPU-second (both) |"
echo "|---|---:|---:|---:|---:|---:|"
awk -v n="$bids" -v w="$wall" -v wc="$weir_cpu" -v pc="$pg_cpu" \
    'BEGIN { printf "| Weir postgres sink | %.2f | %.0f | %.2f | %.2f | %.0f |\n", w, n / w, wc, pc, n / (wc + pc) }'
awk -v n="$bids" -v w="$copy_wall" -v pc="$copy_cpu" \
    'BEGIN { printf "| PostgreSQL COPY FROM file | %.2f | %.0f | - | %.2f | %.0f |\n", w, n / w, pc, n / pc }'
awk -v w="$wall" -v c="$copy_wall" 'BEGIN { printf "\nsink rows/s over COPY rows/s: %.2f\n", c / w }'
