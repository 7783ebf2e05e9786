//! Rows as bytes: [`RowCodec`] turns Arrow columns into `arrow_row` rows and
//! back, and [`consolidate`] sums the weights of equal rows.
//!
//! The row format is comparable bytewise and equal for equal values, so it
//! serves as the key of every hash and ordered map in the engine.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Float32Type, Float64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use weir_common::ChangeBatch;

use crate::EngineError;

/// `column` with its float values canonical: 0.0 for -0.0 and one NaN.
fn canonical_key(column: &ArrayRef) -> ArrayRef {
    match column.data_type() {
        DataType::Float64 => {
            let floats = column.as_primitive::<Float64Type>();
            Arc::new(floats.unary::<_, Float64Type>(|x| match x {
                _ if x.is_nan() => f64::NAN,
                _ if x == 0.0 => 0.0,
                _ => x,
            }))
        }
        DataType::Float32 => {
            let floats = column.as_primitive::<Float32Type>();
            Arc::new(floats.unary::<_, Float32Type>(|x| match x {
                _ if x.is_nan() => f32::NAN,
                _ if x == 0.0 => 0.0,
                _ => x,
            }))
        }
        _ => column.clone(),
    }
}

/// One encoded row (or key): cheap to clone, ordered like the values.
pub type RowBytes = Arc<[u8]>;

/// Encodes and decodes rows of one schema.
pub struct RowCodec {
    schema: SchemaRef,
    converter: RowConverter,
}

impl std::fmt::Debug for RowCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowCodec")
            .field("schema", &self.schema)
            .finish()
    }
}

impl RowCodec {
    pub fn new(schema: SchemaRef) -> Result<Self, EngineError> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            schema,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// One encoded row per row of `rows` (whose columns follow the codec's
    /// schema). Rows without columns (`count(*)` needs none) are all the
    /// same empty row, as many as the batch has: the row converter alone
    /// would see no column and count no rows.
    pub fn encode_rows(&self, rows: &RecordBatch) -> Result<Vec<RowBytes>, EngineError> {
        if rows.num_columns() == 0 {
            return Ok(vec![RowBytes::from(&[][..]); rows.num_rows()]);
        }
        self.encode(rows.columns())
    }

    /// One encoded key per row of `columns` (at least one column, following
    /// the codec's schema), for keys that SQL compares by value (group,
    /// join and partition keys): the row format compares floats by their
    /// bits, so -0.0 and 0.0, or two NaNs, would be different keys, while
    /// SQL (and DataFusion's own GROUP BY and joins) takes them as equal.
    pub fn encode_keys(&self, columns: &[ArrayRef]) -> Result<Vec<RowBytes>, EngineError> {
        let canonical: Vec<ArrayRef> = columns.iter().map(canonical_key).collect();
        self.encode(&canonical)
    }

    fn encode(&self, columns: &[ArrayRef]) -> Result<Vec<RowBytes>, EngineError> {
        let rows = self.converter.convert_columns(columns)?;
        Ok(rows.iter().map(|r| RowBytes::from(r.as_ref())).collect())
    }

    /// The rows of `columns` in one buffer, without an allocation per row:
    /// `rows.row(i).as_ref()` is row `i`'s bytes, as [`Self::encode_rows`]
    /// would give them (or as [`Self::encode_keys`] when `as_keys`).
    pub fn encode_buffer(
        &self,
        columns: &[ArrayRef],
        as_keys: bool,
    ) -> Result<arrow::row::Rows, EngineError> {
        Ok(if as_keys {
            let canonical: Vec<ArrayRef> = columns.iter().map(canonical_key).collect();
            self.converter.convert_columns(&canonical)?
        } else {
            self.converter.convert_columns(columns)?
        })
    }

    /// Decodes rows into one batch of the codec's schema.
    pub fn decode<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a RowBytes>,
    ) -> Result<RecordBatch, EngineError> {
        self.decode_bytes(rows.into_iter().map(|r| r.as_ref()))
    }

    /// [`Self::decode`] of rows given as byte slices.
    pub fn decode_bytes<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<RecordBatch, EngineError> {
        let parser = self.converter.parser();
        let rows: Vec<&[u8]> = rows.into_iter().collect();
        let num_rows = rows.len();
        let columns = self
            .converter
            .convert_rows(rows.into_iter().map(|r| parser.parse(r)))?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(num_rows)),
        )?)
    }

    /// Decodes `(row, weight)` pairs into a change batch.
    pub fn decode_change<'a>(
        &self,
        rows: impl IntoIterator<Item = (&'a RowBytes, i64)>,
    ) -> Result<ChangeBatch, EngineError> {
        let (rows, weights): (Vec<&RowBytes>, Vec<i64>) = rows.into_iter().unzip();
        let batch = self.decode(rows)?;
        Ok(ChangeBatch::new(batch, Int64Array::from(weights))?)
    }
}

impl RowCodec {
    /// The codec of the key `exprs` compute over rows of `schema` (a
    /// PARTITION BY), or `None` when there are none: every row then has
    /// the same empty key.
    pub fn of_key(
        exprs: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>],
        schema: &arrow::datatypes::Schema,
    ) -> Result<Option<Self>, EngineError> {
        if exprs.is_empty() {
            return Ok(None);
        }
        Self::of_exprs(exprs, schema).map(Some)
    }

    /// The codec of the values `exprs` compute over rows of `schema` (an
    /// aggregate call's arguments, a key), one nullable column each.
    pub fn of_exprs(
        exprs: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>],
        schema: &arrow::datatypes::Schema,
    ) -> Result<Self, EngineError> {
        let fields = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| {
                Ok(arrow::datatypes::Field::new(
                    format!("p{i}"),
                    e.data_type(schema)?,
                    true,
                ))
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        Self::new(Arc::new(arrow::datatypes::Schema::new(fields)))
    }

    /// The keys `exprs` (this codec's columns, from [`Self::of_key`])
    /// give the rows of `rows`, in one buffer, compared as SQL compares
    /// keys ([`Self::encode_keys`]).
    pub fn keys_of(
        &self,
        exprs: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>],
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        let columns = exprs
            .iter()
            .map(|e| Ok(e.evaluate(rows)?.into_array(rows.num_rows())?))
            .collect::<Result<Vec<ArrayRef>, EngineError>>()?;
        self.encode_buffer(&columns, true)
    }

    /// The consolidated change of `(row, weight)` pairs (empty when there are none).
    pub fn consolidated_change(
        &self,
        change: &[(RowBytes, i64)],
    ) -> Result<ChangeBatch, EngineError> {
        if change.is_empty() {
            return Ok(empty_change(&self.schema));
        }
        consolidate(&self.decode_change(change.iter().map(|(r, w)| (r, *w)))?)
    }
}

/// A batch of `schema` from `columns`; the explicit row count keeps batches
/// with no columns (and empty ones) well formed.
pub fn batch_of(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    num_rows: usize,
) -> Result<RecordBatch, EngineError> {
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(num_rows)),
    )?)
}

/// An empty change of `schema`.
pub fn empty_change(schema: &SchemaRef) -> ChangeBatch {
    ChangeBatch::inserts(RecordBatch::new_empty(schema.clone()))
}

/// Sums the weights of equal rows and drops rows whose weight is zero, keeping
/// the order in which rows first appear.
///
/// The rows are encoded into one buffer and hashed with hashbrown's
/// default (foldhash): no allocation per row, and no SipHash, whose DoS
/// resistance buys nothing for rows the engine itself encoded.
pub fn consolidate(change: &ChangeBatch) -> Result<ChangeBatch, EngineError> {
    if change.is_empty() {
        return Ok(change.clone());
    }
    let weights = change.weights().values();
    let mut order: Vec<(u32, i64)> = Vec::with_capacity(change.num_rows());
    if change.rows().num_columns() == 0 {
        // Rows without columns are all equal.
        let sum: i64 = weights.iter().sum();
        order.extend((sum != 0).then_some((0, sum)));
    } else {
        let codec = RowCodec::new(change.schema())?;
        let rows = codec.encode_buffer(change.rows().columns(), false)?;
        let mut first_seen: hashbrown::HashMap<&[u8], u32> =
            hashbrown::HashMap::with_capacity(rows.num_rows());
        for (i, row) in rows.iter().enumerate() {
            match first_seen.entry(row.data()) {
                hashbrown::hash_map::Entry::Occupied(slot) => {
                    order[*slot.get() as usize].1 += weights[i];
                }
                hashbrown::hash_map::Entry::Vacant(slot) => {
                    slot.insert(order.len() as u32);
                    order.push((i as u32, weights[i]));
                }
            }
        }
    }
    order.retain(|&(_, w)| w != 0);
    if order.len() == change.num_rows() {
        return Ok(change.clone());
    }
    let indices = UInt32Array::from_iter_values(order.iter().map(|&(i, _)| i));
    let columns = change
        .rows()
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), &indices, None))
        .collect::<Result<Vec<_>, _>>()?;
    let batch = RecordBatch::try_new_with_options(
        change.schema(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(order.len())),
    )?;
    Ok(ChangeBatch::new(
        batch,
        Int64Array::from_iter_values(order.iter().map(|&(_, w)| w)),
    )?)
}

/// `change` settled (see [`crate::Operator`]): consolidated if it
/// retracts anything; a change that only inserts is returned as it is.
///
/// Inserts cancel nothing, so merging equal inserted rows would only turn
/// `r +1, r +1` into `r +2`: the same bag, at the price of encoding and
/// hashing every row. Edges between operators carry changes settled this
/// way (the Operator contract allows repeated rows); operators that key
/// state by whole rows consolidate their input themselves.
pub fn settle(change: ChangeBatch) -> Result<ChangeBatch, EngineError> {
    if change.weights().values().iter().all(|&w| w > 0) {
        Ok(change)
    } else {
        consolidate(&change)
    }
}

/// Concatenates changes of one schema.
pub fn concat_changes(
    schema: &SchemaRef,
    changes: &[ChangeBatch],
) -> Result<ChangeBatch, EngineError> {
    let non_empty: Vec<&ChangeBatch> = changes.iter().filter(|c| !c.is_empty()).collect();
    match non_empty.as_slice() {
        [] => Ok(empty_change(schema)),
        [one] => Ok((*one).clone()),
        many => {
            let rows: Vec<RecordBatch> = many.iter().map(|c| c.rows().clone()).collect();
            let batch = arrow::compute::concat_batches(schema, &rows)?;
            let weights: Vec<i64> = many
                .iter()
                .flat_map(|c| c.weights().values().iter().copied())
                .collect();
            Ok(ChangeBatch::new(batch, Int64Array::from(weights))?)
        }
    }
}

/// Changes of one table, some written before its layout changed (`ALTER
/// TABLE`), in the columns of `schema` (what a projection reads), taken
/// by name, concatenated.
///
/// A column `schema` names that a change lacks (one added after the
/// change was written) is NULL there, and nullable in the result: such
/// old-layout rows reach a reader only as a rewrite's retraction of the
/// very rows it inserted, or rows the reader's plan never reads (the
/// `ALTER` refuses to run while a reader would), so the filler cancels out
/// or is never looked at. A column present with another type is an error.
pub fn conform_by_name(
    changes: &[&ChangeBatch],
    schema: &SchemaRef,
) -> Result<ChangeBatch, EngineError> {
    let mut filled = vec![false; schema.fields().len()];
    let mut parts: Vec<(Vec<ArrayRef>, &ChangeBatch)> = Vec::with_capacity(changes.len());
    for change in changes {
        let rows = change.rows();
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (i, field) in schema.fields().iter().enumerate() {
            match rows.schema().index_of(field.name()) {
                Ok(c) if rows.column(c).data_type() == field.data_type() => {
                    columns.push(rows.column(c).clone())
                }
                Ok(c) => {
                    return Err(EngineError::Invariant {
                        operator: "table input",
                        message: format!(
                            "column {} is {} in the table's change but {} where it is read",
                            field.name(),
                            rows.column(c).data_type(),
                            field.data_type()
                        ),
                    });
                }
                Err(_) => {
                    filled[i] = true;
                    columns.push(arrow::array::new_null_array(
                        field.data_type(),
                        rows.num_rows(),
                    ));
                }
            }
        }
        parts.push((columns, change));
    }
    let schema: SchemaRef = if filled.iter().any(|f| *f) {
        Arc::new(arrow::datatypes::Schema::new(
            schema
                .fields()
                .iter()
                .zip(&filled)
                .map(|(f, filled)| {
                    if *filled {
                        Arc::new(f.as_ref().clone().with_nullable(true))
                    } else {
                        f.clone()
                    }
                })
                .collect::<Vec<_>>(),
        ))
    } else {
        schema.clone()
    };
    let conformed = parts
        .into_iter()
        .map(|(columns, change)| {
            let rows = RecordBatch::try_new_with_options(
                schema.clone(),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(change.num_rows())),
            )?;
            Ok(ChangeBatch::new(rows, change.weights().clone())?)
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    concat_changes(&schema, &conformed)
}

/// A predicate's result as a filter: NULL counts as false, as in WHERE.
pub fn where_true(
    result: &arrow::array::ArrayRef,
) -> Result<arrow::array::BooleanArray, EngineError> {
    use arrow::array::{Array, AsArray};
    let Some(mask) = result.as_boolean_opt() else {
        return Err(EngineError::Invariant {
            operator: "predicate",
            message: format!("a predicate returned {}, not boolean", result.data_type()),
        });
    };
    Ok(if mask.null_count() == 0 {
        mask.clone()
    } else {
        arrow::compute::prep_null_mask_filter(mask)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{change, render};

    const ROWS: &str = "k int, a text";

    #[test]
    fn consolidate_sums_equal_rows_and_drops_zeros_in_first_seen_order() {
        let out = consolidate(&change(
            ROWS,
            "2 x +1; 1 y +1; 2 x +2; 1 y -1; null x +1; null x +1",
        ))
        .unwrap();
        assert_eq!(render(&out), vec!["2 x +3", "null x +2"]);
    }

    #[test]
    fn settle_leaves_inserts_alone_and_consolidates_a_change_that_retracts() {
        let inserts = change(ROWS, "1 x +1; 1 x +1; 2 y +1");
        assert_eq!(
            render(&settle(inserts).unwrap()),
            vec!["1 x +1", "1 x +1", "2 y +1"]
        );
        let undone = change(ROWS, "1 x +1; 2 y +1; 1 x -1");
        assert_eq!(render(&settle(undone).unwrap()), vec!["2 y +1"]);
    }

    #[test]
    fn conform_by_name_takes_the_columns_read_by_name_and_fills_missing_ones() {
        // A reader planned before the table gained `b`.
        let read = crate::testing::schema(ROWS);
        let wider = change("k int, b text, a text", "1 p x +1; 2 q y -1");
        let out = conform_by_name(&[&wider], &read).unwrap();
        assert_eq!(out.schema(), read);
        assert_eq!(render(&out), vec!["1 x +1", "2 y -1"]);
        // A reader planned after it, fed rows written before it too.
        let read = crate::testing::schema("k int, b text, a text");
        let older = change(ROWS, "1 x +1");
        let out = conform_by_name(&[&older, &wider], &read).unwrap();
        assert!(out.schema().field(1).is_nullable());
        assert_eq!(render(&out), vec!["1 null x +1", "1 p x +1", "2 q y -1"]);
        let retyped = change("k text, a text", "1 x +1");
        assert!(conform_by_name(&[&retyped], &crate::testing::schema(ROWS)).is_err());
    }
}
