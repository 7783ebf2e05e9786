//! The runtime's task: takes commands in order, closes epochs, checkpoints.
//!
//! - Table changes arrive in LSN order from the table log's reader
//!   ([`Command::TableLog`], one commit per message), external sources'
//!   batches from theirs ([`Command::Source`]); both wait for room in the
//!   bounded channel, so a runtime that falls behind slows its inputs down
//!   instead of growing memory.
//! - A deployment backfills from the tables as of a commit; it waits until
//!   that commit is received, so the changes after it are exactly the ones
//!   that reach it.
//! - An epoch closes every barrier interval when rows are pending (or a
//!   source's position or watermark moved without rows), when
//!   pending changes pass [`EPOCH_ROW_BUDGET`] rows (bounded memory under a
//!   burst), and for a [`Command::Barrier`] once its target is received.
//! - Each epoch publishes an [`EpochView`]; a statement reads every
//!   projection from one view, so they agree on the epoch.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use weir_common::{ChangeBatch, ObjectId};
use weir_connectors::Offsets;

use super::checkpoints::SealOutcome;
use super::reader::TableLogCommit;
use super::streams::{ReaderId, SourceMessage, Streams};
use super::table_log;
use super::{
    BarrierTarget, Checkpointer, Command, Deployment, EPOCH_ROW_BUDGET, RuntimeObserver, Shared,
};
use crate::coordinator::wall_clock_micros;
use crate::{Coordinator, EngineError};

/// Where a deployment's outcome goes.
type DeployReply = oneshot::Sender<Result<(), EngineError>>;

/// Everything the task owns.
pub(super) struct Loop {
    pub commands: mpsc::Receiver<Command>,
    pub shared: Arc<Shared>,
    pub observer: Arc<dyn RuntimeObserver>,
    pub checkpointer: Checkpointer,
    pub coordinator: Coordinator,
    /// The LSN of the last commit received. Everything in the table log at
    /// open is in the tables deploys backfill from (or replayed by a
    /// restore), so it starts as received.
    pub received: u64,
    /// Seals for the table log's reader to acknowledge (compaction).
    pub table_log_sealed: mpsc::UnboundedSender<(u64, Offsets)>,
    /// The highest LSN the table log was told is sealed.
    pub table_log_acked: u64,
    pub streams: Streams,
    /// The fingerprint of every deployed projection, stored with its state.
    pub fingerprints: HashMap<ObjectId, String>,
    /// Barriers whose target is not received yet.
    pub waiting: Vec<(BarrierTarget, oneshot::Sender<()>)>,
    /// Deployments whose tables are as of a commit not received yet.
    pub deploys_waiting: Vec<(Box<Deployment>, DeployReply)>,
    /// The checkpoint being written, if one is.
    pub sealing: Option<tokio::task::JoinHandle<SealOutcome>>,
    /// Since when a due checkpoint has waited for sinks' pre-commits.
    pub checkpoint_deferred: Option<std::time::Instant>,
    /// Messages of sources that ran ahead of the sources read along with
    /// them ([`Streams::runs_ahead`]), in arrival order; a held batch
    /// keeps its permit, so its reader stops sending once all are held.
    pub held: VecDeque<(ReaderId, SourceMessage)>,
}

pub(super) async fn run(mut state: Loop) {
    // The timer's next barrier: a deadline, not a sleep per command, so a
    // steady stream of commits cannot keep postponing it.
    let mut tick = tokio::time::Instant::now();
    loop {
        let interval = state.interval();
        // A shorter interval set meanwhile takes effect now.
        tick = tick.min(tokio::time::Instant::now() + interval);
        let event = tokio::select! {
            command = state.commands.recv() => match command {
                Some(c) => Event::Command(c),
                None => return,
            },
            written = async { state.sealing.as_mut().expect("guarded").await },
                if state.sealing.is_some() => Event::Written(Box::new(written)),
            // Never `None`: the streams hold a sender.
            Some(done) = state.streams.sink_events.recv() => Event::Sink(done),
            _ = tokio::time::sleep_until(tick) => Event::Tick,
        };
        match event {
            Event::Command(command) => state.handle(Some(command)).await,
            Event::Tick => {
                tick = tokio::time::Instant::now() + interval;
                state.handle(None).await;
            }
            Event::Written(written) => {
                state.sealing = None;
                state.sealed(*written);
            }
            Event::Sink(done) => state.streams.sink_event(done),
        }
        state.start_checkpoint();
        state.acknowledge_table_log();
    }
}

enum Event {
    Command(Command),
    Written(Box<Result<SealOutcome, tokio::task::JoinError>>),
    /// A sink's worker finished something.
    Sink(super::sink_worker::SinkEvent),
    Tick,
}

impl Loop {
    fn interval(&self) -> Duration {
        Duration::from_millis(self.shared.barrier_interval_ms.load(Ordering::Relaxed))
    }

    fn position(&self) -> BarrierTarget {
        BarrierTarget {
            table_lsn: self.received,
        }
    }

    async fn handle(&mut self, command: Option<Command>) {
        match command {
            None => {
                // A sink that backs off retries at an epoch close, so one
                // closes for it even when nothing is pending; and so does
                // a sink's pre-commit that completed after the seal of its
                // epoch was taken, for a seal to record it; and a source
                // position that moved without rows.
                // A watermark that moves on time alone (an idle split)
                // moves the offsets it is sealed with.
                self.streams.advance_watermarks(&mut self.coordinator);
                self.release_held();
                let pre_commit_unsealed = self.sealing.is_none()
                    && self.streams.pre_commits_unsealed()
                    && self.coordinator.view().epoch.0 <= self.checkpointer.last_sealed_epoch();
                // And a temporal filter whose rows appear or expire by now.
                let time_due = self
                    .coordinator
                    .next_due()
                    .is_some_and(|t| t <= wall_clock_micros());
                if self.coordinator.pending_rows() > 0
                    || time_due
                    || self.streams.any_retry_due()
                    || pre_commit_unsealed
                    || self.streams.offsets_moved()
                {
                    self.close().await;
                } else {
                    self.shared.covered.store(self.received, Ordering::Release);
                }
                // A grouped sink's last group commits when it is old
                // enough, whether or not another seal comes.
                self.streams.commit_waiting_groups();
            }
            Some(Command::TableLog(commit)) => self.commit_received(commit).await,
            Some(Command::Source(message)) => {
                // Behind its own held messages, or a batch of a source
                // ahead of the sources read with it: it waits (and so,
                // once its permits are all held, does its reader).
                let reader = message.reader();
                let batch = matches!(message, SourceMessage::Batch(..));
                if self.held.iter().any(|(r, _)| *r == reader)
                    || (batch && self.streams.runs_ahead(reader.source))
                {
                    self.held.push_back((reader, message));
                    return;
                }
                self.source_message(message);
                if self.coordinator.pending_rows() >= EPOCH_ROW_BUDGET {
                    self.close().await;
                }
            }
            Some(Command::OperatorState(reply)) => {
                let _ = reply.send(self.coordinator.operator_state());
            }
            Some(Command::Barrier(target, reply)) => {
                self.waiting.push((target, reply));
                if target <= self.position() {
                    self.close().await;
                }
            }
            Some(Command::Restore(restore, reply)) => {
                let opened: Vec<_> = restore
                    .deployments
                    .iter()
                    .map(|d| {
                        let relations = d.sources.iter().map(|s| s.object).collect();
                        (d.id, d.sources_read.clone(), relations, d.sink.clone())
                    })
                    .collect();
                let table_watermarks: Vec<_> = restore
                    .deployments
                    .iter()
                    .flat_map(|d| d.table_watermarks.iter().cloned())
                    .collect();
                let result = super::restore::restore(
                    &mut self.coordinator,
                    self.checkpointer.backend(),
                    *restore,
                    &mut self.fingerprints,
                    self.observer.as_ref(),
                )
                .await;
                if let Ok(emitted) = &result {
                    self.streams.start_table_clocks(&table_watermarks);
                    let at = self.coordinator.view().epoch.0;
                    for (id, sources, relations, sink) in opened {
                        self.streams.start_readers(id, &sources, relations);
                        if let Some(sink) = sink {
                            let undelivered = self.coordinator.undelivered(id);
                            self.streams.open_sink(id, &sink, None, at, undelivered);
                        }
                    }
                    self.streams.epoch_closed(at, emitted.clone()).await;
                }
                self.close().await;
                let _ = reply.send(result.map(drop));
            }
            Some(Command::Deploy(deployment, reply)) => {
                if deployment.tables_at > self.received {
                    self.deploys_waiting.push((deployment, reply));
                } else {
                    self.deploy_now(deployment, reply).await;
                }
            }
            Some(Command::Drop(id)) => {
                self.coordinator.drop_projection(id);
                self.streams.dropped(id).await;
                self.fingerprints.remove(&id);
                *self.shared.view.write() = self.coordinator.view();
            }
            Some(Command::DropSource(id)) => self.streams.source_dropped(id),
            Some(Command::AwaitSeal(reply)) => {
                self.streams.await_seal(reply);
                // An epoch now, so the next seal covers what was received.
                self.close().await;
            }
            Some(Command::ReconfigureSink(id, spec, reply)) => {
                self.streams.reconfigure_sink(id, *spec);
                let _ = reply.send(());
            }
            Some(Command::PauseSink(id, paused, reply)) => {
                self.streams.pause_sink(id, paused);
                if !paused {
                    // Its retry is due: an epoch close hands it what it
                    // missed and pre-commits it.
                    self.close().await;
                }
                let _ = reply.send(());
            }
            Some(Command::RestartSource(source, reply)) => {
                self.streams.restart_source(*source);
                let _ = reply.send(());
            }
        }
    }

    /// Starts writing a checkpoint of the latest epoch when one is due and
    /// none is being written; epochs go on meanwhile. A due checkpoint
    /// waits up to a barrier interval for sinks' pre-commits in flight, so
    /// a sink that keeps up needs no outbox ([`super::sink_worker`]).
    fn start_checkpoint(&mut self) {
        if self.sealing.is_some() {
            return;
        }
        let covered = self.shared.covered.load(Ordering::Acquire);
        let interval = self.interval();
        if !self.checkpointer.due(&self.coordinator, interval) {
            return;
        }
        if self.streams.pre_commits_in_flight() {
            let since = *self
                .checkpoint_deferred
                .get_or_insert_with(std::time::Instant::now);
            if since.elapsed() < interval {
                return;
            }
        }
        self.checkpoint_deferred = None;
        let pending = self.checkpointer.prepare(
            &mut self.coordinator,
            covered,
            &self.fingerprints,
            interval,
            self.observer.as_ref(),
            &mut self.streams,
        );
        if let Some(pending) = pending {
            self.sealing = Some(tokio::spawn(pending.write()));
        }
    }

    /// A checkpoint was written (or failed): sinks commit and sources
    /// acknowledge what the seal holds.
    fn sealed(&mut self, written: Result<SealOutcome, tokio::task::JoinError>) {
        let outcome = match written {
            Ok(outcome) => outcome,
            Err(e) => {
                // The task panicked or was cancelled: nothing is known to be
                // sealed, and the checkpoint after is written in full.
                tracing::error!(error = %e, "the checkpoint task failed");
                self.checkpointer.abandon(self.observer.as_ref());
                return;
            }
        };
        if let Some(epoch) = self.checkpointer.finish(outcome, self.observer.as_ref()) {
            self.streams.sealed(epoch);
        }
        if let Some(reason) = self.checkpointer.fenced() {
            let _ = self.shared.fenced.set(reason.to_string());
        }
    }

    /// A commit from the table log's reader: its changes are pending in
    /// the current epoch, and barriers and deployments waiting for it go on.
    async fn commit_received(&mut self, commit: TableLogCommit) {
        for batch in commit.batches {
            match table_log::table_of(&batch.split) {
                Some(table) => {
                    self.streams.clock_read(table, &batch);
                    self.coordinator.push(table, batch.changes)
                }
                None => tracing::error!(split = %batch.split, "a table-log batch names no table"),
            }
        }
        self.received = commit.lsn;
        let position = self.position();
        if self.coordinator.pending_rows() >= EPOCH_ROW_BUDGET
            || self.waiting.iter().any(|(t, _)| *t <= position)
        {
            self.close().await;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deploys_waiting)
            .into_iter()
            .partition(|(d, _)| d.tables_at <= self.received);
        self.deploys_waiting = waiting;
        for (deployment, reply) in ready {
            self.deploy_now(deployment, reply).await;
        }
    }

    /// Deploys after closing the epoch of everything received before.
    async fn deploy_now(&mut self, deployment: Box<Deployment>, reply: DeployReply) {
        self.close().await;
        let id = deployment.id;
        let fingerprint = deployment.fingerprint.clone();
        let result = self.deploy(*deployment).await;
        if let Ok(Deployed::Running) = result {
            self.fingerprints.insert(id, fingerprint);
        }
        let result = result.map(drop);
        *self.shared.view.write() = self.coordinator.view();
        let _ = reply.send(result);
    }

    /// Tells the table log how far it may compact: up to an LSN whose
    /// projection state is sealed (any covered LSN when there are no
    /// projections), so the log kept is what a restore from the latest
    /// seal replays. Nothing before every projection is recovered.
    fn acknowledge_table_log(&mut self) {
        if !self.shared.recovered.load(Ordering::Acquire) || self.checkpointer.fenced().is_some() {
            return;
        }
        let sealed = if self.fingerprints.is_empty() {
            Some(self.shared.covered.load(Ordering::Acquire))
        } else {
            self.checkpointer.last_sealed_lsn()
        };
        if let Some(lsn) = sealed.filter(|lsn| *lsn > self.table_log_acked) {
            self.table_log_acked = lsn;
            let epoch = self.coordinator.view().epoch.0;
            let _ = self
                .table_log_sealed
                .send((epoch, table_log::sealed_at(lsn)));
        }
    }

    /// What a source's reader said, in the order it said it.
    fn source_message(&mut self, message: SourceMessage) {
        match message {
            SourceMessage::Batch(reader, batches, _permit) => {
                // All in this one call: a transaction's batches, one
                // per table it touched, land in one epoch.
                for batch in batches {
                    if let Some(to) = self.streams.received(reader, &batch) {
                        self.coordinator.push(to, batch.changes);
                    }
                }
            }
            SourceMessage::Ended(id) => {
                if self.streams.is_current(id) {
                    self.streams.clocks_finished(id.source);
                }
                self.streams.set_source_status(id, "completed", None)
            }
            SourceMessage::Failed(id, e) => {
                tracing::error!(source = %id.source, error = %e, "source failed");
                self.streams.set_source_status(id, "failed", Some(e))
            }
            SourceMessage::Retrying(id, e) => {
                self.streams.set_source_status(id, "retrying", Some(e))
            }
            SourceMessage::Gap(id, e) => self.streams.set_source_status(id, "gap", Some(e)),
            SourceMessage::SplitFailed(id, split, gap, e) => {
                self.streams.split_failed(id, &split, gap, e)
            }
        }
    }

    /// Takes the held messages of every source no longer ahead, in order.
    fn release_held(&mut self) {
        let mut still: Vec<ReaderId> = Vec::new();
        let mut waiting = VecDeque::new();
        while let Some((reader, message)) = self.held.pop_front() {
            let ahead = matches!(message, SourceMessage::Batch(..))
                && self.streams.runs_ahead(reader.source);
            if still.contains(&reader) || ahead {
                still.push(reader);
                waiting.push_back((reader, message));
                continue;
            }
            self.source_message(message);
        }
        self.held = waiting;
    }

    /// Closes an epoch, hands each sink its share and pre-commits it, and
    /// answers the barriers the epoch covers.
    async fn close(&mut self) {
        self.streams.advance_watermarks(&mut self.coordinator);
        self.coordinator.set_time(wall_clock_micros());
        let emitted = close_epoch(
            &mut self.coordinator,
            &self.shared,
            self.received,
            self.observer.as_ref(),
        );
        let epoch = self.coordinator.view().epoch.0;
        self.streams.epoch_closed(epoch, emitted).await;
        let position = self.position();
        let (covered, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(target, _)| *target <= position);
        self.waiting = waiting;
        for (_, reply) in covered {
            let _ = reply.send(());
        }
    }

    /// Deploys a projection or sink (with nothing pending), backfilled from
    /// its tables and from its sources up to what was received; starts
    /// reading its sources and opens its sink.
    async fn deploy(&mut self, deployment: Deployment) -> Result<Deployed, EngineError> {
        let id = deployment.id;
        self.coordinator.set_time(wall_clock_micros());
        if deployment.rebuilt
            && let Some(reason) = self.cannot_rebuild(&deployment)
        {
            tracing::error!(object = %id, %reason, "deployed as failed");
            match &deployment.sink {
                Some(_) => self.streams.sink_failed(id, &reason),
                None => self
                    .coordinator
                    .deploy_failed(id, deployment.schema, reason)?,
            }
            return Ok(Deployed::Failed);
        }
        let sources = self
            .streams
            .backfills(&deployment.sources_read)
            .await
            .map_err(|e| invariant(format!("backfilling from a source: {e}")))?;
        let sources_read = deployment.sources_read.clone();
        self.streams
            .start_table_clocks(&deployment.table_watermarks);
        let relations = deployment.sources.iter().map(|s| s.object).collect();
        let sink = deployment.sink.clone();
        let coordinator = &mut self.coordinator;
        let deployed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            deploy(coordinator, deployment, sources)
        }))
        .unwrap_or_else(|panic| {
            Err(invariant(format!(
                "deploying panicked: {}",
                panic_message(&panic)
            )))
        })?;
        self.streams.start_readers(id, &sources_read, relations);
        if let Some(sink) = sink {
            let epoch = self.coordinator.view().epoch.0;
            self.streams
                .open_sink(id, &sink, deployed, epoch, Vec::new());
            // The state checkpointed from now on includes the backfill, so
            // the descriptor sealed with it must too (or, until that
            // pre-commit completes, the outbox holds it). A restore's
            // sinks pre-commit with the epoch close that follows it.
            self.streams.pre_commit(id, epoch);
        }
        Ok(Deployed::Running)
    }

    /// Why a rebuilt deployment cannot be built from its inputs, if it
    /// cannot: a source it reads cannot replay what was read before, or a
    /// projection it reads failed.
    fn cannot_rebuild(&self, deployment: &Deployment) -> Option<String> {
        let view = self.coordinator.view();
        let failed_input = deployment.sources.iter().find_map(|s| {
            let failure = view.projections.get(&s.object)?.failure.as_ref()?;
            Some(format!("a projection it reads failed: {failure}"))
        });
        let relations = deployment.sources.iter().map(|s| s.object).collect();
        failed_input.or_else(|| {
            self.streams
                .cannot_replay(&deployment.sources_read, &relations)
        })
    }
}

/// What became of a deployment.
enum Deployed {
    Running,
    /// Deployed as failed; nothing of it runs.
    Failed,
}

fn invariant(message: String) -> EngineError {
    EngineError::Invariant {
        operator: "coordinator",
        message,
    }
}

/// Closes the current epoch; returns what emitting deployments (sinks)
/// produced in it.
fn close_epoch(
    coordinator: &mut Coordinator,
    shared: &Shared,
    received: u64,
    observer: &dyn RuntimeObserver,
) -> Vec<(ObjectId, ChangeBatch)> {
    // An operator bug must not take the process (or the commit path) down.
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| coordinator.run_epoch()))
            .unwrap_or_else(|panic| {
                let reason = panic_message(&panic);
                tracing::error!(%reason, "an epoch panicked; every projection is marked failed");
                coordinator.fail_all(&format!("internal error in an operator: {reason}"));
                Err(invariant(reason))
            });
    let mut emitted = Vec::new();
    match outcome {
        Ok(mut report) => {
            for (id, error) in &report.failed {
                tracing::error!(projection = %id, epoch = report.epoch.0, %error, "projection failed");
            }
            emitted = std::mem::take(&mut report.emitted);
            observer.epoch(&report);
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
        tables_at: _,
        sources_read: _,
        sink,
        rebuilt: _,
        table_watermarks: _,
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
        Ok(Some(crate::rows::concat_changes(&schema, &parts)?))
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
    weir_common::panic_message(&**panic).to_string()
}
