//! Secondary indexes of a [`crate::TableState`]: UNIQUE constraints,
//! `CREATE INDEX`, and the columns a foreign key references or is made of.
//!
//! An index is an ordered set of `(index key, primary key)` pairs, both in
//! Arrow's row format, so equal index keys sit next to each other and a
//! lookup is a range over one index key. It lives in a persistent set like
//! the rows, so cloning a table (a snapshot, a transaction's overlay) stays
//! O(1). Rows whose index columns hold a NULL are indexed too but never
//! conflict: PostgreSQL's UNIQUE treats NULLs as distinct.

use std::ops::Bound;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};

use crate::EngineError;

pub(crate) type Key = smallvec::SmallVec<[u8; 24]>;

/// What to index: a name for errors, columns by position in the table's
/// schema, and whether two rows may share a (non-NULL) key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    pub name: String,
    pub columns: Vec<usize>,
    pub unique: bool,
}

#[derive(Clone)]
pub(crate) struct SecondaryIndex {
    pub spec: Arc<IndexSpec>,
    codec: Arc<RowConverter>,
    entries: imbl::OrdSet<(Key, Key)>,
}

impl SecondaryIndex {
    pub fn new(schema: &SchemaRef, spec: IndexSpec) -> Result<Self, EngineError> {
        let fields = spec
            .columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect();
        Ok(Self {
            codec: Arc::new(RowConverter::new(fields)?),
            spec: Arc::new(spec),
            entries: imbl::OrdSet::new(),
        })
    }

    /// The index keys of every row of `batch` (the table's schema).
    pub fn encode(&self, batch: &RecordBatch) -> Result<Rows, EngineError> {
        let columns: Vec<ArrayRef> = self
            .spec
            .columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        Ok(self.codec.convert_columns(&columns)?)
    }

    /// Index keys of value rows given column by column, in index order.
    pub fn encode_values(&self, values: &[ArrayRef]) -> Result<Rows, EngineError> {
        Ok(self.codec.convert_columns(values)?)
    }

    pub fn remove(&mut self, index_key: &[u8], primary_key: &[u8]) {
        self.entries.remove(&(index_key.into(), primary_key.into()));
    }

    /// Adds an entry; `Err(())` if the index is unique, the key has no NULL
    /// and another row has it.
    pub fn insert(
        &mut self,
        index_key: &[u8],
        primary_key: &[u8],
        has_null: bool,
        check_unique: bool,
    ) -> Result<(), ()> {
        if self.spec.unique && check_unique && !has_null && self.first(index_key).is_some() {
            return Err(());
        }
        self.entries.insert((index_key.into(), primary_key.into()));
        Ok(())
    }

    /// The primary key of some row with this index key.
    pub fn first(&self, index_key: &[u8]) -> Option<&Key> {
        self.primary_keys(index_key).next()
    }

    /// The primary keys of every row with this index key, in order.
    pub fn primary_keys(&self, index_key: &[u8]) -> impl Iterator<Item = &Key> + '_ {
        let key: Key = index_key.into();
        let start: (Key, Key) = (key.clone(), Key::new());
        self.entries
            .range((Bound::Included(start), Bound::Unbounded))
            .take_while(move |(k, _)| *k == key)
            .map(|(_, pk)| pk)
    }

    /// The primary keys of every row whose index key lies in the range,
    /// in index order.
    pub fn primary_keys_in<'a>(
        &'a self,
        lower: Bound<Key>,
        upper: Bound<Key>,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        // Entries are (index key, primary key); the smallest pair with a
        // given index key has the empty primary key.
        let (start, skip) = match lower {
            Bound::Included(k) => (Bound::Included((k, Key::new())), None),
            Bound::Excluded(k) => (Bound::Included((k.clone(), Key::new())), Some(k)),
            Bound::Unbounded => (Bound::Unbounded, None),
        };
        self.entries
            .range((start, Bound::Unbounded))
            .skip_while(move |(k, _)| skip.as_ref() == Some(k))
            .take_while(move |(k, _)| match &upper {
                Bound::Included(u) => k <= u,
                Bound::Excluded(u) => k < u,
                Bound::Unbounded => true,
            })
            .map(|(_, pk)| pk)
    }

    pub fn clear(&mut self) {
        self.entries = imbl::OrdSet::new();
    }
}

/// Whether row `i` has a NULL in any of `columns`.
pub(crate) fn has_null(batch: &RecordBatch, columns: &[usize], i: usize) -> bool {
    columns.iter().any(|&c| batch.column(c).is_null(i))
}

/// `(a, b)=(1, x)`: the columns and values of row `i`, as PostgreSQL's
/// messages print a key.
pub(crate) fn describe(batch: &RecordBatch, columns: &[usize], i: usize) -> (String, String) {
    let indices = UInt32Array::from(vec![i as u32]);
    let names = columns
        .iter()
        .map(|&c| batch.schema().field(c).name().clone())
        .collect::<Vec<_>>()
        .join(", ");
    let values = columns
        .iter()
        .map(|&c| {
            take(batch.column(c).as_ref(), &indices, None)
                .ok()
                .and_then(|a| arrow::util::display::array_value_to_string(&a, 0).ok())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(", ");
    (names, values)
}
