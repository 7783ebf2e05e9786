//! `ALTER SOURCE | SINK name SET (...)`: a tunable option changes in
//! place and the position is kept (nothing read or delivered twice); a
//! sink pointed at another target starts a new generation that delivers
//! everything there; a source pointed at another input reads it from its
//! beginning, once, across a kill -9 right after the change.

use std::time::Duration;

use crate::harness::{eventually, try_rows as rows};
use crate::postgres::pg_and_weir;
use crate::sources::{error_of, value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altered_options_keep_the_position_or_start_a_new_generation() {
    let env = pg_and_weir(
        "CREATE TABLE first_out (auction bigint PRIMARY KEY, n bigint);
         CREATE TABLE second_out (auction bigint PRIMARY KEY, n bigint);",
    )
    .await;
    let (client, upstream, dsn) = (&env.client, &env.upstream, &env.dsn);
    client
        .batch_execute(&format!(
            "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '3000',
                 rate_limit = '1000', base_time = '1700000000000');
             CREATE PROJECTION per_auction AS SELECT auction, count(*) AS n FROM bid GROUP BY auction;
             CREATE SINK out FROM per_auction
               WITH (connector = 'postgres', dsn = '{dsn}', table = 'first_out', key = 'auction');"
        ))
        .await
        .unwrap();

    let options = value(
        client,
        "SELECT options FROM weir_catalog.connectors WHERE name = 'nexmark'",
    )
    .await;
    assert!(
        options.contains("tunable: events per second of wall clock"),
        "rate_limit is shown tunable: {options}"
    );

    // A tunable option: the reader goes on where it was, faster.
    tokio::time::sleep(Duration::from_millis(500)).await;
    client
        .batch_execute("ALTER SOURCE bid SET (rate_limit = '100000', restart_max = '5')")
        .await
        .unwrap();
    let shown = value(client, "SHOW CREATE SOURCE bid").await;
    assert!(
        shown.contains("rate_limit = '100000'") && shown.contains("restart_max = '5'"),
        "{shown}"
    );
    // What reads it equals a projection created now, which reads the
    // source from its first event: nothing was read twice or missed.
    eventually(
        Duration::from_secs(60),
        "the source read to its end",
        || async {
            let status = value(
                client,
                "SELECT status FROM weir_catalog.sources WHERE name = 'bid'",
            )
            .await;
            (status == "completed").then_some(())
        },
    )
    .await;
    client
        .batch_execute(
            "CREATE PROJECTION again AS SELECT auction, count(*) AS n FROM bid GROUP BY auction",
        )
        .await
        .unwrap();
    let want = rows(client, "SELECT auction, n FROM again ORDER BY auction")
        .await
        .unwrap();
    assert!(!want.is_empty());
    assert_eq!(
        rows(
            client,
            "SELECT auction, n FROM per_auction ORDER BY auction"
        )
        .await
        .unwrap(),
        want
    );

    let (code, message) = error_of(client, "ALTER SOURCE bid SET (no_such_option = '1')").await;
    assert_ne!(code, "00000", "{message}");

    // A sink's tunable option: same sink (same id), reopened.
    let id = value(
        client,
        "SELECT id FROM weir_catalog.sinks WHERE name = 'out'",
    )
    .await;
    client
        .batch_execute("ALTER SINK out SET (restart_max_backoff = '10s')")
        .await
        .unwrap();
    assert_eq!(
        value(
            client,
            "SELECT id FROM weir_catalog.sinks WHERE name = 'out'"
        )
        .await,
        id
    );
    copied(upstream, "first_out", &want).await;

    // Another target: a new generation that delivers everything there.
    client
        .batch_execute("ALTER SINK out SET (table = 'second_out')")
        .await
        .unwrap();
    assert_ne!(
        value(
            client,
            "SELECT id FROM weir_catalog.sinks WHERE name = 'out'"
        )
        .await,
        id
    );
    copied(upstream, "second_out", &want).await;
    let shown = value(client, "SHOW CREATE SINK out").await;
    assert!(shown.contains("table = 'second_out'"), "{shown}");
}

/// Waits until upstream `table` holds `want`.
async fn copied(upstream: &tokio_postgres::Client, table: &str, want: &[String]) {
    eventually(Duration::from_secs(60), table, || async {
        let got = rows(
            upstream,
            &format!("SELECT auction, n FROM {table} ORDER BY auction"),
        )
        .await
        .ok()?;
        (got == want).then_some(())
    })
    .await
}

/// A files source pointed at another directory: a new generation that
/// reads the new directory from its beginning, once, while what was read
/// from the first stays in the projection over it (as after RESET
/// OFFSET); a kill -9 right after the change, before any seal may have
/// recorded it, changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_pointed_at_another_input_reads_it_once_from_its_beginning() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    // Same file names in both: the second directory's must not pass for
    // files the first generation already read.
    for (dir, base) in [(&first, 0), (&second, 1000)] {
        for file in 0..3 {
            let rows: String = (0..10)
                .map(|i| format!("{}\n", base + file * 10 + i))
                .collect();
            std::fs::write(dir.join(format!("{file}.csv")), format!("id\n{rows}")).unwrap();
        }
    }
    let mut server = crate::sources::crash_server();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE f (id BIGINT) WITH (connector = 'files', path = '{}', format = 'csv', poll_interval_ms = '50');
             CREATE PROJECTION total AS SELECT count(*) AS n, sum(id) AS s FROM f;",
            first.display()
        ))
        .await
        .unwrap();
    let first_sum: i64 = (0..30).sum();
    let second_sum: i64 = (1000..1030).sum();
    let want_first = format!("30|{first_sum}");
    eventually(
        Duration::from_secs(60),
        "the first directory read",
        || async {
            let got = rows(&client, "SELECT n, s FROM total").await.ok()?;
            (got == [want_first.clone()]).then_some(())
        },
    )
    .await;
    client
        .batch_execute(&format!(
            "ALTER SOURCE f SET (path = '{}')",
            second.display()
        ))
        .await
        .unwrap();
    // Killed at once: the catalog has the new input; the latest seal may
    // still hold the first directory's offsets.
    server.restart();
    let client = server.connect().await;
    let want = format!("60|{}", first_sum + second_sum);
    eventually(
        Duration::from_secs(60),
        "the second directory read once",
        || async {
            let got = rows(&client, "SELECT n, s FROM total").await.ok()?;
            (got == [want.clone()]).then_some(())
        },
    )
    .await;
    // Nothing more arrives (no file read twice).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        rows(&client, "SELECT n, s FROM total").await.unwrap(),
        [want]
    );
    let shown = value(&client, "SHOW CREATE SOURCE f").await;
    assert!(shown.contains(&second.display().to_string()), "{shown}");
}
