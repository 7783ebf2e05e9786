//! `ALTER SOURCE ... RESET OFFSET`: a source read again from the
//! beginning, at an epoch boundary, made durable by a seal.
//!
//! What was read before the reset stays in the projections and sinks
//! over the source (it happened); the reset drops the source's offsets, so
//! its reader starts over and everything after is read again. The reset
//! is not in the catalog but in the seals: the first seal taken after it
//! covers everything read before it and holds no offsets for the source,
//! so a restore from it restores the state with the old rows and reads
//! the source from the beginning, exactly what happened without the
//! crash; a restore from an earlier seal resumes the old reader's
//! offsets, as if the reset had not happened. The statement returns only
//! once such a seal has landed, so a reset it acknowledged is never
//! undone by a crash.

use tokio::sync::oneshot;

use super::streams::{SourceToRead, Streams};

impl Streams {
    /// Drops `source`'s offsets and starts its reader again from the
    /// beginning (if something reads it and it is not paused). `done` is
    /// answered once a seal taken after this lands.
    pub fn reset_source(&mut self, source: SourceToRead, done: oneshot::Sender<()>) {
        tracing::info!(source = %source.name, "offsets reset: reading from the beginning");
        self.received.remove(&source.id);
        self.covered.remove(&source.id);
        {
            let mut status = self.status.write();
            for id in std::iter::once(source.id).chain(source.tables.iter().map(|t| t.id)) {
                if let Some(entry) = status.sources.get_mut(&id) {
                    entry.offsets = Default::default();
                }
            }
        }
        self.restart_source(source);
        self.resets_waiting.push((self.seals_taken, done));
    }

    /// Answers `done` once a seal taken after now lands.
    pub fn await_seal(&mut self, done: oneshot::Sender<()>) {
        self.resets_waiting.push((self.seals_taken, done));
    }

    /// Seal number `number` landed: resets before it are durable.
    pub(super) fn resets_sealed(&mut self, number: u64) {
        let (done, waiting) = std::mem::take(&mut self.resets_waiting)
            .into_iter()
            .partition(|(at, _)| *at < number);
        self.resets_waiting = waiting;
        for (_, reply) in done {
            let _ = reply.send(());
        }
    }
}
