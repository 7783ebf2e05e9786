//! Tests of [`super::Streams`]: a panicking sink fails alone, and so
//! does one whose receipt does not match what it was handed; a stuck sink
//! holds up nothing until it lags too far, and a seal keeps what it has
//! not pre-committed.

use super::*;
use crate::runtime::sink_worker::IN_FLIGHT_ROWS;
use weir_connectors::{ConnectorKind, Sink, SinkOpen};

/// What a test sink's `write` does; everything else is a plain
/// two-phase sink whose receipt is what it tallied.
enum Writes {
    /// Panics: a bug in the connector.
    Panics,
    /// Tallies only the first row of each batch, as a sink with an
    /// encoding bug would.
    LosesRows,
    /// Waits for the test to open the gate, then tallies every row.
    Gated(Arc<tokio::sync::Semaphore>),
}

struct TestSink(Writes, weir_connectors::Tally);

fn test_sink(writes: Writes) -> Box<dyn Sink> {
    Box::new(TestSink(writes, Default::default()))
}

#[async_trait::async_trait]
impl Sink for TestSink {
    async fn write(&mut self, _: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        match &self.0 {
            Writes::Panics => panic!("a bug in the connector"),
            Writes::LosesRows => {
                let first =
                    ChangeBatch::new(changes.rows().slice(0, 1), changes.weights().slice(0, 1));
                self.1.add_changes(&first.unwrap()).unwrap();
            }
            Writes::Gated(gate) => {
                let _open = gate.acquire().await.expect("the gate is never closed");
                self.1.add_changes(changes).unwrap();
            }
        }
        Ok(())
    }
    async fn pre_commit(&mut self, epoch: u64) -> Result<String, ConnectorError> {
        Ok(epoch.to_string())
    }
    async fn commit(&mut self, _: u64, _: &str) -> Result<(), ConnectorError> {
        Ok(())
    }
    async fn abort(&mut self, _: u64) -> Result<(), ConnectorError> {
        Ok(())
    }
    fn receipt(&mut self) -> weir_connectors::Receipt {
        self.1.take()
    }
}

/// Opens `sink` as sink `id` of `streams`, as a deployment's opened sink.
fn open(streams: &mut Streams, id: ObjectId, sink: Box<dyn Sink>, connector: &str) {
    let worker = streams.start_worker(id, sink, connector);
    let slot = SinkSlot {
        spec: SinkToOpen {
            name: format!("public.{connector}"),
            connector: connector.into(),
            options: BTreeMap::new(),
            schema: crate::testing::schema("k int"),
            paused: false,
        },
        durable: None,
        unsealed: Vec::new(),
        unsealed_rows: 0,
        unsealed_dropped_through: None,
        backoff: None,
        retry: crate::runtime::sink_retry::RetryState::new(Default::default()),
        grouping: None,
        waiting_since: None,
        paused: false,
        worker,
        prepared: None,
        in_flight: Default::default(),
        unprecommitted_rows: 0,
        pre_commit_due: true,
        sealed: None,
        failed: false,
    };
    streams.sinks.insert(id, slot);
}

fn blackhole() -> Box<dyn Sink> {
    weir_connectors::connector("blackhole", ConnectorKind::Sink)
        .unwrap()
        .open_sink(SinkOpen {
            name: "public.fine",
            schema: crate::testing::schema("k int"),
            options: &BTreeMap::new(),
            sealed: None,
            generation: 1,
            failures: 0,
        })
        .unwrap()
}

#[tokio::test]
async fn a_panicking_sink_fails_alone_and_the_loop_goes_on() {
    let mut streams = Streams::detached();
    let (buggy, fine) = (ObjectId(8), ObjectId(9));
    open(&mut streams, buggy, test_sink(Writes::Panics), "buggy");
    open(&mut streams, fine, blackhole(), "blackhole");
    let rows = crate::testing::change("k int", "1 +1");
    streams
        .epoch_closed(1, vec![(buggy, rows.clone()), (fine, rows.clone())])
        .await;
    streams.epoch_closed(2, vec![(fine, rows)]).await;
    streams.settle().await;
    let status = streams.status.read();
    assert_eq!(status.sinks[&buggy].status, "failed");
    let error = status.sinks[&buggy].error.clone().unwrap_or_default();
    assert!(error.contains("\"buggy\" panicked"), "{error}");
    assert_eq!(status.sinks[&fine].rows_out, 2);
    assert!(streams.sinks[&fine].prepared.is_some());
}

#[tokio::test]
async fn a_sink_whose_receipt_differs_from_what_it_was_handed_fails() {
    let mut streams = Streams::detached();
    let (lossy, fine) = (ObjectId(8), ObjectId(9));
    open(&mut streams, lossy, test_sink(Writes::LosesRows), "lossy");
    open(&mut streams, fine, blackhole(), "blackhole");
    // One row: the receipt matches.
    let one = crate::testing::change("k int", "1 +1");
    streams
        .epoch_closed(1, vec![(lossy, one.clone()), (fine, one)])
        .await;
    streams.settle().await;
    assert_ne!(streams.status.read().sinks[&lossy].status, "failed");
    // Two rows, one lost: the epoch is not pre-committed, the sink fails.
    let two = crate::testing::change("k int", "1 +1; 2 -1");
    streams
        .epoch_closed(2, vec![(lossy, two.clone()), (fine, two)])
        .await;
    streams.settle().await;
    let status = streams.status.read();
    assert_eq!(status.sinks[&lossy].status, "failed");
    let error = status.sinks[&lossy].error.clone().unwrap_or_default();
    assert!(
        error.contains("it says it wrote 1 row changes") && error.contains("it was handed 2"),
        "{error}"
    );
    assert_eq!(
        streams.sinks[&lossy].prepared.as_ref().map(|p| p.epoch),
        Some(1)
    );
    assert_ne!(status.sinks[&fine].status, "failed");
}

#[tokio::test]
async fn a_stuck_sink_holds_up_nothing_and_a_seal_keeps_its_epochs_in_flight() {
    let mut streams = Streams::detached();
    let (stuck, fine) = (ObjectId(8), ObjectId(9));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    open(
        &mut streams,
        stuck,
        test_sink(Writes::Gated(gate.clone())),
        "gated",
    );
    open(&mut streams, fine, blackhole(), "blackhole");
    let rows = crate::testing::change("k int", "1 +1; 2 +1");
    for epoch in 1..=3 {
        streams
            .epoch_closed(epoch, vec![(stuck, rows.clone()), (fine, rows.clone())])
            .await;
    }
    // The other sink goes on; the stuck one has pre-committed nothing.
    while streams.sinks[&fine].prepared.as_ref().map(|p| p.epoch) != Some(3) {
        let event = streams.sink_events.recv().await.unwrap();
        streams.sink_event(event);
    }
    assert!(streams.sinks[&stuck].prepared.is_none());
    assert!(streams.pre_commits_in_flight());
    // A seal now: an entry that opens the stuck sink as new, and its three
    // epochs in its outbox, so a restore from the seal delivers them.
    let kept: Vec<u64> = streams
        .undelivered()
        .into_iter()
        .filter(|(id, _)| *id == stuck)
        .flat_map(|(_, epochs)| epochs.into_iter().map(|(e, _)| e))
        .collect();
    assert_eq!(kept, vec![1, 2, 3]);
    let (_, sinks) = streams.seal_extras(3);
    let entry: SinkSeal = serde_json::from_str(&sinks[&sink_key(stuck)]).unwrap();
    assert!(entry.is_empty() && !entry.behind, "{entry:?}");
    let entry: SinkSeal = serde_json::from_str(&sinks[&sink_key(fine)]).unwrap();
    assert_eq!(entry.epoch, 3);
    // Once through, it keeps nothing more.
    gate.add_permits(1_000);
    streams.settle().await;
    assert_eq!(
        streams.sinks[&stuck]
            .prepared
            .as_ref()
            .map(|p| (p.epoch, p.rows)),
        Some((3, 6))
    );
    assert!(streams.undelivered().iter().all(|(_, e)| e.is_empty()));
    assert_eq!(streams.status.read().sinks[&stuck].prepared_epoch, 3);
    // Dropped while idle: its worker stops.
    streams.dropped(stuck).await;
    assert!(!streams.sinks.contains_key(&stuck));
}

#[tokio::test]
async fn a_sink_that_lags_too_far_makes_the_loop_wait() {
    let mut streams = Streams::detached();
    let stuck = ObjectId(8);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    open(
        &mut streams,
        stuck,
        test_sink(Writes::Gated(gate.clone())),
        "gated",
    );
    let keys = arrow::array::Int64Array::from_iter_values(0..=IN_FLIGHT_ROWS as i64);
    let many = ChangeBatch::inserts(
        arrow::record_batch::RecordBatch::try_new(
            crate::testing::schema("k int"),
            vec![Arc::new(keys)],
        )
        .unwrap(),
    );
    let mut closing = Box::pin(streams.epoch_closed(1, vec![(stuck, many)]));
    for _ in 0..10 {
        tokio::task::yield_now().await;
        assert!(
            futures::poll!(closing.as_mut()).is_pending(),
            "the epoch closed past a sink lagging by more than {IN_FLIGHT_ROWS} rows"
        );
    }
    gate.add_permits(1);
    closing.await;
    streams.settle().await;
    assert_eq!(
        streams.sinks[&stuck].prepared.as_ref().map(|p| p.epoch),
        Some(1)
    );
}

#[tokio::test]
async fn a_sink_that_fails_as_it_opens_stays_failed_in_every_seal() {
    let mut streams = Streams::detached();
    let id = ObjectId(8);
    let spec = SinkToOpen {
        name: "public.bad".into(),
        connector: "blackhole".into(),
        options: [("group_size".to_string(), "many".to_string())].into(),
        schema: crate::testing::schema("k int"),
        paused: false,
    };
    streams.open_sink(id, &spec, None, 1, Vec::new());
    assert_eq!(streams.status.read().sinks[&id].status, "failed");
    // Its graph's state goes on into the seals: a start from any of them
    // must fail it again, not open it as a new sink that missed rows.
    for epoch in [1, 2] {
        let (_, sinks) = streams.seal_extras(epoch);
        let entry: SinkSeal = serde_json::from_str(&sinks[&sink_key(id)]).unwrap();
        assert!(entry.behind, "{entry:?}");
    }
}

#[tokio::test]
async fn a_worker_stuck_in_a_call_is_abandoned_when_stopped() {
    let (events, _reports) = tokio::sync::mpsc::unbounded_channel();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut worker = crate::runtime::sink_worker::SinkWorker::start(
        ObjectId(8),
        1,
        test_sink(Writes::Gated(gate)),
        "gated".into(),
        events,
    );
    worker.send(crate::runtime::sink_worker::SinkOp::Write {
        epoch: 1,
        changes: crate::testing::change("k int", "1 +1"),
    });
    // The gate never opens: the write never returns, and stopping the
    // worker still does.
    worker
        .stop_within(std::time::Duration::from_millis(50))
        .await;
}
