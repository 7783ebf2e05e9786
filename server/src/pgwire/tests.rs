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

use super::raw_tests::{message, raw_session, startup_packet};
use super::serve;
use crate::config::{AuthMode, ServeConfig};
use crate::db::Database;

pub(super) struct TestServer {
    pub(super) addr: SocketAddr,
    shutdown: CancellationToken,
    _db: Arc<Database>,
    _dir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(super) async fn start(configure: impl FnOnce(&mut ServeConfig)) -> TestServer {
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

pub(super) async fn connect(server: &TestServer) -> Client {
    try_connect(server, "weir", "weir", None)
        .await
        .expect("connect")
}

pub(super) fn sqlstate(err: &tokio_postgres::Error) -> Option<&SqlState> {
    err.as_db_error().map(|e| e.code())
}

pub(super) fn rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
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
        vec![
            vec![Some("1".into()), Some("a".into())],
            vec![Some("2".into()), None]
        ]
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
async fn extended_protocol_describes_binds_and_returns_binary() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute(
            "CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT, price DOUBLE PRECISION); \
             INSERT INTO items VALUES (1, 'one', 1.5), (2, 'two', 3.0), (3, 'three', 4.5)",
        )
        .await
        .expect("setup");
    let select = client
        .prepare("SELECT id, label, price FROM items WHERE id >= $1 ORDER BY id")
        .await
        .expect("prepare select");
    assert_eq!(select.params(), &[Type::INT8]);
    let columns: Vec<&Type> = select.columns().iter().map(|c| c.type_()).collect();
    assert_eq!(columns, vec![&Type::INT8, &Type::TEXT, &Type::FLOAT8]);
    // Executed twice: the named statement is reusable.
    for (from, expected) in [(2i64, 2usize), (3, 1)] {
        let rows = client.query(&select, &[&from]).await.expect("select");
        assert_eq!(rows.len(), expected);
    }
    let rows = client.query(&select, &[&2i64]).await.expect("select");
    let got: Vec<(i64, String, f64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(got, vec![(2, "two".into(), 3.0), (3, "three".into(), 4.5)]);

    // A row limit on the portal: PortalSuspended, then the rest.
    let mut client = client;
    let txn = client.transaction().await.expect("begin");
    let portal = txn.bind(&select, &[&1i64]).await.expect("bind");
    assert_eq!(txn.query_portal(&portal, 2).await.expect("first").len(), 2);
    assert_eq!(txn.query_portal(&portal, 2).await.expect("rest").len(), 1);
    txn.commit().await.expect("commit");
}

#[tokio::test]
async fn prepared_insert_with_parameters() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT)")
        .await
        .expect("create");
    let insert = client
        .prepare("INSERT INTO items VALUES ($1, $2)")
        .await
        .expect("prepare insert");
    assert_eq!(insert.params().len(), 2);
    for (id, label) in [(1i64, "one"), (2, "two")] {
        assert_eq!(
            client
                .execute(&insert, &[&id, &label])
                .await
                .expect("insert"),
            1
        );
    }
    let count = client
        .query_one("SELECT count(*) FROM items", &[])
        .await
        .expect("count");
    assert_eq!(count.get::<_, i64>(0), 2);
}

#[tokio::test]
async fn transaction_status_follows_the_session() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE tx (id INT PRIMARY KEY)")
        .await
        .expect("create");
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .batch_execute("INSERT INTO tx VALUES (1)")
        .await
        .expect("insert");
    let err = client
        .batch_execute("SELECT * FROM nope")
        .await
        .expect_err("fails");
    assert_eq!(sqlstate(&err), Some(&SqlState::UNDEFINED_TABLE));
    let err = client.batch_execute("SELECT 1").await.expect_err("aborted");
    assert_eq!(sqlstate(&err), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let count = client
        .query_one("SELECT count(*) FROM tx", &[])
        .await
        .expect("count");
    assert_eq!(count.get::<_, i64>(0), 0);

    // tokio-postgres' transaction API checks ReadyForQuery bookkeeping too.
    let mut client = client;
    let txn = client.transaction().await.expect("begin");
    txn.execute("INSERT INTO tx VALUES (2)", &[])
        .await
        .expect("insert");
    txn.commit().await.expect("commit");
    let count = client
        .query_one("SELECT count(*) FROM tx", &[])
        .await
        .expect("count");
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
    sink.send(Bytes::from_static(b"1\thel"))
        .await
        .expect("chunk");
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
        let sink = client
            .copy_in::<_, Bytes>("COPY f FROM STDIN")
            .await
            .expect("copy in");
        futures::pin_mut!(sink);
        sink.send(Bytes::from_static(b"1\n2\n"))
            .await
            .expect("chunk");
    }
    let sink = client
        .copy_in::<_, Bytes>("COPY f FROM STDIN")
        .await
        .expect("copy in");
    futures::pin_mut!(sink);
    sink.send(Bytes::from_static(b"1\nnot-a-number\n"))
        .await
        .expect("chunk");
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

    let count = client
        .query_one("SELECT count(*) FROM f", &[])
        .await
        .expect("count");
    assert_eq!(count.get::<_, i64>(0), 0);
}

#[tokio::test]
async fn uuid_and_json_results_in_both_formats() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    let id = uuid::Uuid::new_v4();
    client
        .batch_execute(&format!(
            "CREATE TABLE docs (id UUID PRIMARY KEY, body JSONB, raw JSON); \
             INSERT INTO docs VALUES ('{id}', '{{\"a\": [1, 2]}}', '\"x\"')"
        ))
        .await
        .expect("setup");
    let row = client
        .query_one("SELECT id, body, raw FROM docs", &[])
        .await
        .expect("select binary");
    assert_eq!(row.get::<_, uuid::Uuid>(0), id);
    assert_eq!(
        row.get::<_, serde_json::Value>(1),
        serde_json::json!({"a": [1, 2]})
    );
    assert_eq!(row.get::<_, serde_json::Value>(2), serde_json::json!("x"));
    let messages = client
        .simple_query("SELECT id FROM docs")
        .await
        .expect("text");
    assert_eq!(rows(&messages), vec![vec![Some(id.to_string())]]);
}

#[tokio::test]
async fn uuid_and_json_parameters_in_binary() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    client
        .batch_execute("CREATE TABLE docs (id UUID PRIMARY KEY, body JSONB)")
        .await
        .expect("create");
    let id = uuid::Uuid::new_v4();
    let body = serde_json::json!({"k": "v"});
    // Typed Parse: the client encodes uuid and jsonb in their binary forms.
    let insert = client
        .prepare_typed(
            "INSERT INTO docs VALUES ($1, $2)",
            &[Type::UUID, Type::JSONB],
        )
        .await
        .expect("prepare");
    client
        .execute(&insert, &[&id, &body])
        .await
        .expect("insert");
    let row = client
        .query_one("SELECT body FROM docs WHERE id = $1", &[&id])
        .await
        .expect("select");
    assert_eq!(row.get::<_, serde_json::Value>(0), body);
    // The parameter compared with the uuid column is described as uuid, as
    // PostgreSQL describes it, so the driver sends it in binary.
    let select = client
        .prepare("SELECT body FROM docs WHERE id = $1")
        .await
        .expect("prepare select");
    assert_eq!(select.params(), &[Type::UUID]);
}

#[tokio::test]
async fn startup_checks_user_and_database() {
    let server = start(|_| {}).await;
    let err = try_connect(&server, "nobody", "weir", None)
        .await
        .expect_err("unknown user");
    assert_eq!(
        sqlstate(&err),
        Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
    );
    let err = try_connect(&server, "weir", "elsewhere", None)
        .await
        .expect_err("unknown database");
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
            .expect_err("rejected");
        assert_eq!(sqlstate(&err), Some(&SqlState::INVALID_PASSWORD), "{user}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_request_stops_the_running_statement() {
    let server = start(|_| {}).await;
    let client = connect(&server).await;
    let token = client.cancel_token();
    // Nothing is running yet: the request is accepted and ignored. It is
    // handled on its own connection, so give it time to land before the
    // next statement starts; a cancel must not carry over to that statement.
    token.cancel_query(NoTls).await.expect("idle cancel");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_idle_cancel = client.simple_query("SELECT 1").await;
    assert!(after_idle_cancel.is_ok(), "{after_idle_cancel:?}");

    let client = Arc::new(client);
    let running = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .simple_query(
                    "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
                )
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.expect("cancel request");
    let outcome = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the statement stops")
        .expect("join");
    let err = outcome.expect_err("cancelled");
    assert_eq!(sqlstate(&err), Some(&SqlState::QUERY_CANCELED));
    assert!(
        client.simple_query("SELECT 1").await.is_ok(),
        "session still usable"
    );
}

fn gauge(db: &Database, name: &str) -> Option<String> {
    db.metrics()
        .render()
        .lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .map(str::to_owned)
}

#[tokio::test]
async fn shutdown_ends_connections_and_serve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(ServeConfig::for_data_dir(dir.path().to_path_buf()))
        .await
        .expect("open");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(serve(db.clone(), listener, shutdown.clone()));

    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
        NoTls,
    )
    .await
    .expect("connect");
    let connection = tokio::spawn(connection);
    assert!(client.simple_query("SELECT 1").await.is_ok());
    assert_eq!(
        gauge(&db, "weir_connections ").as_deref(),
        Some("weir_connections 1")
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("serve returns")
        .expect("join")
        .expect("serve result");
    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("connection closed")
        .expect("join");
    let err = ended.expect_err("terminated by the server");
    assert_eq!(sqlstate(&err), Some(&SqlState::ADMIN_SHUTDOWN));
    assert_eq!(
        gauge(&db, "weir_connections ").as_deref(),
        Some("weir_connections 0")
    );
}
