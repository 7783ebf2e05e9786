//! Compacting vnode chains in the background, off the epoch loop.
//!
//! A checkpoint writes each changed vnode's delta; a vnode's chain (its
//! snapshot, then its deltas) must still be cut now and then, so that a
//! restore reads a bounded number of blobs and the store does not keep
//! every delta. Cutting it by taking a snapshot from the operators costs
//! O(all state) in the loop, since operators keep state by key, not by
//! vnode. Instead, once a vnode's chain is due ([`Compactor::start`] is
//! handed the due vnodes after a seal), a task reads the chain of that
//! seal from the store, merges it into one snapshot
//! ([`crate::vnode_state::merge_chain`], on a blocking thread) and writes
//! the merged chains a group at a time, each group in a few objects
//! ([`ObjectStateBackend::write_compactions`]); the next checkpoint hands
//! the result to its seal, which puts it in place of the blobs it merged
//! (deltas written meanwhile stay after it). The loop pays nothing but the
//! bookkeeping. This is how LSM stores keep reads bounded: compaction
//! reads what was written, never the live structure.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use weir_common::ObjectId;
use weir_storage::{ChainEntry, Compaction, ObjectStateBackend};

use crate::EngineError;
use crate::vnode_state::merge_chain;

/// Vnodes compacted at once within a job (reads, merges).
const CONCURRENCY: usize = 2;
/// Merged chains are written once this many bytes of them are waiting,
/// which bounds the memory a job holds.
const GROUP_BYTES: usize = 64 << 20;

/// A vnode's chain merged and written, waiting for a seal to name it.
#[derive(Debug, Clone)]
pub(super) struct Compacted {
    pub compaction: Compaction,
    /// Per object: its bytes in the merged snapshot.
    pub object_bytes: BTreeMap<ObjectId, u64>,
}

/// At most one compaction job at a time; see the module docs.
pub(super) struct Compactor {
    backend: Arc<ObjectStateBackend>,
    job: Option<tokio::task::JoinHandle<Vec<Compacted>>>,
    /// Vnodes of the running job, of finished compactions not yet handed
    /// to a seal, and of those handed to the seal being written: none of
    /// them is compacted again until that seal's outcome is recorded.
    busy: BTreeSet<u32>,
    /// Vnodes of compactions handed out by [`Self::take_done`] whose seal
    /// has not been recorded yet.
    submitted: BTreeSet<u32>,
    job_vnodes: Vec<u32>,
    done: Vec<Compacted>,
}

impl Compactor {
    pub fn new(backend: Arc<ObjectStateBackend>) -> Self {
        Self {
            backend,
            job: None,
            busy: BTreeSet::new(),
            submitted: BTreeSet::new(),
            job_vnodes: Vec::new(),
            done: Vec::new(),
        }
    }

    pub fn is_busy(&self, vnode: u32) -> bool {
        self.busy.contains(&vnode)
    }

    /// Starts compacting `vnodes` as of the seal of `epoch`, keeping only
    /// entries of `keep` (the live, healthy projections), unless a job is
    /// running. Returns whether it started.
    pub fn start(&mut self, epoch: u64, vnodes: Vec<u32>, keep: Arc<HashSet<ObjectId>>) -> bool {
        if self.job.is_some() || vnodes.is_empty() {
            return false;
        }
        self.busy.extend(&vnodes);
        self.job_vnodes = vnodes.clone();
        let backend = self.backend.clone();
        self.job = Some(tokio::spawn(async move {
            let mut merged = futures::stream::iter(vnodes)
                .map(|vnode| {
                    let backend = backend.clone();
                    let keep = keep.clone();
                    async move {
                        match merge_vnode(&backend, vnode, epoch, keep).await {
                            Ok(merged) => merged,
                            Err(e) => {
                                // The vnode stays due: a later seal tries again.
                                tracing::warn!(vnode, epoch, error = %e, "compacting a vnode's checkpoint chain failed");
                                None
                            }
                        }
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .filter_map(futures::future::ready)
                .boxed();
            let mut done = Vec::new();
            let mut group = Vec::new();
            let mut group_bytes = 0;
            loop {
                let next = merged.next().await;
                let last = next.is_none();
                if let Some(m) = next {
                    group_bytes += m.bytes.len();
                    group.push(m);
                }
                if group_bytes >= GROUP_BYTES || (last && !group.is_empty()) {
                    group_bytes = 0;
                    match write_merged(&backend, epoch, std::mem::take(&mut group)).await {
                        Ok(written) => done.extend(written),
                        // Those vnodes stay due: a later seal tries again.
                        Err(e) => {
                            tracing::warn!(epoch, error = %e, "writing a checkpoint compaction failed")
                        }
                    }
                }
                if last {
                    break done;
                }
            }
        }));
        true
    }

    /// The compactions finished since the last call, for the next seal.
    /// Their vnodes stay busy until [`Self::sealed`].
    pub fn take_done(&mut self) -> Vec<Compacted> {
        // A finished task can still poll as pending, when the calling
        // task's cooperative budget is spent (tokio's join handles take
        // part in it): then it is taken at a later call.
        let finished = self
            .job
            .as_mut()
            .filter(|j| j.is_finished())
            .and_then(|job| job.now_or_never());
        if let Some(finished) = finished {
            self.job = None;
            let vnodes = std::mem::take(&mut self.job_vnodes);
            match finished {
                Ok(done) => {
                    let compacted: HashSet<u32> = done.iter().map(|c| c.compaction.vnode).collect();
                    for vnode in vnodes.iter().filter(|v| !compacted.contains(v)) {
                        self.busy.remove(vnode);
                    }
                    self.done.extend(done);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a checkpoint compaction job died");
                    for vnode in &vnodes {
                        self.busy.remove(vnode);
                    }
                }
            }
        }
        self.submitted
            .extend(self.done.iter().map(|c| c.compaction.vnode));
        std::mem::take(&mut self.done)
    }

    /// The seal that was handed `compactions` is written (`sealed`) or
    /// failed: their vnodes may be compacted again. Those that will never
    /// be named by a seal (`landed` false after a seal) become garbage.
    pub fn sealed(&mut self, compactions: &[Compacted], landed: &HashSet<u32>, sealed: bool) {
        for c in compactions {
            let vnode = c.compaction.vnode;
            self.busy.remove(&vnode);
            self.submitted.remove(&vnode);
            if sealed && !landed.contains(&vnode) {
                self.backend.forget_compaction(&c.compaction);
            }
        }
    }
}

impl Compactor {
    /// The seal handed the submitted compactions was lost with its task:
    /// its outcome is unknown, so their blobs stay protected (see
    /// `forget_compaction`), and their vnodes may be compacted again.
    pub fn abandoned(&mut self) {
        for vnode in std::mem::take(&mut self.submitted) {
            self.busy.remove(&vnode);
        }
    }
}

/// One vnode's chain merged, not yet written.
struct Merged {
    vnode: u32,
    entries: Vec<ChainEntry>,
    bytes: Bytes,
    object_bytes: BTreeMap<ObjectId, u64>,
}

async fn merge_vnode(
    backend: &ObjectStateBackend,
    vnode: u32,
    epoch: u64,
    keep: Arc<HashSet<ObjectId>>,
) -> Result<Option<Merged>, EngineError> {
    let chain = backend.chain_blobs(vnode, epoch).await?;
    if chain.len() < 2 {
        return Ok(None);
    }
    let (entries, blobs): (Vec<ChainEntry>, Vec<Bytes>) = chain.into_iter().unzip();
    let merged = tokio::task::spawn_blocking(move || merge_chain(&blobs, |o| keep.contains(&o)))
        .await
        .map_err(|e| EngineError::Invariant {
            operator: "checkpoint compaction",
            message: format!("merging vnode {vnode}: {e}"),
        })??;
    Ok(Some(Merged {
        vnode,
        entries,
        bytes: merged.bytes,
        object_bytes: merged.object_bytes,
    }))
}

/// Writes a job's merged chains together (a few objects, not one per
/// vnode: see `ObjectStateBackend::write_compactions`).
async fn write_merged(
    backend: &ObjectStateBackend,
    epoch: u64,
    mut merged: Vec<Merged>,
) -> Result<Vec<Compacted>, EngineError> {
    if merged.is_empty() {
        return Ok(Vec::new());
    }
    merged.sort_unstable_by_key(|m| m.vnode);
    let items = merged
        .iter_mut()
        .map(|m| {
            (
                m.vnode,
                std::mem::take(&mut m.entries),
                std::mem::take(&mut m.bytes),
            )
        })
        .collect();
    let compactions = backend.write_compactions(epoch, items).await?;
    Ok(compactions
        .into_iter()
        .zip(merged)
        .map(|(compaction, m)| Compacted {
            compaction,
            object_bytes: m.object_bytes,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::task::Poll;

    use object_store::memory::InMemory;

    use super::*;

    #[tokio::test]
    async fn a_finished_job_polled_without_budget_is_taken_at_a_later_call() {
        let backend = ObjectStateBackend::claim(Arc::new(InMemory::new()), "state", "test")
            .await
            .unwrap();
        let mut compactor = Compactor::new(Arc::new(backend));
        compactor.job = Some(tokio::spawn(async { Vec::new() }));
        compactor.job_vnodes = vec![7];
        compactor.busy.insert(7);
        while !compactor.job.as_ref().is_some_and(|j| j.is_finished()) {
            tokio::task::yield_now().await;
        }
        // Within one poll that spent the task's cooperative budget, as a
        // busy epoch loop does, the finished job polls as pending.
        poll_fn(|cx| {
            let mut spent = false;
            for _ in 0..10_000 {
                match tokio::task::coop::poll_proceed(cx) {
                    Poll::Ready(restore) => restore.made_progress(),
                    Poll::Pending => {
                        spent = true;
                        break;
                    }
                }
            }
            assert!(spent, "the budget never ran out");
            assert!(compactor.take_done().is_empty());
            Poll::Ready(())
        })
        .await;
        assert!(compactor.job.is_some() && compactor.is_busy(7));
        tokio::task::yield_now().await;
        assert!(compactor.take_done().is_empty());
        assert!(compactor.job.is_none() && !compactor.is_busy(7));
    }
}
