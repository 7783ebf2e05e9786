//! `CREATE DESTINATION` against a throwaway PostgreSQL: the checks at
//! CREATE (what it copies, its key, its options, a target that holds
//! rows), the target created with the key as primary key, a projection's
//! changes mirrored, SHOW and SHOW CREATE, `weir_catalog.destinations`
//! with its records, `REPAIR` under a new generation (the target refilled
//! in one transaction), a key that does not identify one row refused at
//! commit, its database going away and coming back (it backs off and
//! catches up), a restart, and DROP.

use std::time::Duration;

use tokio_postgres::Client;

use crate::harness::{WeirServer, eventually, try_rows as rows};
use crate::postgres::PgCluster;
use crate::sources::{error_of, sinks_committed, status_becomes, until_starts_with, value};

/// Waits until the destination's target holds what the projection does.
async fn mirrored(weir: &Client, pg: &Client, projection: &str, target: &str) {
    sinks_committed(weir).await;
    let want = rows(weir, &format!("SELECT bidder, n, best FROM {projection}"))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the target mirrored", || async {
        let got = rows(pg, &format!("SELECT bidder, n, best FROM {target}"))
            .await
            .ok()?;
        (got == want).then_some(())
    })
    .await;
}

/// Waits until destination `name`'s status is `status`; returns
/// `status|error`.
async fn destination_in(client: &Client, name: &str, status: &str) -> String {
    status_becomes(client, "destinations", name, status).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_mirrors_a_projection_and_repairs_under_a_new_generation() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE bids (id bigint PRIMARY KEY, bidder bigint NOT NULL, price bigint);
             INSERT INTO bids SELECT i, i % 7, i * 3 FROM generate_series(1, 100) AS t(i);
             CREATE PROJECTION top AS
               SELECT bidder, count(*) AS n, max(price) AS best FROM bids GROUP BY bidder;
             CREATE PROJECTION late_bids AS
               SELECT bidder, id AS n, price AS best FROM bids WHERE id > 2000;",
        )
        .await
        .unwrap();
    let dsn = pg.dsn();
    let create = |name: &str, from: &str, into: &str, rest: &str| {
        format!("CREATE DESTINATION {name} FROM {from} INTO {into} (dsn = '{dsn}', {rest})")
    };

    // What CREATE refuses, each naming the thing that is wrong.
    let (code, message) = error_of(
        &client,
        &create("d", "bids", "postgres", "table = 'x') KEY (id"),
    )
    .await;
    assert_eq!(code, "42809", "{message}");
    assert!(message.contains("is not a projection"), "{message}");
    let (code, _) = error_of(
        &client,
        &create("d", "nowhere", "postgres", "table = 'x') KEY (id"),
    )
    .await;
    assert_eq!(code, "42P01");
    let (code, message) = error_of(
        &client,
        &create("d", "top", "postgres", "table = 'x') KEY (nope"),
    )
    .await;
    assert_eq!(code, "42703", "{message}");
    assert!(message.contains("bidder, n, best"), "{message}");
    let (code, _) = error_of(
        &client,
        &create("d", "top", "kafka", "table = 'x') KEY (bidder"),
    )
    .await;
    assert_eq!(code, "0A000");
    let (code, message) = error_of(
        &client,
        &create(
            "d",
            "top",
            "postgres",
            "table = 'x', mode = 'append') KEY (bidder",
        ),
    )
    .await;
    assert_eq!(code, "22023");
    assert!(message.contains("always an upsert"), "{message}");
    let (code, message) = error_of(
        &client,
        &format!(
            "{} WITH (bogus = 'x')",
            create("d", "top", "postgres", "table = 'x') KEY (bidder")
        ),
    )
    .await;
    assert_eq!(code, "22023");
    assert!(
        message.contains("on_existing, delivery, on_error, dead_letter"),
        "{message}"
    );
    let (code, message) = error_of(
        &client,
        &format!(
            "{} WITH (on_error = 'retry_and_skip(often, 1s)')",
            create("d", "top", "postgres", "table = 'x') KEY (bidder")
        ),
    )
    .await;
    assert_eq!(code, "22023");
    assert!(message.contains("not a count"), "{message}");
    upstream
        .batch_execute(
            "CREATE TABLE occupied (bidder bigint PRIMARY KEY, n bigint, best bigint);
             INSERT INTO occupied VALUES (42, 1, 1)",
        )
        .await
        .unwrap();
    let (code, message) = error_of(
        &client,
        &create("d", "top", "postgres", "table = 'occupied') KEY (bidder"),
    )
    .await;
    assert_eq!(code, "22023");
    assert!(
        message.contains("already holds rows") && message.contains("on_existing = 'truncate'"),
        "{message}"
    );
    assert!(
        rows(&client, "SELECT name FROM weir_catalog.destinations")
            .await
            .unwrap()
            .is_empty()
    );

    // A destination whose target does not exist creates it, keyed.
    client
        .batch_execute(&create(
            "top_pg",
            "top",
            "postgres",
            "table = 'top_copy') KEY (bidder",
        ))
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "top_copy").await;
    assert_eq!(
        value(
            &upstream,
            "SELECT string_agg(a.attname, ',') FROM pg_index i
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
               WHERE i.indrelid = 'top_copy'::regclass AND i.indisprimary"
        )
        .await,
        "bidder"
    );
    // On a target that holds rows, with on_existing = 'truncate': the
    // rows found there are gone once the first fill commits.
    let occupied = format!(
        "{} WITH (on_existing = 'truncate')",
        create(
            "occupied_pg",
            "top",
            "postgres",
            "table = 'occupied') KEY (bidder"
        )
    );
    client.batch_execute(&occupied).await.unwrap();
    mirrored(&client, &upstream, "top", "occupied").await;

    // Changes reach it: updates, deletes, new groups.
    client
        .batch_execute(
            "UPDATE bids SET price = price + 1000 WHERE id % 5 = 0;
             DELETE FROM bids WHERE bidder = 3;
             INSERT INTO bids VALUES (1000, 99, 5)",
        )
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "top_copy").await;
    mirrored(&client, &upstream, "top", "occupied").await;

    // SHOW, SHOW CREATE (round trip) and the system table.
    let shown = rows(&client, "SHOW DESTINATIONS").await.unwrap();
    assert_eq!(
        shown,
        vec![
            "public|occupied_pg|postgres|running",
            "public|top_pg|postgres|running"
        ]
    );
    assert!(rows(&client, "SHOW SINKS").await.unwrap().is_empty());
    let statement = value(&client, "SHOW CREATE DESTINATION occupied_pg").await;
    let statement = statement.split_once('|').unwrap().1.to_string();
    assert_eq!(
        statement,
        format!(
            "CREATE DESTINATION occupied_pg FROM public.top INTO postgres (dsn = '{dsn}', table = 'occupied') KEY (bidder) WITH (on_existing = 'truncate')"
        )
    );
    client
        .batch_execute(&format!("DROP DESTINATION occupied_pg; {statement}"))
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "occupied").await;
    let row = value(
        &client,
        "SELECT identity = sink_id, generation, projection, key, status, committed_epoch > 0,
                committed_epoch >= prepared_epoch, records LIKE '%\"event\":\"created\"%',
                target LIKE '%table \"public\".\"top_copy\"'
           FROM weir_catalog.destinations WHERE name = 'top_pg'",
    )
    .await;
    assert_eq!(row, "t|1|public.top|bidder|running|t|t|t|t");
    assert_eq!(
        value(
            &client,
            "SELECT kind, generation, desired, status, committed_epoch > 0, offsets LIKE '{%'
               FROM weir_catalog.sink_offsets WHERE name = 'top_pg'"
        )
        .await,
        "destination|1|running|running|t|t"
    );
    let progress = "SELECT destination_generation, truncate_pending FROM weir_sink_progress
                      WHERE target = '\"public\".\"top_copy\"'";
    assert_eq!(value(&upstream, progress).await, "1|f");

    // What the destination is not: a sink, nor a gap to accept.
    let (code, message) = error_of(&client, "DROP SINK top_pg").await;
    assert_eq!(code, "42809", "{message}");
    assert!(message.contains("DROP DESTINATION"), "{message}");
    let (code, message) = error_of(&client, "ALTER DESTINATION top_pg ACCEPT GAP").await;
    assert_eq!(code, "55000", "{message}");
    let hint = client
        .batch_execute("DROP PROJECTION top")
        .await
        .expect_err("top has destinations");
    let hint = hint
        .as_db_error()
        .and_then(|e| e.hint())
        .unwrap_or_default();
    assert!(hint.contains("destination top_pg"), "{hint}");

    // Someone writes into the target; REPAIR refills it under
    // generation 2, keeping the destination's identity.
    upstream
        .batch_execute(
            "DELETE FROM top_copy WHERE bidder < 4; INSERT INTO top_copy VALUES (-1, 0, 0)",
        )
        .await
        .unwrap();
    let identity = value(
        &client,
        "SELECT identity FROM weir_catalog.destinations WHERE name = 'top_pg'",
    )
    .await;
    client
        .batch_execute("ALTER DESTINATION top_pg REPAIR")
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "top_copy").await;
    assert_eq!(value(&upstream, progress).await, "2|f");
    let row = value(
        &client,
        "SELECT identity, identity <> sink_id, generation, records LIKE '%\"event\":\"repair\"%'
           FROM weir_catalog.destinations WHERE name = 'top_pg'",
    )
    .await;
    assert_eq!(row, format!("{identity}|t|2|t"));

    // A key that does not identify one row of the projection: the
    // destination fails instead of keeping one of the rows, whether the
    // rows arrive in one epoch or in two.
    for (name, refusal, writes) in [
        (
            "same_epoch",
            "two rows with one key",
            vec!["INSERT INTO bids VALUES (2001, 5, 1), (2002, 5, 2)"],
        ),
        (
            "two_epochs",
            "would hold two rows with key",
            vec![
                "INSERT INTO bids VALUES (2003, 6, 1)",
                "INSERT INTO bids VALUES (2004, 6, 2)",
            ],
        ),
    ] {
        client
            .batch_execute(&format!(
                "DELETE FROM bids WHERE id > 2000; {}",
                create(
                    name,
                    "late_bids",
                    "postgres",
                    &format!("table = '{name}') KEY (bidder")
                )
            ))
            .await
            .unwrap();
        let (last, first) = writes.split_last().unwrap();
        for write in first {
            client.batch_execute(write).await.unwrap();
            sinks_committed(&client).await;
        }
        client.batch_execute(last).await.unwrap();
        client.batch_execute("FLUSH").await.unwrap();
        let failed = destination_in(&client, name, "failed").await;
        assert!(failed.contains(refusal), "{failed}");
        client
            .batch_execute(&format!("DROP DESTINATION {name}"))
            .await
            .unwrap();
    }

    // The target's database goes down: the destination backs off, shows
    // it, and catches up exactly once the database is back, while the
    // projection goes on. Destinations that asked to fail at once, or
    // after two retries, fail; a blackhole sink keeps committing.
    for (name, on_error) in [("strict", "fail"), ("patient", "retry_and_fail(2, 200ms)")] {
        client
            .batch_execute(&format!(
                "{} WITH (on_error = '{on_error}')",
                create(
                    name,
                    "top",
                    "postgres",
                    &format!("table = '{name}') KEY (bidder")
                )
            ))
            .await
            .unwrap();
    }
    client
        .batch_execute("CREATE SINK counted FROM top WITH (connector = 'blackhole')")
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "strict").await;
    pg.stop();
    client
        .batch_execute("UPDATE bids SET price = price + 1 WHERE bidder = 1; INSERT INTO bids VALUES (1003, 101, 1)")
        .await
        .unwrap();
    client.batch_execute("FLUSH").await.unwrap();
    let backing_off = until_starts_with(
        &client,
        "SELECT status, retries > 0, next_retry_at IS NOT NULL, error
           FROM weir_catalog.destinations WHERE name = 'top_pg'",
        "backing_off|",
    )
    .await;
    assert!(backing_off.starts_with("backing_off|t|t|"), "{backing_off}");
    for (name, error) in [
        ("strict", "gave up after 0 retries"),
        ("patient", "gave up after 2 retries"),
    ] {
        let row = destination_in(&client, name, "failed").await;
        assert!(row.contains(error), "{row}");
    }
    let counted = value(
        &client,
        "SELECT committed_epoch FROM weir_catalog.sinks WHERE name = 'counted'",
    )
    .await;
    client
        .batch_execute("DELETE FROM bids WHERE bidder = 2")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the blackhole sink committing",
        || async {
            let now = value(
                &client,
                "SELECT committed_epoch FROM weir_catalog.sinks WHERE name = 'counted'",
            )
            .await;
            (now.parse::<u64>().ok()? > counted.parse::<u64>().ok()?).then_some(())
        },
    )
    .await;
    client
        .batch_execute("DROP DESTINATION strict, patient; DROP SINK counted")
        .await
        .unwrap();
    pg.start_again();
    let upstream = pg.connect().await;
    mirrored(&client, &upstream, "top", "top_copy").await;
    assert_eq!(
        value(
            &client,
            "SELECT status, error IS NULL FROM weir_catalog.destinations WHERE name = 'top_pg'"
        )
        .await,
        "running|t"
    );

    // Across a restart, the destination keeps its generation and goes on.
    drop(client);
    server.restart();
    let client = server.connect().await;
    client
        .batch_execute("INSERT INTO bids VALUES (1001, 100, 7), (1002, 2, 9999)")
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "top_copy").await;
    assert_eq!(value(&upstream, progress).await, "2|f");

    // Killed while it backs off: the seal taken meanwhile holds its graph
    // past what it delivered and, in its outbox, what it missed, so after
    // the restart it delivers that and goes on, under the same generation.
    // REPAIR then refills it under the next one.
    pg.stop();
    client
        .batch_execute("INSERT INTO bids VALUES (1004, 102, 3)")
        .await
        .unwrap();
    client.batch_execute("FLUSH").await.unwrap();
    destination_in(&client, "top_pg", "backing_off").await;
    client
        .batch_execute("INSERT INTO bids VALUES (1005, 103, 3); FLUSH")
        .await
        .unwrap();
    let sealed = value(&client, "SELECT max(epoch) FROM weir_catalog.epochs").await;
    eventually(
        Duration::from_secs(30),
        "a seal while it backs off",
        || async {
            let now = value(&client, "SELECT max(epoch) FROM weir_catalog.epochs").await;
            (now.parse::<u64>().ok()? > sealed.parse::<u64>().ok()?).then_some(())
        },
    )
    .await;
    drop(client);
    server.restart();
    pg.start_again();
    let upstream = pg.connect().await;
    let client = server.connect().await;
    mirrored(&client, &upstream, "top", "top_copy").await;
    mirrored(&client, &upstream, "top", "occupied").await;
    assert_eq!(value(&upstream, progress).await, "2|f");
    destination_in(&client, "top_pg", "running").await;
    client
        .batch_execute("ALTER DESTINATION top_pg REPAIR")
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "top_copy").await;
    mirrored(&client, &upstream, "top", "occupied").await;
    assert_eq!(value(&upstream, progress).await, "3|f");

    // PAUSE commits what is in flight and stops; it holds across a
    // restart; RESUME refills the target under the next generation.
    client
        .batch_execute("INSERT INTO bids VALUES (1006, 104, 1)")
        .await
        .unwrap();
    client
        .batch_execute("ALTER DESTINATION top_pg PAUSE")
        .await
        .unwrap();
    let paused_rows = rows(&upstream, "SELECT bidder, n, best FROM top_copy")
        .await
        .unwrap();
    assert!(
        paused_rows.iter().any(|r| r.starts_with("104|")),
        "{paused_rows:?}"
    );
    let (code, message) = error_of(&client, "ALTER DESTINATION top_pg PAUSE").await;
    assert_eq!(code, "55000", "{message}");
    let (code, message) = error_of(&client, "ALTER DESTINATION top_pg REPAIR").await;
    assert_eq!(code, "55000");
    assert!(message.contains("RESUME"), "{message}");
    client
        .batch_execute("INSERT INTO bids VALUES (1007, 105, 1); FLUSH")
        .await
        .unwrap();
    drop(client);
    server.restart();
    let client = server.connect().await;
    assert_eq!(
        value(
            &client,
            "SELECT status, generation FROM weir_catalog.destinations WHERE name = 'top_pg'"
        )
        .await,
        "paused|3"
    );
    assert_eq!(
        value(
            &client,
            "SELECT desired, status FROM weir_catalog.sink_offsets WHERE name = 'top_pg'"
        )
        .await,
        "paused|paused"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        rows(&upstream, "SELECT bidder, n, best FROM top_copy")
            .await
            .unwrap(),
        paused_rows
    );
    client
        .batch_execute("ALTER DESTINATION top_pg RESUME")
        .await
        .unwrap();
    mirrored(&client, &upstream, "top", "top_copy").await;
    assert_eq!(value(&upstream, progress).await, "4|f");
    let (code, _) = error_of(&client, "ALTER DESTINATION top_pg RESUME").await;
    assert_eq!(code, "55000");

    // DROP leaves the target table and its rows to their owner.
    client
        .batch_execute("DROP DESTINATION top_pg, occupied_pg")
        .await
        .unwrap();
    assert!(rows(&client, "SHOW DESTINATIONS").await.unwrap().is_empty());
    assert_ne!(value(&upstream, "SELECT count(*) FROM top_copy").await, "0");
}
