//! A sink whose target is unreachable backs off and retries instead of
//! failing for good, without losing or repeating a change.
//!
//! Each sink keeps the changes of every epoch after the entry of the
//! latest durable seal ([`SinkSlot::unsealed`]); a seal that lands drops
//! what it covers. A retryable error ([`ConnectorError::is_retryable`]:
//! a refused connection, a dropped session) makes the sink `backing_off`:
//! it gets no calls, its seal entry stays the last one it pre-committed,
//! and its epochs keep collecting. At the first epoch close after the
//! delay (the barrier timer closes one for it when nothing else does),
//! once its old worker has stopped, it is opened again from the durable
//! entry (which re-commits that entry and drops whatever it staged after
//! it, as after a restart) as a new worker, and handed every collected
//! epoch in order, then goes on as before.
//! A sink that skips refused epochs (`on_error = 'skip'`) does so itself
//! (the connector knows its unit and where to commit an offset alone);
//! under `retry_and_skip(n, ..)` a refused epoch is retried like an
//! unreachable target, and the sink opened after the n-th failure in a
//! row ([`weir_connectors::SinkOpen::failures`]) skips it.
//! Any other error fails the sink for good, as does a backlog beyond
//! [`MAX_WAITING_ROWS`] (memory is not unbounded). A healthy sink keeps at
//! most as many: past that (a fast stream between two seals) it drops
//! the epochs it has pre-committed (never those in flight, which a seal
//! may have to keep in its outbox) and cannot retry until a seal covers
//! the dropped epochs; an error meanwhile fails it.
//!
//! How long to wait, and when to give up, is the sink's
//! [`Recovery`] (its `on_error` and `restart_*` options); the count of
//! failures resets after a successful commit. [`RetryState`] also counts
//! a source reader's retries (its `restart_*` options).
//!
//! [`SinkSlot::unsealed`]: super::streams

use std::time::{Duration, Instant};

use weir_common::{ChangeBatch, ObjectId};
use weir_connectors::ConnectorError;
use weir_connectors::recovery::{OnError, Recovery};

use super::streams::Streams;

/// Row changes a backing-off sink may wait with before it fails.
pub const MAX_WAITING_ROWS: usize = 1_000_000;
/// A backing-off sink's next try.
#[derive(Debug, Clone, Copy)]
pub(super) struct Backoff {
    pub next_at: Instant,
}

/// Failures and retries of one sink, against its [`Recovery`] options.
#[derive(Debug, Clone)]
pub(super) struct RetryState {
    pub recovery: Recovery,
    /// Failures since the last successful commit.
    pub failures: u32,
    /// When each retry was decided, for `restart_max` within the window.
    pub retried_at: std::collections::VecDeque<Instant>,
}

impl RetryState {
    pub fn new(recovery: Recovery) -> Self {
        Self {
            recovery,
            failures: 0,
            retried_at: Default::default(),
        }
    }

    /// Counts a failure; the delay before retrying, or `None` to fail.
    pub fn next_delay(&mut self) -> Option<Duration> {
        self.failures += 1;
        let now = Instant::now();
        self.retried_at.push_back(now);
        if let Some(window) = self.recovery.restart_window {
            while self
                .retried_at
                .front()
                .is_some_and(|at| now.duration_since(*at) > window)
            {
                self.retried_at.pop_front();
            }
        }
        let recent = self.retried_at.len() as u32;
        self.recovery.delay(self.failures, recent, unit_random())
    }
}

/// A number in [0, 1): jitter only needs to differ between processes and
/// calls, which std's randomly keyed hasher over the clock gives.
fn unit_random() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl Streams {
    /// A sink's call failed: back off if retrying may help, else fail it.
    pub(super) fn sink_error(&mut self, id: ObjectId, error: ConnectorError) {
        let Some(slot) = self.sinks.get_mut(&id) else {
            return;
        };
        // Its worker has stopped: nothing it was sent completes.
        slot.in_flight.clear();
        slot.unprecommitted_rows = 0;
        // A refused epoch is retried only by a strategy that retries it
        // before skipping it; the sink reopened after the last retry skips.
        let retried = error.is_retryable()
            || error.is_refused_data()
                && matches!(slot.retry.recovery.on_error, OnError::RetryAndSkip { .. });
        if !retried {
            return self.sink_failed(id, &error.to_string());
        }
        if slot.unsealed_dropped_through.is_some() {
            return self.sink_failed(
                id,
                &format!(
                    "{error}; it cannot be retried: more than {MAX_WAITING_ROWS} changes were in flight since the last checkpoint, more than Weir keeps to replay"
                ),
            );
        }
        let Some(delay) = slot.retry.next_delay() else {
            let retries = slot.retry.failures - 1;
            return self.sink_failed(
                id,
                &format!("gave up after {retries} retries (see on_error and restart_max): {error}"),
            );
        };
        let failures = slot.retry.failures;
        slot.backoff = Some(Backoff {
            next_at: Instant::now() + delay,
        });
        tracing::warn!(sink = %id, %error, failures, retry_in_ms = delay.as_millis() as u64, "sink backing off");
        let mut status = self.status.write();
        let entry = status.sinks.entry(id).or_default();
        entry.status = "backing_off";
        entry.error = Some(error.to_string());
        entry.retries = u64::from(failures);
        entry.next_retry_ms = Some(
            (std::time::SystemTime::now() + delay)
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as i64,
        );
    }

    /// Keeps `changes` of `epoch` for sink `id` until a seal covers them;
    /// fails the sink when too many wait while it does not write. (A
    /// writing sink that keeps too many stops keeping what it
    /// pre-committed: [`Self::make_room`].)
    pub(super) fn collect(&mut self, id: ObjectId, epoch: u64, changes: &ChangeBatch) {
        let Some(slot) = self.sinks.get_mut(&id).filter(|s| !s.failed) else {
            return;
        };
        slot.unsealed_rows += changes.num_rows();
        slot.unsealed.push((epoch, changes.clone()));
        if slot.unsealed_rows > MAX_WAITING_ROWS && !slot.writing() {
            let since = slot.durable.as_ref().map_or(0, |d| d.epoch);
            self.sink_failed(
                id,
                &format!(
                    "more than {MAX_WAITING_ROWS} changes since epoch {since} waited for the sink while it could not write; they are no longer kept (drop and create the sink; a destination: ALTER DESTINATION ... REPAIR)"
                ),
            );
        }
    }

    /// Whether sink `id` is backing off and its delay has passed (and it
    /// keeps every epoch since its durable entry, which a reopen needs).
    pub(super) fn retry_due(&self, id: ObjectId) -> bool {
        self.sinks
            .get(&id)
            .filter(|s| !s.failed && !s.paused && s.unsealed_dropped_through.is_none())
            .and_then(|s| s.backoff)
            .is_some_and(|b| b.next_at <= Instant::now())
    }

    /// Whether some sink's retry is due.
    pub(super) fn any_retry_due(&self) -> bool {
        self.sinks.keys().any(|&id| self.retry_due(id))
    }

    /// Opens sink `id` again from its durable seal entry (once its old
    /// worker has stopped) and hands it every epoch collected since; its
    /// status says `running` again once the first pre-commit after that
    /// completes. Whether it was reopened.
    pub(super) async fn retry(&mut self, id: ObjectId) -> bool {
        let Some(slot) = self.sinks.get_mut(&id) else {
            return false;
        };
        slot.worker.stop().await;
        let durable = slot.durable.clone();
        let spec = slot.spec.clone();
        let failures = slot.retry.failures;
        let sink =
            match self.connect_sink(&spec, durable.as_ref().filter(|d| !d.is_empty()), failures) {
                Ok(sink) => sink,
                Err(e) => {
                    self.sink_error(id, e);
                    return false;
                }
            };
        let worker = self.start_worker(id, sink, &spec.connector);
        let slot = self.sinks.get_mut(&id).expect("looked up above");
        slot.worker = worker;
        slot.prepared = None;
        slot.in_flight.clear();
        slot.unprecommitted_rows = 0;
        slot.pre_commit_due = true;
        slot.backoff = None;
        let epochs = slot.unsealed.clone();
        tracing::info!(sink = %id, failures, epochs = epochs.len(), "sink reopened");
        self.status.write().sinks.entry(id).or_default().rows_out =
            durable.as_ref().map_or(0, |d| d.rows);
        for (epoch, changes) in &epochs {
            self.write(id, *epoch, changes);
        }
        true
    }
}
