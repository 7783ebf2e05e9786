//! Bringing projections back after a start: restore what the latest sealed
//! epoch holds, replay the table log after it, rebuild the rest.
//!
//! 1. [`Database::open`](crate::db::Database) reads the latest seal
//!    ([`Recovery::start`]) and, while it replays the table log into the
//!    tables, keeps the projection changes of every record the seal does
//!    not cover ([`Recovery::push`]).
//! 2. After the listeners are up, [`recover`] plans every projection and
//!    sink ([`crate::planning`], under the settings it was created with;
//!    no session is involved). One
//!    whose fingerprint the seal stores, and whose projection inputs are
//!    restored too, is restored: the engine's runtime
//!    ([`weir_engine::runtime::Runtime::restore`]) reads every vnode's chain
//!    (vnode-parallel), applies it, publishes the sealed epoch and replays
//!    the kept changes. Every other projection is
//!    rebuilt from its inputs, after the restored ones.
//! 3. Then the database is ready. Until then managed statements answer
//!    57P03 (see [`crate::session`]) and `/ready` is 503, so no commit can
//!    reach the coordinator before the replayed changes.
//!
//! A restore that fails for any reason (a missing or damaged blob, a state
//! that does not fit the graph) is logged and its projections are rebuilt:
//! slower, never wrong.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use weir_common::{ChangeBatch, ObjectId};
use weir_engine::runtime::checkpoints::{TABLE_LOG_ID, TABLE_LOG_OFFSET, projection_key};
use weir_engine::runtime::{Deployment, Restore};
use weir_storage::{ObjectStateBackend, SealManifest, StateBackend as _};

use crate::db::Database;
use crate::error::ServerError;
use crate::planning::PlanContext;

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
    pub sealed_streams: weir_engine::runtime::streams::SealedStreams,
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
        recovery.sealed_streams = weir_engine::runtime::streams::SealedStreams::from_seal(
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
    let mut restored: HashSet<ObjectId> = HashSet::new();
    if let Some(seal) = &recovery.seal {
        let mut deployments = Vec::new();
        // Catalog ids grow with creation: a projection comes after its
        // inputs; sinks come after every projection.
        for object in managed_objects(&catalog) {
            let deployment = match object.plan(&db).await {
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
            match db.runtime().restore(restore).await {
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
        // Planned again over the catalog as it is now, after what was
        // rebuilt before it.
        let deployed = match object.plan(&db).await {
            Ok(deployment) => db.deploy_projection(deployment).await,
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

    /// Plans the object under the settings it was created with, apart
    /// from any session.
    async fn plan(&self, db: &Arc<Database>) -> Result<Deployment, ServerError> {
        match self {
            Self::Projection(p) => {
                PlanContext::for_settings(db, &p.settings)?
                    .projection(p)
                    .await
            }
            Self::Sink(s) => PlanContext::for_settings(db, &s.settings)?.sink(s).await,
        }
    }
}

#[cfg(test)]
mod fault_tests;
