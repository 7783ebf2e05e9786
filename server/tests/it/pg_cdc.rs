//! The `postgres-cdc` source against a throwaway PostgreSQL 15
//! (`wal_level = logical`): what CREATE SOURCE checks upstream, and a
//! table changed by inserts, updates (the key too) and deletes throughout,
//! read into a projection that a `postgres` sink writes back, while Weir
//! is killed with SIGKILL at random moments, the first ones during the
//! snapshot. At the end the projection, the sink's table and a
//! destination's table all equal the same query run upstream: every
//! change applied exactly once. And a dropped slot: a gap that blocks a
//! destination until it is accepted, after which the source goes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_postgres::NoTls;

use crate::harness::{WeirServer, eventually, try_rows as rows};
use crate::postgres::{PgAndWeir, PgCluster, pg_and_weir};
use crate::sources::{
    ROUNDS, Rng, crash_rng, crash_server, error_of, kill_at_a_random_moment, sinks_committed,
    slot_confirmed_past, status_becomes, until_returns, value,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_cdc_source_is_checked_against_the_upstream_at_create() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute(
            "CREATE TABLE no_key (a bigint);
             CREATE TABLE plain (id bigint PRIMARY KEY, v text);
             CREATE TABLE full_rows (id bigint PRIMARY KEY, v text, span interval);
             ALTER TABLE full_rows REPLICA IDENTITY FULL;",
        )
        .await
        .unwrap();
    // Alone: a slot cannot be created in a transaction that wrote.
    upstream
        .batch_execute("SELECT pg_create_logical_replication_slot('taken', 'pgoutput')")
        .await
        .unwrap();
    let server = WeirServer::start();
    let client = server.connect().await;
    let dsn = pg.dsn();
    let create = |name: &str, rest: &str| {
        format!(
            "CREATE SOURCE {name} WITH (connector = 'postgres-cdc', dsn = '{dsn}', slot = 'weir_{name}', {rest})"
        )
    };
    let (code, message) = error_of(&client, &create("a", "table = 'missing'")).await;
    assert_eq!(code, "58000", "{message}");
    assert!(message.contains("does not exist"), "{message}");
    let (_, message) = error_of(&client, &create("b", "table = 'no_key'")).await;
    assert!(message.contains("ADD PRIMARY KEY"), "{message}");
    let (_, message) = error_of(&client, &create("c", "table = 'plain'")).await;
    assert!(message.contains("REPLICA IDENTITY FULL"), "{message}");
    let (code, message) = error_of(&client, &create("d", "table = 'full_rows'")).await;
    assert_eq!(code, "42804", "{message}");
    assert!(
        message.contains("\"span\"") && message.contains("interval"),
        "{message}"
    );
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SOURCE e WITH (connector = 'postgres-cdc', dsn = '{dsn} password=hunter2', table = 'full_rows', slot = 'weir_e')"
        ),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SOURCE f (id BIGINT) WITH (connector = 'postgres-cdc', dsn = '{dsn}', table = 'full_rows', slot = 'taken')"
        ),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("already exists"), "{message}");
    let (code, message) = error_of(
        &client,
        &create("g", "table = 'full_rows', read_mode = 'full'"),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("it offers: cdc"), "{message}");
    // Declared columns may leave out what Weir cannot read.
    client
        .batch_execute(&format!(
            "CREATE SOURCE h (id BIGINT, v TEXT) WITH (connector = 'postgres-cdc', dsn = '{dsn}', table = 'full_rows', slot = 'weir_h', read_mode = 'cdc')"
        ))
        .await
        .expect("declared columns without the interval");
    // Read again from the beginning, its updates and deletes would be
    // applied twice.
    let (code, message) = error_of(&client, "ALTER SOURCE h RESET OFFSET").await;
    assert_eq!(code, "55000", "{message}");
    assert!(message.contains("DROP SOURCE"), "{message}");
    // So would another table's be mixed with this one's.
    let (code, message) = error_of(&client, "ALTER SOURCE h SET (table = 'other_rows')").await;
    assert_eq!(code, "55000", "{message}");
    assert!(message.contains("updates and deletes"), "{message}");
}

/// Rows in the upstream table at the start.
const INITIAL: i64 = 20_000;
const CUSTOMERS: i64 = 50;

/// Changes `orders` until `stop`: small transactions of inserts, updates
/// (of the amount, the customer, and now and then the key) and deletes.
async fn write_changes(pg_dsn: String, stop: Arc<AtomicBool>, mut rng: Rng) -> u64 {
    let (client, connection) = tokio_postgres::connect(&pg_dsn, NoTls).await.unwrap();
    tokio::spawn(connection);
    let mut next_id = INITIAL;
    let mut transactions = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut sql = String::from("BEGIN;");
        for _ in 0..1 + rng.below(3) {
            let id = rng.below(next_id as u64);
            match rng.below(10) {
                0..=3 => {
                    sql.push_str(&format!(
                        "INSERT INTO orders VALUES ({next_id}, {}, {}.{:02}, 'new');",
                        rng.below(CUSTOMERS as u64),
                        rng.below(1000),
                        rng.below(100)
                    ));
                    next_id += 1;
                }
                4..=6 => sql.push_str(&format!(
                    "UPDATE orders SET amount = amount + 1.25, customer = {} WHERE id = {id};",
                    rng.below(CUSTOMERS as u64)
                )),
                7 => {
                    sql.push_str(&format!(
                        "UPDATE orders SET id = {next_id} WHERE id = {id};"
                    ));
                    next_id += 1;
                }
                _ => sql.push_str(&format!("DELETE FROM orders WHERE id = {id};")),
            }
        }
        sql.push_str("COMMIT;");
        client
            .batch_execute(&sql)
            .await
            .expect("an upstream change");
        transactions += 1;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    transactions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changing_table_reaches_a_projection_a_sink_and_a_destination_exactly_across_kill_9() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute(&format!(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint NOT NULL,
                                  amount numeric(12,2) NOT NULL, note text);
             ALTER TABLE orders REPLICA IDENTITY FULL;
             INSERT INTO orders SELECT i, i % {CUSTOMERS}, (i % 997) + 0.5, 'n' || i
               FROM generate_series(0, {INITIAL} - 1) i;
             CREATE TABLE per_customer_out (customer bigint PRIMARY KEY, n bigint, total numeric);"
        ))
        .await
        .unwrap();
    let dsn = pg.dsn();
    let mut rng = crash_rng(0xCDC);
    let mut server = crash_server();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE orders_cdc WITH (connector = 'postgres-cdc', dsn = '{dsn}', table = 'orders',
                 slot = 'weir_orders', snapshot_batch_rows = '500');
             CREATE PROJECTION per_customer AS
               SELECT customer, count(*) AS n, sum(amount) AS total FROM orders_cdc GROUP BY customer;
             CREATE SINK out FROM per_customer
               WITH (connector = 'postgres', dsn = '{dsn}', table = 'per_customer_out', key = 'customer');
             CREATE DESTINATION per_customer_pg FROM per_customer
               INTO postgres (dsn = '{dsn}', table = 'per_customer_copy') KEY (customer);"
        ))
        .await
        .expect("setup");
    drop(client);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_changes(
        dsn.clone(),
        stop.clone(),
        crash_rng(0xC0FFEE),
    ));
    let mut midway = None;
    for round in 0..ROUNDS {
        // Early kills land in the snapshot; later ones in the stream.
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

    let want = rows(
        &upstream,
        "SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer",
    )
    .await
    .unwrap();
    let client = server.connect().await;
    eventually(Duration::from_secs(120), "every change read", || async {
        let got = rows(&client, "SELECT customer, n, total FROM per_customer")
            .await
            .ok()?;
        (got == want).then_some(())
    })
    .await;
    sinks_committed(&client).await;
    if std::env::var("WEIR_CDC_LOG").is_ok() {
        for line in server.log().lines().filter(|l| {
            l.contains("cdc")
                || l.contains("snapshot")
                || l.contains("orders_cdc")
                || l.contains("harness")
        }) {
            eprintln!("{line}");
        }
    }
    let written = rows(&upstream, "SELECT customer, n, total FROM per_customer_out")
        .await
        .unwrap();
    assert_eq!(written, want, "{}", server.log_tail());
    let copied = rows(
        &upstream,
        "SELECT customer, n, total FROM per_customer_copy",
    )
    .await
    .unwrap();
    assert_eq!(copied, want, "{}", server.log_tail());
    assert_eq!(
        value(
            &client,
            "SELECT generation, status FROM weir_catalog.destinations WHERE name = 'per_customer_pg'"
        )
        .await,
        "1|running"
    );

    // The slot was confirmed past the middle of the run: the seals move
    // it, so upstream WAL is not kept for ever.
    let midway = midway.unwrap();
    slot_confirmed_past(&upstream, "weir_orders", &midway).await;

    // DROP SOURCE lets the slot go.
    client
        .batch_execute("DROP PROJECTION per_customer CASCADE; DROP SOURCE orders_cdc")
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the slot dropped", || async {
        let left = value(
            &upstream,
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_orders'",
        )
        .await;
        (left == "0").then_some(())
    })
    .await;
    // The publication it created goes with it.
    until_returns(
        &upstream,
        "SELECT count(*) FROM pg_publication WHERE pubname = 'weir_orders'",
        "0",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_connectors_speak_tls_as_sslmode_says() {
    let pg = PgCluster::start();
    let root = pg.enable_tls().await;
    // User `app` may only connect over TLS, for queries and replication.
    pg.set_hba(
        "hostssl all app 127.0.0.1/32 trust\n\
         hostssl replication app 127.0.0.1/32 trust\n\
         hostnossl all app 127.0.0.1/32 reject\n\
         hostnossl replication app 127.0.0.1/32 reject\n",
    )
    .await;
    let upstream = pg.connect().await;
    app_and_items(&upstream).await;
    let server = WeirServer::start();
    let client = server.connect().await;
    let base = format!("host=127.0.0.1 port={} user=app dbname=weir", pg.port);
    // verify-full checks a host name (the replication client will not
    // verify an IP address); the certificate names localhost too.
    let by_name = format!("host=localhost port={} user=app dbname=weir", pg.port);

    // Without TLS the server turns `app` away; a root that did not sign
    // the server's certificate fails verification.
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SOURCE plain WITH (connector = 'postgres-cdc', dsn = '{base} sslmode=disable', table = 'items', slot = 'weir_plain')"
        ),
    )
    .await;
    assert_eq!(code, "58000", "{message}");
    assert!(
        message.contains("no encryption") || message.contains("rejects"),
        "{message}"
    );
    let other = tempfile::tempdir().unwrap();
    let (wrong_root, _) = crate::tls::self_signed(other.path());
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SOURCE wrong WITH (connector = 'postgres-cdc', dsn = '{base} sslmode=verify-full sslrootcert={}', table = 'items', slot = 'weir_wrong')",
            wrong_root.display()
        ),
    )
    .await;
    assert_eq!(code, "58000", "{message}");
    assert!(message.to_lowercase().contains("certificate"), "{message}");

    // verify-full against the right root: snapshot and stream; and a
    // postgres sink over TLS (`require`) writes them back.
    client
        .batch_execute(&format!(
            "CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc',
                 dsn = '{by_name} sslmode=verify-full sslrootcert={}', table = 'items', slot = 'weir_items');
             CREATE PROJECTION names AS SELECT id, name FROM items_cdc;
             CREATE SINK out FROM names WITH (connector = 'postgres', dsn = '{base} sslmode=require',
                 table = 'copied', key = 'id');",
            root.display()
        ))
        .await
        .expect("a source and a sink over TLS");
    items_reach_copied_over_sessions_showing(&upstream, "ssl", "true").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_connectors_authenticate_with_a_client_certificate() {
    let pg = PgCluster::start();
    pg.enable_tls().await;
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = crate::tls::client_certificate(certs.path(), "app");
    pg.trust_client_certificates_of(&ca).await;
    // User `app` gets in only with a certificate the CA signed, for
    // queries and replication alike.
    pg.set_hba(
        "hostssl all app 127.0.0.1/32 cert\n\
         hostssl replication app 127.0.0.1/32 cert\n\
         host all app 127.0.0.1/32 reject\n\
         host replication app 127.0.0.1/32 reject\n",
    )
    .await;
    let upstream = pg.connect().await;
    app_and_items(&upstream).await;
    let server = WeirServer::start();
    let client = server.connect().await;
    let base = format!(
        "host=127.0.0.1 port={} user=app dbname=weir sslmode=require",
        pg.port
    );
    let with_cert = format!("{base} sslcert={} sslkey={}", cert.display(), key.display());

    // Without the certificate PostgreSQL turns `app` away, naming it.
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SOURCE plain WITH (connector = 'postgres-cdc', dsn = '{base}', table = 'items', slot = 'weir_plain')"
        ),
    )
    .await;
    assert_eq!(code, "58000", "{message}");
    assert!(message.contains("certificate"), "{message}");
    // A key without its certificate is refused before connecting.
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SINK half AS SELECT 1 AS id WITH (connector = 'postgres', dsn = '{base} sslkey={}', table = 'copied', key = 'id')",
            key.display()
        ),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(
        message.contains("sslkey is given without sslcert"),
        "{message}"
    );

    // With it: the snapshot, the stream and a sink back.
    client
        .batch_execute(&format!(
            "CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc', dsn = '{with_cert}',
                 table = 'items', slot = 'weir_items');
             CREATE PROJECTION names AS SELECT id, name FROM items_cdc;
             CREATE SINK out FROM names WITH (connector = 'postgres', dsn = '{with_cert}',
                 table = 'copied', key = 'id');"
        ))
        .await
        .expect("a source and a sink authenticated by certificate");
    items_reach_copied_over_sessions_showing(&upstream, "client_dn", "/CN=app").await;
}

/// Role `app` (login, replication), table `items` (one row, replica
/// identity full, in publication `weir_items`) that `app` may read, and
/// table `copied` it may write.
async fn app_and_items(upstream: &tokio_postgres::Client) {
    upstream
        .batch_execute(
            "CREATE ROLE app LOGIN REPLICATION;
             CREATE TABLE items (id bigint PRIMARY KEY, name text);
             ALTER TABLE items REPLICA IDENTITY FULL;
             INSERT INTO items VALUES (1, 'one');
             CREATE TABLE copied (id bigint PRIMARY KEY, name text);
             GRANT SELECT ON items TO app;
             GRANT ALL ON SCHEMA public TO app;
             GRANT ALL ON copied TO app;
             CREATE PUBLICATION weir_items FOR TABLE items;",
        )
        .await
        .unwrap();
}

/// Changes `items` and waits until a source of it and a sink back have
/// brought `copied` level; then every session of `app` (its walsender
/// among them) shows `value` in `pg_stat_ssl.column`.
async fn items_reach_copied_over_sessions_showing(
    upstream: &tokio_postgres::Client,
    column: &str,
    value: &str,
) {
    upstream
        .batch_execute(
            "INSERT INTO items VALUES (2, 'two'); UPDATE items SET name = 'uno' WHERE id = 1",
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "items changed upstream reach copied through the source and the sink",
        || async {
            let got = rows(upstream, "SELECT id, name FROM copied").await.ok()?;
            (got == ["1|uno", "2|two"]).then_some(())
        },
    )
    .await;
    let sessions = rows(
        upstream,
        &format!(
            "SELECT a.backend_type || ' ' || s.{column} FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'app'"
        ),
    )
    .await
    .unwrap();
    assert!(
        sessions.iter().any(|s| *s == format!("walsender {value}")),
        "{sessions:?}"
    );
    assert!(
        sessions.iter().all(|s| s.ends_with(&format!(" {value}"))),
        "{sessions:?}"
    );
}

/// Waits until `sql` run upstream and `copy` read from the destination's
/// table agree.
async fn copied(upstream: &tokio_postgres::Client, want_sql: &str, got_sql: &str) {
    eventually(
        Duration::from_secs(60),
        "the destination caught up",
        || async {
            let want = rows(upstream, want_sql).await.ok()?;
            let got = rows(upstream, got_sql).await.ok()?;
            (want == got).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_slot_is_a_gap_that_blocks_a_destination_until_accepted() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        mut server,
        client,
        dsn,
    } = pg_and_weir(
        "CREATE TABLE items (id bigint PRIMARY KEY, v bigint NOT NULL);
             ALTER TABLE items REPLICA IDENTITY FULL;
             INSERT INTO items SELECT i, i * 10 FROM generate_series(1, 10) i;",
    )
    .await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc', dsn = '{dsn}', table = 'items',
                 slot = 'weir_gap');
             CREATE PROJECTION doubled AS SELECT id, v * 2 AS v2 FROM items_cdc;
             CREATE DESTINATION doubled_pg FROM doubled
               INTO postgres (dsn = '{dsn}', table = 'doubled_copy') KEY (id);"
        ))
        .await
        .unwrap();
    let want = "SELECT id, v * 2 FROM items WHERE id <> 12";
    let got = "SELECT id, v2 FROM doubled_copy";
    upstream
        .batch_execute("INSERT INTO items VALUES (11, 110)")
        .await
        .unwrap();
    copied(&upstream, want, got).await;

    // The slot goes (a DBA drops it, or max_slot_wal_keep_size
    // invalidates it); a change made meanwhile is lost to Weir.
    eventually(Duration::from_secs(30), "the slot dropped", || async {
        upstream
            .batch_execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
                   WHERE slot_name = 'weir_gap' AND active_pid IS NOT NULL;
                 SELECT pg_drop_replication_slot('weir_gap');",
            )
            .await
            .ok()
    })
    .await;
    upstream
        .batch_execute("INSERT INTO items VALUES (12, 120)")
        .await
        .unwrap();
    let source = status_becomes(&client, "sources", "items_cdc", "gap").await;
    assert!(source.contains("retention gap"), "{source}");
    assert_eq!(
        value(
            &client,
            "SELECT status FROM weir_catalog.destinations WHERE name = 'doubled_pg'"
        )
        .await,
        "blocked_by_gap"
    );
    let (code, message) = error_of(&client, "ALTER DESTINATION doubled_pg REPAIR").await;
    assert_eq!(code, "55000", "{message}");
    assert!(message.contains("ACCEPT GAP"), "{message}");

    // Accepted: the gap is recorded and the source goes on from a new
    // slot; the change made in the gap stays missing, later ones arrive.
    client
        .batch_execute("ALTER DESTINATION doubled_pg ACCEPT GAP")
        .await
        .unwrap();
    let records = value(
        &client,
        "SELECT records FROM weir_catalog.destinations WHERE name = 'doubled_pg'",
    )
    .await;
    assert!(
        records.contains("gap_accepted") && records.contains("items_cdc"),
        "{records}"
    );
    eventually(Duration::from_secs(60), "the source running", || async {
        let status = value(
            &client,
            "SELECT status FROM weir_catalog.sources WHERE name = 'items_cdc'",
        )
        .await;
        (status == "running").then_some(())
    })
    .await;
    eventually(Duration::from_secs(60), "a new slot", || async {
        let n = value(
            &upstream,
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_gap'",
        )
        .await;
        (n == "1").then_some(())
    })
    .await;
    upstream
        .batch_execute("INSERT INTO items VALUES (13, 130); UPDATE items SET v = 1 WHERE id = 1")
        .await
        .unwrap();
    copied(&upstream, want, got).await;
    assert_eq!(
        value(
            &client,
            "SELECT status FROM weir_catalog.destinations WHERE name = 'doubled_pg'"
        )
        .await,
        "running"
    );

    // The acceptance is durable: after a restart the source reads on
    // from the new slot.
    drop(client);
    server.restart();
    let client = server.connect().await;
    upstream
        .batch_execute("INSERT INTO items VALUES (14, 140)")
        .await
        .unwrap();
    copied(&upstream, want, got).await;
    client
        .batch_execute("DROP PROJECTION doubled CASCADE; DROP SOURCE items_cdc")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_and_created_again_is_a_gap_never_read_as_the_same_table() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    let create = "CREATE TABLE items (id bigint PRIMARY KEY, v bigint NOT NULL);
                  ALTER TABLE items REPLICA IDENTITY FULL;";
    upstream
        .batch_execute(&format!(
            "{create} INSERT INTO items SELECT i, i FROM generate_series(1, 5) i;"
        ))
        .await
        .unwrap();
    let dsn = pg.dsn();
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc', dsn = '{dsn}', table = 'items',
                 slot = 'weir_recreated');
             CREATE PROJECTION total AS SELECT count(*) AS n, sum(v) AS s FROM items_cdc;
             CREATE DESTINATION total_pg FROM total
               INTO postgres (dsn = '{dsn}', table = 'total_copy') KEY (n);"
        ))
        .await
        .unwrap();
    let total = || async {
        sinks_committed(&client).await;
        value(&client, "SELECT n, s FROM total").await
    };
    eventually(Duration::from_secs(60), "the snapshot read", || async {
        (total().await == "5|15").then_some(())
    })
    .await;

    // Dropped and created again while Weir streams: the new table's rows
    // are not the old one's changes.
    upstream
        .batch_execute(&format!(
            "DROP TABLE items; {create} INSERT INTO items VALUES (100, 100);"
        ))
        .await
        .unwrap();
    let error = status_becomes(&client, "sources", "items_cdc", "gap").await;
    assert!(
        error.contains("table \"public\".\"items\" was dropped"),
        "{error}"
    );
    assert_eq!(
        value(
            &client,
            "SELECT status FROM weir_catalog.destinations WHERE name = 'total_pg'"
        )
        .await,
        "blocked_by_gap"
    );
    assert_eq!(value(&client, "SELECT n, s FROM total").await, "5|15");

    // Weir down while it happens again: the restart sees another OID.
    drop(client);
    server.kill();
    upstream
        .batch_execute(&format!("DROP TABLE items; {create}"))
        .await
        .unwrap();
    server.restart();
    let client = server.connect().await;
    let error = status_becomes(&client, "sources", "items_cdc", "gap").await;
    assert!(error.contains("created again"), "{error}");

    // Accepted: the source reads on from the table there is now (added to
    // the publication again); what happened in between stays missing.
    client
        .batch_execute("ALTER DESTINATION total_pg ACCEPT GAP")
        .await
        .unwrap();
    until_returns(
        &client,
        "SELECT status FROM weir_catalog.sources WHERE name = 'items_cdc'",
        "running",
    )
    .await;
    // Changes made before the source added the table to its publication
    // again are part of the gap too.
    until_returns(
        &upstream,
        "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'weir_recreated'",
        "1",
    )
    .await;
    upstream
        .batch_execute("INSERT INTO items VALUES (7, 70)")
        .await
        .unwrap();
    let total = || async {
        sinks_committed(&client).await;
        value(&client, "SELECT n, s FROM total").await
    };
    eventually(
        Duration::from_secs(60),
        "a change of the new table",
        || async { (total().await == "6|85").then_some(()) },
    )
    .await;
}
