//! [`ChangeBatch`]: rows with Z-set weights.

use std::sync::Arc;

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;

/// Name of the weight column when a change batch is written as one record batch.
pub const WEIGHT_COLUMN: &str = "_weir_weight";

#[derive(Debug, thiserror::Error)]
pub enum ChangeBatchError {
    #[error("weight column has {weights} rows but the batch has {rows}")]
    LengthMismatch { weights: usize, rows: usize },
    #[error("weight column must be a non-null Int64 named {WEIGHT_COLUMN}")]
    BadWeightColumn,
    #[error(transparent)]
    Arrow(#[from] ArrowError),
}

/// Rows plus one non-null weight per row. Invariant: `weights.len() == rows.num_rows()`
/// and no weight is null.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    rows: RecordBatch,
    weights: Int64Array,
}

impl ChangeBatch {
    pub fn new(rows: RecordBatch, weights: Int64Array) -> Result<Self, ChangeBatchError> {
        if weights.len() != rows.num_rows() {
            return Err(ChangeBatchError::LengthMismatch {
                weights: weights.len(),
                rows: rows.num_rows(),
            });
        }
        if weights.null_count() > 0 {
            return Err(ChangeBatchError::BadWeightColumn);
        }
        Ok(Self { rows, weights })
    }

    /// Every row inserted once.
    pub fn inserts(rows: RecordBatch) -> Self {
        let weights = Int64Array::from(vec![1; rows.num_rows()]);
        Self { rows, weights }
    }

    /// Every row retracted once.
    pub fn retractions(rows: RecordBatch) -> Self {
        let weights = Int64Array::from(vec![-1; rows.num_rows()]);
        Self { rows, weights }
    }

    pub fn rows(&self) -> &RecordBatch {
        &self.rows
    }

    pub fn weights(&self) -> &Int64Array {
        &self.weights
    }

    pub fn num_rows(&self) -> usize {
        self.rows.num_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.num_rows() == 0
    }

    pub fn schema(&self) -> SchemaRef {
        self.rows.schema()
    }

    /// One record batch with the weight as the last column, for logs and the wire.
    pub fn to_record_batch(&self) -> Result<RecordBatch, ChangeBatchError> {
        let mut fields: Vec<Arc<Field>> = self.rows.schema().fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(WEIGHT_COLUMN, DataType::Int64, false)));
        let schema = Schema::new_with_metadata(fields, self.rows.schema().metadata().clone());
        let mut columns = self.rows.columns().to_vec();
        columns.push(Arc::new(self.weights.clone()));
        Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
    }

    /// Inverse of [`ChangeBatch::to_record_batch`].
    pub fn from_record_batch(batch: &RecordBatch) -> Result<Self, ChangeBatchError> {
        let n = batch.num_columns();
        let schema = batch.schema();
        if n == 0 || schema.field(n - 1).name() != WEIGHT_COLUMN {
            return Err(ChangeBatchError::BadWeightColumn);
        }
        let weights = batch
            .column(n - 1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or(ChangeBatchError::BadWeightColumn)?
            .clone();
        let rows = batch.project(&(0..n - 1).collect::<Vec<_>>())?;
        Self::new(rows, weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;

    #[test]
    fn round_trips_through_one_record_batch() {
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
        let rows = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["a", "b"]))])
            .unwrap();
        let change = ChangeBatch::new(rows, Int64Array::from(vec![1, -1])).unwrap();
        let back = ChangeBatch::from_record_batch(&change.to_record_batch().unwrap()).unwrap();
        assert_eq!(back.rows(), change.rows());
        assert_eq!(back.weights(), change.weights());
    }

    #[test]
    fn rejects_mismatched_weights() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, true)]));
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["a"]))]).unwrap();
        assert!(ChangeBatch::new(rows, Int64Array::from(vec![1, 1])).is_err());
    }
}
