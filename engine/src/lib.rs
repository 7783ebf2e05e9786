//! The Weir dataflow engine.
//!
//! Knows Arrow and [`weir_common::ChangeBatch`]es, no SQL and no protocol.
//!
//! - [`table::TableState`]: the keyed contents of a table, changed only by
//!   applying change batches, cheap to snapshot (persistent map: a snapshot is
//!   an O(1) clone that later writes never disturb).

pub mod error;
pub mod table;

pub use error::EngineError;
pub use table::TableState;
