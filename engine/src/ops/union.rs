//! [`Union`]: `UNION ALL` of inputs with the same column types. Linear.

use arrow::datatypes::SchemaRef;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::rows::{batch_of, concat_changes, settle};

use crate::operator::{Operator, expect_inputs, expect_watermarks};
use crate::watermark::Watermarks;

pub struct Union {
    inputs: usize,
    schema: SchemaRef,
}

impl Union {
    pub fn new(inputs: usize, schema: SchemaRef) -> Self {
        Self { inputs, schema }
    }
}

impl Operator for Union {
    fn name(&self) -> &'static str {
        "union"
    }

    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn structure(&self) -> String {
        format!(
            "union({} inputs; {})",
            self.inputs,
            crate::operator::schema_text(&self.schema)
        )
    }

    /// A column's rows come from every input: it is bounded by the
    /// slowest.
    fn watermarks(&mut self, inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        expect_watermarks(self.name(), inputs, self.inputs)?;
        Ok(Watermarks::min_of(inputs))
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(self.name(), inputs, self.inputs)?;
        // Inputs may name their columns differently; the output's names win.
        let rebound = inputs
            .iter()
            .map(|c| {
                let rows = batch_of(&self.schema, c.rows().columns().to_vec(), c.num_rows())?;
                Ok(ChangeBatch::new(rows, c.weights().clone())?)
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        settle(concat_changes(&self.schema, &rebound)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{change, render, schema};

    #[test]
    fn sums_inputs_and_cancels() {
        let mut union = Union::new(2, schema("v int"));
        let step = union
            .step(&[change("a int", "1 +1; 2 +1"), change("b int", "1 -1; 3 +2")])
            .unwrap();
        assert_eq!(render(&step), vec!["2 +1", "3 +2"]);
    }
}
