//! [`ObjectStateBackend`]: the state backend over any `object_store`
//! (memory, local disk, S3-compatible). All decisions come from
//! [`model`](super::model); this file observes the store and acts.
//! An epoch's partials packed into a few objects: [`batch`]. Compacting
//! chains in the background: [`compaction`].

mod batch;
mod compaction;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::manifest::{
    ChainEntry, FenceEntry, PartialKind, SealManifest, decode_blob, encode_blob, fence_name,
    parse_fence_generation, parse_partial_epoch, parse_seal_epoch, partial_name, path_safe,
    seal_name,
};
use super::model::{self, Compaction, SealWalk, Sealer, WalkDone};
use super::{StateBackend, StateBackendError};

type Result<T, E = StateBackendError> = std::result::Result<T, E>;

/// Opaque per-epoch facts the coordinator stores in the seal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealExtras {
    pub source_offsets: BTreeMap<String, String>,
    pub sink_descriptors: BTreeMap<String, String>,
    /// Chains merged in the background ([`ObjectStateBackend::write_compaction`])
    /// to put in place of the blobs they merged, where they still apply.
    pub compactions: Vec<Compaction>,
}

/// The answer of [`ObjectStateBackend::seal_epoch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealOutcome {
    /// This call created the seal.
    Sealed(Arc<SealManifest>),
    /// The epoch was already sealed by this backend (a retry).
    AlreadySealed(Arc<SealManifest>),
    /// These vnodes have no partial of this generation for the epoch.
    Incomplete { missing: Vec<u32> },
}

impl SealOutcome {
    pub fn is_sealed(&self) -> bool {
        !matches!(self, Self::Incomplete { .. })
    }
}

/// A vnode's chain at the latest seal: what the engine needs to decide when
/// to write a snapshot instead of another delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStats {
    pub sealed_epoch: u64,
    /// Epoch of the chain's snapshot; `None` if the chain is only deltas.
    pub snapshot_epoch: Option<u64>,
    pub delta_count: usize,
    pub snapshot_bytes: u64,
    pub delta_bytes: u64,
}

/// The durable, fenced state backend. See the module docs of
/// [`state`](super) for the layout and protocol.
#[derive(Debug)]
pub struct ObjectStateBackend {
    store: Arc<dyn ObjectStore>,
    root: String,
    instance: String,
    /// `instance` as a path segment.
    instance_path: String,
    /// Our fence generation; 0 for a read-only backend.
    generation: u64,
    authoritative: AtomicU64,
    /// Highest generation claim seen; above `generation` means fenced.
    newest_generation: AtomicU64,
    /// Highest seal seen. Monotonic, so a short listing never moves it back.
    latest_sealed: Mutex<Option<u64>>,
    /// Seals are immutable, so every one read stays valid until pruned.
    manifests: Mutex<BTreeMap<u64, Arc<SealManifest>>>,
    /// Our own blobs not sealed yet: sealing needs no reads for them.
    written: Mutex<HashMap<(u32, u64), ChainEntry>>,
    /// Paths of compacted blobs written and not yet seen named by a seal
    /// (nor forgotten): pruning must not take them, though their epoch is
    /// old and no seal it read names them yet.
    /// Counted per path: a batch object holds the compactions of many
    /// vnodes, and stays wanted until each is forgotten or a seal names it.
    unsealed_compactions: Mutex<HashMap<String, usize>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn create_only() -> PutOptions {
    PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    }
}

impl ObjectStateBackend {
    fn new(store: Arc<dyn ObjectStore>, root: &str, instance: String, generation: u64) -> Self {
        Self {
            store,
            root: root.trim_matches('/').to_string(),
            instance_path: path_safe(&instance),
            instance,
            generation,
            authoritative: AtomicU64::new(generation),
            newest_generation: AtomicU64::new(generation),
            latest_sealed: Mutex::new(None),
            manifests: Mutex::new(BTreeMap::new()),
            written: Mutex::new(HashMap::new()),
            unsealed_compactions: Mutex::new(HashMap::new()),
        }
    }

    /// Become the writer of the state under `root`: claim the next generation
    /// in `fence/`, then take the next seal slot with a takeover seal so no
    /// earlier generation can seal any later epoch. The returned backend's
    /// generation is also its authoritative version.
    pub async fn claim(
        store: Arc<dyn ObjectStore>,
        root: &str,
        instance: impl Into<String>,
    ) -> Result<Self> {
        let instance = instance.into();
        let mut probe = Self::new(store, root, instance.clone(), 0);
        let generation = loop {
            let claimed = probe.fence_generations().await?;
            let generation = model::next_generation(claimed);
            let entry = FenceEntry {
                generation,
                instance: instance.clone(),
                claimed_at_ms: now_ms(),
            };
            let json = serde_json::to_vec(&entry).expect("a fence entry always serializes");
            // A lost race means another claim took this number: re-list.
            if probe
                .put_create(&fence_name(generation), json.into())
                .await?
            {
                break generation;
            }
        };
        probe.generation = generation;
        probe.authoritative.store(generation, Ordering::SeqCst);
        probe
            .newest_generation
            .fetch_max(generation, Ordering::SeqCst);
        let latest = probe.latest_seal().await?;
        let walk = SealWalk::takeover(probe.sealer(), latest.map(|m| (*m).clone()))?;
        probe.run_walk(walk).await?;
        Ok(probe)
    }

    /// A writer at a given generation without claiming it or taking over.
    /// Only for tests: two of these at one generation model leaders that both
    /// believe they hold the fence, so only the create-only seal separates them.
    #[cfg(any(test, feature = "testing"))]
    pub fn open_unclaimed(
        store: Arc<dyn ObjectStore>,
        root: &str,
        instance: impl Into<String>,
        generation: u64,
    ) -> Self {
        Self::new(store, root, instance.into(), generation)
    }

    /// [`claim`](Self::claim) over the store a URL names (see [`store_from_url`]).
    pub async fn claim_url(url: &str, instance: impl Into<String>) -> Result<Self> {
        let (store, root) = store_from_url(url)?;
        Self::claim(store, &root, instance).await
    }

    /// A read-only view (no claim, no takeover): for inspection and for tests
    /// that compare answers across restarts. Writes return `ReadOnly`.
    pub fn reader(store: Arc<dyn ObjectStore>, root: &str) -> Self {
        Self::new(store, root, "reader".into(), 0)
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    fn sealer(&self) -> Sealer {
        Sealer {
            committer: self.instance.clone(),
            generation: self.generation,
            assignment_version: self.authoritative.load(Ordering::SeqCst),
        }
    }

    /// A partial may be written: not read-only, not fenced, and
    /// `assignment_version` current.
    fn check_partial_write(&self, assignment_version: u64) -> Result<()> {
        self.writable()?;
        model::check_write(
            assignment_version,
            self.authoritative.load(Ordering::SeqCst),
            self.generation,
            self.newest_generation.load(Ordering::SeqCst),
        )
    }

    fn writable(&self) -> Result<()> {
        if self.generation == 0 {
            return Err(StateBackendError::ReadOnly);
        }
        Ok(())
    }

    // ---- store primitives -------------------------------------------------------

    fn key(&self, name: &str) -> Path {
        if self.root.is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.root))
        }
    }

    /// Root-relative names under `dir` (`fence`, `seals`, `partials`).
    async fn list_names(&self, dir: &str) -> Result<Vec<String>> {
        let prefix = self.key(dir);
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| StateBackendError::io(format!("listing {prefix}"), e))?;
        let strip = if self.root.is_empty() {
            String::new()
        } else {
            format!("{}/", self.root)
        };
        Ok(metas
            .into_iter()
            .filter_map(|m| m.location.as_ref().strip_prefix(&strip).map(str::to_string))
            .collect())
    }

    /// `Ok(false)` when the object already exists.
    async fn put_create(&self, name: &str, bytes: Bytes) -> Result<bool> {
        self.put_create_payload(name, PutPayload::from(bytes)).await
    }

    pub(super) async fn put_create_payload(&self, name: &str, payload: PutPayload) -> Result<bool> {
        let key = self.key(name);
        match self.store.put_opts(&key, payload, create_only()).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(StateBackendError::io(format!("creating {key}"), e)),
        }
    }

    pub(super) async fn get(&self, name: &str) -> Result<Option<Bytes>> {
        let key = self.key(name);
        let read = async { self.store.get(&key).await?.bytes().await };
        match read.await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(StateBackendError::io(format!("reading {key}"), e)),
        }
    }

    /// `range` of the object; `None` if the object does not exist.
    async fn get_range(&self, name: &str, range: std::ops::Range<u64>) -> Result<Option<Bytes>> {
        let key = self.key(name);
        match self.store.get_range(&key, range).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(StateBackendError::io(format!("reading {key}"), e)),
        }
    }

    async fn delete(&self, name: &str) -> Result<()> {
        let key = self.key(name);
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(StateBackendError::io(format!("deleting {key}"), e)),
        }
    }

    // ---- fence and seals --------------------------------------------------------

    async fn fence_generations(&self) -> Result<Vec<u64>> {
        let names = self.list_names("fence").await?;
        Ok(names
            .iter()
            .filter_map(|n| parse_fence_generation(n))
            .collect())
    }

    /// Re-list the claims and fail if a newer generation exists.
    async fn refresh_fence(&self) -> Result<()> {
        let newest = self
            .fence_generations()
            .await?
            .into_iter()
            .max()
            .unwrap_or(0);
        let newest = self
            .newest_generation
            .fetch_max(newest, Ordering::SeqCst)
            .max(newest);
        model::check_fence(self.generation, newest)
    }

    fn note_sealed(&self, epoch: u64) {
        let mut latest = self.latest_sealed.lock().unwrap();
        *latest = (*latest).max(Some(epoch));
    }

    fn cache(&self, manifest: SealManifest) -> Arc<SealManifest> {
        self.note_sealed(manifest.epoch);
        self.newest_generation
            .fetch_max(manifest.generation, Ordering::SeqCst);
        let manifest = Arc::new(manifest);
        self.manifests
            .lock()
            .unwrap()
            .insert(manifest.epoch, manifest.clone());
        manifest
    }

    /// Every sealed epoch the store lists, plus the highest one seen before.
    async fn seal_epochs(&self) -> Result<BTreeSet<u64>> {
        let names = self.list_names("seals").await?;
        let mut epochs: BTreeSet<u64> = names.iter().filter_map(|n| parse_seal_epoch(n)).collect();
        if let Some(max) = epochs.last() {
            self.note_sealed(*max);
        }
        epochs.extend(*self.latest_sealed.lock().unwrap());
        Ok(epochs)
    }

    /// The manifest sealed at `epoch`, if it exists.
    pub async fn read_seal(&self, epoch: u64) -> Result<Option<Arc<SealManifest>>> {
        if let Some(m) = self.manifests.lock().unwrap().get(&epoch) {
            return Ok(Some(m.clone()));
        }
        let name = seal_name(epoch);
        let Some(bytes) = self.get(&name).await? else {
            return Ok(None);
        };
        Ok(Some(self.cache(SealManifest::from_json(&name, &bytes)?)))
    }

    /// Every retained seal, oldest first (for `weir_catalog.epochs`).
    pub async fn list_seals(&self) -> Result<Vec<Arc<SealManifest>>> {
        let mut out = Vec::new();
        for epoch in self.seal_epochs().await? {
            // A seal pruned between the listing and the read is just gone.
            out.extend(self.read_seal(epoch).await?);
        }
        Ok(out)
    }

    /// The latest seal. The latest is never pruned, but a concurrent sealer
    /// may have moved it and pruned ours in between: then list again.
    async fn latest_seal(&self) -> Result<Option<Arc<SealManifest>>> {
        for _ in 0..8 {
            let Some(top) = self.seal_epochs().await?.last().copied() else {
                return Ok(None);
            };
            if let Some(m) = self.read_seal(top).await? {
                return Ok(Some(m));
            }
        }
        Err(StateBackendError::Serialization(
            "the latest seal keeps disappearing while being read".into(),
        ))
    }

    /// Create slots until the walk is done; each put is create-only, and a
    /// taken slot is judged by the model.
    async fn run_walk(&self, mut walk: SealWalk) -> Result<WalkDone> {
        loop {
            let step = if walk.needs_top() {
                // A takeover's put may have filled a pruned hole below the
                // latest; it is done only once it is the latest.
                let latest = self.latest_seal().await?.map(|m| (*m).clone());
                walk.on_top(latest)
            } else {
                let candidate = walk.candidate(now_ms());
                let name = seal_name(candidate.epoch);
                if self.put_create(&name, candidate.to_json()).await? {
                    self.cache(candidate.clone());
                    Ok(walk.on_created(candidate))
                } else {
                    match self.read_seal(walk.slot()).await? {
                        Some(existing) => walk.on_exists((*existing).clone()),
                        // Pruned between our put and our read: the slot is below
                        // the latest, so the store moved on without us.
                        None => Err(StateBackendError::SealOrder {
                            epoch: walk.slot(),
                            latest: self.latest_sealed.lock().unwrap().unwrap_or(0),
                            reason: "the slot was sealed and pruned concurrently",
                        }),
                    }
                }
            };
            if let Err(StateBackendError::StaleVersion { authoritative, .. }) = &step {
                self.newest_generation
                    .fetch_max(*authoritative, Ordering::SeqCst);
            }
            if let Some(done) = step? {
                return Ok(done);
            }
        }
    }

    // ---- partials ---------------------------------------------------------------

    /// Persist a partial of the given kind. Idempotent per `(vnode, epoch)` for
    /// this backend: the same bytes again are `Ok`, different bytes are a
    /// `Serialization` error ("conflicting rewrite").
    pub async fn write_partial_kind(
        &self,
        vnode: u32,
        epoch: u64,
        assignment_version: u64,
        kind: PartialKind,
        bytes: Bytes,
    ) -> Result<()> {
        self.check_partial_write(assignment_version)?;
        let name = partial_name(epoch, vnode, self.generation, &self.instance_path);
        let blob = encode_blob(kind, &bytes);
        if !self.put_create(&name, blob.clone()).await? {
            let existing = self.get(&name).await?;
            if existing.as_ref() != Some(&blob) {
                return Err(StateBackendError::Serialization(format!(
                    "conflicting rewrite of {name}: the partial of vnode {vnode} at epoch {epoch} \
                     already holds different bytes"
                )));
            }
        }
        let entry = ChainEntry {
            epoch,
            kind,
            path: name,
            len: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
            offset: 0,
        };
        self.written.lock().unwrap().insert((vnode, epoch), entry);
        Ok(())
    }

    /// Our blob of `(vnode, epoch)` as a chain entry, from memory or the store.
    async fn own_entry(&self, vnode: u32, epoch: u64) -> Result<Option<ChainEntry>> {
        if let Some(e) = self.written.lock().unwrap().get(&(vnode, epoch)) {
            return Ok(Some(e.clone()));
        }
        let name = partial_name(epoch, vnode, self.generation, &self.instance_path);
        let Some(blob) = self.get(&name).await? else {
            return Ok(None);
        };
        let (kind, payload) = decode_blob(&name, &blob)?;
        Ok(Some(ChainEntry {
            epoch,
            kind,
            path: name,
            len: payload.len() as u64,
            crc32: crc32fast::hash(&payload),
            offset: 0,
        }))
    }

    /// Read a chain blob (its frame's range of the object) and check it is
    /// the one the seal named.
    async fn read_entry(&self, vnode: u32, entry: &ChainEntry) -> Result<(PartialKind, Bytes)> {
        let blob = self
            .get_range(&entry.path, entry.frame_range())
            .await?
            .ok_or(StateBackendError::NotFound {
                vnode,
                epoch: entry.epoch,
            })?;
        let (kind, payload) = decode_blob(&entry.path, &blob)?;
        if kind != entry.kind || crc32fast::hash(&payload) != entry.crc32 {
            return Err(StateBackendError::Serialization(format!(
                "partial {} does not match its seal (kind or CRC)",
                entry.path
            )));
        }
        Ok((kind, payload))
    }

    // ---- sealing ----------------------------------------------------------------

    /// Seal `epoch` with this generation's partials of `vnodes`, on top of the
    /// latest seal. Re-checks the fence first. A retry of a seal this backend
    /// made is `AlreadySealed`; a slot taken by another committer is
    /// `SplitBrainCommit`, by a newer generation `StaleVersion`.
    pub async fn seal_epoch(
        &self,
        epoch: u64,
        vnodes: &[u32],
        extras: SealExtras,
    ) -> Result<SealOutcome> {
        self.writable()?;
        self.refresh_fence().await?;
        let vnodes: BTreeSet<u32> = vnodes.iter().copied().collect();
        let mut entries = Vec::with_capacity(vnodes.len());
        let mut missing = Vec::new();
        for vnode in vnodes {
            match self.own_entry(vnode, epoch).await? {
                Some(entry) => entries.push((vnode, entry)),
                None => missing.push(vnode),
            }
        }
        if !missing.is_empty() {
            // Entries of batch objects are known only until their seal: a
            // retry of a seal this backend made finds the seal instead.
            if let Some(existing) = self.read_seal(epoch).await?
                && let Ok(WalkDone::AlreadySealed(m)) =
                    model::resolve_sealed(&self.sealer(), epoch, epoch, Some((*existing).clone()))
            {
                return Ok(SealOutcome::AlreadySealed(self.cache(m)));
            }
            return Ok(SealOutcome::Incomplete { missing });
        }
        let latest = self.latest_seal().await?;
        let done = match latest.as_deref() {
            Some(top) if top.epoch >= epoch => {
                let existing = self.read_seal(epoch).await?.map(|m| (*m).clone());
                model::resolve_sealed(&self.sealer(), epoch, top.epoch, existing)?
            }
            _ => {
                let walk = SealWalk::seal(
                    self.sealer(),
                    epoch,
                    latest.map(|m| (*m).clone()),
                    entries,
                    extras.compactions,
                    extras.source_offsets,
                    extras.sink_descriptors,
                )?;
                self.run_walk(walk).await?
            }
        };
        self.written.lock().unwrap().retain(|(_, e), _| *e > epoch);
        Ok(match done {
            WalkDone::Sealed(m) => SealOutcome::Sealed(self.cache(m)),
            WalkDone::AlreadySealed(m) => SealOutcome::AlreadySealed(self.cache(m)),
        })
    }

    /// The blobs that rebuild `vnode` at sealed `epoch`: the snapshot first,
    /// then deltas in order, each checked against the seal (CRC, kind).
    pub async fn restore_chain(&self, vnode: u32, epoch: u64) -> Result<Vec<(PartialKind, Bytes)>> {
        Ok(self
            .chain_blobs(vnode, epoch)
            .await?
            .into_iter()
            .map(|(entry, bytes)| (entry.kind, bytes))
            .collect())
    }

    /// [`Self::restore_chain`], each blob with the entry the seal names it by.
    pub async fn chain_blobs(&self, vnode: u32, epoch: u64) -> Result<Vec<(ChainEntry, Bytes)>> {
        let seal = self
            .read_seal(epoch)
            .await?
            .ok_or(StateBackendError::NotFound { vnode, epoch })?;
        let mut out = Vec::new();
        for entry in seal.vnodes.get(&vnode).into_iter().flatten() {
            let (_, bytes) = self.read_entry(vnode, entry).await?;
            out.push((entry.clone(), bytes));
        }
        Ok(out)
    }

    /// `vnode`'s chain at the latest seal; `None` before the first seal or if
    /// the vnode has never been written.
    pub async fn chain_stats(&self, vnode: u32) -> Result<Option<ChainStats>> {
        let Some(seal) = self.latest_seal().await? else {
            return Ok(None);
        };
        let Some(chain) = seal.vnodes.get(&vnode) else {
            return Ok(None);
        };
        let mut stats = ChainStats {
            sealed_epoch: seal.epoch,
            snapshot_epoch: None,
            delta_count: 0,
            snapshot_bytes: 0,
            delta_bytes: 0,
        };
        for entry in chain {
            match entry.kind {
                PartialKind::Snapshot => {
                    stats.snapshot_epoch = Some(entry.epoch);
                    stats.snapshot_bytes += entry.len;
                }
                PartialKind::Delta => {
                    stats.delta_count += 1;
                    stats.delta_bytes += entry.len;
                }
            }
        }
        Ok(Some(stats))
    }
}

#[async_trait]
impl StateBackend for ObjectStateBackend {
    async fn write_partial(
        &self,
        vnode: u32,
        epoch: u64,
        version: u64,
        bytes: Bytes,
    ) -> Result<()> {
        self.write_partial_kind(vnode, epoch, version, PartialKind::Delta, bytes)
            .await
    }

    async fn read_partial(&self, vnode: u32, epoch: u64) -> Result<Option<Bytes>> {
        if let Some(seal) = self.read_seal(epoch).await? {
            let entry = seal
                .vnodes
                .get(&vnode)
                .and_then(|chain| chain.iter().find(|e| e.epoch == epoch));
            return match entry {
                Some(entry) => Ok(Some(self.read_entry(vnode, entry).await?.1)),
                None => Ok(None),
            };
        }
        if self.generation == 0 {
            return Ok(None);
        }
        // Unsealed: only the writer's own blob (alone or in a batch),
        // never another writer's.
        match self.own_entry(vnode, epoch).await? {
            Some(entry) => Ok(Some(self.read_entry(vnode, &entry).await?.1)),
            None => Ok(None),
        }
    }

    async fn epoch_complete(&self, epoch: u64, vnodes: &[u32]) -> Result<bool> {
        Ok(self
            .seal_epoch(epoch, vnodes, SealExtras::default())
            .await?
            .is_sealed())
    }

    async fn prune_before(&self, before: u64) -> Result<()> {
        self.writable()?;
        self.refresh_fence().await?;
        let seals = self.seal_epochs().await?;
        let before = model::prune_bound(before, seals.last().copied());
        let doomed = model::seals_to_prune(&seals, before);
        for epoch in &doomed {
            self.delete(&seal_name(*epoch)).await?;
            self.manifests.lock().unwrap().remove(epoch);
        }
        // Retained seals are the dense range `before..=latest` (seal slots are
        // dense), read by name: a short listing must not hide one of them and
        // let its blobs go. Listed seals below `before` that survived (none
        // but the latest, normally) count too.
        let mut retained: BTreeSet<u64> = seals
            .iter()
            .copied()
            .filter(|e| !doomed.contains(e))
            .collect();
        if let Some(latest) = seals.last() {
            retained.extend(before.min(*latest)..=*latest);
        }
        let mut referenced = HashSet::new();
        for epoch in &retained {
            if let Some(seal) = self.read_seal(*epoch).await? {
                referenced.extend(seal.vnodes.values().flatten().map(|e| e.path.clone()));
            }
        }
        let blobs: Vec<(u64, String)> = self
            .list_names("partials")
            .await?
            .into_iter()
            .filter_map(|n| parse_partial_epoch(&n).map(|e| (e, n)))
            .collect();
        let doomed = {
            let mut unsealed = self.unsealed_compactions.lock().unwrap();
            unsealed.retain(|path, _| !referenced.contains(path));
            let mut doomed = model::blobs_to_prune(&blobs, before, &referenced);
            doomed.retain(|path| !unsealed.contains_key(path));
            doomed
        };
        for name in doomed {
            self.delete(&name).await?;
        }
        self.written
            .lock()
            .unwrap()
            .retain(|(_, e), _| *e >= before);
        Ok(())
    }

    async fn latest_committed_epoch(&self) -> Result<Option<u64>> {
        Ok(self.seal_epochs().await?.last().copied())
    }

    fn set_authoritative_version(&self, version: u64) {
        self.authoritative.fetch_max(version, Ordering::SeqCst);
    }

    fn authoritative_version(&self) -> u64 {
        self.authoritative.load(Ordering::SeqCst)
    }
}

// ---- store URLs -----------------------------------------------------------------

/// The store and root prefix a URL names:
///
/// - `memory://[prefix]`: a fresh in-memory store (tests, ephemeral runs);
/// - `file:///abs/path`: a directory on local disk, created if missing;
/// - `s3://bucket/prefix`: S3 or a compatible store, configured from the
///   `AWS_*` environment (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`,
///   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, ...).
pub fn store_from_url(url: &str) -> Result<(Arc<dyn ObjectStore>, String)> {
    store_from_url_with(url, std::iter::empty::<(&str, &str)>())
}

/// [`store_from_url`] with S3 options (`aws_endpoint`, `aws_allow_http`, ...)
/// that override the environment. Options for other schemes are an error.
pub fn store_from_url_with<K: AsRef<str>, V: AsRef<str>>(
    url: &str,
    s3_options: impl IntoIterator<Item = (K, V)>,
) -> Result<(Arc<dyn ObjectStore>, String)> {
    let config = |m: String| StateBackendError::Config(format!("{url}: {m}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| config("expected scheme://...".into()))?;
    let options: Vec<(String, String)> = s3_options
        .into_iter()
        .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
        .collect();
    if scheme != "s3" && !options.is_empty() {
        return Err(config("S3 options given for a non-S3 store".into()));
    }
    match scheme {
        "memory" => Ok((
            Arc::new(InMemory::new()),
            rest.trim_matches('/').to_string(),
        )),
        "file" => {
            if !rest.starts_with('/') {
                return Err(config(
                    "file URLs need an absolute path (file:///abs/path)".into(),
                ));
            }
            std::fs::create_dir_all(rest).map_err(|e| config(format!("creating {rest}: {e}")))?;
            let fs = LocalFileSystem::new_with_prefix(rest)
                .map_err(|e| StateBackendError::io(format!("opening {rest}"), e))?;
            Ok((Arc::new(fs), String::new()))
        }
        "s3" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(config("missing bucket".into()));
            }
            let mut builder = AmazonS3Builder::from_env();
            for (key, value) in options {
                let key: AmazonS3ConfigKey = key
                    .parse()
                    .map_err(|e| config(format!("option {key}: {e}")))?;
                builder = builder.with_config(key, value);
            }
            // Create-only puts are the fence; `ETagMatch` sends If-None-Match: *,
            // which S3 and compatible stores (MinIO, R2, moto) honour.
            let s3 = builder
                .with_bucket_name(bucket)
                .with_conditional_put(S3ConditionalPut::ETagMatch)
                .build()
                .map_err(|e| StateBackendError::io(format!("configuring S3 for {url}"), e))?;
            Ok((Arc::new(s3), prefix.trim_matches('/').to_string()))
        }
        other => Err(config(format!("unsupported scheme {other:?}"))),
    }
}
