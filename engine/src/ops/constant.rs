//! [`Constant`]: a relation that never changes (`VALUES`, `SELECT 1`).
//! It emits its rows in its first step and nothing after.

use arrow::datatypes::SchemaRef;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::operator::{Operator, expect_inputs};
use crate::rows::{consolidate, empty_change};

const NAME: &str = "constant";

pub struct Constant {
    rows: ChangeBatch,
    emitted: bool,
}

impl Constant {
    /// `rows` is emitted once; it need not be consolidated.
    pub fn new(rows: ChangeBatch) -> Result<Self, EngineError> {
        Ok(Self {
            rows: consolidate(&rows)?,
            emitted: false,
        })
    }
}

impl Operator for Constant {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.rows.schema()
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 0)?;
        if self.emitted {
            return Ok(empty_change(&self.rows.schema()));
        }
        self.emitted = true;
        Ok(self.rows.clone())
    }

    fn snapshot(&self) -> Result<Vec<u8>, EngineError> {
        Ok(vec![u8::from(self.emitted)])
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), EngineError> {
        self.emitted = match state {
            [] | [0] => false,
            [1] => true,
            _ => {
                return Err(EngineError::Invariant {
                    operator: NAME,
                    message: "unreadable state".into(),
                });
            }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{change, render};

    #[test]
    fn emits_once_and_remembers_it_across_restore() {
        let mut constant = Constant::new(change("v int", "1 +1; 1 +1; 2 +1")).unwrap();
        assert_eq!(render(&constant.step(&[]).unwrap()), vec!["1 +2", "2 +1"]);
        assert!(constant.step(&[]).unwrap().is_empty());
        let state = constant.snapshot().unwrap();
        let mut fresh = Constant::new(change("v int", "1 +1")).unwrap();
        fresh.restore(&state).unwrap();
        assert!(fresh.step(&[]).unwrap().is_empty());
    }
}
