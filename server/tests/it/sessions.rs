//! SESSION windows: ad hoc over a table, in a projection that equals the
//! ad-hoc query as rows merge and split sessions (UPDATE, DELETE), and over
//! a source with a watermark: rows out of order within its delay, late
//! rows dropped and counted, sessions emitted once on close across a
//! `kill -9`.

use std::time::Duration;

use crate::harness::{WeirServer, eventually, try_rows as rows};
use crate::sources::{error_of, kill_and_restart, projection_late_rows, until_returns, value};

const PER_SESSION: &str = "SELECT uid, window_start, window_end, count(*) AS n, sum(v) AS s
    FROM SESSION({rel}, ts, INTERVAL '10' SECOND, uid) GROUP BY uid, window_start, window_end";

fn per_session(relation: &str) -> String {
    PER_SESSION.replace("{rel}", relation)
}

/// Waits until `projection`'s rows are `want` (sorted rows as `try_rows`
/// gives them).
async fn until_rows(client: &tokio_postgres::Client, projection: &str, want: &[String]) {
    let sql = format!("SELECT * FROM {projection}");
    let mut last = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            last = rows(client, &sql).await.unwrap_or_default();
            if last == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "{projection}: {last:#?}\nwant {want:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_projection_equals_the_query_ad_hoc_as_rows_merge_and_split_sessions() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE clicks (id BIGINT PRIMARY KEY, uid BIGINT, v BIGINT, ts TIMESTAMP);
             INSERT INTO clicks VALUES
               (1, 1, 1, '2024-01-01 00:00:00'), (2, 1, 2, '2024-01-01 00:00:05'),
               (3, 1, 3, '2024-01-01 00:00:30'), (4, 2, 4, '2024-01-01 00:00:01'),
               (5, 2, 5, NULL);
             CREATE PROJECTION sessions AS {}",
            per_session("clicks")
        ))
        .await
        .expect("table and projection");
    // NULL times are in no session; 0 s and 5 s are one session (gap
    // under 10 s), 30 s another.
    let ad_hoc = rows(&client, &per_session("clicks")).await.unwrap();
    assert_eq!(
        ad_hoc,
        vec![
            "1|2024-01-01 00:00:00|2024-01-01 00:00:15|2|3",
            "1|2024-01-01 00:00:30|2024-01-01 00:00:40|1|3",
            "2|2024-01-01 00:00:01|2024-01-01 00:00:11|1|4",
        ]
    );
    until_rows(&client, "sessions", &ad_hoc).await;
    // A row at 14 s joins the first session and one at 22 s bridges it to
    // the 30 s one; then the 5 s row moves to 50 s, splitting it again.
    let steps = [
        "INSERT INTO clicks VALUES (6, 1, 6, '2024-01-01 00:00:14'), (7, 1, 7, '2024-01-01 00:00:22')",
        "UPDATE clicks SET ts = '2024-01-01 00:00:50' WHERE id = 2",
        "DELETE FROM clicks WHERE id = 7",
        "UPDATE clicks SET uid = 2 WHERE id = 6",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for step in steps {
        client.batch_execute(step).await.expect(step);
        let ad_hoc = rows(&client, &per_session("clicks")).await.unwrap();
        seen.insert(ad_hoc.len());
        until_rows(&client, "sessions", &ad_hoc).await;
    }
    assert!(seen.len() > 1, "the steps changed the number of sessions");
    let explained = rows(
        &client,
        &format!("EXPLAIN CREATE PROJECTION s2 AS {}", per_session("clicks")),
    )
    .await
    .unwrap()
    .join("\n");
    assert!(
        explained.contains("session window: gap INTERVAL '10 seconds'"),
        "{explained}"
    );

    // Bad calls name what is wrong.
    for (sql, code, says) in [
        (
            "SELECT * FROM SESSION(clicks, ts)",
            "22023",
            "SESSION expects",
        ),
        (
            "SELECT * FROM SESSION(clicks, ts, INTERVAL '1' MONTH)",
            "0A000",
            "months",
        ),
        (
            "SELECT * FROM SESSION(clicks, v, INTERVAL '1' SECOND)",
            "42000",
            "TIMESTAMP",
        ),
        (
            "SELECT * FROM SESSION(clicks, ts, INTERVAL '1' SECOND, uid + 1)",
            "22023",
            "partition column",
        ),
    ] {
        let (got, message) = error_of(&client, sql).await;
        assert_eq!(got, code, "{sql}: {message}");
        assert!(message.contains(says), "{sql}: {message}");
    }
}

/// Row `i` of the clickstream: five users, about one row per user every
/// ten seconds with gaps that end sessions, a pause every 40 rows, and
/// times up to 2 s out of order.
fn click(i: i64) -> (i64, i64, i64) {
    let uid = (i * i + 3 * i) % 5;
    let seconds = i * 2 + (i / 40) * 60 + (i * 7 % 5) - 2;
    (uid, i, 100 + seconds)
}

/// The source's watermark once the first `n` rows are read: 5 s behind
/// the latest.
fn watermark_after(n: i64) -> String {
    let last = (0..n).map(|i| click(i).2).max().unwrap();
    let at = chrono::NaiveDate::from_ymd_opt(2024, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        + chrono::Duration::seconds(last - 5);
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn csv(clicks: impl Iterator<Item = (i64, i64, i64)>) -> String {
    let base = chrono::NaiveDate::from_ymd_opt(2024, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    let mut out = String::from("uid,v,ts\n");
    for (uid, v, seconds) in clicks {
        let ts = base + chrono::Duration::seconds(seconds);
        out.push_str(&format!("{uid},{v},{}\n", ts.format("%Y-%m-%dT%H:%M:%S")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_close_on_the_watermark_once_each_across_kill_9_with_late_rows_counted() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.csv"), csv((0..200).map(click))).unwrap();
    client
        .batch_execute(&format!(
            "CREATE SOURCE clicks (uid BIGINT, v BIGINT, ts TIMESTAMP,
                 WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
               WITH (connector = 'files', path = '{}', format = 'csv', poll_interval_ms = '50');
             CREATE PROJECTION closed AS {} EMIT ON WINDOW CLOSE;
             CREATE PROJECTION updating AS {};
             CREATE TABLE reference (uid BIGINT, v BIGINT, ts TIMESTAMP);
             CREATE TABLE tick (n INT);",
            dir.path().display(),
            per_session("clicks"),
            per_session("clicks"),
        ))
        .await
        .expect("source, projections and table");
    let explained = rows(
        &client,
        &format!(
            "EXPLAIN CREATE PROJECTION c AS {} EMIT ON WINDOW CLOSE",
            per_session("clicks")
        ),
    )
    .await
    .unwrap()
    .join("\n");
    assert!(
        explained.contains("dropped when the watermark of clicks.ts passes its end"),
        "{explained}"
    );
    assert!(!explained.contains("state unbounded"), "{explained}");
    until_returns(
        &client,
        "SELECT rows_in FROM weir_catalog.sources WHERE name = 'clicks'",
        "200",
    )
    .await;
    std::fs::write(dir.path().join("b.csv"), csv((200..400).map(click))).unwrap();
    until_returns(
        &client,
        "SELECT rows_in FROM weir_catalog.sources WHERE name = 'clicks'",
        "400",
    )
    .await;
    // Some sessions closed (and were emitted) before the kill.
    eventually(Duration::from_secs(60), "sessions closed", || async {
        let closed = value(&client, "SELECT count(*) FROM closed").await;
        (closed.parse::<i64>().unwrap_or(0) > 0).then_some(())
    })
    .await;
    // The watermark of the first 400 rows, sealed, before the kill.
    until_returns(
        &client,
        "SELECT current_watermark FROM weir_catalog.sources WHERE name = 'clicks'",
        &watermark_after(400),
    )
    .await;
    // A seal after that: an epoch closed by a write, then sealed.
    let sealed = value(
        &client,
        "SELECT coalesce(max(epoch), 0) FROM weir_catalog.epochs WHERE kind = 'epoch'",
    )
    .await;
    client
        .batch_execute("INSERT INTO tick VALUES (1); FLUSH")
        .await
        .unwrap();
    eventually(Duration::from_secs(60), "a seal", || async {
        let now = value(
            &client,
            "SELECT coalesce(max(epoch), 0) FROM weir_catalog.epochs WHERE kind = 'epoch'",
        )
        .await;
        (now.parse::<i64>().unwrap_or(0) > sealed.parse::<i64>().unwrap_or(0)).then_some(())
    })
    .await;
    let client = kill_and_restart(&mut server, "between files").await;
    // Three rows far behind the watermark, then the rest on time.
    let late = [(1, 9001, 150), (2, 9002, 400), (3, 9003, 700)];
    std::fs::write(
        dir.path().join("c.csv"),
        csv(late.into_iter().chain((400..600).map(click))),
    )
    .unwrap();
    // The counters count since the restart; the sealed watermark made
    // the three rows late.
    until_returns(
        &client,
        "SELECT rows_in, late_rows FROM weir_catalog.sources WHERE name = 'clicks'",
        "203|3",
    )
    .await;

    // The reference: every row on time, in a table, run ad hoc.
    let on_time: Vec<String> = (0..600)
        .map(click)
        .map(|(uid, v, s)| {
            format!("({uid}, {v}, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{s} seconds')")
        })
        .collect();
    client
        .batch_execute(&format!(
            "INSERT INTO reference VALUES {}",
            on_time.join(", ")
        ))
        .await
        .expect("reference rows");
    let watermark = watermark_after(600);
    until_returns(
        &client,
        "SELECT current_watermark FROM weir_catalog.sources WHERE name = 'clicks'",
        &watermark,
    )
    .await;
    let all = rows(&client, &per_session("reference")).await.unwrap();
    let closed = rows(
        &client,
        &format!(
            "SELECT * FROM ({}) AS s WHERE window_end < TIMESTAMP '{watermark}'",
            per_session("reference")
        ),
    )
    .await
    .unwrap();
    assert!(
        closed.len() > 50 && closed.len() < all.len(),
        "{} of {}",
        closed.len(),
        all.len()
    );
    until_rows(&client, "updating", &all).await;
    until_rows(&client, "closed", &closed).await;
    // A session closes once the watermark is past its end (the aggregate
    // cannot tell that none ends exactly at it). Each was emitted once: a second emission would be a
    // second equal row (or a weight of 2, shown as two rows).
    assert_eq!(
        value(
            &client,
            "SELECT count(*) FROM (SELECT DISTINCT * FROM closed) AS d"
        )
        .await,
        closed.len().to_string()
    );
    for projection in ["closed", "updating"] {
        assert_eq!(
            projection_late_rows(&client, projection).await,
            "3",
            "{projection}"
        );
    }
    // The operators keep only open sessions' rows, not the 600 read.
    let entries = eventually(Duration::from_secs(30), "operator state", || async {
        let found = value(
            &client,
            "SELECT sum(entries) FROM weir_catalog.operator_state \
             WHERE projection = 'closed' AND operator = 'session_window'",
        )
        .await;
        found.parse::<i64>().ok()
    })
    .await;
    assert!(entries < 100, "{entries} session rows kept");
}
