//! A guard between the socket and pgwire's message decoder that checks every
//! frontend message before the decoder sees it.
//!
//! pgwire 0.41's decoders trust their input: they read fields with
//! panicking `Buf` getters and by structure rather than by the length
//! header, so a Parse whose declared length is longer than its fields
//! panics at the end of the buffer, a shorter one leaves bytes that are
//! then decoded as a bogus next message, and a CopyData with a length below
//! 4 underflows. Its size limits are hard-coded (about 1 GB).
//!
//! [`FrameScanner`] follows the framing of the byte stream (one untyped
//! startup packet, then type byte + length for every message), enforces
//! [`MAX_MESSAGE_LEN`], and checks that the body of each structured message
//! is exactly what pgwire will read. [`FrameGuard`] runs it on every read
//! and fails the read with `InvalidData` at the first bad message, so such a
//! client is dropped with an error instead of panicking its task or making
//! the server buffer a gigabyte.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest typed message a client may send (length field included).
/// Bigger than any sane Bind or COPY chunk; PostgreSQL's own cap is 1 GB.
pub(crate) const MAX_MESSAGE_LEN: usize = 256 << 20;

/// The largest startup or cancel packet, as in PostgreSQL.
pub(crate) const MAX_STARTUP_LEN: usize = 10_000;

const CANCEL_REQUEST_CODE: i32 = 80_877_102;

/// Tracks message boundaries in a frontend byte stream and validates each
/// message as it completes.
#[derive(Debug)]
pub(crate) struct FrameScanner {
    max_len: usize,
    /// `None` until the startup packet is complete.
    kind: Option<u8>,
    typed: bool,
    header: [u8; 5],
    have: usize,
    /// Body bytes still to come for the current message.
    remaining: usize,
    /// The body so far, for messages whose structure is checked.
    body: Option<Vec<u8>>,
}

impl FrameScanner {
    /// A scanner positioned at the start of the startup packet.
    pub(crate) fn new(max_len: usize) -> Self {
        FrameScanner {
            max_len,
            kind: None,
            typed: false,
            header: [0; 5],
            have: 0,
            remaining: 0,
            body: None,
        }
    }

    /// Advances over `data`; errors at the first bad message.
    pub(crate) fn feed(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(data.len());
                if let Some(body) = &mut self.body {
                    body.extend_from_slice(&data[..n]);
                }
                self.remaining -= n;
                data = &data[n..];
                if self.remaining == 0 {
                    self.finish_message()?;
                }
                continue;
            }
            let header_len = if self.typed { 5 } else { 4 };
            let n = (header_len - self.have).min(data.len());
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == header_len {
                self.start_message(header_len)?;
            }
        }
        Ok(())
    }

    fn start_message(&mut self, header_len: usize) -> Result<(), String> {
        let l = &self.header[header_len - 4..header_len];
        let len = usize::try_from(i32::from_be_bytes([l[0], l[1], l[2], l[3]])).unwrap_or(0);
        let (kind, min, max) = if self.typed {
            (Some(self.header[0]), 4, self.max_len)
        } else {
            (None, 8, MAX_STARTUP_LEN)
        };
        if len < min || len > max {
            return Err(match kind {
                Some(k) => format!("invalid length {len} of message type {:?}", k as char),
                None => format!("invalid length of startup packet: {len}"),
            });
        }
        self.kind = kind;
        self.have = 0;
        self.remaining = len - 4;
        // CopyData and password-family bodies are opaque to the decoder.
        self.body = match kind {
            Some(b'd' | b'p') => None,
            _ => Some(Vec::with_capacity(self.remaining.min(4096))),
        };
        if self.remaining == 0 {
            self.finish_message()?;
        }
        Ok(())
    }

    fn finish_message(&mut self) -> Result<(), String> {
        if let Some(body) = self.body.take() {
            let valid = match self.kind {
                None => startup_packet_fits(&body),
                Some(kind) => typed_body_fits(kind, &body),
            };
            if !valid {
                return Err(match self.kind {
                    Some(k) => format!("malformed message of type {:?}", k as char),
                    None => "malformed startup packet".to_owned(),
                });
            }
        }
        self.typed = true;
        Ok(())
    }
}

/// A panic-free reader over one message body.
struct Body<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Body<'a> {
    fn new(data: &'a [u8]) -> Self {
        Body { data, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let bytes = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(bytes)
    }

    /// A NUL-terminated string; returns it without the NUL.
    fn cstring(&mut self) -> Option<&'a [u8]> {
        let rest = self.data.get(self.pos..)?;
        let nul = rest.iter().position(|b| *b == 0)?;
        self.pos += nul + 1;
        Some(&rest[..nul])
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn finished(&self) -> bool {
        self.pos == self.data.len()
    }
}

/// Whether pgwire's decoder for `kind` reads exactly `body`. Unknown types
/// pass: pgwire rejects them without reading.
pub(crate) fn typed_body_fits(kind: u8, body: &[u8]) -> bool {
    let mut b = Body::new(body);
    let parsed = match kind {
        // Query, CopyFail: one string.
        b'Q' | b'f' => b.cstring().map(drop),
        b'P' => (|| {
            b.cstring()?;
            b.cstring()?;
            let n = b.u16()?;
            b.take(n.checked_mul(4)?).map(drop)
        })(),
        b'B' => (|| {
            b.cstring()?;
            b.cstring()?;
            let formats = b.u16()?;
            b.take(formats * 2)?;
            for _ in 0..b.u16()? {
                let len = b.i32()?;
                if len >= 0 {
                    b.take(usize::try_from(len).ok()?)?;
                }
            }
            let results = b.u16()?;
            b.take(results * 2).map(drop)
        })(),
        // Describe, Close: target byte and name.
        b'D' | b'C' => b.take(1).and_then(|_| b.cstring()).map(drop),
        b'E' => b.cstring().and_then(|_| b.i32()).map(drop),
        // Flush, Sync, Terminate, CopyDone: no body.
        b'H' | b'S' | b'X' | b'c' => Some(()),
        _ => return true,
    };
    parsed.is_some() && b.finished()
}

/// Whether a startup packet body (after the length) decodes exactly. Other
/// untyped packets (cancel, a late SSLRequest, unknown versions) are
/// rejected by pgwire without over-reading.
fn startup_packet_fits(body: &[u8]) -> bool {
    let mut b = Body::new(body);
    let Some(code) = b.i32() else {
        return true;
    };
    if code == CANCEL_REQUEST_CODE || (code >> 16) != 3 || body.len() <= 4 {
        return true;
    }
    // key\0value\0 ... \0
    loop {
        match b.cstring() {
            Some([]) => return b.finished(),
            Some(_) => {
                if b.cstring().is_none() {
                    return false;
                }
            }
            None => return false,
        }
    }
}

/// Whether a SASLInitialResponse body (mechanism, length, data) is
/// well-formed; pgwire's decoder would panic on a short one.
pub(crate) fn sasl_initial_response_fits(body: &[u8]) -> bool {
    let mut b = Body::new(body);
    let parsed = (|| {
        b.cstring()?;
        let len = b.i32()?;
        if len != -1 {
            b.take(usize::try_from(len).ok()?)?;
        }
        Some(())
    })();
    parsed.is_some() && b.finished()
}

/// An IO stream whose reads pass through a [`FrameScanner`].
pub(crate) struct FrameGuard<IO> {
    inner: IO,
    scanner: FrameScanner,
    failed: Option<String>,
}

impl<IO> FrameGuard<IO> {
    /// `scanner` must already have seen whatever the caller buffered from
    /// `inner` before wrapping it.
    pub(crate) fn new(inner: IO, scanner: FrameScanner) -> Self {
        FrameGuard {
            inner,
            scanner,
            failed: None,
        }
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

impl<IO: AsyncRead + Unpin> AsyncRead for FrameGuard<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(msg) = &this.failed {
            return Poll::Ready(Err(invalid(msg)));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if let Err(msg) = this.scanner.feed(&buf.filled()[before..]) {
                    let err = invalid(&msg);
                    this.failed = Some(msg);
                    return Poll::Ready(Err(err));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for FrameGuard<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup() -> Vec<u8> {
        let body = b"\0\x03\0\0user\0weir\0\0";
        let mut v = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    fn scanner_after_startup() -> FrameScanner {
        let mut scanner = FrameScanner::new(MAX_MESSAGE_LEN);
        scanner.feed(&startup()).expect("startup");
        scanner
    }

    #[test]
    fn accepts_valid_messages_split_anywhere() {
        let mut stream = startup();
        stream.extend_from_slice(b"Q\0\0\0\x0dSELECT 1\0");
        stream.extend_from_slice(b"S\0\0\0\x04");
        stream.extend_from_slice(b"X\0\0\0\x04");
        for chunk_len in 1..stream.len() {
            let mut scanner = FrameScanner::new(MAX_MESSAGE_LEN);
            for chunk in stream.chunks(chunk_len) {
                scanner.feed(chunk).expect("valid stream");
            }
        }
    }

    #[test]
    fn rejects_short_and_huge_lengths() {
        assert!(scanner_after_startup().feed(b"d\0\0\0\0").is_err());
        assert!(
            scanner_after_startup().feed(b"Q\x40\0\0\0").is_err(),
            "1 GB header"
        );
        let mut scanner = FrameScanner::new(MAX_MESSAGE_LEN);
        assert!(
            scanner.feed(&(-5i32).to_be_bytes()).is_err(),
            "negative startup length"
        );
    }

    #[test]
    fn rejects_bodies_that_do_not_match_their_length() {
        // Query without its terminating NUL, or with bytes after it.
        assert!(scanner_after_startup().feed(b"Q\0\0\0\x05x").is_err());
        assert!(scanner_after_startup().feed(b"Q\0\0\0\x07x\0y").is_err());
        // Parse claiming one parameter type but carrying none.
        assert!(
            scanner_after_startup()
                .feed(b"P\0\0\0\x09\0x\0\0\x01")
                .is_err()
        );
        // Sync with a body.
        assert!(scanner_after_startup().feed(b"S\0\0\0\x05\0").is_err());
    }

    #[test]
    fn sasl_initial_response_shape() {
        assert!(sasl_initial_response_fits(b"SCRAM-SHA-256\0\0\0\0\x02ab"));
        assert!(sasl_initial_response_fits(
            b"SCRAM-SHA-256\0\xff\xff\xff\xff"
        ));
        assert!(!sasl_initial_response_fits(b"SCRAM-SHA-256\0\0\0\0\x09ab"));
        assert!(!sasl_initial_response_fits(b"SCRAM"));
    }
}
