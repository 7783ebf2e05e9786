//! The Weir dataflow engine.
//!
//! Knows Arrow, DataFusion physical expressions and
//! [`weir_common::ChangeBatch`]es; no SQL and no protocol.
//!
//! - [`table::TableState`]: the keyed contents of a table, changed only by
//!   applying change batches, cheap to snapshot (persistent map: a snapshot is
//!   an O(1) clone that later writes never disturb).
//! - [`operator::Operator`]: the contract of an incremental operator, stepped
//!   once per epoch with the (settled) change of each input.
//! - [`ops`]: the built-in operators.
//! - [`graph::Graph`]: a DAG of operators for one projection.
//! - [`coordinator::Coordinator`]: owns every deployed projection, steps
//!   them all once per epoch and publishes an [`coordinator::EpochView`].
//! - [`materialized::Materialized`]: a projection's current result.
//! - [`checkpoint`]: incremental, per-vnode checkpoints of every
//!   projection's keyed state ([`operator::StateEntry`]) and their restore;
//!   [`vnode_state`]: their stored form, and merging a vnode's chain.
//! - [`watermark`]: event time: watermarks per column, how they pass
//!   through expressions, and how a source's are generated.
//! - [`rows`]: Arrow rows as comparable bytes, and consolidation.
//! - [`multiset::Multiset`]: bags of rows, the state most operators keep.
//! - [`runtime`]: the epoch runtime around the coordinator: inputs from
//!   the table log and source connectors, barriers, checkpoints and seals
//!   (with source offsets and sink descriptors), restore, sinks' two-phase
//!   commit.

pub mod checkpoint;
pub mod coordinator;
pub mod error;
pub mod graph;
pub mod materialized;
pub mod multiset;
pub mod operator;
pub mod ops;
pub mod outbox;
pub mod rows;
pub mod runtime;
pub mod table;
mod table_index;
#[cfg(test)]
pub(crate) mod testing;
pub mod vnode_state;
pub mod watermark;

pub use checkpoint::{VNODES, state_fingerprint};
pub use coordinator::{Coordinator, EpochView, ProjectionView, SourceBinding};
pub use error::EngineError;
pub use graph::{Graph, Input, NodeState};
pub use materialized::Materialized;
pub use operator::{Operator, StateEntry};
pub use table::TableState;
pub use vnode_state::VnodeState;
pub use watermark::Watermarks;
