//! The fallback strategy: a call with no incremental form is recomputed
//! from its group's rows with DataFusion's own accumulator, so a projection
//! computes exactly what the same query computes ad hoc (string_agg,
//! array_agg, stddev, ordered aggregates, ...). It costs O(rows of the
//! group) per changed group, and the group's rows are kept in state.

use arrow::array::RecordBatch;
use arrow::compute::{SortColumn, lexsort_to_indices, take_record_batch};
use datafusion::common::ScalarValue;

use super::calls::Call;
use crate::EngineError;

/// `call` over `batch`, one group's rows.
pub(super) fn evaluate(call: &Call, batch: &RecordBatch) -> Result<ScalarValue, EngineError> {
    let function = &call.call.function;
    // An ordered aggregate (`string_agg(x, ',' ORDER BY x)`) sees its rows
    // sorted, and its ordering values after its arguments, as DataFusion's
    // order-sensitive accumulators expect.
    let order_bys = function.order_bys();
    let sorted;
    let batch = if order_bys.is_empty() {
        batch
    } else {
        let keys = order_bys
            .iter()
            .map(|s| {
                Ok(SortColumn {
                    values: s.expr.evaluate(batch)?.into_array(batch.num_rows())?,
                    options: Some(s.options),
                })
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        let indices = lexsort_to_indices(&keys, None)?;
        sorted = take_record_batch(batch, &indices)?;
        &sorted
    };
    let args = function
        .expressions()
        .iter()
        .chain(order_bys.iter().map(|s| &s.expr))
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect::<Result<Vec<_>, _>>()?;
    let args = call.filter_args(batch, args)?;
    let mut accumulator = function.create_accumulator()?;
    accumulator.update_batch(&args)?;
    Ok(accumulator.evaluate()?)
}
