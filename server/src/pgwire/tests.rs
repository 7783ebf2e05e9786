//! End-to-end tests of the pgwire front end: a real [`Database`] in a
//! temporary directory, [`serve`] on an ephemeral port, and tokio-postgres
//! (or raw bytes) as the client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use tokio_util::sync::CancellationToken;

use super::serve;
use crate::config::{AuthMode, ServeConfig};
use crate::db::Database;

struct TestServer {
    addr: SocketAddr,
    shutdown: CancellationToken,
    _db: Arc<Database>,
    _dir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(configure: impl FnOnce(&mut ServeConfig)) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = ServeConfig::for_data_dir(dir.path().to_path_buf());
    configure(&mut config);
    let db = Database::open(config).await.expect("open database");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    tokio::spawn(serve(db.clone(), listener, shutdown.clone()));
    TestServer {
        addr,
        shutdown,
        _db: db,
        _dir: dir,
    }
}

async fn try_connect(
    server: &TestServer,
    user: &str,
    database: &str,
    password: Option<&str>,
) -> Result<Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(server.addr.port())
        .user(user)
        .dbname(database)
        .application_name("pgwire-tests");
    if let Some(password) = password {
        config.password(password);
    }
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn connect(server: &TestServer) -> Client {
    try_connect(server, "weir", "weir", None).await.expect("connect")
}

fn sqlstate(err: &tokio_postgres::Error) -> Option<&SqlState> {
    err.as_db_error().map(|e| e.code())
}

fn rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

fn tags(messages: &[SimpleQueryMessage]) -> Vec<u64> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn simple_protocol_runs_every_statement() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    let messages = client
        .simple_query(
            "CREATE TABLE t (id INT PRIMARY KEY, name TEXT); \
             INSERT INTO t VALUES (1, 'a'), (2, NULL); \
             SELECT id, name FROM t ORDER BY id",
        )
        .await
        .expect("query");
    assert_eq!(tags(&messages), vec![0, 2, 2]);
    assert_eq!(
        rows(&messages),
        vec![vec![Some("1".into()), Some("a".into())], vec![Some("2".into()), None]]
    );
    // tokio-postgres reports EmptyQueryResponse as CommandComplete(0).
    let empty = client.simple_query("").await.expect("empty");
    assert_eq!(tags(&empty), vec![0]);
    assert!(rows(&empty).is_empty());
    assert!(client.simple_query(" ; ").await.is_ok());
}

#[tokio::test]
async fn errors_carry_sqlstate_and_stop_the_string() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    let err = client
        .simple_query("SELECT 1; SELECT * FROM missing_table; SELECT 2")
        .await
        .expect_err("undefined table");
    assert_eq!(sqlstate(&err), Some(&SqlState::UNDEFINED_TABLE));
    let err = client.simple_query("SELEC 1").await.expect_err("syntax");
    assert_eq!(sqlstate(&err), Some(&SqlState::SYNTAX_ERROR));
    // The connection is still usable.
    let messages = client.simple_query("SELECT 3").await.expect("after error");
    assert_eq!(rows(&messages), vec![vec![Some("3".into())]]);
}

#[tokio::test]
async fn extended_protocol_binds_parameters_and_binary_results() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT, price DOUBLE PRECISION)")
        .await
        .expect("create");
    let insert = client
        .prepare("INSERT INTO items VALUES ($1, $2, $3)")
        .await
        .expect("prepare insert");
    assert_eq!(insert.params().len(), 3);
    for (id, label) in [(1i64, "one"), (2, "two"), (3, "three")] {
        let n = client
            .execute(&insert, &[&id, &label, &(id as f64 * 1.5)])
            .await
            .expect("insert");
        assert_eq!(n, 1);
    }
    let select = client
        .prepare("SELECT id, label, price FROM items WHERE id >= $1 ORDER BY id")
        .await
        .expect("prepare select");
    assert_eq!(select.columns().len(), 3);
    let rows = client.query(&select, &[&2i64]).await.expect("select");
    let got: Vec<(i64, String, f64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(got, vec![(2, "two".into(), 3.0), (3, "three".into(), 4.5)]);

    let err = client
        .query("SELECT $1::int", &[&"not a number"])
        .await
        .expect_err("wrong parameter type");
    assert!(err.as_db_error().is_some() || err.to_string().contains("type"));
}

#[tokio::test]
async fn transaction_status_follows_the_session() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client.batch_execute("CREATE TABLE tx (id INT PRIMARY KEY)").await.expect("create");
    client.batch_execute("BEGIN").await.expect("begin");
    client.batch_execute("INSERT INTO tx VALUES (1)").await.expect("insert");
    let err = client.batch_execute("SELECT * FROM nope").await.expect_err("fails");
    assert_eq!(sqlstate(&err), Some(&SqlState::UNDEFINED_TABLE));
    let err = client.batch_execute("SELECT 1").await.expect_err("aborted");
    assert_eq!(sqlstate(&err), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let count = client.query_one("SELECT count(*) FROM tx", &[]).await.expect("count");
    assert_eq!(count.get::<_, i64>(0), 0);

    // tokio-postgres' transaction API checks ReadyForQuery bookkeeping too.
    let mut client = client;
    let txn = client.transaction().await.expect("begin");
    txn.execute("INSERT INTO tx VALUES (2)", &[]).await.expect("insert");
    txn.commit().await.expect("commit");
    let count = client.query_one("SELECT count(*) FROM tx", &[]).await.expect("count");
    assert_eq!(count.get::<_, i64>(0), 1);
}

#[tokio::test]
async fn copy_in_and_out_in_text_and_csv() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE c (id INT PRIMARY KEY, note TEXT)")
        .await
        .expect("create");

    let sink = client.copy_in("COPY c FROM STDIN").await.expect("copy in");
    futures::pin_mut!(sink);
    // A line may span CopyData messages.
    sink.send(Bytes::from_static(b"1\thel")).await.expect("chunk");
    sink.send(Bytes::from_static(b"lo\n2\t\\N\n3\ttab\\there\n"))
        .await
        .expect("chunk");
    assert_eq!(sink.finish().await.expect("finish"), 3);

    let sink = client
        .copy_in("COPY c FROM STDIN WITH (FORMAT csv, HEADER true)")
        .await
        .expect("copy csv");
    futures::pin_mut!(sink);
    sink.send(Bytes::from_static(b"id,note\n4,\"a,b\"\n"))
        .await
        .expect("chunk");
    assert_eq!(sink.finish().await.expect("finish"), 1);

    let out = client
        .copy_out("COPY (SELECT id, note FROM c ORDER BY id) TO STDOUT")
        .await
        .expect("copy out");
    let data: Vec<Bytes> = out.map(|b| b.expect("chunk")).collect().await;
    assert_eq!(
        data.concat(),
        b"1\thello\n2\t\\N\n3\ttab\\there\n4\ta,b\n".to_vec()
    );

    let out = client
        .copy_out("COPY c TO STDOUT WITH (FORMAT csv, HEADER true)")
        .await
        .expect("copy out csv");
    let data: Vec<Bytes> = out.map(|b| b.expect("chunk")).collect().await;
    let text = String::from_utf8(data.concat()).expect("utf8");
    assert!(text.starts_with("id,note\n"), "{text}");
    assert!(text.contains("4,\"a,b\"\n"), "{text}");

    // tokio-postgres' simple_query cannot take COPY data; speak it directly.
    let mut query = message(b'Q', b"COPY c TO STDOUT; SELECT 1\0");
    query.extend(message(b'X', b""));
    let received = raw_session(&server, &query).await;
    let find = |needle: &[u8]| received.windows(needle.len()).position(|w| w == needle);
    let copy_out = find(b"H\0\0\0\x0b\0\0\x02").expect("CopyOutResponse, 2 text columns");
    let last_row = find(b"4\ta,b\n").expect("last row");
    let tag = find(b"COPY 4\0").expect("COPY tag");
    let next = find(b"SELECT 1\0").expect("the next statement ran");
    assert!(copy_out < last_row && last_row < tag && tag < next);
}

#[tokio::test]
async fn failed_or_abandoned_copy_writes_nothing() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE f (id INT PRIMARY KEY)")
        .await
        .expect("create");
    {
        // Dropping the sink unfinished makes tokio-postgres send CopyFail.
        let sink = client.copy_in::<_, Bytes>("COPY f FROM STDIN").await.expect("copy in");
        futures::pin_mut!(sink);
        sink.send(Bytes::from_static(b"1\n2\n")).await.expect("chunk");
    }
    let sink = client.copy_in::<_, Bytes>("COPY f FROM STDIN").await.expect("copy in");
    futures::pin_mut!(sink);
    sink.send(Bytes::from_static(b"1\nnot-a-number\n")).await.expect("chunk");
    assert!(sink.finish().await.is_err(), "bad data is rejected");

    // A client that disconnects mid-COPY.
    let mut copy = message(b'Q', b"COPY f FROM STDIN\0");
    copy.extend(message(b'd', b"7\n8\n"));
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    socket.write_all(&startup_packet()).await.expect("startup");
    socket.write_all(&copy).await.expect("copy");
    let mut seen = Vec::new();
    while !seen.contains(&b'G') {
        let mut buf = [0u8; 512];
        let n = socket.read(&mut buf).await.expect("read");
        assert!(n > 0, "server closed before CopyInResponse");
        seen.extend_from_slice(&buf[..n]);
    }
    drop(socket);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let count = client.query_one("SELECT count(*) FROM f", &[]).await.expect("count");
    assert_eq!(count.get::<_, i64>(0), 0);
}

#[tokio::test]
async fn uuid_and_json_round_trip_in_both_formats() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE docs (id UUID PRIMARY KEY, body JSONB, raw JSON)")
        .await
        .expect("create");
    let id = uuid::Uuid::new_v4();
    let body = serde_json::json!({"a": [1, 2]});
    // Typed Parse: the client encodes uuid and jsonb in their binary forms.
    let insert = client
        .prepare_typed(
            "INSERT INTO docs VALUES ($1, $2, $3)",
            &[Type::UUID, Type::JSONB, Type::JSON],
        )
        .await
        .expect("prepare");
    client
        .execute(&insert, &[&id, &body, &serde_json::json!("x")])
        .await
        .expect("insert");
    let row = client
        .query_one("SELECT id, body, raw FROM docs", &[])
        .await
        .expect("select binary");
    assert_eq!(row.get::<_, uuid::Uuid>(0), id);
    assert_eq!(row.get::<_, serde_json::Value>(1), body);
    assert_eq!(row.get::<_, serde_json::Value>(2), serde_json::json!("x"));
    let messages = client.simple_query("SELECT id FROM docs").await.expect("text");
    assert_eq!(rows(&messages), vec![vec![Some(id.to_string())]]);
}

#[tokio::test]
async fn startup_checks_user_and_database() {
    let server = start(|_| {}).await;
    let err = try_connect(&server, "nobody", "weir", None)
        .await
        .err()
        .expect("unknown user");
    assert_eq!(sqlstate(&err), Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION));
    let err = try_connect(&server, "weir", "elsewhere", None)
        .await
        .err()
        .expect("unknown database");
    assert_eq!(sqlstate(&err), Some(&SqlState::INVALID_CATALOG_NAME));
}

#[tokio::test]
async fn scram_authentication() {
    let server = start(|c| {
        c.auth = AuthMode::Scram;
        c.superuser_password = Some("s3cret".into());
    })
    .await;
    let client = try_connect(&server, "weir", "weir", Some("s3cret"))
        .await
        .expect("right password");
    assert!(client.simple_query("SELECT 1").await.is_ok());
    for (user, password) in [("weir", "wrong"), ("nobody", "s3cret")] {
        let err = try_connect(&server, user, "weir", Some(password))
            .await
            .err()
            .expect("rejected");
        assert_eq!(sqlstate(&err), Some(&SqlState::INVALID_PASSWORD), "{user}");
    }
}

/// One typed frontend message.
fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A startup packet for user `weir`, protocol 3.0.
fn startup_packet() -> Vec<u8> {
    let body = b"\0\x03\0\0user\0weir\0database\0weir\0\0";
    let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(body);
    packet
}

/// Sends `bytes` after startup on a raw socket and reads until the server
/// closes the connection (or a timeout).
async fn raw_session(server: &TestServer, bytes: &[u8]) -> Vec<u8> {
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

    let messages = bystander.simple_query("SELECT 42").await.expect("bystander");
    assert_eq!(rows(&messages), vec![vec![Some("42".into())]]);
}

#[tokio::test]
async fn bind_with_wrong_parameter_count_is_an_error() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    let statement = client.prepare("SELECT $1::int + $2::int").await.expect("prepare");
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
async fn cancel_request_reaches_the_database() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    // Nothing is running: the request must simply be accepted and ignored.
    client
        .cancel_token()
        .cancel_query(NoTls)
        .await
        .expect("cancel request");
    assert!(client.simple_query("SELECT 1").await.is_ok());
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
