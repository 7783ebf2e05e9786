//! Runs every `.slt` file of `sqllogictest/tests/` against one `weir` server.
//! Each file creates and drops its own objects, so they share the server.

use crate::harness::{WeirServer, workspace_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slt_file_passes_against_a_live_server() {
    let files = weir_sqllogictest::bundled_files();
    let dir = workspace_root().join("sqllogictest/tests");
    assert!(
        files.len() >= 8,
        "expected at least 8 .slt files in {}, found {files:?}",
        dir.display()
    );
    let server = WeirServer::start();
    if let Err(summary) = weir_sqllogictest::run_files("127.0.0.1", server.pg_port, &files).await {
        panic!(
            "sqllogictest failures (re-run one file with `cargo run -p weir-sqllogictest --bin weir-slt -- --port P FILE` against `weir serve`):\n{summary}"
        );
    }
}
