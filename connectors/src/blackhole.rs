//! The `blackhole` sink: counts rows and bytes and drops them; what
//! benchmarks write to. It goes through both phases like any sink, so its
//! committed count is exactly the rows an uninterrupted run delivers.
//!
//! Its descriptor also carries a checksum of the net changelog, the sum
//! over every change of weight × hash(row) with a fixed hash: changes that
//! cancel (an aggregate's row retracted and inserted again) add up to
//! nothing, so it is the same for any split of the changes into epochs and
//! equals the checksum of the consolidated result. A change delivered
//! twice, or lost, shows in it; tests compare it with an uninterrupted run.
//!
//! `write_delay` makes each write take that long: a slow target, to see
//! what a lagging sink does to the rest (backpressure, checkpoints).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use weir_common::ChangeBatch;

use crate::spec::{Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType};
use crate::{Connector, ConnectorError, Sink, SinkOpen};

const NAME: &str = "blackhole";

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Sink,
    help: "discards every change, counting rows and bytes (for benchmarks)",
    options: &[OptionSpec::optional(
        "write_delay",
        OptionType::Text,
        "how long each write takes (a slow target: `200ms`, `1s`)",
    )
    .with_default("0s")
    .tunable()],
    capabilities: Capabilities {
        read_modes: &[],
        append_only: false,
        replayable: false,
        bounded: false,
        delivery: &[Delivery::ExactlyOnce],
        skips: false,
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
        let write_delay = crate::recovery::parse_duration(
            open.options.get("write_delay").map_or("0s", String::as_str),
        )
        .map_err(|message| ConnectorError::BadOption {
            connector: NAME.into(),
            option: "write_delay".into(),
            message,
        })?;
        Ok(Box::new(Blackhole {
            committed,
            written: committed,
            tally: Default::default(),
            write_delay,
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
    /// Σ weight × [`row_hash`] over every change, wrapping. Absent from
    /// descriptors sealed before it existed (then 0, as of no rows).
    #[serde(default)]
    checksum: u64,
}

/// FNV-1a over the row's encoding in Arrow's row format, finished with
/// splitmix64 so that sums of hashes of similar rows spread: fixed, so the
/// same row hashes the same in every process.
fn row_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Σ weight × hash(row) over `changes` (see the module comment).
fn checksum(changes: &ChangeBatch) -> Result<u64, ConnectorError> {
    use arrow::row::{RowConverter, SortField};
    let rows = changes.rows();
    let fields = rows
        .schema()
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    let encoded = RowConverter::new(fields)
        .and_then(|c| c.convert_columns(rows.columns()))
        .map_err(|e| ConnectorError::arrow(NAME, e))?;
    Ok(encoded
        .iter()
        .zip(changes.weights().values().iter())
        .fold(0u64, |sum, (row, w)| {
            sum.wrapping_add(row_hash(row.as_ref()).wrapping_mul(*w as u64))
        }))
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
    tally: crate::Tally,
    write_delay: std::time::Duration,
}

#[async_trait]
impl Sink for Blackhole {
    fn receipt(&mut self) -> crate::Receipt {
        self.tally.take()
    }

    async fn write(&mut self, _epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        if !self.write_delay.is_zero() {
            tokio::time::sleep(self.write_delay).await;
        }
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
        self.written.checksum = self.written.checksum.wrapping_add(checksum(changes)?);
        self.tally
            .add_changes(changes)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
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
            generation: 1,
            failures: 0,
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

    /// A change batch written as a table: `(key, n, weight)` rows.
    fn changes(rows: &[(i64, i64, i64)]) -> ChangeBatch {
        use arrow::array::{Int64Array, RecordBatch};
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("n", DataType::Int64, false),
        ]));
        let column = |f: fn(&(i64, i64, i64)) -> i64| {
            Arc::new(Int64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
        };
        let batch = RecordBatch::try_new(schema, vec![column(|r| r.0), column(|r| r.1)]).unwrap();
        ChangeBatch::new(
            batch,
            Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>()),
        )
        .unwrap()
    }

    async fn counts_after(epochs: &[&[(i64, i64, i64)]]) -> Counts {
        let options = Default::default();
        let mut sink = BlackholeConnector
            .open_sink(SinkOpen {
                name: "b",
                schema: changes(&[]).schema(),
                options: &options,
                sealed: None,
                generation: 1,
                failures: 0,
            })
            .unwrap();
        for (epoch, rows) in epochs.iter().enumerate() {
            sink.write(epoch as u64, &changes(rows)).await.unwrap();
        }
        Counts::parse(&sink.pre_commit(9).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn the_checksum_is_that_of_the_consolidated_changelog() {
        // A count per key updated over three epochs ...
        let updates = counts_after(&[
            &[(1, 1, 1), (2, 1, 1)],
            &[(1, 1, -1), (1, 2, 1)],
            &[(2, 1, -1), (2, 3, 1), (1, 2, -1), (1, 4, 1)],
        ])
        .await;
        // ... sums to the checksum of its final rows, in any order.
        let result = counts_after(&[&[(2, 3, 1), (1, 4, 1)]]).await;
        assert_eq!(
            (updates.net, updates.checksum),
            (result.net, result.checksum)
        );
        assert_ne!(updates.rows, result.rows);
        // An update delivered twice, one lost, or one row for another, shows.
        let twice = counts_after(&[
            &[(2, 3, 1), (1, 4, 1)],
            &[(1, 4, -1), (1, 5, 1)],
            &[(1, 4, -1), (1, 5, 1)],
        ])
        .await;
        let lost = counts_after(&[&[(2, 3, 1)]]).await;
        let other = counts_after(&[&[(2, 3, 1), (1, 5, 1)]]).await;
        for wrong in [twice, lost, other] {
            assert_ne!(wrong.checksum, result.checksum, "{wrong:?}");
        }
        assert_eq!(other.net, result.net, "net alone cannot tell");
    }
}
