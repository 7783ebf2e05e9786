//! A shared `postgres-cdc` source (no `table`: it holds the slot and the
//! publication) and its tables (`CREATE SOURCE t FROM shared TABLE
//! 'schema.table'`, each an ordinary source relation), against a throwaway
//! PostgreSQL 15: what CREATE checks per table, what cannot be done with
//! either kind, SHOW CREATE statements that recreate them exactly, DROP
//! ... CASCADE letting the slot and Weir's own publication go; one table
//! read through its shared source into a projection; and a lost slot, a
//! gap of the shared source and all its tables until accepted.

use std::time::Duration;

use tokio_postgres::{Client, SimpleQueryMessage};

use crate::harness::{eventually, try_rows as rows};
use crate::postgres::{PgAndWeir, pg_and_weir};
use crate::sources::{error_of, status_becomes, until_returns, value};

/// `SHOW CREATE SOURCE name`'s statement.
async fn show_create(client: &Client, name: &str) -> String {
    let messages = client
        .simple_query(&format!("SHOW CREATE SOURCE {name}"))
        .await
        .unwrap_or_else(|e| panic!("SHOW CREATE SOURCE {name}: {e}"));
    messages
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(1).map(str::to_string),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no row for SHOW CREATE SOURCE {name}"))
}

/// Waits until `sql` run upstream returns `want` (one value).
async fn upstream_becomes(upstream: &Client, sql: &str, want: &str, what: &str) {
    eventually(Duration::from_secs(60), what, || async {
        (value(upstream, sql).await == want).then_some(())
    })
    .await;
}

const SLOT: &str = "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_shop'";
const OWN_PUBLICATION: &str = "SELECT count(*) FROM pg_publication WHERE pubname = 'weir_shop'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_source_and_its_tables_are_checked_at_create_and_round_trip() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        server: _server,
        client,
        dsn,
    } = pg_and_weir(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint NOT NULL,
                              amount numeric(12,2) NOT NULL, placed timestamp);
         CREATE TABLE customers (id bigint PRIMARY KEY, name text, since date);
         CREATE TABLE no_key (a bigint);
         CREATE TABLE not_full (id bigint PRIMARY KEY, v text);
         CREATE TABLE unlisted (id bigint PRIMARY KEY, v text);
         ALTER TABLE orders REPLICA IDENTITY FULL;
         ALTER TABLE customers REPLICA IDENTITY FULL;
         ALTER TABLE no_key REPLICA IDENTITY FULL;
         ALTER TABLE unlisted REPLICA IDENTITY FULL;
         CREATE PUBLICATION theirs FOR TABLE orders;
         INSERT INTO orders SELECT i, i % 7, i * 1.5, timestamp '2026-01-01' + i * interval '1 hour'
           FROM generate_series(1, 30) i;
         INSERT INTO customers SELECT i, 'c' || i, date '2020-01-01' + i FROM generate_series(0, 6) i;",
    )
    .await;
    // Alone: a slot cannot be created in a transaction that wrote.
    upstream
        .batch_execute("SELECT pg_create_logical_replication_slot('taken', 'pgoutput')")
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "CREATE CONNECTION shop_db TO postgres (dsn = '{dsn}')"
        ))
        .await
        .unwrap();

    // A shared source has no columns of its own; its slot is checked as
    // any postgres-cdc source's is.
    let (code, message) = error_of(
        &client,
        "CREATE SOURCE bad (id BIGINT) WITH (connector = 'postgres-cdc', connection = shop_db, slot = 'weir_bad')",
    )
    .await;
    assert_eq!(code, "42P16", "{message}");
    assert!(message.contains("FROM bad TABLE"), "{message}");
    let (code, message) = error_of(
        &client,
        "CREATE SOURCE bad WITH (connector = 'postgres-cdc', connection = shop_db, slot = 'taken')",
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("already exists"), "{message}");
    client
        .batch_execute(
            "CREATE SOURCE shop WITH (connector = 'postgres-cdc', connection = shop_db,
                 slot = 'weir_shop', snapshot_batch_rows = '10');
             CREATE SOURCE theirs_src WITH (connector = 'postgres-cdc', connection = shop_db,
                 slot = 'weir_theirs', publication = 'theirs');
             CREATE SOURCE single WITH (connector = 'postgres-cdc', connection = shop_db,
                 table = 'customers', slot = 'weir_single');",
        )
        .await
        .expect("shared sources and a single-table one");

    // Each table is checked as a single-table source's is, with the same
    // errors.
    for (table, says) in [
        ("no_key", "ADD PRIMARY KEY"),
        ("not_full", "REPLICA IDENTITY FULL"),
        ("public.missing", "does not exist"),
    ] {
        let (code, message) = error_of(
            &client,
            &format!("CREATE SOURCE t FROM shop TABLE '{table}'"),
        )
        .await;
        assert!(message.contains(says), "{table}: {code} {message}");
        let alone = error_of(
            &client,
            &format!(
                "CREATE SOURCE t WITH (connector = 'postgres-cdc', connection = shop_db, table = '{table}', slot = 'weir_t')"
            ),
        )
        .await;
        assert_eq!((code, message), alone, "{table}");
    }
    // A user's publication must list the table already.
    let (code, message) = error_of(
        &client,
        "CREATE SOURCE unlisted FROM theirs_src TABLE 'unlisted'",
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("ADD TABLE"), "{message}");

    client
        .batch_execute(
            "CREATE SOURCE orders FROM shop TABLE 'public.orders';
             CREATE SOURCE theirs_orders (id BIGINT NOT NULL, placed TIMESTAMP,
                 WATERMARK FOR placed AS placed - INTERVAL '1' MINUTE)
               FROM theirs_src TABLE 'orders';",
        )
        .await
        .expect("tables of the shared sources");
    // Read: the slot and Weir's own publication appear.
    client
        .batch_execute("CREATE PROJECTION order_count AS SELECT count(*) AS n FROM orders")
        .await
        .unwrap();
    upstream_becomes(&upstream, SLOT, "1", "the shared source's slot").await;
    upstream_becomes(&upstream, OWN_PUBLICATION, "1", "its own publication").await;
    // A table added to a source that is read (its reader restarts with it).
    client
        .batch_execute(
            "CREATE SOURCE customers (id BIGINT NOT NULL, name TEXT) FROM public.shop TABLE 'customers'",
        )
        .await
        .unwrap();

    // One relation per upstream table of a source.
    let (code, message) = error_of(
        &client,
        "CREATE SOURCE orders_again FROM shop TABLE '\"public\".\"orders\"'",
    )
    .await;
    assert_eq!(code, "42710", "{message}");
    assert!(message.contains("as source orders"), "{message}");
    // FROM names a shared source.
    for from in ["single", "orders"] {
        let (code, message) = error_of(
            &client,
            &format!("CREATE SOURCE t FROM {from} TABLE 'customers'"),
        )
        .await;
        assert_eq!(code, "42809", "{from}: {message}");
        assert!(
            message.contains(&format!("source {from} does not cover several tables")),
            "{message}"
        );
    }
    let (code, message) = error_of(&client, "CREATE SOURCE t FROM nowhere TABLE 'customers'").await;
    assert_eq!(code, "42704", "{message}");

    // The shared source is not a relation: its tables are.
    let unreadable =
        "source shop covers several upstream tables; read one of them: orders, customers";
    for sql in [
        "SELECT * FROM shop",
        "CREATE PROJECTION p AS SELECT count(*) AS n FROM shop",
        "CREATE SINK s FROM shop WITH (connector = 'blackhole')",
    ] {
        let (code, message) = error_of(&client, sql).await;
        assert_eq!(
            (code.as_str(), message.as_str()),
            ("42809", unreadable),
            "{sql}"
        );
    }
    assert_eq!(
        rows(
            &client,
            "SELECT name, coalesce(source, '-') FROM weir_catalog.sources"
        )
        .await
        .unwrap(),
        [
            "customers|shop",
            "orders|shop",
            "shop|-",
            "single|-",
            "theirs_orders|theirs_src",
            "theirs_src|-"
        ]
    );
    assert_eq!(
        rows(&client, "SELECT relname FROM pg_class WHERE relkind = 'f'")
            .await
            .unwrap(),
        ["customers", "orders", "single", "theirs_orders"]
    );
    // A table's reader is its source's.
    for action in ["PAUSE", "RESUME", "RESET OFFSET"] {
        let (code, message) = error_of(&client, &format!("ALTER SOURCE orders {action}")).await;
        assert_eq!(code, "42809", "{message}");
        assert!(
            message.contains(&format!("ALTER SOURCE shop {action}")),
            "{message}"
        );
    }
    let (code, message) = error_of(&client, "DROP SOURCE shop").await;
    assert_eq!(code, "2BP01", "{message}");

    // SHOW CREATE: the shared source without columns, each table with
    // its columns (discovered or declared) and its source.
    let shop = show_create(&client, "shop").await;
    assert!(
        shop.starts_with(
            "CREATE SOURCE shop WITH (connector = 'postgres-cdc', connection = shop_db,"
        ),
        "{shop}"
    );
    let orders = show_create(&client, "orders").await;
    assert_eq!(
        orders,
        "CREATE SOURCE orders (id BIGINT NOT NULL, customer BIGINT NOT NULL, amount NUMERIC(12,2) NOT NULL, placed TIMESTAMP WITHOUT TIME ZONE) FROM \"public\".\"shop\" TABLE 'public.orders'"
    );
    let customers = show_create(&client, "customers").await;
    assert_eq!(
        customers,
        "CREATE SOURCE customers (id BIGINT NOT NULL, name TEXT) FROM \"public\".\"shop\" TABLE 'customers'"
    );
    let theirs = show_create(&client, "theirs_orders").await;
    assert!(
        theirs.ends_with(
            "WATERMARK FOR placed AS placed - INTERVAL '1' MINUTE) FROM \"public\".\"theirs_src\" TABLE 'orders'"
        ),
        "{theirs}"
    );

    let (code, message) = error_of(&client, "DROP SOURCE orders").await;
    assert_eq!(code, "2BP01", "{message}");
    assert!(message.contains("orders"), "{message}");
    // A table nothing reads goes alone, and comes back as it was.
    client.batch_execute("DROP SOURCE customers").await.unwrap();
    assert_eq!(
        value(
            &client,
            "SELECT count(*) FROM weir_catalog.sources WHERE source = 'shop'"
        )
        .await,
        "1"
    );
    client.batch_execute(&customers).await.unwrap();
    assert_eq!(show_create(&client, "customers").await, customers);

    // DROP ... CASCADE: what reads the tables, the tables, the source;
    // then its slot and own publication upstream.
    client
        .batch_execute("DROP SOURCE shop CASCADE")
        .await
        .unwrap();
    assert_eq!(
        rows(&client, "SELECT name FROM weir_catalog.sources")
            .await
            .unwrap(),
        ["single", "theirs_orders", "theirs_src"]
    );
    assert_eq!(
        value(
            &client,
            "SELECT count(*) FROM weir_catalog.projections WHERE name = 'order_count'"
        )
        .await,
        "0"
    );
    upstream_becomes(&upstream, SLOT, "0", "the slot dropped").await;
    upstream_becomes(&upstream, OWN_PUBLICATION, "0", "the publication dropped").await;

    // The printed statements recreate them exactly.
    for sql in [&shop, &orders, &customers] {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for (name, sql) in [
        ("shop", &shop),
        ("orders", &orders),
        ("customers", &customers),
    ] {
        assert_eq!(&show_create(&client, name).await, sql, "{name}");
    }

    // Tables and their source in one statement; a user's publication
    // stays when its source goes.
    client
        .batch_execute("DROP SOURCE orders, customers, shop; DROP SOURCE theirs_src CASCADE")
        .await
        .unwrap();
    until_returns(
        &upstream,
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'weir_%'",
        "0",
    )
    .await;
    assert_eq!(
        value(
            &upstream,
            "SELECT count(*) FROM pg_publication WHERE pubname = 'theirs'"
        )
        .await,
        "1"
    );
}

/// Waits until projection `per_customer` equals its query run upstream.
async fn per_customer_equal(upstream: &Client, client: &Client) {
    eventually(
        Duration::from_secs(60),
        "the projection equal upstream",
        || async {
            let want = rows(
                upstream,
                "SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer",
            )
            .await
            .ok()?;
            let got = rows(client, "SELECT customer, n, total FROM per_customer")
                .await
                .ok()?;
            (want == got).then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_table_of_a_shared_source_reaches_a_projection() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        mut server,
        client,
        dsn,
    } = pg_and_weir(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint NOT NULL, amount numeric(12,2) NOT NULL);
         ALTER TABLE orders REPLICA IDENTITY FULL;
         INSERT INTO orders SELECT i, i % 5, i * 1.25 FROM generate_series(1, 1000) i;",
    )
    .await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE shop WITH (connector = 'postgres-cdc', dsn = '{dsn}', slot = 'weir_shop',
                 snapshot_batch_rows = '100');
             CREATE SOURCE orders FROM shop TABLE 'orders';
             CREATE PROJECTION per_customer AS
               SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer;"
        ))
        .await
        .expect("a shared source, a table of it and a projection");
    per_customer_equal(&upstream, &client).await;
    upstream
        .batch_execute(
            "INSERT INTO orders VALUES (1001, 9, 1.00);
             UPDATE orders SET customer = 9, amount = amount + 1 WHERE id BETWEEN 10 AND 20;
             DELETE FROM orders WHERE id > 990 AND id < 1001;",
        )
        .await
        .unwrap();
    per_customer_equal(&upstream, &client).await;
    assert_eq!(
        value(
            &client,
            "SELECT status, source FROM weir_catalog.sources WHERE name = 'orders'"
        )
        .await,
        "running|shop"
    );

    // Across a restart it reads on from where it was.
    drop(client);
    server.restart();
    let client = server.connect().await;
    upstream
        .batch_execute(
            "UPDATE orders SET amount = 0 WHERE customer = 9; DELETE FROM orders WHERE id < 5",
        )
        .await
        .unwrap();
    per_customer_equal(&upstream, &client).await;

    client
        .batch_execute("DROP SOURCE shop CASCADE")
        .await
        .unwrap();
    upstream_becomes(&upstream, SLOT, "0", "the slot dropped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_slot_stops_every_table_until_the_gap_is_accepted() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        server: _server,
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
            "CREATE SOURCE shop WITH (connector = 'postgres-cdc', dsn = '{dsn}', slot = 'weir_shop');
             CREATE SOURCE items FROM shop TABLE 'items';
             CREATE PROJECTION doubled AS SELECT id, v * 2 AS v2 FROM items;
             CREATE DESTINATION doubled_pg FROM doubled
               INTO postgres (dsn = '{dsn}', table = 'doubled_copy') KEY (id);"
        ))
        .await
        .unwrap();
    let copied = || async {
        eventually(
            Duration::from_secs(60),
            "the destination caught up",
            || async {
                let want = rows(&upstream, "SELECT id, v * 2 FROM items WHERE id <> 12")
                    .await
                    .ok()?;
                let got = rows(&upstream, "SELECT id, v2 FROM doubled_copy")
                    .await
                    .ok()?;
                (want == got).then_some(())
            },
        )
        .await
    };
    copied().await;

    // The slot goes, and a change with it: the shared source and its
    // table are `gap`, the destination blocked.
    eventually(Duration::from_secs(30), "the slot dropped", || async {
        upstream
            .batch_execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
                   WHERE slot_name = 'weir_shop' AND active_pid IS NOT NULL;
                 SELECT pg_drop_replication_slot('weir_shop');",
            )
            .await
            .ok()
    })
    .await;
    upstream
        .batch_execute("INSERT INTO items VALUES (12, 120)")
        .await
        .unwrap();
    status_becomes(&client, "sources", "shop", "gap").await;
    status_becomes(&client, "sources", "items", "gap").await;
    until_returns(
        &client,
        "SELECT status FROM weir_catalog.destinations WHERE name = 'doubled_pg'",
        "blocked_by_gap",
    )
    .await;

    // Accepted once for the table and its shared source: both read on
    // from a new slot.
    client
        .batch_execute("ALTER DESTINATION doubled_pg ACCEPT GAP")
        .await
        .unwrap();
    status_becomes(&client, "sources", "items", "running").await;
    status_becomes(&client, "sources", "shop", "running").await;
    upstream_becomes(&upstream, SLOT, "1", "a new slot").await;
    upstream
        .batch_execute("INSERT INTO items VALUES (13, 130); UPDATE items SET v = 1 WHERE id = 1")
        .await
        .unwrap();
    copied().await;
    assert_eq!(
        value(
            &client,
            "SELECT status FROM weir_catalog.destinations WHERE name = 'doubled_pg'"
        )
        .await,
        "running"
    );
}
