//! [`Graph`]: a DAG of operators stepped once per epoch.

use std::panic::AssertUnwindSafe;

use weir_common::{ChangeBatch, ObjectId};

use crate::EngineError;
use crate::operator::{Operator, StateEntry};
use crate::watermark::Watermarks;

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
    /// Its output's watermarks as of the last step (as of its building:
    /// which columns carry one).
    watermarks: Watermarks,
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
    /// Per source, the columns that carry a watermark
    /// ([`Graph::declare_source_watermark`]).
    source_watermarks: Vec<Watermarks>,
    nodes: Vec<Node>,
    poisoned: bool,
    last_step: Vec<NodeStep>,
}

/// One node's live state ([`Graph::state_sizes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeState {
    pub node: u32,
    pub operator: &'static str,
    pub entries: u64,
    pub bytes: u64,
}

/// Rows in and out of one node in the last step, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStep {
    pub operator: &'static str,
    pub rows_in: u64,
    pub rows_out: u64,
    /// Input rows it dropped as behind the watermark.
    pub late_rows: u64,
}

impl Graph {
    pub fn new(sources: usize) -> Self {
        Self {
            sources,
            source_watermarks: vec![Watermarks::none(); sources],
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
        let mut operator = operator;
        let known: Vec<Watermarks> = inputs
            .iter()
            .map(|&i| self.watermarks_of(i).unknown())
            .collect();
        let watermarks = operator.watermarks(&known)?;
        self.nodes.push(Node {
            operator,
            inputs,
            watermarks,
        });
        Ok(self.nodes.len() - 1)
    }

    /// Declares that `column` of source `source` carries a watermark (a
    /// source's `WATERMARK FOR`). Before the nodes reading it are added,
    /// which learn from it which of their columns carry one.
    pub fn declare_source_watermark(&mut self, source: usize, column: usize) {
        if let Some(w) = self.source_watermarks.get_mut(source) {
            *w = w
                .clone()
                .merged(&Watermarks::of([(column, crate::watermark::NONE_YET)]));
        }
    }

    /// The columns of `input`'s rows that carry a watermark.
    pub fn watermark_columns(&self, input: Input) -> Vec<usize> {
        self.watermarks_of(input)
            .pairs()
            .iter()
            .map(|&(c, _)| c)
            .collect()
    }

    fn watermarks_of(&self, input: Input) -> Watermarks {
        match input {
            Input::Source(i) => self.source_watermarks.get(i).cloned().unwrap_or_default(),
            Input::Node(i) => self
                .nodes
                .get(i)
                .map(|n| n.watermarks.clone())
                .unwrap_or_default(),
        }
    }

    /// The output's watermarks as of the last step.
    /// Gives every node the epoch's time ([`Operator::advance_time`]);
    /// call before each step.
    pub fn advance_time(&mut self, now: i64) {
        for node in &mut self.nodes {
            node.operator.advance_time(now);
        }
    }

    /// The earliest epoch time at which some node's output changes with
    /// no input ([`Operator::next_due`]).
    pub fn next_due(&self) -> Option<i64> {
        self.nodes
            .iter()
            .filter_map(|n| n.operator.next_due())
            .min()
    }

    pub fn output_watermarks(&self) -> Watermarks {
        self.nodes
            .last()
            .map(|n| n.watermarks.clone())
            .unwrap_or_default()
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
    /// ([`crate::rows::settle`]), no watermark moving.
    /// Returns the change of the output node.
    pub fn step(&mut self, sources: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        let unmoved = self.source_watermarks.clone();
        self.step_at(sources, &unmoved)
    }

    /// [`Self::step`] with each source's watermarks as of the end of the
    /// epoch (`watermarks[i]` for source `i`): every node learns its
    /// inputs' before it steps ([`Operator::watermarks`]).
    pub fn step_at(
        &mut self,
        sources: &[ChangeBatch],
        watermarks: &[Watermarks],
    ) -> Result<ChangeBatch, EngineError> {
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
        let mut marks: Vec<Watermarks> = Vec::with_capacity(self.nodes.len());
        let mut stats = Vec::with_capacity(self.nodes.len());
        for node in &mut self.nodes {
            let input_marks: Vec<Watermarks> = node
                .inputs
                .iter()
                .map(|input| match *input {
                    Input::Source(i) => watermarks.get(i).cloned().unwrap_or_default(),
                    Input::Node(i) => marks[i].clone(),
                })
                .collect();
            let inputs: Vec<ChangeBatch> = node
                .inputs
                .iter()
                .map(|input| match *input {
                    Input::Source(i) => sources[i].clone(),
                    Input::Node(i) => outputs[i].clone(),
                })
                .collect();
            let operator = &mut node.operator;
            let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let marks = operator.watermarks(&input_marks)?;
                Ok::<_, EngineError>((marks, operator.step(&inputs)?))
            }))
            .unwrap_or_else(|panic| {
                Err(EngineError::Invariant {
                    operator: operator.name(),
                    message: format!("panicked: {}", panic_message(panic.as_ref())),
                })
            });
            match stepped {
                Ok((out_marks, out)) => {
                    stats.push(NodeStep {
                        operator: node.operator.name(),
                        rows_in: inputs.iter().map(|c| c.num_rows() as u64).sum(),
                        rows_out: out.num_rows() as u64,
                        late_rows: node.operator.take_late_rows(),
                    });
                    node.watermarks = out_marks.clone();
                    marks.push(out_marks);
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

    /// The live state of each node that keeps some: its entries and their
    /// bytes (keys and values), as a full checkpoint would write them.
    /// Costs O(state): a diagnostic, asked for on demand.
    pub fn state_sizes(&self) -> Result<Vec<NodeState>, EngineError> {
        let mut sizes = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let entries = node.operator.state_entries()?;
            if entries.is_empty() {
                continue;
            }
            let bytes = entries
                .iter()
                .map(|e| (e.key.len() + e.value.as_ref().map_or(0, |v| v.len())) as u64)
                .sum();
            sizes.push(NodeState {
                node: i as u32,
                operator: node.operator.name(),
                entries: entries.len() as u64,
                bytes,
            });
        }
        Ok(sizes)
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
