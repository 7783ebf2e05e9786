//! [`Materialized`]: a projection's current result, kept as a multiset of
//! rows so a snapshot of it is an O(1) clone that readers keep while the
//! coordinator moves on.
//!
//! Its state entries for checkpoints are one per distinct row (the row is
//! the distribution key), valued by the row's count.

use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::multiset::Multiset;
use crate::operator::{
    StateEntry, count_value, parse_state_key, read_count, state_key, unreadable,
};
use crate::rows::{RowBytes, RowCodec};

const NAME: &str = "materialize";
/// Rows per batch when the result is read back as Arrow.
const SCAN_BATCH_ROWS: usize = 8192;

#[derive(Clone)]
pub struct Materialized {
    codec: Arc<RowCodec>,
    rows: Multiset,
    /// Rows counted with their multiplicity.
    total: u64,
    /// The rows as Arrow batches, built on the first read of this version.
    scan_cache: Arc<OnceLock<Arc<Vec<RecordBatch>>>>,
    /// Rows whose count changed since the last `take_state_changes`; a
    /// persistent set, so the clone per epoch stays O(1).
    changed: imbl::OrdSet<RowBytes>,
}

impl std::fmt::Debug for Materialized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Materialized")
            .field("rows", &self.total)
            .finish()
    }
}

impl Materialized {
    pub fn new(schema: SchemaRef) -> Result<Self, EngineError> {
        Ok(Self {
            codec: Arc::new(RowCodec::new(schema)?),
            rows: Multiset::default(),
            total: 0,
            scan_cache: Arc::default(),
            changed: imbl::OrdSet::new(),
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        self.codec.schema()
    }

    /// Rows, counting duplicates.
    pub fn row_count(&self) -> u64 {
        self.total
    }

    /// Applies an output change. On error (a retraction of a row that is not
    /// there, which would be an operator bug) `self` is unchanged.
    pub fn apply(&mut self, change: &ChangeBatch) -> Result<(), EngineError> {
        if change.is_empty() {
            return Ok(());
        }
        let encoded = self.codec.encode_rows(change.rows())?;
        let mut rows = self.rows.clone();
        let mut total = self.total as i64;
        let mut changed = self.changed.clone();
        for (row, weight) in encoded.iter().zip(change.weights().values()) {
            rows.add(row, *weight, NAME)?;
            total += weight;
            changed.insert(row.clone());
        }
        self.rows = rows;
        self.total = total as u64;
        self.changed = changed;
        self.scan_cache = Arc::default();
        Ok(())
    }

    /// The rows whose count changed since the last call, as
    /// [`crate::Operator::take_state_changes`] reports them.
    pub fn take_state_changes(&mut self) -> Vec<StateEntry> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|row| {
                let count = self.rows.count(&row);
                StateEntry {
                    key: state_key(0, &row, &[]).into(),
                    value: (count > 0).then(|| count_value(count).into()),
                }
            })
            .collect()
    }

    /// Every row with its count, for a full snapshot.
    pub fn state_entries(&self) -> Vec<StateEntry> {
        self.rows
            .iter()
            .map(|(row, count)| StateEntry::set(state_key(0, row, &[]), count_value(count)))
            .collect()
    }

    /// Sets or removes rows' counts in order; afterwards no change is
    /// recorded. On error `self` is unchanged.
    pub fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        // Every entry is read before any is applied, so the rows change in
        // place: a copy to fall back on would path-copy the shared map on
        // each call, and a restore calls this once per vnode.
        let parsed = entries
            .iter()
            .map(|entry| {
                let key = parse_state_key(NAME, &entry.key)?;
                if key.tag != 0 || !key.rest.is_empty() {
                    return Err(unreadable(NAME, "an unknown key"));
                }
                Ok((key.distribution, read_count(NAME, entry.value.as_deref())?))
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        let mut total = self.total as i64;
        for (row, count) in parsed {
            total += count - self.rows.set(row, count);
        }
        self.total = total as u64;
        self.changed = imbl::OrdSet::new();
        self.scan_cache = Arc::default();
        Ok(())
    }

    /// The whole result as an insert-only change (to backfill a projection
    /// that reads this one).
    pub fn as_inserts(&self) -> Result<ChangeBatch, EngineError> {
        self.codec.decode_change(self.rows.iter())
    }

    /// The rows as Arrow batches, duplicates repeated.
    pub fn batches(&self) -> Result<Arc<Vec<RecordBatch>>, EngineError> {
        if let Some(cached) = self.scan_cache.get() {
            return Ok(cached.clone());
        }
        let mut batches = Vec::new();
        let mut chunk = Vec::with_capacity(SCAN_BATCH_ROWS.min(self.total as usize));
        for row in self.rows.expanded() {
            chunk.push(row);
            if chunk.len() == SCAN_BATCH_ROWS {
                batches.push(self.codec.decode(chunk.drain(..))?);
            }
        }
        if !chunk.is_empty() {
            batches.push(self.codec.decode(chunk)?);
        }
        let batches = Arc::new(batches);
        Ok(self.scan_cache.get_or_init(|| batches).clone())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::testing::{RandomInput, Rng, render, schema};

    const ROWS: &str = "g text, x int";

    #[test]
    fn a_snapshot_and_later_changes_rebuild_the_result() {
        for seed in 0..20 {
            let mut rng = Rng::new(seed);
            let mut input = RandomInput::new(ROWS, &[&["a", "b", "null"], &["1", "2"]]);
            let mut result = Materialized::new(schema(ROWS)).unwrap();
            let snapshot_at = rng.below(10);
            let mut snapshot = Vec::new();
            let mut deltas = Vec::new();
            for i in 0..12 {
                result.apply(&input.next(&mut rng)).unwrap();
                if i == snapshot_at {
                    result.take_state_changes();
                    snapshot = result.state_entries();
                } else if i > snapshot_at && (i == 11 || rng.below(2) == 0) {
                    deltas.push(result.take_state_changes());
                }
            }
            let mut restored = Materialized::new(schema(ROWS)).unwrap();
            restored.apply_state_entries(&snapshot).unwrap();
            for delta in &deltas {
                restored.apply_state_entries(delta).unwrap();
            }
            assert!(restored.take_state_changes().is_empty());
            assert_eq!(restored.row_count(), result.row_count(), "seed {seed}");
            assert_eq!(
                render(&restored.as_inserts().unwrap()),
                render(&result.as_inserts().unwrap())
            );
            let entries = |m: &Materialized| -> BTreeMap<bytes::Bytes, Option<bytes::Bytes>> {
                m.state_entries()
                    .into_iter()
                    .map(|e| (e.key, e.value))
                    .collect()
            };
            assert_eq!(entries(&restored), entries(&result));
        }
    }

    #[test]
    fn a_failed_apply_records_no_change() {
        let mut result = Materialized::new(schema(ROWS)).unwrap();
        result
            .apply(&crate::testing::change(ROWS, "a 1 +1"))
            .unwrap();
        result.take_state_changes();
        let bad = crate::testing::change(ROWS, "b 1 +1; c 1 -1");
        assert!(result.apply(&bad).is_err());
        assert!(result.take_state_changes().is_empty());
    }
}
