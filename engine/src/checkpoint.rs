//! Incremental checkpoints of every deployed projection, split into vnodes.
//!
//! Every stateful operator and every projection's result keep their state
//! as keyed entries ([`StateEntry`], see [`crate::Operator`]). A checkpoint
//! gathers entries of all projections and groups them by vnode
//! ([`vnode_of`]): [`Coordinator::checkpoint_changes`] drains the entries that
//! changed in the epoch (a *delta*), [`Coordinator::checkpoint_full`] takes
//! every entry (a *snapshot*). Each vnode's [`VnodeState`] is encoded into
//! one partial blob of the state backend (`weir-storage`'s
//! `write_partial(vnode, epoch, ..)`).
//!
//! Restore: deploy every projection with [`Coordinator::deploy_for_restore`]
//! (in deployment order, no backfill), feed each vnode's chain (its latest
//! snapshot, then its deltas in epoch order) to
//! [`Coordinator::restore_vnode`], then [`Coordinator::finish_restore`] at the
//! chain's epoch publishes the restored results and lets epochs run again.
//! Vnodes are independent: their chains may be applied in any interleaving,
//! as long as each chain is applied in order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use weir_common::{Epoch, ObjectId};

use crate::EngineError;
use crate::coordinator::{Coordinator, Deployed, ProjectionView, SourceBinding};
use crate::graph::Graph;
use crate::materialized::Materialized;
use crate::operator::{StateEntry, split_state_key};

/// Vnodes per deployment. Fixed (ARCHITECTURE.md §2: stored with the
/// catalog, never changed in place) because the vnode of every entry
/// already written depends on it; 256 is enough to spread state over many
/// nodes later and few enough that a per-vnode blob per epoch stays cheap
/// (only vnodes with changes write one).
pub const VNODES: u32 = 256;

/// The node number of a projection's result ([`Materialized`]) in
/// checkpoints: no graph has that many nodes.
pub const RESULT_NODE: u32 = u32::MAX;

/// The vnode of one state entry of `node` of projection `object`: CRC-32
/// (IEEE, as `crc32fast` computes it) over the object id (u64 LE), the node
/// (u32 LE) and the key's distribution key ([`crate::operator::state_key`];
/// the whole key if it is not of that layout), modulo [`VNODES`]. CRC-32 is
/// a fixed, specified function, so the vnode of an entry never changes
/// across builds or platforms; hashing only the distribution key keeps all
/// state of one group (or join key, or partition) in one vnode.
pub fn vnode_of(object: ObjectId, node: u32, key: &[u8]) -> u32 {
    let distribution = split_state_key(key).map_or(key, |k| k.distribution);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&object.0.to_le_bytes());
    hasher.update(&node.to_le_bytes());
    hasher.update(distribution);
    hasher.finalize() % VNODES
}

/// The entries of one vnode in one checkpoint: (projection, node, entry),
/// each (projection, node, key) at most once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VnodeState {
    pub entries: Vec<(ObjectId, u32, StateEntry)>,
}

/// `W`, `V`, `S`, then the format version.
const MAGIC: [u8; 4] = *b"WVS\x01";
/// The smallest encoded entry: object, node, key length, presence byte.
const MIN_ENTRY: usize = 8 + 4 + 4 + 1;

impl VnodeState {
    /// Version 1: [`MAGIC`], the entry count (u32 LE), then per entry the
    /// object (u64 LE), the node (u32 LE), the key (u32 LE length, bytes), and
    /// `0` for a removal or `1` and the value (u32 LE length, bytes).
    pub fn encode(&self) -> Bytes {
        let size: usize = self
            .entries
            .iter()
            .map(|(_, _, e)| MIN_ENTRY + e.key.len() + e.value.as_ref().map_or(0, |v| 4 + v.len()))
            .sum();
        let mut out = Vec::with_capacity(8 + size);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (object, node, entry) in &self.entries {
            out.extend_from_slice(&object.0.to_le_bytes());
            out.extend_from_slice(&node.to_le_bytes());
            out.extend_from_slice(&(entry.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&entry.key);
            match &entry.value {
                None => out.push(0),
                Some(value) => {
                    out.push(1);
                    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                    out.extend_from_slice(value);
                }
            }
        }
        Bytes::from(out)
    }

    /// The inverse of [`Self::encode`]; any malformed input (wrong magic or
    /// version, truncation, trailing bytes) is [`EngineError::CorruptState`].
    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        let mut r = Cursor(bytes);
        let magic = r.take(4)?;
        if magic[..3] != MAGIC[..3] {
            return Err(corrupt("not a vnode state"));
        }
        if magic[3] != MAGIC[3] {
            return Err(corrupt(&format!("unknown version {}", magic[3])));
        }
        let count = r.u32()? as usize;
        // The count is untrusted: never reserve more than the bytes can hold.
        let mut entries = Vec::with_capacity(count.min(r.0.len() / MIN_ENTRY));
        for _ in 0..count {
            let object = ObjectId(r.u64()?);
            let node = r.u32()?;
            let key = r.bytes()?;
            let value = match r.take(1)?[0] {
                0 => None,
                1 => Some(r.bytes()?),
                other => return Err(corrupt(&format!("presence byte {other}"))),
            };
            entries.push((object, node, StateEntry { key, value }));
        }
        if !r.0.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        Ok(Self { entries })
    }
}

fn corrupt(what: &str) -> EngineError {
    EngineError::CorruptState(what.to_string())
}

/// Reads the little-endian fields of [`VnodeState::encode`], checking every length.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EngineError> {
        if self.0.len() < n {
            return Err(corrupt("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, EngineError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, EngineError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, EngineError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

/// Appends `entries` of `node` of `object` to their vnodes.
fn add_entries(
    vnodes: &mut BTreeMap<u32, VnodeState>,
    object: ObjectId,
    node: u32,
    entries: Vec<StateEntry>,
) {
    for entry in entries {
        vnodes
            .entry(vnode_of(object, node, &entry.key))
            .or_default()
            .entries
            .push((object, node, entry));
    }
}

impl Coordinator {
    /// Drains what changed since the last call (or since deploy or restore)
    /// in every projection's operators and result, per vnode; only vnodes
    /// with changes appear. Costs O(changed entries). Call it after
    /// [`Coordinator::run_epoch`] to get that epoch's delta.
    ///
    /// Failed projections are skipped (their changes stay undrained): their
    /// graph may be half stepped, so their state is not worth restoring; the
    /// owner rebuilds a failed projection from its inputs.
    ///
    /// On an error some changes may already be drained: the next checkpoint
    /// must then be a full one ([`Self::checkpoint_full`]).
    pub fn checkpoint_changes(&mut self) -> Result<BTreeMap<u32, VnodeState>, EngineError> {
        self.refuse_while_restoring("checkpoint")?;
        let mut vnodes = BTreeMap::new();
        let view = Arc::make_mut(&mut self.view);
        for deployed in &mut self.deployed {
            let Some(projection) = view.projections.get_mut(&deployed.id) else {
                continue;
            };
            if projection.failure.is_some() {
                continue;
            }
            for (node, entries) in deployed.graph.take_state_changes()? {
                add_entries(&mut vnodes, deployed.id, node, entries);
            }
            let result = projection.result.take_state_changes();
            add_entries(&mut vnodes, deployed.id, RESULT_NODE, result);
        }
        Ok(vnodes)
    }

    /// Every entry of every (not failed) projection, per vnode: a full
    /// snapshot. Leaves the change records alone, so a caller that writes a
    /// snapshot for some vnodes and deltas for the others takes both
    /// ([`Self::checkpoint_changes`] first) and drops the deltas of the
    /// snapshot vnodes. Costs O(all state), also via [`Self::checkpoint_vnodes`].
    pub fn checkpoint_full(&self) -> Result<BTreeMap<u32, VnodeState>, EngineError> {
        self.refuse_while_restoring("checkpoint")?;
        let mut vnodes = BTreeMap::new();
        for deployed in &self.deployed {
            let Some(projection) = self.view.projections.get(&deployed.id) else {
                continue;
            };
            if projection.failure.is_some() {
                continue;
            }
            for (node, entries) in deployed.graph.state_entries()? {
                add_entries(&mut vnodes, deployed.id, node, entries);
            }
            let result = projection.result.state_entries();
            add_entries(&mut vnodes, deployed.id, RESULT_NODE, result);
        }
        Ok(vnodes)
    }

    /// [`Self::checkpoint_full`] of some vnodes only (still O(all state):
    /// operators keep their state by key, not by vnode).
    pub fn checkpoint_vnodes(
        &self,
        vnodes: &BTreeSet<u32>,
    ) -> Result<BTreeMap<u32, VnodeState>, EngineError> {
        let mut full = self.checkpoint_full()?;
        full.retain(|vnode, _| vnodes.contains(vnode));
        Ok(full)
    }

    /// Deploys a projection whose state will come from a checkpoint
    /// ([`Self::restore_vnode`]) instead of a backfill. It is invisible to
    /// readers, and epochs refuse to run, until [`Self::finish_restore`].
    /// Same order as [`Coordinator::deploy`]: after what it reads.
    pub fn deploy_for_restore(
        &mut self,
        id: ObjectId,
        graph: Graph,
        sources: Vec<SourceBinding>,
        output_schema: SchemaRef,
    ) -> Result<(), EngineError> {
        if self.pending_rows > 0 {
            return Err(EngineError::Invariant {
                operator: "coordinator",
                message: "deploy with changes pending".into(),
            });
        }
        let result = Materialized::new(output_schema)?;
        self.deployed.push(Deployed {
            id,
            graph,
            sources,
            restoring: Some(result),
        });
        Ok(())
    }

    /// Applies one checkpoint of one vnode (a snapshot, or a delta after
    /// the vnode's earlier chain) to the projections being restored.
    /// Entries of projections not deployed (dropped since) are skipped; an
    /// entry for a projection that is live, not restoring, is an error. On
    /// an error the projections are partly restored: drop and redeploy them.
    pub fn restore_vnode(&mut self, state: &VnodeState) -> Result<(), EngineError> {
        for run in state
            .entries
            .chunk_by(|a, b| a.0 == b.0 && a.1 == b.1)
        {
            let (object, node) = (run[0].0, run[0].1);
            let Some(deployed) = self.deployed.iter_mut().find(|d| d.id == object) else {
                continue;
            };
            let Some(result) = &mut deployed.restoring else {
                return Err(EngineError::Invariant {
                    operator: "coordinator",
                    message: format!("checkpoint state for live projection {object}"),
                });
            };
            let entries: Vec<StateEntry> = run.iter().map(|(_, _, e)| e.clone()).collect();
            if node == RESULT_NODE {
                result.apply_state_entries(&entries)?;
            } else {
                deployed.graph.apply_state_entries(node, &entries)?;
            }
        }
        Ok(())
    }

    /// Ends a restore at `epoch` (the epoch of the chains applied): every
    /// restored projection's result is published as of `epoch`, and the next
    /// [`Coordinator::run_epoch`] is `epoch + 1`.
    pub fn finish_restore(&mut self, epoch: Epoch) -> Result<(), EngineError> {
        if self.pending_rows > 0 || epoch < self.epoch {
            return Err(EngineError::Invariant {
                operator: "coordinator",
                message: format!(
                    "finish restore at epoch {epoch} from epoch {} with {} rows pending",
                    self.epoch, self.pending_rows
                ),
            });
        }
        let mut view = (*self.view).clone();
        for deployed in &mut self.deployed {
            if let Some(result) = deployed.restoring.take() {
                let projection = ProjectionView {
                    result,
                    failure: None,
                    last_epoch: epoch,
                    rows_in: 0,
                    rows_out: 0,
                };
                view.projections.insert(deployed.id, projection);
            }
        }
        view.epoch = epoch;
        self.epoch = epoch;
        self.view = Arc::new(view);
        Ok(())
    }

    /// Refuses `what` while projections await [`Self::finish_restore`].
    pub(crate) fn refuse_while_restoring(&self, what: &str) -> Result<(), EngineError> {
        match self.deployed.iter().find(|d| d.restoring.is_some()) {
            None => Ok(()),
            Some(d) => Err(EngineError::Invariant {
                operator: "coordinator",
                message: format!("cannot {what}: projection {} is being restored", d.id),
            }),
        }
    }
}
