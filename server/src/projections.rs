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
    /// The sources the graph reads.
    pub sources_read: Vec<crate::streaming::SourceToRead>,
    /// Set for a sink: its graph's output goes to this connector each
    /// epoch instead of being kept as a result.
    pub sink: Option<crate::streaming::SinkToOpen>,
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

pub(crate) enum Command {
    /// A commit's LSN, its changes, and the tables after it.
    Changes(u64, Vec<(ObjectId, ChangeBatch)>, Tables),
    /// From a source's reader task.
    Source(crate::streaming::SourceMessage),
    DropSource(ObjectId),
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
    /// Every source's and sink's state, for the system tables.
    streams: Arc<RwLock<crate::streaming::StreamStatus>>,
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
        sealed_streams: crate::streaming::SealedStreams,
    ) -> Self {
        let (commands, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            view: RwLock::new(Arc::new(EpochView::default())),
            covered: AtomicU64::new(last_lsn),
            barrier_interval_ms: AtomicU64::new(barrier_interval.as_millis().max(1) as u64),
            fenced: std::sync::OnceLock::new(),
            recovered: std::sync::atomic::AtomicBool::new(false),
            streams: Arc::default(),
        });
        let streams = crate::streaming::Streams::new(
            commands.downgrade(),
            shared.streams.clone(),
            sealed_streams,
        );
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
            streams,
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

    /// Stops a projection or a sink.
    pub async fn drop_projection(&self, id: ObjectId) {
        self.send(Command::Drop(id)).await;
    }

    /// Forgets a dropped source (nothing reads it any more).
    pub async fn drop_source(&self, id: ObjectId) {
        self.send(Command::DropSource(id)).await;
    }

    /// Every source's and sink's state.
    pub fn stream_status(
        &self,
    ) -> parking_lot::RwLockReadGuard<'_, crate::streaming::StreamStatus> {
        self.shared.streams.read()
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
    mut streams: crate::streaming::Streams,
) {
    use crate::streaming::SourceMessage;
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
        let mut epoch = Epochs {
            coordinator: &mut coordinator,
            shared: &shared,
            metrics: &metrics,
            streams: &mut streams,
        };
        match command {
            None => {
                if epoch.coordinator.pending_rows() > 0 {
                    epoch.close(received).await;
                } else {
                    shared.covered.store(received, Ordering::Release);
                }
            }
            Some(Command::Changes(seq, changes, after)) => {
                for (table, change) in changes {
                    epoch.coordinator.push(table, change);
                }
                received = seq;
                tables = after;
                if epoch.coordinator.pending_rows() >= EPOCH_ROW_BUDGET {
                    epoch.close(received).await;
                }
            }
            Some(Command::Source(message)) => match message {
                SourceMessage::Batch(reader, batch, _permit) => {
                    if epoch.streams.received(reader, &batch) {
                        epoch.coordinator.push(reader.source, batch.changes);
                    }
                    if epoch.coordinator.pending_rows() >= EPOCH_ROW_BUDGET {
                        epoch.close(received).await;
                    }
                }
                SourceMessage::Ended(id) => epoch.streams.set_source_status(id, "completed", None),
                SourceMessage::Failed(id, e) => {
                    tracing::error!(source = %id.source, error = %e, "source failed");
                    epoch.streams.set_source_status(id, "failed", Some(e))
                }
                SourceMessage::Retrying(id, e) => {
                    epoch.streams.set_source_status(id, "retrying", Some(e))
                }
            },
            Some(Command::Barrier(reply)) => {
                epoch.close(received).await;
                let _ = reply.send(());
            }
            Some(Command::Restore(restore, reply)) => {
                let opened: Vec<_> = restore
                    .deployments
                    .iter()
                    .map(|d| (d.id, d.sources_read.clone(), d.sink.clone()))
                    .collect();
                let result = crate::recovery::restore(
                    epoch.coordinator,
                    checkpointer.backend(),
                    *restore,
                    &mut fingerprints,
                    &metrics,
                )
                .await;
                if let Ok(emitted) = &result {
                    let at = epoch.coordinator.view().epoch.0;
                    for (id, sources, sink) in opened {
                        epoch.streams.start_readers(id, &sources);
                        if let Some(sink) = sink {
                            epoch.streams.open_sink(id, &sink, None, at).await;
                        }
                    }
                    epoch.streams.epoch_closed(at, emitted.clone()).await;
                }
                epoch.close(received).await;
                let _ = reply.send(result.map(drop));
            }
            Some(Command::Deploy(deployment, reply)) => {
                epoch.close(received).await;
                fingerprints.insert(deployment.id, deployment.fingerprint.clone());
                let result = epoch.deploy(*deployment).await;
                if result.is_err() {
                    fingerprints.remove(&id_of(&result));
                }
                *shared.view.write() = epoch.coordinator.view();
                let _ = reply.send(result.map(drop).map_err(|(_, e)| e));
            }
            Some(Command::Drop(id)) => {
                epoch.coordinator.drop_projection(id);
                epoch.streams.dropped(id);
                fingerprints.remove(&id);
                *shared.view.write() = epoch.coordinator.view();
            }
            Some(Command::DropSource(id)) => epoch.streams.source_dropped(id),
        }
        // A no-op unless an epoch completed since the last checkpoint and a
        // barrier interval passed; `covered` is what the epoch includes.
        let covered = shared.covered.load(Ordering::Acquire);
        let interval = Duration::from_millis(shared.barrier_interval_ms.load(Ordering::Relaxed));
        let sealed = checkpointer
            .checkpoint(
                &mut coordinator,
                covered,
                &fingerprints,
                interval,
                &metrics,
                &mut streams,
            )
            .await;
        if let Some(epoch) = sealed {
            streams.sealed(epoch).await;
        }
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

fn id_of(result: &Result<ObjectId, (ObjectId, EngineError)>) -> ObjectId {
    match result {
        Ok(id) | Err((id, _)) => *id,
    }
}

/// What closing an epoch and deploying touch, borrowed from the loop.
struct Epochs<'a> {
    coordinator: &'a mut Coordinator,
    shared: &'a Shared,
    metrics: &'a Metrics,
    streams: &'a mut crate::streaming::Streams,
}

impl Epochs<'_> {
    /// Closes an epoch, then hands each sink its share and pre-commits it.
    async fn close(&mut self, received: u64) {
        let emitted = close_epoch(self.coordinator, self.shared, received, self.metrics);
        let epoch = self.coordinator.view().epoch.0;
        self.streams.epoch_closed(epoch, emitted).await;
    }

    /// Deploys a projection or sink (with nothing pending), backfilled from
    /// its tables and from its sources up to what was received; starts
    /// reading its sources and opens its sink.
    async fn deploy(
        &mut self,
        deployment: Deployment,
    ) -> Result<ObjectId, (ObjectId, EngineError)> {
        let id = deployment.id;
        let invariant = |message: String| EngineError::Invariant {
            operator: "coordinator",
            message,
        };
        let sources = match self.streams.backfills(&deployment.sources_read).await {
            Ok(s) => s,
            Err(e) => return Err((id, invariant(format!("backfilling from a source: {e}")))),
        };
        let sources_read = deployment.sources_read.clone();
        let sink = deployment.sink.clone();
        let coordinator = &mut *self.coordinator;
        let deployed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            deploy(coordinator, deployment, sources)
        }))
        .unwrap_or_else(|panic| {
            Err(invariant(format!(
                "deploying panicked: {}",
                panic_message(&panic)
            )))
        })
        .map_err(|e| (id, e))?;
        self.streams.start_readers(id, &sources_read);
        if let Some(sink) = sink {
            let epoch = self.coordinator.view().epoch.0;
            self.streams.open_sink(id, &sink, deployed, epoch).await;
        }
        Ok(id)
    }
}

/// Closes the current epoch; returns what emitting deployments (sinks)
/// produced in it.
pub(crate) fn close_epoch(
    coordinator: &mut Coordinator,
    shared: &Shared,
    received: u64,
    metrics: &Metrics,
) -> Vec<(ObjectId, ChangeBatch)> {
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
    let mut emitted = Vec::new();
    match outcome {
        Ok(mut report) => {
            for (id, error) in &report.failed {
                tracing::error!(projection = %id, epoch = report.epoch.0, %error, "projection failed");
            }
            emitted = std::mem::take(&mut report.emitted);
            metrics.epoch(&report);
        }
        Err(e) => tracing::error!(error = %e, "epoch failed"),
    }
    *shared.view.write() = coordinator.view();
    shared.covered.store(received, Ordering::Release);
    emitted
}

/// Deploys `deployment`; for a sink, returns its backfill's output.
fn deploy(
    coordinator: &mut Coordinator,
    deployment: Deployment,
    source_contents: HashMap<ObjectId, ChangeBatch>,
) -> Result<Option<ChangeBatch>, EngineError> {
    let Deployment {
        id,
        graph,
        sources,
        schema,
        tables,
        fingerprint: _,
        sources_read: _,
        sink,
    } = deployment;
    let contents = |object: ObjectId| -> Result<Option<ChangeBatch>, EngineError> {
        if let Some(rows) = source_contents.get(&object) {
            return Ok(Some(rows.clone()));
        }
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
    if sink.is_some() {
        coordinator
            .deploy_emitting(id, graph, sources, schema, &contents)
            .map(Some)
    } else {
        coordinator
            .deploy(id, graph, sources, schema, &contents)
            .map(|()| None)
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
