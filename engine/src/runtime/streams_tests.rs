//! Tests of [`super::Streams`]: a panicking sink fails alone, and so
//! does one whose receipt does not match what it was handed; a stuck sink
//! holds up nothing until it lags too far, and a seal keeps what it has
//! not pre-committed. A source that covers several tables feeds each
//! table's relation, shows each table's own state, and seals every split
//! under itself.

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

const SHOP: ObjectId = ObjectId(10);
const ORDERS: ObjectId = ObjectId(11);
const CUSTOMERS: ObjectId = ObjectId(12);
const DEPLOYMENT: ObjectId = ObjectId(20);

/// A source covering the tables `tables` (splits "11", "12", ...). Its
/// connector does not exist, so its reader ends at once and only the
/// batches a test hands over arrive.
fn shop(tables: &[ObjectId]) -> SourceToRead {
    SourceToRead {
        generation: 0,
        watermark: None,
        id: SHOP,
        name: "public.shop".into(),
        connector: "absent".into(),
        options: BTreeMap::new(),
        schema: crate::testing::schema(""),
        replayable: false,
        paused: false,
        tables: tables
            .iter()
            .map(|&id| TableToRead {
                id,
                name: format!("public.t{id}"),
                upstream: format!("public.t{id}"),
                schema: crate::testing::schema("k int"),
                gaps_accepted: 0,
                watermark: None,
            })
            .collect(),
    }
}

/// `shop(tables)` read by a deployment; its reader's current run.
fn reading(tables: &[ObjectId]) -> (Streams, ReaderId) {
    let mut streams = Streams::detached();
    streams.start_readers(
        DEPLOYMENT,
        &[shop(tables)],
        tables.iter().copied().collect(),
    );
    let reader = current_reader(&streams);
    (streams, reader)
}

fn current_reader(streams: &Streams) -> ReaderId {
    ReaderId {
        source: SHOP,
        run: streams.readers[&SHOP].run,
    }
}

/// A batch of `split` at `offset`, its rows `k` as in `change`.
fn batch(split: &str, rows: &str, offset: &str) -> SourceBatch {
    let columns = if split == "stream" { "" } else { "k int" };
    SourceBatch {
        split: split.into(),
        changes: crate::testing::change(columns, rows),
        offset: offset.into(),
        max_event_time: None,
        skipped: 0,
    }
}

/// (status, error, rows_in, offsets) of a source or table.
fn state(streams: &Streams, id: ObjectId) -> (&'static str, Option<String>, u64, Offsets) {
    let status = streams.status.read();
    let s = &status.sources[&id];
    (s.status, s.error.clone(), s.rows_in, s.offsets.clone())
}

fn offsets(entries: &[(&str, &str)]) -> Offsets {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The source offsets the next seal records.
fn sealed_offsets(streams: &mut Streams, epoch: u64) -> BTreeMap<String, Offsets> {
    let (sources, _) = streams.seal_extras(epoch);
    sources
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_str(&v).unwrap()))
        .collect()
}

#[tokio::test]
async fn a_transaction_over_two_tables_feeds_each_table_its_relation_and_status() {
    let (mut streams, reader) = reading(&[ORDERS, CUSTOMERS]);
    for id in [SHOP, ORDERS, CUSTOMERS] {
        assert_eq!(state(&streams, id).0, "running", "{id}");
    }
    let transaction = [batch("11", "1 +1; 2 +1", "o2"), batch("12", "7 +1", "c1")];
    let fed: Vec<_> = transaction
        .iter()
        .map(|b| streams.received(reader, b))
        .collect();
    assert_eq!(fed, [Some(ORDERS), Some(CUSTOMERS)]);
    let all = offsets(&[("11", "o2"), ("12", "c1")]);
    assert_eq!(state(&streams, SHOP), ("running", None, 3, all.clone()));
    assert_eq!(
        state(&streams, ORDERS),
        ("running", None, 2, offsets(&[("11", "o2")]))
    );
    assert_eq!(
        state(&streams, CUSTOMERS),
        ("running", None, 1, offsets(&[("12", "c1")]))
    );
    // Sealed under the source, every split together.
    streams.epoch_closed(1, Vec::new()).await;
    assert_eq!(
        sealed_offsets(&mut streams, 1),
        BTreeMap::from([(source_key(SHOP), all)])
    );
    // A split that is no table's read now (a table dropped meanwhile)
    // feeds nothing; a stopped run's batches nothing at all.
    assert_eq!(streams.received(reader, &batch("13", "1 +1", "x")), None);
    let stale = ReaderId { run: 0, ..reader };
    assert_eq!(streams.received(stale, &batch("11", "3 +1", "o3")), None);
    assert_eq!(state(&streams, ORDERS).3, offsets(&[("11", "o2")]));
}

#[tokio::test]
async fn the_stream_split_feeds_no_relation_but_is_sealed_with_the_source() {
    let (mut streams, reader) = reading(&[ORDERS, CUSTOMERS]);
    assert_eq!(streams.received(reader, &batch("stream", "", "lsn9")), None);
    streams.epoch_closed(1, Vec::new()).await;
    assert_eq!(
        sealed_offsets(&mut streams, 1)[&source_key(SHOP)],
        offsets(&[("stream", "lsn9")])
    );
    assert_eq!(state(&streams, SHOP).3, offsets(&[("stream", "lsn9")]));
    for table in [ORDERS, CUSTOMERS] {
        assert_eq!(state(&streams, table), ("running", None, 0, Offsets::new()));
    }
}

#[tokio::test]
async fn a_table_that_fails_alone_keeps_its_failure_whatever_the_reader_does() {
    let (mut streams, reader) = reading(&[ORDERS, CUSTOMERS]);
    let truncated = Some("customers was truncated".to_string());
    streams.split_failed(reader, "12", false, truncated.clone().unwrap());
    assert_eq!(state(&streams, CUSTOMERS).0, "failed");
    assert_eq!(state(&streams, ORDERS).0, "running");
    assert_eq!(state(&streams, SHOP).0, "running");
    // The reader retries, then delivers again: the sibling follows it,
    // the failed table does not.
    let reset = Some("connection reset".to_string());
    streams.set_source_status(reader, "retrying", reset.clone());
    assert_eq!(state(&streams, ORDERS).0, "retrying");
    assert_eq!(state(&streams, ORDERS).1, reset);
    assert_eq!(state(&streams, CUSTOMERS).1, truncated);
    assert_eq!(
        streams.received(reader, &batch("11", "3 +1", "o3")),
        Some(ORDERS)
    );
    for (id, status) in [
        (SHOP, "running"),
        (ORDERS, "running"),
        (CUSTOMERS, "failed"),
    ] {
        assert_eq!(state(&streams, id).0, status, "{id}");
    }
    streams.set_source_status(reader, "gap", Some("the slot is gone".into()));
    assert_eq!(state(&streams, ORDERS).0, "gap");
    assert_eq!(state(&streams, CUSTOMERS).0, "failed");
    assert_eq!(state(&streams, CUSTOMERS).1, truncated);
    // A table whose changes were lost upstream is `gap`.
    let (mut streams, reader) = reading(&[ORDERS, CUSTOMERS]);
    streams.split_failed(reader, "11", true, "orders was recreated".into());
    streams.set_source_status(reader, "completed", None);
    assert_eq!(state(&streams, ORDERS).0, "gap");
    assert_eq!(state(&streams, CUSTOMERS).0, "completed");
}

#[tokio::test]
async fn a_restarted_reader_forgets_table_failures_and_tables_it_no_longer_reads() {
    const LINES: ObjectId = ObjectId(13);
    let mut streams = Streams::detached();
    // The deployment reads lines too, which the source does not cover yet.
    let read = [ORDERS, CUSTOMERS, LINES].into();
    streams.start_readers(DEPLOYMENT, &[shop(&[ORDERS, CUSTOMERS])], read);
    let old = current_reader(&streams);
    streams.split_failed(old, "12", false, "customers was truncated".into());
    streams.split_failed(old, "11", false, "orders was truncated".into());
    // Read again without orders, with a table added: the connector reports
    // again the failures it sealed, so every table it reads starts running.
    streams.restart_source(shop(&[CUSTOMERS, LINES]));
    let reader = current_reader(&streams);
    assert_ne!(reader, old);
    for id in [SHOP, CUSTOMERS, LINES] {
        assert_eq!(
            state(&streams, id),
            ("running", None, 0, Offsets::new()),
            "{id}"
        );
    }
    // The old run is gone, and orders is no longer this reader's.
    streams.split_failed(old, "13", false, "stale".into());
    assert_eq!(state(&streams, LINES).0, "running");
    streams.set_source_status(reader, "retrying", Some("connection reset".into()));
    assert_eq!(state(&streams, ORDERS).0, "failed");
    assert_eq!(state(&streams, CUSTOMERS).0, "retrying");
    assert_eq!(streams.received(reader, &batch("11", "1 +1", "o1")), None);
    assert_eq!(
        streams.received(reader, &batch("13", "1 +1", "l1")),
        Some(LINES)
    );
}

#[tokio::test]
async fn a_dropped_table_leaves_its_sources_offsets_and_reader() {
    let (mut streams, old) = reading(&[ORDERS, CUSTOMERS]);
    streams.received(old, &batch("11", "1 +1", "o1"));
    streams.received(old, &batch("12", "1 +1", "c1"));
    streams.epoch_closed(1, Vec::new()).await;
    streams.source_dropped(ORDERS);
    assert_eq!(
        sealed_offsets(&mut streams, 1)[&source_key(SHOP)],
        offsets(&[("12", "c1")])
    );
    assert!(!streams.status.read().sources.contains_key(&ORDERS));
    assert_eq!(state(&streams, SHOP).3, offsets(&[("12", "c1")]));
    // The reader goes on without it, from where it was.
    let reader = current_reader(&streams);
    assert_ne!(reader, old);
    assert_eq!(streams.received(reader, &batch("11", "2 +1", "o2")), None);
    assert_eq!(
        streams.received(reader, &batch("12", "2 +1", "c2")),
        Some(CUSTOMERS)
    );
}

#[tokio::test]
async fn a_source_without_tables_feeds_itself_whatever_its_splits() {
    let mut streams = Streams::detached();
    streams.start_readers(DEPLOYMENT, &[shop(&[])], [SHOP].into());
    let reader = current_reader(&streams);
    for split in ["0", "stream", "11"] {
        assert_eq!(
            streams.received(reader, &batch(split, "1 +1", "1")),
            Some(SHOP)
        );
    }
    assert_eq!(state(&streams, SHOP).2, 3);
}

/// A source covering tables 11 and 12 reads only the tables deployments
/// read: a first projection over 11 starts a reader of 11 alone; one over
/// 12 starts it again with both (12's snapshot is then read for it, not
/// before it exists); another over 11 changes nothing. Whether a rebuilt
/// deployment cannot replay depends on its own tables having been read.
#[tokio::test]
async fn a_shared_source_reads_the_tables_its_deployments_read() {
    let mut streams = Streams::detached();
    let both = shop(&[ObjectId(11), ObjectId(12)]);
    streams.start_readers(
        DEPLOYMENT,
        std::slice::from_ref(&both),
        [ObjectId(11)].into(),
    );
    let ids = |streams: &Streams| -> Vec<ObjectId> {
        streams.defs[&SHOP].tables.iter().map(|t| t.id).collect()
    };
    assert_eq!(ids(&streams), vec![ObjectId(11)]);
    let first = current_reader(&streams);
    assert_eq!(
        streams.received(first, &batch("11", "1 +1", "a")),
        Some(ObjectId(11))
    );

    let read_11: HashSet<ObjectId> = [ObjectId(11)].into();
    let read_12: HashSet<ObjectId> = [ObjectId(12)].into();
    assert!(
        streams
            .cannot_replay(std::slice::from_ref(&both), &read_11)
            .is_some()
    );
    assert!(
        streams
            .cannot_replay(std::slice::from_ref(&both), &read_12)
            .is_none()
    );

    streams.start_readers(ObjectId(21), std::slice::from_ref(&both), read_12);
    assert_eq!(ids(&streams), vec![ObjectId(11), ObjectId(12)]);
    let second = current_reader(&streams);
    assert_ne!(
        first.run, second.run,
        "a table newly read restarts the reader"
    );
    assert_eq!(streams.received(first, &batch("11", "2 +1", "c")), None);
    assert_eq!(
        streams.received(second, &batch("12", "2 +1", "d")),
        Some(ObjectId(12))
    );

    streams.start_readers(ObjectId(22), std::slice::from_ref(&both), read_11);
    assert_eq!(current_reader(&streams).run, second.run);

    // A restart (a gap accepted, say) keeps to the tables read.
    streams.dropped(ObjectId(21)).await;
    streams.restart_source(both.clone());
    assert_eq!(ids(&streams), vec![ObjectId(11)]);
}
