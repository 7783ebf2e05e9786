//! pgjdbc against `weir`: `tests/clients/JdbcTest.java` run as a single-file
//! program (`java -cp /usr/share/java/postgresql.jar JdbcTest.java PORT`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{Options, WeirServer, run_command, workspace_root};

const JDBC_JAR: &str = "/usr/share/java/postgresql.jar";

#[test]
fn jdbc_metadata_and_prepared_statements() {
    assert!(
        Path::new(JDBC_JAR).exists(),
        "{JDBC_JAR} is missing: run scripts/test-all.sh, or `apt-get install -y libpostgresql-jdbc-java`"
    );
    let java_ok = Command::new("java")
        .arg("-version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        java_ok,
        "java is not installed: run scripts/test-all.sh, or `apt-get install -y default-jdk-headless`"
    );

    let server = WeirServer::start_with(Options::default().watchdog(Duration::from_secs(360)));
    let mut command = Command::new("java");
    command
        .args(["-cp", JDBC_JAR, "tests/clients/JdbcTest.java"])
        .arg(server.pg_port.to_string())
        .current_dir(workspace_root());
    let (code, stdout, stderr) = run_command(command, Duration::from_secs(300), "JdbcTest.java");
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed, "))
        .unwrap_or("(no `N passed, M failed` line)");
    assert!(
        code == Some(0) && summary.contains(" 0 failed"),
        "JdbcTest.java should pass every check; exit code {code:?}, summary: {summary}\n\
         ---- stdout ----\n{stdout}\n---- stderr ----\n{stderr}\n{}",
        server.log_tail()
    );
}
