//! [`Graph`]: a DAG of operators stepped once per epoch.

use std::panic::AssertUnwindSafe;

use weir_common::{ChangeBatch, ObjectId};

use crate::EngineError;
use crate::operator::{Operator, StateEntry};

/// Where a node reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The change of the graph's `n`th source (a table or another projection)
    /// in this epoch.
    Source(usize),
    /// The output of an earlier node.
    Node(usize),
}

struct Node {
    operator: Box<dyn Operator>,
    inputs: Vec<Input>,
}

/// Operators in topological order: a node only reads sources and earlier
/// nodes, which [`Graph::add`] enforces. The last node added is the output.
///
/// If a step fails, operators that already stepped have moved on while later
/// ones have not, so a failed graph must not be stepped again: the owner
/// rebuilds it (from its inputs or a checkpoint). [`Graph::is_poisoned`] says so.
///
/// A panic inside an operator (a DataFusion kernel can panic on input it
/// did not expect, e.g. an overflow check in a debug build) is such a
/// failure too: it is caught and returned as an error, so it fails one
/// projection instead of unwinding through the task that steps them all.
pub struct Graph {
    sources: usize,
    nodes: Vec<Node>,
    poisoned: bool,
    last_step: Vec<NodeStep>,
}

/// Rows in and out of one node in the last step, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStep {
    pub operator: &'static str,
    pub rows_in: u64,
    pub rows_out: u64,
}

impl Graph {
    pub fn new(sources: usize) -> Self {
        Self {
            sources,
            nodes: Vec::new(),
            poisoned: false,
            last_step: Vec::new(),
        }
    }

    /// Adds a node; returns its index for later nodes' [`Input::Node`].
    pub fn add(
        &mut self,
        operator: Box<dyn Operator>,
        inputs: Vec<Input>,
    ) -> Result<usize, EngineError> {
        for input in &inputs {
            let valid = match *input {
                Input::Source(i) => i < self.sources,
                Input::Node(i) => i < self.nodes.len(),
            };
            if !valid {
                return Err(EngineError::Invariant {
                    operator: operator.name(),
                    message: format!("input {input:?} does not exist yet"),
                });
            }
        }
        self.nodes.push(Node { operator, inputs });
        Ok(self.nodes.len() - 1)
    }

    /// Tells every node where its state lives: node `i` of projection
    /// `object` ([`Operator::place`]). Called on deploy, before the first
    /// step or restore.
    pub fn place(&mut self, object: ObjectId) -> Result<(), EngineError> {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.operator.place(object, i as u32)?;
        }
        Ok(())
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Operator names with their inputs, for EXPLAIN.
    pub fn describe(&self) -> Vec<(&'static str, Vec<Input>)> {
        self.nodes
            .iter()
            .map(|n| (n.operator.name(), n.inputs.clone()))
            .collect()
    }

    /// Per node, in order: [`Operator::structure`] and its inputs (what
    /// [`crate::state_fingerprint`] identifies a graph by).
    pub fn structure(&self) -> Vec<(String, Vec<Input>)> {
        self.nodes
            .iter()
            .map(|n| (n.operator.structure(), n.inputs.clone()))
            .collect()
    }

    /// Per node, in node order: the rows of the last successful step.
    pub fn last_step(&self) -> &[NodeStep] {
        &self.last_step
    }

    /// Runs one epoch: `sources[i]` is the settled change of source `i`
    /// ([`crate::rows::settle`]).
    /// Returns the change of the output node.
    pub fn step(&mut self, sources: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        if self.poisoned || sources.len() != self.sources || self.nodes.is_empty() {
            return Err(EngineError::Invariant {
                operator: "graph",
                message: format!(
                    "cannot step: poisoned={}, {} source changes for {} sources, {} nodes",
                    self.poisoned,
                    sources.len(),
                    self.sources,
                    self.nodes.len()
                ),
            });
        }
        let mut outputs: Vec<ChangeBatch> = Vec::with_capacity(self.nodes.len());
        let mut stats = Vec::with_capacity(self.nodes.len());
        for node in &mut self.nodes {
            let inputs: Vec<ChangeBatch> = node
                .inputs
                .iter()
                .map(|input| match *input {
                    Input::Source(i) => sources[i].clone(),
                    Input::Node(i) => outputs[i].clone(),
                })
                .collect();
            let operator = &mut node.operator;
            let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| operator.step(&inputs)))
                .unwrap_or_else(|panic| {
                    Err(EngineError::Invariant {
                        operator: operator.name(),
                        message: format!("panicked: {}", panic_message(panic.as_ref())),
                    })
                });
            match stepped {
                Ok(out) => {
                    stats.push(NodeStep {
                        operator: node.operator.name(),
                        rows_in: inputs.iter().map(|c| c.num_rows() as u64).sum(),
                        rows_out: out.num_rows() as u64,
                    });
                    outputs.push(out);
                }
                Err(e) => {
                    self.poisoned = true;
                    return Err(e);
                }
            }
        }
        self.last_step = stats;
        Ok(outputs.pop().expect("the graph has nodes"))
    }

    /// Per node with changes, in node order: its
    /// [`Operator::take_state_changes`]. On an error, nodes before the
    /// failing one have cleared their record, so the caller must take a
    /// full checkpoint ([`Self::state_entries`]) next.
    pub fn take_state_changes(&mut self) -> Result<Vec<(u32, Vec<StateEntry>)>, EngineError> {
        let mut changes = Vec::new();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let entries = node.operator.take_state_changes()?;
            if !entries.is_empty() {
                changes.push((i as u32, entries));
            }
        }
        Ok(changes)
    }

    /// Per node with state, in node order: its [`Operator::state_entries`].
    pub fn state_entries(&self) -> Result<Vec<(u32, Vec<StateEntry>)>, EngineError> {
        let mut state = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let entries = node.operator.state_entries()?;
            if !entries.is_empty() {
                state.push((i as u32, entries));
            }
        }
        Ok(state)
    }

    /// Applies entries to one node's state (restoring a checkpoint).
    pub fn apply_state_entries(
        &mut self,
        node: u32,
        entries: &[StateEntry],
    ) -> Result<(), EngineError> {
        let Some(node) = self.nodes.get_mut(node as usize) else {
            return Err(EngineError::Invariant {
                operator: "graph",
                message: format!("state for node {node} of {}", self.nodes.len()),
            });
        };
        node.operator.apply_state_entries(entries)
    }

    /// Every node's state, in node order.
    pub fn snapshot(&self) -> Result<Vec<Vec<u8>>, EngineError> {
        self.nodes.iter().map(|n| n.operator.snapshot()).collect()
    }

    pub fn restore(&mut self, states: &[Vec<u8>]) -> Result<(), EngineError> {
        if states.len() != self.nodes.len() {
            return Err(EngineError::Invariant {
                operator: "graph",
                message: format!("{} states for {} nodes", states.len(), self.nodes.len()),
            });
        }
        for (node, state) in self.nodes.iter_mut().zip(states) {
            node.operator.restore(state)?;
        }
        self.poisoned = false;
        Ok(())
    }
}

pub(crate) use weir_common::panic_message;

#[cfg(test)]
mod tests {
    use arrow::datatypes::SchemaRef;

    use super::*;
    use crate::testing::{change, render, schema};

    const ROWS: &str = "k int, a text";

    /// Passes its input through, or panics when `panics` is set.
    struct Echo {
        panics: bool,
    }

    impl Operator for Echo {
        fn name(&self) -> &'static str {
            "echo"
        }
        fn output_schema(&self) -> SchemaRef {
            schema(ROWS)
        }
        fn structure(&self) -> String {
            "echo".into()
        }
        fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
            assert!(!self.panics, "attempt to subtract with overflow");
            Ok(inputs[0].clone())
        }
        fn snapshot(&self) -> Result<Vec<u8>, EngineError> {
            Ok(Vec::new())
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), EngineError> {
            Ok(())
        }
    }

    fn graph(panics: bool) -> Graph {
        let mut graph = Graph::new(1);
        let first = graph
            .add(Box::new(Echo { panics: false }), vec![Input::Source(0)])
            .unwrap();
        graph
            .add(Box::new(Echo { panics }), vec![Input::Node(first)])
            .unwrap();
        graph
    }

    #[test]
    fn a_panicking_operator_fails_the_step_and_poisons_the_graph() {
        let mut ok = graph(false);
        assert_eq!(
            render(&ok.step(&[change(ROWS, "1 x +1")]).unwrap()),
            vec!["1 x +1"]
        );
        let mut bad = graph(true);
        let error = bad.step(&[change(ROWS, "1 x +1")]).unwrap_err().to_string();
        assert_eq!(error, "echo: panicked: attempt to subtract with overflow");
        assert!(bad.is_poisoned());
        assert!(bad.step(&[change(ROWS, "")]).is_err());
    }
}
