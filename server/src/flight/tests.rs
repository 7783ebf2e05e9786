//! End-to-end tests: a real Flight SQL server on a loopback port over a fresh
//! database, driven by arrow-flight's own `FlightSqlServiceClient`.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTables, CommandStatementIngest, SqlInfo,
    TableDefinitionOptions, TableExistsOption, TableNotExistOption,
};
use arrow_flight::{FlightInfo, IpcMessage};
use futures::TryStreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::config::ServeConfig;
use crate::db::Database;

struct Server {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), crate::error::ServerError>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn stop(self) {
        self.shutdown.cancel();
        let result = self.task.await.expect("server task");
        assert!(result.is_ok(), "server stopped with {result:?}");
    }
}

async fn start() -> (Server, FlightSqlServiceClient<Channel>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(ServeConfig::for_data_dir(dir.path().to_path_buf()))
        .await
        .expect("open database");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(super::serve(db, listener, shutdown.clone()));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let server = Server {
        shutdown,
        task,
        _dir: dir,
    };
    (server, FlightSqlServiceClient::new(channel))
}

async fn fetch(client: &mut FlightSqlServiceClient<Channel>, info: FlightInfo) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("ticket");
        let stream = client.do_get(ticket).await.expect("do_get");
        batches.extend(stream.try_collect::<Vec<_>>().await.expect("stream"));
    }
    batches
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn text(array: &dyn Array, i: usize) -> Option<String> {
    if array.is_null(i) {
        return None;
    }
    match array.data_type() {
        DataType::Utf8 => Some(array.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Some(array.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Some(array.as_string_view().value(i).to_string()),
        other => panic!("not a string column: {other}"),
    }
}

#[tokio::test]
async fn statements_prepared_statements_and_errors() {
    let (server, mut client) = start().await;
    client
        .handshake("weir", "anything")
        .await
        .expect("trust handshake");

    let n = client
        .execute_update(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name TEXT)".into(),
            None,
        )
        .await
        .expect("create");
    assert_eq!(n, 0);
    let n = client
        .execute_update("INSERT INTO t VALUES (1, 'a'), (2, 'b')".into(), None)
        .await
        .expect("insert");
    assert_eq!(n, 2);

    // A query: FlightInfo schema is the plan's schema, DoGet streams it.
    let info = client
        .execute("SELECT id, name FROM t ORDER BY id".into(), None)
        .await
        .expect("query");
    let announced = info.clone().try_decode_schema().expect("schema");
    assert_eq!(announced.field(0).data_type(), &DataType::Int64);
    let batches = fetch(&mut client, info).await;
    assert_eq!(batches[0].schema().as_ref(), &announced);
    assert_eq!(ids(&batches), vec![1, 2]);

    // DDL through the query path runs during GetFlightInfo: no endpoints.
    let info = client
        .execute("CREATE TABLE u (x BIGINT)".into(), None)
        .await
        .expect("ddl as query");
    assert!(info.endpoint.is_empty());
    assert_eq!(fetch(&mut client, info).await.len(), 0);

    // Prepared insert, parameters bound with DoPut.
    let mut insert = client
        .prepare("INSERT INTO t VALUES ($1, $2)".into(), None)
        .await
        .expect("prepare insert");
    assert_eq!(insert.parameter_schema().expect("params").fields().len(), 2);
    let params = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("0", DataType::Int64, true),
            Field::new("1", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![3, 4])),
            Arc::new(StringArray::from(vec![Some("c"), None])),
        ],
    )
    .expect("params");
    insert.set_parameters(params).expect("bind");
    assert_eq!(insert.execute_update().await.expect("prepared insert"), 2);
    insert.close().await.expect("close");

    // Prepared query with a parameter that needs a cast (Int32 -> Int64).
    let mut select = client
        .prepare(
            "SELECT id, name FROM t WHERE id > $1 ORDER BY id".into(),
            None,
        )
        .await
        .expect("prepare select");
    let param = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("0", DataType::Int32, false)])),
        vec![Arc::new(arrow::array::Int32Array::from(vec![2]))],
    )
    .expect("param");
    select.set_parameters(param).expect("bind");
    let info = select.execute().await.expect("execute prepared");
    let batches = fetch(&mut client, info).await;
    assert_eq!(ids(&batches), vec![3, 4]);
    assert_eq!(text(batches[0].column(1).as_ref(), 0).as_deref(), Some("c"));
    assert_eq!(text(batches[0].column(1).as_ref(), 1), None);

    // Errors carry their SQLSTATE and gRPC code.
    let err = client
        .execute("SELECT * FROM nope".into(), None)
        .await
        .expect_err("missing table");
    assert!(err.to_string().contains("42P01"), "{err}");
    let err = client
        .execute_update("CREATE TABLE t (id BIGINT)".into(), None)
        .await
        .expect_err("duplicate");
    assert!(err.to_string().contains("42P07"), "{err}");
    let err = client
        .execute("SELEC 1".into(), None)
        .await
        .expect_err("syntax");
    assert!(err.to_string().contains("42601"), "{err}");

    server.stop().await;
}

#[tokio::test]
async fn ingest_and_metadata() {
    let (server, mut client) = start().await;
    client
        .execute_update(
            "CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT)".into(),
            None,
        )
        .await
        .expect("create");

    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("label", DataType::Utf8, true),
            Field::new("id", DataType::Int64, false),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["x", "y", "z"])),
            Arc::new(Int64Array::from(vec![10, 11, 12])),
        ],
    )
    .expect("batch");
    let ingest = |table: &str, if_not_exist: TableNotExistOption| CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: if_not_exist.into(),
            if_exists: TableExistsOption::Append.into(),
        }),
        table: table.into(),
        ..Default::default()
    };
    let written = client
        .execute_ingest(
            ingest("items", TableNotExistOption::Fail),
            futures::stream::iter([Ok(batch.clone())]),
        )
        .await
        .expect("ingest");
    assert_eq!(written, 3);
    let err = client
        .execute_ingest(
            ingest("missing", TableNotExistOption::Fail),
            futures::stream::iter([Ok(batch.clone())]),
        )
        .await
        .expect_err("missing table");
    assert!(err.to_string().contains("42P01"), "{err}");
    let written = client
        .execute_ingest(
            ingest("created", TableNotExistOption::Create),
            futures::stream::iter([Ok(batch)]),
        )
        .await
        .expect("ingest creating the table");
    assert_eq!(written, 3);
    let info = client
        .execute("SELECT id FROM created ORDER BY id".into(), None)
        .await
        .expect("query created");
    assert_eq!(ids(&fetch(&mut client, info).await), vec![10, 11, 12]);

    // GetTables with table schemas.
    let info = client
        .get_tables(CommandGetTables {
            table_name_filter_pattern: Some("items".into()),
            table_types: vec!["TABLE".into()],
            include_schema: true,
            ..Default::default()
        })
        .await
        .expect("get_tables");
    let batches = fetch(&mut client, info).await;
    assert_eq!(rows(&batches), 1);
    let schema_bytes = batches[0].column(4).as_binary::<i32>().value(0).to_vec();
    let table_schema = Schema::try_from(IpcMessage(schema_bytes.into())).expect("ipc schema");
    let names: Vec<_> = table_schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, vec!["id", "label"]);

    // GetDbSchemas with a pattern; GetPrimaryKeys; GetSqlInfo; GetCatalogs.
    let info = client
        .get_db_schemas(CommandGetDbSchemas {
            catalog: None,
            db_schema_filter_pattern: Some("pub%".into()),
        })
        .await
        .expect("get_db_schemas");
    let batches = fetch(&mut client, info).await;
    assert_eq!(rows(&batches), 1);
    assert_eq!(
        text(batches[0].column(1).as_ref(), 0).as_deref(),
        Some("public")
    );

    let info = client
        .get_primary_keys(CommandGetPrimaryKeys {
            catalog: None,
            db_schema: None,
            table: "items".into(),
        })
        .await
        .expect("get_primary_keys");
    let batches = fetch(&mut client, info).await;
    assert_eq!(rows(&batches), 1);
    assert_eq!(
        text(batches[0].column(3).as_ref(), 0).as_deref(),
        Some("id")
    );

    let info = client
        .get_sql_info(vec![SqlInfo::FlightSqlServerName])
        .await
        .expect("get_sql_info");
    assert_eq!(rows(&fetch(&mut client, info).await), 1);
    let info = client.get_catalogs().await.expect("get_catalogs");
    assert!(rows(&fetch(&mut client, info).await) >= 1);
    let info = client.get_table_types().await.expect("get_table_types");
    assert_eq!(
        rows(&fetch(&mut client, info).await),
        4,
        "MATERIALIZED VIEW, SYSTEM TABLE, TABLE, VIEW"
    );

    let err = client
        .get_xdbc_type_info(Default::default())
        .await
        .expect_err("not offered");
    assert!(err.to_string().contains("CommandGetXdbcTypeInfo"), "{err}");

    server.stop().await;
}
