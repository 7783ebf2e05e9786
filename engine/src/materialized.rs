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
    StateEntry, count_value, parse_state_key, read_count, state_key,
    unreadable,
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
                    key: state_key(0, &row, &[]),
                    value: (count > 0).then(|| count_value(count)),
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
        let mut rows = self.rows.clone();
        let mut total = self.total as i64;
        for entry in entries {
            let key = parse_state_key(NAME, &entry.key)?;
            if key.tag != 0 || !key.rest.is_empty() {
                return Err(unreadable(NAME, "an unknown key"));
            }
            let count = read_count(NAME, entry.value.as_deref())?;
            total += count - rows.set(key.distribution, count);
        }
        self.rows = rows;
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
