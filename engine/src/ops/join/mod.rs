//! [`Join`]: equi-joins (inner, left, right, full outer, left semi, left
//! anti, `NOT IN`) with an optional residual predicate, correct under
//! retractions.
//!
//! - [`delta`]: every kind but `NOT IN`, in O(change): an epoch's output is
//!   `ΔL ⋈ R + L' ⋈ ΔR` over hash buckets of both sides, with per-row match
//!   counts for the kinds that output unmatched rows.
//! - [`buckets`]: `NOT IN`, whose answer for one left row depends on the
//!   whole right side (is it empty? does it hold a NULL?); it recomputes the
//!   changed buckets, and all of them when either fact flips.
//!
//! A row whose key has a NULL matches nothing, as in SQL. Keys compare by
//! value (`-0.0 = 0.0`, `NaN = NaN`), as DataFusion's own joins do.

mod buckets;
mod delta;
mod expiry;
mod side_rows;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::{cast, take};
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::operator::{Operator, StateEntry};
use crate::ops::parallel::{Keyed, not_shardable};
use crate::rows::{RowBytes, RowCodec, batch_of};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// Left rows with at least one match (`EXISTS`, `IN`).
    Semi,
    /// Left rows with no match (`NOT EXISTS`).
    Anti,
    /// `NOT IN`: left rows with no match, where NULL keys are unknown: all
    /// left rows if the right side is empty; none if it has a NULL key;
    /// else the left rows with a non-NULL key and no match.
    NullAwareAnti,
}

impl JoinKind {
    /// Every kind whose state is split by key (all but `NOT IN`), for
    /// tests that cover each.
    pub const KEYED: [JoinKind; 6] = [
        Self::Inner,
        Self::Left,
        Self::Right,
        Self::Full,
        Self::Semi,
        Self::Anti,
    ];

    pub(crate) fn keeps_unmatched_left(self) -> bool {
        matches!(self, Self::Left | Self::Full)
    }
    pub(crate) fn keeps_unmatched_right(self) -> bool {
        matches!(self, Self::Right | Self::Full)
    }
    /// Semi and anti joins output left rows only.
    pub(crate) fn outputs_left_only(self) -> bool {
        matches!(self, Self::Semi | Self::Anti | Self::NullAwareAnti)
    }
}

#[derive(Clone)]
pub struct JoinSpec {
    pub kind: JoinKind,
    pub left_schema: SchemaRef,
    pub right_schema: SchemaRef,
    /// Pairs of equal expressions, left over the left input, right over the right.
    pub on: Vec<(Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>)>,
    /// Over the left columns followed by the right columns.
    pub residual: Option<Arc<dyn PhysicalExpr>>,
    /// Left then right columns (left only for semi and anti joins).
    pub output_schema: SchemaRef,
}

/// A join operator: [`delta::DeltaJoin`], or [`buckets::BucketJoin`] for
/// `NOT IN`.
pub struct Join(Box<dyn Keyed>);

impl Join {
    pub fn new(spec: JoinSpec) -> Result<Self, EngineError> {
        Ok(Self(if spec.kind == JoinKind::NullAwareAnti {
            Box::new(buckets::BucketJoin::new(spec)?)
        } else {
            Box::new(delta::DeltaJoin::new(spec)?)
        }))
    }

    /// A window join closing by key `key` of `spec.on`
    /// ([`window_key`] found it; [`expiry`] says what closing does).
    pub fn window_join(spec: JoinSpec, key: usize, closing: Closing) -> Result<Self, EngineError> {
        let closer = expiry::Closer::Key { key, closing };
        Ok(Self(Box::new(
            delta::DeltaJoin::new(spec)?.closing_by(closer),
        )))
    }

    /// An interval join: rows go once no row of the other side within
    /// `band` can still come ([`Band`]).
    pub fn interval_join(spec: JoinSpec, band: Band) -> Result<Self, EngineError> {
        let closer = expiry::Closer::Band(band);
        Ok(Self(Box::new(
            delta::DeltaJoin::new(spec)?.closing_by(closer),
        )))
    }
}

pub use expiry::{Band, Closing, window_key};

impl Operator for Join {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn output_schema(&self) -> SchemaRef {
        self.0.output_schema()
    }
    fn structure(&self) -> String {
        self.0.structure()
    }
    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        self.0.step(inputs)
    }
    fn watermarks(
        &mut self,
        inputs: &[crate::watermark::Watermarks],
    ) -> Result<crate::watermark::Watermarks, EngineError> {
        self.0.watermarks(inputs)
    }
    fn take_late_rows(&mut self) -> u64 {
        self.0.take_late_rows()
    }
    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        self.0.take_state_changes()
    }
    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        self.0.state_entries()
    }
    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        self.0.apply_state_entries(entries)
    }
}

impl Keyed for Join {
    fn shardable(&self) -> bool {
        self.0.shardable()
    }
    fn distribution_keys(
        &self,
        input: usize,
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        self.0.distribution_keys(input, rows)
    }
    fn keys_in_output(&self) -> bool {
        self.0.keys_in_output()
    }
}

impl JoinSpec {
    /// [`Operator::structure`] of a join of this spec, `name` carrying the
    /// implementation's state layout.
    fn structure(&self, name: &str) -> String {
        use crate::operator::{exprs_text, schema_text};
        let on: Vec<String> = self.on.iter().map(|(l, r)| format!("{l} = {r}")).collect();
        format!(
            "{name}({:?}; on {}; residual {}; left {}; right {}; out {})",
            self.kind,
            on.join(" AND "),
            exprs_text(&self.residual),
            schema_text(&self.left_schema),
            schema_text(&self.right_schema),
            schema_text(&self.output_schema)
        )
    }
}

/// What both implementations share: the codecs of each side, of the key
/// and of the output, and the joined schema the residual reads.
struct Sides {
    left: RowCodec,
    right: RowCodec,
    key: Option<RowCodec>,
    /// Left and right columns, all nullable: what the residual reads.
    joined: SchemaRef,
    output: RowCodec,
}

impl Sides {
    fn new(spec: &JoinSpec) -> Result<Self, EngineError> {
        let key = if spec.on.is_empty() {
            None
        } else {
            let fields: Vec<Field> = spec
                .on
                .iter()
                .enumerate()
                .map(|(i, (l, _))| {
                    Ok(Field::new(
                        format!("k{i}"),
                        l.data_type(&spec.left_schema)?,
                        true,
                    ))
                })
                .collect::<Result<_, EngineError>>()?;
            Some(RowCodec::new(Arc::new(Schema::new(fields)))?)
        };
        let joined: Vec<Field> = spec
            .left_schema
            .fields()
            .iter()
            .chain(spec.right_schema.fields())
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        Ok(Self {
            left: RowCodec::new(spec.left_schema.clone())?,
            right: RowCodec::new(spec.right_schema.clone())?,
            output: RowCodec::new(spec.output_schema.clone())?,
            joined: Arc::new(Schema::new(joined)),
            key,
        })
    }

    /// The join key of every row of one side; `None` for a key with a NULL
    /// (it matches nothing). A join without equi keys has one empty key.
    fn keys_of(
        &self,
        spec: &JoinSpec,
        rows: &RecordBatch,
        left: bool,
    ) -> Result<Vec<Option<RowBytes>>, EngineError> {
        let Some((codec, columns)) = self.key_columns(spec, rows, left)? else {
            return Ok(vec![Some(RowBytes::from(&[][..])); rows.num_rows()]);
        };
        let encoded = codec.encode_keys(&columns)?;
        Ok(encoded
            .into_iter()
            .enumerate()
            .map(|(i, key)| columns.iter().all(|c| c.is_valid(i)).then_some(key))
            .collect())
    }

    /// The key columns of one side's rows, cast to the key codec's types
    /// (`None` for a join without equi keys).
    fn key_columns(
        &self,
        spec: &JoinSpec,
        rows: &RecordBatch,
        left: bool,
    ) -> Result<Option<(&RowCodec, Vec<ArrayRef>)>, EngineError> {
        let Some(codec) = &self.key else {
            return Ok(None);
        };
        let columns = spec
            .on
            .iter()
            .zip(codec.schema().fields())
            .map(|((l, r), field)| {
                let expr = if left { l } else { r };
                let array = expr.evaluate(rows)?.into_array(rows.num_rows())?;
                Ok(cast(&array, field.data_type())?)
            })
            .collect::<Result<Vec<ArrayRef>, EngineError>>()?;
        Ok(Some((codec, columns)))
    }

    /// Every row's join key as [`RowCodec::encode_keys`] encodes it, in
    /// one buffer: the distribution key of the row's state. A key with a
    /// NULL gets its bytes too (its row keeps no state; it only needs a
    /// worker, the same one for equal rows).
    fn distribution_keys(
        &self,
        spec: &JoinSpec,
        rows: &RecordBatch,
        left: bool,
    ) -> Result<arrow::row::Rows, EngineError> {
        let (codec, columns) = self
            .key_columns(spec, rows, left)?
            .ok_or_else(|| not_shardable("join"))?;
        codec.encode_buffer(&columns, true)
    }

    /// Left rows `li` beside right rows `ri`, in the joined schema; a
    /// missing side is all NULL.
    fn combine(
        &self,
        left: &RecordBatch,
        li: Option<&UInt32Array>,
        right: &RecordBatch,
        ri: Option<&UInt32Array>,
        len: usize,
    ) -> Result<RecordBatch, EngineError> {
        let side = |batch: &RecordBatch,
                    idx: Option<&UInt32Array>|
         -> Result<Vec<ArrayRef>, EngineError> {
            batch
                .columns()
                .iter()
                .map(|c| match idx {
                    Some(idx) => Ok(take(c.as_ref(), idx, None)?),
                    None => Ok(new_null_array(c.data_type(), len)),
                })
                .collect()
        };
        let mut columns = side(left, li)?;
        columns.extend(side(right, ri)?);
        batch_of(&self.joined, columns, len)
    }
}

fn take_rows(batch: &RecordBatch, rows: &UInt32Array) -> Result<RecordBatch, EngineError> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), rows, None))
        .collect::<Result<Vec<_>, _>>()?;
    batch_of(&batch.schema(), columns, rows.len())
}

/// The same columns under the output's names and nullability.
fn rebind(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, EngineError> {
    batch_of(schema, batch.columns().to_vec(), batch.num_rows())
}
