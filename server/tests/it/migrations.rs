//! A realistic SQL migration (`tests/migrations/blog`) applied to Weir and
//! to a throwaway PostgreSQL: the two schemas (`information_schema`,
//! `pg_indexes`, comments) and the data must come out equal, after the up
//! migration and again after the down one. The files are plain SQL, as
//! migration tools run them.

use std::path::Path;

use crate::harness::WeirServer;
use crate::postgres::PgCluster;

fn read(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/migrations")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every dump query's rows on `client`, keyed by the query.
async fn dump(client: &tokio_postgres::Client) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for query in read("schema_dump.sql")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("--"))
    {
        // After the down migration the view and tables are gone on both:
        // the same error is the same answer.
        let rows = match crate::harness::try_rows(client, query).await {
            Ok(rows) => rows,
            Err(e) => vec![format!(
                "error {}",
                e.as_db_error()
                    .map(|d| d.code().code().to_string())
                    .unwrap_or_else(|| e.to_string())
            )],
        };
        out.push((query.to_string(), rows));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_gives_the_same_schema_and_data_as_on_postgresql() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    let weir = WeirServer::start();
    let client = weir.connect().await;
    for (step, file) in [("up", "blog/001_up.sql"), ("down", "blog/001_down.sql")] {
        let sql = read(file);
        upstream
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL, {file}: {e}"));
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("Weir, {file}: {e}"));
        let expected = dump(&upstream).await;
        let got = dump(&client).await;
        for ((query, want), (_, have)) in expected.iter().zip(&got) {
            assert_eq!(have, want, "after {step}: {query}");
        }
    }
}
