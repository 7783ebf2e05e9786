//! Protocol-level tests that speak raw frontend bytes to a real server:
//! malformed and oversized messages, Bind checks, SSL refusal, and COPY
//! inside a multi-statement query string.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tests::{TestServer, connect, rows, start};

/// One typed frontend message.
pub(super) fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A startup packet for user `weir`, protocol 3.0.
pub(super) fn startup_packet() -> Vec<u8> {
    let body = b"\0\x03\0\0user\0weir\0database\0weir\0\0";
    let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(body);
    packet
}

/// Sends `bytes` after startup on a raw socket and reads until the server
/// closes the connection (or a timeout).
pub(super) async fn raw_session(server: &TestServer, bytes: &[u8]) -> Vec<u8> {
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    socket.write_all(&startup_packet()).await.expect("startup");
    socket.write_all(bytes).await.expect("write");
    let mut received = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut received)).await;
    received
}

#[tokio::test]
async fn malformed_and_oversized_messages_drop_only_that_client() {
    let server = start(|_| {}).await;
    let bystander = connect(&server).await;

    // A Parse whose fields overrun its length, a CopyData shorter than its
    // header, a 1 GB length header, an unknown message type.
    let attacks: [&[u8]; 4] = [
        b"P\0\0\0\x09\0x\0\0\x01",
        b"d\0\0\0\0",
        b"Q\x40\0\0\0SELECT 1",
        b"\x7f\0\0\0\x04",
    ];
    for attack in attacks {
        let received = raw_session(&server, attack).await;
        let fatal = received.windows(6).any(|w| w == b"SFATAL");
        assert!(fatal, "FATAL ErrorResponse for {attack:?}");
    }
    // Invalid UTF-8 in a query string is an ordinary error at worst.
    let mut bad_utf8 = message(b'Q', b"\xff\xfe\0");
    bad_utf8.extend(message(b'X', b""));
    let received = raw_session(&server, &bad_utf8).await;
    assert!(received.contains(&b'Z'), "ReadyForQuery after a bad query");

    let messages = bystander
        .simple_query("SELECT 42")
        .await
        .expect("bystander");
    assert_eq!(rows(&messages), vec![vec![Some("42".into())]]);
}

#[tokio::test]
async fn bind_with_wrong_parameter_count_is_an_error() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    let statement = client
        .prepare("SELECT $1::int + $2::int")
        .await
        .expect("prepare");
    assert_eq!(statement.params().len(), 2);
    // tokio-postgres checks counts itself, so speak the protocol directly.
    let mut bind = message(b'P', b"s\0SELECT $1::int\0\0\0");
    // Portal "", statement "s", no formats, no parameters, no result formats.
    bind.extend(message(b'B', b"\0s\0\0\0\0\0\0\0"));
    bind.extend(message(b'S', b""));
    bind.extend(message(b'X', b""));
    let received = raw_session(&server, &bind).await;
    assert!(
        received.windows(5).any(|w| w == b"C08P0"),
        "08P01 for a Bind with too few parameters"
    );
}

#[tokio::test]
async fn copy_from_stdin_inside_a_multi_statement_string() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE m (id INT PRIMARY KEY)")
        .await
        .expect("create");
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    socket.write_all(&startup_packet()).await.expect("startup");
    socket
        .write_all(&message(b'Q', b"SELECT 7; COPY m FROM STDIN\0"))
        .await
        .expect("query");
    let mut received = Vec::new();
    while !received.contains(&b'G') {
        let mut buf = [0u8; 512];
        let n = socket.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed before CopyInResponse");
        received.extend_from_slice(&buf[..n]);
    }
    let mut rest = message(b'd', b"1\n2\n");
    rest.extend(message(b'c', b""));
    rest.extend(message(b'X', b""));
    socket.write_all(&rest).await.expect("copy data");
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut received)).await;
    let find = |needle: &[u8]| received.windows(needle.len()).position(|w| w == needle);
    let select = find(b"SELECT 1\0").expect("the SELECT before the COPY");
    let copy_in = find(b"G\0\0\0\x09\0\0\x01").expect("CopyInResponse, 1 column");
    let copy_tag = find(b"COPY 2\0").expect("COPY tag");
    let ready = received
        .iter()
        .rposition(|b| *b == b'Z')
        .expect("ReadyForQuery");
    assert!(select < copy_in && copy_in < copy_tag && copy_tag < ready);
    // One ReadyForQuery for the whole query string, after the COPY.
    assert_eq!(
        received[copy_in..].iter().filter(|b| **b == b'Z').count(),
        1
    );
    let count = client
        .query_one("SELECT count(*) FROM m", &[])
        .await
        .expect("count");
    assert_eq!(count.get::<_, i64>(0), 2);
}

#[tokio::test]
async fn ssl_request_is_refused_without_tls() {
    let server = start(|_| {}).await;
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    socket
        .write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .await
        .expect("ssl request");
    let mut answer = [0u8; 1];
    socket.read_exact(&mut answer).await.expect("answer");
    assert_eq!(&answer, b"N");
}
