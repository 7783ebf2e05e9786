//! Tests of [`super::Streams`]: a panicking sink fails alone.

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
    async fn commit(&mut self, _: u64, _: &str) -> Result<(), ConnectorError> {
        Ok(())
    }
    async fn abort(&mut self, _: u64) -> Result<(), ConnectorError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_panicking_sink_fails_alone_and_the_loop_goes_on() {
    let mut streams = Streams::detached();
    let (buggy, fine) = (ObjectId(8), ObjectId(9));
    for id in [buggy, fine] {
        streams.sinks.insert(
            id,
            SinkSlot {
                spec: SinkToOpen {
                    name: "public.fine".into(),
                    connector: "blackhole".into(),
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
                sink: if id == buggy {
                    Box::new(Panics)
                } else {
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
                },
                connector: if id == buggy { "buggy" } else { "blackhole" }.into(),
                prepared: None,
                sealed: None,
                failed: false,
            },
        );
    }
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
