//! tokio-postgres against `weir` for the protocol features beyond plain
//! queries: server-side cursors (DECLARE / FETCH / MOVE / CLOSE), binary
//! COPY in and out, and statements after `COPY FROM STDIN` in one query
//! string.

use bytes::Bytes;
use chrono::NaiveDate;
use futures::{SinkExt, StreamExt, pin_mut};
use tokio_postgres::types::Type;

use crate::harness::{RawPg, WeirServer, sqlstate, tags};
use crate::pgcodec::Numeric;
use crate::tokio_pg::{exec, s, text_rows};

// ---- server-side cursors ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_declare_fetch_move_and_close_inside_transactions() {
    let server = WeirServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE TABLE tp_cur (id int4 PRIMARY KEY, v text)").await;
    exec(
        &client,
        "INSERT INTO tp_cur SELECT x, 'v' || x FROM generate_series(1, 10) t(x)",
    )
    .await;

    let err = client
        .simple_query("DECLARE c CURSOR FOR SELECT id FROM tp_cur")
        .await
        .expect_err("DECLARE outside a transaction block");
    assert_eq!(sqlstate(&err), "25P01", "{err:?}");

    exec(&client, "BEGIN").await;
    exec(
        &client,
        "DECLARE c SCROLL CURSOR FOR SELECT id FROM tp_cur ORDER BY id",
    )
    .await;
    let ids = |rows: Vec<Vec<Option<String>>>| -> Vec<String> {
        rows.into_iter()
            .map(|r| r[0].clone().expect("id"))
            .collect()
    };
    assert_eq!(
        ids(text_rows(&client, "FETCH 3 FROM c").await),
        ["1", "2", "3"]
    );
    assert_eq!(ids(text_rows(&client, "FETCH NEXT FROM c").await), ["4"]);
    assert_eq!(
        ids(text_rows(&client, "FETCH BACKWARD 2 FROM c").await),
        ["3", "2"]
    );
    let moved = client
        .execute("MOVE FORWARD 5 IN c", &[])
        .await
        .expect("MOVE");
    assert_eq!(moved, 5, "MOVE reports the rows it passed");
    assert_eq!(
        ids(text_rows(&client, "FETCH ALL FROM c").await),
        ["8", "9", "10"]
    );
    assert!(
        text_rows(&client, "FETCH NEXT FROM c").await.is_empty(),
        "past the end"
    );
    assert_eq!(
        ids(text_rows(&client, "FETCH ABSOLUTE 1 FROM c").await),
        ["1"]
    );

    // The extended protocol: FETCH is described with the cursor's columns.
    let rows = client
        .query("FETCH FORWARD 2 FROM c", &[])
        .await
        .expect("FETCH through the extended protocol");
    let got: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![2, 3]);

    // A cursor with a parameter, declared through the extended protocol.
    client
        .execute(
            "DECLARE p NO SCROLL CURSOR FOR SELECT v FROM tp_cur WHERE id > $1 ORDER BY id",
            &[&7i32],
        )
        .await
        .expect("DECLARE with a parameter");
    assert_eq!(
        text_rows(&client, "FETCH ALL FROM p").await,
        vec![vec![s("v8")], vec![s("v9")], vec![s("v10")]]
    );
    let err = client
        .simple_query("FETCH PRIOR FROM p")
        .await
        .expect_err("NO SCROLL cursor moving backward");
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    exec(&client, "ROLLBACK").await;

    // Cursors without WITH HOLD end with their transaction; WITH HOLD ones stay.
    exec(
        &client,
        "BEGIN; DECLARE gone CURSOR FOR SELECT 1; DECLARE kept CURSOR WITH HOLD FOR SELECT id FROM tp_cur ORDER BY id; COMMIT",
    )
    .await;
    let err = client
        .simple_query("FETCH 1 FROM gone")
        .await
        .expect_err("cursor of a committed transaction");
    assert_eq!(sqlstate(&err), "34000", "{err:?}");
    assert_eq!(
        ids(text_rows(&client, "FETCH 2 FROM kept").await),
        ["1", "2"]
    );
    let err = client
        .simple_query("BEGIN; DECLARE kept CURSOR FOR SELECT 1")
        .await
        .expect_err("duplicate cursor name");
    assert_eq!(sqlstate(&err), "42P03", "{err:?}");
    exec(&client, "ROLLBACK").await;
    exec(&client, "CLOSE kept").await;
    let err = client
        .simple_query("CLOSE kept")
        .await
        .expect_err("closing a closed cursor");
    assert_eq!(sqlstate(&err), "34000", "{err:?}");
    exec(&client, "CLOSE ALL").await;
}

// ---- binary COPY ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_copy_in_and_out_round_trips_typed_values() {
    use tokio_postgres::binary_copy::{BinaryCopyInWriter, BinaryCopyOutStream};

    let server = WeirServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE TABLE tp_bcopy (id int4 PRIMARY KEY, amount numeric(8,2), at date, u uuid, tags text[], note text)",
    )
    .await;
    let sink = client
        .copy_in("COPY tp_bcopy FROM STDIN (FORMAT BINARY)")
        .await
        .unwrap_or_else(|e| panic!("COPY FROM STDIN (FORMAT BINARY): {e:?}"));
    let types = [
        Type::INT4,
        Type::NUMERIC,
        Type::DATE,
        Type::UUID,
        Type::TEXT_ARRAY,
        Type::TEXT,
    ];
    let writer = BinaryCopyInWriter::new(sink, &types);
    pin_mut!(writer);
    let day = NaiveDate::from_ymd_opt(2024, 2, 29).unwrap();
    let id = uuid::Uuid::parse_str("123e4567-e89b-12d3-a456-426614174000").unwrap();
    let tags_value = vec!["a b".to_string(), "c".to_string()];
    writer
        .as_mut()
        .write(&[
            &1i32,
            &Numeric("1.50".into()),
            &day,
            &id,
            &tags_value,
            &"tab\there",
        ])
        .await
        .expect("write row 1");
    writer
        .as_mut()
        .write(&[
            &2i32,
            &None::<Numeric>,
            &None::<NaiveDate>,
            &None::<uuid::Uuid>,
            &None::<Vec<String>>,
            &None::<String>,
        ])
        .await
        .expect("write row 2");
    let copied = writer.finish().await.expect("finish binary COPY");
    assert_eq!(copied, 2, "COPY 2");
    assert_eq!(
        text_rows(&client, "SELECT * FROM tp_bcopy ORDER BY id").await,
        vec![
            vec![
                s("1"),
                s("1.50"),
                s("2024-02-29"),
                s("123e4567-e89b-12d3-a456-426614174000"),
                s("{\"a b\",c}"),
                s("tab\there"),
            ],
            vec![s("2"), None, None, None, None, None],
        ]
    );

    let stream = client
        .copy_out("COPY (SELECT id, at, note FROM tp_bcopy ORDER BY id) TO STDOUT (FORMAT BINARY)")
        .await
        .unwrap_or_else(|e| panic!("COPY TO STDOUT (FORMAT BINARY): {e:?}"));
    let rows: Vec<_> = BinaryCopyOutStream::new(stream, &[Type::INT4, Type::DATE, Type::TEXT])
        .map(|r| r.expect("binary COPY row"))
        .collect()
        .await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].get::<i32>(0), 1);
    assert_eq!(rows[0].get::<NaiveDate>(1), day);
    assert_eq!(rows[0].get::<&str>(2), "tab\there");
    assert_eq!(rows[1].get::<Option<NaiveDate>>(1), None);

    // Malformed data loads nothing and names the problem (22P04).
    let sink = client
        .copy_in("COPY tp_bcopy (id) FROM STDIN (FORMAT BINARY)")
        .await
        .expect("COPY FROM STDIN (FORMAT BINARY)");
    pin_mut!(sink);
    sink.send(Bytes::from_static(
        b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0\0\x01\0\0\0\x04\0\0",
    ))
    .await
    .expect("send");
    let err = sink.finish().await.expect_err("truncated binary data");
    assert_eq!(sqlstate(&err), "22P04", "{err:?}");
    let err = client
        .simple_query("COPY tp_bcopy FROM STDIN (FORMAT BINARY, DELIMITER ',')")
        .await
        .expect_err("DELIMITER in BINARY mode");
    assert_eq!(sqlstate(&err), "42601", "{err:?}");
}

// ---- statements after COPY FROM STDIN ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_after_copy_from_stdin_run_after_its_data() {
    let server = WeirServer::start();
    let port = server.pg_port;
    tokio::task::spawn_blocking(move || {
        let mut raw = RawPg::connect(port);
        raw.query("CREATE TABLE tp_after (id int4 PRIMARY KEY)");
        raw.until_ready();
        raw.query(
            "INSERT INTO tp_after VALUES (1); COPY tp_after FROM STDIN; SELECT count(*) FROM tp_after",
        );
        let first = [raw.recv(), raw.recv()];
        assert_eq!(tags(&first), "CG", "INSERT completes, then CopyInResponse");
        raw.send(b'd', b"2\n3\n");
        raw.send(b'c', b"");
        let rest = raw.until_ready();
        assert_eq!(tags(&rest), "CTDCZ", "COPY, then the SELECT's rows: {rest:?}");
        assert_eq!(&rest[2].1[6..], b"3", "the SELECT after the COPY sees its rows");
        assert_eq!(rest[4].1, b"I", "the string's transaction committed");

        // A failed COPY skips the rest of the string and rolls it back.
        raw.query("INSERT INTO tp_after VALUES (9); COPY tp_after FROM STDIN; INSERT INTO tp_after VALUES (10)");
        let first = [raw.recv(), raw.recv()];
        assert_eq!(tags(&first), "CG");
        raw.send(b'd', b"not-a-number\n");
        raw.send(b'c', b"");
        let rest = raw.until_ready();
        assert_eq!(tags(&rest), "EZ", "{rest:?}");
        raw.query("SELECT count(*) FROM tp_after");
        let rows = raw.until_ready();
        assert_eq!(tags(&rows), "TDCZ");
        assert_eq!(&rows[1].1[6..], b"3", "nothing of the failed string was kept");
    })
    .await
    .expect("raw protocol checks");
}
