#!/usr/bin/env bash
# File ingest: the `files` source's rows per CPU-second for CSV and Parquet,
# against DuckDB loading the same files, in one run; and, on the way, the
# `files` sink writing them.
#
# 1. Weir with its embedded defaults writes the bids of EVENTS nexmark
#    events twice through `files` sinks, from two nexmark sources: CSV and Parquet (timed from CREATE
#    SINK until every bid is committed; the nexmark generator runs in the
#    same process and is included).
# 2. For each format, a `files` source over that directory (`watch =
#    'false'`) into a `blackhole` sink, timed from CREATE SINK until the
#    source has completed and the sink committed every bid, with the CPU
#    seconds of the Weir process.
# 3. The peer: DuckDB (Python package, in $HOME/.cache/weir-bench-venv,
#    installed if missing) running `CREATE TABLE t AS SELECT * FROM
#    read_csv(...)` / `read_parquet(...)` over the same files, with the
#    CPU seconds of its process. Both parse every column; DuckDB keeps the
#    rows in memory, Weir hands them to a sink that drops them.
# 4. The CSV files joined into one file (one header), read the same way:
#    a file many times larger than a batch. For every Weir read, the
#    growth of the process's peak resident memory during it (VmHWM, reset
#    through /proc/PID/clear_refs before it starts).
#
#   cargo build --release --bin weir
#   bench/files-source.sh
#   EVENTS=2000000 bench/files-source.sh
set -euo pipefail

events=${EVENTS:-1000000}
port=${PORT:-6798}
venv=${BENCH_VENV:-$HOME/.cache/weir-bench-venv}
. "$(dirname "$0")/throwaway.sh"

if ! "$venv/bin/python" -c "import duckdb" >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet duckdb
fi


start_weir
w() { psql -q -X -A -t -h 127.0.0.1 -p $port -U weir weir -v ON_ERROR_STOP=1 "$@"; }
bids=$((events * 46 / 50))
columns="auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT, date_time TIMESTAMP, extra TEXT"


declare -A sink_wall sink_cpu read_wall read_cpu read_peak duck_wall duck_cpu
# Resident memory now, and the peak since the last reset, in MB.
rss_mb() { awk -v k="$1:" '$1 == k { printf "%.0f", $2 / 1024 }' "/proc/$weir_pid/status"; }
for format in csv parquet; do
    # A source per format: one created later would replay the first one's
    # bids into the second sink as one backfill write.
    w -c "CREATE SOURCE bid_$format WITH (connector = 'nexmark', event = 'bid', max_events = '$events')"
    before=$(weir_ticks)
    start=$(now)
    w -c "CREATE SINK to_$format FROM bid_$format WITH (connector = 'files', path = '$work/$format', format = '$format')"
    wait_committed "to_$format"
    sink_wall[$format]=$(wall_since "$start")
    sink_cpu[$format]=$(cpu_since "$before")
done

# One CSV file of every bid: the header once, then each file's rows.
mkdir -p "$work/one"
first=1
for f in "$work"/csv/*.csv; do
    if [ $first = 1 ]; then cat "$f"; first=0; else tail -n +2 "$f"; fi
done >"$work/one/bids.csv"

for format in csv parquet one; do
    case $format in
        one) dir=one; as=csv ;;
        *) dir=$format; as=$format ;;
    esac
    w -c "CREATE SOURCE from_$format ($columns)
            WITH (connector = 'files', path = '$work/$dir', format = '$as', watch = 'false')"
    echo 5 >"/proc/$weir_pid/clear_refs"
    resident=$(rss_mb VmRSS)
    before=$(weir_ticks)
    start=$(now)
    w -c "CREATE SINK count_$format FROM from_$format WITH (connector = 'blackhole')"
    wait_committed "count_$format"
    read_wall[$format]=$(wall_since "$start")
    read_cpu[$format]=$(cpu_since "$before")
    read_peak[$format]=$(($(rss_mb VmHWM) - resident))
done

duck_columns="{'auction': 'BIGINT', 'bidder': 'BIGINT', 'price': 'BIGINT', 'channel': 'VARCHAR', 'url': 'VARCHAR', 'date_time': 'TIMESTAMP', 'extra': 'VARCHAR'}"
for format in csv parquet; do
    case $format in
        csv) scan="read_csv('$work/csv/*.csv', header = true, columns = $duck_columns)" ;;
        parquet) scan="read_parquet('$work/parquet/*.parquet')" ;;
    esac
    read -r duck_wall[$format] duck_cpu[$format] rows < <("$venv/bin/python" - "$scan" <<'EOF'
import resource, sys, time
import duckdb
con = duckdb.connect()
start = time.time()
con.execute(f"CREATE TABLE t AS SELECT * FROM {sys.argv[1]}")
wall = time.time() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
rows = con.execute("SELECT count(*) FROM t").fetchone()[0]
print(wall, usage.ru_utime + usage.ru_stime, rows)
EOF
)
    [ "$rows" = "$bids" ] || { echo "DuckDB read $rows rows of $format, expected $bids"; exit 1; }
done

echo
echo "$bids bids (of $events nexmark events); files: csv $(du -sh "$work/csv" | cut -f1) in $(ls "$work/csv" | wc -l), parquet $(du -sh "$work/parquet" | cut -f1) in $(ls "$work/parquet" | wc -l), one csv file $(du -sh "$work/one" | cut -f1)"
echo "| path | wall s | rows/s | CPU s | rows per CPU-second |"
echo "|---|---:|---:|---:|---:|"
row() { awk -v name="$1" -v n="$bids" -v w="$2" -v c="$3" 'BEGIN { printf "| %s | %.2f | %.0f | %.2f | %.0f |\n", name, w, n / w, c, n / c }'; }
for format in csv parquet; do
    row "Weir nexmark -> files sink, $format" "${sink_wall[$format]}" "${sink_cpu[$format]}"
done
for format in csv parquet; do
    row "Weir files source, $format -> blackhole" "${read_wall[$format]}" "${read_cpu[$format]}"
    row "DuckDB CREATE TABLE AS read_$format" "${duck_wall[$format]}" "${duck_cpu[$format]}"
done
row "Weir files source, one csv file -> blackhole" "${read_wall[one]}" "${read_cpu[one]}"
echo
for format in csv parquet one; do
    echo "Weir peak resident memory growth while reading $format: ${read_peak[$format]} MB"
done
for format in csv parquet; do
    awk -v f="$format" -v wc="${read_cpu[$format]}" -v dc="${duck_cpu[$format]}" \
        'BEGIN { printf "%s: Weir rows per CPU-second over DuckDB'"'"'s: %.2f\n", f, dc / wc }'
done
