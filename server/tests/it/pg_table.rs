//! The `postgres` source (plain queries, no replication) against a
//! throwaway PostgreSQL: the checks at CREATE, a table read in full in
//! pages into a projection that equals the same query upstream, and a
//! table read by its cursor column, where new rows, updates that move the
//! cursor and a late row within the lookback each arrive once, across a
//! kill -9; and a source whose database stays down giving up after its
//! `restart_max` retries.

use std::time::Duration;

use crate::harness::{eventually, try_rows as rows};
use crate::postgres::{PgAndWeir, pg_and_weir};
use crate::sources::{error_of, status_becomes, until_returns, value};

/// Waits until the `versions` projection reads `want` (`n|ids`).
async fn reaches(client: &tokio_postgres::Client, want: &str) {
    eventually(Duration::from_secs(60), want, || async {
        client.batch_execute("FLUSH").await.ok()?;
        (value(client, "SELECT n, ids FROM versions").await == want).then_some(())
    })
    .await
}

/// Waits until a seal covers the epoch the `versions` projection is at.
async fn versions_sealed(client: &tokio_postgres::Client) {
    let at = value(
        client,
        "SELECT last_epoch FROM weir_catalog.projections WHERE name = 'versions'",
    )
    .await
    .parse::<u64>()
    .unwrap();
    eventually(Duration::from_secs(30), "a seal", || async {
        let sealed = value(
            client,
            "SELECT coalesce(max(epoch), 0) FROM weir_catalog.epochs",
        )
        .await;
        (sealed.parse::<u64>().ok()? >= at).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_table_is_read_in_full_or_by_its_cursor_exactly_once() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        mut server,
        client,
        dsn,
    } = pg_and_weir("CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2));
             INSERT INTO accounts SELECT i, 'o' || (i % 7), i * 1.5 FROM generate_series(1, 2500) i;
             CREATE TABLE events (id bigint PRIMARY KEY, kind text, updated_at timestamptz NOT NULL);
             INSERT INTO events SELECT i, 'k' || (i % 3), '2026-01-01'::timestamptz + i * interval '1 second'
               FROM generate_series(1, 100) i;
             CREATE TABLE loose (id bigint PRIMARY KEY, at timestamptz);").await;
    let create = |name: &str, rest: &str| {
        format!("CREATE SOURCE {name} WITH (connector = 'postgres', dsn = '{dsn}', {rest})")
    };

    for (rest, option, says) in [
        (
            "table = 'events', read_mode = 'incremental'",
            "cursor",
            "needs a cursor",
        ),
        (
            "table = 'events', cursor = 'updated_at'",
            "cursor",
            "read_mode = 'incremental'",
        ),
        (
            "table = 'loose', read_mode = 'incremental', cursor = 'at'",
            "cursor",
            "SET NOT NULL",
        ),
        (
            "table = 'events', read_mode = 'incremental', cursor = 'kind'",
            "cursor",
            "is text",
        ),
        (
            "table = 'events', read_mode = 'incremental', cursor = 'updated_at', lookback = 'soon'",
            "lookback",
            "soon",
        ),
        (
            "table = 'events', read_mode = 'cdc'",
            "read_mode",
            "full, incremental",
        ),
    ] {
        let (code, message) = error_of(&client, &create("bad", rest)).await;
        assert_eq!(code, "22023", "{rest}: {message}");
        assert!(
            message.contains(option) && message.contains(says),
            "{rest}: {message}"
        );
    }

    // In full, in pages: the projection equals the query upstream, and
    // the source completes.
    client
        .batch_execute(&format!(
            "{};
             CREATE PROJECTION per_owner AS
               SELECT owner, count(*) AS n, sum(balance) AS total FROM accounts_src GROUP BY owner;",
            create("accounts_src", "table = 'accounts', batch_rows = '1000'")
        ))
        .await
        .unwrap();
    until_returns(
        &client,
        "SELECT status FROM weir_catalog.sources WHERE name = 'accounts_src'",
        "completed",
    )
    .await;
    client.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        rows(&client, "SELECT owner, n, total FROM per_owner")
            .await
            .unwrap(),
        rows(
            &upstream,
            "SELECT owner, count(*), sum(balance) FROM accounts GROUP BY owner"
        )
        .await
        .unwrap()
    );

    // By the cursor: every version once.
    client
        .batch_execute(&format!(
            "{};
             CREATE PROJECTION versions AS SELECT count(*) AS n, count(DISTINCT id) AS ids FROM events_src;",
            create(
                "events_src",
                "table = 'events', read_mode = 'incremental', cursor = 'updated_at',
                 lookback = '1m', poll_interval = '200ms', batch_rows = '30'"
            )
        ))
        .await
        .unwrap();
    reaches(&client, "100|100").await;
    upstream
        .batch_execute(
            "UPDATE events SET kind = 'x', updated_at = updated_at + interval '1 hour' WHERE id <= 10;
             INSERT INTO events SELECT i, 'new', '2026-01-02'::timestamptz + i * interval '1 second'
               FROM generate_series(101, 105) i;",
        )
        .await
        .unwrap();
    reaches(&client, "115|105").await;
    // Committed late, 30 s behind the highest cursor read: within the
    // lookback, so read.
    upstream
        .batch_execute(
            "INSERT INTO events VALUES (200, 'late', '2026-01-02'::timestamptz + interval '75 seconds')",
        )
        .await
        .unwrap();
    reaches(&client, "116|106").await;

    // Killed and restarted: what was read is not read again, what came
    // meanwhile is read once.
    versions_sealed(&client).await;
    drop(client);
    server.kill();
    upstream
        .batch_execute(
            "INSERT INTO events VALUES (201, 'down', '2026-01-03'), (202, 'down', '2026-01-03 00:00:01')",
        )
        .await
        .unwrap();
    server.restart();
    let client = server.connect().await;
    reaches(&client, "118|108").await;
    upstream
        .batch_execute("INSERT INTO events VALUES (203, 'after', '2026-01-03 00:00:02')")
        .await
        .unwrap();
    reaches(&client, "119|109").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_database_stays_down_gives_up_after_restart_max_retries() {
    let PgAndWeir {
        pg,
        upstream: _upstream,
        server: _server,
        client,
        dsn,
    } = pg_and_weir(
        "CREATE TABLE ticks (id bigint PRIMARY KEY, at bigint NOT NULL);
             INSERT INTO ticks VALUES (1, 1)",
    )
    .await;
    let create = |rest: &str| {
        format!(
            "CREATE SOURCE ticks_src WITH (connector = 'postgres', dsn = '{dsn}', table = 'ticks',
                 read_mode = 'incremental', cursor = 'at', poll_interval = '100ms'{rest})"
        )
    };
    let (code, message) = error_of(&client, &create(", restart_max = 'often'")).await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("restart_max"), "{message}");
    client
        .batch_execute(&format!(
            "{};
             CREATE PROJECTION n AS SELECT count(*) AS n FROM ticks_src;",
            create(
                ", restart_min_backoff = '100ms', restart_max_backoff = '200ms', restart_max = '2'"
            )
        ))
        .await
        .unwrap();
    until_returns(&client, "SELECT n FROM n", "1").await;
    pg.stop();
    let failed = status_becomes(&client, "sources", "ticks_src", "failed").await;
    assert!(failed.contains("gave up after 2 retries"), "{failed}");
}
