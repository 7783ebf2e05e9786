//! APPEND ONLY tables with `WATERMARK FOR`: windows over them close as
//! rows are inserted (out of order within the delay), late rows are
//! dropped and counted, the watermark survives `kill -9`, and writes that
//! would change a row are refused.

use std::time::Duration;

use crate::harness::{WeirServer, eventually, try_rows as rows};
use crate::sources::{error_of, kill_and_restart, until_returns, value};

/// `(id, seconds after 2024-01-01 00:00:00)` rows as VALUES.
fn at(rows: &[(i64, i64)]) -> String {
    let values: Vec<String> = rows
        .iter()
        .map(|(id, s)| format!("({id}, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{s} seconds')"))
        .collect();
    format!("INSERT INTO clicks VALUES {}", values.join(", "))
}

/// Waits until the latest epoch that changed `per10` is sealed.
async fn sealed(client: &tokio_postgres::Client) {
    client.batch_execute("FLUSH").await.unwrap();
    let changed: i64 = value(
        client,
        "SELECT last_epoch FROM weir_catalog.projections WHERE name = 'per10'",
    )
    .await
    .parse()
    .unwrap();
    eventually(Duration::from_secs(60), "a seal", || async {
        let sealed: i64 = value(
            client,
            "SELECT coalesce(max(epoch), 0) FROM weir_catalog.epochs",
        )
        .await
        .parse()
        .unwrap_or(0);
        (sealed >= changed).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_over_an_append_only_table_close_on_its_watermark_across_kill_9() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE clicks (id BIGINT, ts TIMESTAMP,
                 WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY;
             CREATE PROJECTION per10 AS
               SELECT window_start, count(*) AS n, sum(id) AS ids
               FROM TUMBLE(clicks, ts, INTERVAL '10' SECOND) GROUP BY window_start
             EMIT ON WINDOW CLOSE;",
        )
        .await
        .expect("table and projection");
    let shown = value(&client, "SHOW CREATE TABLE clicks").await;
    let shown = shown
        .split_once('|')
        .map_or(shown.as_str(), |(_, s)| s)
        .to_string();
    assert!(
        shown.ends_with("WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY"),
        "{shown}"
    );
    // SHOW CREATE TABLE reads back as the same table.
    client
        .batch_execute(&shown.replace("CREATE TABLE clicks", "CREATE TABLE copy"))
        .await
        .expect(&shown);

    // Out of order within 5 s: the watermark reaches 20 s, closing
    // [0, 10) and [10, 20).
    client
        .batch_execute(&at(&[
            (1, 3),
            (2, 1),
            (3, 8),
            (4, 0),
            (5, 12),
            (6, 11),
            (7, 19),
            (8, 25),
        ]))
        .await
        .unwrap();
    let first_two = vec![
        "2024-01-01 00:00:00|4|10".to_string(),
        "2024-01-01 00:00:10|3|18".to_string(),
    ];
    eventually(Duration::from_secs(60), "two windows closed", || async {
        (rows(&client, "SELECT * FROM per10")
            .await
            .unwrap_or_default()
            == first_two)
            .then_some(())
    })
    .await;
    // 5 s is behind the watermark: late, never folded into [0, 10).
    client
        .batch_execute(&at(&[(9, 5), (10, 41)]))
        .await
        .unwrap();
    until_returns(
        &client,
        "SELECT late_rows FROM weir_catalog.projections WHERE name = 'per10'",
        "1",
    )
    .await;
    // 41 s moved the watermark to 36 s: [20, 30) closed with its one row.
    until_returns(&client, "SELECT count(*), sum(n) FROM per10", "3|8").await;
    sealed(&client).await;

    let client = kill_and_restart(&mut server, "after the watermark moved").await;
    // The watermark (36 s) survived: [20, 30) stays closed, so 25 s is
    // late (it would emit that window a second time otherwise).
    client
        .batch_execute(&at(&[(11, 25), (12, 37), (13, 70)]))
        .await
        .unwrap();
    // 70 s moves it to 65 s: [30, 40) closes with 37 s alone, [40, 50)
    // with 41 s.
    until_returns(&client, "SELECT count(*), sum(n) FROM per10", "5|10").await;
    assert_eq!(
        value(
            &client,
            "SELECT n, ids FROM per10 WHERE window_start = '2024-01-01 00:00:30'"
        )
        .await,
        "1|12"
    );
    until_returns(
        &client,
        "SELECT late_rows FROM weir_catalog.projections WHERE name = 'per10'",
        "1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_only_table_refuses_writes_that_change_rows() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE log (id BIGINT PRIMARY KEY, v TEXT) APPEND ONLY;
             INSERT INTO log VALUES (1, 'a'), (2, 'b');
             INSERT INTO log VALUES (1, 'x') ON CONFLICT DO NOTHING;",
        )
        .await
        .expect("inserts");
    for sql in [
        "UPDATE log SET v = 'c' WHERE id = 1",
        "DELETE FROM log WHERE id = 2",
        "TRUNCATE log",
        "INSERT INTO log VALUES (1, 'd') ON CONFLICT (id) DO UPDATE SET v = excluded.v",
    ] {
        let (code, message) = error_of(&client, sql).await;
        assert_eq!(code, "0A000", "{sql}: {message}");
        assert!(message.contains("APPEND ONLY"), "{sql}: {message}");
    }
    assert_eq!(
        rows(&client, "SELECT * FROM log").await.unwrap(),
        vec!["1|a", "2|b"]
    );
    let (code, message) = error_of(
        &client,
        "CREATE TABLE w (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("needs APPEND ONLY"), "{message}");
    let (code, message) = error_of(
        &client,
        "CREATE TABLE w (n INT, WATERMARK FOR n AS n - 1) APPEND ONLY",
    )
    .await;
    assert_eq!(code, "42804", "{message}");
}
