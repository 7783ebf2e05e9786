//! Python drivers against `weir`: each `tests/clients/*.py` script runs with the
//! project venv (`$HOME/.cache/weir-venv`, made by `scripts/test-all.sh`) and
//! must exit 0 after printing `N passed, 0 failed`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::harness::{Options, WeirServer, run_command, workspace_root};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

/// Scripts this module runs, with how each is told where the server is.
const SCRIPTS: &[(&str, Port)] = &[
    ("psycopg_clients.py", Port::Pg),
    ("asyncpg_clients.py", Port::Pg),
    ("sqlalchemy_reflect.py", Port::Pg),
    ("flight_clients.py", Port::Flight),
];

#[derive(Clone, Copy)]
enum Port {
    /// `--port PG_PORT --flight-port FLIGHT_PORT`
    Pg,
    /// `--port FLIGHT_PORT`
    Flight,
}

fn venv_python() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let python = PathBuf::from(home).join(".cache/weir-venv/bin/python");
    assert!(
        python.exists(),
        "the Python venv is missing ({}): run scripts/test-all.sh, which creates it with \
         `python3 -m venv ~/.cache/weir-venv && ~/.cache/weir-venv/bin/pip install 'psycopg[binary]' asyncpg \
         sqlalchemy pyarrow adbc-driver-flightsql adbc-driver-manager`",
        python.display()
    );
    python
}

fn run_script(name: &str) {
    let port = SCRIPTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("{name} is not listed in SCRIPTS"));
    let script = workspace_root().join("tests/clients").join(name);
    assert!(script.exists(), "{} is missing", script.display());
    let python = venv_python();
    let server = WeirServer::start_with(
        Options::default().watchdog(SCRIPT_TIMEOUT + Duration::from_secs(60)),
    );
    let mut command = Command::new(&python);
    command.arg(&script);
    match port {
        Port::Pg => command
            .args(["--port", &server.pg_port.to_string()])
            .args(["--flight-port", &server.flight_port.to_string()]),
        Port::Flight => command.args(["--port", &server.flight_port.to_string()]),
    };
    command
        .current_dir(workspace_root())
        .env("PYTHONUNBUFFERED", "1");
    let (code, stdout, stderr) = run_command(command, SCRIPT_TIMEOUT, name);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed, ") && l.contains(" failed"))
        .unwrap_or("(no `N passed, M failed` line)");
    assert!(
        code == Some(0) && summary.contains(" 0 failed"),
        "{name} should pass every check; exit code {code:?}, summary: {summary}\n\
         ---- stdout ----\n{stdout}\n---- stderr ----\n{stderr}\n{}",
        server.log_tail()
    );
}

#[test]
fn psycopg_clients() {
    run_script("psycopg_clients.py");
}

#[test]
fn asyncpg_clients() {
    run_script("asyncpg_clients.py");
}

#[test]
fn sqlalchemy_reflect() {
    run_script("sqlalchemy_reflect.py");
}

#[test]
fn flight_clients() {
    run_script("flight_clients.py");
}

/// A new script in tests/clients/ needs a test here, or it would never run.
#[test]
fn every_client_script_has_a_test() {
    let dir = workspace_root().join("tests/clients");
    let mut unlisted = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let name = entry
            .expect("dir entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".py") && !SCRIPTS.iter().any(|(n, _)| *n == name) {
            unlisted.push(name);
        }
    }
    assert!(
        unlisted.is_empty(),
        "client scripts without a test in server/tests/it/python.rs: {unlisted:?}"
    );
}
