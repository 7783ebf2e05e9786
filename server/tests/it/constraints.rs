//! Constraints under concurrent writers and across `kill -9`: two sessions
//! that insert the same unique value (or a child under a parent another
//! deletes) cannot both commit, and unique indexes, checks and foreign
//! keys hold after a crash, whether the table log or a table snapshot
//! (a tiny compaction threshold makes them frequent) brings the rows back.

use tokio_postgres::Client;

use crate::crash::connect_when_ready;
use crate::harness::{Options, WeirServer};

async fn rows(client: &Client, sql: &str) -> Vec<String> {
    crate::harness::try_rows(client, sql).await.unwrap()
}

async fn code_of(client: &Client, sql: &str) -> Option<String> {
    match client.batch_execute(sql).await {
        Ok(()) => None,
        Err(e) => Some(
            e.as_db_error()
                .map(|d| d.code().code().to_string())
                .unwrap_or_else(|| format!("{e}")),
        ),
    }
}

/// Two transactions insert the same unique email, each valid on its own
/// snapshot: exactly one commits, the other gets 23505 at COMMIT. Then
/// the same for a foreign key: a child inserted under a parent another
/// transaction deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_cannot_both_break_a_constraint() {
    let server = WeirServer::start();
    let a = server.connect().await;
    let b = server.connect().await;
    a.batch_execute(
        "CREATE TABLE users (id INT PRIMARY KEY, email TEXT UNIQUE);
         CREATE TABLE orders (id INT PRIMARY KEY, user_id INT REFERENCES users (id));
         INSERT INTO users VALUES (1, 'one@x');",
    )
    .await
    .unwrap();
    for round in 0..5 {
        let email = format!("same{round}@x");
        a.batch_execute(&format!(
            "BEGIN; INSERT INTO users VALUES ({}, '{email}')",
            100 + round
        ))
        .await
        .unwrap();
        b.batch_execute(&format!(
            "BEGIN; INSERT INTO users VALUES ({}, '{email}')",
            200 + round
        ))
        .await
        .unwrap();
        let first = code_of(&a, "COMMIT").await;
        let second = code_of(&b, "COMMIT").await;
        assert_eq!(first, None, "round {round}: the first commit wins");
        assert_eq!(
            second.as_deref(),
            Some("23505"),
            "round {round}: the second breaks the unique constraint at commit"
        );
        assert_eq!(
            rows(&a, &format!("SELECT id FROM users WHERE email = '{email}'")).await,
            vec![format!("{}", 100 + round)]
        );
    }
    // A child under a parent the other transaction deletes.
    a.batch_execute("INSERT INTO users VALUES (2, 'two@x')")
        .await
        .unwrap();
    a.batch_execute("BEGIN; INSERT INTO orders VALUES (1, 2)")
        .await
        .unwrap();
    b.batch_execute("BEGIN; DELETE FROM users WHERE id = 2")
        .await
        .unwrap();
    assert_eq!(code_of(&b, "COMMIT").await, None);
    assert_eq!(code_of(&a, "COMMIT").await.as_deref(), Some("23503"));
    assert!(rows(&a, "SELECT * FROM orders").await.is_empty());
    // And the other way round: the child commits first, the delete fails.
    a.batch_execute("INSERT INTO users VALUES (3, 'three@x')")
        .await
        .unwrap();
    a.batch_execute("BEGIN; INSERT INTO orders VALUES (2, 3)")
        .await
        .unwrap();
    b.batch_execute("BEGIN; DELETE FROM users WHERE id = 3")
        .await
        .unwrap();
    assert_eq!(code_of(&a, "COMMIT").await, None);
    assert_eq!(code_of(&b, "COMMIT").await.as_deref(), Some("23503"));
    assert_eq!(rows(&a, "SELECT * FROM orders").await, vec!["2|3"]);
}

/// Many sessions race to insert the same keys of a unique column: each
/// key ends up in exactly one row, however the commits interleave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_inserts_keep_a_unique_column_unique() {
    let server = WeirServer::start();
    let setup = server.connect().await;
    setup
        .batch_execute("CREATE TABLE tickets (id SERIAL PRIMARY KEY, seat INT UNIQUE)")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = server.connect().await;
        tasks.push(tokio::spawn(async move {
            let mut won = 0;
            for seat in 0..25 {
                let sql = format!("INSERT INTO tickets (seat) VALUES ({seat})");
                match client.batch_execute(&sql).await {
                    Ok(()) => won += 1,
                    Err(e) => assert_eq!(
                        e.as_db_error().map(|d| d.code().code()),
                        Some("23505"),
                        "{e}"
                    ),
                }
            }
            won
        }));
    }
    let mut won = 0;
    for t in tasks {
        won += t.await.unwrap();
    }
    assert_eq!(won, 25, "each seat is won exactly once");
    assert_eq!(
        rows(&setup, "SELECT count(*), count(DISTINCT seat) FROM tickets").await,
        vec!["25|25"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_hold_after_kill_9() {
    let mut server =
        WeirServer::start_with(Options::default().arg("--log-compaction-bytes").arg("2048"));
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE parent (id INT PRIMARY KEY, code TEXT UNIQUE, qty INT CHECK (qty >= 0));
             CREATE TABLE child (id INT PRIMARY KEY, pid INT REFERENCES parent (id) ON DELETE CASCADE, tag TEXT);
             INSERT INTO parent SELECT i, 'c' || i, i AS qty FROM generate_series(1, 100) AS s(i);
             INSERT INTO child SELECT i, i % 100 + 1, 't' FROM generate_series(1, 300) AS s(i);
             -- duplicates before the index exists, gone before it is made:
             -- a restart must replay them without tripping the index
             CREATE TABLE later (id INT PRIMARY KEY, v INT);
             INSERT INTO later VALUES (1, 7), (2, 7);
             DELETE FROM later WHERE id = 2;
             CREATE UNIQUE INDEX later_v ON later (v);
             CREATE INDEX child_tag ON child (tag);",
        )
        .await
        .unwrap();
    for round in 0..3 {
        let client = connect_when_ready(&server).await;
        assert_eq!(
            code_of(&client, "INSERT INTO parent VALUES (1000, 'c99', 1)")
                .await
                .as_deref(),
            Some("23505"),
            "round {round}: the unique column"
        );
        assert_eq!(
            code_of(&client, "INSERT INTO parent VALUES (1000, 'new', -1)")
                .await
                .as_deref(),
            Some("23514"),
            "round {round}: the check"
        );
        assert_eq!(
            code_of(&client, "INSERT INTO child VALUES (1000, 999, 'x')")
                .await
                .as_deref(),
            Some("23503"),
            "round {round}: the foreign key, child side"
        );
        assert_eq!(
            code_of(&client, "INSERT INTO later VALUES (3, 7)")
                .await
                .as_deref(),
            Some("23505"),
            "round {round}: the index made after the duplicates went"
        );
        // Each round deletes a parent: its three children go with it.
        let gone = round + 1;
        let count = |rows: Vec<String>| rows[0].parse::<i64>().unwrap();
        let before = count(rows(&client, "SELECT count(*) FROM child").await);
        client
            .batch_execute(&format!("DELETE FROM parent WHERE id = {gone}"))
            .await
            .unwrap();
        let after = count(rows(&client, "SELECT count(*) FROM child").await);
        assert_eq!(before - after, 3, "round {round}: ON DELETE CASCADE");
        assert_eq!(
            code_of(&client, "DELETE FROM parent WHERE id = 50").await,
            None,
            "round {round}"
        );
        client
            .batch_execute("INSERT INTO parent VALUES (50, 'c50', 50); INSERT INTO child VALUES (2000, 50, 'back') ON CONFLICT DO NOTHING")
            .await
            .unwrap();
        assert_eq!(
            rows(&client, "SELECT id FROM child WHERE tag = 'back'").await,
            vec!["2000"],
            "round {round}: an index lookup"
        );
        server.kill();
        server.restart();
    }
    let client = connect_when_ready(&server).await;
    assert_eq!(
        rows(&client, "SELECT count(*) FROM parent").await,
        vec!["97"]
    );
    assert_eq!(
        rows(
            &client,
            "SELECT indexname FROM pg_indexes WHERE tablename IN ('child', 'later') ORDER BY 1"
        )
        .await,
        vec!["child_pkey", "child_tag", "later_pkey", "later_v"]
    );
}
