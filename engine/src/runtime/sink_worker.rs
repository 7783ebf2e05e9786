//! Each sink's calls run on a task of their own ([`SinkWorker`]), so a
//! slow or stuck target delays that sink only: the epoch loop hands it
//! work and goes on closing epochs; what the worker finished comes back
//! as [`SinkEvent`]s, which the loop takes in with its other inputs.
//!
//! - Per epoch the loop sends the sink's share ([`SinkOp::Write`]) and a
//!   pre-commit; after a seal, a commit. The worker runs them in order,
//!   tallies what it was handed against the sink's receipt at each
//!   pre-commit, and reports each pre-commit, each commit and its first
//!   error. After an error it runs nothing more: the loop reopens the sink
//!   as a new worker (a new `run`, so late events of the old one are told
//!   apart), or fails it.
//! - A seal records a sink's latest *completed* pre-commit. The epochs
//!   sent after it are sealed in the sink's outbox with the state, as for
//!   a paused sink ([`super::sink_pause`]), so a restore delivers them;
//!   the loop defers a due checkpoint (up to a barrier interval) while
//!   pre-commits are in flight, so a sink that keeps up needs no outbox.
//! - A sink may lag by at most [`IN_FLIGHT_ROWS`] row changes sent and not
//!   pre-committed; past that the loop waits for it (backpressure), so
//!   memory stays bounded and every epoch in flight can be replayed.
//! - Stopping a worker (a reopen, a DROP) lets the call it is in finish
//!   and skips the rest: a new writer never races an old one on one
//!   target. A call that has not finished after [`STOP_WAIT`] (a target
//!   cut off by the network, its TCP connection hanging) is abandoned, as
//!   a crash would abandon it, so that an `ALTER CONNECTION` pointing the
//!   sink elsewhere does not wait for it; the sink's reopen then aborts
//!   whatever that call staged, like a restart's.

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_common::{ChangeBatch, ObjectId};
use weir_connectors::{ConnectorError, Sink, Skips, Tally};

use super::sink_retry::MAX_WAITING_ROWS;
use super::sink_seal::SinkSeal;
use super::streams::{Streams, guarded};

/// How long stopping a worker waits for the call it is in.
pub const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Row changes a sink may have been sent and not yet pre-committed before
/// the loop waits for it: half of what a sink keeps to replay
/// ([`super::sink_retry::MAX_WAITING_ROWS`]).
pub const IN_FLIGHT_ROWS: usize = super::sink_retry::MAX_WAITING_ROWS / 2;

/// A pre-commit sent and not yet completed.
pub(super) struct InFlight {
    pub epoch: u64,
    /// The sink's `rows_out` when it was sent (its seal entry's `rows`).
    pub rows_out: u64,
    /// Row changes sent since the pre-commit before it.
    pub rows: usize,
}

/// Work for a sink, run in the order sent.
pub(super) enum SinkOp {
    Write { epoch: u64, changes: ChangeBatch },
    PreCommit { epoch: u64 },
    Commit { entry: SinkSeal },
}

/// What a worker finished.
pub enum SinkDone {
    PreCommitted {
        epoch: u64,
        descriptor: String,
    },
    Committed {
        entry: SinkSeal,
        /// The sink's skips as of this commit.
        skipped: Option<Skips>,
    },
    /// A call failed: the loop backs off or fails the sink.
    Failed(ConnectorError),
    /// The sink cannot be trusted (its receipt disagrees with what it was
    /// handed): failed for good.
    Broken(String),
}

/// One report of run `run` of sink `sink`'s worker.
pub struct SinkEvent {
    pub sink: ObjectId,
    pub run: u64,
    pub done: SinkDone,
}

/// The task running one opened sink's calls.
pub(super) struct SinkWorker {
    pub run: u64,
    ops: mpsc::UnboundedSender<SinkOp>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl SinkWorker {
    /// Starts running `sink`'s calls; its events go to `events`.
    pub fn start(
        id: ObjectId,
        run: u64,
        sink: Box<dyn Sink>,
        connector: String,
        events: mpsc::UnboundedSender<SinkEvent>,
    ) -> Self {
        let (ops, queue) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let task = tokio::spawn(work(
            Worker {
                id,
                run,
                sink,
                connector,
                events,
            },
            queue,
            stop.clone(),
        ));
        Self {
            run,
            ops,
            stop,
            task: Some(task),
        }
    }

    /// Queues `op`; dropped if the worker has stopped (after an error,
    /// which its event reports).
    pub fn send(&self, op: SinkOp) {
        let _ = self.ops.send(op);
    }

    /// Stops the worker: the call it is in finishes, the rest is skipped.
    /// Returns once it has, or after [`STOP_WAIT`], abandoning the call.
    pub async fn stop(&mut self) {
        self.stop_within(STOP_WAIT).await;
    }

    /// [`Self::stop`], waiting at most `wait` for the call in progress.
    pub async fn stop_within(&mut self, wait: std::time::Duration) {
        self.stop.cancel();
        let Some(mut task) = self.task.take() else {
            return;
        };
        if tokio::time::timeout(wait, &mut task).await.is_err() {
            task.abort();
            tracing::warn!(
                run = self.run,
                waited_ms = wait.as_millis() as u64,
                "a sink call did not finish when its worker was stopped; abandoned"
            );
        }
    }
}

impl Drop for SinkWorker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct Worker {
    id: ObjectId,
    run: u64,
    sink: Box<dyn Sink>,
    connector: String,
    events: mpsc::UnboundedSender<SinkEvent>,
}

async fn work(
    mut worker: Worker,
    mut queue: mpsc::UnboundedReceiver<SinkOp>,
    stop: CancellationToken,
) {
    // What the sink was handed since its last pre-commit, for its receipt.
    let mut handed = Tally::default();
    loop {
        // Stopped while idle or between calls; never inside one.
        let op = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            op = queue.recv() => op,
        };
        let Some(op) = op else {
            return;
        };
        // Calls into the connector are guarded one by one; this catches a
        // panic anywhere else (its receipt, its skips), so the loop always
        // hears how a worker ended and never waits on a dead one.
        let ran = std::panic::AssertUnwindSafe(worker.run_op(op, &mut handed))
            .catch_unwind()
            .await;
        let done = match ran {
            Ok(Some(done)) => done,
            Ok(None) => continue,
            Err(panic) => {
                SinkDone::Broken(ConnectorError::panicked(&worker.connector, &*panic).to_string())
            }
        };
        let last = matches!(done, SinkDone::Failed(_) | SinkDone::Broken(_));
        let event = SinkEvent {
            sink: worker.id,
            run: worker.run,
            done,
        };
        if worker.events.send(event).is_err() || last {
            return;
        }
    }
}

impl Worker {
    /// Runs one op; what to report, if anything.
    async fn run_op(&mut self, op: SinkOp, handed: &mut Tally) -> Option<SinkDone> {
        let connector = self.connector.as_str();
        match op {
            SinkOp::Write { epoch, changes } => {
                if let Err(e) = handed.add_changes(&changes) {
                    return Some(SinkDone::Broken(format!("tallying its changes: {e}")));
                }
                guarded(connector, self.sink.write(epoch, &changes))
                    .await
                    .err()
                    .map(SinkDone::Failed)
            }
            SinkOp::PreCommit { epoch } => Some(
                match guarded(connector, self.sink.pre_commit(epoch)).await {
                    Ok(descriptor) => {
                        let (receipt, handed) = (self.sink.receipt(), handed.take());
                        if receipt == handed {
                            SinkDone::PreCommitted { epoch, descriptor }
                        } else {
                            SinkDone::Broken(format!(
                                "its receipt for epoch {epoch} does not match what it was \
                                 handed: it says it wrote {} row changes (checksum {:016x}), it \
                                 was handed {} (checksum {:016x}); a bug in the {connector} \
                                 connector, reported instead of delivering wrong rows",
                                receipt.rows, receipt.checksum, handed.rows, handed.checksum
                            ))
                        }
                    }
                    Err(e) => SinkDone::Failed(e),
                },
            ),
            SinkOp::Commit { entry } => Some(
                match guarded(connector, self.sink.commit(entry.epoch, &entry.descriptor)).await {
                    Ok(()) => SinkDone::Committed {
                        skipped: self.sink.skipped(),
                        entry,
                    },
                    Err(e) => SinkDone::Failed(e),
                },
            ),
        }
    }
}

impl Streams {
    /// Sends `out`, sink `id`'s share of `epoch`, to its worker, unless it
    /// is not writing.
    pub(super) fn write(&mut self, id: ObjectId, epoch: u64, out: &ChangeBatch) {
        let Some(slot) = self.sinks.get_mut(&id).filter(|s| s.writing()) else {
            return;
        };
        slot.unprecommitted_rows += out.num_rows();
        slot.pre_commit_due = true;
        slot.worker.send(SinkOp::Write {
            epoch,
            changes: out.clone(),
        });
        // Counted by weight: consolidation merges equal rows.
        self.status.write().sinks.entry(id).or_default().rows_out += out
            .weights()
            .values()
            .iter()
            .map(|w| w.unsigned_abs())
            .sum::<u64>();
    }

    /// Sends sink `id` a pre-commit of everything up to `epoch`, if it
    /// was handed anything (or opened) since its last one: otherwise its
    /// latest entry already describes `epoch` too.
    pub(super) fn pre_commit(&mut self, id: ObjectId, epoch: u64) {
        let Some(slot) = self
            .sinks
            .get_mut(&id)
            .filter(|s| s.writing() && s.pre_commit_due)
        else {
            return;
        };
        slot.pre_commit_due = false;
        let rows_out = {
            let mut status = self.status.write();
            let entry = status.sinks.entry(id).or_default();
            entry.handed_epoch = epoch;
            entry.rows_out
        };
        slot.in_flight.push_back(InFlight {
            epoch,
            rows_out,
            rows: std::mem::take(&mut slot.unprecommitted_rows),
        });
        slot.worker.send(SinkOp::PreCommit { epoch });
    }

    /// Takes in what a sink's worker finished. Reports of a run that was
    /// replaced since (a reopen), or of a failed sink, are dropped.
    pub fn sink_event(&mut self, event: SinkEvent) {
        let id = event.sink;
        let Some(slot) = self
            .sinks
            .get_mut(&id)
            .filter(|s| s.worker.run == event.run && !s.failed)
        else {
            return;
        };
        match event.done {
            SinkDone::PreCommitted { epoch, descriptor } => {
                // The worker runs pre-commits in the order sent.
                let rows = match slot.in_flight.pop_front() {
                    Some(sent) if sent.epoch == epoch => sent.rows_out,
                    other => {
                        let expected = other.map(|f| f.epoch);
                        return self.sink_failed(
                            id,
                            &format!(
                                "internal error: its worker pre-committed epoch {epoch} where \
                                 epoch {expected:?} was next"
                            ),
                        );
                    }
                };
                slot.prepared = Some(SinkSeal {
                    epoch,
                    descriptor,
                    rows,
                    behind: false,
                });
                {
                    let mut status = self.status.write();
                    let entry = status.sinks.entry(id).or_default();
                    entry.prepared_epoch = epoch;
                    // The first pre-commit of a reopened sink: it writes again.
                    if matches!(entry.status, "backing_off" | "resuming") {
                        entry.status = "running";
                        entry.error = None;
                        entry.next_retry_ms = None;
                    }
                }
                self.settle_paused(id);
            }
            SinkDone::Committed { entry, skipped } => self.committed(id, entry, skipped),
            SinkDone::Failed(error) => self.sink_error(id, error),
            SinkDone::Broken(error) => self.sink_failed(id, &error),
        }
    }

    /// After an epoch was sent to sink `id`: waits while it lags by more
    /// than [`IN_FLIGHT_ROWS`] (taking in every sink's reports meanwhile),
    /// then stops keeping for a retry what it pre-committed, if it keeps
    /// more than [`MAX_WAITING_ROWS`]: until a seal covers those epochs, a
    /// retry is impossible (an error fails it).
    pub(super) async fn make_room(&mut self, id: ObjectId) {
        loop {
            let Some(slot) = self.sinks.get(&id).filter(|s| s.writing()) else {
                return;
            };
            let lag: usize = slot.in_flight.iter().map(|f| f.rows).sum();
            if slot.in_flight.is_empty() || lag <= IN_FLIGHT_ROWS {
                break;
            }
            // Never `None`: the streams hold a sender.
            let Some(event) = self.sink_events.recv().await else {
                return;
            };
            self.sink_event(event);
        }
        let Some(slot) = self.sinks.get_mut(&id).filter(|s| s.writing()) else {
            return;
        };
        if slot.unsealed_rows <= MAX_WAITING_ROWS {
            return;
        }
        let done = slot
            .prepared
            .as_ref()
            .or(slot.sealed.as_ref())
            .map_or(0, |s| s.epoch);
        if !slot.unsealed.iter().any(|(e, _)| *e <= done) {
            return;
        }
        slot.unsealed.retain(|(e, _)| *e > done);
        slot.unsealed_rows = slot.unsealed.iter().map(|(_, c)| c.num_rows()).sum();
        slot.unsealed_dropped_through = Some(slot.unsealed_dropped_through.unwrap_or(0).max(done));
    }

    /// Whether a sink has a completed pre-commit no seal has taken yet.
    pub fn pre_commits_unsealed(&self) -> bool {
        self.sinks
            .values()
            .any(|s| !s.failed && s.prepared.is_some())
    }

    /// Whether a writing sink has pre-commits in flight.
    pub fn pre_commits_in_flight(&self) -> bool {
        self.sinks
            .values()
            .any(|s| s.writing() && !s.in_flight.is_empty())
    }

    /// Waits until every writing sink has finished the pre-commits sent to
    /// it, taking in their reports.
    #[cfg(test)]
    pub(super) async fn settle(&mut self) {
        while self
            .sinks
            .values()
            .any(|s| s.writing() && !s.in_flight.is_empty())
        {
            let Some(event) = self.sink_events.recv().await else {
                return;
            };
            self.sink_event(event);
        }
    }
}
