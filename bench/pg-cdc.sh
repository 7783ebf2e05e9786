#!/usr/bin/env bash
# CDC throughput: upstream row changes per CPU-second applied to a
# destination table, Weir's `postgres-cdc` source and `postgres` sink
# against PostgreSQL's own logical replication (a subscription) applying
# the same changes, in one run, on one throwaway PostgreSQL 15 cluster.
#
# 1. A cluster at wal_level = logical with databases `up` (the upstream)
#    and `down` (the destinations), and Weir with its embedded defaults.
# 2. Weir: a postgres-cdc source over up.items_weir and a postgres sink
#    from it, upserting by id into down.items_weir. Then the workload on
#    up.items_weir: ROWS inserts (in 10 transactions), an update of every
#    other row, a delete of every fourth: ROWS * 1.75 row changes. Timed
#    from the first write until down.items_weir equals up.items_weir.
# 3. The peer: a publication of up.items_peer and a subscription in
#    `down` (copy_data = false), then the same workload on up.items_peer,
#    timed until down.items_peer equals it.
# CPU seconds are counted twice: Weir's process alone (against the
# subscription's apply worker alone), and the whole system, Weir plus
# every PostgreSQL process (the walsender decoding the WAL, the backends
# writing the destination), against every PostgreSQL process for the peer.
#
# With VIA=destination, Weir's path is the managed one instead: the
# source, a projection of it, and a destination of the projection
# (CREATE DESTINATION ... KEY (id)), which creates down.items_weir.
#
# With VIA=shared, three tables (items_weir_1..3, ROWS / 3 rows of the
# workload each, one table after the other) go through one slot: a
# shared postgres-cdc source, a table source per table and a postgres
# sink per table. The peer then has one publication of its three tables
# and one subscription.
#
#   cargo build --release --bin weir
#   bench/pg-cdc.sh
#   ROWS=1000000 bench/pg-cdc.sh
#   VIA=destination bench/pg-cdc.sh
#   VIA=shared bench/pg-cdc.sh
set -euo pipefail

rows=${ROWS:-500000}
via=${VIA:-sink}
port=${PORT:-6840}
. "$(dirname "$0")/throwaway.sh"

start_postgres weir wal_level=logical max_wal_senders=10 max_replication_slots=10 \
    synchronous_commit=off timezone=UTC
p() { psql -q -X -A -t -h 127.0.0.1 -p $pg_port -U weir -v ON_ERROR_STOP=1 "$@"; }
p postgres -c "CREATE DATABASE up" -c "CREATE DATABASE down"
if [ "$via" = shared ]; then
    weir_tables="items_weir_1 items_weir_2 items_weir_3"
    peer_tables="items_peer_1 items_peer_2 items_peer_3"
else
    weir_tables=items_weir
    peer_tables=items_peer
fi
set -- $weir_tables
per_table=$((rows / $#))
for t in $weir_tables $peer_tables; do
    p up -c "CREATE TABLE $t (id bigint PRIMARY KEY, grp bigint NOT NULL, amount numeric(12,2) NOT NULL, note text)" \
         -c "ALTER TABLE $t REPLICA IDENTITY FULL"
    [ "$via/$t" = destination/items_weir ] ||
        p down -c "CREATE TABLE $t (id bigint PRIMARY KEY, grp bigint NOT NULL, amount numeric(12,2) NOT NULL, note text)"
done

start_weir
w() { psql -q -X -A -t -h 127.0.0.1 -p $port -U weir weir -v ON_ERROR_STOP=1 "$@"; }

# Every PostgreSQL process's user + system ticks.
pg_ticks() {
    local total=0 pid
    for pid in $(pgrep -u postgres postgres); do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo $total
}
ticks_of() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
seconds() { awk -v t="$1" -v hz="$hz" 'BEGIN { print t / hz }'; }

# workload TABLE: the inserts, updates and deletes, upstream (per_table rows).
workload() {
    local chunk=$((per_table / 10)) i
    for i in $(seq 0 9); do
        p up -c "INSERT INTO $1 SELECT g, g % 1000, (g % 997) + 0.5, 'note ' || g
                   FROM generate_series($((i * chunk)), $(((i + 1) * chunk - 1))) g"
    done
    p up -c "UPDATE $1 SET amount = amount + 1 WHERE id % 2 = 0"
    p up -c "DELETE FROM $1 WHERE id % 4 = 0"
}

# wait_equal TABLE: until down.TABLE holds what up.TABLE holds.
wait_equal() {
    local want got
    want=$(p up -c "SELECT count(*), sum(amount), sum(id) FROM $1")
    while :; do
        got=$(p down -c "SELECT count(*), sum(amount), sum(id) FROM $1" 2>/dev/null || true)
        [ "$got" = "$want" ] && return
        if w -c "SELECT name || ': ' || error FROM weir_catalog.sources WHERE status IN ('failed', 'gap')
                 UNION ALL SELECT name || ': ' || error FROM weir_catalog.sinks WHERE status = 'failed'
                 UNION ALL SELECT name || ': ' || error FROM weir_catalog.destinations WHERE status = 'failed'" | grep .; then
            exit 1
        fi
        sleep 0.05
    done
}

dsn_up="host=127.0.0.1 port=$pg_port user=weir dbname=up"
dsn_down="host=127.0.0.1 port=$pg_port user=weir dbname=down"
if [ "$via" = shared ]; then
    w -c "CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc', dsn = '$dsn_up', slot = 'weir_items')"
    for t in $weir_tables; do
        w -c "CREATE SOURCE ${t}_cdc FROM items_cdc TABLE 'public.$t';
              CREATE SINK ${t}_out FROM ${t}_cdc WITH (connector = 'postgres', dsn = '$dsn_down', table = '$t', key = 'id')"
    done
    weir_path="weir shared cdc (3 tables) -> sinks"
elif [ "$via" = destination ]; then
    w -c "CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc', dsn = '$dsn_up', table = 'items_weir', slot = 'weir_items')"
    w -c "CREATE PROJECTION items_p AS SELECT * FROM items_cdc;
          CREATE DESTINATION items_dest FROM items_p INTO postgres (dsn = '$dsn_down', table = 'items_weir') KEY (id)"
    weir_path="weir cdc -> projection -> destination"
else
    w -c "CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc', dsn = '$dsn_up', table = 'items_weir', slot = 'weir_items')"
    w -c "CREATE SINK items_out FROM items_cdc WITH (connector = 'postgres', dsn = '$dsn_down', table = 'items_weir', key = 'id')"
    weir_path="weir postgres-cdc -> postgres sink"
fi
# The slot exists and the (empty) snapshot is read once the source runs.
until [ "$(w -c "SELECT status FROM weir_catalog.sources WHERE name = 'items_cdc'")" = running ] &&
      [ "$(p up -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_items'")" = 1 ]; do
    sleep 0.1
done
sleep 1
start=$(now); weir_before=$(weir_ticks); pg_before=$(pg_ticks)
for t in $weir_tables; do workload $t; done
for t in $weir_tables; do wait_equal $t; done
weir_wall=$(wall_since "$start")
weir_cpu=$(cpu_since "$weir_before")
weir_pg_cpu=$(seconds $(($(pg_ticks) - pg_before)))

p up -c "CREATE PUBLICATION peer FOR TABLE $(echo $peer_tables | sed 's/ /, /g')"
# Publisher and subscriber share the cluster: CREATE SUBSCRIPTION would wait
# for its own transaction while creating the slot, so the slot comes first.
p up -c "SELECT pg_create_logical_replication_slot('peer', 'pgoutput')" >/dev/null
p down -c "CREATE SUBSCRIPTION peer CONNECTION '$dsn_up' PUBLICATION peer
           WITH (copy_data = false, create_slot = false, slot_name = 'peer')"
until apply_pid=$(p down -c "SELECT pid FROM pg_stat_subscription WHERE subname = 'peer' AND pid IS NOT NULL") &&
      [ -n "$apply_pid" ]; do
    sleep 0.1
done
sleep 1
start=$(now); apply_before=$(ticks_of "$apply_pid"); pg_before=$(pg_ticks)
for t in $peer_tables; do workload $t; done
for t in $peer_tables; do wait_equal $t; done
peer_wall=$(wall_since "$start")
apply_cpu=$(seconds $(($(ticks_of "$apply_pid") - apply_before)))
peer_cpu=$(seconds $(($(pg_ticks) - pg_before)))
p down -c "ALTER SUBSCRIPTION peer DISABLE" -c "ALTER SUBSCRIPTION peer SET (slot_name = NONE)" -c "DROP SUBSCRIPTION peer"

# Per table: the rows inserted (ten whole chunks), every other one updated
# (even ids), every fourth deleted.
inserted=$((per_table / 10 * 10))
changes=$(($# * (inserted + (inserted + 1) / 2 + (inserted + 3) / 4)))
awk -v n="$changes" -v path="$weir_path" -v ww="$weir_wall" -v wc="$weir_cpu" -v wp="$weir_pg_cpu" \
    -v pw="$peer_wall" -v ac="$apply_cpu" -v pc="$peer_cpu" 'BEGIN {
    printf "workload: %d upstream row changes (inserts, updates, deletes)\n", n
    printf "%-34s %9s %12s %16s %18s\n", "", "wall s", "process CPU s", "changes/proc CPU-s", "changes/system CPU-s"
    printf "%-34s %9.2f %12.2f %16.0f %18.0f\n", path, ww, wc, n / wc, n / (wc + wp)
    printf "%-34s %9.2f %12.2f %16.0f %18.0f\n", "postgres subscription (apply)", pw, ac, n / ac, n / pc
    printf "ratio weir/peer: per process CPU %.2f, per system CPU %.2f, wall %.2f\n",
        (n / wc) / (n / ac), (n / (wc + wp)) / (n / pc), pw / ww
}'
