//! [`Constant`]: a relation that never changes (`VALUES`, `SELECT 1`).
//! It emits its rows in its first step and nothing after.

use arrow::datatypes::SchemaRef;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::operator::{Operator, StateEntry, expect_inputs, schema_text, state_key, unreadable};
use crate::rows::{consolidate, empty_change};

const NAME: &str = "constant";

pub struct Constant {
    rows: ChangeBatch,
    emitted: bool,
    /// Whether `emitted` changed since the last `take_state_changes`.
    changed: bool,
}

impl Constant {
    /// `rows` is emitted once; it need not be consolidated.
    pub fn new(rows: ChangeBatch) -> Result<Self, EngineError> {
        Ok(Self {
            rows: consolidate(&rows)?,
            emitted: false,
            changed: false,
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

    fn structure(&self) -> String {
        // The rows are the whole behaviour; the weights ride along.
        let rows = self
            .rows
            .to_record_batch()
            .ok()
            .and_then(|b| arrow::util::pretty::pretty_format_batches(&[b]).ok())
            .map(|t| t.to_string())
            .unwrap_or_default();
        format!("{NAME}({}; {rows})", schema_text(&self.rows.schema()))
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 0)?;
        if self.emitted {
            return Ok(empty_change(&self.rows.schema()));
        }
        self.emitted = true;
        self.changed = true;
        Ok(self.rows.clone())
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        if !std::mem::take(&mut self.changed) {
            return Ok(Vec::new());
        }
        Ok(vec![StateEntry {
            key: emitted_key().into(),
            value: self.emitted.then(|| bytes::Bytes::from_static(&[1])),
        }])
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        Ok(if self.emitted {
            vec![StateEntry::set(emitted_key(), vec![1])]
        } else {
            Vec::new()
        })
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        let mut emitted = self.emitted;
        for entry in entries {
            if entry.key != emitted_key() {
                return Err(unreadable(NAME, "an unknown key"));
            }
            emitted = entry.value.is_some();
        }
        self.emitted = emitted;
        self.changed = false;
        Ok(())
    }
}

/// The one state key: whether the rows were emitted.
fn emitted_key() -> Vec<u8> {
    state_key(0, &[], &[])
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
