//! Durable storage for Weir.
//!
//! - [`ControlLog`]: the catalog as a sequence of create-only entries
//!   `catalog/{revision:020}` in an `object_store`. Appending requires the
//!   expected current revision; a concurrent writer makes the put fail with
//!   [`StorageError::RevisionConflict`] instead of overwriting.
//! - [`TableLog`]: the write-ahead log of table changes. A record gets its
//!   LSN when it is enqueued ([`Appended`]) and is acknowledged after the
//!   `fsync` that covers it; appends are grouped (group commit); a failed
//!   `fsync` poisons the log; recovery returns every complete record and
//!   cuts a torn tail.
//! - [`state`]: operator state. [`StateBackend`] is the contract between
//!   streaming operators and storage; [`ObjectStateBackend`] implements it over
//!   an `object_store` with create-only partial blobs, fenced generations and
//!   create-only seals (manifests naming each vnode's snapshot+delta chain).
//!   [`state::model`] holds the protocol's decisions as pure functions.
//! - `testing` (feature `testing`): a local S3 server (moto) for tests of
//!   this crate and of the connectors that write to S3.
//! - [`DataDirLock`]: an exclusive lock on a data directory so two processes
//!   never write the same one.
//!
//! Payloads are opaque bytes here: the server decides what a catalog entry or a
//! table-log record holds.

mod control_log;
mod error;
mod lock;
pub mod state;
mod table_log;
#[cfg(feature = "testing")]
pub mod testing;

pub use control_log::{ControlLog, Revision};
pub use error::StorageError;
pub use lock::DataDirLock;
pub use state::{
    ChainEntry, ChainStats, Compaction, ObjectStateBackend, PartialKind, SealExtras, SealManifest,
    SealOutcome, StateBackend, StateBackendError,
};
pub use table_log::{Appended, Lsn, MAX_GROUP, SyncHook, TableLog};
