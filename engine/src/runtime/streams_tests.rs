//! Tests of [`super::Streams`]: a panicking sink fails alone, and so
//! does one whose receipt does not match what it was handed.

use super::*;

/// A sink whose code has a bug in `write`.
struct Panics;

#[async_trait::async_trait]
impl Sink for Panics {
    async fn write(&mut self, _: u64, _: &ChangeBatch) -> Result<(), ConnectorError> {
        panic!("a bug in the connector")
    }
    async fn pre_commit(&mut self, epoch: u64) -> Result<String, ConnectorError> {
        Ok(epoch.to_string())
    }
    fn receipt(&mut self) -> weir_connectors::Receipt {
        Default::default()
    }
    async fn commit(&mut self, _: u64, _: &str) -> Result<(), ConnectorError> {
        Ok(())
    }
    async fn abort(&mut self, _: u64) -> Result<(), ConnectorError> {
        Ok(())
    }
}

/// A sink that writes what it is handed but drops the second row of
/// each batch from its receipt, as a sink with an encoding bug would.
struct LosesRows(weir_connectors::Tally);

#[async_trait::async_trait]
impl Sink for LosesRows {
    async fn write(&mut self, _: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        let first = ChangeBatch::new(changes.rows().slice(0, 1), changes.weights().slice(0, 1));
        self.0.add_changes(&first.unwrap()).unwrap();
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
        self.0.take()
    }
}

/// A slot for `sink`, as a deployment's opened sink.
fn slot(sink: Box<dyn Sink>, connector: &str) -> SinkSlot {
    SinkSlot {
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
        handed: Default::default(),
        sink,
        connector: connector.into(),
        prepared: None,
        sealed: None,
        failed: false,
    }
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
    streams.sinks.insert(buggy, slot(Box::new(Panics), "buggy"));
    streams.sinks.insert(fine, slot(blackhole(), "blackhole"));
    let rows = crate::testing::change("k int", "1 +1");
    streams
        .epoch_closed(1, vec![(buggy, rows.clone()), (fine, rows.clone())])
        .await;
    streams.epoch_closed(2, vec![(fine, rows)]).await;
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
    streams.sinks.insert(
        lossy,
        slot(Box::new(LosesRows(Default::default())), "lossy"),
    );
    streams.sinks.insert(fine, slot(blackhole(), "blackhole"));
    // One row: the receipt matches.
    let one = crate::testing::change("k int", "1 +1");
    streams
        .epoch_closed(1, vec![(lossy, one.clone()), (fine, one)])
        .await;
    assert_ne!(streams.status.read().sinks[&lossy].status, "failed");
    // Two rows, one lost: the epoch is not pre-committed, the sink fails.
    let two = crate::testing::change("k int", "1 +1; 2 -1");
    streams
        .epoch_closed(2, vec![(lossy, two.clone()), (fine, two)])
        .await;
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
