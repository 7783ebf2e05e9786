//! Shared vocabulary of Weir: identifiers, the weighted change batch that flows
//! between operators, and the message envelope on every dataflow edge.
//!
//! - [`Epoch`], [`VnodeId`], [`Generation`], [`ObjectId`]: small copyable ids.
//! - [`ChangeBatch`]: an Arrow `RecordBatch` plus an `Int64` weight per row
//!   (a Z-set): `+1` inserts a row, `-1` retracts it, an update is `-old/+new`.
//! - [`Message`]: what travels on a graph edge.
//! - [`panic_message`]: the text of a caught panic, for the errors that
//!   replace it.
//!
//! This crate stays small on purpose: it is what every other crate agrees on.

mod change;
mod ids;

pub use change::{ChangeBatch, ChangeBatchError, WEIGHT_COLUMN};
pub use ids::{Epoch, Generation, ObjectId, VnodeId};

/// What flows along every edge of a dataflow graph.
#[derive(Debug, Clone)]
pub enum Message {
    /// Weighted rows.
    Batch(ChangeBatch),
    /// Everything before this belongs to `epoch`; the epoch ends here.
    Barrier(Epoch),
    /// No row with an event time below this will follow.
    Watermark(i64),
}

/// The message a caught panic carried (`panic!("...")` with or without
/// arguments), or `(no message)`.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
