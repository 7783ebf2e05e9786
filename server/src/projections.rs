//! Keeps projections current: one task owns the engine's [`Coordinator`]
//! and is fed, in commit order, by [`Database::commit`](crate::db::Database).
//!
//! - Commits send their table changes ([`Command::Changes`]) while holding
//!   the commit lock, so the task sees changes in commit order; the channel
//!   is bounded, so a coordinator that falls behind slows writers down
//!   instead of growing memory.
//! - An epoch closes every `barrier_interval`, when pending changes pass
//!   [`EPOCH_ROW_BUDGET`] rows (bounded memory under a burst), and on demand
//!   ([`Projections::barrier`]: FLUSH, read-your-writes, DDL).
//! - Each epoch publishes an [`EpochView`]; a statement reads all
//!   projections from one view, so they agree on the epoch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot};
use weir_common::{ChangeBatch, ObjectId};
use weir_engine::{Coordinator, EngineError, EpochView, Graph, SourceBinding, TableState};

use crate::error::ServerError;
use crate::metrics::Metrics;

/// Pending rows after which an epoch closes without waiting for the timer.
pub const EPOCH_ROW_BUDGET: usize = 65_536;
/// Commands in flight before committers wait.
const CHANNEL_CAPACITY: usize = 256;

/// A projection ready to deploy: its graph, bound to catalog objects.
pub struct Deployment {
    pub id: ObjectId,
    pub graph: Graph,
    pub sources: Vec<SourceBinding>,
    pub schema: SchemaRef,
    /// [`weir_engine::state_fingerprint`] of the graph: stored with its
    /// checkpointed state, which a restore only uses for the same graph.
    pub fingerprint: String,
    /// Table contents to backfill from, in the columns projections read,
    /// as of the commit that created the projection.
    pub tables: HashMap<ObjectId, TableContents>,
}

/// A table's state and how to turn it into the columns projections read.
pub struct TableContents {
    pub state: TableState,
    /// Columns of the stored rows that users see (drops the hidden row id).
    pub user_columns: usize,
}

/// Projections to restore from the sealed epoch `epoch` of the state
/// backend, then bring up to date with the table changes committed after it.
pub struct Restore {
    pub epoch: u64,
    /// In deployment order, without table contents (nothing is backfilled).
    pub deployments: Vec<Deployment>,
    /// The table-log records after the seal's covered LSN, in order:
    /// (LSN, changes as projections read them).
    pub replay: Vec<(u64, Vec<(ObjectId, ChangeBatch)>)>,
}

/// Every table's state; see [`crate::db::Snapshot::tables`].
pub type Tables = Arc<HashMap<ObjectId, TableState>>;

enum Command {
    /// A commit's LSN, its changes, and the tables after it.
    Changes(u64, Vec<(ObjectId, ChangeBatch)>, Tables),
    Deploy(Box<Deployment>, oneshot::Sender<Result<(), EngineError>>),
    Restore(Box<Restore>, oneshot::Sender<Result<(), ServerError>>),
    Drop(ObjectId),
    Barrier(oneshot::Sender<()>),
}

/// The handle sessions and commits use.
pub struct Projections {
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    checkpoint_log: Arc<parking_lot::Mutex<crate::checkpoints::CheckpointLog>>,
}

pub(crate) struct Shared {
    view: RwLock<Arc<EpochView>>,
    /// The highest commit sequence number whose changes the view includes.
    covered: AtomicU64,
    barrier_interval_ms: AtomicU64,
    /// Set when the checkpointer finds the state claimed by another process.
    fenced: std::sync::OnceLock<String>,
    /// Set once every projection is restored or rebuilt after the start:
    /// until then the log after the latest seal is what a restore replays.
    recovered: std::sync::atomic::AtomicBool,
}

impl Projections {
    /// Starts the coordinator task on the query threads.
    /// Epochs are numbered after `sealed_epoch`, the latest in `state`;
    /// each completed epoch is checkpointed there. `last_lsn` is the table
    /// log's end at open: every commit up to it is in the tables.
    pub fn start(
        runtime: &crate::query_runtime::QueryRuntime,
        barrier_interval: Duration,
        metrics: Arc<Metrics>,
        state: Arc<weir_storage::ObjectStateBackend>,
        sealed_epoch: u64,
        last_lsn: u64,
        table_log_id: String,
        tables: Tables,
        compactor: crate::table_snapshot::Compactor,
    ) -> Self {
        let (commands, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            view: RwLock::new(Arc::new(EpochView::default())),
            covered: AtomicU64::new(last_lsn),
            barrier_interval_ms: AtomicU64::new(barrier_interval.as_millis().max(1) as u64),
            fenced: std::sync::OnceLock::new(),
            recovered: std::sync::atomic::AtomicBool::new(false),
        });
        let checkpoint_log = Arc::default();
        let checkpointer =
            crate::checkpoints::Checkpointer::new(state, table_log_id, Arc::clone(&checkpoint_log));
        runtime.spawn(run(
            receiver,
            shared.clone(),
            metrics,
            checkpointer,
            sealed_epoch,
            (last_lsn, tables),
            compactor,
        ));
        Self {
            commands,
            shared,
            checkpoint_log,
        }
    }

    /// What this process's checkpoints did.
    pub fn checkpoint_log(&self) -> parking_lot::MutexGuard<'_, crate::checkpoints::CheckpointLog> {
        self.checkpoint_log.lock()
    }

    /// The latest completed epoch.
    pub fn view(&self) -> Arc<EpochView> {
        self.shared.view.read().clone()
    }

    /// Every projection is restored or rebuilt: the table log may be
    /// compacted from now on.
    pub fn recovered(&self) {
        self.shared.recovered.store(true, Ordering::Release);
    }

    /// Why this process was fenced, once another process claimed its state.
    pub fn fenced(&self) -> Option<&str> {
        self.shared.fenced.get().map(String::as_str)
    }

    pub fn covered(&self) -> u64 {
        self.shared.covered.load(Ordering::Acquire)
    }

    pub fn barrier_interval(&self) -> Duration {
        Duration::from_millis(self.shared.barrier_interval_ms.load(Ordering::Relaxed))
    }

    pub fn set_barrier_interval(&self, interval: Duration) {
        let ms = interval.as_millis().clamp(1, u64::MAX as u128) as u64;
        self.shared.barrier_interval_ms.store(ms, Ordering::Relaxed);
    }

    /// Hands a commit's table changes, and the tables after it, to the
    /// coordinator (call in commit order).
    pub async fn changes(&self, seq: u64, changes: Vec<(ObjectId, ChangeBatch)>, tables: Tables) {
        self.send(Command::Changes(seq, changes, tables)).await;
    }

    /// Deploys a projection after closing the epoch of everything sent
    /// before; returns once its backfilled result is visible.
    pub async fn deploy(&self, deployment: Deployment) -> Result<(), ServerError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::Deploy(Box::new(deployment), reply))
            .await;
        done.await
            .map_err(|_| ServerError::internal("the projection coordinator stopped"))?
            .map_err(ServerError::from)
    }

    /// Restores projections from a checkpoint (see [`Restore`]). Send it
    /// before any commit's changes. On an error nothing of it stays
    /// deployed: the caller rebuilds those projections from their inputs.
    pub async fn restore(&self, restore: Restore) -> Result<(), ServerError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::Restore(Box::new(restore), reply)).await;
        done.await
            .map_err(|_| ServerError::internal("the projection coordinator stopped"))?
    }

    pub async fn drop_projection(&self, id: ObjectId) {
        self.send(Command::Drop(id)).await;
    }

    /// Closes an epoch now; returns when everything sent before is visible.
    pub async fn barrier(&self) -> Result<(), ServerError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::Barrier(reply)).await;
        done.await
            .map_err(|_| ServerError::internal("the projection coordinator stopped"))
    }

    async fn send(&self, command: Command) {
        if self.commands.send(command).await.is_err() {
            tracing::error!("the projection coordinator task has stopped");
        }
    }
}

async fn run(
    mut commands: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    mut checkpointer: crate::checkpoints::Checkpointer,
    sealed_epoch: u64,
    (last_lsn, mut tables): (u64, Tables),
    compactor: crate::table_snapshot::Compactor,
) {
    let mut coordinator = Coordinator::new();
    coordinator.resume_after(weir_common::Epoch(sealed_epoch));
    // Everything in the table log at open is in the tables that deploys
    // backfill from (or replayed by a restore), so it counts as covered.
    let mut received: u64 = last_lsn;
    // The fingerprint of every deployed projection, stored with its state.
    let mut fingerprints: HashMap<ObjectId, String> = HashMap::new();
    // The timer's next barrier: a deadline, not a sleep per command, so a
    // steady stream of commits cannot keep postponing it.
    let mut tick = tokio::time::Instant::now();
    loop {
        let interval = Duration::from_millis(shared.barrier_interval_ms.load(Ordering::Relaxed));
        // A shorter interval set meanwhile takes effect now.
        tick = tick.min(tokio::time::Instant::now() + interval);
        let command = tokio::select! {
            command = commands.recv() => match command {
                Some(c) => Some(c),
                None => return,
            },
            _ = tokio::time::sleep_until(tick) => None,
        };
        if command.is_none() {
            tick = tokio::time::Instant::now() + interval;
        }
        match command {
            None => {
                if coordinator.pending_rows() > 0 {
                    close_epoch(&mut coordinator, &shared, received, &metrics);
                } else {
                    shared.covered.store(received, Ordering::Release);
                }
            }
            Some(Command::Changes(seq, changes, after)) => {
                for (table, change) in changes {
                    coordinator.push(table, change);
                }
                received = seq;
                tables = after;
                if coordinator.pending_rows() >= EPOCH_ROW_BUDGET {
                    close_epoch(&mut coordinator, &shared, received, &metrics);
                }
            }
            Some(Command::Barrier(reply)) => {
                close_epoch(&mut coordinator, &shared, received, &metrics);
                let _ = reply.send(());
            }
            Some(Command::Restore(restore, reply)) => {
                let result = crate::recovery::restore(
                    &mut coordinator,
                    checkpointer.backend(),
                    *restore,
                    &mut fingerprints,
                    &metrics,
                )
                .await;
                close_epoch(&mut coordinator, &shared, received, &metrics);
                let _ = reply.send(result);
            }
            Some(Command::Deploy(deployment, reply)) => {
                close_epoch(&mut coordinator, &shared, received, &metrics);
                fingerprints.insert(deployment.id, deployment.fingerprint.clone());
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    deploy(&mut coordinator, *deployment)
                }))
                .unwrap_or_else(|panic| {
                    Err(EngineError::Invariant {
                        operator: "coordinator",
                        message: format!("deploying panicked: {}", panic_message(&panic)),
                    })
                });
                *shared.view.write() = coordinator.view();
                let _ = reply.send(result);
            }
            Some(Command::Drop(id)) => {
                coordinator.drop_projection(id);
                fingerprints.remove(&id);
                *shared.view.write() = coordinator.view();
            }
        }
        // A no-op unless an epoch completed since the last checkpoint and a
        // barrier interval passed; `covered` is what the epoch includes.
        let covered = shared.covered.load(Ordering::Acquire);
        let interval = Duration::from_millis(shared.barrier_interval_ms.load(Ordering::Relaxed));
        checkpointer
            .checkpoint(&mut coordinator, covered, &fingerprints, interval, &metrics)
            .await;
        if let Some(reason) = checkpointer.fenced() {
            let _ = shared.fenced.set(reason.to_string());
        }
        // Tables are snapshotted at an LSN whose projection state is sealed
        // (any LSN when there are no projections), so the log kept is what
        // a restore from the latest seal replays. `tables` is as of
        // `received`, so only when the epoch covers all received.
        if covered == received
            && shared.recovered.load(Ordering::Acquire)
            && checkpointer.fenced().is_none()
            && (fingerprints.is_empty() || checkpointer.last_sealed_lsn() == Some(covered))
            && compactor.due(covered)
        {
            compactor.compact(covered, tables.clone());
        }
    }
}

pub(crate) fn close_epoch(
    coordinator: &mut Coordinator,
    shared: &Shared,
    received: u64,
    metrics: &Metrics,
) {
    // An operator bug must not take the server (or the commit path) down.
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| coordinator.run_epoch()))
            .unwrap_or_else(|panic| {
                let reason = panic_message(&panic);
                tracing::error!(%reason, "an epoch panicked; every projection is marked failed");
                coordinator.fail_all(&format!("internal error in an operator: {reason}"));
                Err(EngineError::Invariant {
                    operator: "coordinator",
                    message: reason,
                })
            });
    match outcome {
        Ok(report) => {
            for (id, error) in &report.failed {
                tracing::error!(projection = %id, epoch = report.epoch.0, %error, "projection failed");
            }
            metrics.epoch(&report);
        }
        Err(e) => tracing::error!(error = %e, "epoch failed"),
    }
    *shared.view.write() = coordinator.view();
    shared.covered.store(received, Ordering::Release);
}

fn deploy(coordinator: &mut Coordinator, deployment: Deployment) -> Result<(), EngineError> {
    let Deployment {
        id,
        graph,
        sources,
        schema,
        tables,
        fingerprint: _,
    } = deployment;
    let contents = |object: ObjectId| -> Result<Option<ChangeBatch>, EngineError> {
        let Some(table) = tables.get(&object) else {
            return Ok(None);
        };
        let columns: Vec<usize> = (0..table.user_columns).collect();
        let parts = table
            .state
            .scan()?
            .iter()
            .map(|b| Ok(ChangeBatch::inserts(b.project(&columns)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        let schema = Arc::new(table.state.schema().project(&columns)?);
        Ok(Some(weir_engine::rows::concat_changes(&schema, &parts)?))
    };
    coordinator.deploy(id, graph, sources, schema, &contents)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
