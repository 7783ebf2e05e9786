//! The decisions of the seal/fence protocol as pure functions, and a small
//! in-memory model of the protocol built from them.
//!
//! [`ObjectStateBackend`](super::ObjectStateBackend) does the I/O and asks
//! these functions what to do with what it observed: which generation to
//! claim, whether a writer is fenced, how a seal extends the chains, what an
//! existing seal in a slot means, and what pruning may delete. [`Model`] runs
//! the same functions over a map of create-only keys, one atomic store step
//! at a time, so a property test can interleave two leaders (one of them slow
//! and deposed) and check the invariants the real backend relies on:
//!
//! - a seal slot is created at most once, except that a deposed leader may
//!   re-create a *pruned* slot, and then only strictly below the latest seal
//!   (so it never becomes the seal readers trust);
//! - once a takeover seal of generation `g` exists, no older generation's
//!   seal is ever created at or above the latest seal;
//! - the latest seal's chains only name blobs that exist;
//! - a takeover is done only once its seal is the latest: its put may land
//!   in a slot a concurrent prune emptied below the latest (the store moved
//!   on after the takeover listed it), and a takeover there would fence no
//!   one, so the walk looks at the top again and moves above it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::StateBackendError;
use super::manifest::{ChainEntry, PartialKind, SealKind, SealManifest, partial_name};

/// The generation a new claim tries: one above every claim seen (first is 1).
pub fn next_generation(claimed: impl IntoIterator<Item = u64>) -> u64 {
    claimed.into_iter().max().unwrap_or(0) + 1
}

/// May a writer of generation `generation` with this assignment version
/// write? `newest_generation` is the highest claim it has seen.
pub fn check_write(
    assignment_version: u64,
    authoritative: u64,
    generation: u64,
    newest_generation: u64,
) -> Result<(), StateBackendError> {
    if assignment_version < authoritative {
        return Err(StateBackendError::StaleVersion {
            caller: assignment_version,
            authoritative,
        });
    }
    check_fence(generation, newest_generation)
}

/// A newer claim than ours exists: we are deposed.
pub fn check_fence(generation: u64, newest_generation: u64) -> Result<(), StateBackendError> {
    if newest_generation > generation {
        return Err(StateBackendError::StaleVersion {
            caller: generation,
            authoritative: newest_generation,
        });
    }
    Ok(())
}

/// Who is sealing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealer {
    pub committer: String,
    pub generation: u64,
    pub assignment_version: u64,
}

/// What an existing seal in a slot we wanted means for us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotVerdict {
    /// We wrote it (an earlier attempt whose answer was lost, or a stale list).
    Ours,
    /// Another committer won the slot.
    Other { committer: String, generation: u64 },
}

pub fn judge_existing(existing: &SealManifest, sealer: &Sealer) -> SlotVerdict {
    if existing.committer == sealer.committer && existing.generation == sealer.generation {
        SlotVerdict::Ours
    } else {
        SlotVerdict::Other {
            committer: existing.committer.clone(),
            generation: existing.generation,
        }
    }
}

/// Losing a seal slot: the other committer sealed what we meant to seal.
fn split_brain(committer: String, sealer: &Sealer) -> StateBackendError {
    StateBackendError::SplitBrainCommit {
        committer,
        self_id: sealer.committer.clone(),
    }
}

/// A seal we would build on was made by a newer generation: we are deposed.
fn check_base(latest: Option<&SealManifest>, sealer: &Sealer) -> Result<(), StateBackendError> {
    match latest {
        Some(l) => check_fence(sealer.generation, l.generation),
        None => Ok(()),
    }
}

/// A vnode's chain as of a seal, merged into one snapshot blob in the
/// background (written by `ObjectStateBackend::write_compaction`), to take
/// the place of the blobs it merged in a later seal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    pub vnode: u32,
    /// The path of the first blob of the chain that was merged. The chain
    /// is replaced only while it still starts there: a snapshot written
    /// since then reset it, and the compaction describes nothing current.
    pub replaces_from: String,
    /// The merged blob: kind `Snapshot`, `epoch` the seal whose chain was
    /// merged. It replaces every blob of the chain up to that epoch.
    pub entry: ChainEntry,
}

/// Whether `compaction` applies to `chain`: it still starts where the
/// merged chain started.
pub fn compaction_applies(chain: &[ChainEntry], compaction: &Compaction) -> bool {
    chain
        .first()
        .is_some_and(|first| first.path == compaction.replaces_from)
}

/// The chains after one epoch: first each compaction that still applies
/// replaces the blobs it merged (the chain's blobs up to its epoch, which
/// are exactly what it merged: later seals only append later epochs), then
/// a snapshot resets a vnode's chain, a delta appends to it, and a vnode
/// without a new blob keeps its chain.
pub fn extend_chains(
    base: &BTreeMap<u32, Vec<ChainEntry>>,
    compactions: &[Compaction],
    new: &[(u32, ChainEntry)],
) -> BTreeMap<u32, Vec<ChainEntry>> {
    let mut chains = base.clone();
    for compaction in compactions {
        if let Some(chain) = chains.get_mut(&compaction.vnode)
            && compaction_applies(chain, compaction)
        {
            chain.retain(|e| e.epoch > compaction.entry.epoch);
            chain.insert(0, compaction.entry.clone());
        }
    }
    for (vnode, entry) in new {
        let chain = chains.entry(*vnode).or_default();
        if entry.kind == PartialKind::Snapshot {
            chain.clear();
        }
        chain.push(entry.clone());
    }
    chains
}

/// The answer of a seal or takeover that finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkDone {
    /// We created the target slot.
    Sealed(SealManifest),
    /// The target slot already held our seal (a retry).
    AlreadySealed(SealManifest),
}

/// Sealing epoch `target` on top of the latest seal: create every slot from
/// `latest + 1` to `target` in order (gap seals, then the epoch seal), or for
/// a takeover, the first free slot after the latest. One put per step.
#[derive(Debug, Clone)]
pub struct SealWalk {
    sealer: Sealer,
    /// `None` for a takeover: the walk ends at the first slot it creates.
    target: Option<u64>,
    slot: u64,
    base: Option<SealManifest>,
    new_entries: Vec<(u32, ChainEntry)>,
    compactions: Vec<Compaction>,
    source_offsets: BTreeMap<String, String>,
    sink_descriptors: BTreeMap<String, String>,
    /// A takeover seal we created, until the latest seal is known to be it.
    unconfirmed: Option<SealManifest>,
}

/// Slots a single seal may fill: a bigger gap is a caller bug, not a reason to
/// create thousands of objects.
pub const MAX_GAP: u64 = 10_000;

impl SealWalk {
    /// A takeover after the latest seal `latest`.
    pub fn takeover(
        sealer: Sealer,
        latest: Option<SealManifest>,
    ) -> Result<Self, StateBackendError> {
        check_base(latest.as_ref(), &sealer)?;
        Ok(Self {
            sealer,
            target: None,
            slot: latest.as_ref().map_or(0, |l| l.epoch + 1),
            base: latest,
            new_entries: Vec::new(),
            compactions: Vec::new(),
            source_offsets: BTreeMap::new(),
            sink_descriptors: BTreeMap::new(),
            unconfirmed: None,
        })
    }

    /// Seal `target` with `new_entries` (this epoch's blobs) and
    /// `compactions` on top of `latest`, which must be below `target` (see
    /// [`resolve_sealed`]).
    #[allow(clippy::too_many_arguments)]
    pub fn seal(
        sealer: Sealer,
        target: u64,
        latest: Option<SealManifest>,
        new_entries: Vec<(u32, ChainEntry)>,
        compactions: Vec<Compaction>,
        source_offsets: BTreeMap<String, String>,
        sink_descriptors: BTreeMap<String, String>,
    ) -> Result<Self, StateBackendError> {
        check_base(latest.as_ref(), &sealer)?;
        let slot = latest.as_ref().map_or(0, |l| l.epoch + 1);
        if target < slot || target - slot > MAX_GAP {
            return Err(StateBackendError::SealOrder {
                epoch: target,
                latest: slot.saturating_sub(1),
                reason: if target < slot {
                    "a later epoch is already sealed"
                } else {
                    "too many epochs skipped since the latest seal"
                },
            });
        }
        Ok(Self {
            sealer,
            target: Some(target),
            slot,
            base: latest,
            new_entries,
            compactions,
            source_offsets,
            sink_descriptors,
            unconfirmed: None,
        })
    }

    /// The slot the next put goes to.
    pub fn slot(&self) -> u64 {
        self.slot
    }

    /// The manifest to create at [`slot`](Self::slot).
    pub fn candidate(&self, sealed_at_ms: u64) -> SealManifest {
        let base_chains = self
            .base
            .as_ref()
            .map(|b| b.vnodes.clone())
            .unwrap_or_default();
        let is_target = self.target == Some(self.slot);
        let (kind, vnodes, bytes_written) = match self.target {
            None => (SealKind::Takeover, base_chains, 0),
            Some(_) if is_target => {
                let applied = self.compactions.iter().filter(|c| {
                    base_chains
                        .get(&c.vnode)
                        .is_some_and(|chain| compaction_applies(chain, c))
                });
                (
                    SealKind::Epoch,
                    extend_chains(&base_chains, &self.compactions, &self.new_entries),
                    self.new_entries.iter().map(|(_, e)| e.len).sum::<u64>()
                        + applied.map(|c| c.entry.len).sum::<u64>(),
                )
            }
            Some(_) => (SealKind::Gap, base_chains, 0),
        };
        // Offsets and descriptors describe the state the seal names; a marker
        // names the previous state, so it carries the previous ones.
        let (source_offsets, sink_descriptors) = if is_target {
            (self.source_offsets.clone(), self.sink_descriptors.clone())
        } else {
            self.base
                .as_ref()
                .map(|b| (b.source_offsets.clone(), b.sink_descriptors.clone()))
                .unwrap_or_default()
        };
        SealManifest {
            epoch: self.slot,
            kind,
            committer: self.sealer.committer.clone(),
            generation: self.sealer.generation,
            assignment_version: self.sealer.assignment_version,
            sealed_at_ms,
            prev_epoch: self.base.as_ref().map(|b| b.epoch),
            vnodes,
            bytes_written,
            source_offsets,
            sink_descriptors,
        }
    }

    fn done_at_slot(&self) -> bool {
        self.target.is_none_or(|t| t == self.slot)
    }

    /// Our put of the candidate succeeded. A takeover then needs the
    /// latest seal ([`needs_top`](Self::needs_top)) before it is done.
    pub fn on_created(&mut self, created: SealManifest) -> Option<WalkDone> {
        if self.target.is_none() {
            self.unconfirmed = Some(created);
            return None;
        }
        if self.done_at_slot() {
            return Some(WalkDone::Sealed(created));
        }
        self.slot += 1;
        self.base = Some(created);
        None
    }

    /// The next step is reading the latest seal and passing it to
    /// [`on_top`](Self::on_top), not a put.
    pub fn needs_top(&self) -> bool {
        self.unconfirmed.is_some()
    }

    /// The latest seal after our takeover seal was created. If it is ours,
    /// the takeover is done. If a higher one exists, our seal filled a hole
    /// below the latest that a prune left: a newer generation's seal there
    /// means we are deposed, an older one's means its leader is still
    /// sealing, and we take the slot above it.
    pub fn on_top(
        &mut self,
        latest: Option<SealManifest>,
    ) -> Result<Option<WalkDone>, StateBackendError> {
        let Some(created) = self.unconfirmed.take() else {
            return Ok(None);
        };
        match latest {
            Some(top) if top.epoch > created.epoch => {
                check_fence(self.sealer.generation, top.generation)?;
                self.slot = top.epoch + 1;
                self.base = Some(top);
                Ok(None)
            }
            // Ours is the latest (a listing never shows less than what we
            // created, and the latest is never pruned).
            _ => Ok(Some(WalkDone::Sealed(created))),
        }
    }

    /// The slot was taken; `existing` is what holds it.
    pub fn on_exists(
        &mut self,
        existing: SealManifest,
    ) -> Result<Option<WalkDone>, StateBackendError> {
        match (self.target, judge_existing(&existing, &self.sealer)) {
            // A takeover moves past any older seal, but a newer generation's
            // seal means a later claim already took over from us.
            (None, SlotVerdict::Other { generation, .. }) => {
                check_fence(self.sealer.generation, generation)?
            }
            (None, SlotVerdict::Ours) => {}
            (Some(target), SlotVerdict::Ours) if target == self.slot => {
                return resolve_ours(existing, target).map(Some);
            }
            (Some(_), SlotVerdict::Ours) => {}
            (Some(_), SlotVerdict::Other { committer, .. }) => {
                return Err(split_brain(committer, &self.sealer));
            }
        }
        self.slot += 1;
        self.base = Some(existing);
        Ok(None)
    }
}

fn resolve_ours(existing: SealManifest, target: u64) -> Result<WalkDone, StateBackendError> {
    if existing.kind != SealKind::Epoch {
        // Our own marker took the slot (e.g. the takeover of an empty store
        // takes epoch 0): this epoch's data can never be sealed there.
        return Err(StateBackendError::SealOrder {
            epoch: target,
            latest: target,
            reason: "the slot holds a takeover or gap marker",
        });
    }
    Ok(WalkDone::AlreadySealed(existing))
}

/// Sealing `target` when the latest seal is already at or past it: fine only
/// as a retry of our own seal. `existing` is the seal at `target`, if any.
pub fn resolve_sealed(
    sealer: &Sealer,
    target: u64,
    latest: u64,
    existing: Option<SealManifest>,
) -> Result<WalkDone, StateBackendError> {
    let Some(existing) = existing else {
        return Err(StateBackendError::SealOrder {
            epoch: target,
            latest,
            reason: "a later epoch is already sealed",
        });
    };
    match judge_existing(&existing, sealer) {
        SlotVerdict::Ours => resolve_ours(existing, target),
        SlotVerdict::Other { committer, .. } => Err(split_brain(committer, sealer)),
    }
}

/// The effective prune bound: never at or above the first unsealed epoch, so
/// blobs of an epoch being written survive whatever the caller asks.
pub fn prune_bound(before: u64, latest: Option<u64>) -> u64 {
    latest.map_or(0, |l| before.min(l + 1))
}

/// Seals to delete: those below `before`, except the latest.
pub fn seals_to_prune(seals: &BTreeSet<u64>, before: u64) -> Vec<u64> {
    let latest = seals.last().copied();
    let before = prune_bound(before, latest);
    seals
        .range(..before)
        .copied()
        .filter(|e| Some(*e) != latest)
        .collect()
}

/// Blobs to delete: those below `before` that no retained seal references.
/// `blobs` are `(epoch, root-relative path)`.
pub fn blobs_to_prune(
    blobs: &[(u64, String)],
    before: u64,
    referenced: &HashSet<String>,
) -> Vec<String> {
    blobs
        .iter()
        .filter(|(epoch, path)| *epoch < before && !referenced.contains(path))
        .map(|(_, path)| path.clone())
        .collect()
}

// ---- the model ------------------------------------------------------------------

/// One created seal, for checking history properties.
#[derive(Debug, Clone)]
pub struct Creation {
    pub epoch: u64,
    pub kind: SealKind,
    pub generation: u64,
    /// The highest seal epoch that existed just before this creation.
    pub latest_before: Option<u64>,
    /// Another seal had been created at this epoch before (and pruned).
    pub recreated: bool,
}

/// A create-only store: fence claims, blobs (name -> kind) and seals.
#[derive(Debug, Default, Clone)]
pub struct ModelStore {
    pub fences: BTreeSet<u64>,
    pub blobs: BTreeMap<String, PartialKind>,
    pub seals: BTreeMap<u64, SealManifest>,
    pub history: Vec<Creation>,
    /// Takeovers their leader saw finish: `(epoch, latest seal then)`.
    pub takeovers_done: Vec<(u64, Option<u64>)>,
    ever_sealed: BTreeSet<u64>,
}

impl ModelStore {
    /// Create-only: `Some(existing)` when the slot is taken.
    fn create_seal(&mut self, m: SealManifest) -> Option<SealManifest> {
        if let Some(existing) = self.seals.get(&m.epoch) {
            return Some(existing.clone());
        }
        self.history.push(Creation {
            epoch: m.epoch,
            kind: m.kind,
            generation: m.generation,
            latest_before: self.seals.keys().last().copied(),
            recreated: !self.ever_sealed.insert(m.epoch),
        });
        self.seals.insert(m.epoch, m);
        None
    }

    fn latest(&self) -> Option<SealManifest> {
        self.seals.values().last().cloned()
    }

    /// Check the protocol's invariants; `Err` describes the first violation.
    pub fn check(&self) -> Result<(), String> {
        let mut takeovers: Vec<(u64, u64)> = Vec::new(); // (generation, epoch)
        for c in &self.history {
            let below_latest = c.latest_before.is_some_and(|l| c.epoch < l);
            if c.recreated && !below_latest {
                return Err(format!("epoch {} sealed twice at the top: {c:?}", c.epoch));
            }
            if takeovers.iter().any(|(g, _)| *g > c.generation) && !below_latest {
                return Err(format!("deposed generation sealed at the top: {c:?}"));
            }
            // A takeover fences older generations from the top only where it
            // was the top; one that filled a pruned hole below the latest is
            // not done yet (its walk moves above the latest).
            if c.kind == SealKind::Takeover && !below_latest {
                takeovers.push((c.generation, c.epoch));
            }
        }
        for (epoch, latest) in &self.takeovers_done {
            if *latest != Some(*epoch) {
                return Err(format!(
                    "takeover at {epoch} finished below the latest seal {latest:?}"
                ));
            }
        }
        if let Some(latest) = self.latest() {
            for entry in latest.vnodes.values().flatten() {
                if !self.blobs.contains_key(&entry.path) {
                    return Err(format!(
                        "latest seal {} names missing {}",
                        latest.epoch, entry.path
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What a model leader is in the middle of; each variant is one store step.
#[derive(Debug, Clone)]
enum Pending {
    Idle,
    ClaimList,
    ClaimPut(u64),
    TakeoverList,
    SealFence { epoch: u64, vnodes: Vec<u32> },
    SealList { epoch: u64, vnodes: Vec<u32> },
    Walk(Box<SealWalk>),
}

/// A leader of the model: claims, writes partials and seals its epochs.
#[derive(Debug, Clone)]
pub struct ModelLeader {
    pub instance: String,
    pub generation: u64,
    pub next_epoch: u64,
    /// Blobs written for `next_epoch`.
    written: BTreeMap<u32, PartialKind>,
    newest_seen: u64,
    pending: Pending,
    /// Stopped after being fenced or losing a slot.
    pub deposed: bool,
}

/// Actions a test drives the model with.
#[derive(Debug, Clone)]
pub enum Action {
    Claim(usize),
    Write {
        leader: usize,
        vnode: u32,
        kind: PartialKind,
    },
    Seal(usize),
    /// Advance a leader's pending operation by one store step.
    Step(usize),
    /// Advance the epoch a leader writes, leaving a gap.
    Skip(usize),
    Prune {
        leader: usize,
        keep: u64,
    },
}

/// Leaders over one store.
#[derive(Debug, Clone)]
pub struct Model {
    pub store: ModelStore,
    pub leaders: Vec<ModelLeader>,
}

impl Model {
    pub fn new(leaders: usize) -> Self {
        Self {
            store: ModelStore::default(),
            leaders: (0..leaders)
                .map(|i| ModelLeader {
                    instance: format!("node-{i}"),
                    generation: 0,
                    next_epoch: 0,
                    written: BTreeMap::new(),
                    newest_seen: 0,
                    pending: Pending::Idle,
                    deposed: false,
                })
                .collect(),
        }
    }

    fn sealer(l: &ModelLeader) -> Sealer {
        Sealer {
            committer: l.instance.clone(),
            generation: l.generation,
            assignment_version: l.generation,
        }
    }

    /// Apply one action; actions that do not fit the leader's state are no-ops.
    pub fn apply(&mut self, action: &Action) {
        let store = &mut self.store;
        match *action {
            Action::Claim(i) => {
                let l = &mut self.leaders[i];
                if matches!(l.pending, Pending::Idle) && l.generation == 0 {
                    l.pending = Pending::ClaimList;
                }
            }
            Action::Write {
                leader,
                vnode,
                kind,
            } => {
                let l = &mut self.leaders[leader];
                let ready = l.generation > 0 && !l.deposed && matches!(l.pending, Pending::Idle);
                if !ready
                    || check_write(l.generation, l.generation, l.generation, l.newest_seen).is_err()
                {
                    return;
                }
                let name = partial_name(l.next_epoch, vnode, l.generation, &l.instance);
                if store.blobs.get(&name).is_none_or(|k| *k == kind) {
                    store.blobs.insert(name, kind);
                    l.written.insert(vnode, kind);
                }
            }
            Action::Seal(i) => {
                let l = &mut self.leaders[i];
                if l.generation > 0 && !l.deposed && matches!(l.pending, Pending::Idle) {
                    l.pending = Pending::SealFence {
                        epoch: l.next_epoch,
                        vnodes: l.written.keys().copied().collect(),
                    };
                }
            }
            Action::Skip(i) => {
                let l = &mut self.leaders[i];
                if matches!(l.pending, Pending::Idle) && l.generation > 0 {
                    l.next_epoch += 1;
                    l.written.clear();
                }
            }
            Action::Prune { leader, keep } => {
                let l = &self.leaders[leader];
                let newest = store.fences.last().copied().unwrap_or(0);
                if l.generation == 0 || l.deposed || check_fence(l.generation, newest).is_err() {
                    return;
                }
                prune_model(store, keep);
            }
            Action::Step(i) => step(store, &mut self.leaders[i]),
        }
    }
}

fn prune_model(store: &mut ModelStore, keep: u64) {
    let seals: BTreeSet<u64> = store.seals.keys().copied().collect();
    let Some(latest) = seals.last().copied() else {
        return;
    };
    let before = prune_bound(latest.saturating_sub(keep), Some(latest));
    for epoch in seals_to_prune(&seals, before) {
        store.seals.remove(&epoch);
    }
    let referenced: HashSet<String> = store
        .seals
        .values()
        .flat_map(|m| m.vnodes.values().flatten().map(|e| e.path.clone()))
        .collect();
    let blobs: Vec<(u64, String)> = store
        .blobs
        .keys()
        .filter_map(|p| super::manifest::parse_partial_epoch(p).map(|e| (e, p.clone())))
        .collect();
    for path in blobs_to_prune(&blobs, before, &referenced) {
        store.blobs.remove(&path);
    }
}

fn step(store: &mut ModelStore, l: &mut ModelLeader) {
    let pending = std::mem::replace(&mut l.pending, Pending::Idle);
    l.pending = match pending {
        Pending::Idle => Pending::Idle,
        Pending::ClaimList => Pending::ClaimPut(next_generation(store.fences.iter().copied())),
        Pending::ClaimPut(g) => {
            if store.fences.insert(g) {
                l.generation = g;
                l.newest_seen = g;
                Pending::TakeoverList
            } else {
                Pending::ClaimList
            }
        }
        Pending::TakeoverList => match SealWalk::takeover(Model::sealer(l), store.latest()) {
            Ok(walk) => Pending::Walk(Box::new(walk)),
            Err(_) => {
                l.deposed = true;
                Pending::Idle
            }
        },
        Pending::SealFence { epoch, vnodes } => {
            l.newest_seen = l.newest_seen.max(store.fences.last().copied().unwrap_or(0));
            if check_fence(l.generation, l.newest_seen).is_err() {
                l.deposed = true;
                Pending::Idle
            } else {
                Pending::SealList { epoch, vnodes }
            }
        }
        Pending::SealList { epoch, vnodes } => {
            let sealer = Model::sealer(l);
            let latest = store.latest();
            match latest.as_ref().map(|m| m.epoch) {
                Some(top) if top >= epoch => {
                    match resolve_sealed(&sealer, epoch, top, store.seals.get(&epoch).cloned()) {
                        Ok(_) => finish_epoch(l, epoch),
                        Err(_) => l.deposed = true,
                    }
                    Pending::Idle
                }
                _ => {
                    let entries = vnodes
                        .iter()
                        .map(|v| (*v, model_entry(l, epoch, *v, l.written[v])))
                        .collect();
                    match SealWalk::seal(
                        sealer,
                        epoch,
                        latest,
                        entries,
                        Vec::new(),
                        BTreeMap::new(),
                        BTreeMap::new(),
                    ) {
                        Ok(walk) => Pending::Walk(Box::new(walk)),
                        Err(_) => {
                            l.deposed = true;
                            Pending::Idle
                        }
                    }
                }
            }
        }
        Pending::Walk(mut walk) => {
            let outcome = if walk.needs_top() {
                walk.on_top(store.latest())
            } else {
                let candidate = walk.candidate(0);
                match store.create_seal(candidate.clone()) {
                    None => Ok(walk.on_created(candidate)),
                    Some(existing) => walk.on_exists(existing),
                }
            };
            match outcome {
                Ok(None) => Pending::Walk(walk),
                Ok(Some(WalkDone::Sealed(m) | WalkDone::AlreadySealed(m))) => {
                    if m.kind == SealKind::Takeover {
                        let latest = store.seals.keys().last().copied();
                        store.takeovers_done.push((m.epoch, latest));
                    }
                    finish_epoch(l, m.epoch);
                    Pending::Idle
                }
                Err(_) => {
                    l.deposed = true;
                    Pending::Idle
                }
            }
        }
    };
}

fn finish_epoch(l: &mut ModelLeader, epoch: u64) {
    l.next_epoch = epoch + 1;
    l.written.clear();
}

fn model_entry(l: &ModelLeader, epoch: u64, vnode: u32, kind: PartialKind) -> ChainEntry {
    ChainEntry {
        epoch,
        kind,
        path: partial_name(epoch, vnode, l.generation, &l.instance),
        len: 1,
        crc32: 0,
        offset: 0,
    }
}
