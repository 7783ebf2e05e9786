//! The Rust driver (tokio-postgres) against `weir`: the extended protocol with
//! parameters of every mapped type, binary results (`query`) against text results
//! (`simple_query`), COPY in and out, cancellation, multi-statement strings, the
//! empty query, and protocol errors that must leave the server serving.

use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use futures::{SinkExt, StreamExt, pin_mut};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::harness::{RawPg, WeirServer, error_code, sqlstate, tags};
use crate::pgcodec::{Interval, Numeric};

// ---- helpers ------------------------------------------------------------------

pub(crate) async fn exec(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("`{sql}` failed: {e:?}"));
}

/// The text rows of a simple query, NULL as None.
pub(crate) async fn text_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let messages = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("`{sql}` failed: {e:?}"));
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

pub(crate) fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

// ---- every mapped type through prepared statements -----------------------------

const TYPES_TABLE: &str = "CREATE TABLE tp_types (
    id int4 PRIMARY KEY, b bool, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8,
    n numeric(12,3), t text, vc varchar(10), by bytea, d date, tm time, ts timestamp,
    tz timestamptz, iv interval, u uuid, j json, jb jsonb, ai int4[], at text[])";

struct Sample {
    b: bool,
    i2: i16,
    i4: i32,
    i8: i64,
    f4: f32,
    f8: f64,
    n: Numeric,
    t: String,
    vc: String,
    by: Vec<u8>,
    d: NaiveDate,
    tm: NaiveTime,
    ts: NaiveDateTime,
    tz: DateTime<Utc>,
    iv: Interval,
    u: uuid::Uuid,
    j: serde_json::Value,
    jb: serde_json::Value,
    ai: Vec<i32>,
    at: Vec<String>,
}

fn sample() -> Sample {
    Sample {
        b: true,
        i2: -7,
        i4: 123_456,
        i8: 9_000_000_000,
        f4: 2.5,
        f8: -0.125,
        n: Numeric("1234.500".into()),
        t: "héllo, wörld".into(),
        vc: "short".into(),
        by: vec![0, 1, 255],
        d: NaiveDate::from_ymd_opt(1999, 12, 31).unwrap(),
        tm: NaiveTime::from_hms_milli_opt(23, 59, 59, 999).unwrap(),
        ts: NaiveDate::from_ymd_opt(2000, 1, 1)
            .unwrap()
            .and_hms_milli_opt(0, 0, 0, 500)
            .unwrap(),
        tz: Utc.with_ymd_and_hms(1999, 12, 31, 23, 0, 0).unwrap(),
        iv: Interval {
            months: 14,
            days: 3,
            micros: 4_000_000,
        },
        u: uuid::Uuid::parse_str("123e4567-e89b-12d3-a456-426614174000").unwrap(),
        j: serde_json::json!([1, "two"]),
        jb: serde_json::json!({"k": [true, null]}),
        ai: vec![4, 5, 6],
        at: vec!["x y".into(), "z".into()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_round_trip_every_mapped_type_in_binary_and_text() {
    {
        let server = WeirServer::start();
        let client = server.connect().await;
        exec(&client, TYPES_TABLE).await;
        let v = sample();

        let insert = client
            .prepare(
                "INSERT INTO tp_types VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)",
            )
            .await
            .unwrap_or_else(|e| panic!("prepare INSERT with 21 parameters: {e:?}"));
        let expected_param_types = [
            Type::INT4,
            Type::BOOL,
            Type::INT2,
            Type::INT4,
            Type::INT8,
            Type::FLOAT4,
            Type::FLOAT8,
            Type::NUMERIC,
            Type::TEXT,
            Type::VARCHAR,
            Type::BYTEA,
            Type::DATE,
            Type::TIME,
            Type::TIMESTAMP,
            Type::TIMESTAMPTZ,
            Type::INTERVAL,
            Type::UUID,
            Type::JSON,
            Type::JSONB,
            Type::INT4_ARRAY,
            Type::TEXT_ARRAY,
        ];
        assert_eq!(
            insert.params(),
            &expected_param_types[..],
            "parameter types inferred from the target columns"
        );
        let inserted = client
            .execute(
                &insert,
                &[
                    &1i32, &v.b, &v.i2, &v.i4, &v.i8, &v.f4, &v.f8, &v.n, &v.t, &v.vc, &v.by, &v.d,
                    &v.tm, &v.ts, &v.tz, &v.iv, &v.u, &v.j, &v.jb, &v.ai, &v.at,
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("execute INSERT with every type: {e:?}"));
        assert_eq!(inserted, 1, "INSERT of one row reports 1");

        // A NULL of every type, through the same statement.
        client
            .execute(
                &insert,
                &[
                    &2i32,
                    &None::<bool>,
                    &None::<i16>,
                    &None::<i32>,
                    &None::<i64>,
                    &None::<f32>,
                    &None::<f64>,
                    &None::<Numeric>,
                    &None::<String>,
                    &None::<String>,
                    &None::<Vec<u8>>,
                    &None::<NaiveDate>,
                    &None::<NaiveTime>,
                    &None::<NaiveDateTime>,
                    &None::<DateTime<Utc>>,
                    &None::<Interval>,
                    &None::<uuid::Uuid>,
                    &None::<serde_json::Value>,
                    &None::<serde_json::Value>,
                    &None::<Vec<i32>>,
                    &None::<Vec<String>>,
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("execute INSERT with NULL of every type: {e:?}"));

        // Binary results (extended protocol): typed values come back equal.
        let select = client
            .prepare("SELECT * FROM tp_types WHERE id = $1")
            .await
            .unwrap_or_else(|e| panic!("prepare SELECT: {e:?}"));
        let column_types: Vec<Type> = select.columns().iter().map(|c| c.type_().clone()).collect();
        assert_eq!(
            column_types,
            expected_param_types.to_vec(),
            "result column types of SELECT *"
        );
        let row = client
            .query_one(&select, &[&1i32])
            .await
            .unwrap_or_else(|e| panic!("SELECT row 1: {e:?}"));
        assert_eq!(row.get::<_, bool>("b"), v.b, "bool");
        assert_eq!(row.get::<_, i16>("i2"), v.i2, "int2");
        assert_eq!(row.get::<_, i32>("i4"), v.i4, "int4");
        assert_eq!(row.get::<_, i64>("i8"), v.i8, "int8");
        assert_eq!(row.get::<_, f32>("f4"), v.f4, "float4");
        assert_eq!(row.get::<_, f64>("f8"), v.f8, "float8");
        assert_eq!(row.get::<_, Numeric>("n"), v.n, "numeric(12,3)");
        assert_eq!(row.get::<_, String>("t"), v.t, "text");
        assert_eq!(row.get::<_, String>("vc"), v.vc, "varchar");
        assert_eq!(row.get::<_, Vec<u8>>("by"), v.by, "bytea");
        assert_eq!(row.get::<_, NaiveDate>("d"), v.d, "date");
        assert_eq!(row.get::<_, NaiveTime>("tm"), v.tm, "time");
        assert_eq!(row.get::<_, NaiveDateTime>("ts"), v.ts, "timestamp");
        assert_eq!(row.get::<_, DateTime<Utc>>("tz"), v.tz, "timestamptz");
        assert_eq!(row.get::<_, Interval>("iv"), v.iv, "interval");
        assert_eq!(row.get::<_, uuid::Uuid>("u"), v.u, "uuid");
        assert_eq!(row.get::<_, serde_json::Value>("j"), v.j, "json");
        assert_eq!(row.get::<_, serde_json::Value>("jb"), v.jb, "jsonb");
        assert_eq!(row.get::<_, Vec<i32>>("ai"), v.ai, "int4[]");
        assert_eq!(row.get::<_, Vec<String>>("at"), v.at, "text[]");

        let nulls = client
            .query_one(&select, &[&2i32])
            .await
            .unwrap_or_else(|e| panic!("SELECT row 2: {e:?}"));
        for i in 1..nulls.len() {
            let column = &nulls.columns()[i];
            let is_null = match column.type_().clone() {
                Type::BOOL => nulls.get::<_, Option<bool>>(i).is_none(),
                Type::INT2 => nulls.get::<_, Option<i16>>(i).is_none(),
                Type::INT4 => nulls.get::<_, Option<i32>>(i).is_none(),
                Type::INT8 => nulls.get::<_, Option<i64>>(i).is_none(),
                Type::FLOAT4 => nulls.get::<_, Option<f32>>(i).is_none(),
                Type::FLOAT8 => nulls.get::<_, Option<f64>>(i).is_none(),
                Type::NUMERIC => nulls.get::<_, Option<Numeric>>(i).is_none(),
                Type::TEXT | Type::VARCHAR => nulls.get::<_, Option<String>>(i).is_none(),
                Type::BYTEA => nulls.get::<_, Option<Vec<u8>>>(i).is_none(),
                Type::DATE => nulls.get::<_, Option<NaiveDate>>(i).is_none(),
                Type::TIME => nulls.get::<_, Option<NaiveTime>>(i).is_none(),
                Type::TIMESTAMP => nulls.get::<_, Option<NaiveDateTime>>(i).is_none(),
                Type::TIMESTAMPTZ => nulls.get::<_, Option<DateTime<Utc>>>(i).is_none(),
                Type::INTERVAL => nulls.get::<_, Option<Interval>>(i).is_none(),
                Type::UUID => nulls.get::<_, Option<uuid::Uuid>>(i).is_none(),
                Type::JSON | Type::JSONB => nulls.get::<_, Option<serde_json::Value>>(i).is_none(),
                Type::INT4_ARRAY => nulls.get::<_, Option<Vec<i32>>>(i).is_none(),
                Type::TEXT_ARRAY => nulls.get::<_, Option<Vec<String>>>(i).is_none(),
                other => panic!("unexpected column type {other} for {}", column.name()),
            };
            assert!(
                is_null,
                "column {} of the all-NULL row should be NULL",
                column.name()
            );
        }

        // Parameters of every type in a WHERE clause.
        let matched = client
            .query(
                "SELECT id FROM tp_types WHERE b = $1 AND i2 = $2 AND i4 = $3 AND i8 = $4 AND f4 = $5 AND f8 = $6 AND n = $7 \
                 AND t = $8 AND vc = $9 AND by = $10 AND d = $11 AND tm = $12 AND ts = $13 AND tz = $14 AND iv = $15 AND u = $16",
                &[
                    &v.b, &v.i2, &v.i4, &v.i8, &v.f4, &v.f8, &v.n, &v.t, &v.vc, &v.by, &v.d, &v.tm, &v.ts, &v.tz, &v.iv, &v.u,
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("SELECT with 16 typed parameters in WHERE: {e:?}"));
        let ids: Vec<i32> = matched.iter().map(|r| r.get(0)).collect();
        assert_eq!(ids, vec![1], "every parameter matched row 1");

        {
            // Text results (simple protocol): PostgreSQL's text output of the same row.
            exec(&client, "SET TimeZone = 'UTC'").await;
            let text = text_rows(&client, "SELECT * FROM tp_types ORDER BY id").await;
            let expected_text = vec![
                s("1"),
                s("t"),
                s("-7"),
                s("123456"),
                s("9000000000"),
                s("2.5"),
                s("-0.125"),
                s("1234.500"),
                s("héllo, wörld"),
                s("short"),
                s("\\x0001ff"),
                s("1999-12-31"),
                s("23:59:59.999"),
                s("2000-01-01 00:00:00.5"),
                s("1999-12-31 23:00:00+00"),
                s("1 year 2 mons 3 days 00:00:04"),
                s("123e4567-e89b-12d3-a456-426614174000"),
                s("[1,\"two\"]"),
                s("{\"k\": [true, null]}"),
                s("{4,5,6}"),
                s("{\"x y\",z}"),
            ];
            assert_eq!(text.len(), 2, "two rows in tp_types: {text:?}");
            let names = [
                "id", "b", "i2", "i4", "i8", "f4", "f8", "n", "t", "vc", "by", "d", "tm", "ts",
                "tz", "iv", "u", "j", "jb", "ai", "at",
            ];
            for (i, name) in names.iter().enumerate() {
                assert_eq!(text[0][i], expected_text[i], "text output of column {name}");
            }
            assert_eq!(text[1][0], s("2"));
            assert!(
                text[1][1..].iter().all(Option::is_none),
                "text output of the all-NULL row: {:?}",
                text[1]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn literals_have_postgresql_types() {
    let server = WeirServer::start();
    let client = server.connect().await;
    let statement = client
        .prepare(
            "SELECT 1 AS a, 2147483648 AS b, 1.5 AS c, 'a' AS d, true AS e, NULL::int4 AS f, \
             1::int2 + 1::int2 AS g, 1 + 1::int8 AS h, 2.5::float8 * 2 AS i",
        )
        .await
        .unwrap_or_else(|e| panic!("prepare literals: {e:?}"));
    let types: Vec<Type> = statement
        .columns()
        .iter()
        .map(|c| c.type_().clone())
        .collect();
    assert_eq!(
        types,
        vec![
            Type::INT4,
            Type::INT8,
            Type::NUMERIC,
            Type::TEXT,
            Type::BOOL,
            Type::INT4,
            Type::INT2,
            Type::INT8,
            Type::FLOAT8
        ],
        "result types of literals and arithmetic, as PostgreSQL types them"
    );
    let row = client
        .query_one(&statement, &[])
        .await
        .expect("run literals");
    assert_eq!(row.get::<_, i32>(0), 1);
    assert_eq!(row.get::<_, i64>(1), 2_147_483_648);
    assert_eq!(row.get::<_, Numeric>(2), Numeric("1.5".into()));
    assert_eq!(row.get::<_, String>(3), "a");
    assert!(row.get::<_, bool>(4));
    assert_eq!(row.get::<_, Option<i32>>(5), None);
    assert_eq!(row.get::<_, i16>(6), 2);
    assert_eq!(row.get::<_, i64>(7), 2);
    assert_eq!(row.get::<_, f64>(8), 5.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_may_repeat_a_column_name_as_in_postgresql() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE rep (i int PRIMARY KEY, j int); INSERT INTO rep VALUES (1, 2)")
        .await
        .expect("setup");
    let sql = "SELECT i, i, rep.i, 1, 2, j AS x, $1::int AS x FROM rep ORDER BY i";
    let statement = client.prepare(sql).await.expect("prepare");
    let names: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["i", "i", "i", "?column?", "?column?", "x", "x"]);
    let row = client.query_one(&statement, &[&7i32]).await.expect("run");
    let values: Vec<i32> = (0..7).map(|k| row.get(k)).collect();
    assert_eq!(values, [1, 1, 1, 1, 2, 2, 7]);
    let simple = client
        .simple_query("SELECT count(*), count(*) FROM rep")
        .await
        .expect("simple");
    let SimpleQueryMessage::Row(row) = &simple[1] else {
        panic!("expected a row, got {:?}", simple.len());
    };
    let names: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["count", "count"]);
    // A projection's columns are a relation's: they must be unique.
    let err = client
        .batch_execute("CREATE PROJECTION rep_twice AS SELECT i, i FROM rep")
        .await
        .expect_err("repeated projection column");
    assert_eq!(err.code(), Some(&SqlState::DUPLICATE_COLUMN), "{err:?}");
    client
        .batch_execute("CREATE PROJECTION rep_named (a, b) AS SELECT i, i FROM rep")
        .await
        .expect("named apart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_update_from_and_delete_using_take_parameters_and_describe_returning() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE acct (id int PRIMARY KEY, balance bigint NOT NULL); \
             CREATE TABLE moves (acct int, amount bigint); \
             INSERT INTO acct VALUES (1, 10), (2, 20); \
             INSERT INTO moves VALUES (1, 1), (2, 2)",
        )
        .await
        .expect("setup");
    let update = client
        .prepare(
            "UPDATE acct a SET balance = $1 + m.amount FROM moves m \
             WHERE a.id = m.acct AND m.amount >= $2 RETURNING a.id, a.balance",
        )
        .await
        .expect("prepare UPDATE ... FROM");
    assert_eq!(update.params(), &[Type::INT8, Type::INT8]);
    let names: Vec<&str> = update.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["id", "balance"]);
    let rows = client
        .query(&update, &[&100i64, &2i64])
        .await
        .expect("run UPDATE ... FROM");
    let changed: Vec<(i32, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(changed, [(2, 102)]);
    let delete = client
        .prepare("DELETE FROM acct a USING moves m WHERE a.id = m.acct AND m.amount = $1 RETURNING a.balance")
        .await
        .expect("prepare DELETE ... USING");
    assert_eq!(delete.params(), &[Type::INT8]);
    assert_eq!(
        delete.columns().len(),
        1,
        "DELETE ... RETURNING describes its row"
    );
    let rows = client
        .query(&delete, &[&1i64])
        .await
        .expect("run DELETE ... USING");
    assert_eq!(
        rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>(),
        [10]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_statement_is_reused_with_new_parameters() {
    let server = WeirServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE TABLE tp_reuse (k int8 PRIMARY KEY, v text)",
    )
    .await;
    let insert = client
        .prepare("INSERT INTO tp_reuse VALUES ($1, $2)")
        .await
        .expect("prepare");
    for k in 0..20i64 {
        client
            .execute(&insert, &[&k, &format!("v{k}")])
            .await
            .unwrap_or_else(|e| panic!("insert {k}: {e:?}"));
    }
    let lookup = client
        .prepare("SELECT v FROM tp_reuse WHERE k = $1")
        .await
        .expect("prepare");
    for k in [0i64, 7, 19] {
        let v: String = client
            .query_one(&lookup, &[&k])
            .await
            .expect("lookup")
            .get(0);
        assert_eq!(v, format!("v{k}"));
    }
    let missing = client
        .query_opt(&lookup, &[&1000i64])
        .await
        .expect("lookup missing");
    assert!(missing.is_none(), "no row for k = 1000");
    {
        let doubled: i64 = client
            .query_one("SELECT $1::int8 * 2", &[&21i64])
            .await
            .expect("parameter in an expression")
            .get(0);
        assert_eq!(doubled, 42);
        let echoed: String = client
            .query_one("SELECT $1::text || '!'", &[&"hi"])
            .await
            .expect("text parameter")
            .get(0);
        assert_eq!(echoed, "hi!");
        let count: i64 = client
            .query_one(
                "SELECT count(*) FROM tp_reuse WHERE k >= $1 AND v LIKE $2",
                &[&10i64, &"v1%"],
            )
            .await
            .expect("two parameters")
            .get(0);
        assert_eq!(count, 10, "k in 10..=19 all start with v1");
    }
}

// ---- COPY ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_in_text_and_csv_then_copy_to_stdout() {
    let server = WeirServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE TABLE tp_copy (id int4 PRIMARY KEY, name text, score float8)",
    )
    .await;

    // Text format: tab separated, \N is NULL, backslash escapes.
    let sink = client
        .copy_in("COPY tp_copy (id, name, score) FROM STDIN")
        .await
        .unwrap_or_else(|e| panic!("COPY FROM STDIN (text): {e:?}"));
    pin_mut!(sink);
    sink.send(Bytes::from_static(b"1\talice\t1.5\n2\t\\N\t2.5\n"))
        .await
        .expect("send COPY data");
    sink.send(Bytes::from_static(b"3\tcarol\\twith tab\t\\N\n"))
        .await
        .expect("send COPY data");
    let copied = sink
        .finish()
        .await
        .unwrap_or_else(|e| panic!("finish COPY (text): {e:?}"));
    assert_eq!(copied, 3, "COPY 3 from three text lines");

    // CSV with a header: unquoted empty is NULL, quoted empty is ''.
    let sink = client
        .copy_in("COPY tp_copy FROM STDIN WITH (FORMAT csv, HEADER true)")
        .await
        .unwrap_or_else(|e| panic!("COPY FROM STDIN (csv): {e:?}"));
    pin_mut!(sink);
    sink.send(Bytes::from_static(
        b"id,name,score\n4,\"dan, jr\",4.5\n5,,\n6,\"\",6\n",
    ))
    .await
    .expect("send CSV data");
    let copied = sink
        .finish()
        .await
        .unwrap_or_else(|e| panic!("finish COPY (csv): {e:?}"));
    assert_eq!(copied, 3, "COPY 3 from three CSV lines");

    let rows = text_rows(&client, "SELECT id, name, score FROM tp_copy ORDER BY id").await;
    assert_eq!(
        rows,
        vec![
            vec![s("1"), s("alice"), s("1.5")],
            vec![s("2"), None, s("2.5")],
            vec![s("3"), s("carol\twith tab"), None],
            vec![s("4"), s("dan, jr"), s("4.5")],
            vec![s("5"), None, None],
            vec![s("6"), s(""), s("6")],
        ],
        "rows after COPY FROM STDIN"
    );

    // A bad line fails the whole COPY and loads nothing.
    let sink = client
        .copy_in("COPY tp_copy FROM STDIN")
        .await
        .expect("COPY FROM STDIN");
    pin_mut!(sink);
    sink.send(Bytes::from_static(b"7\tok\t1\nnot-a-number\tbad\t1\n"))
        .await
        .expect("send");
    let err = sink
        .finish()
        .await
        .expect_err("a COPY with an invalid integer must fail");
    assert_eq!(sqlstate(&err), "22P02", "invalid integer in COPY: {err:?}");
    let n: i64 = client
        .query_one("SELECT count(*) FROM tp_copy WHERE id = 7", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 0, "a failed COPY inserts none of its rows");

    // COPY (query) TO STDOUT, text format.
    let out = copy_out_text(
        &client,
        "COPY (SELECT id, name, score FROM tp_copy WHERE id <= 3 ORDER BY id) TO STDOUT",
    )
    .await;
    assert_eq!(
        out, "1\talice\t1.5\n2\t\\N\t2.5\n3\tcarol\\twith tab\t\\N\n",
        "COPY (query) TO STDOUT"
    );

    // COPY table TO STDOUT as CSV with a header (row order is unspecified).
    let out = copy_out_text(&client, "COPY tp_copy TO STDOUT WITH (FORMAT csv, HEADER)").await;
    let mut lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"id,name,score"),
        "CSV header line: {out:?}"
    );
    lines.remove(0);
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "1,alice,1.5",
            "2,,2.5",
            "3,carol\twith tab,",
            "4,\"dan, jr\",4.5",
            "5,,",
            "6,\"\",6"
        ],
        "COPY tp_copy TO STDOUT (csv)"
    );
}

async fn copy_out_text(client: &Client, sql: &str) -> String {
    let stream = client
        .copy_out(sql)
        .await
        .unwrap_or_else(|e| panic!("`{sql}`: {e:?}"));
    pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("`{sql}` stream: {e:?}")));
    }
    String::from_utf8(out).expect("COPY output is UTF-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_copy_leaves_the_server_serving_others() {
    let server = WeirServer::start();
    let other = server.connect().await;
    exec(
        &other,
        "CREATE TABLE tp_copy_cut (id int4 PRIMARY KEY, name text)",
    )
    .await;

    let mut raw = RawPg::connect(server.pg_port);
    raw.query("COPY tp_copy_cut FROM STDIN");
    let (tag, body) = raw.recv();
    assert_eq!(
        tag as char,
        'G',
        "CopyInResponse expected, got {:?} {:?}",
        tag as char,
        error_code(&body)
    );
    raw.send(b'd', b"1\tfirst\n2\tsecond\n3\tthi");
    raw.drop_connection();

    // The other session keeps working, and new sessions connect.
    let n: i64 = other
        .query_one("SELECT count(*) FROM tp_copy_cut", &[])
        .await
        .expect("the other session still answers")
        .get(0);
    assert_eq!(n, 0, "an interrupted COPY loads nothing");
    let fresh = server.connect().await;
    exec(&fresh, "INSERT INTO tp_copy_cut VALUES (1, 'after')").await;
    let rows = text_rows(&other, "SELECT id, name FROM tp_copy_cut").await;
    assert_eq!(
        rows,
        vec![vec![s("1"), s("after")]],
        "the table takes new rows after the broken COPY"
    );
}

// ---- cancel -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_long_query_with_57014() {
    {
        let server = WeirServer::start();
        let client = server.connect().await;
        exec(&client, "CREATE TABLE tp_big (x int4)").await;
        let values: Vec<String> = (0..1000).map(|i| format!("({i})")).collect();
        exec(
            &client,
            &format!("INSERT INTO tp_big VALUES {}", values.join(",")),
        )
        .await;

        let token = client.cancel_token();
        let started = Instant::now();
        let query = tokio::spawn(async move {
            // 10^12 rows to filter: never finishes on its own. (The filter keeps the
            // planner from answering count(*) from row-count statistics.)
            let result = client
                    .query_one(
                        "SELECT count(*) FROM tp_big a, tp_big b, tp_big c, tp_big d WHERE a.x + b.x + c.x + d.x < 0",
                        &[],
                    )
                    .await;
            (result, client)
        });
        // The cancel may arrive before the query starts running; repeat it until the
        // query ends or the deadline passes.
        let deadline = Duration::from_secs(30);
        while !query.is_finished() && started.elapsed() < deadline {
            token.cancel_query(NoTls).await.expect("send CancelRequest");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(
            query.is_finished(),
            "the cross join was still running {deadline:?} after CancelRequests\n{}",
            server.log_tail()
        );
        let (result, client) = query.await.expect("query task");
        let err = result.expect_err("a cancelled query must fail");
        assert_eq!(sqlstate(&err), "57014", "cancelled query: {err:?}");

        // The session is usable after the cancel.
        let rows = text_rows(&client, "SELECT 1").await;
        assert_eq!(rows, vec![vec![s("1")]], "SELECT 1 after the cancel");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_are_served_while_a_heavy_query_runs() {
    let server = WeirServer::start();
    let heavy = server.connect().await;
    exec(&heavy, "CREATE TABLE tp_heavy (x int4)").await;
    exec(
        &heavy,
        "INSERT INTO tp_heavy SELECT * FROM generate_series(0, 999)",
    )
    .await;
    let token = heavy.cancel_token();
    let running = tokio::spawn(async move {
        heavy
            .query_one(
                "SELECT count(*) FROM tp_heavy a, tp_heavy b, tp_heavy c, tp_heavy d WHERE a.x + b.x + c.x + d.x < 0",
                &[],
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Before execution ran apart from the front ends and yielded, a query
    // like this one held every worker thread: nothing else was answered
    // until it ended, which it never does. The bound is generous; a starved
    // server misses it by far.
    let other = server.connect().await;
    for _ in 0..3 {
        let answered =
            tokio::time::timeout(Duration::from_secs(20), text_rows(&other, "SELECT 1")).await;
        assert!(
            answered.is_ok(),
            "SELECT 1 in another session waited 20 s behind a running cross join\n{}",
            server.log_tail()
        );
    }
    assert!(!running.is_finished(), "the cross join is still running");
    token.cancel_query(NoTls).await.expect("send CancelRequest");
    let outcome = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the cancelled cross join ends")
        .expect("query task");
    assert_eq!(sqlstate(&outcome.expect_err("cancelled")), "57014");
}

// ---- simple query protocol: several statements, empty query ----------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_statements_in_one_simple_query() {
    let server = WeirServer::start();
    let client = server.connect().await;
    let messages = client
        .simple_query(
            "CREATE TABLE tp_multi (a int4); INSERT INTO tp_multi VALUES (1), (2); SELECT sum(a) AS total FROM tp_multi; DELETE FROM tp_multi WHERE a = 1",
        )
        .await
        .unwrap_or_else(|e| panic!("multi-statement query: {e:?}"));
    let summary: Vec<String> = messages
        .iter()
        .map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => format!("complete {n}"),
            SimpleQueryMessage::Row(r) => format!("row {}", r.get(0).unwrap_or("NULL")),
            SimpleQueryMessage::RowDescription(cols) => format!(
                "columns {}",
                cols.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
            ),
            _ => "other".into(),
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            "complete 0",
            "complete 2",
            "columns total",
            "row 3",
            "complete 1",
            "complete 1"
        ],
        "one result per statement, in order"
    );

    // An error stops the string, and the implicit transaction of the string
    // rolls back the statements before it.
    let err = client
        .simple_query(
            "INSERT INTO tp_multi VALUES (10); SELECT 1 / 0; INSERT INTO tp_multi VALUES (11)",
        )
        .await
        .expect_err("division by zero in the middle of the string");
    assert_eq!(sqlstate(&err), "22012", "{err:?}");
    let rows = text_rows(&client, "SELECT a FROM tp_multi ORDER BY a").await;
    assert_eq!(
        rows,
        vec![vec![s("2")]],
        "neither INSERT of the failed string is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_query_gets_empty_query_response() {
    let server = WeirServer::start();
    let client = server.connect().await;
    for sql in ["", " ", ";"] {
        let messages = client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("empty query {sql:?}: {e:?}"));
        assert!(
            messages
                .iter()
                .all(|m| matches!(m, SimpleQueryMessage::CommandComplete(0))),
            "empty query {sql:?} returns no rows"
        );
    }
    // On the wire: EmptyQueryResponse ('I') then ReadyForQuery ('Z').
    let mut raw = RawPg::connect(server.pg_port);
    raw.query("");
    let reply = raw.until_ready();
    assert_eq!(tags(&reply), "IZ", "reply to an empty Query message");
    raw.query("SELECT 1");
    assert_eq!(tags(&raw.until_ready()), "TDCZ", "reply to SELECT 1");
}

// ---- protocol errors ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_with_the_wrong_parameter_count_is_a_protocol_error() {
    let server = WeirServer::start();

    // tokio-postgres checks the count itself before sending.
    let client = server.connect().await;
    let err = client
        .query("SELECT $1::int4 + $2::int4", &[&1i32])
        .await
        .expect_err("one parameter for two placeholders");
    assert!(
        err.to_string().contains("expected 2 parameters but got 1"),
        "client-side parameter count check: {err}"
    );

    // On the wire: Parse "SELECT $1::int4", Bind with no parameters.
    let mut raw = RawPg::connect(server.pg_port);
    let mut parse = b"\0SELECT $1::int4\0".to_vec();
    parse.extend_from_slice(&0i16.to_be_bytes());
    raw.send(b'P', &parse);
    let mut bind = b"\0\0".to_vec();
    bind.extend_from_slice(&0i16.to_be_bytes()); // parameter formats
    bind.extend_from_slice(&0i16.to_be_bytes()); // parameter values
    bind.extend_from_slice(&0i16.to_be_bytes()); // result formats
    raw.send(b'B', &bind);
    raw.send(b'E', b"\0\0\0\0\0");
    raw.send(b'S', b"");
    let reply = raw.until_ready();
    let error = reply.iter().find(|(t, _)| *t == b'E').unwrap_or_else(|| {
        panic!(
            "no ErrorResponse for a Bind with 0 of 1 parameters: {}",
            tags(&reply)
        )
    });
    assert_eq!(
        error_code(&error.1).as_deref(),
        Some("08P01"),
        "Bind with the wrong parameter count: {:?}",
        crate::harness::error_fields(&error.1)
    );
    assert_eq!(
        tags(&reply),
        "1EZ",
        "ParseComplete, ErrorResponse, then ReadyForQuery after Sync"
    );
    // The connection is still usable.
    raw.query("SELECT 1");
    assert_eq!(
        tags(&raw.until_ready()),
        "TDCZ",
        "SELECT 1 after the protocol error"
    );
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_errors_carry_sqlstates_and_do_not_break_the_session() {
    let server = WeirServer::start();
    let client = server.connect().await;
    let err = client
        .prepare("SELECT * FROM tp_nowhere")
        .await
        .expect_err("unknown table");
    assert_eq!(sqlstate(&err), "42P01", "{err:?}");
    let err = client.prepare("SELEKT 1").await.expect_err("syntax error");
    assert_eq!(sqlstate(&err), "42601", "{err:?}");
    {
        let err = client
            .query_one("SELECT 1 / $1::int4", &[&0i32])
            .await
            .expect_err("division by zero at execution");
        assert_eq!(sqlstate(&err), "22012", "{err:?}");
    }
    let rows = text_rows(&client, "SELECT 1").await;
    assert_eq!(rows, vec![vec![s("1")]], "the session works after errors");
}
