//! Durable, fenced operator state: the [`StateBackend`] contract and its one
//! implementation over an `object_store` ([`ObjectStateBackend`]).
//!
//! # Layout (all under a root prefix, every object create-only)
//!
//! ```text
//! fence/g{generation:020}                                   who claimed which generation
//! partials/e{epoch:020}/b{n:05}-g{gen:020}-{inst}.bin      the framed partials of many vnodes in one epoch
//! partials/e{epoch:020}/v{vnode:05}-g{gen:020}-{inst}.bin   one vnode's change (or snapshot) in one epoch
//! seals/e{epoch:020}.json                                   the commit marker + manifest of epoch E
//! ```
//!
//! A checkpoint writes an epoch's partials into a few batch objects (the
//! engine's path, `write_partials`); a single partial can still be written
//! as an object of its own (`write_partial`). Either way every partial keeps
//! its frame (kind, CRC, length), and the seal's chain entry names the
//! object and the frame's offset in it, so a vnode is restored from a range
//! read of just its bytes.
//!
//! Nothing live is ever overwritten: a blob name includes the writer's
//! generation and instance, so a deposed writer can only leave garbage, and a
//! seal is a `PutMode::Create` put, so exactly one committer wins an epoch.
//!
//! # Fence protocol
//!
//! 1. **Claim.** A new leader lists `fence/`, takes `max + 1` and creates
//!    `fence/g{n}` (create-only; on a lost race it re-lists). The generation is
//!    also its authoritative assignment version.
//! 2. **Takeover seal.** It then creates the seal of `latest + 1` as an empty
//!    *takeover* manifest that carries the previous chains forward, naming
//!    itself as committer. If that slot is taken it reads it and tries the next.
//! 3. **Dense seal slots.** Every sealer seals epoch E on top of the latest seal
//!    P it observes, creating every slot `P+1 ..= E` (slots in between are
//!    *gap* seals that carry the chain forward). So a deposed leader, whose view
//!    of the latest seal is at or below the takeover epoch, must create the
//!    takeover slot or one below it, finds it taken and gets
//!    [`StateBackendError::SplitBrainCommit`] (or `StaleVersion` when the
//!    existing seal has a newer generation). Before sealing, a leader also
//!    re-lists `fence/` and refuses when a newer generation exists.
//!
//! The only window left is pruning: a deposed leader that stalls across a
//! whole prune could re-create a pruned slot *below* the latest seal. Such a
//! seal is never the latest, so no reader trusts it, and the next prune
//! deletes it. Readers only trust the latest seal and chains named by seals.
//!
//! # Chains and pruning
//!
//! A seal records, per vnode, the chain of blobs that rebuilds the vnode's
//! state: the latest snapshot, then deltas in epoch order. A snapshot resets a
//! chain, a delta appends, an unwritten vnode carries its chain. A
//! *compaction* (a chain as of an earlier seal, merged into one snapshot blob
//! off the write path) replaces the blobs it merged, if the chain still
//! starts where it started. Pruning deletes seals older than `before` except
//! the latest, then every blob older than `before` that no retained seal
//! references (and that is not a compaction waiting for its seal). With a
//! snapshot or compaction every K epochs the retained data is bounded by
//! about K blobs per vnode.
//!
//! ```text
//! partials/e{through:020}/c{vnode:05}-{n:03}-g{gen:020}-{inst}.bin   merged chains, framed as above
//! partials/e{through:020}/v{vnode:05}-g{gen:020}-{inst}-from{first:020}.bin   one merged chain
//! ```
//!
//! Epoch numbers start at 1: epoch 0 is the slot the first takeover seal of an
//! empty store occupies.

mod fault;
mod manifest;
pub mod model;
mod object;

use async_trait::async_trait;
use bytes::Bytes;

pub use fault::{Fault, FaultConfig, FaultyStore, OpKind};
pub use manifest::{ChainEntry, FenceEntry, PartialKind, SealKind, SealManifest};
pub use model::Compaction;
pub use object::{
    ChainStats, ObjectStateBackend, SealExtras, SealOutcome, store_from_url, store_from_url_with,
};

/// Errors a [`StateBackend`] can raise. Classify with
/// [`is_retryable`](Self::is_retryable) and [`is_fenced`](Self::is_fenced).
#[derive(Debug, thiserror::Error)]
pub enum StateBackendError {
    /// Underlying store failure (filesystem, network); may be transient.
    #[error("I/O error {context}: {source}")]
    Io {
        /// What the backend was doing.
        context: String,
        #[source]
        source: object_store::Error,
    },

    /// Serialization or framing error in stored bytes (bad header, CRC
    /// mismatch, unreadable manifest, conflicting rewrite of a blob).
    #[error("serialization error: {0}")]
    Serialization(String),

    /// The partial for `(vnode, epoch)` is not present.
    #[error("not found: vnode={vnode} epoch={epoch}")]
    NotFound {
        /// Virtual node ID.
        vnode: u32,
        /// Epoch number.
        epoch: u64,
    },

    /// The caller's assignment version (or this backend's generation) is older
    /// than the authoritative one: the writer has been superseded. Abandon the
    /// write, refresh the assignment and retry at the new version.
    #[error("stale assignment version: caller={caller} < authoritative={authoritative}")]
    StaleVersion {
        /// Version the writer believes is current.
        caller: u64,
        /// Authoritative version seen by the backend.
        authoritative: u64,
    },

    /// An epoch this backend tried to seal is already sealed by another
    /// committer. The caller must NOT commit its sinks for that epoch.
    #[error(
        "split-brain commit detected: epoch already committed by {committer:?}, we are {self_id:?}"
    )]
    SplitBrainCommit {
        /// Instance id recorded in the existing commit marker.
        committer: String,
        /// This backend's own instance id.
        self_id: String,
    },

    /// Sealing `epoch` is not possible in order: a later epoch is already
    /// sealed, or the slot holds a takeover/gap marker rather than this
    /// epoch's data. A caller bug or a deposed leader; never retryable.
    #[error("cannot seal epoch {epoch}: {reason} (latest sealed epoch {latest})")]
    SealOrder {
        epoch: u64,
        latest: u64,
        reason: &'static str,
    },

    /// The backend was opened read-only ([`ObjectStateBackend::reader`]).
    #[error("this state backend is read-only")]
    ReadOnly,

    /// A store URL or option that cannot be used.
    #[error("state store configuration: {0}")]
    Config(String),
}

impl StateBackendError {
    /// Transient: the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Io { .. })
    }

    /// This writer has been superseded and must stop writing and sealing.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            Self::StaleVersion { .. } | Self::SplitBrainCommit { .. }
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: object_store::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// A pluggable state store used by streaming operators for partial
/// aggregates and watermarks. Object-safe: the engine holds
/// `Arc<dyn StateBackend>`. Implementations are shared across worker tasks.
#[async_trait]
pub trait StateBackend: Send + Sync + 'static {
    /// Persist a partial for `(vnode, epoch)`. Idempotent per `(vnode, epoch)`:
    /// recovery may replay the same write; different bytes for the same key
    /// are an error. `assignment_version` below the authoritative version is
    /// [`StateBackendError::StaleVersion`].
    async fn write_partial(
        &self,
        vnode: u32,
        epoch: u64,
        assignment_version: u64,
        bytes: Bytes,
    ) -> Result<(), StateBackendError>;

    /// Read the partial for `(vnode, epoch)`, if any. Sealed epochs answer from
    /// the seal's manifest only; unsealed ones from this writer's own blob.
    async fn read_partial(
        &self,
        vnode: u32,
        epoch: u64,
    ) -> Result<Option<Bytes>, StateBackendError>;

    /// Durability gate, called by the checkpoint coordinator after sinks
    /// precommit: `Ok(true)` iff every vnode has its partial for `epoch` and
    /// the epoch is now sealed by this backend. Sinks commit only after it.
    async fn epoch_complete(&self, epoch: u64, vnodes: &[u32]) -> Result<bool, StateBackendError>;

    /// Garbage-collect seals and partials of epochs strictly below `before`
    /// that recovery can no longer need. Required: there is no default, so a
    /// backend that keeps nothing has to say `Ok(())` explicitly.
    async fn prune_before(&self, before: u64) -> Result<(), StateBackendError>;

    /// Highest sealed epoch, or `None` when nothing is sealed yet. A node that
    /// acquires a vnode rehydrates from this epoch.
    async fn latest_committed_epoch(&self) -> Result<Option<u64>, StateBackendError> {
        Ok(None)
    }

    /// Raise the minimum assignment version `write_partial` accepts.
    /// Monotonic: a lower or equal version is a no-op.
    fn set_authoritative_version(&self, _version: u64) {}

    /// Current authoritative assignment version; `0` disables the fence.
    fn authoritative_version(&self) -> u64 {
        0
    }
}

const _: Option<&dyn StateBackend> = None;
