//! Writes each completed epoch of the coordinator to the state
//! backend: one partial per changed vnode, then the epoch's seal.
//!
//! A partial is a delta: the vnode's entries that changed in the epoch. A
//! vnode's chain (its snapshot, then its deltas) is cut when it has grown
//! long or its deltas outweigh its snapshot, not by taking a snapshot from
//! the operators (which keep state by key, so any snapshot reads all of
//! it) but by compacting the chain in the background from what the store
//! holds ([`super::compactor`]); a later seal puts the merged blob in place
//! of the blobs it merged. So a checkpoint costs the loop O(changed state),
//! and restoring a vnode reads one snapshot and a bounded number of deltas.
//!
//! The first checkpoint of a process, and the one after a failed
//! checkpoint, snapshots every vnode from the operators (empty ones too):
//! chains carried in the store from earlier runs, or from a checkpoint
//! whose change records were drained but never sealed, must not describe
//! the current state.
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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_storage::{ObjectStateBackend, PartialKind, SealExtras, StateBackend};

use super::RuntimeObserver;
use super::compactor::{Compacted, Compactor};
use super::streams::Streams;
use crate::{Coordinator, EngineError, VNODES, VnodeState};

/// A vnode's chain is compacted once it holds this many deltas.
pub(super) const MAX_DELTAS: usize = 16;
/// Attempts of one partial write or seal on transient store errors (both
/// are idempotent), before the checkpoint fails as a whole.
pub const ATTEMPTS: u32 = 4;
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

/// A vnode's chain as this process wrote it: its snapshot's size and its
/// deltas since, (epoch, bytes) in epoch order.
#[derive(Default, Clone)]
struct Chain {
    snapshot_bytes: u64,
    deltas: Vec<(u64, u64)>,
}

impl Chain {
    fn wants_compaction(&self) -> bool {
        let delta_bytes: u64 = self.deltas.iter().map(|(_, bytes)| bytes).sum();
        self.deltas.len() >= MAX_DELTAS || delta_bytes > self.snapshot_bytes.max(4096)
    }

    /// A compaction through `epoch` landed: it is the snapshot now, and
    /// the deltas after it follow.
    fn compacted(&mut self, epoch: u64, bytes: u64) {
        self.snapshot_bytes = bytes;
        self.deltas.retain(|(e, _)| *e > epoch);
    }
}

/// The vnodes whose chains are due for compaction, in order.
fn due_vnodes(chains: &HashMap<u32, Chain>, busy: impl Fn(u32) -> bool) -> Vec<u32> {
    let mut due: Vec<u32> = chains
        .iter()
        .filter(|(vnode, chain)| chain.wants_compaction() && !busy(**vnode))
        .map(|(vnode, _)| *vnode)
        .collect();
    due.sort_unstable();
    due
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
#[derive(Debug, Default, Clone)]
pub struct ObjectChain {
    pub snapshot_epoch: u64,
    pub snapshot_bytes: u64,
    pub deltas: u32,
    pub delta_bytes: u64,
    pub last_written_epoch: u64,
    /// (epoch, bytes) of each delta counted in `deltas`, so that a
    /// compaction can take off the ones it merged.
    delta_epochs: Vec<(u64, u64)>,
}

impl ObjectChain {
    fn add_delta(&mut self, epoch: u64, bytes: u64) {
        self.deltas += 1;
        self.delta_bytes += bytes;
        self.delta_epochs.push((epoch, bytes));
        self.last_written_epoch = epoch;
    }

    fn compacted(&mut self, epoch: u64, bytes: u64) {
        self.snapshot_epoch = epoch;
        self.snapshot_bytes = bytes;
        self.delta_epochs.retain(|(e, _)| *e > epoch);
        self.deltas = self.delta_epochs.len() as u32;
        self.delta_bytes = self.delta_epochs.iter().map(|(_, b)| b).sum();
    }
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
    compactor: Compactor,
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
    /// Chains merged in the background, for the seal to put in place.
    compactions: Vec<Compacted>,
    /// The projections whose state this checkpoint holds (live, not
    /// failed): what a compaction started after it keeps.
    live: Arc<HashSet<weir_common::ObjectId>>,
    extras: SealExtras,
}

/// What writing a [`PendingSeal`] did, for [`Checkpointer::finish`].
pub struct SealOutcome {
    pending: PendingSeal,
    /// What was written, or why it failed.
    written: Result<Written, EngineError>,
}

/// Per partial written: (vnode, kind, bytes); and the vnodes whose
/// compaction the seal put in place.
type Written = (Vec<(u32, PartialKind, u64)>, HashSet<u32>);

impl Checkpointer {
    pub fn new(
        state: Arc<ObjectStateBackend>,
        table_log_id: String,
        log: Arc<parking_lot::Mutex<CheckpointLog>>,
    ) -> Self {
        Self {
            compactor: Compactor::new(state.clone()),
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

    /// The latest epoch sealed (landed).
    pub fn last_sealed_epoch(&self) -> u64 {
        self.last_sealed
    }

    /// Why this process may no longer checkpoint (or write), if it may not.
    pub fn fenced(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    pub fn backend(&self) -> &Arc<ObjectStateBackend> {
        &self.state
    }

    /// Whether a checkpoint of the coordinator's latest completed epoch is
    /// due: it is not sealed already, no checkpoint is in flight, the last
    /// one is at least `min_interval` old and the store is not fenced.
    pub fn due(&self, coordinator: &Coordinator, min_interval: Duration) -> bool {
        let epoch = coordinator.view().epoch.0;
        !(self.fenced.is_some()
            || self.in_flight
            || epoch <= self.last_sealed
            || self
                .last_checkpoint
                .is_some_and(|at| at.elapsed() < min_interval))
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
        if !self.due(coordinator, min_interval) {
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
        let (written, landed) = match written {
            Ok(w) => w,
            Err(e) => {
                self.compactor
                    .sealed(&pending.compactions, &HashSet::new(), false);
                return self.failed(epoch, e, observer);
            }
        };
        self.compactor.sealed(&pending.compactions, &landed, true);
        let took = pending.started.elapsed();
        let bytes = self.record(&pending, written, &landed);
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
        let due = due_vnodes(&self.chains, |v| self.compactor.is_busy(v));
        self.compactor.start(epoch, due, pending.live.clone());
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

    /// A checkpoint's write failed: logged and counted; fenced for good if
    /// another process claimed the state, or else the next checkpoint is
    /// written in full.
    fn failed(
        &mut self,
        epoch: u64,
        error: EngineError,
        observer: &dyn RuntimeObserver,
    ) -> Option<u64> {
        match error {
            EngineError::State(e) if e.is_fenced() => {
                tracing::error!(error = %e, epoch, "another process claimed the state backend: no more checkpoints, and writes are refused from now on");
                observer.checkpoint_failed();
                self.fenced = Some(e.to_string());
            }
            e => {
                tracing::error!(error = %e, epoch, "checkpoint failed; the next one is written in full");
                observer.checkpoint_failed();
                self.needs_full = true;
            }
        }
        None
    }

    /// A prepared checkpoint's write was lost (its task died): nothing of
    /// it is known to be sealed, so the next checkpoint is written in full.
    pub fn abandon(&mut self, observer: &dyn RuntimeObserver) {
        self.in_flight = false;
        self.compactor.abandoned();
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
        // What sinks that do not write have missed is sealed with the
        // state that moved past it.
        for (sink, epochs) in streams.undelivered() {
            coordinator.keep_undelivered(sink, &epochs);
        }
        let changes = coordinator.checkpoint_changes()?;
        let (snapshot_vnodes, mut snapshots): (BTreeSet<u32>, BTreeMap<u32, VnodeState>) =
            if self.needs_full {
                ((0..VNODES).collect(), coordinator.checkpoint_full()?)
            } else {
                Default::default()
            };
        let mut partials: Vec<(u32, PartialKind, Bytes)> = Vec::new();
        let mut object_bytes: HashMap<(weir_common::ObjectId, u32), u64> = HashMap::new();
        let mut add = |vnode: u32, kind: PartialKind, state: VnodeState| {
            for (object, _, entry) in &state.entries {
                *object_bytes.entry((*object, vnode)).or_default() +=
                    (entry.key.len() + entry.value.as_ref().map_or(0, Bytes::len)) as u64;
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
        let live = view
            .projections
            .iter()
            .filter(|(_, p)| p.failure.is_none())
            .map(|(id, _)| *id)
            .collect();
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
            compactions: self.compactor.take_done(),
            live: Arc::new(live),
            extras: SealExtras {
                source_offsets,
                sink_descriptors,
                compactions: Vec::new(),
            },
        })
    }

    /// Updates the chains after a seal; returns the bytes of partials written.
    /// Updates the chains after a seal, first the compactions it put in
    /// place (`landed`), then its own partials; returns the bytes written.
    fn record(
        &mut self,
        pending: &PendingSeal,
        written: Vec<(u32, PartialKind, u64)>,
        landed: &HashSet<u32>,
    ) -> u64 {
        let epoch = pending.epoch;
        let snapshot_vnodes = &pending.snapshot_vnodes;
        let landed: Vec<&Compacted> = pending
            .compactions
            .iter()
            .filter(|c| landed.contains(&c.compaction.vnode))
            .collect();
        {
            let mut log = self.log.lock();
            for compacted in &landed {
                let (vnode, through) =
                    (compacted.compaction.vnode, compacted.compaction.entry.epoch);
                // Objects the merge left out (dropped, failed) keep only
                // the deltas written after it.
                for ((object, v), chain) in log.chains.iter_mut() {
                    if *v == vnode {
                        let bytes = compacted.object_bytes.get(object).copied().unwrap_or(0);
                        chain.compacted(through, bytes);
                    }
                }
                for (&object, &bytes) in &compacted.object_bytes {
                    log.chains
                        .entry((object, vnode))
                        .or_default()
                        .compacted(through, bytes);
                }
                log.chains.retain(|(_, v), chain| {
                    *v != vnode || chain.snapshot_bytes > 0 || chain.deltas > 0
                });
            }
            // A snapshot replaces everything the vnode held, of every object.
            log.chains
                .retain(|(_, vnode), _| !snapshot_vnodes.contains(vnode));
            for (&(object, vnode), &bytes) in &pending.object_bytes {
                let chain = log.chains.entry((object, vnode)).or_default();
                if snapshot_vnodes.contains(&vnode) {
                    chain.last_written_epoch = epoch;
                    chain.snapshot_epoch = epoch;
                    chain.snapshot_bytes = bytes;
                } else {
                    chain.add_delta(epoch, bytes);
                }
            }
        }
        for compacted in &landed {
            let entry = &compacted.compaction.entry;
            self.chains
                .entry(compacted.compaction.vnode)
                .or_default()
                .compacted(entry.epoch, entry.len);
        }
        let mut bytes = landed.iter().map(|c| c.compaction.entry.len).sum();
        for (vnode, kind, len) in written {
            bytes += len;
            let chain = self.chains.entry(vnode).or_default();
            match kind {
                PartialKind::Snapshot => {
                    *chain = Chain {
                        snapshot_bytes: len,
                        deltas: Vec::new(),
                    }
                }
                PartialKind::Delta => chain.deltas.push((epoch, len)),
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
    ) -> Result<Written, EngineError> {
        let epoch = self.epoch;
        let version = self.state.authoritative_version();
        // One object per few vnodes, not per vnode: see `write_partials`.
        retrying(|| self.state.write_partials(epoch, version, &partials)).await?;
        let written: Vec<(u32, PartialKind, u64)> = partials
            .iter()
            .map(|(vnode, kind, bytes)| (*vnode, *kind, bytes.len() as u64))
            .collect();
        let vnodes: Vec<u32> = written.iter().map(|(v, _, _)| *v).collect();
        let mut extras = self.extras.clone();
        extras.compactions = self
            .compactions
            .iter()
            .map(|c| c.compaction.clone())
            .collect();
        let outcome = retrying(|| self.state.seal_epoch(epoch, &vnodes, extras.clone())).await?;
        let manifest = match outcome {
            weir_storage::SealOutcome::Sealed(m) | weir_storage::SealOutcome::AlreadySealed(m) => m,
            weir_storage::SealOutcome::Incomplete { .. } => {
                return Err(EngineError::Invariant {
                    operator: "checkpoint",
                    message: format!("epoch {epoch} was not sealed: {outcome:?}"),
                });
            }
        };
        let landed = extras
            .compactions
            .iter()
            .filter(|c| {
                manifest
                    .vnodes
                    .get(&c.vnode)
                    .and_then(|chain| chain.first())
                    .is_some_and(|first| *first == c.entry)
            })
            .map(|c| c.vnode)
            .collect();
        Ok((written, landed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(deltas: &[(u64, u64)], snapshot_bytes: u64) -> Chain {
        Chain {
            snapshot_bytes,
            deltas: deltas.to_vec(),
        }
    }

    #[test]
    fn chains_come_due_when_long_or_heavy_and_a_compaction_keeps_later_deltas() {
        let long: Vec<(u64, u64)> = (1..=MAX_DELTAS as u64).map(|e| (e, 10)).collect();
        let chains = HashMap::from([
            (1, chain(&[(1, 100), (2, 100)], 10_000)),
            (2, chain(&long, 10_000)),
            (3, chain(&[(1, 6_000), (2, 5_000)], 10_000)),
            (4, chain(&[(1, 3_000)], 100)),
            (5, chain(&[(1, 5_000)], 100)),
        ]);
        // Long (2), heavier than its snapshot (3), heavier than the 4 KiB
        // floor (4 is not: 3 000 bytes over a 100-byte snapshot).
        assert_eq!(due_vnodes(&chains, |_| false), vec![2, 3, 5]);
        assert_eq!(due_vnodes(&chains, |v| v == 3), vec![2, 5]);

        let mut grown = chain(&long, 10_000);
        grown.compacted(MAX_DELTAS as u64 - 2, 12_000);
        assert_eq!(grown.snapshot_bytes, 12_000);
        assert_eq!(
            grown.deltas,
            [(MAX_DELTAS as u64 - 1, 10), (MAX_DELTAS as u64, 10)]
        );
        assert!(!grown.wants_compaction());

        let mut object = ObjectChain::default();
        for epoch in 1..=4 {
            object.add_delta(epoch, 100);
        }
        object.compacted(3, 250);
        assert_eq!(
            (
                object.snapshot_epoch,
                object.snapshot_bytes,
                object.deltas,
                object.delta_bytes
            ),
            (3, 250, 1, 100)
        );
    }
}
