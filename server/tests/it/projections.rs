//! Projections across restarts and sessions: a projection survives `kill -9`
//! (it is rebuilt from the durable tables), a session reads its own writes
//! without FLUSH, and with `read_your_writes = off` a reader sees the latest
//! completed epoch.

use std::time::Duration;

use tokio_postgres::Client;

use crate::harness::WeirServer;

async fn rows(client: &Client, sql: &str) -> Vec<String> {
    let mut out: Vec<String> = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect();
    out.sort();
    out
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
    let dir = server.data_dir().join("state").join("seals");
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

/// Waits (bounded) for a seal of `generation` that covers a table-log LSN.
async fn wait_for_checkpoint(server: &WeirServer, generation: u64) -> u64 {
    for _ in 0..150 {
        if let Some((epoch, _, _)) = seals(server)
            .into_iter()
            .rev()
            .find(|(_, g, text)| *g == generation && text.contains("table_log_lsn"))
        {
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
