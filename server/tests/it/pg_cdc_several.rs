//! Several tables of one PostgreSQL database read through one slot (a
//! shared `postgres-cdc` source and a source relation per table), while
//! a writer's transactions each touch all three tables and Weir is
//! killed with SIGKILL at random moments, the first ones during the
//! snapshots. Each relation ends equal to its upstream table row for
//! row, and no reader ever sees half of an upstream transaction.
//!
//! A source that cannot replay feeds only projections made before it is
//! first read, so one projection copies each table and the checks read
//! the copies; the copies are made one after the other, so the second and
//! third tables join a reader already streaming the first (each is then
//! snapshotted from a fresh exported snapshot while the stream waits).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_postgres::NoTls;

use crate::harness::{eventually, try_rows as rows};
use crate::postgres::PgCluster;
use crate::sources::{
    ROUNDS, Rng, crash_rng, crash_server, kill_and_restart, kill_at_a_random_moment,
    sinks_committed, slot_confirmed_past_now, status_becomes, until_returns, value,
};

const ORDERS: i64 = 20_000;
const CUSTOMERS: i64 = 2_000;

/// Changes the three tables until `stop`, each transaction keeping
/// `orders.total` the sum of the order's lines and `customers.spent` the
/// sum of the customer's orders: a new order with its lines, a line
/// added to an order, or an order deleted with its lines.
async fn write_orders(dsn: String, stop: Arc<AtomicBool>, mut rng: Rng, first: i64) -> u64 {
    let (client, connection) = tokio_postgres::connect(&dsn, NoTls).await.unwrap();
    tokio::spawn(connection);
    let mut next_order = first;
    let mut next_line = 1_000;
    let mut transactions = 0;
    while !stop.load(Ordering::Relaxed) {
        let id = rng.below(next_order as u64);
        let sql = match rng.below(10) {
            0..=5 => {
                let customer = rng.below(CUSTOMERS as u64);
                let lines: Vec<String> = (1..=1 + rng.below(4))
                    .map(|l| format!("{}.{:02}", rng.below(100), rng.below(100) + l))
                    .collect();
                let values: Vec<String> = lines
                    .iter()
                    .enumerate()
                    .map(|(l, a)| format!("({next_order}, {}, {a})", l + 1))
                    .collect();
                let total = lines.join(" + ");
                next_order += 1;
                format!(
                    "INSERT INTO order_lines VALUES {};
                     INSERT INTO orders VALUES ({}, {customer}, {total});
                     UPDATE customers SET spent = spent + ({total}) WHERE id = {customer};",
                    values.join(", "),
                    next_order - 1
                )
            }
            6..=7 => {
                next_line += 1;
                let amount = format!("{}.{:02}", rng.below(50), rng.below(100));
                format!(
                    "INSERT INTO order_lines SELECT {id}, {next_line}, {amount}
                       WHERE EXISTS (SELECT 1 FROM orders WHERE id = {id});
                     UPDATE customers SET spent = spent + {amount}
                       WHERE id = (SELECT customer FROM orders WHERE id = {id});
                     UPDATE orders SET total = total + {amount} WHERE id = {id};"
                )
            }
            _ => format!(
                "WITH gone AS (DELETE FROM orders WHERE id = {id} RETURNING customer, total)
                   UPDATE customers c SET spent = c.spent - g.total FROM gone g WHERE c.id = g.customer;
                 DELETE FROM order_lines WHERE order_id = {id};"
            ),
        };
        client
            .batch_execute(&format!("BEGIN; {sql} COMMIT;"))
            .await
            .expect("an upstream transaction");
        transactions += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    transactions
}

/// Every copy equals its upstream table, row for row.
async fn copies_equal_upstream(upstream: &tokio_postgres::Client, client: &tokio_postgres::Client) {
    for (table, columns) in [
        ("orders", "id, customer, total"),
        ("order_lines", "order_id, line, amount"),
        ("customers", "id, name, spent"),
    ] {
        let want = rows(
            upstream,
            &format!("SELECT {columns} FROM {table} ORDER BY 1, 2"),
        )
        .await
        .unwrap();
        eventually(Duration::from_secs(120), table, || async {
            let got = rows(
                client,
                &format!("SELECT {columns} FROM {table}_copy ORDER BY 1, 2"),
            )
            .await
            .ok()?;
            (got == want).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_tables_of_one_slot_reach_their_relations_exactly_across_kill_9() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute(&format!(
            "CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, spent numeric(14,2) NOT NULL);
             CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint NOT NULL, total numeric(14,2) NOT NULL);
             CREATE TABLE order_lines (order_id bigint, line int, amount numeric(12,2) NOT NULL,
                                       PRIMARY KEY (order_id, line));
             ALTER TABLE customers REPLICA IDENTITY FULL;
             ALTER TABLE orders REPLICA IDENTITY FULL;
             ALTER TABLE order_lines REPLICA IDENTITY FULL;
             INSERT INTO order_lines SELECT o, l, ((o * 7 + l) % 100) + 0.25
               FROM generate_series(0, {ORDERS} - 1) o, generate_series(1, 3) l;
             INSERT INTO orders SELECT order_id, order_id % {CUSTOMERS}, sum(amount)
               FROM order_lines GROUP BY order_id;
             INSERT INTO customers SELECT c, 'c' || c,
                 coalesce((SELECT sum(total) FROM orders WHERE customer = c), 0)
               FROM generate_series(0, {CUSTOMERS} - 1) c;"
        ))
        .await
        .unwrap();
    let dsn = pg.dsn();
    let mut rng = crash_rng(0x5EC7);
    let mut server = crash_server();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE shop WITH (connector = 'postgres-cdc', dsn = '{dsn}',
                 slot = 'weir_shop', snapshot_batch_rows = '300');
             CREATE SOURCE orders FROM shop TABLE 'public.orders';
             CREATE SOURCE order_lines FROM shop TABLE 'order_lines';
             CREATE SOURCE customers FROM shop TABLE 'public.customers';
             CREATE PROJECTION orders_copy AS SELECT id, customer, total FROM orders;
             CREATE PROJECTION order_lines_copy AS SELECT order_id, line, amount FROM order_lines;
             CREATE PROJECTION customers_copy AS SELECT id, name, spent FROM customers;
             CREATE PROJECTION torn AS
               SELECT o.id FROM orders_copy o
                 LEFT JOIN (SELECT order_id, sum(amount) AS s FROM order_lines_copy GROUP BY order_id) l
                 ON l.order_id = o.id
               WHERE l.s IS NULL OR o.total <> l.s;
             CREATE PROJECTION unbalanced AS
               SELECT c.id FROM customers_copy c
                 LEFT JOIN (SELECT customer, sum(total) AS t FROM orders_copy GROUP BY customer) o
                 ON o.customer = c.id
               WHERE c.spent <> coalesce(o.t, 0);
             CREATE PROJECTION per_customer AS
               SELECT c.id, c.name, count(*) AS n, sum(o.total) AS total
               FROM customers_copy c JOIN orders_copy o ON o.customer = c.id GROUP BY c.id, c.name;
             CREATE DESTINATION per_customer_pg FROM per_customer
               INTO postgres (dsn = '{dsn}', table = 'per_customer_copy') KEY (id);"
        ))
        .await
        .expect("setup");
    drop(client);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_orders(
        dsn.clone(),
        stop.clone(),
        crash_rng(0xBEEF),
        ORDERS,
    ));
    let mut midway = None;
    for round in 0..ROUNDS {
        // Early kills land in the snapshots; later ones in the stream.
        kill_at_a_random_moment(&mut server, &mut rng, 100 + 60 * round, round).await;
        if round == ROUNDS / 2 {
            midway = Some(value(&upstream, "SELECT pg_current_wal_lsn()::text").await);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    assert!(
        transactions > 100,
        "only {transactions} upstream transactions"
    );
    let client = server.connect().await;
    copies_equal_upstream(&upstream, &client).await;

    // Caught up: from now on every read sees whole upstream transactions,
    // each of which touches all three tables.
    let first = 10 * ORDERS;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_orders(
        dsn.clone(),
        stop.clone(),
        crash_rng(0xFEED),
        first,
    ));
    for _ in 0..60 {
        for check in ["torn", "unbalanced"] {
            let seen = rows(&client, &format!("SELECT id FROM {check} ORDER BY id"))
                .await
                .unwrap();
            assert!(
                seen.is_empty(),
                "{check} saw part of an upstream transaction: {seen:?}\n{}",
                server.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    copies_equal_upstream(&upstream, &client).await;

    let want = rows(
        &upstream,
        "SELECT c.id, c.name, count(*), sum(o.total) FROM customers c JOIN orders o
           ON o.customer = c.id GROUP BY c.id, c.name ORDER BY 1",
    )
    .await
    .unwrap();
    sinks_committed(&client).await;
    let copied = rows(
        &upstream,
        "SELECT id, name, n, total FROM per_customer_copy ORDER BY 1",
    )
    .await
    .unwrap();
    assert_eq!(copied, want, "{}", server.log_tail());

    // One slot, confirmed past the middle of the run; no temporary slot
    // of a resumed snapshot left behind.
    let midway = midway.unwrap();
    until_returns(
        &upstream,
        &format!(
            "SELECT string_agg(slot_name || ':' || (confirmed_flush_lsn >= '{midway}'::pg_lsn)::text, ',')
             FROM pg_replication_slots"
        ),
        "weir_shop:true",
    )
    .await;
    // Weir's own publication lists exactly the three tables.
    assert_eq!(
        value(
            &upstream,
            "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables
             WHERE pubname = 'weir_shop'"
        )
        .await,
        "customers,order_lines,orders"
    );

    // Dropping the shared source with its tables lets slot and publication go.
    client
        .batch_execute(
            "DROP DESTINATION per_customer_pg;
             DROP PROJECTION torn; DROP PROJECTION unbalanced; DROP PROJECTION per_customer;
             DROP PROJECTION orders_copy; DROP PROJECTION order_lines_copy;
             DROP PROJECTION customers_copy;
             DROP SOURCE shop CASCADE",
        )
        .await
        .unwrap();
    until_returns(&upstream, "SELECT count(*) FROM pg_replication_slots", "0").await;
    until_returns(
        &upstream,
        "SELECT count(*) FROM pg_publication WHERE pubname = 'weir_shop'",
        "0",
    )
    .await;
}

/// `SELECT id, v FROM {copy} ORDER BY id` in Weir equals `SELECT id, v
/// FROM {table} ORDER BY id` upstream, eventually.
async fn copy_equals(
    upstream: &tokio_postgres::Client,
    client: &tokio_postgres::Client,
    table: &str,
    copy: &str,
) {
    let want = rows(upstream, &format!("SELECT id, v FROM {table} ORDER BY id"))
        .await
        .unwrap();
    eventually(Duration::from_secs(60), copy, || async {
        let got = rows(client, &format!("SELECT id, v FROM {copy} ORDER BY id"))
            .await
            .ok()?;
        (got == want).then_some(())
    })
    .await;
}

/// One table truncated and another dropped and created again upstream:
/// each fails alone (`failed`, `gap`), sealed so a kill -9 keeps them so,
/// while the third table, the shared source and the slot go on. The gap
/// is accepted through a destination and that table is read on. Then an
/// idle source still lets the slot's position go past the WAL others write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_breaks_fails_alone_and_the_slot_moves_on() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    let mut setup = String::new();
    for t in ["a", "b", "c"] {
        setup.push_str(&format!(
            "CREATE TABLE {t} (id bigint PRIMARY KEY, v bigint NOT NULL);
             ALTER TABLE {t} REPLICA IDENTITY FULL;
             INSERT INTO {t} SELECT i, i * 10 FROM generate_series(1, 100) i;"
        ));
    }
    upstream.batch_execute(&setup).await.unwrap();
    let dsn = pg.dsn();
    let mut server = crash_server();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE shop WITH (connector = 'postgres-cdc', dsn = '{dsn}', slot = 'weir_parts');
             CREATE SOURCE a FROM shop TABLE 'a';
             CREATE SOURCE b FROM shop TABLE 'b';
             CREATE SOURCE c FROM shop TABLE 'c';
             CREATE PROJECTION a_copy AS SELECT id, v FROM a;
             CREATE PROJECTION b_copy AS SELECT id, v FROM b;
             CREATE PROJECTION c_copy AS SELECT id, v FROM c;
             CREATE DESTINATION c_pg FROM c_copy
               INTO postgres (dsn = '{dsn}', table = 'c_mirror') KEY (id);"
        ))
        .await
        .expect("setup");
    for t in ["a", "b", "c"] {
        copy_equals(&upstream, &client, t, &format!("{t}_copy")).await;
    }

    upstream
        .batch_execute(
            "TRUNCATE b;
             DROP TABLE c;
             CREATE TABLE c (id bigint PRIMARY KEY, v bigint NOT NULL);
             ALTER TABLE c REPLICA IDENTITY FULL;
             INSERT INTO c VALUES (1000, 1);
             INSERT INTO a SELECT i, i FROM generate_series(101, 150) i;
             UPDATE a SET v = v + 1 WHERE id <= 10;",
        )
        .await
        .unwrap();
    let b = status_becomes(&client, "sources", "b", "failed").await;
    assert!(b.contains("truncated"), "{b}");
    let c = status_becomes(&client, "sources", "c", "gap").await;
    assert!(c.contains("created again"), "{c}");
    until_returns(
        &client,
        "SELECT status FROM weir_catalog.destinations WHERE name = 'c_pg'",
        "blocked_by_gap",
    )
    .await;
    copy_equals(&upstream, &client, "a", "a_copy").await;
    assert_eq!(
        value(
            &client,
            "SELECT status FROM weir_catalog.sources WHERE name = 'shop'"
        )
        .await,
        "running"
    );
    // The slot moves on past the failures.
    slot_confirmed_past_now(&upstream, "weir_parts").await;

    // Sealed: a start reports both failures again, and a reads on.
    let client = kill_and_restart(&mut server, "after the failures").await;
    upstream
        .batch_execute("INSERT INTO a VALUES (151, 1); DELETE FROM a WHERE id = 2;")
        .await
        .unwrap();
    copy_equals(&upstream, &client, "a", "a_copy").await;
    assert!(
        status_becomes(&client, "sources", "b", "failed")
            .await
            .contains("truncated")
    );
    assert!(
        status_becomes(&client, "sources", "c", "gap")
            .await
            .contains("created again")
    );

    // The gap accepted: c reads on from the table there is now (its rows
    // from before are the gap), b stays failed.
    client
        .batch_execute("ALTER DESTINATION c_pg ACCEPT GAP")
        .await
        .unwrap();
    status_becomes(&client, "sources", "c", "running").await;
    // Changes before the reader has the table there is now in its
    // publication are part of the gap too.
    until_returns(
        &upstream,
        "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'weir_parts' AND tablename = 'c'",
        "1",
    )
    .await;
    upstream
        .batch_execute("INSERT INTO c VALUES (1001, 2); UPDATE c SET v = 3 WHERE id = 1001;")
        .await
        .unwrap();
    eventually(Duration::from_secs(60), "c read on", || async {
        let got = value(
            &client,
            "SELECT string_agg(v::text, ',') FROM c_copy WHERE id = 1001",
        )
        .await;
        (got == "3").then_some(())
    })
    .await;
    until_returns(
        &client,
        "SELECT status FROM weir_catalog.destinations WHERE name = 'c_pg'",
        "running",
    )
    .await;
    assert_eq!(
        value(
            &client,
            "SELECT status FROM weir_catalog.sources WHERE name = 'b'"
        )
        .await,
        "failed"
    );

    // Idle: nothing the source reads changes, but the database writes on
    // (another table). Keepalives move the slot's confirmed position past
    // that WAL, so upstream can recycle it.
    upstream
        .batch_execute(
            "CREATE TABLE elsewhere (x bigint);
             INSERT INTO elsewhere SELECT generate_series(1, 10000);",
        )
        .await
        .unwrap();
    slot_confirmed_past_now(&upstream, "weir_parts").await;
}
