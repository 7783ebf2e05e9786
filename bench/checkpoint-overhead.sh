#!/usr/bin/env bash
# Checkpoint overhead: `weir-bench projections` against a release `weir`
# whose projection state is checkpointed to memory (memory://) or to local
# disk (file://, the default), at barrier intervals of 100ms, 1s and 10s.
# Then restart-to-ready time for a projection holding about $RESTORE_MB MB
# of state (default 1024).
#
#   cargo build --release --bin weir --bin weir-bench
#   bench/checkpoint-overhead.sh            # all of it
#   ROWS=20000 SECONDS_PER_RUN=5 RESTORE_MB=100 bench/checkpoint-overhead.sh
set -euo pipefail

target=${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}/release
weir=$target/weir
bench=$target/weir-bench
rows=${ROWS:-100000}
seconds=${SECONDS_PER_RUN:-10}
restore_mb=${RESTORE_MB:-1024}
port=${PORT:-6588}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

start() { # data-dir, extra flags...
    local dir=$1
    shift
    "$weir" serve --data-dir "$dir" --pg-addr 127.0.0.1:$port \
        --flight-addr 127.0.0.1:$((port + 1)) --http-addr 127.0.0.1:$((port + 2)) "$@" \
        >>"$work/weir.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        if curl -sf "http://127.0.0.1:$((port + 2))/ready" >/dev/null 2>&1; then
            return
        fi
        sleep 0.1
    done
    echo "weir did not become ready; log:" >&2
    tail -20 "$work/weir.log" >&2
    exit 1
}

stop() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

# SKIP_OVERHEAD=1 runs only the restart-to-ready part.
[ -n "${SKIP_OVERHEAD:-}" ] || for state in memory file; do
    for interval in 100ms 1s 10s; do
        dir="$work/$state-$interval"
        if [ "$state" = memory ]; then url=memory://; else url="file://$dir/state"; fi
        start "$dir" --state-url "$url" --barrier-interval "$interval"
        echo "== state $state, barrier interval $interval"
        "$bench" projections --port $port --rows "$rows" --groups 1000 --batch 1000 \
            --seconds "$seconds" --latency-samples 100 --server-pid "$pid" |
            grep -E "rows/s|core-second|epoch latency"
        checkpoints=$(curl -s "http://127.0.0.1:$((port + 2))/metrics" |
            grep -E '^weir_checkpoints_total|^weir_checkpoint_bytes_total' | tr '\n' ' ')
        echo "   $checkpoints"
        stop
        rm -rf "$dir"
    done
done

# Restart-to-ready with about $restore_mb MB of projection state: a
# projection keeping every row of a table of 1 KB rows.
dir="$work/restore"
start "$dir" --barrier-interval 1s
n=$((restore_mb * 1024))
psql_cmd=(psql -q -h 127.0.0.1 -p $port -U weir weir -v ON_ERROR_STOP=1)
"${psql_cmd[@]}" -c "CREATE TABLE big (id BIGINT PRIMARY KEY, payload TEXT)"
"${psql_cmd[@]}" -c "CREATE PROJECTION big_copy AS SELECT id, payload FROM big"
step=50000
for ((low = 0; low < n; low += step)); do
    high=$((low + step < n ? low + step : n))
    "${psql_cmd[@]}" -c "INSERT INTO big SELECT value, repeat('x', 1000) || value FROM generate_series($low, $((high - 1))) AS t(value)"
done
"${psql_cmd[@]}" -c "FLUSH"
# The steady state a restart is measured in: the tables snapshotted and
# the projection's checkpoint chains compacted. Both happen after seals
# (a snapshot is considered at each one; compaction runs in the background
# and lands with a later seal), so small commits to another table bring
# seals until a snapshot exists and the state store's size stays within
# 1 MiB for five seconds (compaction first adds merged blobs, then a seal
# lets the blobs they replace go). The table log after the snapshot is
# replayed at the restart, as it would be after any crash.
"${psql_cmd[@]}" -c "CREATE TABLE nudge (n BIGINT)"
previous=-1
stable=0
for _ in $(seq 180); do
    "${psql_cmd[@]}" -c "INSERT INTO nudge VALUES (1)" -c "FLUSH"
    sleep 1
    grep -q "tables snapshotted" "$work/weir.log" || continue
    now=$(du -sb "$dir/state" | cut -f1)
    change=$((now - previous))
    if [ "${change#-}" -lt 1048576 ]; then stable=$((stable + 1)); else stable=0; fi
    previous=$now
    [ "$stable" -ge 5 ] && break
done
state_bytes=$(du -sb "$dir/state" | cut -f1)
log_bytes=$(du -sb "$dir/tablelog" | cut -f1)
snapshot_bytes=$(du -sb "$dir/tables" 2>/dev/null | cut -f1 || echo 0)
log_lines=$(wc -l <"$work/weir.log")
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
began=$(date +%s.%N)
start "$dir" --barrier-interval 1s
ready=$(date +%s.%N)
restored=$(grep -c "projections restored from the sealed epoch" "$work/weir.log" || true)
rows_back=$("${psql_cmd[@]}" -At -c "SELECT count(*) FROM big_copy")
echo "== restart to ready: $(echo "$ready - $began" | bc) s for $rows_back rows," \
    "state store $((state_bytes / 1048576)) MB, table log $((log_bytes / 1048576)) MB," \
    "table snapshot $((${snapshot_bytes:-0} / 1048576)) MB" \
    "(restored from a seal: $([ "$restored" -gt 0 ] && echo yes || echo no))"
tail -n +"$log_lines" "$work/weir.log" | grep -E "opened database|restored|rebuilt|ready" | sed 's/\x1b\[[0-9;]*m//g'
stop
