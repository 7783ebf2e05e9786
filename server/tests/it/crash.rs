//! Crash safety: `kill -9` while several sessions insert, restart on the same
//! data directory, and check that every acknowledged row is there and that
//! every 10-row transaction is there whole or not at all. Several rounds, so
//! recovery is also tested on data that already survived a crash.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::harness::{Options, WeirServer};

const ROUNDS: i64 = 3;
const SINGLE_WRITERS: i64 = 3;
const TXN_ROWS: i64 = 10;
/// Bound on each writer's loop (it normally stops at the kill long before).
const MAX_STATEMENTS_PER_WRITER: i64 = 20_000;
/// Acknowledgements to wait for before the kill, so it lands mid-load.
const ACKS_BEFORE_KILL: usize = 200;
const GROUPS_BEFORE_KILL: usize = 5;

#[derive(Default, Clone)]
struct Ledger {
    /// Keys sent in an INSERT (acknowledged or not).
    attempted: BTreeSet<i64>,
    /// Keys whose INSERT returned success.
    acked: BTreeSet<i64>,
    /// Transaction groups whose COMMIT returned success.
    acked_groups: BTreeSet<i64>,
    attempted_groups: BTreeSet<i64>,
    /// Errors a writer got before the kill: a valid INSERT must not fail.
    early_errors: Vec<String>,
}

/// Connects once the restarted server answers queries (it may report 57P03
/// while it replays its log).
pub(crate) async fn connect_when_ready(server: &WeirServer) -> Client {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let last = match server.try_connect(server.pg_config()).await {
            Ok(client) => match client.simple_query("SELECT 1").await {
                Ok(_) => return client,
                Err(e) => format!("{e:?}"),
            },
            Err(e) => format!("{e:?}"),
        };
        assert!(
            Instant::now() < deadline,
            "the restarted server did not answer SELECT 1 within 90 s; last error: {last}\n{}",
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn single_key(round: i64, writer: i64, n: i64) -> i64 {
    round * 1_000_000_000 + writer * 1_000_000 + n
}

async fn single_writer(
    client: Client,
    round: i64,
    writer: i64,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    for n in 0..MAX_STATEMENTS_PER_WRITER {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let key = single_key(round, writer, n);
        ledger.lock().unwrap().attempted.insert(key);
        // The simple protocol, so this test measures durability only (parameter
        // handling is tested in tokio_pg.rs).
        let sql = format!(
            "INSERT INTO crash_single (k, writer, round) VALUES ({key}, {writer}, {round})"
        );
        match client.simple_query(&sql).await {
            Ok(_) => {
                ledger.lock().unwrap().acked.insert(key);
            }
            Err(e) => {
                if !stop.load(Ordering::Relaxed) {
                    ledger
                        .lock()
                        .unwrap()
                        .early_errors
                        .push(format!("writer {writer}: {e:?}"));
                }
                return; // the server was killed, or it failed the insert
            }
        }
    }
}

async fn txn_writer(client: Client, round: i64, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    for g in 0..MAX_STATEMENTS_PER_WRITER / TXN_ROWS {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let group = round * 1_000_000 + g;
        ledger.lock().unwrap().attempted_groups.insert(group);
        // One statement per row, so the kill can fall between them.
        let mut sql = String::from("BEGIN;");
        for i in 0..TXN_ROWS {
            sql.push_str(&format!(
                "INSERT INTO crash_txn (grp, i) VALUES ({group}, {i});"
            ));
        }
        sql.push_str("COMMIT;");
        // A simple query runs the statements one by one and stops at an error.
        match client.batch_execute(&sql).await {
            Ok(()) => {
                ledger.lock().unwrap().acked_groups.insert(group);
            }
            Err(e) => {
                if !stop.load(Ordering::Relaxed) {
                    ledger
                        .lock()
                        .unwrap()
                        .early_errors
                        .push(format!("transaction writer: {e:?}"));
                }
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_rows_survive_kill_9_and_transactions_stay_whole() {
    // Several rounds of load, kill and recovery: allow more than the default watchdog.
    let mut server = WeirServer::start_with(Options::default().watchdog(Duration::from_secs(600)));
    {
        let client = server.connect().await;
        client
            .batch_execute(
                "CREATE TABLE crash_single (k int8 PRIMARY KEY, writer int4 NOT NULL, round int4 NOT NULL);
                 CREATE TABLE crash_txn (grp int8 NOT NULL, i int4 NOT NULL, PRIMARY KEY (grp, i));",
            )
            .await
            .expect("create the crash tables");
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    for round in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let (before_acks, before_groups) = {
            let l = ledger.lock().unwrap();
            (l.acked.len(), l.acked_groups.len())
        };
        let mut tasks = Vec::new();
        for writer in 0..SINGLE_WRITERS {
            let client = server.connect().await;
            tasks.push(tokio::spawn(single_writer(
                client,
                round,
                writer,
                ledger.clone(),
                stop.clone(),
            )));
        }
        let client = server.connect().await;
        tasks.push(tokio::spawn(txn_writer(
            client,
            round,
            ledger.clone(),
            stop.clone(),
        )));

        // Let the load run until enough was acknowledged, then kill mid-flight.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (acks, groups) = {
                let l = ledger.lock().unwrap();
                (
                    l.acked.len() - before_acks,
                    l.acked_groups.len() - before_groups,
                )
            };
            if acks >= ACKS_BEFORE_KILL && groups >= GROUPS_BEFORE_KILL {
                break;
            }
            let early = ledger.lock().unwrap().early_errors.clone();
            assert!(
                early.is_empty(),
                "round {round}: inserts failed before the kill (the server must accept them): {early:#?}\n{}",
                server.log_tail()
            );
            assert!(
                Instant::now() < deadline && !tasks.iter().all(|t| t.is_finished()),
                "round {round}: only {acks} single-row and {groups} transaction acknowledgements before the writers stopped or 60 s passed\n{}",
                server.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Writers that fail from here on fail because of the kill.
        stop.store(true, Ordering::Relaxed);
        server.kill();
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("a writer did not notice the killed server within 60 s")
                .expect("writer task panicked");
        }

        server.restart();
        let client = connect_when_ready(&server).await;
        let l = ledger.lock().unwrap().clone();

        let present: BTreeSet<i64> = client
            .query("SELECT k FROM crash_single", &[])
            .await
            .expect("read crash_single after restart")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let lost: Vec<&i64> = l.acked.difference(&present).collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} of {} acknowledged single-row inserts are missing after kill -9, e.g. {:?}\n{}",
            lost.len(),
            l.acked.len(),
            &lost[..lost.len().min(10)],
            server.log_tail()
        );
        let invented: Vec<&i64> = present.difference(&l.attempted).collect();
        assert!(
            invented.is_empty(),
            "round {round}: rows nobody inserted: {invented:?}"
        );

        let groups: BTreeMap<i64, i64> = client
            .query("SELECT grp, count(*) FROM crash_txn GROUP BY grp", &[])
            .await
            .expect("read crash_txn after restart")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let partial: Vec<(&i64, &i64)> = groups.iter().filter(|(_, n)| **n != TXN_ROWS).collect();
        assert!(
            partial.is_empty(),
            "round {round}: transactions of {TXN_ROWS} rows must be all or nothing; partial groups (group, rows): {partial:?}"
        );
        let lost_groups: Vec<&i64> = l
            .acked_groups
            .iter()
            .filter(|g| !groups.contains_key(g))
            .collect();
        assert!(
            lost_groups.is_empty(),
            "round {round}: committed transactions missing after kill -9: {lost_groups:?}"
        );
        let invented_groups: Vec<&i64> = groups
            .keys()
            .filter(|g| !l.attempted_groups.contains(g))
            .collect();
        assert!(
            invented_groups.is_empty(),
            "round {round}: groups nobody wrote: {invented_groups:?}"
        );

        eprintln!(
            "crash round {round}: {} acknowledged rows and {} acknowledged transactions, all present ({} rows, {} groups stored)",
            l.acked.len(),
            l.acked_groups.len(),
            present.len(),
            groups.len()
        );
    }

    // The server still takes writes after the last recovery.
    let client = connect_when_ready(&server).await;
    client
        .simple_query("INSERT INTO crash_single VALUES (-1, 0, 0)")
        .await
        .expect("insert after the last restart");
    let n: i64 = client
        .query_one("SELECT count(*) FROM crash_single WHERE k = -1", &[])
        .await
        .expect("read back the insert after the last restart")
        .get(0);
    assert_eq!(n, 1, "the row inserted after the last restart");
}
