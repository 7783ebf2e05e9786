//! Event time: watermarks generated from a source's `WATERMARK FOR`,
//! windows that close on them (`EMIT ON WINDOW CLOSE` emits each once),
//! and the watermark sealed so a `kill -9` neither emits a window twice
//! nor loses one.

use tokio_postgres::Client;

use crate::harness::{WeirServer, try_rows as rows};
use crate::sources::{error_of, kill_and_restart, projection_late_rows, until_returns, value};

/// 2 000 rows one second apart from a fixed instant: 200 ten-second
/// windows of 10 rows each, ids 1..=2000. `rows_per_second` spreads them
/// over a few seconds, so epochs close part way and a kill lands mid-run.
const SOURCE: &str = "CREATE SOURCE ticks (id BIGINT, ts TIMESTAMP,
         WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
       WITH (connector = 'datagen', max_rows = '2000', rows_per_second = '500',
             base_time = '1700000000000', fields.id.kind = 'sequence', fields.ts.step_ms = '1000')";

const WINDOWS: &str = "SELECT window_start, count(*) AS n, sum(id) AS s
       FROM TUMBLE(ticks, ts, INTERVAL '10' SECOND) GROUP BY window_start";

/// Every window once, with its 10 rows: what the whole input gives.
async fn all_windows(client: &Client, projection: &str) {
    until_returns(
        client,
        &format!("SELECT count(*), sum(n), sum(s), max(n), min(n) FROM {projection}"),
        "200|2000|2001000|10|10",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_on_window_close_emits_every_window_once_even_across_kill_9() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client.batch_execute(SOURCE).await.expect("source");
    client
        .batch_execute(&format!(
            "CREATE PROJECTION closed AS {WINDOWS} EMIT ON WINDOW CLOSE;
             CREATE PROJECTION updating AS {WINDOWS};"
        ))
        .await
        .expect("projections");
    let shown = value(&client, "SHOW CREATE PROJECTION closed").await;
    assert!(shown.ends_with("EMIT ON WINDOW CLOSE"), "{shown}");
    // Its rows are never retracted: a plain files sink takes it, which
    // refuses the updating projection without a changelog.
    let out = tempfile::tempdir().unwrap();
    client
        .batch_execute(&format!(
            "CREATE SINK closed_out FROM closed WITH (connector = 'files', path = '{}', format = 'csv')",
            out.path().display()
        ))
        .await
        .expect("an append sink over EMIT ON WINDOW CLOSE");
    // The same, as the sink's own query.
    let direct = format!(
        "CREATE SINK direct AS {WINDOWS} EMIT ON WINDOW CLOSE \
         WITH (connector = 'files', path = '{}/direct', format = 'csv')",
        out.path().display()
    );
    client.batch_execute(&direct).await.expect(&direct);
    let shown = value(&client, "SHOW CREATE SINK direct").await;
    assert!(shown.contains(" EMIT ON WINDOW CLOSE WITH ("), "{shown}");
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SINK updating_out FROM updating WITH (connector = 'files', path = '{}/u', format = 'csv')",
            out.path().display()
        ),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("changelog"), "{message}");
    let explained = rows(
        &client,
        &format!("EXPLAIN CREATE PROJECTION c AS {WINDOWS} EMIT ON WINDOW CLOSE"),
    )
    .await
    .unwrap()
    .join("\n");
    assert!(explained.contains("emits each group once"), "{explained}");

    // Part way: the closed windows are exactly the ones behind the
    // watermark, each complete; the updating projection is ahead of it.
    let client = loop {
        let closed: i64 = value(&client, "SELECT count(*) FROM closed")
            .await
            .parse()
            .unwrap();
        if closed >= 20 {
            break kill_and_restart(&mut server, "mid-run").await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let partial = value(
        &client,
        "SELECT count(*), coalesce(min(n), 10), coalesce(max(n), 10) FROM closed",
    )
    .await;
    assert!(
        partial.ends_with("|10|10"),
        "every window emitted is whole: {partial}"
    );

    all_windows(&client, "closed").await;
    all_windows(&client, "updating").await;
    // Nothing is emitted twice (a window twice would have weight 2, so
    // two rows here).
    assert_eq!(
        value(&client, "SELECT count(DISTINCT window_start) FROM closed").await,
        "200"
    );
    until_returns(
        &client,
        "SELECT status, current_watermark, late_rows FROM weir_catalog.sources WHERE name = 'ticks'",
        "completed|final|0",
    )
    .await;
    // The sink committed each window once, across the kill.
    crate::sources::sinks_committed(&client).await;
    for dir in [out.path().to_path_buf(), out.path().join("direct")] {
        let mut windows = written_csv_rows(&dir);
        let written = windows.len();
        windows.sort();
        windows.dedup();
        assert_eq!((written, windows.len()), (200, 200), "{dir:?}: {windows:?}");
    }
    drop(server);
}

/// The data rows of every CSV file a files sink wrote in `dir`.
fn written_csv_rows(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with("window_start"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_on_window_close_needs_a_window_over_a_watermark() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "{SOURCE}; CREATE SOURCE plain (id BIGINT, ts TIMESTAMP)
               WITH (connector = 'datagen', max_rows = '10')"
        ))
        .await
        .expect("sources");
    for sql in [
        "CREATE PROJECTION p AS SELECT id, count(*) FROM ticks GROUP BY id EMIT ON WINDOW CLOSE",
        "CREATE PROJECTION p AS SELECT window_start, count(*) FROM TUMBLE(plain, ts, INTERVAL '1' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE",
    ] {
        let (code, message) = error_of(&client, sql).await;
        assert_eq!(code, "22023", "{sql}: {message}");
        assert!(message.contains("EMIT ON WINDOW CLOSE needs"), "{message}");
    }
    let (code, message) = error_of(
        &client,
        "CREATE SOURCE bad (ts TIMESTAMP,
             WATERMARK FOR ts AS CASE WHEN ts > TIMESTAMP '2020-01-01' THEN ts ELSE ts END)
           WITH (connector = 'datagen')",
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("never decrease"), "{message}");
}

/// `n` CSV rows `id,ts` with ids from `first`, one second apart from
/// `offset_s` seconds after 2024-01-01 00:00:00.
fn csv_rows(first: i64, offset_s: i64, n: i64) -> String {
    let base = chrono::NaiveDate::from_ymd_opt(2024, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    let mut out = String::from("id,ts\n");
    for i in 0..n {
        let ts = base + chrono::Duration::seconds(offset_s + i);
        out.push_str(&format!(
            "{},{}\n",
            first + i,
            ts.format("%Y-%m-%dT%H:%M:%S")
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_rows_are_counted_and_never_folded_into_a_closed_window() {
    let server = WeirServer::start();
    let client = server.connect().await;
    let dir = tempfile::tempdir().unwrap();
    // Seconds 1..=100: windows [0,10) .. [90,100) full but the first (9
    // rows), and second 100 in [100,110).
    std::fs::write(dir.path().join("a.csv"), csv_rows(1, 1, 100)).unwrap();
    client
        .batch_execute(&format!(
            "CREATE SOURCE f (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
               WITH (connector = 'files', path = '{}', format = 'csv', poll_interval_ms = '50');
             CREATE PROJECTION closed AS SELECT window_start, count(*) AS n
               FROM TUMBLE(f, ts, INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE;
             CREATE PROJECTION updating AS SELECT window_start, count(*) AS n
               FROM TUMBLE(f, ts, INTERVAL '10' SECOND) GROUP BY window_start;",
            dir.path().display()
        ))
        .await
        .expect("create");
    // The watermark is 95 s: windows before 90 s are closed.
    until_returns(&client, "SELECT count(*), sum(n) FROM closed", "9|89").await;
    until_returns(
        &client,
        "SELECT current_watermark FROM weir_catalog.sources WHERE name = 'f'",
        "2024-01-01 00:01:35",
    )
    .await;
    // Five rows of the first window arrive after it closed, one row at
    // 200 s moves the watermark to 195 s.
    let mut late = csv_rows(1001, 5, 5);
    late.push_str(csv_rows(2001, 200, 1).trim_start_matches("id,ts\n"));
    std::fs::write(dir.path().join("b.csv"), late).unwrap();
    until_returns(
        &client,
        "SELECT rows_in, late_rows FROM weir_catalog.sources WHERE name = 'f'",
        "106|5",
    )
    .await;
    // Windows before 190 s closed: every one with rows, each as it was
    // before the late rows came.
    until_returns(&client, "SELECT count(*), sum(n) FROM closed", "11|100").await;
    client.batch_execute("FLUSH").await.unwrap();
    for projection in ["closed", "updating"] {
        assert_eq!(
            value(
                &client,
                &format!("SELECT n FROM {projection} WHERE window_start = '2024-01-01 00:00:00'")
            )
            .await,
            "9",
            "{projection}"
        );
        assert_eq!(
            projection_late_rows(&client, projection).await,
            "5",
            "{projection}"
        );
    }
    // The updating projection has the open window at 200 s too.
    assert_eq!(
        value(&client, "SELECT count(*), sum(n) FROM updating").await,
        "12|101"
    );
}

/// State stays flat: 30 000 rows 100 ms apart (50 minutes of event time,
/// 300 ten-second windows) through a window aggregate, an interval
/// self-join and a top-2 per window. The operators' live state, sampled
/// while the source runs, stays within what one window and one band hold;
/// without closing it would hold every row read (3 000 groups, 60 000
/// join rows, 30 000 top-N rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_state_stays_flat_however_many_rows_pass() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE SOURCE stream (id BIGINT, v BIGINT, ts TIMESTAMP,
                 WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
               WITH (connector = 'datagen', max_rows = '30000', rows_per_second = '6000',
                     base_time = '1700000000000', fields.id.kind = 'sequence',
                     fields.ts.step_ms = '100');
             CREATE PROJECTION per_window AS
               SELECT window_start, id % 10 AS k, count(*) AS n
               FROM TUMBLE(stream, ts, INTERVAL '10' SECOND) GROUP BY window_start, id % 10;
             CREATE PROJECTION pairs AS
               SELECT a.id AS a, b.id AS b FROM stream a JOIN stream b ON a.id % 10 = b.id % 10
               WHERE a.ts BETWEEN b.ts - INTERVAL '2' SECOND AND b.ts;
             CREATE PROJECTION top2 AS
               SELECT window_start, id, v FROM (
                 SELECT window_start, id, v,
                        ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY v DESC, id) AS rn
                 FROM TUMBLE(stream, ts, INTERVAL '10' SECOND)) AS ranked
               WHERE rn <= 2;",
        )
        .await
        .expect("source and projections");
    let mut largest: std::collections::BTreeMap<String, i64> = Default::default();
    let mut samples_while_running = 0;
    loop {
        let running = value(
            &client,
            "SELECT rows_in FROM weir_catalog.sources WHERE name = 'stream' AND status = 'running'",
        )
        .await;
        for row in rows(
            &client,
            "SELECT projection || ' ' || operator, entries FROM weir_catalog.operator_state",
        )
        .await
        .unwrap_or_default()
        {
            let (what, entries) = row.rsplit_once('|').unwrap();
            let entries: i64 = entries.parse().unwrap();
            let at = largest.entry(what.to_string()).or_default();
            *at = (*at).max(entries);
        }
        if running.is_empty() {
            break;
        }
        let read: i64 = running.parse().unwrap();
        if (3_000..27_000).contains(&read) {
            samples_while_running += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    assert!(
        samples_while_running >= 3,
        "{samples_while_running} samples mid-run"
    );
    // Every window whole, and every pair: ids 10 and 20 before each one
    // (same id % 10, within 2 s), and itself.
    until_returns(
        &client,
        "SELECT count(*), sum(n) FROM per_window",
        "3000|30000",
    )
    .await;
    until_returns(&client, "SELECT count(*) FROM pairs", "89970").await;
    until_returns(
        &client,
        "SELECT count(*), count(DISTINCT window_start) FROM top2",
        "600|300",
    )
    .await;
    let aggregate = largest.get("per_window aggregate").copied().unwrap_or(0);
    let join = largest.get("pairs join").copied().unwrap_or(0);
    let top_n = largest.get("top2 top_n").copied().unwrap_or(0);
    assert!(aggregate > 0 && join > 0 && top_n > 0, "{largest:?}");
    assert!(
        top_n <= 100,
        "top-N state grew to {top_n} entries: {largest:?}"
    );
    assert!(
        aggregate <= 100,
        "aggregate state grew to {aggregate} entries: {largest:?}"
    );
    assert!(
        join <= 1_000,
        "join state grew to {join} entries: {largest:?}"
    );
}

/// `EMIT ON WINDOW CLOSE` on a top-N per window: each window's final
/// leader once (the last id of each 10-row window), never a rank that
/// changed later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_on_window_close_emits_each_window_top_n_once() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client.batch_execute(SOURCE).await.expect("source");
    client
        .batch_execute(
            "CREATE PROJECTION leaders AS
               SELECT window_start, id FROM (
                 SELECT window_start, id,
                        ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY id DESC) AS rn
                 FROM TUMBLE(ticks, ts, INTERVAL '10' SECOND)) AS ranked
               WHERE rn <= 1
             EMIT ON WINDOW CLOSE",
        )
        .await
        .expect("an EMIT ON WINDOW CLOSE top-N");
    // 200 windows, ids 10, 20, ..., 2000 lead them.
    until_returns(
        &client,
        "SELECT count(*), sum(id) FROM leaders",
        "200|201000",
    )
    .await;
    // Each emitted once: as many output changes as rows, no retraction.
    emitted_once(&client, "leaders", 200).await;
}

/// A projection over a window projection closes its own windows by the
/// watermark the first one carries: per-minute totals over 10-second
/// counts, emitted once per minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projection_over_a_window_projection_closes_by_its_watermark() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client.batch_execute(SOURCE).await.expect("source");
    client
        .batch_execute(&format!(
            "CREATE PROJECTION per10 AS {WINDOWS};
             CREATE PROJECTION per_minute AS
               SELECT date_bin(INTERVAL '60' SECOND, window_start) AS minute, sum(n) AS n
               FROM per10 GROUP BY 1
             EMIT ON WINDOW CLOSE;"
        ))
        .await
        .expect("a window over a window projection");
    // Ticks start 20 s into a minute and span 2 000 s: 34 minutes.
    until_returns(
        &client,
        "SELECT count(*), sum(n) FROM per_minute",
        "34|2000",
    )
    .await;
    emitted_once(&client, "per_minute", 34).await;
}

/// `projection` output as many changes as it holds rows (`rows`): each
/// emitted once, none retracted.
async fn emitted_once(client: &Client, projection: &str, rows: u64) {
    assert_eq!(
        value(
            client,
            &format!("SELECT rows_out FROM weir_catalog.projections WHERE name = '{projection}'"),
        )
        .await,
        rows.to_string(),
        "{projection}: every row emitted once"
    );
}

/// Watermark alignment: two sources joined on their windows, one read as
/// fast as it goes (20 000 rows, 100 ms apart) and one rate-limited (2 000
/// rows, 1 s apart, 200 a second), over the same 2 000 s of event time. The
/// fast one waits for the slow one instead of running to its end (its
/// windows would wait in the join until the slow one caught up); the join
/// is still exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_runs_ahead_waits_for_the_one_read_with_it() {
    let server = WeirServer::start();
    let client = server.connect().await;
    let per_window = |source: &str| {
        format!(
            "SELECT window_start, count(*) AS n FROM TUMBLE({source}, ts, INTERVAL '10' SECOND)
             GROUP BY window_start"
        )
    };
    client
        .batch_execute(&format!(
            "CREATE SOURCE fast (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
               WITH (connector = 'datagen', max_rows = '20000', base_time = '1700000000000',
                     fields.id.kind = 'sequence', fields.ts.step_ms = '100');
             CREATE SOURCE slow (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
               WITH (connector = 'datagen', max_rows = '2000', rows_per_second = '200',
                     base_time = '1700000000000', fields.id.kind = 'sequence',
                     fields.ts.step_ms = '1000');
             CREATE SOURCE unaligned (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
               WITH (connector = 'datagen', max_rows = '20000', base_time = '1700000000000',
                     fields.id.kind = 'sequence', fields.ts.step_ms = '100', max_drift = 'off');
             CREATE PROJECTION both_windows AS
               SELECT f.window_start, f.n AS fast_n, s.n AS slow_n
               FROM ({}) AS f JOIN ({}) AS s ON f.window_start = s.window_start;
             CREATE PROJECTION unaligned_windows AS
               SELECT f.window_start, f.n AS fast_n, s.n AS slow_n
               FROM ({}) AS f JOIN ({}) AS s ON f.window_start = s.window_start;",
            per_window("fast"),
            per_window("slow"),
            per_window("unaligned"),
            per_window("slow")
        ))
        .await
        .expect("two sources and their join");
    let mut checked = 0;
    // `max_drift = 'off'`: read to its end while the slow one is far behind.
    let mut unaligned_ran_ahead = false;
    loop {
        let read = rows(
            &client,
            "SELECT name, rows_in FROM weir_catalog.sources ORDER BY name",
        )
        .await
        .unwrap();
        let rows_in = |name: &str| -> i64 {
            read.iter()
                .find_map(|r| r.strip_prefix(&format!("{name}|")))
                .map_or(0, |n| n.parse().unwrap())
        };
        let (fast, slow) = (rows_in("fast"), rows_in("slow"));
        unaligned_ran_ahead |= slow < 1_000 && rows_in("unaligned") == 20_000;
        if (20..=1_000).contains(&slow) {
            // Ten fast rows per slow one, plus the minute it may run ahead
            // and one of its batches (4 096 rows).
            assert!(
                fast <= 10 * slow + 8_000,
                "fast read {fast} rows while slow read {slow}"
            );
            checked += 1;
        }
        if slow >= 2_000 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(checked >= 3, "{checked} samples while the slow source ran");
    assert!(unaligned_ran_ahead, "max_drift = 'off' waited");
    until_returns(
        &client,
        "SELECT count(*), sum(fast_n), sum(slow_n) FROM both_windows",
        "200|20000|2000",
    )
    .await;
}
