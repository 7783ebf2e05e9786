//! Sinks that do not write for a while, paused (`ALTER SINK ... PAUSE`)
//! or backing off, and what keeps their undelivered changes across a
//! restart.
//!
//! Such a sink's graph goes on with every epoch while the sink stays at
//! its last pre-committed epoch, collecting the epochs after it
//! ([`SinkSlot::unsealed`]). Each checkpoint keeps those epochs in the
//! sink's outbox ([`weir_engine::outbox`], part of the sealed state), so
//! a restore from that seal reopens the sink at its entry and delivers
//! them, then what comes after: a pulled plug while a target is down, or
//! while a sink is paused, loses nothing. A writing sink keeps there only
//! the epochs whose pre-commits were still running at the seal
//! ([`super::sink_worker`]); what it pre-committed is in its target.
//!
//! PAUSE stops writes at once; what the sink had pre-committed commits
//! with the next seal (status `pausing` until then, `paused` after).
//! RESUME reopens it from its durable entry and hands it every epoch
//! collected since, as a retry does ([`super::sink_retry`]).
//!
//! [`SinkSlot::unsealed`]: super::streams::SinkSlot
//! [`weir_engine::outbox`]: crate::outbox

use std::collections::BTreeMap;
use std::time::Instant;

use weir_common::{ChangeBatch, ObjectId};

use super::sink_retry::Backoff;
use super::streams::{SinkSlot, Streams};

impl SinkSlot {
    /// Whether it gets writes now: not failed, paused or backing off.
    pub(super) fn writing(&self) -> bool {
        !self.failed && !self.paused && self.backoff.is_none()
    }

    /// The epochs to keep in its outbox at a seal: everything collected
    /// after the entry the seal will hold (its latest completed
    /// pre-commit), unless it failed (no restore can help that). Nothing
    /// for a writing sink whose pre-commits are all done. Epochs collected
    /// twice (a restore's backlog and its replay) are one.
    pub(super) fn undelivered(&self) -> Vec<(u64, ChangeBatch)> {
        if self.failed || self.writing() && self.in_flight.is_empty() {
            return Vec::new();
        }
        let after = self
            .prepared
            .as_ref()
            .or(self.sealed.as_ref())
            .map_or(0, |s| s.epoch);
        let mut epochs: BTreeMap<u64, Vec<&ChangeBatch>> = BTreeMap::new();
        for (epoch, changes) in self.unsealed.iter().filter(|(e, _)| *e > after) {
            epochs.entry(*epoch).or_default().push(changes);
        }
        epochs
            .into_iter()
            .filter_map(|(epoch, parts)| match concat(&parts) {
                Some(changes) => Some((epoch, changes)),
                None => {
                    // Never for one sink's output (one schema); said, not
                    // silent, if it ever happens.
                    tracing::error!(sink = %self.spec.name, epoch, "undelivered parts of an epoch do not concatenate; not kept for a restart");
                    None
                }
            })
            .collect()
    }
}

/// One batch of `parts`, which share a schema; `None` if they cannot be
/// put together (never for one sink's output).
fn concat(parts: &[&ChangeBatch]) -> Option<ChangeBatch> {
    if let [one] = parts {
        return Some((*one).clone());
    }
    let batches: Vec<_> = parts
        .iter()
        .map(|c| c.to_record_batch())
        .collect::<Result<_, _>>()
        .ok()?;
    let schema = batches.first()?.schema();
    let all = arrow::compute::concat_batches(&schema, &batches).ok()?;
    ChangeBatch::from_record_batch(&all).ok()
}

impl Streams {
    /// Every sink's epochs to keep in its outbox at the seal being taken.
    pub fn undelivered(&self) -> Vec<(ObjectId, Vec<(u64, ChangeBatch)>)> {
        self.sinks
            .iter()
            .map(|(id, slot)| (*id, slot.undelivered()))
            .collect()
    }

    /// `ALTER SINK ... PAUSE` (`paused`) or `RESUME`. A resumed sink is
    /// due for a retry at once: the next epoch close reopens it and hands
    /// it what it missed.
    pub fn pause_sink(&mut self, id: ObjectId, paused: bool) {
        let Some(slot) = self.sinks.get_mut(&id) else {
            return;
        };
        slot.paused = paused;
        slot.spec.paused = paused;
        if !paused && !slot.failed {
            slot.backoff = Some(Backoff {
                next_at: Instant::now(),
            });
        }
        let mut status = self.status.write();
        let entry = status.sinks.entry(id).or_default();
        if slot.failed {
            return;
        }
        let in_flight = slot.prepared.is_some()
            || !slot.in_flight.is_empty()
            || slot
                .sealed
                .as_ref()
                .is_some_and(|s| s.epoch > entry.committed_epoch);
        entry.status = match (paused, in_flight) {
            (true, true) => "pausing",
            (true, false) => "paused",
            (false, _) => "resuming",
        };
    }

    /// Sink `id` takes `spec`'s options (its `paused` stays the slot's).
    /// A writing sink is due to reopen at once, unless it could not be
    /// handed again what it pre-committed since its durable entry (too
    /// many changes since the last seal): then, like a paused or
    /// backing-off one, it takes them at its next reopen.
    pub fn reconfigure_sink(&mut self, id: ObjectId, spec: super::streams::SinkToOpen) {
        let Some(slot) = self.sinks.get_mut(&id) else {
            return;
        };
        slot.spec = super::streams::SinkToOpen {
            paused: slot.paused,
            ..spec
        };
        if slot.writing() && slot.unsealed_dropped_through.is_none() {
            slot.backoff = Some(Backoff {
                next_at: Instant::now(),
            });
        }
    }

    /// After a seal's commits: a pausing sink whose pre-committed epochs
    /// are all committed is paused.
    pub(super) fn settle_paused(&mut self, id: ObjectId) {
        let Some(slot) = self.sinks.get(&id).filter(|s| s.paused && !s.failed) else {
            return;
        };
        if slot.prepared.is_some() || !slot.in_flight.is_empty() {
            return;
        }
        let mut status = self.status.write();
        let entry = status.sinks.entry(id).or_default();
        if entry.status == "pausing"
            && slot
                .sealed
                .as_ref()
                .is_none_or(|s| entry.committed_epoch >= s.epoch)
        {
            entry.status = "paused";
        }
    }

    /// A sink opened from a seal whose outbox kept `undelivered` epochs:
    /// they are collected again and, unless it is paused, written now.
    pub(super) fn deliver_restored(&mut self, id: ObjectId, undelivered: Vec<(u64, ChangeBatch)>) {
        for (epoch, changes) in &undelivered {
            self.collect(id, *epoch, changes);
        }
        let Some(slot) = self.sinks.get(&id) else {
            return;
        };
        if slot.paused {
            self.status.write().sinks.entry(id).or_default().status = "paused";
            return;
        }
        if !undelivered.is_empty() {
            tracing::info!(sink = %id, epochs = undelivered.len(), "delivering what the sink missed before the restart");
        }
        for (epoch, changes) in &undelivered {
            self.write(id, *epoch, changes);
        }
    }
}
