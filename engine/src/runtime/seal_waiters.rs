//! Waiting for a seal: [`Runtime::await_seal`](super::Runtime::await_seal)
//! answers once a seal taken after the call lands, so everything the
//! sources delivered before it is durable in the state and its offsets.
//!
//! A source read again from the beginning (`ALTER SOURCE ... RESET
//! OFFSET`, or `SET` of an option naming another input) is built on it:
//! the server stops the reader, waits for such a seal, then stores the
//! source's next *generation* in the catalog and starts the reader again.
//! The generation is sealed with the offsets (`GENERATION_SPLIT`), and a
//! reader whose generation differs from the sealed one starts from the
//! beginning (`Streams::start_reader`), so a crash on either side of
//! the catalog write neither loses what was read nor reads it twice.

use tokio::sync::oneshot;

use super::streams::Streams;

impl Streams {
    /// Answers `done` once a seal taken after now lands.
    pub fn await_seal(&mut self, done: oneshot::Sender<()>) {
        self.seal_waiters.push((self.seals_taken, done));
    }

    /// Seal number `number` landed: waiters from before it are answered.
    pub(super) fn sealed_for_waiters(&mut self, number: u64) {
        let (done, waiting) = std::mem::take(&mut self.seal_waiters)
            .into_iter()
            .partition(|(at, _)| *at < number);
        self.seal_waiters = waiting;
        for (_, reply) in done {
            let _ = reply.send(());
        }
    }
}
