//! Identifier newtypes. They are plain numbers on the wire and in storage; the
//! types keep an epoch from being passed where a vnode is expected.

use serde::{Deserialize, Serialize};

/// A barrier-delimited interval of the dataflow; monotone.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Epoch(pub u64);

/// A hash partition of an object's state; the unit of checkpoint and recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VnodeId(pub u32);

/// Bumped every time ownership of state changes hands; stale generations are fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Generation(pub u64);

/// A catalog object (table, projection, ...). Never reused, even after DROP,
/// so logs that name a dropped object can be recognised and skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectId(pub u64);

macro_rules! display_as_number {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}
display_as_number!(Epoch, VnodeId, Generation, ObjectId);
