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

enum Command {
    Changes(u64, Vec<(ObjectId, ChangeBatch)>),
    Deploy(Box<Deployment>, oneshot::Sender<Result<(), EngineError>>),
    Drop(ObjectId),
    Barrier(oneshot::Sender<()>),
}

/// The handle sessions and commits use.
pub struct Projections {
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
}

struct Shared {
    view: RwLock<Arc<EpochView>>,
    /// The highest commit sequence number whose changes the view includes.
    covered: AtomicU64,
    barrier_interval_ms: AtomicU64,
}

impl Projections {
    /// Starts the coordinator task on the query threads.
    /// Epochs are numbered after `sealed_epoch`, the latest in `state`;
    /// each completed epoch is checkpointed there.
    pub fn start(
        runtime: &crate::query_runtime::QueryRuntime,
        barrier_interval: Duration,
        metrics: Arc<Metrics>,
        state: Arc<weir_storage::ObjectStateBackend>,
        sealed_epoch: u64,
    ) -> Self {
        let (commands, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            view: RwLock::new(Arc::new(EpochView::default())),
            covered: AtomicU64::new(0),
            barrier_interval_ms: AtomicU64::new(barrier_interval.as_millis().max(1) as u64),
        });
        let checkpointer = crate::checkpoints::Checkpointer::new(state);
        runtime.spawn(run(
            receiver,
            shared.clone(),
            metrics,
            checkpointer,
            sealed_epoch,
        ));
        Self { commands, shared }
    }

    /// The latest completed epoch.
    pub fn view(&self) -> Arc<EpochView> {
        self.shared.view.read().clone()
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

    /// Hands a commit's table changes to the coordinator (call in commit order).
    pub async fn changes(&self, seq: u64, changes: Vec<(ObjectId, ChangeBatch)>) {
        self.send(Command::Changes(seq, changes)).await;
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
) {
    let mut coordinator = Coordinator::new();
    coordinator.resume_after(weir_common::Epoch(sealed_epoch));
    let mut received: u64 = 0;
    loop {
        let interval = Duration::from_millis(shared.barrier_interval_ms.load(Ordering::Relaxed));
        let command = tokio::select! {
            command = commands.recv() => match command {
                Some(c) => Some(c),
                None => return,
            },
            _ = tokio::time::sleep(interval) => None,
        };
        match command {
            None => {
                if coordinator.pending_rows() > 0 {
                    close_epoch(&mut coordinator, &shared, received, &metrics);
                } else {
                    shared.covered.store(received, Ordering::Release);
                }
            }
            Some(Command::Changes(seq, changes)) => {
                for (table, change) in changes {
                    coordinator.push(table, change);
                }
                received = seq;
                if coordinator.pending_rows() >= EPOCH_ROW_BUDGET {
                    close_epoch(&mut coordinator, &shared, received, &metrics);
                }
            }
            Some(Command::Barrier(reply)) => {
                close_epoch(&mut coordinator, &shared, received, &metrics);
                let _ = reply.send(());
            }
            Some(Command::Deploy(deployment, reply)) => {
                close_epoch(&mut coordinator, &shared, received, &metrics);
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
                *shared.view.write() = coordinator.view();
            }
        }
        // A no-op unless an epoch completed since the last checkpoint and a
        // barrier interval passed; `covered` is what the epoch includes.
        let covered = shared.covered.load(Ordering::Acquire);
        let interval = Duration::from_millis(shared.barrier_interval_ms.load(Ordering::Relaxed));
        checkpointer
            .checkpoint(&mut coordinator, covered, interval, &metrics)
            .await;
    }
}

fn close_epoch(coordinator: &mut Coordinator, shared: &Shared, received: u64, metrics: &Metrics) {
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
