//! Bringing projections back after a start: restore what the latest sealed
//! epoch holds, replay the table log after it, rebuild the rest.
//!
//! 1. [`Database::open`](crate::db::Database) reads the latest seal
//!    ([`Recovery::start`]) and, while it replays the table log into the
//!    tables, keeps the projection changes of every record the seal does
//!    not cover ([`Recovery::push`]).
//! 2. After the listeners are up, [`recover`] plans every projection. One
//!    whose fingerprint the seal stores, and whose projection inputs are
//!    restored too, is restored: [`restore`] (in the coordinator task)
//!    reads every vnode's chain (vnode-parallel), applies it, publishes the
//!    sealed epoch and replays the kept changes. Every other projection is
//!    rebuilt from its inputs, after the restored ones.
//! 3. Then the database is ready. Until then managed statements answer
//!    57P03 (see [`crate::session`]) and `/ready` is 503, so no commit can
//!    reach the coordinator before the replayed changes.
//!
//! A restore that fails for any reason (a missing or damaged blob, a state
//! that does not fit the graph) is logged and its projections are rebuilt:
//! slower, never wrong.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use weir_common::{ChangeBatch, Epoch, ObjectId};
use weir_engine::{Coordinator, VNODES, VnodeState};
use weir_storage::{ObjectStateBackend, SealManifest, StateBackend as _};

use crate::checkpoints::{TABLE_LOG_ID, TABLE_LOG_OFFSET, projection_key};
use crate::db::Database;
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::projections::{EPOCH_ROW_BUDGET, Restore};

/// Vnode chains read (and decoded) at once.
const READ_CONCURRENCY: usize = 16;

/// What [`recover`] needs from opening the database.
pub struct Recovery {
    /// The latest seal, if projections can be restored from it.
    pub seal: Option<Arc<SealManifest>>,
    /// The table-log LSN the seal covers.
    covered_lsn: u64,
    replay: Vec<(u64, Vec<(ObjectId, ChangeBatch)>)>,
    /// The latest seal's source offsets and sink descriptors, when it is a
    /// seal of this data directory: sources resume there and sinks
    /// re-commit it, whether or not projection state is restored.
    pub sealed_streams: crate::streaming::SealedStreams,
}

impl Recovery {
    /// Reads the latest seal of `state`. A seal of another table log than
    /// `table_log_id`, or whose covered LSN is past the log's end
    /// (`last_lsn`), describes a log this data directory does not have, so
    /// nothing is restored from it.
    /// The log before `log_start` (the table snapshot's LSN) is gone: a
    /// seal covering less cannot be replayed either.
    pub async fn start(
        state: &ObjectStateBackend,
        table_log_id: &str,
        log_start: u64,
        last_lsn: u64,
    ) -> Result<Self, ServerError> {
        let mut recovery = Self {
            seal: None,
            covered_lsn: 0,
            replay: Vec::new(),
            sealed_streams: Default::default(),
        };
        let Some(epoch) = state.latest_committed_epoch().await? else {
            return Ok(recovery);
        };
        let Some(seal) = state.read_seal(epoch).await? else {
            return Ok(recovery);
        };
        if !seal.source_offsets.contains_key(TABLE_LOG_OFFSET) {
            // Nothing was checkpointed yet (a store's first claim).
            return Ok(recovery);
        }
        if seal.source_offsets.get(TABLE_LOG_ID).map(String::as_str) != Some(table_log_id) {
            tracing::warn!(
                epoch,
                "the latest seal is of another data directory's table log; projections are rebuilt"
            );
            return Ok(recovery);
        }
        recovery.sealed_streams = crate::streaming::SealedStreams::from_seal(
            epoch,
            &seal.source_offsets,
            &seal.sink_descriptors,
        );
        let covered = seal
            .source_offsets
            .get(TABLE_LOG_OFFSET)
            .and_then(|lsn| lsn.parse::<u64>().ok());
        match covered {
            Some(lsn) if lsn < log_start => tracing::warn!(
                epoch,
                covered = lsn,
                log_start,
                "the table log after the latest seal was compacted away; projections are rebuilt"
            ),
            Some(lsn) if lsn <= last_lsn => {
                recovery.covered_lsn = lsn;
                recovery.seal = Some(seal);
            }
            Some(lsn) => tracing::warn!(
                epoch,
                covered = lsn,
                log_end = last_lsn,
                "the latest seal covers more of the table log than this data directory holds; projections are rebuilt"
            ),
            None => {}
        }
        Ok(recovery)
    }

    /// Whether the record at `lsn` must be replayed into restored projections.
    pub fn replays(&self, lsn: u64) -> bool {
        self.seal.is_some() && lsn > self.covered_lsn
    }

    pub fn push(&mut self, lsn: u64, changes: Vec<(ObjectId, ChangeBatch)>) {
        self.replay.push((lsn, changes));
    }
}

/// Restores or rebuilds every projection of the catalog, then marks the
/// database ready. Runs once, after the listeners are up.
pub async fn recover(db: Arc<Database>) {
    let started = Instant::now();
    let Some(recovery) = db.take_recovery() else {
        db.set_ready();
        return;
    };
    let catalog = db.snapshot().catalog.clone();
    let mut session = crate::session::Session::new(
        db.clone(),
        crate::catalog::model::SUPERUSER,
        crate::catalog::model::DATABASE_NAME,
    );
    let mut restored: HashSet<ObjectId> = HashSet::new();
    session.refresh_view();
    if let Some(seal) = &recovery.seal {
        let mut deployments = Vec::new();
        // Catalog ids grow with creation: a projection comes after its
        // inputs; sinks come after every projection.
        for object in managed_objects(&catalog) {
            if let Err(e) = object.adopt_settings(&mut session) {
                tracing::error!(object = %object.name(), error = %e, "settings could not be restored");
                continue;
            }
            let deployment = match object.plan(&session).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(object = %object.name(), error = %e, "could not be planned");
                    continue;
                }
            };
            let stored = seal.source_offsets.get(&projection_key(object.id()));
            let inputs_restored = deployment.sources.iter().all(|s| {
                !catalog.projections.contains_key(&s.object) || restored.contains(&s.object)
            });
            if stored == Some(&deployment.fingerprint) && inputs_restored {
                restored.insert(object.id());
                deployments.push(deployment);
            }
        }
        if !deployments.is_empty() {
            let count = deployments.len();
            let replayed = recovery.replay.len();
            let restore = Restore {
                epoch: seal.epoch,
                deployments,
                replay: recovery.replay,
            };
            match db.projections().restore(restore).await {
                Ok(()) => tracing::info!(
                    epoch = seal.epoch,
                    projections = count,
                    replayed,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "projections restored from the sealed epoch"
                ),
                Err(e) => {
                    tracing::error!(epoch = seal.epoch, error = %e, "restoring projections failed; rebuilding them from their inputs");
                    restored.clear();
                }
            }
        }
    }
    for object in managed_objects(&catalog) {
        if restored.contains(&object.id()) {
            continue;
        }
        session.refresh_view();
        let deployed = match object.adopt_settings(&mut session) {
            Ok(()) => match object {
                Managed::Projection(def) => session.deploy(def).await,
                Managed::Sink(def) => session.deploy_sink(def).await,
            },
            Err(e) => Err(e),
        };
        match deployed {
            Ok(()) => tracing::info!(object = %object.name(), "{} rebuilt", object.kind()),
            Err(e) => {
                tracing::error!(object = %object.name(), error = %e, "{} could not be rebuilt", object.kind())
            }
        }
    }
    db.metrics().restored(started.elapsed());
    db.set_ready();
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        restored = restored.len(),
        "ready"
    );
}

/// What recovery brings back: projections, then sinks.
#[derive(Clone, Copy)]
enum Managed<'a> {
    Projection(&'a crate::catalog::model::ProjectionDef),
    Sink(&'a crate::catalog::streaming::SinkDef),
}

fn managed_objects(catalog: &crate::catalog::Catalog) -> impl Iterator<Item = Managed<'_>> {
    catalog
        .projections
        .values()
        .map(|p| Managed::Projection(p))
        .chain(catalog.sinks.values().map(|s| Managed::Sink(s)))
}

impl Managed<'_> {
    fn id(&self) -> ObjectId {
        match self {
            Self::Projection(p) => p.id,
            Self::Sink(s) => s.id,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Projection(_) => "projection",
            Self::Sink(_) => "sink",
        }
    }

    fn name(&self) -> String {
        match self {
            Self::Projection(p) => format!("projection {}", p.qualified_name()),
            Self::Sink(s) => format!("sink {}", s.qualified_name()),
        }
    }

    fn adopt_settings(&self, session: &mut crate::session::Session) -> Result<(), ServerError> {
        match self {
            Self::Projection(p) => session.adopt_settings(p),
            Self::Sink(s) => session.adopt_sink_settings(s),
        }
    }

    async fn plan(
        &self,
        session: &crate::session::Session,
    ) -> Result<crate::projections::Deployment, ServerError> {
        match self {
            Self::Projection(p) => session.plan_deployment(p).await,
            Self::Sink(s) => session.plan_sink_deployment(s).await,
        }
    }
}

/// The coordinator side of [`Restore`]: deploy, apply every vnode's chain,
/// publish the sealed epoch, replay. On an error the restored projections
/// are dropped again. Returns what restored sinks emitted while replaying.
pub(crate) async fn restore(
    coordinator: &mut Coordinator,
    backend: &Arc<ObjectStateBackend>,
    restore: Restore,
    fingerprints: &mut HashMap<ObjectId, String>,
    metrics: &Metrics,
) -> Result<Vec<(ObjectId, ChangeBatch)>, ServerError> {
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
        // Reading and decoding run on the query threads in parallel; the
        // coordinator applies chains as they arrive, each whole and in order.
        let mut chains = futures::stream::iter(0..VNODES)
            .map(|vnode| {
                let backend = backend.clone();
                tokio::spawn(async move { read_chain(&backend, vnode, epoch).await })
            })
            .buffer_unordered(READ_CONCURRENCY);
        while let Some(chain) = chains.next().await {
            let chain =
                chain.map_err(|e| ServerError::internal(format!("reading a vnode: {e}")))??;
            for state in &chain {
                coordinator.restore_vnode(state)?;
            }
        }
        coordinator.finish_restore(Epoch(epoch))?;
        for (_, changes) in replay {
            for (table, change) in changes {
                coordinator.push(table, change);
            }
            if coordinator.pending_rows() >= EPOCH_ROW_BUDGET {
                emitted.extend(run_replay_epoch(coordinator, metrics)?);
            }
        }
        Ok::<(), ServerError>(())
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
) -> Result<Vec<VnodeState>, ServerError> {
    backend
        .restore_chain(vnode, epoch)
        .await?
        .into_iter()
        .map(|(_, bytes)| VnodeState::decode(&bytes).map_err(ServerError::from))
        .collect()
}

fn run_replay_epoch(
    coordinator: &mut Coordinator,
    metrics: &Metrics,
) -> Result<Vec<(ObjectId, ChangeBatch)>, ServerError> {
    let mut report = coordinator.run_epoch()?;
    let emitted = std::mem::take(&mut report.emitted);
    for (id, error) in &report.failed {
        tracing::error!(projection = %id, epoch = report.epoch.0, %error, "projection failed while replaying");
    }
    metrics.epoch(&report);
    Ok(emitted)
}

#[cfg(test)]
mod fault_tests;
