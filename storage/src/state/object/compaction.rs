//! Compacting a vnode's chain off the checkpoint path: the engine reads the
//! chain of a seal ([`ObjectStateBackend::chain_blobs`]), merges it into
//! one snapshot, and writes that here ([`ObjectStateBackend::write_compaction`]);
//! a later seal that carries the [`Compaction`] in its extras puts the
//! merged blob in place of the blobs it merged
//! ([`model::extend_chains`](super::model::extend_chains)). Chains stay
//! short without the writer ever re-reading all of its state to snapshot it.
//!
//! A compacted blob is named by the epoch it merges up to, which is often
//! older than what pruning keeps; until a seal that pruning reads names it,
//! [`ObjectStateBackend::prune_before`] leaves it alone
//! (`unsealed_compactions`). One that will never be sealed (it no longer
//! applies) is [forgotten](ObjectStateBackend::forget_compaction) and
//! becomes garbage like any blob no seal names.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use futures::{StreamExt, TryStreamExt};

use super::super::manifest::{
    ChainEntry, PartialKind, compaction_batch_name, compaction_name, encode_blob,
};
use super::super::model::{self, Compaction};
use super::batch::{BATCH_BYTES, BATCH_CONCURRENCY, plan_batches};
use super::{ObjectStateBackend, Result};
use crate::state::StateBackendError;

/// The first entry of a chain merged through `through`: what the merge
/// replaces from. An empty chain, or one past `through`, is a caller's bug.
fn merged_chain_start(vnode: u32, through: u64, chain: &[ChainEntry]) -> Result<&ChainEntry> {
    let Some(first) = chain.first() else {
        return Err(StateBackendError::Serialization(format!(
            "compaction of vnode {vnode}: an empty chain has nothing to replace"
        )));
    };
    if chain.iter().any(|e| e.epoch > through) {
        return Err(StateBackendError::Serialization(format!(
            "compaction of vnode {vnode} through epoch {through}: the chain goes past it"
        )));
    }
    Ok(first)
}

impl ObjectStateBackend {
    /// Writes `merged`, the state that `chain` (the chain of `vnode` at the
    /// seal of `through`, as [`Self::chain_blobs`] gave it) rebuilds, as one
    /// snapshot blob, and returns the [`Compaction`] to pass to a later
    /// seal. Fenced like a partial write. Idempotent: the same merge again
    /// writes nothing new; different bytes are a `Serialization` error.
    pub async fn write_compaction(
        &self,
        vnode: u32,
        through: u64,
        chain: &[ChainEntry],
        merged: Bytes,
    ) -> Result<Compaction> {
        self.writable()?;
        model::check_fence(
            self.generation,
            self.newest_generation.load(Ordering::SeqCst),
        )?;
        let first = merged_chain_start(vnode, through, chain)?;
        let name = compaction_name(
            through,
            vnode,
            first.epoch,
            self.generation,
            &self.instance_path,
        );
        // Marked before the put: a prune listing the blob right after must
        // already see it as wanted.
        *self
            .unsealed_compactions
            .lock()
            .unwrap()
            .entry(name.clone())
            .or_default() += 1;
        let blob = encode_blob(PartialKind::Snapshot, &merged);
        if !self.put_create(&name, blob.clone()).await? {
            let existing = self.get(&name).await?;
            if existing.as_ref() != Some(&blob) {
                return Err(StateBackendError::Serialization(format!(
                    "conflicting rewrite of {name}: the compaction of vnode {vnode} through \
                     epoch {through} already holds different bytes"
                )));
            }
        }
        Ok(Compaction {
            vnode,
            replaces_from: first.path.clone(),
            entry: ChainEntry {
                epoch: through,
                kind: PartialKind::Snapshot,
                path: name,
                len: merged.len() as u64,
                crc32: crc32fast::hash(&merged),
                offset: 0,
            },
        })
    }

    /// `compaction` will not be passed to a seal: its blob may be pruned
    /// once no seal names it. (One passed to a seal whose outcome is
    /// unknown stays protected until a prune sees a seal name it, or
    /// forever if none does: a leaked name, never a lost blob.)
    pub fn forget_compaction(&self, compaction: &Compaction) {
        let mut unsealed = self.unsealed_compactions.lock().unwrap();
        let path = &compaction.entry.path;
        if let Some(count) = unsealed.get_mut(path) {
            *count -= 1;
            if *count == 0 {
                unsealed.remove(path);
            }
        }
    }

    /// [`Self::write_compaction`] for many vnodes at once: the merged
    /// snapshots share batch objects ([`compaction_batch_name`]), as an
    /// epoch's partials do, and every
    /// one is checked as `write_compaction` checks it before anything is
    /// written. `items` are (vnode, its chain as merged, the merged state);
    /// a vnode appears at most once. Idempotent for the same items.
    pub async fn write_compactions(
        &self,
        through: u64,
        items: Vec<(u32, Vec<ChainEntry>, Bytes)>,
    ) -> Result<Vec<Compaction>> {
        self.writable()?;
        model::check_fence(
            self.generation,
            self.newest_generation.load(Ordering::SeqCst),
        )?;
        let mut firsts = Vec::with_capacity(items.len());
        let mut merged = Vec::with_capacity(items.len());
        for (vnode, chain, bytes) in items {
            firsts.push(merged_chain_start(vnode, through, &chain)?.path.clone());
            merged.push((vnode, PartialKind::Snapshot, bytes));
        }
        let lowest = merged.iter().map(|(vnode, _, _)| *vnode).min().unwrap_or(0);
        let batches = plan_batches(through, &merged, BATCH_BYTES, |index| {
            compaction_batch_name(through, lowest, index, self.generation, &self.instance_path)
        });
        // Marked before the puts: a prune listing them right after must
        // already see them as wanted.
        {
            let mut unsealed = self.unsealed_compactions.lock().unwrap();
            for batch in &batches {
                *unsealed.entry(batch.name.clone()).or_default() += batch.entries.len();
            }
        }
        let written = futures::stream::iter(0..batches.len())
            .map(|i| self.put_batch(&batches[i]))
            .buffer_unordered(BATCH_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await;
        if let Err(e) = written {
            // Never handed out, so never forgotten: unmark them here. An
            // object that did land is garbage for the next prune.
            let mut unsealed = self.unsealed_compactions.lock().unwrap();
            for batch in &batches {
                unsealed.remove(&batch.name);
            }
            return Err(e);
        }
        Ok(batches
            .into_iter()
            .flat_map(|b| b.entries)
            .zip(firsts)
            .map(|((vnode, entry), replaces_from)| Compaction {
                vnode,
                replaces_from,
                entry,
            })
            .collect())
    }
}
