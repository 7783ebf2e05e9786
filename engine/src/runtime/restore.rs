//! The runtime side of a restore: deploy the graphs, apply every vnode's
//! chain of the sealed epoch (read and decoded vnode-parallel), publish the
//! sealed epoch, replay the table log after it. Which projections to
//! restore, and planning them, is the host's business.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use weir_common::{ChangeBatch, Epoch, ObjectId};
use weir_storage::ObjectStateBackend;

use super::{EPOCH_ROW_BUDGET, Restore, RuntimeObserver};
use crate::{Coordinator, EngineError, VNODES, VnodeState};

/// Vnode chains read (and decoded) at once.
const READ_CONCURRENCY: usize = 16;

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
        let mut chains = futures::stream::iter(0..VNODES)
            .map(|vnode| {
                let backend = backend.clone();
                tokio::spawn(async move { read_chain(&backend, vnode, epoch).await })
            })
            .buffer_unordered(READ_CONCURRENCY);
        while let Some(chain) = chains.next().await {
            let chain = chain.map_err(|e| EngineError::Invariant {
                operator: "restore",
                message: format!("reading a vnode: {e}"),
            })??;
            for state in chain {
                coordinator.restore_vnode(state)?;
            }
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
