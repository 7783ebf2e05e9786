# Sourced by the bench scripts that start their own servers: the
# binaries, ports, a work directory removed at exit, how to start a
# throwaway PostgreSQL cluster and a Weir server in it, and how to wait for
# a sink. Expects `port` (Weir's pgwire port; PostgreSQL gets port + 10) to
# be set by the caller.

target=${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}/release
weir=${WEIR:-$target/weir}
pg_port=$((port + 10))
pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
work=$(mktemp -d)
chmod 777 "$work"
# Under `set -e` a failing last command of an && list would end the trap
# before rm (a cluster the script already stopped fails to stop): || true.
cleanup() {
    # Wait for Weir to exit, or it may still be writing while rm runs.
    { [ -n "${weir_pid:-}" ] && kill "$weir_pid" && wait "$weir_pid"; } 2>/dev/null || true
    [ -d "$work/pg" ] && su postgres -c "$pg_bin/pg_ctl -D $work/pg -m immediate stop" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# start_postgres SUPERUSER [SETTING ...]: initdb and start in $work/pg,
# on 127.0.0.1:$pg_port, each SETTING passed as `-c SETTING`.
start_postgres() {
    local user=$1 options="-p $pg_port -k $work -c listen_addresses=127.0.0.1" setting
    shift
    for setting in "$@"; do options="$options -c $setting"; done
    su postgres -c "$pg_bin/initdb -N -D $work/pg -U $user -A trust" >/dev/null
    su postgres -c "$pg_bin/pg_ctl -D $work/pg -w -l $work/pg.log -o \"$options\" start" >/dev/null
}

# start_weir: Weir with its embedded defaults in $work/weir, waited for
# until ready; its pid in weir_pid.
start_weir() {
    "$weir" serve --data-dir "$work/weir" --pg-addr 127.0.0.1:$port \
        --flight-addr 127.0.0.1:$((port + 1)) --http-addr 127.0.0.1:$((port + 2)) \
        >"$work/weir.log" 2>&1 &
    weir_pid=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$((port + 2))/ready" >/dev/null 2>&1 && return
        sleep 0.1
    done
    echo "weir did not become ready:" >&2
    tail -20 "$work/weir.log" >&2
    exit 1
}

# wait_committed SINK: until SINK (of a server queried by `w`) has committed
# `$bids` rows; exits with the sink's or a failed source's error.
wait_committed() {
    local state
    while :; do
        state=$(w -c "SELECT status || ' ' || committed_rows FROM weir_catalog.sinks WHERE name = '$1'")
        case $state in
            "running $bids") return ;;
            failed*) echo "sink $1 failed:"; w -c "SELECT error FROM weir_catalog.sinks WHERE name = '$1'"; exit 1 ;;
        esac
        if w -c "SELECT error FROM weir_catalog.sources WHERE status = 'failed'" | grep -q .; then
            echo "a source failed:"; w -c "SELECT name, error FROM weir_catalog.sources"; exit 1
        fi
        sleep 0.05
    done
}

# Timing: `start=$(now); before=$(weir_ticks)`, then `wall_since $start`
# and `cpu_since $before` (seconds of user + system time of Weir).
hz=$(getconf CLK_TCK)
now() { date +%s.%N; }
weir_ticks() { awk '{ print $14 + $15 }' "/proc/$weir_pid/stat"; }
cpu_since() { awk -v a="$1" -v b="$(weir_ticks)" -v hz="$hz" 'BEGIN { print (b - a) / hz }'; }
wall_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { print b - a }'; }
