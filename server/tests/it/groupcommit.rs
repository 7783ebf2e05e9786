//! Group commit under many concurrent sessions: commits share `fsync`s and
//! validate against commits that are enqueued but not yet durable.
//!
//! Sessions insert distinct keys and race for a shared pool of keys, alone
//! and in two-statement transactions. Every acknowledged row is visible (to
//! its own session at once, read-your-writes), every contested key has
//! exactly one winner and every loser gets 23505, nothing unacknowledged
//! appears, a projection over the table equals the query ad hoc, and a
//! `kill -9` and restart keeps every acknowledged row.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio_postgres::Client;

use crate::harness::{WeirServer, sqlstate, try_rows};

const SESSIONS: i64 = 12;
const ROUNDS: i64 = 40;
/// Keys every session tries to insert: each has one winner.
const CONTESTED: i64 = 40;

const PROJECTION_QUERY: &str =
    "SELECT s, count(*) AS n, sum(k) AS total FROM gc_rows GROUP BY s ORDER BY s";

#[derive(Default)]
struct Ledger {
    /// Acknowledged keys, with the session that inserted them.
    acked: BTreeMap<i64, i64>,
    /// Per contested key, how many sessions were refused with 23505.
    refused: BTreeMap<i64, i64>,
    /// Anything but success or 23505.
    unexpected: Vec<String>,
}

fn distinct_key(session: i64, round: i64) -> i64 {
    session * 1_000_000 + round
}

fn contested_key(round: i64) -> i64 {
    1_000_000_000 + round % CONTESTED
}

async fn rows(client: &Client, sql: &str) -> Vec<String> {
    try_rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

/// One session: per round a distinct key alone, then a contested key
/// (alone on even rounds, with a second distinct key in one transaction on
/// odd rounds, so a conflict found at COMMIT drops both).
async fn session(client: Client, s: i64, ledger: Arc<Mutex<Ledger>>) {
    for round in 0..ROUNDS {
        let mine = distinct_key(s, round);
        match client
            .execute("INSERT INTO gc_rows VALUES ($1, $2)", &[&mine, &s])
            .await
        {
            Ok(1) => {
                ledger.lock().unwrap().acked.insert(mine, s);
            }
            other => ledger
                .lock()
                .unwrap()
                .unexpected
                .push(format!("distinct key {mine}: {other:?}")),
        }
        if round % 8 == 0 {
            // Read-your-writes: the acknowledged row is visible at once.
            let n: i64 = client
                .query_one("SELECT count(*) FROM gc_rows WHERE k = $1", &[&mine])
                .await
                .expect("read back")
                .get(0);
            assert_eq!(n, 1, "session {s} reads its own row {mine}");
        }

        let contested = contested_key(round + s);
        let (sql, written) = if round % 2 == 0 {
            (
                format!("INSERT INTO gc_rows VALUES ({contested}, {s})"),
                vec![contested],
            )
        } else {
            let partner = distinct_key(s, ROUNDS + round);
            (
                format!(
                    "BEGIN; INSERT INTO gc_rows VALUES ({partner}, {s}); \
                     INSERT INTO gc_rows VALUES ({contested}, {s}); COMMIT;"
                ),
                vec![partner, contested],
            )
        };
        match client.batch_execute(&sql).await {
            Ok(()) => {
                let mut ledger = ledger.lock().unwrap();
                for k in written {
                    ledger.acked.insert(k, s);
                }
            }
            Err(e) if sqlstate(&e) == "23505" => {
                *ledger.lock().unwrap().refused.entry(contested).or_default() += 1;
                // A duplicate found at the INSERT leaves the block failed.
                let _ = client.batch_execute("ROLLBACK").await;
            }
            Err(e) => ledger
                .lock()
                .unwrap()
                .unexpected
                .push(format!("contested key {contested}: {e:?}")),
        }
    }
}

/// Every acknowledged row, and nothing else, with the session that won it.
async fn check_table(client: &Client, ledger: &Ledger, when: &str) {
    let stored: BTreeMap<i64, i64> = client
        .query("SELECT k, s FROM gc_rows", &[])
        .await
        .expect("read the table")
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)))
        .collect();
    let missing: Vec<_> = ledger
        .acked
        .iter()
        .filter(|(k, s)| stored.get(k) != Some(s))
        .collect();
    assert!(
        missing.is_empty(),
        "{when}: acknowledged rows missing or with another session: {missing:?}"
    );
    let extra: Vec<_> = stored
        .keys()
        .filter(|k| !ledger.acked.contains_key(k))
        .collect();
    assert!(
        extra.is_empty(),
        "{when}: rows nobody was told about: {extra:?}"
    );
}

async fn check_projection(client: &Client, when: &str) {
    client.batch_execute("FLUSH").await.expect("FLUSH");
    assert_eq!(
        rows(client, "SELECT s, n, total FROM gc_by_session ORDER BY s").await,
        rows(client, PROJECTION_QUERY).await,
        "{when}: the projection equals its query ad hoc"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_commit_every_acknowledged_row_and_refuse_every_duplicate() {
    let mut server = WeirServer::start();
    let admin = server.connect().await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE gc_rows (k BIGINT PRIMARY KEY, s BIGINT NOT NULL);
             CREATE PROJECTION gc_by_session AS {};",
            PROJECTION_QUERY.trim_end_matches(" ORDER BY s")
        ))
        .await
        .expect("setup");

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let client = server.connect().await;
        tasks.push(tokio::spawn(session(client, s, ledger.clone())));
    }
    for task in tasks {
        task.await.expect("a session panicked");
    }
    let ledger = Arc::try_unwrap(ledger)
        .unwrap_or_else(|_| unreachable!("every session is done"))
        .into_inner()
        .unwrap();
    assert!(
        ledger.unexpected.is_empty(),
        "only 23505 may fail a write: {:?}",
        ledger.unexpected
    );
    for round in 0..CONTESTED {
        let key = contested_key(round);
        assert!(
            ledger.acked.contains_key(&key),
            "contested key {key} has a winner"
        );
    }
    let attempts_per_key = SESSIONS * ROUNDS / CONTESTED;
    for (key, refused) in &ledger.refused {
        assert_eq!(
            *refused,
            attempts_per_key - 1,
            "every attempt at {key} but the winner's is refused"
        );
    }
    assert_eq!(ledger.refused.len() as i64, CONTESTED);
    check_table(&admin, &ledger, "after the load").await;
    check_projection(&admin, "after the load").await;

    drop(admin);
    server.restart();
    let client = server.connect().await;
    check_table(&client, &ledger, "after kill -9 and restart").await;
    check_projection(&client, "after kill -9 and restart").await;
}
