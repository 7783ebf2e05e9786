//! [`Map`]: filter then project, with any DataFusion scalar expressions.
//! Linear: weights pass through unchanged.

use std::sync::Arc;

use arrow::array::AsArray;
use arrow::compute::{filter, filter_record_batch};
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::operator::{Operator, expect_inputs, expect_watermarks};
use crate::rows::{batch_of, empty_change, settle, where_true};
use crate::watermark::{Watermarks, derive, monotone_column};

pub struct Map {
    /// The input's columns (watermarks are evaluated through the
    /// projection over them).
    input: SchemaRef,
    /// Rows for which this is not true are dropped (SQL WHERE semantics).
    predicate: Option<Arc<dyn PhysicalExpr>>,
    /// One expression per output column, over the input.
    projection: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl Map {
    pub fn new(
        input: SchemaRef,
        predicate: Option<Arc<dyn PhysicalExpr>>,
        projection: Vec<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    ) -> Self {
        Self {
            input,
            predicate,
            projection,
            schema,
        }
    }

    fn derive(
        &self,
        expr: &Arc<dyn PhysicalExpr>,
        column: usize,
        value: i64,
    ) -> Result<i64, EngineError> {
        if expr.as_ref().is::<Column>() {
            // A bare column passes its value on as it is.
            return Ok(value);
        }
        derive(expr, &self.input, column, value)
    }
}

impl Operator for Map {
    fn name(&self) -> &'static str {
        "map"
    }

    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn structure(&self) -> String {
        format!(
            "map(where {}; project {}; {})",
            crate::operator::exprs_text(&self.predicate),
            crate::operator::exprs_text(&self.projection),
            crate::operator::schema_text(&self.schema)
        )
    }

    /// An output column carries its input column's watermark when its
    /// expression keeps that column's order ([`monotone_column`]); the
    /// filter only drops rows, which moves no bound.
    fn watermarks(&mut self, inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        expect_watermarks(self.name(), inputs, 1)?;
        let mut out = Vec::new();
        for (i, expr) in self.projection.iter().enumerate() {
            let Some(column) = monotone_column(expr) else {
                continue;
            };
            if let Some(value) = inputs[0].get(column) {
                out.push((i, self.derive(expr, column, value)?));
            }
        }
        Ok(Watermarks::of(out))
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(self.name(), inputs, 1)?;
        let input = &inputs[0];
        if input.is_empty() {
            return Ok(empty_change(&self.schema));
        }
        let (rows, weights) = match &self.predicate {
            None => (input.rows().clone(), input.weights().clone()),
            Some(predicate) => {
                let mask = predicate
                    .evaluate(input.rows())?
                    .into_array(input.num_rows())?;
                let mask = where_true(&mask)?;
                let weights = filter(input.weights(), &mask)?;
                (
                    filter_record_batch(input.rows(), &mask)?,
                    weights.as_primitive().clone(),
                )
            }
        };
        let columns = self
            .projection
            .iter()
            .map(|e| e.evaluate(&rows)?.into_array(rows.num_rows()))
            .collect::<Result<Vec<_>, _>>()?;
        let projected = batch_of(&self.schema, columns, rows.num_rows())?;
        // Projection can make distinct rows equal, which matters only
        // where they could cancel.
        settle(ChangeBatch::new(projected, weights)?)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::logical_expr::Operator as BinaryOp;
    use datafusion::physical_expr::expressions::{binary, col, lit};

    use super::*;
    use crate::testing::{change, render, schema};

    #[test]
    fn filters_projects_and_consolidates() {
        let input = schema("g text, x int");
        let out = schema("g text");
        let predicate = binary(col("x", &input).unwrap(), BinaryOp::Gt, lit(1i64), &input).unwrap();
        let mut map = Map::new(
            input.clone(),
            Some(predicate),
            vec![col("g", &input).unwrap()],
            out,
        );
        let step = map
            .step(&[change(
                "g text, x int",
                "a 2 +1; a 3 +1; b 1 +1; b 5 -1; c null +1; c 9 +1; c 8 -1",
            )])
            .unwrap();
        // a's two rows collapse into one with weight 2; c's cancel out; x=null is not > 1.
        assert_eq!(render(&step), vec!["a +2", "b -1"]);
    }
}
