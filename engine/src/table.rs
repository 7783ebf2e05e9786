//! [`TableState`]: a table's rows keyed by primary key.
//!
//! Rows are stored in Arrow's row format (`arrow_row`), keyed by the row
//! format of their key columns, in a persistent ordered map. Cloning a state
//! is O(1), which gives snapshot reads and transaction overlays for free: a
//! reader keeps its clone while writers build the next version.
//!
//! Tables without a declared primary key carry a hidden row-id column that
//! the caller fills; it is then the key.

use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use weir_common::ChangeBatch;

use crate::EngineError;

/// Rows per batch when a state is read back as Arrow.
const SCAN_BATCH_ROWS: usize = 8192;

/// Keys up to this many encoded bytes (a `bigint` key takes 9, a `uuid` 17)
/// live inside the map's nodes: a lookup's binary search then compares
/// bytes it already has instead of following a pointer per probe.
const INLINE_KEY_BYTES: usize = 24;

type Key = smallvec::SmallVec<[u8; INLINE_KEY_BYTES]>;
type Row = Arc<[u8]>;

#[derive(Clone)]
pub struct TableState {
    schema: SchemaRef,
    key_columns: Arc<[usize]>,
    rows: imbl::OrdMap<Key, Row>,
    codec: Arc<Codec>,
    /// The rows as Arrow batches, built on first read of this version.
    scan_cache: Arc<OnceLock<Arc<Vec<RecordBatch>>>>,
}

struct Codec {
    row: RowConverter,
    key: RowConverter,
}

impl std::fmt::Debug for TableState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableState")
            .field("rows", &self.rows.len())
            .field("key_columns", &self.key_columns)
            .finish()
    }
}

impl TableState {
    /// An empty table. `key_columns` index into `schema` and must not be empty.
    pub fn new(schema: SchemaRef, key_columns: Vec<usize>) -> Result<Self, EngineError> {
        let sort_fields = |indices: &mut dyn Iterator<Item = usize>| {
            indices
                .map(|i| SortField::new(schema.field(i).data_type().clone()))
                .collect::<Vec<_>>()
        };
        let row = RowConverter::new(sort_fields(&mut (0..schema.fields().len())))?;
        let key = RowConverter::new(sort_fields(&mut key_columns.iter().copied()))?;
        Ok(Self {
            schema,
            key_columns: key_columns.into(),
            rows: imbl::OrdMap::new(),
            codec: Arc::new(Codec { row, key }),
            scan_cache: Arc::default(),
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The bytes its rows and keys take in their stored (row) format, what
    /// `pg_table_size` reports. O(rows).
    pub fn stored_bytes(&self) -> usize {
        self.rows.iter().map(|(k, r)| k.len() + r.len()).sum()
    }

    /// Whether `other` is the very same version as `self` (no write in between).
    pub fn same_version(&self, other: &TableState) -> bool {
        self.rows.ptr_eq(&other.rows)
    }

    fn check_schema(&self, batch: &RecordBatch) -> Result<(), EngineError> {
        let ours: Vec<_> = self.schema.fields().iter().map(|f| f.data_type()).collect();
        let theirs: Vec<_> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.data_type())
            .collect();
        if ours != theirs {
            return Err(EngineError::SchemaMismatch(format!(
                "expected {ours:?}, got {theirs:?}"
            )));
        }
        Ok(())
    }

    fn encode(
        &self,
        batch: &RecordBatch,
    ) -> Result<(arrow::row::Rows, arrow::row::Rows), EngineError> {
        self.check_schema(batch)?;
        let rows = self.codec.row.convert_columns(batch.columns())?;
        let key_cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        let keys = self.codec.key.convert_columns(&key_cols)?;
        Ok((rows, keys))
    }

    /// Applies a change: retractions first, then insertions, so `-old/+new`
    /// with an unchanged key is an update. All or nothing: on error `self`
    /// is unchanged. An insertion whose key is present is `DuplicateKey`; a
    /// retraction of an absent key is ignored (it is already gone). Weights
    /// other than ±1 count as that many single changes.
    pub fn apply(&mut self, change: &ChangeBatch) -> Result<(), EngineError> {
        if change.is_empty() {
            return Ok(());
        }
        let (rows, keys) = self.encode(change.rows())?;
        let mut next = self.rows.clone();
        let weights = change.weights().values();
        for (i, &w) in weights.iter().enumerate() {
            if w < 0 {
                next.remove(keys.row(i).as_ref());
            }
        }
        for (i, &w) in weights.iter().enumerate() {
            if w > 0 {
                let key: Key = keys.row(i).as_ref().into();
                if w > 1 || next.contains_key(&key) {
                    return Err(EngineError::DuplicateKey {
                        key: self.describe_key(change.rows(), i),
                    });
                }
                next.insert(key, rows.row(i).as_ref().into());
            }
        }
        self.rows = next;
        self.scan_cache = Arc::default();
        Ok(())
    }

    /// Removes every row.
    pub fn clear(&mut self) {
        self.rows = imbl::OrdMap::new();
        self.scan_cache = Arc::default();
    }

    /// For each row of `candidates` (same schema as the table), the index of
    /// the stored row with the same key in the returned batch, if any.
    pub fn lookup(
        &self,
        candidates: &RecordBatch,
    ) -> Result<(Vec<Option<u32>>, RecordBatch), EngineError> {
        let (_, keys) = self.encode(candidates)?;
        let mut found: Vec<Row> = Vec::new();
        let mut positions = Vec::with_capacity(candidates.num_rows());
        for i in 0..candidates.num_rows() {
            match self.rows.get(keys.row(i).as_ref()) {
                Some(row) => {
                    positions.push(Some(found.len() as u32));
                    found.push(row.clone());
                }
                None => positions.push(None),
            }
        }
        Ok((positions, self.decode(found.iter())?))
    }

    /// The key columns' indices in the table's schema, in key order.
    pub fn key_columns(&self) -> &[usize] {
        &self.key_columns
    }

    /// The stored rows whose key is one of `keys` (one array per key
    /// column, in key order, each of that column's type), in key order and
    /// each once: a primary-key lookup, O(keys · log rows).
    pub fn rows_with_keys(&self, keys: &[ArrayRef]) -> Result<RecordBatch, EngineError> {
        let encoded = self.codec.key.convert_columns(keys)?;
        let mut found: Vec<(&[u8], &Row)> = (0..encoded.num_rows())
            .filter_map(|i| self.rows.get_key_value(encoded.row(i).as_ref()))
            .map(|(k, row)| (k.as_ref(), row))
            .collect();
        found.sort_unstable_by(|a, b| a.0.cmp(b.0));
        found.dedup_by(|a, b| a.0 == b.0);
        self.decode(found.into_iter().map(|(_, row)| row))
    }

    /// The stored rows whose single-column key lies between `lower` and
    /// `upper` (each a one-value array of the key column's type), in key
    /// order: a primary-key range scan, O(log rows + rows in range). The
    /// row format orders keys as their values, so a byte range is the value
    /// range. `None` if the key has more than one column.
    pub fn rows_in_key_range(
        &self,
        lower: Bound<&ArrayRef>,
        upper: Bound<&ArrayRef>,
    ) -> Result<Option<Vec<RecordBatch>>, EngineError> {
        if self.key_columns.len() != 1 {
            return Ok(None);
        }
        let encode = |bound: Bound<&ArrayRef>| -> Result<Bound<Key>, EngineError> {
            Ok(match bound {
                Bound::Unbounded => Bound::Unbounded,
                Bound::Included(v) | Bound::Excluded(v) => {
                    let rows = self.codec.key.convert_columns(std::slice::from_ref(v))?;
                    let key: Key = rows.row(0).as_ref().into();
                    if matches!(bound, Bound::Included(_)) {
                        Bound::Included(key)
                    } else {
                        Bound::Excluded(key)
                    }
                }
            })
        };
        let (lower, upper) = (encode(lower)?, encode(upper)?);
        if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(u) | Bound::Excluded(u)) =
            (&lower, &upper)
            && (l > u
                || (l == u
                    && !matches!((&lower, &upper), (Bound::Included(_), Bound::Included(_)))))
        {
            // An empty range: OrdMap::range panics when start > end.
            return Ok(Some(vec![self.decode(std::iter::empty())?]));
        }
        let mut batches = Vec::new();
        let mut chunk: Vec<&Row> = Vec::new();
        for (_, row) in self.rows.range((lower, upper)) {
            chunk.push(row);
            if chunk.len() == SCAN_BATCH_ROWS {
                batches.push(self.decode(chunk.drain(..))?);
            }
        }
        if !chunk.is_empty() || batches.is_empty() {
            batches.push(self.decode(chunk.drain(..))?);
        }
        Ok(Some(batches))
    }

    /// The encoded key of every row of `batch` (same schema as the table);
    /// equal keys have equal bytes.
    pub fn keys(&self, batch: &RecordBatch) -> Result<Vec<Key>, EngineError> {
        let (_, keys) = self.encode(batch)?;
        Ok((0..batch.num_rows())
            .map(|i| keys.row(i).as_ref().into())
            .collect())
    }

    /// The key of row `i` of `batch`, as text for error messages.
    pub fn describe_key(&self, batch: &RecordBatch, i: usize) -> String {
        let indices = UInt32Array::from(vec![i as u32]);
        self.key_columns
            .iter()
            .map(|&c| {
                take(batch.column(c).as_ref(), &indices, None)
                    .ok()
                    .and_then(|a| arrow::util::display::array_value_to_string(&a, 0).ok())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn decode<'a>(&self, rows: impl Iterator<Item = &'a Row>) -> Result<RecordBatch, EngineError> {
        let parser = self.codec.row.parser();
        let columns = self
            .codec
            .row
            .convert_rows(rows.map(|r| parser.parse(r.as_ref())))?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// The whole table as Arrow batches, in key order. Built once per version.
    pub fn scan(&self) -> Result<Arc<Vec<RecordBatch>>, EngineError> {
        if let Some(cached) = self.scan_cache.get() {
            return Ok(cached.clone());
        }
        let mut batches = Vec::new();
        let mut chunk: Vec<&Row> = Vec::with_capacity(SCAN_BATCH_ROWS);
        for row in self.rows.values() {
            chunk.push(row);
            if chunk.len() == SCAN_BATCH_ROWS {
                batches.push(self.decode(chunk.drain(..))?);
            }
        }
        if !chunk.is_empty() || batches.is_empty() {
            batches.push(self.decode(chunk.drain(..))?);
        }
        let batches = Arc::new(batches);
        let _ = self.scan_cache.set(batches.clone());
        Ok(batches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn accounts(rows: &[(i64, &str)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("owner", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    fn contents(state: &TableState) -> Vec<(i64, String)> {
        let mut out = Vec::new();
        for batch in state.scan().unwrap().iter() {
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let owners = batch
                .column(1)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            for i in 0..batch.num_rows() {
                out.push((ids.value(i), owners.value(i).to_string()));
            }
        }
        out
    }

    #[test]
    fn insert_update_delete_and_snapshots_stay_put() {
        let mut state = TableState::new(accounts(&[]).schema(), vec![0]).unwrap();
        state
            .apply(&ChangeBatch::inserts(accounts(&[(2, "bo"), (1, "al")])))
            .unwrap();
        let before = state.clone();
        let update = ChangeBatch::new(
            accounts(&[(1, "al"), (1, "alice")]),
            Int64Array::from(vec![-1, 1]),
        )
        .unwrap();
        state.apply(&update).unwrap();
        state
            .apply(&ChangeBatch::retractions(accounts(&[(2, "bo")])))
            .unwrap();
        assert_eq!(contents(&state), vec![(1, "alice".into())]);
        assert_eq!(contents(&before), vec![(1, "al".into()), (2, "bo".into())]);
    }

    #[test]
    fn duplicate_key_leaves_the_state_unchanged() {
        let mut state = TableState::new(accounts(&[]).schema(), vec![0]).unwrap();
        state
            .apply(&ChangeBatch::inserts(accounts(&[(1, "al")])))
            .unwrap();
        let err = state
            .apply(&ChangeBatch::inserts(accounts(&[(3, "cy"), (1, "again")])))
            .unwrap_err();
        assert!(matches!(err, EngineError::DuplicateKey { ref key } if key == "1"));
        assert_eq!(contents(&state), vec![(1, "al".into())]);
    }

    #[test]
    fn lookup_finds_existing_rows_by_key() {
        let mut state = TableState::new(accounts(&[]).schema(), vec![0]).unwrap();
        state
            .apply(&ChangeBatch::inserts(accounts(&[(1, "al"), (2, "bo")])))
            .unwrap();
        let (positions, found) = state.lookup(&accounts(&[(2, "x"), (5, "y")])).unwrap();
        assert_eq!(positions, vec![Some(0), None]);
        assert_eq!(found.num_rows(), 1);
    }
}
