//! Runs every `.slt` file of `sqllogictest/tests/` against one `weir` server,
//! and the same files against a throwaway PostgreSQL, which checks that the
//! expected results are PostgreSQL's (records marked `onlyif weir` are Weir's
//! own statements and run only against Weir).
//! Each file creates and drops its own objects, so they share the server.

use weir_sqllogictest::{ConnectOptions, bundled_files, run_file, summarize};

use crate::harness::{WeirServer, workspace_root};
use crate::postgres::PgCluster;

fn files() -> Vec<std::path::PathBuf> {
    let files = bundled_files();
    assert!(
        files.len() >= 8,
        "expected at least 8 .slt files in {}, found {files:?}",
        workspace_root().join("sqllogictest/tests").display()
    );
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slt_file_passes_against_a_live_server() {
    let files = files();
    let server = WeirServer::start();
    if let Err(summary) = weir_sqllogictest::run_files("127.0.0.1", server.pg_port, &files).await {
        panic!(
            "sqllogictest failures (re-run one file with `cargo run -p weir-sqllogictest --bin weir-slt -- --port P FILE` against `weir serve`):\n{summary}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slt_expectations_are_what_postgresql_returns() {
    let files = files();
    let cluster = PgCluster::start();
    let mut options = ConnectOptions::new("127.0.0.1", cluster.port);
    options.engine = "postgres".into();
    let mut reports = Vec::new();
    for file in &files {
        reports.push(run_file(&options, file).await);
    }
    assert!(
        reports.iter().all(|r| r.ok()),
        "an expected result in a .slt file differs from PostgreSQL's answer: the files must hold \
         PostgreSQL's answers (mark Weir-only statements `onlyif weir`); check with \
         `weir-slt --engine postgres --port PGPORT FILE`\n{}",
        summarize(&reports)
    );
}
