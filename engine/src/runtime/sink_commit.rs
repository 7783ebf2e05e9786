//! When a sink commits: after each seal that holds a new entry for it,
//! or, with grouped delivery ([`weir_connectors::grouping`]), once the
//! epochs sealed since its last commit hold `group_size` row changes or
//! the oldest of them has waited `group_max_wait`. The epoch loop's timer
//! commits a group that has waited long enough when no seal comes.

use weir_common::ObjectId;

use super::sink_worker::SinkOp;
use super::streams::{SinkSeal, Streams};

impl Streams {
    /// Sends sink `id` its durable seal entry `entry` to commit; the
    /// worker reports when it has ([`Self::committed`]).
    pub(super) fn commit(&mut self, id: ObjectId, entry: SinkSeal) {
        let Some(slot) = self.sinks.get_mut(&id) else {
            return;
        };
        slot.waiting_since = None;
        slot.worker.send(SinkOp::Commit { entry });
    }

    /// Sink `id`'s worker committed `entry`.
    pub(super) fn committed(
        &mut self,
        id: ObjectId,
        entry: SinkSeal,
        skipped: Option<weir_connectors::Skips>,
    ) {
        {
            let mut status = self.status.write();
            let s = status.sinks.entry(id).or_default();
            s.committed_rows = entry.rows;
            s.committed_epoch = entry.epoch;
            s.committed_descriptor = Some(entry.descriptor);
            s.retries = 0;
            s.skipped = skipped;
        }
        if let Some(slot) = self.sinks.get_mut(&id) {
            slot.retry.failures = 0;
        }
        self.settle_paused(id);
    }

    /// Whether sink `id` commits its durable `entry` now: always without
    /// grouped delivery, else once its group is full or old enough.
    pub(super) fn group_due(&mut self, id: ObjectId, entry: &SinkSeal) -> bool {
        let committed = self
            .status
            .read()
            .sinks
            .get(&id)
            .map_or(0, |s| s.committed_rows);
        let Some(slot) = self.sinks.get_mut(&id) else {
            return false;
        };
        let Some(grouping) = slot.grouping else {
            return true;
        };
        let since = *slot
            .waiting_since
            .get_or_insert_with(std::time::Instant::now);
        grouping.due(entry.rows.saturating_sub(committed), since.elapsed())
    }

    /// Commits every grouped sink whose group has waited long enough,
    /// without a new seal (an idle stream still delivers its last group).
    pub fn commit_waiting_groups(&mut self) {
        let due: Vec<(ObjectId, SinkSeal)> = self
            .sinks
            .iter()
            .filter(|(_, s)| !s.failed && s.backoff.is_none())
            .filter(|(_, s)| {
                s.grouping
                    .zip(s.waiting_since)
                    .is_some_and(|(g, since)| g.due(0, since.elapsed()))
            })
            .filter_map(|(id, s)| s.durable.clone().map(|d| (*id, d)))
            .collect();
        for (id, entry) in due {
            self.commit(id, entry);
        }
    }
}
