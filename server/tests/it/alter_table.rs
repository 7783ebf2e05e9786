//! `ALTER TABLE` across `kill -9`: rows written before and after each
//! alteration read back right after a crash, whether the table log holds
//! the alteration itself or a table snapshot taken after it (a tiny
//! compaction threshold makes snapshots frequent), and a projection and a
//! view over an altered table keep their answers; so does a table whose
//! primary key was added or dropped.

use tokio_postgres::Client;

use crate::crash::connect_when_ready;
use crate::harness::{Options, WeirServer};

/// A query's rows, sorted.
async fn rows(client: &Client, sql: &str) -> Vec<String> {
    crate::harness::try_rows(client, sql).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altered_tables_read_back_right_after_kill_9() {
    let mut server =
        WeirServer::start_with(Options::default().arg("--log-compaction-bytes").arg("2048"));
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE acct (id BIGINT PRIMARY KEY, owner TEXT, amount INT);
             CREATE TABLE loose (x INT);
             INSERT INTO acct SELECT i, 'o' || i, i AS amount FROM generate_series(1, 200) AS s(i);
             INSERT INTO loose VALUES (1), (1), (2);
             CREATE PROJECTION acct_total AS SELECT count(*) AS n, sum(amount) AS total FROM acct;",
        )
        .await
        .unwrap();
    // Round 1: a column added under a running projection, rows on both sides.
    client
        .batch_execute(
            "ALTER TABLE acct ADD COLUMN region TEXT DEFAULT 'eu';
             INSERT INTO acct VALUES (201, 'late', 1000, 'us');
             UPDATE acct SET amount = amount + 1 WHERE id <= 10;
             ALTER TABLE loose ADD COLUMN y TEXT DEFAULT 'y';
             INSERT INTO loose VALUES (3, 'z');
             CREATE VIEW acct_us AS SELECT id, owner FROM acct WHERE region = 'us';",
        )
        .await
        .unwrap();
    let expect_total = vec![format!("201|{}", (1..=200).sum::<i64>() + 10 + 1000)];
    let expect_regions = vec!["eu|200".to_string(), "us|1".to_string()];
    let expect_loose = vec!["1|y".to_string(), "1|y".into(), "2|y".into(), "3|z".into()];
    for round in 0..2 {
        let client = connect_when_ready(&server).await;
        // Another session's writes: wait until projections have them.
        client.batch_execute("FLUSH").await.unwrap();
        assert_eq!(
            rows(&client, "SELECT n, total FROM acct_total").await,
            expect_total,
            "round {round}: the projection over the altered table"
        );
        assert_eq!(
            rows(
                &client,
                "SELECT region, count(*) FROM acct GROUP BY region ORDER BY region"
            )
            .await,
            expect_regions,
            "round {round}: the added column, before and after"
        );
        assert_eq!(
            rows(&client, "SELECT x, y FROM loose ORDER BY x, y").await,
            expect_loose,
            "round {round}: a table without a key keeps its rows"
        );
        assert_eq!(
            rows(&client, "SELECT id, owner FROM acct_us").await,
            vec!["201|late"],
            "round {round}: a view over the added column"
        );
        server.kill();
        server.restart();
    }
    // Columns the projection does not name renamed and dropped under it: it
    // keeps running, and answers the same after a crash.
    let client = connect_when_ready(&server).await;
    client
        .batch_execute(
            "DROP VIEW acct_us;
             ALTER TABLE acct RENAME COLUMN owner TO holder;
             ALTER TABLE acct DROP COLUMN region;
             UPDATE acct SET holder = 'h' WHERE id = 1;",
        )
        .await
        .unwrap();
    for round in 0..2 {
        let client = connect_when_ready(&server).await;
        client.batch_execute("FLUSH").await.unwrap();
        assert_eq!(
            rows(&client, "SELECT n, total FROM acct_total").await,
            expect_total,
            "round {round}: the projection across columns it does not name"
        );
        server.kill();
        server.restart();
    }
    // Round 2: retype (no readers but the dropped projection).
    let client = connect_when_ready(&server).await;
    client
        .batch_execute(
            "DROP PROJECTION acct_total;
             ALTER TABLE acct ALTER COLUMN amount TYPE BIGINT USING amount * 2;
             INSERT INTO acct VALUES (202, 'after', 5);
             ALTER TABLE acct RENAME TO accounts;",
        )
        .await
        .unwrap();
    for round in 0..2 {
        let client = connect_when_ready(&server).await;
        assert_eq!(
            rows(
                &client,
                "SELECT count(*), sum(amount), min(holder) FROM accounts"
            )
            .await,
            vec![format!(
                "202|{}|after",
                2 * ((1..=200).sum::<i64>() + 10 + 1000) + 5
            )],
            "round {round}: renamed, retyped and dropped columns"
        );
        assert_eq!(
            rows(
                &client,
                "SELECT column_name, data_type FROM information_schema.columns \
                 WHERE table_name = 'accounts' ORDER BY ordinal_position"
            )
            .await,
            vec!["amount|bigint", "holder|text", "id|bigint"],
        );
        server.kill();
        server.restart();
    }
}

/// A primary key added to a keyless table (and dropped again) re-keys its
/// stored rows: after a crash the rows are there, keyed as the catalog
/// says (the key refuses a duplicate; without it the duplicate goes in),
/// from the table log or from a snapshot taken after the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_primary_key_survives_kill_9() {
    let mut server =
        WeirServer::start_with(Options::default().arg("--log-compaction-bytes").arg("2048"));
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE rekeyed (id BIGINT, v TEXT);
             INSERT INTO rekeyed SELECT i, 'v' || i FROM generate_series(1, 300) AS s(i);
             ALTER TABLE rekeyed ADD PRIMARY KEY (id);
             INSERT INTO rekeyed VALUES (301, 'after');",
        )
        .await
        .unwrap();
    for round in 0..2 {
        let client = connect_when_ready(&server).await;
        assert_eq!(
            rows(&client, "SELECT count(*), max(id) FROM rekeyed").await,
            vec!["301|301"],
            "round {round}: rows after ADD PRIMARY KEY"
        );
        let duplicate = client
            .batch_execute("INSERT INTO rekeyed VALUES (7, 'again')")
            .await
            .unwrap_err();
        assert_eq!(
            duplicate.as_db_error().map(|e| e.code().code()),
            Some("23505"),
            "round {round}: the added key holds"
        );
        // An upsert finds the row by the new key.
        client
            .batch_execute(&format!(
                "INSERT INTO rekeyed VALUES (7, 'round {round}') ON CONFLICT (id) DO UPDATE SET v = excluded.v"
            ))
            .await
            .unwrap();
        server.kill();
        server.restart();
    }
    let client = connect_when_ready(&server).await;
    client
        .batch_execute(
            "ALTER TABLE rekeyed DROP CONSTRAINT rekeyed_pkey;
             INSERT INTO rekeyed VALUES (7, 'twin');",
        )
        .await
        .unwrap();
    for round in 0..2 {
        let client = connect_when_ready(&server).await;
        assert_eq!(
            rows(&client, "SELECT v FROM rekeyed WHERE id = 7 ORDER BY v").await,
            vec!["round 1", "twin"],
            "round {round}: rows after DROP of the key"
        );
        assert_eq!(
            rows(&client, "SELECT count(*) FROM rekeyed").await,
            vec!["302"],
        );
        server.kill();
        server.restart();
    }
}

/// An ALTER TABLE holds the whole table as its transaction saw it: a
/// write another session commits to that table meanwhile must not be lost
/// under it, so the ALTER's commit fails with 40001 and the write stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alter_does_not_swallow_a_concurrent_write() {
    let server = WeirServer::start();
    let a = server.connect().await;
    let b = server.connect().await;
    a.batch_execute(
        "CREATE TABLE race (id INT PRIMARY KEY, v TEXT); INSERT INTO race VALUES (1, 'a');",
    )
    .await
    .unwrap();
    a.batch_execute("BEGIN; ALTER TABLE race ADD COLUMN w INT DEFAULT 0;")
        .await
        .unwrap();
    b.execute("INSERT INTO race VALUES (2, 'b')", &[])
        .await
        .unwrap();
    let err = a.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(
        err.as_db_error().map(|e| e.code().code()),
        Some("40001"),
        "{err}"
    );
    assert_eq!(
        rows(&a, "SELECT * FROM race ORDER BY id").await,
        vec!["1|a", "2|b"],
        "the concurrent insert is kept and the ALTER did not happen"
    );
    // Run again, it applies over both rows.
    a.batch_execute("ALTER TABLE race ADD COLUMN w INT DEFAULT 0")
        .await
        .unwrap();
    assert_eq!(
        rows(&a, "SELECT * FROM race ORDER BY id").await,
        vec!["1|a|0", "2|b|0"]
    );
}
