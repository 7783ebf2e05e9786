//! Projections across restarts and sessions: a projection survives `kill -9`
//! (restored from the latest sealed epoch plus the table log after it, or
//! rebuilt from the durable tables), a session reads its own writes without
//! FLUSH, and with `read_your_writes = off` a reader sees the latest
//! completed epoch.

use std::time::Duration;

use tokio_postgres::Client;

use crate::harness::WeirServer;

async fn rows(client: &Client, sql: &str) -> Vec<String> {
    crate::harness::try_rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

/// A table and a grouped projection over it; both tests start from this.
const SETUP: &str = "CREATE TABLE pr_items (id INT PRIMARY KEY, g TEXT, v INT);
             INSERT INTO pr_items VALUES (1, 'a', 5), (2, 'a', 7), (3, 'b', 1);
             CREATE PROJECTION pr_by_g AS SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo FROM pr_items GROUP BY g;";

const QUERY: &str = "SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo FROM pr_items GROUP BY g";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projection_survives_kill_9_and_keeps_updating() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "{SETUP}
             CREATE PROJECTION pr_top AS SELECT g, n FROM pr_by_g WHERE n > 1;
             DELETE FROM pr_items WHERE id = 1;"
        ))
        .await
        .expect("setup");
    let before = rows(&client, "SELECT * FROM pr_by_g").await;
    assert_eq!(before, rows(&client, QUERY).await);
    drop(client);

    server.kill();
    server.restart();
    let client = server.connect().await;
    assert_eq!(rows(&client, "SELECT * FROM pr_by_g").await, before);
    client
        .batch_execute("INSERT INTO pr_items VALUES (4, 'b', 0), (5, 'c', 3)")
        .await
        .expect("insert after restart");
    assert_eq!(
        rows(&client, "SELECT * FROM pr_by_g").await,
        rows(&client, QUERY).await,
        "the rebuilt projection keeps up with new writes"
    );
    assert_eq!(rows(&client, "SELECT * FROM pr_top").await, vec!["b|2"]);
    let status = rows(
        &client,
        "SELECT name, status FROM weir_catalog.projections ORDER BY name",
    )
    .await;
    assert_eq!(status, vec!["pr_by_g|running", "pr_top|running"]);
}

/// A projection is planned again at every start under the settings it was
/// created with: its unqualified names resolve through the creator's
/// search_path, and its date literal keeps the creator's DateStyle order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_plans_a_projection_under_its_creators_settings() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE SCHEMA pr_app;
             CREATE TABLE pr_app.pr_events (id INT PRIMARY KEY, d DATE);
             INSERT INTO pr_app.pr_events VALUES (1, '2024-01-01'), (2, '2024-01-15');
             SET search_path = pr_app;
             SET DateStyle = 'DMY';
             CREATE PROJECTION pr_recent AS SELECT count(*) AS n FROM pr_events WHERE d >= '02/01/2024';",
        )
        .await
        .expect("setup");
    assert_eq!(rows(&client, "SELECT n FROM pr_recent").await, vec!["1"]);
    drop(client);

    server.kill();
    server.restart();
    let client = server.connect().await;
    // 2024-01-10 is on or after 2 January (DMY), not 1 February (MDY).
    client
        .batch_execute("INSERT INTO pr_app.pr_events VALUES (3, '2024-01-10')")
        .await
        .expect("insert after restart");
    assert_eq!(
        rows(&client, "SELECT n FROM pr_app.pr_recent").await,
        vec!["2"]
    );
    assert_eq!(
        rows(
            &client,
            "SELECT status FROM weir_catalog.projections WHERE name = 'pr_recent'"
        )
        .await,
        vec!["running"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_read_their_writes_and_others_read_completed_epochs() {
    let server = WeirServer::start();
    let writer = server.connect().await;
    writer
        .batch_execute(
            "SET barrier_interval = '1h';
             CREATE TABLE pr_counter (id INT PRIMARY KEY, v INT);
             CREATE PROJECTION pr_total AS SELECT sum(v) AS total FROM pr_counter;",
        )
        .await
        .expect("setup");
    writer
        .batch_execute("INSERT INTO pr_counter VALUES (1, 10)")
        .await
        .expect("insert");
    // No FLUSH, and the timer would not fire for an hour: the writer still
    // sees its write, through an on-demand barrier.
    assert_eq!(rows(&writer, "SELECT * FROM pr_total").await, vec!["10"]);

    let reader = server.connect().await;
    reader
        .batch_execute("SET read_your_writes = off")
        .await
        .expect("opt out");
    writer
        .batch_execute("INSERT INTO pr_counter VALUES (2, 5)")
        .await
        .expect("insert");
    // The reader made no writes and opted out: it sees the completed epoch,
    // which does not hold the second insert until a barrier.
    assert_eq!(rows(&reader, "SELECT * FROM pr_total").await, vec!["10"]);
    reader.batch_execute("FLUSH").await.expect("flush");
    assert_eq!(rows(&reader, "SELECT * FROM pr_total").await, vec!["15"]);

    // Back to a short interval: epochs close on their own.
    writer
        .batch_execute("SET barrier_interval = '50ms'; INSERT INTO pr_counter VALUES (3, 1)")
        .await
        .expect("insert");
    crate::harness::eventually(
        Duration::from_secs(10),
        "the timer closes an epoch",
        || async { (rows(&reader, "SELECT * FROM pr_total").await == vec!["16"]).then_some(()) },
    )
    .await;
}

/// The seals in the data directory's state store: (epoch, committer generation, JSON).
fn seals(server: &WeirServer) -> Vec<(u64, u64, String)> {
    seals_in(&server.data_dir().join("state"))
}

/// The seals of the state store in directory `state`.
fn seals_in(state: &std::path::Path) -> Vec<(u64, u64, String)> {
    let dir = state.join("seals");
    let mut out: Vec<(u64, u64, String)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                .filter_map(|text| {
                    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
                    Some((json["epoch"].as_u64()?, json["generation"].as_u64()?, text))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|(epoch, _, _)| *epoch);
    out
}

/// Waits (bounded) for an epoch seal of `generation` that covers a
/// table-log LSN.
async fn wait_for_checkpoint(server: &WeirServer, generation: u64) -> u64 {
    wait_for_seal(server, generation, 0).await
}

/// Waits (bounded) for an epoch seal of `generation` that covers a
/// table-log LSN and holds the state of at least `projections` projections.
async fn wait_for_seal(server: &WeirServer, generation: u64, projections: usize) -> u64 {
    for _ in 0..150 {
        if let Some((epoch, _, _)) = seals(server).into_iter().rev().find(|(_, g, text)| {
            *g == generation
                && text.contains("table_log_lsn")
                && text.contains(r#""kind": "epoch""#)
                && text.matches(r#""projection:"#).count() >= projections
        }) {
            return epoch;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "no checkpoint sealed by generation {generation} within 30 s; seals: {:?}\n{}",
        seals(server)
            .iter()
            .map(|(e, g, _)| (*e, *g))
            .collect::<Vec<_>>(),
        server.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_are_checkpointed_and_a_restart_fences_the_old_generation() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "{SETUP}
             FLUSH;"
        ))
        .await
        .expect("setup");
    let first = wait_for_checkpoint(&server, 1).await;
    let backends = rows(
        &client,
        "SELECT generation FROM weir_catalog.backends WHERE resource LIKE 'state:%'",
    )
    .await;
    assert_eq!(backends, vec!["1"]);
    drop(client);

    server.kill();
    server.restart();
    let client = server.connect().await;
    let backends = rows(
        &client,
        "SELECT generation FROM weir_catalog.backends WHERE resource LIKE 'state:%'",
    )
    .await;
    assert_eq!(backends, vec!["2"], "a restart claims the next generation");
    client
        .batch_execute("INSERT INTO pr_items VALUES (4, 'c', 3); FLUSH")
        .await
        .expect("write after restart");
    let second = wait_for_checkpoint(&server, 2).await;
    assert!(
        second > first,
        "epochs keep increasing across restarts: {first} then {second}"
    );
    let all = seals(&server);
    let epochs: Vec<u64> = all.iter().map(|(e, _, _)| *e).collect();
    let mut unique = epochs.clone();
    unique.dedup();
    assert_eq!(epochs, unique, "every epoch is sealed once");
    assert!(
        all.iter()
            .filter(|(e, _, _)| *e > second)
            .all(|(_, g, _)| *g == 2),
        "nothing after generation 2's checkpoint is sealed by generation 1"
    );
    assert_eq!(
        rows(&client, "SELECT * FROM pr_by_g").await,
        rows(&client, QUERY).await
    );
}

/// Projections of every stateful kind over two tables; each pair is
/// (projection, the same query ad hoc).
const RESTORE_SETUP: &str = "CREATE TABLE rs_orders (id INT PRIMARY KEY, customer INT, amount INT);
     CREATE TABLE rs_customers (id INT PRIMARY KEY, name TEXT);
     INSERT INTO rs_customers VALUES (1, 'ann'), (2, 'bob'), (3, 'cy');
     INSERT INTO rs_orders VALUES (1, 1, 10), (2, 1, 20), (3, 2, 5), (4, 3, 7);
     CREATE PROJECTION rs_totals AS SELECT customer, count(*) AS n, sum(amount) AS s, max(amount) AS hi FROM rs_orders GROUP BY customer;
     CREATE PROJECTION rs_named AS SELECT c.name, o.amount FROM rs_orders o JOIN rs_customers c ON o.customer = c.id;
     CREATE PROJECTION rs_top AS SELECT customer, s FROM rs_totals ORDER BY s DESC LIMIT 2;
     CREATE PROJECTION rs_lonely AS SELECT c.name FROM rs_customers c WHERE NOT EXISTS (SELECT 1 FROM rs_orders o WHERE o.customer = c.id);
     FLUSH;";

const RESTORE_CHECKS: &[(&str, &str)] = &[
    (
        "SELECT * FROM rs_totals",
        "SELECT customer, count(*) AS n, sum(amount) AS s, max(amount) AS hi FROM rs_orders GROUP BY customer",
    ),
    (
        "SELECT * FROM rs_named",
        "SELECT c.name, o.amount FROM rs_orders o JOIN rs_customers c ON o.customer = c.id",
    ),
    (
        "SELECT * FROM rs_top",
        "SELECT customer, sum(amount) AS s FROM rs_orders GROUP BY customer ORDER BY s DESC LIMIT 2",
    ),
    (
        "SELECT * FROM rs_lonely",
        "SELECT c.name FROM rs_customers c WHERE NOT EXISTS (SELECT 1 FROM rs_orders o WHERE o.customer = c.id)",
    ),
];

async fn assert_restored_answers(client: &Client, when: &str) {
    for (projection, query) in RESTORE_CHECKS {
        assert_eq!(
            rows(client, projection).await,
            rows(client, query).await,
            "{when}: {projection} differs from the same query ad hoc"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_restores_projections_from_the_seal_and_replays_the_log_after_it() {
    let mut server = WeirServer::start_with(
        crate::harness::Options::default()
            .arg("--barrier-interval")
            .arg("100ms"),
    );
    let client = server.connect().await;
    client.batch_execute(RESTORE_SETUP).await.expect("setup");
    wait_for_seal(&server, 1, 4).await;
    // No more checkpoints: what follows is only in the table log.
    client
        .batch_execute(
            "SET barrier_interval = '1h';
             INSERT INTO rs_orders VALUES (5, 2, 50), (6, 3, 1);
             UPDATE rs_orders SET amount = amount + 1 WHERE customer = 1;
             DELETE FROM rs_orders WHERE id = 4;
             INSERT INTO rs_customers VALUES (4, 'dee');
             BEGIN; DELETE FROM rs_orders WHERE customer = 3; INSERT INTO rs_orders VALUES (7, 4, 2); COMMIT;",
        )
        .await
        .expect("writes after the checkpoint");
    let before: Vec<Vec<String>> = {
        let mut out = Vec::new();
        for (projection, _) in RESTORE_CHECKS {
            out.push(rows(&client, projection).await);
        }
        out
    };
    assert_restored_answers(&client, "before the kill").await;
    drop(client);

    server.kill();
    server.restart();
    let log = server.log();
    let restored = log
        .lines()
        .filter(|l| l.contains("projections restored from the sealed epoch"))
        .last()
        .unwrap_or_else(|| panic!("no restore logged:\n{}", server.log_tail()));
    assert!(
        restored.contains("projections=4") && !restored.contains("replayed=0"),
        "all four restored, with table-log records replayed: {restored}"
    );
    assert!(
        !log.contains("projection rebuilt"),
        "nothing rebuilt:\n{}",
        server.log_tail()
    );
    let client = server.connect().await;
    for ((projection, _), expected) in RESTORE_CHECKS.iter().zip(&before) {
        assert_eq!(
            &rows(&client, projection).await,
            expected,
            "{projection} after restore"
        );
    }
    assert_restored_answers(&client, "after restore").await;
    // The first checkpoint after the restore snapshots every vnode.
    crate::harness::eventually(
        Duration::from_secs(10),
        "per-vnode checkpoint rows",
        || async {
            let fingerprints = rows(
            &client,
            "SELECT DISTINCT name, fingerprint IS NOT NULL, sealed_epoch > 0, snapshot_bytes > 0
             FROM weir_catalog.checkpoints",
        )
        .await;
            (fingerprints
                == [
                    "rs_lonely|t|t|t",
                    "rs_named|t|t|t",
                    "rs_top|t|t|t",
                    "rs_totals|t|t|t",
                ])
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        rows(&client, "SELECT count(*) FROM weir_catalog.vnodes").await,
        vec!["256"],
        "every vnode has a chain"
    );

    // Restored projections keep updating, are checkpointed again, and a
    // second restart restores from the new seal.
    client
        .batch_execute(
            "SET barrier_interval = '100ms';
             INSERT INTO rs_orders VALUES (8, 1, 100), (9, 2, 3);
             DELETE FROM rs_customers WHERE id = 2;
             FLUSH;",
        )
        .await
        .expect("writes after restore");
    assert_restored_answers(&client, "writes after restore").await;
    wait_for_seal(&server, 2, 4).await;
    let epochs = rows(
        &client,
        "SELECT count(*) > 0 FROM weir_catalog.epochs WHERE kind = 'epoch' AND generation = 2 AND duration_ms IS NOT NULL",
    )
    .await;
    assert_eq!(
        epochs,
        vec!["t"],
        "this process's seals are listed with durations"
    );
    client
        .batch_execute("SET barrier_interval = '1h'; INSERT INTO rs_orders VALUES (10, 3, 9)")
        .await
        .expect("write after the second checkpoint");
    drop(client);
    server.kill();
    server.restart();
    let client = server.connect().await;
    assert_restored_answers(&client, "after the second restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_state_store_race_and_the_older_is_fenced() {
    let shared = tempfile::tempdir().expect("shared state dir");
    let url = format!("file://{}", shared.path().display());
    let options = || {
        crate::harness::Options::default()
            .arg("--state-url")
            .arg(url.clone())
            .arg("--barrier-interval")
            .arg("50ms")
    };
    let first = WeirServer::start_with(options());
    let a = first.connect().await;
    a.batch_execute(SETUP)
        .await
        .expect("setup on the first server");

    // The same data directory: the second process refuses to start.
    let clash = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--data-dir"])
        .arg(first.data_dir())
        .args([
            "--pg-addr",
            "127.0.0.1:0",
            "--flight-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run a second weir on the same data directory");
    assert!(
        !clash.status.success(),
        "a second weir on one data directory must not start"
    );
    let stderr = String::from_utf8_lossy(&clash.stderr);
    assert!(
        stderr.contains("in use by another weir process"),
        "{stderr}"
    );

    // The first server writes continuously while the second claims the store.
    let writes = tokio::spawn(async move {
        let mut refused = None;
        for i in 0..20_000 {
            match a
                .simple_query(&format!(
                    "INSERT INTO pr_items VALUES ({}, 'w', 1)",
                    1000 + i
                ))
                .await
            {
                Ok(_) => {}
                Err(e) => {
                    refused = Some(crate::harness::sqlstate(&e));
                    break;
                }
            }
        }
        (a, refused)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = WeirServer::start_with(options());
    let b = second.connect().await;
    b.batch_execute(
        "CREATE TABLE other (id INT PRIMARY KEY);
         CREATE PROJECTION other_count AS SELECT count(*) AS n FROM other;
         INSERT INTO other VALUES (1), (2); FLUSH;",
    )
    .await
    .expect("the second server serves");
    let (a, refused) = tokio::time::timeout(Duration::from_secs(60), writes)
        .await
        .expect("the first server stops taking writes once fenced")
        .expect("writer task");
    assert_eq!(
        refused.as_deref(),
        Some("25006"),
        "a fenced server refuses writes as read-only"
    );
    // It still serves reads, and says why it is not ready.
    assert_eq!(
        rows(&a, "SELECT count(*) FROM pr_items WHERE id = 1").await,
        vec!["1"]
    );
    assert_eq!(
        rows(
            &a,
            "SELECT readiness FROM weir_catalog.backends WHERE resource LIKE 'state:%'"
        )
        .await,
        vec!["fenced"]
    );
    let ready = crate::http::http_get(first.http_port, "/ready")
        .expect("GET /ready")
        .status;
    assert_eq!(ready, 503);

    b.batch_execute("INSERT INTO other VALUES (3); FLUSH")
        .await
        .expect("write");
    // Until the winner has sealed an epoch of its own (a checkpoint comes
    // when it comes; a loaded machine takes longer than an idle one).
    let winner_sealed = |all: &[(u64, u64, String)]| {
        all.iter()
            .any(|(_, g, t)| *g == 2 && t.contains(r#""kind": "epoch""#))
    };
    for _ in 0..200 {
        if winner_sealed(&seals_in(shared.path())) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = seals_in(shared.path());
    let takeover = all
        .iter()
        .find(|(_, g, _)| *g == 2)
        .map(|(e, _, _)| *e)
        .expect("the second server sealed");
    assert!(
        all.iter()
            .all(|(e, g, _)| (*g == 1 && *e < takeover) || (*g == 2 && *e >= takeover)),
        "after the second claim only generation 2 seals: {:?}",
        all.iter().map(|(e, g, _)| (*e, *g)).collect::<Vec<_>>()
    );
    assert!(
        all.iter()
            .filter(|(_, g, t)| *g == 2 && t.contains(r#""kind": "epoch""#))
            .count()
            > 0,
        "the winner keeps sealing epochs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_log_is_truncated_behind_table_snapshots_and_disk_stays_bounded() {
    let mut server = WeirServer::start_with(
        crate::harness::Options::default()
            .arg("--barrier-interval")
            .arg("50ms")
            .arg("--log-compaction-bytes")
            .arg("0"),
    );
    let client = server.connect().await;
    client
        .batch_execute(&format!("{SETUP} FLUSH;"))
        .await
        .expect("setup");
    let log_file = server.data_dir().join("tablelog").join("table.log");
    // The bytes ever logged: a truncated log starts with `WEIRLOG1` and
    // the LSN it starts at, and holds what follows its 16-byte header.
    let logged = || {
        let head = std::fs::read(&log_file).expect("read the table log");
        assert_eq!(
            &head[..8],
            b"WEIRLOG1",
            "the log was rewritten by truncation"
        );
        u64::from_le_bytes(head[8..16].try_into().unwrap()) + head.len() as u64 - 16
    };
    // A steady update load over the same rows that never pauses: the log
    // grows by every update, but compaction behind each seal keeps it near
    // the size of the changes since the last table snapshot (it must not
    // wait for a moment when every commit is in a closed epoch).
    let update = |round: u64| {
        format!(
            "UPDATE pr_items SET v = v + 1; INSERT INTO pr_items VALUES ({}, 'z', {round}) ON CONFLICT (id) DO UPDATE SET v = excluded.v",
            10 + round % 20
        )
    };
    // Until the first snapshot (the first seal after the start, whenever
    // that comes), then measured.
    let mut round = 0;
    while !server
        .log()
        .contains("tables snapshotted; the table log before it is truncated")
    {
        client.batch_execute(&update(round)).await.expect("update");
        round += 1;
        assert!(
            round < 5_000,
            "no table snapshot was taken in 5000 commits\n{}",
            server.log_tail()
        );
    }
    let start = logged();
    let mut largest = 0u64;
    for _ in 0..300 {
        client.batch_execute(&update(round)).await.expect("update");
        round += 1;
        largest = largest.max(std::fs::metadata(&log_file).map_or(0, |m| m.len()));
    }
    let during = logged() - start;
    assert!(
        largest * 4 < during,
        "the table log file reached {largest} bytes while {during} were logged: it is not kept small\n{}",
        server.log_tail()
    );
    client.batch_execute("FLUSH").await.expect("flush");
    let expected = rows(&client, "SELECT * FROM pr_items").await;
    let projection = rows(&client, "SELECT * FROM pr_by_g").await;
    assert_eq!(projection, rows(&client, QUERY).await);
    drop(client);

    server.kill();
    server.restart();
    let client = server.connect().await;
    assert_eq!(
        rows(&client, "SELECT * FROM pr_items").await,
        expected,
        "the table comes back from its snapshot plus the log after it"
    );
    assert_eq!(rows(&client, "SELECT * FROM pr_by_g").await, projection);
    client
        .batch_execute("INSERT INTO pr_items (id, g, v) VALUES (999, 'q', 1)")
        .await
        .expect("insert after restart");
    assert_eq!(
        rows(&client, "SELECT * FROM pr_by_g").await,
        rows(&client, QUERY).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_projections_are_restored_managed_statements_answer_57p03() {
    let mut options = crate::harness::Options::default()
        .arg("--barrier-interval")
        .arg("100ms");
    options.no_wait_ready = true;
    let mut server = WeirServer::start_with(options);
    server.wait_ready().expect("a fresh server is ready");
    let client = server.connect().await;
    // Enough state that restoring it takes a while in a debug build.
    client
        .batch_execute(
            "CREATE TABLE rd_big (id BIGINT PRIMARY KEY, v BIGINT);
             INSERT INTO rd_big SELECT value, value % 7 FROM generate_series(1, 300000) AS t(value);
             CREATE PROJECTION rd_copy AS SELECT id, v FROM rd_big WHERE v > 0;
             FLUSH;",
        )
        .await
        .expect("setup");
    wait_for_seal(&server, 1, 1).await;
    let expected = rows(&client, "SELECT count(*) FROM rd_copy").await;
    drop(client);

    server.kill();
    server.restart();
    let client = server.connect().await;
    let readiness = || async {
        rows(
            &client,
            "SELECT readiness FROM weir_catalog.backends WHERE resource LIKE 'state:%'",
        )
        .await
        .join("")
    };
    let mut refused = false;
    while readiness().await == "restoring" {
        let read = client.simple_query("SELECT count(*) FROM rd_copy").await;
        let write = client
            .simple_query("INSERT INTO rd_big VALUES (0, 1)")
            .await;
        let ready = crate::http::http_get(server.http_port, "/ready").map(|r| r.status);
        if readiness().await != "restoring" {
            break; // it became ready meanwhile: the answers may be either
        }
        for outcome in [read.map(|_| ()), write.map(|_| ())] {
            let error = outcome.expect_err("a managed statement during the restore");
            let db = error.as_db_error().expect("a server error");
            assert_eq!(db.code().code(), "57P03", "{db:?}");
            assert!(
                db.hint().unwrap_or("").contains("weir_wait_ready"),
                "{db:?}"
            );
        }
        assert_eq!(ready.expect("GET /ready"), 503);
        refused = true;
        break;
    }
    assert!(
        refused,
        "the restore ended before a statement could observe it\n{}",
        server.log_tail()
    );
    assert_eq!(
        rows(&client, "SELECT weir_wait_ready('60s')").await,
        vec!["t"]
    );
    assert_eq!(
        rows(&client, "SELECT count(*) FROM rd_copy").await,
        expected
    );
    let ready = crate::http::http_get(server.http_port, "/ready").expect("GET /ready");
    assert_eq!(ready.status, 200);
}
