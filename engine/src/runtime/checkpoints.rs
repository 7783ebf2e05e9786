//! Writes each completed epoch of the coordinator to the state
//! backend: one partial per changed vnode, then the epoch's seal.
//!
//! A partial is a delta (the vnode's entries that changed in the epoch)
//! unless the vnode's chain of deltas has grown long or outweighs its last
//! snapshot; then it is a full snapshot of the vnode, which resets the
//! chain. So a checkpoint writes O(changed state), and restoring a vnode
//! reads one snapshot and a bounded number of deltas. A snapshot still
//! scans all state, so when one vnode is due every vnode holding deltas is
//! snapshotted with it ([`snapshot_vnodes`]).
//!
//! The first checkpoint of a process, and the one after a failed
//! checkpoint, snapshots every vnode (empty ones too): chains carried in the
//! store from earlier runs, or from a checkpoint whose change records were
//! drained but never sealed, must not describe the current state.
//!
//! Each seal names the table-log LSN of the last commit the epoch covers,
//! which is where replay resumes after restoring from it, and, per
//! projection whose state it holds, that state's fingerprint
//! ([`crate::state_fingerprint`]) under `projection:<id>`. A failed
//! projection is not named: its state is not checkpointed.
//!
//! Checkpoints are at most one per barrier interval: epochs closed on
//! demand (FLUSH, read-your-writes) in between are folded into the next
//! one, since change records accumulate per key until drained. Each seal
//! carries every vnode's chain, so sealing each of hundreds of on-demand
//! epochs a second would cost far more than the state it protects.
//!
//! A checkpoint has three steps so that writing does not stop the loop:
//! [`Checkpointer::prepare`] takes the epoch's partials out of the
//! coordinator (in the loop, O(changed state)), [`PendingSeal::write`]
//! writes them and the seal (a task of its own, while later epochs are
//! stepped), and [`Checkpointer::finish`] records the outcome (in the
//! loop). One checkpoint is in flight at a time, so seals land in epoch
//! order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use weir_storage::{ObjectStateBackend, PartialKind, SealExtras, StateBackend};

use super::RuntimeObserver;
use super::streams::Streams;
use crate::{Coordinator, EngineError, VNODES, VnodeState};

/// A vnode's chain is cut by a snapshot after this many deltas.
const MAX_DELTAS: u32 = 16;
/// Partials written at once.
const WRITE_CONCURRENCY: usize = 16;
/// Attempts of one partial write or seal on transient store errors (both
/// are idempotent), before the checkpoint fails as a whole.
const ATTEMPTS: u32 = 4;
/// Seals between two prunes of what no retained seal references.
const PRUNE_EVERY: u32 = 16;
/// The seal's source-offset key for the table log.
pub const TABLE_LOG_OFFSET: &str = "table_log_lsn";
/// The seal's key for the identity of the table log `TABLE_LOG_OFFSET`
/// is a position in.
pub const TABLE_LOG_ID: &str = "table_log_id";
/// The seal's key for the fingerprint of projection `id`'s state.
pub fn projection_key(id: weir_common::ObjectId) -> String {
    format!("projection:{}", id.0)
}

#[derive(Default, Clone, Copy)]
struct Chain {
    deltas: u32,
    delta_bytes: u64,
    snapshot_bytes: u64,
}

impl Chain {
    fn wants_snapshot(&self) -> bool {
        self.deltas >= MAX_DELTAS || self.delta_bytes > self.snapshot_bytes.max(4096)
    }
}

/// The vnodes to snapshot this epoch, given the vnodes that changed: none
/// while every changed vnode's chain is short; once one is due (or has no
/// chain yet), every vnode that changed or holds deltas.
///
/// Snapshotting even one vnode scans all state, because operators keep
/// their state by key, not by vnode ([`Coordinator::checkpoint_vnodes`]).
/// Taking only the vnodes that are due would pay that scan again in nearly
/// every epoch as chains come due one after another; taking every grown
/// chain with them restarts the chains together, so the next scan is about
/// a chain's length away.
fn snapshot_vnodes(
    chains: &HashMap<u32, Chain>,
    changed: impl Iterator<Item = u32> + Clone,
) -> BTreeSet<u32> {
    let due = changed
        .clone()
        .any(|v| chains.get(&v).is_none_or(Chain::wants_snapshot));
    if !due {
        return BTreeSet::new();
    }
    changed
        .chain(
            chains
                .iter()
                .filter(|(_, chain)| chain.deltas > 0)
                .map(|(&vnode, _)| vnode),
        )
        .collect()
}

/// What this process's checkpoints did, for `weir_catalog.epochs` and
/// `weir_catalog.checkpoints` (seals themselves do not record durations or
/// per-object sizes).
#[derive(Debug, Default)]
pub struct CheckpointLog {
    /// Per sealed epoch: how long writing and sealing it took.
    pub durations: BTreeMap<u64, Duration>,
    /// Per projection and vnode holding state of it: its chain there.
    pub chains: HashMap<(weir_common::ObjectId, u32), ObjectChain>,
}

/// One projection's share of one vnode's chain (entry bytes, not blob bytes).
#[derive(Debug, Default, Clone, Copy)]
pub struct ObjectChain {
    pub snapshot_epoch: u64,
    pub snapshot_bytes: u64,
    pub deltas: u32,
    pub delta_bytes: u64,
    pub last_written_epoch: u64,
}

/// Epoch durations kept in [`CheckpointLog`].
const LOGGED_EPOCHS: usize = 1024;

/// Runs `op` until it succeeds, fails with a non-transient error, or
/// [`ATTEMPTS`] are used, backing off 10 ms, 20 ms, 40 ms in between.
async fn retrying<T, F, Fut>(mut op: F) -> Result<T, weir_storage::StateBackendError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, weir_storage::StateBackendError>>,
{
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if e.is_retryable() && attempt < ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(10 << (attempt - 1))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

pub struct Checkpointer {
    state: Arc<ObjectStateBackend>,
    table_log_id: String,
    log: Arc<parking_lot::Mutex<CheckpointLog>>,
    chains: HashMap<u32, Chain>,
    /// Every vnode is snapshotted at the next checkpoint.
    needs_full: bool,
    last_sealed: u64,
    last_checkpoint: Option<Instant>,
    /// A checkpoint is prepared and not finished yet.
    in_flight: bool,
    seals_since_prune: u32,
    /// Set once another process claimed the state: no more checkpoints.
    fenced: Option<String>,
    /// The table-log LSN the latest seal of this process covers.
    last_sealed_lsn: Option<u64>,
}

/// One epoch's checkpoint, taken out of the coordinator and not yet
/// written: everything [`PendingSeal::write`] needs, owned.
pub struct PendingSeal {
    state: Arc<ObjectStateBackend>,
    epoch: u64,
    covered_lsn: u64,
    started: Instant,
    partials: Vec<(u32, PartialKind, Bytes)>,
    snapshot_vnodes: BTreeSet<u32>,
    object_bytes: HashMap<(weir_common::ObjectId, u32), u64>,
    extras: SealExtras,
}

/// What writing a [`PendingSeal`] did, for [`Checkpointer::finish`].
pub struct SealOutcome {
    pending: PendingSeal,
    /// Per partial written: (vnode, kind, bytes); or why it failed.
    written: Result<Vec<(u32, PartialKind, u64)>, EngineError>,
}

impl Checkpointer {
    pub fn new(
        state: Arc<ObjectStateBackend>,
        table_log_id: String,
        log: Arc<parking_lot::Mutex<CheckpointLog>>,
    ) -> Self {
        Self {
            state,
            table_log_id,
            log,
            chains: HashMap::new(),
            needs_full: true,
            last_sealed: 0,
            last_checkpoint: None,
            in_flight: false,
            seals_since_prune: 0,
            fenced: None,
            last_sealed_lsn: None,
        }
    }

    /// The table-log LSN the latest seal of this process covers.
    pub fn last_sealed_lsn(&self) -> Option<u64> {
        self.last_sealed_lsn
    }

    /// Why this process may no longer checkpoint (or write), if it may not.
    pub fn fenced(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    pub fn backend(&self) -> &Arc<ObjectStateBackend> {
        &self.state
    }

    /// Takes the coordinator's latest completed epoch, covering commits up
    /// to `covered_lsn`, out for a checkpoint, unless it is sealed already,
    /// a checkpoint is in flight, or the last one is younger than
    /// `min_interval`. The seal will also record `streams`' covered source
    /// offsets and sink descriptors. Call [`Self::finish`] with the
    /// outcome of writing it before preparing the next.
    pub fn prepare(
        &mut self,
        coordinator: &mut Coordinator,
        covered_lsn: u64,
        fingerprints: &HashMap<weir_common::ObjectId, String>,
        min_interval: Duration,
        observer: &dyn RuntimeObserver,
        streams: &mut Streams,
    ) -> Option<PendingSeal> {
        let epoch = coordinator.view().epoch.0;
        if self.fenced.is_some()
            || self.in_flight
            || epoch <= self.last_sealed
            || self
                .last_checkpoint
                .is_some_and(|at| at.elapsed() < min_interval)
        {
            return None;
        }
        let started = Instant::now();
        self.last_checkpoint = Some(started);
        match self.take_partials(coordinator, epoch, covered_lsn, fingerprints, streams) {
            Ok(mut pending) => {
                pending.started = started;
                self.in_flight = true;
                Some(pending)
            }
            Err(e) => {
                tracing::error!(error = %e, epoch, "checkpoint failed; the next one is written in full");
                observer.checkpoint_failed();
                self.needs_full = true;
                None
            }
        }
    }

    /// Records the outcome of writing a prepared checkpoint. A failure is
    /// logged and counted; the next checkpoint is then written in full.
    /// Returns the epoch sealed, if it was.
    pub fn finish(&mut self, outcome: SealOutcome, observer: &dyn RuntimeObserver) -> Option<u64> {
        self.in_flight = false;
        let SealOutcome { pending, written } = outcome;
        let epoch = pending.epoch;
        let written = match written {
            Ok(w) => w,
            Err(EngineError::State(e)) if e.is_fenced() => {
                tracing::error!(error = %e, epoch, "another process claimed the state backend: no more checkpoints, and writes are refused from now on");
                observer.checkpoint_failed();
                self.fenced = Some(e.to_string());
                return None;
            }
            Err(e) => {
                tracing::error!(error = %e, epoch, "checkpoint failed; the next one is written in full");
                observer.checkpoint_failed();
                self.needs_full = true;
                return None;
            }
        };
        let took = pending.started.elapsed();
        let bytes = self.record(&pending, written);
        observer.checkpoint(took, bytes);
        {
            let mut log = self.log.lock();
            log.durations.insert(epoch, took);
            while log.durations.len() > LOGGED_EPOCHS {
                log.durations.pop_first();
            }
        }
        self.last_sealed = epoch;
        self.last_sealed_lsn = Some(pending.covered_lsn);
        self.needs_full = false;
        self.seals_since_prune += 1;
        if self.seals_since_prune >= PRUNE_EVERY {
            self.seals_since_prune = 0;
            let state = self.state.clone();
            // Pruning lists and deletes; it must not hold up the loop.
            tokio::spawn(async move {
                if let Err(e) = state.prune_before(epoch).await {
                    tracing::warn!(error = %e, epoch, "pruning old checkpoints failed");
                }
            });
        }
        Some(epoch)
    }

    /// A prepared checkpoint's write was lost (its task died): nothing of
    /// it is known to be sealed, so the next checkpoint is written in full.
    pub fn abandon(&mut self, observer: &dyn RuntimeObserver) {
        self.in_flight = false;
        self.needs_full = true;
        observer.checkpoint_failed();
    }

    fn take_partials(
        &mut self,
        coordinator: &mut Coordinator,
        epoch: u64,
        covered_lsn: u64,
        fingerprints: &HashMap<weir_common::ObjectId, String>,
        streams: &mut Streams,
    ) -> Result<PendingSeal, EngineError> {
        let changes = coordinator.checkpoint_changes()?;
        let (snapshot_vnodes, mut snapshots): (BTreeSet<u32>, BTreeMap<u32, VnodeState>) =
            if self.needs_full {
                ((0..VNODES).collect(), coordinator.checkpoint_full()?)
            } else {
                let wanted = snapshot_vnodes(&self.chains, changes.keys().copied());
                let states = if wanted.is_empty() {
                    BTreeMap::new()
                } else {
                    coordinator.checkpoint_vnodes(&wanted)?
                };
                (wanted, states)
            };
        let mut partials: Vec<(u32, PartialKind, Bytes)> = Vec::new();
        let mut object_bytes: HashMap<(weir_common::ObjectId, u32), u64> = HashMap::new();
        let mut add = |vnode: u32, kind: PartialKind, state: VnodeState| {
            for (object, _, entry) in &state.entries {
                *object_bytes.entry((*object, vnode)).or_default() +=
                    (entry.key.len() + entry.value.as_ref().map_or(0, Vec::len)) as u64;
            }
            partials.push((vnode, kind, state.encode()));
        };
        for &vnode in &snapshot_vnodes {
            add(
                vnode,
                PartialKind::Snapshot,
                snapshots.remove(&vnode).unwrap_or_default(),
            );
        }
        for (vnode, delta) in changes {
            if !snapshot_vnodes.contains(&vnode) {
                add(vnode, PartialKind::Delta, delta);
            }
        }
        let (mut source_offsets, sink_descriptors) = streams.seal_extras(epoch);
        source_offsets.insert(TABLE_LOG_OFFSET.to_string(), covered_lsn.to_string());
        source_offsets.insert(TABLE_LOG_ID.to_string(), self.table_log_id.clone());
        let view = coordinator.view();
        for (id, fingerprint) in fingerprints {
            if view
                .projections
                .get(id)
                .is_some_and(|p| p.failure.is_none())
            {
                source_offsets.insert(projection_key(*id), fingerprint.clone());
            }
        }
        Ok(PendingSeal {
            state: self.state.clone(),
            epoch,
            covered_lsn,
            started: Instant::now(),
            partials,
            snapshot_vnodes,
            object_bytes,
            extras: SealExtras {
                source_offsets,
                sink_descriptors,
            },
        })
    }

    /// Updates the chains after a seal; returns the bytes of partials written.
    fn record(&mut self, pending: &PendingSeal, written: Vec<(u32, PartialKind, u64)>) -> u64 {
        let epoch = pending.epoch;
        let snapshot_vnodes = &pending.snapshot_vnodes;
        {
            // A snapshot replaces everything the vnode held, of every object.
            let mut log = self.log.lock();
            log.chains
                .retain(|(_, vnode), _| !snapshot_vnodes.contains(vnode));
            for (&(object, vnode), &bytes) in &pending.object_bytes {
                let chain = log.chains.entry((object, vnode)).or_default();
                chain.last_written_epoch = epoch;
                if snapshot_vnodes.contains(&vnode) {
                    chain.snapshot_epoch = epoch;
                    chain.snapshot_bytes = bytes;
                } else {
                    chain.deltas += 1;
                    chain.delta_bytes += bytes;
                }
            }
        }
        let mut bytes = 0;
        for (vnode, kind, len) in written {
            bytes += len;
            let chain = self.chains.entry(vnode).or_default();
            match kind {
                PartialKind::Snapshot => {
                    *chain = Chain {
                        deltas: 0,
                        delta_bytes: 0,
                        snapshot_bytes: len,
                    }
                }
                PartialKind::Delta => {
                    chain.deltas += 1;
                    chain.delta_bytes += len;
                }
            }
        }
        bytes
    }
}

impl PendingSeal {
    /// The epoch this checkpoint seals.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Writes every partial, then the seal. Owns what it needs, so it can
    /// run as a task of its own while the loop goes on.
    pub async fn write(mut self) -> SealOutcome {
        let partials = std::mem::take(&mut self.partials);
        let written = self.write_partials_and_seal(partials).await;
        SealOutcome {
            pending: self,
            written,
        }
    }

    async fn write_partials_and_seal(
        &self,
        partials: Vec<(u32, PartialKind, Bytes)>,
    ) -> Result<Vec<(u32, PartialKind, u64)>, EngineError> {
        let epoch = self.epoch;
        let version = self.state.authoritative_version();
        let written: Vec<(u32, PartialKind, u64)> = futures::stream::iter(partials)
            .map(|(vnode, kind, bytes)| {
                let state = self.state.clone();
                async move {
                    let len = bytes.len() as u64;
                    retrying(|| {
                        state.write_partial_kind(vnode, epoch, version, kind, bytes.clone())
                    })
                    .await
                    .map(|()| (vnode, kind, len))
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .try_collect()
            .await?;
        let vnodes: Vec<u32> = written.iter().map(|(v, _, _)| *v).collect();
        let outcome =
            retrying(|| self.state.seal_epoch(epoch, &vnodes, self.extras.clone())).await?;
        if !outcome.is_sealed() {
            return Err(EngineError::Invariant {
                operator: "checkpoint",
                message: format!("epoch {epoch} was not sealed: {outcome:?}"),
            });
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(deltas: u32, delta_bytes: u64, snapshot_bytes: u64) -> Chain {
        Chain {
            deltas,
            delta_bytes,
            snapshot_bytes,
        }
    }

    #[test]
    fn one_due_chain_takes_every_grown_chain_with_it() {
        let chains = HashMap::from([
            (1, chain(3, 100, 10_000)),
            (2, chain(0, 0, 10_000)),
            (3, chain(MAX_DELTAS, 100, 10_000)),
            (4, chain(1, 50, 10_000)),
        ]);
        // Changed vnodes with short chains: deltas only.
        assert!(snapshot_vnodes(&chains, [1, 2].into_iter()).is_empty());
        // Vnode 3 is due: it, the changed 2, and every chain with deltas.
        assert_eq!(
            snapshot_vnodes(&chains, [2, 3].into_iter()),
            BTreeSet::from([1, 2, 3, 4])
        );
        // A vnode without a chain yet is due too.
        assert_eq!(
            snapshot_vnodes(&chains, [9].into_iter()),
            BTreeSet::from([1, 3, 4, 9])
        );
        // Deltas that outweigh the snapshot make a chain due.
        let heavy = HashMap::from([(5, chain(2, 20_000, 10_000)), (6, chain(0, 0, 1))]);
        assert_eq!(
            snapshot_vnodes(&heavy, [5].into_iter()),
            BTreeSet::from([5])
        );
    }
}
