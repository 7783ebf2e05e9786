//! The runtime side of a restore: deploy the graphs, apply every vnode's
//! chain of the sealed epoch (read and decoded vnode-parallel, from as early
//! as the host knows the seal: [`ChainPrefetch`]), publish the sealed epoch,
//! replay the table log after it. Which projections to restore, and
//! planning them, is the host's business.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use weir_common::{ChangeBatch, Epoch, ObjectId};
use weir_storage::ObjectStateBackend;

use super::{EPOCH_ROW_BUDGET, Restore, RuntimeObserver};
use crate::{Coordinator, EngineError, VNODES, VnodeState};

/// Vnode chains read (and decoded) at once.
const READ_CONCURRENCY: usize = 16;
/// Chains read ahead of the restore that applies them. Bounded so that a
/// restore that started late does not hold all state twice (the blobs and
/// the operators' copies) and memory freed by applied chains is reused.
const READ_AHEAD: usize = 64;

/// Every vnode's chain of one sealed epoch, read and decoded by tasks of
/// the current tokio runtime from the moment it is started, up to
/// `READ_AHEAD` chains ahead of the restore. A host starts it as soon as
/// it knows the seal it will restore from, so that reading and decoding the
/// state overlaps its own start-up work (opening the tables); [`Restore`]
/// hands it to the runtime, which applies the chains as they arrive.
/// Dropping it stops the reading.
pub struct ChainPrefetch {
    epoch: u64,
    chains: mpsc::Receiver<Result<Vec<VnodeState>, EngineError>>,
}

impl ChainPrefetch {
    /// Starts reading every vnode's chain of `epoch` from `backend`.
    /// Must be called within a tokio runtime.
    pub fn start(backend: Arc<ObjectStateBackend>, epoch: u64) -> Self {
        let (sender, chains) = mpsc::channel(READ_AHEAD);
        tokio::spawn(async move {
            let mut read = futures::stream::iter(0..VNODES)
                .map(|vnode| {
                    let backend = backend.clone();
                    tokio::spawn(async move { read_chain(&backend, vnode, epoch).await })
                })
                .buffer_unordered(READ_CONCURRENCY);
            while let Some(chain) = read.next().await {
                let chain = chain.unwrap_or_else(|e| {
                    Err(EngineError::Invariant {
                        operator: "restore",
                        message: format!("reading a vnode: {e}"),
                    })
                });
                if sender.send(chain).await.is_err() {
                    // Nobody restores from it any more.
                    return;
                }
            }
        });
        Self { epoch, chains }
    }

    /// The next vnode's chain, in no particular vnode order; `None` once
    /// every vnode's chain was handed out.
    async fn next(&mut self) -> Option<Result<Vec<VnodeState>, EngineError>> {
        self.chains.recv().await
    }
}

/// Restores `restore` into `coordinator`. On an error the restored
/// projections are dropped again. Returns what restored sinks emitted
/// while replaying.
pub(super) async fn restore(
    coordinator: &mut Coordinator,
    backend: &Arc<ObjectStateBackend>,
    restore: Restore,
    fingerprints: &mut HashMap<ObjectId, String>,
    observer: &dyn RuntimeObserver,
) -> Result<Vec<(ObjectId, ChangeBatch)>, EngineError> {
    let Restore {
        epoch,
        deployments,
        replay,
        prefetched,
    } = restore;
    let ids: Vec<ObjectId> = deployments.iter().map(|d| d.id).collect();
    let mut emitted = Vec::new();
    let outcome = async {
        for d in deployments {
            coordinator.deploy_for_restore(d.id, d.graph, d.sources, d.schema)?;
            if d.sink.is_some() {
                coordinator.set_emitting(d.id);
            }
            fingerprints.insert(d.id, d.fingerprint);
        }
        // Reading and decoding run on other threads in parallel; the
        // coordinator applies chains as they arrive, each whole and in order.
        let mut chains = prefetched
            .filter(|p| p.epoch == epoch)
            .unwrap_or_else(|| ChainPrefetch::start(backend.clone(), epoch));
        let mut vnodes = 0;
        while let Some(chain) = chains.next().await {
            for state in chain? {
                coordinator.restore_vnode(state)?;
            }
            vnodes += 1;
        }
        if vnodes != VNODES {
            return Err(EngineError::Invariant {
                operator: "restore",
                message: format!("read {vnodes} of {VNODES} vnode chains"),
            });
        }
        coordinator.finish_restore(Epoch(epoch))?;
        for (_, changes) in replay {
            for (table, change) in changes {
                coordinator.push(table, change);
            }
            if coordinator.pending_rows() >= EPOCH_ROW_BUDGET {
                emitted.extend(run_replay_epoch(coordinator, observer)?);
            }
        }
        Ok::<(), EngineError>(())
    }
    .await;
    if outcome.is_err() {
        for id in &ids {
            coordinator.drop_projection(*id);
            fingerprints.remove(id);
        }
    }
    outcome.map(|()| emitted)
}

async fn read_chain(
    backend: &ObjectStateBackend,
    vnode: u32,
    epoch: u64,
) -> Result<Vec<VnodeState>, EngineError> {
    backend
        .restore_chain(vnode, epoch)
        .await?
        .into_iter()
        .map(|(_, bytes)| VnodeState::decode(&bytes))
        .collect()
}

fn run_replay_epoch(
    coordinator: &mut Coordinator,
    observer: &dyn RuntimeObserver,
) -> Result<Vec<(ObjectId, ChangeBatch)>, EngineError> {
    let mut report = coordinator.run_epoch()?;
    let emitted = std::mem::take(&mut report.emitted);
    for (id, error) in &report.failed {
        tracing::error!(projection = %id, epoch = report.epoch.0, %error, "projection failed while replaying");
    }
    observer.epoch(&report);
    Ok(emitted)
}
