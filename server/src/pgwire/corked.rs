//! [`Corked`]: the connection's write side, holding replies until the
//! end of a protocol cycle.
//!
//! pgwire flushes after every message it sends (BindComplete, each
//! DataRow batch, CommandComplete, ReadyForQuery), so one prepared query
//! cost several `send` system calls, each waking the client for a partial
//! reply. PostgreSQL flushes once per cycle, at ReadyForQuery, or when the
//! client sends Flush. `Corked` lets the connection loop do the same:
//! writes collect in a buffer (written through once it passes
//! [`WRITE_THROUGH`], so a large result never piles up in memory), and a
//! flush is real only after [`Corked::uncork`], which the loop calls after
//! a message that ends a cycle (Query, Sync, Flush, CopyDone, CopyFail),
//! before it waits for the client, and before it closes the connection.
//! Reads pass through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffered bytes past which writes go through without waiting for a flush.
const WRITE_THROUGH: usize = 64 * 1024;

pub(super) struct Corked<IO> {
    inner: IO,
    buffer: Vec<u8>,
    /// How much of `buffer` the inner writer has taken.
    written: usize,
    /// Whether the next flush must reach the client.
    uncorked: bool,
}

impl<IO> Corked<IO> {
    pub(super) fn new(inner: IO) -> Self {
        Self {
            inner,
            buffer: Vec::new(),
            written: 0,
            uncorked: false,
        }
    }

    /// Makes the next flush send everything buffered; the one after that
    /// is held back again.
    pub(super) fn uncork(&mut self) {
        self.uncorked = true;
    }
}

impl<IO: AsyncWrite + Unpin> Corked<IO> {
    /// Hands the whole buffer to the inner writer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buffer.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buffer[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buffer.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Corked<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Corked<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.buffer.len() >= WRITE_THROUGH {
            ready!(this.poll_drain(cx))?;
        }
        this.buffer.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.uncorked {
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_drain(cx))?;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.uncorked = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn holds_writes_until_uncorked_and_writes_through_past_the_limit() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let mut corked = Corked::new(server);
        let mut client = client;
        corked.write_all(b"bind complete").await.unwrap();
        corked.flush().await.unwrap();
        let mut byte = [0u8; 1];
        let nothing =
            tokio::time::timeout(std::time::Duration::from_millis(20), client.read(&mut byte))
                .await;
        assert!(nothing.is_err(), "a corked flush sent bytes");

        corked.uncork();
        corked.flush().await.unwrap();
        let mut got = vec![0u8; 13];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"bind complete");

        // Past the limit the buffer goes out even while corked.
        let big = vec![7u8; WRITE_THROUGH + 10];
        corked.write_all(&big).await.unwrap();
        corked.write_all(b"x").await.unwrap();
        let mut got = vec![0u8; big.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, big);
    }
}
