//! The [`Sink`] trait: how changes leave the runtime, in two phases per
//! epoch so a seal can say exactly what was delivered.

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use weir_common::ChangeBatch;

use crate::ConnectorError;

/// A running sink: the writer of one sink object.
///
/// The runtime drives it, for each epoch E in order:
/// 1. [`Self::write`] zero or more times with E's changes;
/// 2. [`Self::pre_commit`] at E's barrier, returning a descriptor that the
///    seal of E (or of a later epoch) stores;
/// 3. after that seal is durable, [`Self::commit`] with the descriptor of the
///    latest pre-committed epoch it covers. Epochs are folded: one commit
///    may cover several pre-commits.
///
/// After a restart, the sink is opened with the descriptor of the latest
/// seal and must make that state committed (re-commit; idempotent), then
/// forget anything written after it (abort), since the epochs after the
/// seal are produced again.
#[async_trait]
pub trait Sink: Send {
    /// Stages one epoch's changes. Not visible downstream before commit
    /// (unless the sink only offers at-least-once delivery).
    async fn write(&mut self, epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError>;

    /// Makes everything written up to `epoch` ready to commit and describes
    /// it. The descriptor is all [`Self::commit`] gets after a restart.
    async fn pre_commit(&mut self, epoch: u64) -> Result<String, ConnectorError>;

    /// Commits what `descriptor` (from `pre_commit(epoch)`) describes.
    /// Idempotent: called again with the same arguments after a restart.
    async fn commit(&mut self, epoch: u64, descriptor: &str) -> Result<(), ConnectorError>;

    /// Drops what was written or pre-committed after `epoch` (never
    /// committed). Idempotent.
    async fn abort(&mut self, epoch: u64) -> Result<(), ConnectorError>;

    /// What the sink handed its target since its previous receipt (or
    /// since it was opened), tallied where it encodes what the target
    /// receives ([`crate::receipt`]); a change it refused into a
    /// dead-letter or refused table counts as handed. The runtime takes
    /// one after each successful pre-commit and compares it with what it
    /// wrote to the sink: a mismatch fails the sink.
    fn receipt(&mut self) -> crate::Receipt;

    /// What the sink skipped in all (`on_error = 'skip'`), as of its latest
    /// commit and as durable as its commits; `None` for a sink that does
    /// not skip.
    fn skipped(&self) -> Option<Skips> {
        None
    }
}

/// Epochs and row changes a sink skipped because its target refused
/// them, and the latest refusal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Skips {
    /// Epochs with at least one skipped change.
    pub epochs: u64,
    pub rows: u64,
    pub last_error: Option<String>,
}

const _: Option<&dyn Sink> = None;

/// What opening a sink needs.
#[derive(Debug, Clone)]
pub struct SinkOpen<'a> {
    pub name: &'a str,
    /// The columns of the changes it receives.
    pub schema: SchemaRef,
    pub options: &'a BTreeMap<String, String>,
    /// The latest seal's (epoch, descriptor) for this sink, if any.
    pub sealed: Option<(u64, &'a str)>,
    /// The state store generation of this process: larger in every
    /// process that takes the state over, so a sink can fence writes of a
    /// deposed one where it writes.
    pub generation: u64,
    /// Failed attempts in a row before this open (0 unless the runtime
    /// reopens it to retry): `retry_and_skip(n, ..)` skips from the n-th.
    pub failures: u32,
}
