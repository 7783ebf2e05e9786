//! [`TableState`]: a table's rows keyed by primary key.
//!
//! Rows are stored in Arrow's row format (`arrow_row`), keyed by the row
//! format of their key columns, in a persistent ordered map. Cloning a state
//! is O(1), which gives snapshot reads and transaction overlays for free: a
//! reader keeps its clone while writers build the next version.
//!
//! Tables without a declared primary key carry a hidden row-id column that
//! the caller fills; it is then the key. Secondary indexes (unique
//! constraints, `CREATE INDEX`) are kept in step by every write: see
//! `table_index`.

use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use weir_common::ChangeBatch;

use crate::EngineError;

/// Rows per batch when a state is read back as Arrow.
const SCAN_BATCH_ROWS: usize = 8192;

// Keys up to 24 encoded bytes (a `bigint` key takes 9, a `uuid` 17) live
// inside the map's nodes: a lookup's binary search then compares bytes it
// already has instead of following a pointer per probe.
pub use crate::table_index::IndexSpec;
use crate::table_index::Key;
use crate::table_index::{SecondaryIndex, describe, has_null};

type Row = Arc<[u8]>;

#[derive(Clone)]
pub struct TableState {
    schema: SchemaRef,
    key_columns: Arc<[usize]>,
    rows: imbl::OrdMap<Key, Row>,
    codec: Arc<Codec>,
    /// Secondary indexes, kept in step with `rows` by every write.
    indexes: Vec<SecondaryIndex>,
    /// The rows as Arrow batches, built on first read of this version.
    scan_cache: Arc<OnceLock<Arc<Vec<RecordBatch>>>>,
}

struct Codec {
    row: RowConverter,
    key: RowConverter,
}

fn unique_violation(spec: &IndexSpec, batch: &RecordBatch, i: usize) -> EngineError {
    let (columns, values) = describe(batch, &spec.columns, i);
    EngineError::UniqueViolation {
        index: spec.name.clone(),
        columns,
        values,
    }
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
            indexes: Vec::new(),
            scan_cache: Arc::default(),
        })
    }

    /// The same rows with exactly these secondary indexes: an index already
    /// kept is reused, a new one is built from the rows (O(rows log rows)).
    /// With `check_unique`, a new unique index over rows that share a key
    /// is `UniqueViolation`.
    pub fn with_indexes(
        mut self,
        specs: &[IndexSpec],
        check_unique: bool,
    ) -> Result<Self, EngineError> {
        let mut indexes = Vec::with_capacity(specs.len());
        for spec in specs {
            if let Some(kept) = self.indexes.iter().find(|i| i.spec.as_ref() == spec) {
                indexes.push(kept.clone());
                continue;
            }
            let mut index = SecondaryIndex::new(&self.schema, spec.clone())?;
            for batch in self.scan()?.iter() {
                let keys = self.encode(batch)?.1;
                let index_keys = index.encode(batch)?;
                for i in 0..batch.num_rows() {
                    let null = has_null(batch, &spec.columns, i);
                    if index
                        .insert(
                            index_keys.row(i).as_ref(),
                            keys.row(i).as_ref(),
                            null,
                            check_unique,
                        )
                        .is_err()
                    {
                        return Err(unique_violation(spec, batch, i));
                    }
                }
            }
            indexes.push(index);
        }
        self.indexes = indexes;
        Ok(self)
    }

    /// The secondary indexes, in the order given to [`Self::with_indexes`].
    pub fn index_specs(&self) -> impl Iterator<Item = &IndexSpec> {
        self.indexes.iter().map(|i| i.spec.as_ref())
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

    /// Whether `other` is the very same version as `self`: no write in
    /// between, and the same secondary indexes.
    pub fn same_version(&self, other: &TableState) -> bool {
        self.rows.ptr_eq(&other.rows) && self.index_specs().eq(other.index_specs())
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
    ///
    /// Secondary indexes follow; an insertion whose key a unique index
    /// already has (no NULL in it) is `UniqueViolation`.
    pub fn apply(&mut self, change: &ChangeBatch) -> Result<(), EngineError> {
        self.apply_checked(change, true)
    }

    /// [`Self::apply`] without the unique indexes' check: for replaying
    /// writes that were checked when they committed, possibly before a
    /// unique index that now exists was created.
    pub fn apply_unchecked(&mut self, change: &ChangeBatch) -> Result<(), EngineError> {
        self.apply_checked(change, false)
    }

    fn apply_checked(
        &mut self,
        change: &ChangeBatch,
        check_unique: bool,
    ) -> Result<(), EngineError> {
        if change.is_empty() {
            return Ok(());
        }
        let (rows, keys) = self.encode(change.rows())?;
        let mut next = self.rows.clone();
        let mut removed: Vec<Row> = Vec::new();
        let weights = change.weights().values();
        for (i, &w) in weights.iter().enumerate() {
            if w < 0
                && let Some(old) = next.remove(keys.row(i).as_ref())
                && !self.indexes.is_empty()
            {
                removed.push(old);
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
        if !self.indexes.is_empty() {
            let mut indexes = self.indexes.clone();
            // The index keys of a removed row come from the row as stored,
            // not from the retraction, so the index cannot drift from it.
            if !removed.is_empty() {
                let old = self.decode(removed.iter())?;
                let (_, old_keys) = self.encode(&old)?;
                for index in &mut indexes {
                    let index_keys = index.encode(&old)?;
                    for i in 0..old.num_rows() {
                        index.remove(index_keys.row(i).as_ref(), old_keys.row(i).as_ref());
                    }
                }
            }
            let batch = change.rows();
            for index in &mut indexes {
                let index_keys = index.encode(batch)?;
                for (i, &w) in weights.iter().enumerate() {
                    if w <= 0 {
                        continue;
                    }
                    let null = has_null(batch, &index.spec.columns, i);
                    if index
                        .insert(
                            index_keys.row(i).as_ref(),
                            keys.row(i).as_ref(),
                            null,
                            check_unique,
                        )
                        .is_err()
                    {
                        return Err(unique_violation(&index.spec, batch, i));
                    }
                }
            }
            self.indexes = indexes;
        }
        self.rows = next;
        self.scan_cache = Arc::default();
        Ok(())
    }

    /// The stored rows whose `columns` hold one of the value rows given
    /// (one array per column, in the order of `columns`), each once, in
    /// the order of the primary key or index used. `columns` must be the
    /// primary key or a secondary index's columns, in their order;
    /// otherwise `None` (the caller scans). A value row with a NULL
    /// matches nothing, as `=` does.
    pub fn rows_matching(
        &self,
        columns: &[usize],
        values: &[ArrayRef],
    ) -> Result<Option<RecordBatch>, EngineError> {
        if columns == self.key_columns.as_ref() {
            let rows = values.first().map_or(0, |v| v.len());
            let non_null: Vec<u32> = (0..rows)
                .filter(|&i| values.iter().all(|v| v.is_valid(i)))
                .map(|i| i as u32)
                .collect();
            let indices = UInt32Array::from(non_null);
            let values = values
                .iter()
                .map(|v| take(v.as_ref(), &indices, None))
                .collect::<Result<Vec<_>, _>>()?;
            return self.rows_with_keys(&values).map(Some);
        }
        let Some(index) = self.indexes.iter().find(|i| i.spec.columns == columns) else {
            return Ok(None);
        };
        let encoded = index.encode_values(values)?;
        let rows = values.first().map_or(0, |v| v.len());
        let mut found: Vec<&Key> = Vec::new();
        for i in 0..rows {
            if values.iter().any(|v| v.is_null(i)) {
                continue;
            }
            found.extend(index.primary_keys(encoded.row(i).as_ref()));
        }
        found.sort_unstable();
        found.dedup();
        let rows: Vec<&Row> = found
            .iter()
            .filter_map(|k| self.rows.get(k.as_slice()))
            .collect();
        self.decode(rows.into_iter()).map(Some)
    }

    /// [`Self::lookup`] through the primary key (`columns` = the key
    /// columns) or a secondary index over exactly `columns`: for each row
    /// of `candidates`, the position in the returned batch of the stored
    /// row with the same values there (none for a row with a NULL in
    /// them). `None` if no index covers `columns`.
    pub fn lookup_by(
        &self,
        columns: &[usize],
        candidates: &RecordBatch,
    ) -> Result<Option<(Vec<Option<u32>>, RecordBatch)>, EngineError> {
        if columns == self.key_columns.as_ref() {
            return self.lookup(candidates).map(Some);
        }
        let Some(index) = self.indexes.iter().find(|i| i.spec.columns == columns) else {
            return Ok(None);
        };
        self.check_schema(candidates)?;
        let keys = index.encode(candidates)?;
        let mut found: Vec<Row> = Vec::new();
        let mut positions = Vec::with_capacity(candidates.num_rows());
        for i in 0..candidates.num_rows() {
            let row = if has_null(candidates, columns, i) {
                None
            } else {
                index
                    .first(keys.row(i).as_ref())
                    .and_then(|pk| self.rows.get(pk.as_slice()))
            };
            match row {
                Some(row) => {
                    positions.push(Some(found.len() as u32));
                    found.push(row.clone());
                }
                None => positions.push(None),
            }
        }
        Ok(Some((positions, self.decode(found.iter())?)))
    }

    /// The values of `columns` of every row of `batch` (table schema),
    /// encoded so equal values have equal bytes; `None` for a row with a
    /// NULL there (it equals nothing).
    pub fn values_by(
        &self,
        columns: &[usize],
        batch: &RecordBatch,
    ) -> Result<Vec<Option<Vec<u8>>>, EngineError> {
        let fields = columns
            .iter()
            .map(|&c| SortField::new(self.schema.field(c).data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let arrays: Vec<ArrayRef> = columns.iter().map(|&c| batch.column(c).clone()).collect();
        let rows = converter.convert_columns(&arrays)?;
        Ok((0..batch.num_rows())
            .map(|i| (!has_null(batch, columns, i)).then(|| rows.row(i).as_ref().to_vec()))
            .collect())
    }

    /// The column sets of the unique indexes (not the primary key).
    pub fn unique_index_columns(&self) -> Vec<Vec<usize>> {
        self.indexes
            .iter()
            .filter(|i| i.spec.unique)
            .map(|i| i.spec.columns.clone())
            .collect()
    }

    /// For each value row given (one array per column of `columns`, in
    /// that order), whether a stored row holds it in `columns`; a value row
    /// with a NULL counts as found (a foreign key with a NULL in it refers
    /// to nothing, MATCH SIMPLE). `None` if `columns` are neither the
    /// primary key nor a secondary index's columns.
    pub fn contains_each(
        &self,
        columns: &[usize],
        values: &[ArrayRef],
    ) -> Result<Option<Vec<bool>>, EngineError> {
        let rows = values.first().map_or(0, |v| v.len());
        let null = |i: usize| values.iter().any(|v| v.is_null(i));
        if columns == self.key_columns.as_ref() {
            let keys = self.codec.key.convert_columns(values)?;
            return Ok(Some(
                (0..rows)
                    .map(|i| null(i) || self.rows.contains_key(keys.row(i).as_ref()))
                    .collect(),
            ));
        }
        let Some(index) = self.indexes.iter().find(|i| i.spec.columns == columns) else {
            return Ok(None);
        };
        let keys = index.encode_values(values)?;
        Ok(Some(
            (0..rows)
                .map(|i| null(i) || index.first(keys.row(i).as_ref()).is_some())
                .collect(),
        ))
    }

    /// The stored rows whose single-column secondary index over `column`
    /// has a key in the range, in index order; `None` if no secondary
    /// index starts with exactly that one column.
    pub fn rows_in_index_range(
        &self,
        column: usize,
        lower: Bound<&ArrayRef>,
        upper: Bound<&ArrayRef>,
    ) -> Result<Option<RecordBatch>, EngineError> {
        let Some(index) = self.indexes.iter().find(|i| i.spec.columns == [column]) else {
            return Ok(None);
        };
        let encode = |bound: Bound<&ArrayRef>| -> Result<Bound<Key>, EngineError> {
            Ok(match bound {
                Bound::Unbounded => Bound::Unbounded,
                Bound::Included(v) => Bound::Included(
                    index
                        .encode_values(std::slice::from_ref(v))?
                        .row(0)
                        .as_ref()
                        .into(),
                ),
                Bound::Excluded(v) => Bound::Excluded(
                    index
                        .encode_values(std::slice::from_ref(v))?
                        .row(0)
                        .as_ref()
                        .into(),
                ),
            })
        };
        let (lower, upper) = (encode(lower)?, encode(upper)?);
        let rows: Vec<&Row> = index
            .primary_keys_in(lower, upper)
            .filter_map(|k| self.rows.get(k.as_slice()))
            .collect();
        self.decode(rows.into_iter()).map(Some)
    }

    /// Removes every row.
    pub fn clear(&mut self) {
        self.rows = imbl::OrdMap::new();
        for index in &mut self.indexes {
            index.clear();
        }
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
        describe(batch, &self.key_columns, i).1
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

    fn with_email(rows: &[(i64, Option<&str>)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("email", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    fn unique_email() -> Vec<IndexSpec> {
        vec![IndexSpec {
            name: "t_email_key".into(),
            columns: vec![1],
            unique: true,
        }]
    }

    #[test]
    fn a_unique_index_refuses_a_repeated_value_but_not_nulls() {
        let mut state = TableState::new(with_email(&[]).schema(), vec![0])
            .unwrap()
            .with_indexes(&unique_email(), true)
            .unwrap();
        state
            .apply(&ChangeBatch::inserts(with_email(&[
                (1, Some("a")),
                (2, None),
                (3, None),
            ])))
            .unwrap();
        let before = state.clone();
        let err = state
            .apply(&ChangeBatch::inserts(with_email(&[
                (4, Some("b")),
                (5, Some("a")),
            ])))
            .unwrap_err();
        assert!(
            matches!(&err, EngineError::UniqueViolation { index, values, .. } if index == "t_email_key" && values == "a"),
            "{err}"
        );
        assert!(state.same_version(&before), "unchanged on error");
        // Within one change: two new rows with the same value.
        assert!(
            state
                .apply(&ChangeBatch::inserts(with_email(&[
                    (6, Some("c")),
                    (7, Some("c"))
                ])))
                .is_err()
        );
        // Moving a value from one row to another in one change is fine:
        // the retraction frees it first.
        let moved = ChangeBatch::new(
            with_email(&[(1, Some("a")), (2, None), (1, Some("z")), (2, Some("a"))]),
            Int64Array::from(vec![-1, -1, 1, 1]),
        )
        .unwrap();
        state.apply(&moved).unwrap();
        let found = state
            .rows_matching(
                &[1],
                &[Arc::new(StringArray::from(vec!["a", "z", "q"])) as ArrayRef],
            )
            .unwrap()
            .unwrap();
        let ids = found
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values().to_vec(), vec![1, 2]);
        assert_eq!(
            state
                .contains_each(
                    &[1],
                    &[Arc::new(StringArray::from(vec![Some("a"), Some("c"), None])) as ArrayRef]
                )
                .unwrap()
                .unwrap(),
            vec![true, false, true],
            "a NULL value row counts as found"
        );
    }

    #[test]
    fn replay_keeps_indexes_without_checking_and_building_one_checks() {
        let mut state = TableState::new(with_email(&[]).schema(), vec![0])
            .unwrap()
            .with_indexes(&unique_email(), true)
            .unwrap();
        state
            .apply_unchecked(&ChangeBatch::inserts(with_email(&[
                (1, Some("a")),
                (2, Some("a")),
            ])))
            .unwrap();
        state
            .apply(&ChangeBatch::retractions(with_email(&[(2, Some("a"))])))
            .unwrap();
        assert!(
            state
                .apply(&ChangeBatch::inserts(with_email(&[(3, Some("a"))])))
                .is_err(),
            "the index still holds row 1's value"
        );
        let plain = TableState::new(with_email(&[]).schema(), vec![0]).unwrap();
        let mut plain = plain;
        plain
            .apply(&ChangeBatch::inserts(with_email(&[
                (1, Some("a")),
                (2, Some("a")),
            ])))
            .unwrap();
        assert!(plain.clone().with_indexes(&unique_email(), true).is_err());
        let indexed = plain.with_indexes(&unique_email(), false).unwrap();
        let (positions, _) = indexed
            .lookup_by(&[1], &with_email(&[(9, Some("a")), (9, Some("x"))]))
            .unwrap()
            .unwrap();
        assert_eq!(positions, vec![Some(0), None]);
        let range = indexed
            .rows_in_index_range(
                1,
                Bound::Included(&(Arc::new(StringArray::from(vec!["a"])) as ArrayRef)),
                Bound::Unbounded,
            )
            .unwrap()
            .unwrap();
        assert_eq!(range.num_rows(), 2);
    }
}
