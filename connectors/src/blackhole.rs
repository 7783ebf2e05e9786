//! The `blackhole` sink: counts rows and bytes and drops them; what
//! benchmarks write to. It goes through both phases like any sink, so its
//! committed count is exactly the rows an uninterrupted run delivers.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use weir_common::ChangeBatch;

use crate::spec::{Capabilities, ConnectorKind, ConnectorSpec, Delivery};
use crate::{Connector, ConnectorError, Sink, SinkOpen};

const NAME: &str = "blackhole";

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Sink,
    help: "discards every change, counting rows and bytes (for benchmarks)",
    options: &[],
    capabilities: Capabilities {
        read_modes: &[],
        append_only: false,
        replayable: false,
        bounded: false,
        delivery: &[Delivery::ExactlyOnce],
    },
};

pub(crate) struct BlackholeConnector;

impl Connector for BlackholeConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn open_sink(&self, open: SinkOpen<'_>) -> Result<Box<dyn Sink>, ConnectorError> {
        let committed = match open.sealed {
            Some((_, descriptor)) => Counts::parse(descriptor)?,
            None => Counts::default(),
        };
        Ok(Box::new(Blackhole {
            committed,
            written: committed,
        }))
    }
}

/// The running totals a descriptor carries: self-contained, so committing
/// one is setting the totals (idempotent), whatever came before.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Counts {
    /// Row changes: the sum of absolute weights.
    rows: u64,
    bytes: u64,
    /// Net weight: inserts minus retractions.
    net: i64,
}

impl Counts {
    fn parse(descriptor: &str) -> Result<Self, ConnectorError> {
        serde_json::from_str(descriptor).map_err(|e| ConnectorError::BadPosition {
            connector: NAME.into(),
            value: descriptor.to_string(),
            message: e.to_string(),
        })
    }
}

struct Blackhole {
    committed: Counts,
    /// Committed plus everything written since.
    written: Counts,
}

#[async_trait]
impl Sink for Blackhole {
    async fn write(&mut self, _epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        // A row with weight 2 is two rows delivered (consolidation merges
        // equal rows), so rows are counted by weight, not by batch row.
        self.written.rows += changes
            .weights()
            .values()
            .iter()
            .map(|w| w.unsigned_abs())
            .sum::<u64>();
        self.written.bytes += changes.rows().get_array_memory_size() as u64;
        self.written.net += changes.weights().values().iter().sum::<i64>();
        Ok(())
    }

    async fn pre_commit(&mut self, _epoch: u64) -> Result<String, ConnectorError> {
        serde_json::to_string(&self.written).map_err(|e| ConnectorError::BadPosition {
            connector: NAME.into(),
            value: format!("{:?}", self.written),
            message: e.to_string(),
        })
    }

    async fn commit(&mut self, _epoch: u64, descriptor: &str) -> Result<(), ConnectorError> {
        self.committed = Counts::parse(descriptor)?;
        Ok(())
    }

    async fn abort(&mut self, _epoch: u64) -> Result<(), ConnectorError> {
        self.written = self.committed;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn change(n: usize) -> ChangeBatch {
        use arrow::array::{Int64Array, RecordBatch};
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1; n]))]).unwrap();
        ChangeBatch::inserts(rows)
    }

    #[tokio::test]
    async fn a_reopened_sink_holds_what_the_seal_says_and_nothing_after() {
        let options = Default::default();
        let open = |sealed| SinkOpen {
            name: "b",
            schema: change(0).schema(),
            options: &options,
            sealed,
        };
        let mut sink = BlackholeConnector.open_sink(open(None)).unwrap();
        sink.write(1, &change(3)).await.unwrap();
        let d1 = sink.pre_commit(1).await.unwrap();
        sink.write(2, &change(4)).await.unwrap();
        let d2 = sink.pre_commit(2).await.unwrap();
        sink.commit(2, &d2).await.unwrap();
        sink.commit(2, &d2).await.unwrap();
        assert_eq!(Counts::parse(&d2).unwrap().rows, 7);
        // A restart after the seal of epoch 1: 3 rows, whatever came later.
        let mut again = BlackholeConnector.open_sink(open(Some((1, &d1)))).unwrap();
        again.write(2, &change(4)).await.unwrap();
        again.abort(1).await.unwrap();
        again.write(2, &change(4)).await.unwrap();
        let d = again.pre_commit(2).await.unwrap();
        assert_eq!(Counts::parse(&d).unwrap(), Counts::parse(&d2).unwrap());
    }
}
