//! The epoch runtime: one task owns the [`Coordinator`], feeds it every
//! input in order, closes epochs, checkpoints and seals them, and restores
//! state it is handed. It runs graphs it is given; it never plans.
//!
//! - [`Runtime`]: the handle the server holds (deploy, restore, drop,
//!   barriers, table changes, status).
//! - `epoch_loop`: the task. Its inputs are sources, each read by one
//!   reader task (`reader`): the table log (`table_log`, a [`Source`] whose
//!   splits are the tables and whose offset is the LSN) and external
//!   sources ([`streams`], positioned by per-split offsets). An epoch closes every
//!   barrier interval, when pending changes pass [`EPOCH_ROW_BUDGET`] rows,
//!   and on demand ([`Runtime::barrier`]): a barrier names the position it
//!   must cover ([`BarrierTarget`]), and is answered by the first epoch that
//!   covers it, whatever path the rows took to get there.
//! - [`streams`]: one shared reader per source, one writer per sink, and
//!   the offsets and descriptors every seal records; `source_tables`: a
//!   source that covers several upstream tables feeds each table's
//!   relation from the table's split; `sink_retry`: a sink whose target
//!   is unreachable backs off and catches up; `sink_commit`: when a sink
//!   commits (each seal, or grouped); `sink_worker`: each sink's calls
//!   run on a task of their own, off the loop.
//! - [`checkpoints`]: writes each completed epoch as per-vnode partials,
//!   then its seal (with the table-log LSN, source offsets, sink
//!   descriptors and state fingerprints).
//! - `compactor`: merges vnode chains that grew long, from the store, in
//!   the background, for a later seal to put in place.
//! - `restore`: applies a sealed epoch's chains to freshly deployed graphs
//!   and replays the table log after it.
//!
//! What the runtime needs from its host is behind two small traits:
//! [`RuntimeObserver`] (metrics) and [`TableLogCompaction`] (what the table
//! log does once a seal covers a position: its source's `on_sealed`).
//!
//! [`Source`]: weir_connectors::Source

pub mod checkpoints;
mod compactor;
mod epoch_loop;
mod reader;
mod restore;
mod seal_waiters;
mod sink_commit;
mod sink_open;
mod sink_pause;
mod sink_retry;
mod sink_seal;
mod sink_worker;
mod source_clocks;
mod source_tables;
pub mod streams;
mod table_log;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot};
use weir_common::{ChangeBatch, ObjectId};

use crate::coordinator::EpochReport;
use crate::{Coordinator, EngineError, EpochView, Graph, SourceBinding, TableState};

pub use checkpoints::{CheckpointLog, Checkpointer, ObjectChain};
pub use restore::ChainPrefetch;
pub use streams::{SealedStreams, SinkToOpen, SourceToRead, StreamStatus, TableToRead};

/// Pending rows after which an epoch closes without waiting for the timer.
pub const EPOCH_ROW_BUDGET: usize = 65_536;
/// Commands in flight before committers wait.
const CHANNEL_CAPACITY: usize = 256;

/// What the runtime reports as it goes; the host turns it into metrics.
/// Called from the runtime's task: implementations must not block.
pub trait RuntimeObserver: Send + Sync {
    /// An epoch was stepped (restored replays included).
    fn epoch(&self, report: &EpochReport);
    /// A checkpoint was written and sealed: how long it took, partial bytes.
    fn checkpoint(&self, took: Duration, bytes: u64);
    /// A checkpoint failed (the next one is written in full).
    fn checkpoint_failed(&self);
}

/// What the table log does once a seal covers a position: compaction. The
/// runtime only asks at positions whose every projection is sealed, so the
/// log kept is what a restore from the latest seal replays.
pub trait TableLogCompaction: Send {
    /// Whether compacting up to `lsn` is worth it now.
    fn due(&self, lsn: u64) -> bool;
    /// Compacts the log up to `lsn`, with `tables` the tables as of `lsn`.
    /// Must return promptly (do the work elsewhere).
    fn compact(&self, lsn: u64, tables: Tables);
}

/// A projection or sink ready to deploy: its graph, bound to catalog objects.
pub struct Deployment {
    pub id: ObjectId,
    pub graph: Graph,
    pub sources: Vec<SourceBinding>,
    pub schema: SchemaRef,
    /// [`crate::state_fingerprint`] of the graph: stored with its
    /// checkpointed state, which a restore only uses for the same graph.
    pub fingerprint: String,
    /// Table contents to backfill from, in the columns projections read,
    /// as of the commit that created the projection.
    pub tables: HashMap<ObjectId, TableContents>,
    /// The LSN `tables` are as of: the deployment waits until the runtime
    /// has received that commit, and gets every change after it.
    pub tables_at: u64,
    /// The sources the graph reads.
    pub sources_read: Vec<SourceToRead>,
    /// Set for a sink: its graph's output goes to this connector each
    /// epoch instead of being kept as a result.
    pub sink: Option<SinkToOpen>,
    /// Set when a start rebuilds the deployment because its state could
    /// not be restored: it must see its whole input again, so over a
    /// source that cannot replay it is deployed failed (never built from
    /// a partial input), as it is when a projection it reads failed.
    pub rebuilt: bool,
    /// The tables it reads that declare `WATERMARK FOR` (append-only
    /// tables): their watermarks are generated from the rows committed.
    pub table_watermarks: Vec<TableWatermark>,
}

/// How the watermark of an append-only table is generated, and its
/// columns (the user's, as projections read them).
#[derive(Debug, Clone)]
pub struct TableWatermark {
    pub table: ObjectId,
    pub spec: crate::watermark::WatermarkSpec,
    pub schema: SchemaRef,
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
    /// The chains of `epoch`, if the host started reading them early; read
    /// now otherwise (and when it is of another epoch).
    pub prefetched: Option<ChainPrefetch>,
}

/// Every table's state, as of some table-log position.
pub type Tables = Arc<HashMap<ObjectId, TableState>>;

/// The input positions a barrier's epoch must include. Tables are the one
/// input sessions write to, so the table log's LSN is what read-your-writes
/// and FLUSH name; an epoch always includes every external-source batch
/// received before it closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct BarrierTarget {
    /// The epoch must include every commit up to this table-log LSN.
    pub table_lsn: u64,
}

pub(crate) enum Command {
    /// A commit, from the table log's reader.
    TableLog(reader::TableLogCommit),
    /// From a source's reader task.
    Source(streams::SourceMessage),
    DropSource(ObjectId),
    RestartSource(Box<SourceToRead>, oneshot::Sender<()>),
    /// Answered once a seal taken after it lands (covering everything
    /// received before it).
    AwaitSeal(oneshot::Sender<()>),
    /// A sink's options changed (a connection or secret it uses).
    ReconfigureSink(ObjectId, Box<SinkToOpen>, oneshot::Sender<()>),
    /// `ALTER SINK ... PAUSE` (true) or `RESUME` (false).
    PauseSink(ObjectId, bool, oneshot::Sender<()>),
    Deploy(Box<Deployment>, oneshot::Sender<Result<(), EngineError>>),
    Restore(Box<Restore>, oneshot::Sender<Result<(), EngineError>>),
    Drop(ObjectId),
    Barrier(BarrierTarget, oneshot::Sender<()>),
    /// Every projection's operator state sizes ([`Runtime::operator_state`]).
    OperatorState(oneshot::Sender<Result<OperatorStates, EngineError>>),
}

/// Per projection and node, the live state ([`crate::graph::NodeState`]).
pub type OperatorStates = Vec<(ObjectId, crate::graph::NodeState)>;

/// How to start the runtime.
pub struct RuntimeConfig {
    pub barrier_interval: Duration,
    pub observer: Arc<dyn RuntimeObserver>,
    /// Where epochs are checkpointed.
    pub state: Arc<weir_storage::ObjectStateBackend>,
    /// The latest sealed epoch in `state`: new epochs are numbered after it.
    pub sealed_epoch: u64,
    /// The table log's end at open: every commit up to it is in `tables`.
    pub last_lsn: u64,
    /// The identity of the table log, recorded in every seal.
    pub table_log_id: String,
    pub tables: Tables,
    pub compaction: Box<dyn TableLogCompaction>,
    /// Source offsets and sink descriptors of the latest seal.
    pub sealed_streams: SealedStreams,
}

/// The handle the host uses.
pub struct Runtime {
    commands: mpsc::Sender<Command>,
    /// The table log's inbox: commits, in LSN order.
    table_log: mpsc::Sender<table_log::Commit>,
    shared: Arc<Shared>,
    checkpoint_log: Arc<parking_lot::Mutex<CheckpointLog>>,
}

pub(crate) struct Shared {
    view: RwLock<Arc<EpochView>>,
    /// The highest table-log LSN whose changes the view includes.
    covered: AtomicU64,
    barrier_interval_ms: AtomicU64,
    /// Set when the checkpointer finds the state claimed by another process.
    fenced: std::sync::OnceLock<String>,
    /// Set once every projection is restored or rebuilt after the start:
    /// until then the log after the latest seal is what a restore replays.
    recovered: AtomicBool,
    /// Every source's and sink's state, for the system tables.
    streams: Arc<RwLock<StreamStatus>>,
}

impl Runtime {
    /// Starts the runtime's task on `handle`.
    pub fn start(handle: &tokio::runtime::Handle, config: RuntimeConfig) -> Self {
        let (commands, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            view: RwLock::new(Arc::new(EpochView::default())),
            covered: AtomicU64::new(config.last_lsn),
            barrier_interval_ms: AtomicU64::new(config.barrier_interval.as_millis().max(1) as u64),
            fenced: std::sync::OnceLock::new(),
            recovered: AtomicBool::new(false),
            streams: Arc::default(),
        });
        let streams = streams::Streams::new(
            commands.downgrade(),
            shared.streams.clone(),
            config.sealed_streams,
            config.state.generation(),
        );
        let (table_log, inbox) = mpsc::channel(CHANNEL_CAPACITY);
        let (table_log_sealed, sealed) = mpsc::unbounded_channel();
        let log_source = table_log::TableLogSource::open(
            inbox,
            config.last_lsn,
            config.tables,
            config.compaction,
        );
        let log_reader = reader::ReaderTask {
            name: "table log".into(),
            connector: "table log".into(),
            route: reader::Route::TableLog,
            commands: commands.downgrade(),
            stop: tokio_util::sync::CancellationToken::new(),
            sealed,
            retry: sink_retry::RetryState::new(Default::default()),
        };
        handle.spawn(reader::read(log_reader, Ok(Box::new(log_source))));
        let checkpoint_log = Arc::default();
        let checkpointer = Checkpointer::new(
            config.state,
            config.table_log_id,
            Arc::clone(&checkpoint_log),
        );
        let mut coordinator = Coordinator::new();
        coordinator.resume_after(weir_common::Epoch(config.sealed_epoch));
        handle.spawn(epoch_loop::run(epoch_loop::Loop {
            commands: receiver,
            shared: shared.clone(),
            observer: config.observer,
            checkpointer,
            coordinator,
            received: config.last_lsn,
            table_log_sealed,
            table_log_acked: 0,
            streams,
            fingerprints: HashMap::new(),
            waiting: Vec::new(),
            deploys_waiting: Vec::new(),
            sealing: None,
            checkpoint_deferred: None,
            held: Default::default(),
        }));
        Self {
            commands,
            table_log,
            shared,
            checkpoint_log,
        }
    }

    /// What this process's checkpoints did.
    pub fn checkpoint_log(&self) -> parking_lot::MutexGuard<'_, CheckpointLog> {
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

    /// The highest table-log LSN the latest completed epoch includes.
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
    /// table log's source. Calls must come in LSN order; a call waits while
    /// the runtime is behind.
    pub async fn changes(&self, lsn: u64, changes: Vec<(ObjectId, ChangeBatch)>, tables: Tables) {
        let commit = table_log::Commit {
            lsn,
            changes,
            tables,
        };
        if self.table_log.send(commit).await.is_err() {
            tracing::error!("the table log's reader has stopped");
        }
    }

    /// Deploys a projection or sink after closing the epoch of everything
    /// received before; returns once its backfilled result is visible.
    pub async fn deploy(&self, deployment: Deployment) -> Result<(), EngineError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::Deploy(Box::new(deployment), reply))
            .await;
        done.await.map_err(|_| EngineError::Stopped)?
    }

    /// Restores projections from a checkpoint (see [`Restore`]). Send it
    /// before any commit's changes. On an error nothing of it stays
    /// deployed: the caller rebuilds those projections from their inputs.
    pub async fn restore(&self, restore: Restore) -> Result<(), EngineError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::Restore(Box::new(restore), reply)).await;
        done.await.map_err(|_| EngineError::Stopped)?
    }

    /// Stops a projection or a sink.
    pub async fn drop_projection(&self, id: ObjectId) {
        self.send(Command::Drop(id)).await;
    }

    /// Forgets a dropped source (nothing reads it any more).
    pub async fn drop_source(&self, id: ObjectId) {
        self.send(Command::DropSource(id)).await;
    }

    /// Starts a source's reader again with `source`'s options (after a
    /// gap was accepted, or paused or resumed); nothing happens if nothing
    /// reads it. Returns once the runtime has done it, so the source's
    /// status says so.
    pub async fn restart_source(&self, source: SourceToRead) {
        let (reply, done) = oneshot::channel();
        self.send(Command::RestartSource(Box::new(source), reply))
            .await;
        let _ = done.await;
    }

    /// Returns once a seal covering everything the sources delivered
    /// before this call has landed (an epoch is closed for it).
    pub async fn await_seal(&self) -> Result<(), EngineError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::AwaitSeal(reply)).await;
        done.await.map_err(|_| EngineError::Stopped)
    }

    /// Sink deployment `id` writes with `spec`'s options from now on (a
    /// connection or secret it uses changed): a writing sink reopens with
    /// them at the next epoch close, from its last sealed epoch and handed
    /// every epoch since (as a retry is); a paused or backing-off one at
    /// its next reopen.
    pub async fn reconfigure_sink(&self, id: ObjectId, spec: SinkToOpen) {
        let (reply, done) = oneshot::channel();
        self.send(Command::ReconfigureSink(id, Box::new(spec), reply))
            .await;
        let _ = done.await;
    }

    /// Pauses (`paused`) or resumes a sink deployment: a paused sink
    /// writes nothing and keeps what it misses, across restarts too, and
    /// a resumed one delivers that first. Returns once the runtime has
    /// done it (a resumed sink has been handed what it missed).
    pub async fn pause_sink(&self, id: ObjectId, paused: bool) {
        let (reply, done) = oneshot::channel();
        self.send(Command::PauseSink(id, paused, reply)).await;
        let _ = done.await;
    }

    /// Every source's and sink's state.
    pub fn stream_status(&self) -> parking_lot::RwLockReadGuard<'_, StreamStatus> {
        self.shared.streams.read()
    }

    /// Returns once an epoch that includes `target` is visible. An epoch
    /// is closed for it as soon as the runtime has received `target`; a
    /// target not yet received waits for it (it must be one that will be
    /// sent, e.g. an acknowledged commit's LSN).
    pub async fn barrier(&self, target: BarrierTarget) -> Result<(), EngineError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::Barrier(target, reply)).await;
        done.await.map_err(|_| EngineError::Stopped)
    }

    /// The live state of every projection's operators, node by node.
    /// Walks all state on the runtime's task (which waits meanwhile): a
    /// diagnostic for `weir_catalog.operator_state`, not a metric.
    pub async fn operator_state(&self) -> Result<OperatorStates, EngineError> {
        let (reply, done) = oneshot::channel();
        self.send(Command::OperatorState(reply)).await;
        done.await.map_err(|_| EngineError::Stopped)?
    }

    async fn send(&self, command: Command) {
        if self.commands.send(command).await.is_err() {
            tracing::error!("the streaming runtime's task has stopped");
        }
    }
}
