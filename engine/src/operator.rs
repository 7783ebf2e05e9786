//! The [`Operator`] trait: one incremental step of a dataflow graph per epoch.

use arrow::datatypes::SchemaRef;
use weir_common::ChangeBatch;

use crate::EngineError;

/// An incremental operator: it turns the change of its inputs during one
/// epoch into the change of its output during that epoch.
///
/// The runtime ([`crate::graph::Graph`]) guarantees, and operators rely on:
/// - `step` is called once per epoch, in epoch order, with exactly one
///   change per input (empty when that input did not change), each
///   consolidated (no two equal rows, no zero weight) and with the schema the
///   input declared.
///
/// Operators guarantee:
/// - the returned change has [`Operator::output_schema`] and is consolidated,
///   so an update undone within the epoch produces nothing;
/// - the sum of all returned changes equals the operator's query over the sum
///   of all input changes (the Z-set semantics of ARCHITECTURE.md §2);
/// - `step` on an error leaves the state as it was before the call, so the
///   epoch can be retried;
/// - [`Operator::snapshot`] then [`Operator::restore`] on a fresh operator of
///   the same plan gives an operator that behaves identically.
pub trait Operator: Send {
    /// What the operator is, for EXPLAIN, metrics and errors.
    fn name(&self) -> &'static str;

    fn output_schema(&self) -> SchemaRef;

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError>;

    /// The operator's state as bytes; empty for stateless operators.
    fn snapshot(&self) -> Result<Vec<u8>, EngineError>;

    /// Replaces the state with one taken by [`Operator::snapshot`].
    fn restore(&mut self, state: &[u8]) -> Result<(), EngineError>;
}

/// Checks the one-change-per-input contract.
pub(crate) fn expect_inputs(
    operator: &'static str,
    inputs: &[ChangeBatch],
    expected: usize,
) -> Result<(), EngineError> {
    if inputs.len() == expected {
        Ok(())
    } else {
        Err(EngineError::Invariant {
            operator,
            message: format!("expected {expected} input changes, got {}", inputs.len()),
        })
    }
}
