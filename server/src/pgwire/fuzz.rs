//! Property tests for the frontend message decoder: random bytes and
//! mutated valid message streams, fed in random chunks through the same
//! path a connection uses ([`FrameScanner`] in front of pgwire's
//! `PgWireMessageServerCodec`), must never panic.
//!
//! The negotiation phase (before the scanner is installed) is fuzzed
//! against the bare codec, as `negotiate_tls` runs it.

use bytes::BytesMut;
use pgwire::api::{ClientInfo, DefaultClient, PgWireConnectionState};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::extendedquery::{Bind, Close, Describe, Execute, Flush, Parse, Sync};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::{
    Password, PasswordMessageFamily, SASLInitialResponse, SASLResponse, Startup,
};
use pgwire::messages::terminate::Terminate;
use pgwire::messages::{Message, PgWireFrontendMessage};
use pgwire::tokio::server::PgWireMessageServerCodec;
use proptest::prelude::*;
use tokio_util::codec::Decoder;

use super::frames::{FrameScanner, MAX_MESSAGE_LEN, sasl_initial_response_fits};

fn codec(state: PgWireConnectionState) -> PgWireMessageServerCodec<()> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 5488));
    let mut codec = PgWireMessageServerCodec::new(DefaultClient::new(addr, false));
    codec.client_info.set_state(state);
    codec
}

/// Feeds `chunks` like socket reads: the scanner sees each chunk first and a
/// rejected chunk ends the connection, as `FrameGuard` does.
fn run_guarded(chunks: &[Vec<u8>], after_startup: PgWireConnectionState) {
    let mut codec = codec(PgWireConnectionState::AwaitingStartup);
    let mut scanner = FrameScanner::new(MAX_MESSAGE_LEN);
    let mut buf = BytesMut::new();
    for chunk in chunks {
        if scanner.feed(chunk).is_err() {
            return;
        }
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match codec.decode(&mut buf) {
                Ok(Some(PgWireFrontendMessage::Startup(_))) => {
                    // What the startup handler does next.
                    codec.client_info.set_state(after_startup);
                }
                Ok(Some(PgWireFrontendMessage::PasswordMessageFamily(message))) => {
                    coerce_password_message(message);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
            if buf.len() == before {
                break;
            }
        }
    }
}

/// What `auth` does with a password-family message: check the shape, then
/// coerce it.
fn coerce_password_message(message: PasswordMessageFamily) {
    if let PasswordMessageFamily::Raw(body) = &message {
        if sasl_initial_response_fits(body) {
            let copy = PasswordMessageFamily::Raw(body.clone());
            let _ = copy.into_sasl_initial_response();
        }
        let _ = PasswordMessageFamily::Raw(body.clone()).into_password();
    }
    let _ = message.into_sasl_response();
}

/// The codec before TLS negotiation, without the scanner.
fn run_negotiation(bytes: &[u8]) {
    let mut codec = codec(PgWireConnectionState::AwaitingSslRequest);
    let mut buf = BytesMut::from(bytes);
    let _ = codec.decode(&mut buf);
}

fn split(bytes: Vec<u8>, cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut rest = bytes.as_slice();
    for cut in cuts {
        if rest.is_empty() {
            break;
        }
        let (head, tail) = rest.split_at(cut % (rest.len() + 1));
        chunks.push(head.to_vec());
        rest = tail;
    }
    chunks.push(rest.to_vec());
    chunks
}

fn encode(message: &impl Message, out: &mut Vec<u8>) {
    let mut buf = BytesMut::new();
    if message.encode(&mut buf).is_ok() {
        out.extend_from_slice(&buf);
    }
}

/// A startup packet followed by one of each message a client sends.
fn valid_stream() -> Vec<u8> {
    let mut out = Vec::new();
    let mut startup = Startup::new();
    startup.parameters.insert("user".into(), "weir".into());
    startup.parameters.insert("database".into(), "weir".into());
    encode(&startup, &mut out);
    encode(&Password::new("secret".into()), &mut out);
    encode(
        &SASLInitialResponse::new("SCRAM-SHA-256".into(), Some("n,,n=,r=abc".into())),
        &mut out,
    );
    encode(&SASLResponse::new("c=biws,r=abc,p=xyz".into()), &mut out);
    encode(&Query::new("SELECT 1; SELECT 'x'".into()), &mut out);
    encode(
        &Parse::new(Some("s".into()), "SELECT $1::int".into(), vec![23, 0]),
        &mut out,
    );
    encode(
        &Bind::new(
            Some("p".into()),
            Some("s".into()),
            vec![0, 1],
            vec![Some("42".into()), None],
            vec![1],
        ),
        &mut out,
    );
    encode(&Describe::new(b'S', Some("s".into())), &mut out);
    encode(&Execute::new(Some("p".into()), 10), &mut out);
    encode(&Close::new(b'P', Some("p".into())), &mut out);
    encode(&Flush::new(), &mut out);
    encode(&Sync::new(), &mut out);
    encode(&CopyData::new("1\tx\n".into()), &mut out);
    encode(&CopyDone::new(), &mut out);
    encode(&CopyFail::new("stop".into()), &mut out);
    encode(&Terminate::new(), &mut out);
    out
}

fn state() -> impl Strategy<Value = PgWireConnectionState> {
    prop_oneof![
        Just(PgWireConnectionState::AuthenticationInProgress),
        Just(PgWireConnectionState::ReadyForQuery),
        Just(PgWireConnectionState::CopyInProgress(false)),
        Just(PgWireConnectionState::AwaitingSync),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..4),
        after_startup in state(),
    ) {
        run_negotiation(&bytes);
        run_guarded(&split(bytes, &cuts), after_startup);
    }

    #[test]
    fn random_typed_messages_never_panic(
        messages in prop::collection::vec(
            (any::<u8>(), -8i32..64, prop::collection::vec(any::<u8>(), 0..48)),
            0..6,
        ),
        after_startup in state(),
    ) {
        // A valid startup packet, then messages whose type, length field and
        // body are independent, so lengths disagree with bodies.
        let mut bytes = Vec::new();
        encode(&Startup::new(), &mut bytes);
        for (kind, len, body) in messages {
            bytes.push(kind);
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(&body);
        }
        run_guarded(&[bytes], after_startup);
    }

    #[test]
    fn mutated_valid_messages_never_panic(
        mutations in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        truncate in any::<usize>(),
        cuts in prop::collection::vec(any::<usize>(), 0..4),
        after_startup in state(),
    ) {
        let mut bytes = valid_stream();
        for (at, value) in mutations {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        bytes.truncate(truncate % (bytes.len() + 1));
        run_negotiation(&bytes);
        run_guarded(&split(bytes, &cuts), after_startup);
    }
}

#[test]
fn the_valid_stream_decodes_completely() {
    let mut codec = codec(PgWireConnectionState::AwaitingStartup);
    let mut buf = BytesMut::from(valid_stream().as_slice());
    let mut count = 0;
    while let Ok(Some(message)) = codec.decode(&mut buf) {
        if matches!(message, PgWireFrontendMessage::Startup(_)) {
            codec
                .client_info
                .set_state(PgWireConnectionState::ReadyForQuery);
        }
        count += 1;
    }
    assert_eq!(count, 16);
    assert!(buf.is_empty());
}
