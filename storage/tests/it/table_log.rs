//! The table log's group commit: LSNs are handed out at enqueue in enqueue
//! order, records queued while an `fsync` runs share the next one, and a
//! failed `fsync` fails its group, everything queued behind it and every
//! later append (the log is poisoned until a restart).
//!
//! A sync hook holds the writer inside a group's `fsync` until the test
//! gives its verdict, so "queued behind" is a fact of the test, not a timing.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use weir_storage::{Lsn, StorageError, TableLog};

/// Holds every group `fsync` until the test answers it.
struct Gate {
    entered: mpsc::Receiver<()>,
    verdicts: mpsc::Sender<std::io::Result<()>>,
}

impl Gate {
    fn open(dir: &std::path::Path) -> (TableLog, Vec<(Lsn, Bytes)>, Self) {
        let (entered_tx, entered) = mpsc::channel();
        let (verdicts, verdicts_rx) = mpsc::channel::<std::io::Result<()>>();
        let verdicts_rx = Mutex::new(verdicts_rx);
        let entered_tx = Mutex::new(entered_tx);
        let hook = Arc::new(move || {
            let _ = entered_tx.lock().unwrap().send(());
            verdicts_rx
                .lock()
                .unwrap()
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("the test dropped its gate")))
        });
        let (log, records) = TableLog::open_with_sync_hook(dir, hook).unwrap();
        (log, records, Gate { entered, verdicts })
    }

    /// Waits until the writer has written a group and is about to sync it.
    fn wait_for_sync(&self) {
        self.entered
            .recv()
            .expect("the writer reaches the sync hook");
    }

    fn answer(&self, verdict: std::io::Result<()>) {
        self.verdicts.send(verdict).unwrap();
    }
}

fn text(bytes: &Bytes) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn records_queued_during_an_fsync_get_lsns_in_enqueue_order_and_share_the_next_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (log, existing, gate) = Gate::open(dir.path());
    assert!(existing.is_empty());

    let first = log.enqueue(Bytes::from_static(b"first")).unwrap();
    gate.wait_for_sync();
    // While the first group's fsync is held, four threads enqueue 25 records
    // each, concurrently.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..25)
                    .map(|i| {
                        let payload = format!("t{t} r{i}");
                        let ticket = log.enqueue(Bytes::from(payload.clone())).unwrap();
                        (payload, ticket)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut tickets = Vec::new();
    for thread in threads {
        let mine = thread.join().unwrap();
        let lsns: Vec<Lsn> = mine.iter().map(|(_, t)| t.lsn()).collect();
        assert!(
            lsns.windows(2).all(|w| w[0] < w[1]),
            "one thread's records get increasing LSNs: {lsns:?}"
        );
        tickets.extend(mine);
    }
    assert!(tickets.iter().all(|(_, t)| t.lsn() > first.lsn()));
    assert_eq!(
        log.syncs(),
        0,
        "nothing is durable while the first sync is held"
    );

    gate.answer(Ok(()));
    assert_eq!(first.durable().await.unwrap(), 5 + 8);
    gate.wait_for_sync();
    gate.answer(Ok(()));
    let mut acknowledged = Vec::new();
    for (payload, ticket) in tickets {
        let lsn = ticket.lsn();
        assert_eq!(
            ticket.durable().await.unwrap(),
            lsn,
            "durable returns the ticket's LSN"
        );
        acknowledged.push((lsn, payload));
    }
    assert_eq!(
        log.syncs(),
        2,
        "the 100 records queued behind the first sync share one fsync"
    );

    // The file holds the records in LSN order, each at the LSN its enqueue
    // returned: LSN order is enqueue order is file order.
    drop(log);
    let (_, records) = TableLog::open(dir.path()).unwrap();
    acknowledged.sort();
    let mut expected = vec![(13, "first".to_string())];
    expected.extend(acknowledged);
    let reopened: Vec<(Lsn, String)> = records.iter().map(|(l, r)| (*l, text(r))).collect();
    assert_eq!(reopened, expected);
}

#[tokio::test]
async fn concurrent_appends_are_all_durable_at_the_lsn_they_were_given() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = TableLog::open(dir.path()).unwrap();
    let appends = (0..200).map(|i| {
        let log = log.clone();
        async move {
            let payload = format!("record {i}");
            let lsn = log.append(Bytes::from(payload.clone())).await.unwrap();
            (lsn, payload)
        }
    });
    let mut acknowledged = futures::future::join_all(appends).await;
    acknowledged.sort();
    assert!(log.syncs() >= 1 && log.syncs() <= 200);
    drop(log);
    let (_, records) = TableLog::open(dir.path()).unwrap();
    let reopened: Vec<(Lsn, String)> = records.iter().map(|(l, r)| (*l, text(r))).collect();
    assert_eq!(reopened, acknowledged);
}

fn assert_poisoned(result: Result<Lsn, StorageError>, what: &str) {
    match result {
        Err(StorageError::LogPoisoned { source, .. }) => {
            assert!(
                source.to_string().contains("injected EIO"),
                "{what}: {source}"
            );
        }
        other => panic!("{what}: expected LogPoisoned, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_fsync_fails_its_group_everything_queued_behind_it_and_every_later_append() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, gate) = Gate::open(dir.path());
    let kept = log.enqueue(Bytes::from_static(b"kept")).unwrap();
    gate.wait_for_sync();
    gate.answer(Ok(()));
    let kept = kept.durable().await.unwrap();

    let failed = log.enqueue(Bytes::from_static(b"failed")).unwrap();
    gate.wait_for_sync();
    let behind: Vec<_> = (0..3)
        .map(|i| log.enqueue(Bytes::from(format!("behind {i}"))).unwrap())
        .collect();
    gate.answer(Err(std::io::Error::other("injected EIO")));

    assert_poisoned(failed.durable().await, "the record whose fsync failed");
    for ticket in behind {
        assert_poisoned(ticket.durable().await, "a record queued behind the failure");
    }
    match log.enqueue(Bytes::from_static(b"later")) {
        Err(e @ StorageError::LogPoisoned { .. }) => {
            assert!(
                e.to_string().contains("Restart Weir"),
                "says what to do: {e}"
            );
        }
        other => panic!("a later enqueue must fail at once, got {other:?}"),
    }
    assert_poisoned(
        log.append(Bytes::from_static(b"later")).await,
        "a later append",
    );
    assert!(
        log.truncate_before(kept).await.is_err(),
        "a poisoned log is not rewritten either"
    );
    assert_eq!(log.syncs(), 1, "only the first group was synced");

    // A restart finds the acknowledged record and none of the failed ones.
    drop(log);
    drop(gate);
    let (log, records) = TableLog::open(dir.path()).unwrap();
    let reopened: Vec<(Lsn, String)> = records.iter().map(|(l, r)| (*l, text(r))).collect();
    assert_eq!(reopened, vec![(kept, "kept".to_string())]);
    let after = log
        .append(Bytes::from_static(b"after restart"))
        .await
        .unwrap();
    assert!(after > kept, "the restarted log appends again");
}
