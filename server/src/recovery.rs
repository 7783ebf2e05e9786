//! Bringing projections back after a start: restore what the latest sealed
//! epoch holds, replay the table log after it, rebuild the rest.
//!
//! 1. [`Database::open`](crate::db::Database) reads the latest seal
//!    ([`seal::Recovery::start`]) and, while it replays the table log into the
//!    tables, keeps the projection changes of every record the seal does
//!    not cover ([`seal::Recovery::push`]).
//!    Reading and decoding the seal's vnode chains starts there too
//!    ([`seal::Recovery::prefetch`]), on the runtime's threads, so it
//!    overlaps loading the tables.
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

use weir_common::ObjectId;
use weir_engine::runtime::checkpoints::projection_key;
use weir_engine::runtime::{Deployment, Restore};

use crate::db::Database;
use crate::error::ServerError;
use crate::planning::PlanContext;

/// Restores or rebuilds every projection of the catalog, then marks the
/// database ready. Runs once, after the listeners are up.
pub async fn recover(db: Arc<Database>) {
    let started = Instant::now();
    let Some(mut recovery) = db.take_recovery() else {
        db.set_ready();
        return;
    };
    let catalog = db.snapshot().catalog.clone();
    let mut restored: HashSet<ObjectId> = HashSet::new();
    if let Some(seal) = &recovery.seal {
        // Dropped at the end of this block when nothing is restored, which
        // stops the reading before any rebuild.
        let prefetched = recovery.prefetched.take();
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
                prefetched,
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
            Ok(deployment) => {
                db.deploy_projection(Deployment {
                    rebuilt: true,
                    ..deployment
                })
                .await
            }
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
        .chain(
            catalog
                .sinks
                .values()
                // A paused destination is not deployed until RESUME.
                .filter(|s| !s.destination.as_ref().is_some_and(|d| d.paused))
                .map(|s| Managed::Sink(s)),
        )
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
pub mod seal;
