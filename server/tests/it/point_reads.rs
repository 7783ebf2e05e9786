//! Primary-key access: scans narrowed by key equality, IN lists and ranges,
//! and prepared point queries answered by a key lookup without planning.
//! Each must give exactly what the same query gives over the whole table,
//! so every check compares against a form the key path cannot take
//! (`id + 0 = ...`), after random writes, inside and outside transactions.

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use crate::harness::{WeirServer, try_rows};
use crate::projections_diff::Rng;
use crate::tokio_pg::exec;

async fn sorted_text(client: &Client, sql: &str) -> Vec<String> {
    try_rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("`{sql}` failed: {e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_scans_equal_full_scans_after_random_writes() {
    let server = WeirServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE TABLE kv (id BIGINT PRIMARY KEY, v TEXT);
         CREATE TABLE pair (a INT, b TEXT, n BIGINT, PRIMARY KEY (a, b))",
    )
    .await;
    let mut rng = Rng::new(7);
    let mut below = |n: i64| rng.below(n as u64) as i64;
    for round in 0..6 {
        // Random inserts, updates and deletes by key, through both the
        // key path (prepared, by id) and statements it does not take.
        let upsert = client
            .prepare("UPDATE kv SET v = $2 WHERE id = $1")
            .await
            .unwrap();
        let delete = client
            .prepare("DELETE FROM kv WHERE id = $1")
            .await
            .unwrap();
        for _ in 0..40 {
            let id = below(200);
            match below(4) {
                0 | 1 => {
                    // A duplicate key fails the insert; the table is unchanged.
                    let _ = client
                        .execute(
                            "INSERT INTO kv VALUES ($1, $2)",
                            &[&id, &format!("r{round}-{id}")],
                        )
                        .await;
                }
                2 => {
                    client
                        .execute(&upsert, &[&id, &format!("u{round}-{id}")])
                        .await
                        .unwrap();
                }
                _ => {
                    client.execute(&delete, &[&id]).await.unwrap();
                }
            }
            let (a, b) = (below(5) as i32, ["x", "y", "z"][below(3) as usize]);
            let _ = client
                .execute("INSERT INTO pair VALUES ($1, $2, $3)", &[&a, &b, &id])
                .await;
        }
        // Scans the planner narrows, against the same predicate on `id + 0`.
        for _ in 0..12 {
            let (x, y) = (below(220) - 10, below(220) - 10);
            let (lo, hi) = (x.min(y), x.max(y));
            let list = format!("{x}, {y}, {}", below(200));
            for (keyed, full) in [
                (format!("id = {x}"), format!("id + 0 = {x}")),
                (format!("id IN ({list})"), format!("id + 0 IN ({list})")),
                (format!("id > {lo}"), format!("id + 0 > {lo}")),
                (
                    format!("id >= {lo} AND id < {hi}"),
                    format!("id + 0 >= {lo} AND id + 0 < {hi}"),
                ),
                (
                    format!("id BETWEEN {lo} AND {hi} AND id <= {x}"),
                    format!("id + 0 BETWEEN {lo} AND {hi} AND id + 0 <= {x}"),
                ),
                (
                    format!("id > {hi} AND id < {lo}"),
                    format!("id + 0 > {hi} AND id + 0 < {lo}"),
                ),
                (
                    format!("id = {x} AND v LIKE 'u%'"),
                    format!("id + 0 = {x} AND v LIKE 'u%'"),
                ),
                (
                    format!("id = 2.5 OR id = {x}"),
                    format!("id + 0 = 2.5 OR id + 0 = {x}"),
                ),
            ] {
                assert_eq!(
                    sorted_text(&client, &format!("SELECT * FROM kv WHERE {keyed}")).await,
                    sorted_text(&client, &format!("SELECT * FROM kv WHERE {full}")).await,
                    "WHERE {keyed}"
                );
            }
            let a = below(6);
            for (keyed, full) in [
                (
                    format!("a = {a} AND b = 'y'"),
                    format!("a + 0 = {a} AND b = 'y'"),
                ),
                (
                    format!("a IN ({a}, 1) AND b IN ('x', 'z')"),
                    format!("a + 0 IN ({a}, 1) AND b IN ('x', 'z')"),
                ),
                (format!("a = {a}"), format!("a + 0 = {a}")),
            ] {
                assert_eq!(
                    sorted_text(&client, &format!("SELECT * FROM pair WHERE {keyed}")).await,
                    sorted_text(&client, &format!("SELECT * FROM pair WHERE {full}")).await,
                    "WHERE {keyed}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_point_queries_read_the_statements_snapshot() {
    let server = WeirServer::start();
    let client = server.connect().await;
    let other = server.connect().await;
    exec(
        &client,
        "CREATE TABLE kv (id BIGINT PRIMARY KEY, v TEXT);
         INSERT INTO kv VALUES (1, 'one'), (2, 'two'), (3, NULL);
         CREATE TABLE pair (a INT, b TEXT, n BIGINT, PRIMARY KEY (a, b));
         INSERT INTO pair VALUES (1, 'x', 10), (1, 'y', 11), (2, 'x', 20)",
    )
    .await;
    let get = client
        .prepare("SELECT v, id FROM kv WHERE id = $1")
        .await
        .unwrap();
    let value = |rows: Vec<tokio_postgres::Row>| -> Vec<(Option<String>, i64)> {
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    // Run each twice: the first execution is planned, later ones look up.
    for _ in 0..2 {
        assert_eq!(
            value(client.query(&get, &[&1i64]).await.unwrap()),
            [(Some("one".into()), 1)]
        );
        assert_eq!(
            value(client.query(&get, &[&3i64]).await.unwrap()),
            [(None, 3)]
        );
        assert!(client.query(&get, &[&9i64]).await.unwrap().is_empty());
        assert!(
            client
                .query(&get, &[&None::<i64>])
                .await
                .unwrap()
                .is_empty()
        );
    }
    // Those executions after the first were key lookups, not plans.
    let lookups = || {
        let body = crate::http::http_get(server.http_port, "/metrics")
            .expect("GET /metrics")
            .body;
        crate::http::metric_value(&body, "weir_point_lookups_total").unwrap_or(0.0)
    };
    let before = lookups();
    assert!(before >= 4.0, "{before} point lookups, expected at least 4");
    client.query(&get, &[&2i64]).await.unwrap();
    assert_eq!(lookups(), before + 1.0);
    // Another session's committed write is seen by the next execution.
    exec(&other, "UPDATE kv SET v = 'uno' WHERE id = 1").await;
    assert_eq!(
        value(client.query(&get, &[&1i64]).await.unwrap()),
        [(Some("uno".into()), 1)]
    );
    // Inside a transaction: its own writes, and not others' later ones.
    exec(&client, "BEGIN; UPDATE kv SET v = 'mine' WHERE id = 2").await;
    exec(&other, "UPDATE kv SET v = 'theirs' WHERE id = 1").await;
    assert_eq!(
        value(client.query(&get, &[&2i64]).await.unwrap()),
        [(Some("mine".into()), 2)]
    );
    assert_eq!(
        value(client.query(&get, &[&1i64]).await.unwrap()),
        [(Some("uno".into()), 1)]
    );
    exec(&client, "DELETE FROM kv WHERE id = 2").await;
    assert!(client.query(&get, &[&2i64]).await.unwrap().is_empty());
    exec(&client, "ROLLBACK").await;
    assert_eq!(
        value(client.query(&get, &[&2i64]).await.unwrap()),
        [(Some("two".into()), 2)]
    );
    // A failed block refuses the lookup as it refuses any statement.
    exec(&client, "BEGIN").await;
    assert!(
        client
            .simple_query("SELECT * FROM no_such_table")
            .await
            .is_err()
    );
    let err = client.query(&get, &[&1i64]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    exec(&client, "ROLLBACK").await;
    // The search path picks the table: a lookup remembered under one path
    // is not used under another, though the catalog is the same.
    exec(
        &client,
        "CREATE SCHEMA shadow; CREATE TABLE shadow.kv (id BIGINT PRIMARY KEY, v TEXT);
         INSERT INTO shadow.kv VALUES (1, 'shadowed')",
    )
    .await;
    for (path, seen) in [
        ("public", "theirs"),
        ("shadow, public", "shadowed"),
        ("public", "theirs"),
    ] {
        exec(&client, &format!("SET search_path = {path}")).await;
        for _ in 0..2 {
            assert_eq!(
                value(client.query(&get, &[&1i64]).await.unwrap()),
                [(Some(seen.into()), 1)],
                "search_path {path}"
            );
        }
    }
    // A composite key, a literal in the key, and a key compared across types.
    let pair = client
        .prepare("SELECT n FROM pair WHERE b = $2 AND a = $1")
        .await
        .unwrap();
    for _ in 0..2 {
        let rows = client.query(&pair, &[&1i32, &"y"]).await.unwrap();
        assert_eq!(rows.iter().map(|r| r.get(0)).collect::<Vec<i64>>(), [11]);
        assert!(
            client
                .query(&pair, &[&2i32, &"y"])
                .await
                .unwrap()
                .is_empty()
        );
    }
    let literal = client
        .prepare("SELECT n FROM pair WHERE a = $1 AND b = 'x'")
        .await
        .unwrap();
    for _ in 0..2 {
        let rows = client.query(&literal, &[&2i32]).await.unwrap();
        assert_eq!(rows.iter().map(|r| r.get(0)).collect::<Vec<i64>>(), [20]);
    }
    let wide = client
        .prepare("SELECT n FROM pair WHERE a = $1::int8 AND b = $2")
        .await
        .unwrap();
    for _ in 0..2 {
        let rows = client.query(&wide, &[&1i64, &"x"]).await.unwrap();
        assert_eq!(rows.iter().map(|r| r.get(0)).collect::<Vec<i64>>(), [10]);
        assert!(
            client
                .query(&wide, &[&(1i64 << 40), &"x"])
                .await
                .unwrap()
                .is_empty()
        );
    }
    // DDL in between: a table of the same name is a different table.
    exec(
        &client,
        "DROP TABLE kv; CREATE TABLE kv (id BIGINT PRIMARY KEY, v TEXT); INSERT INTO kv VALUES (1, 'new')",
    )
    .await;
    assert_eq!(
        value(client.query(&get, &[&1i64]).await.unwrap()),
        [(Some("new".into()), 1)]
    );
}
