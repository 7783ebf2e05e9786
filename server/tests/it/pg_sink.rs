//! The `postgres` sink against a throwaway PostgreSQL: CREATE SINK checks
//! (options, the target table, input that retracts), the fencing protocol
//! driven directly (a deposed writer's stage and commit refused, a
//! sealed-but-uncommitted epoch delivered by the next writer, a staged
//! epoch after the seal dropped), and append, upsert and changelog sinks
//! over a nexmark source exactly right after `kill -9` at random moments.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use tokio_postgres::Client;
use weir_common::ChangeBatch;
use weir_connectors::{ConnectorKind, Sink, SinkOpen};

use crate::harness::{WeirServer, try_rows as rows};
use crate::postgres::{PgAndWeir, PgCluster, pg_and_weir};
use crate::sources::{
    ROUNDS, crash_rng, crash_server, error_of, killed_then_every_bid, status_becomes,
    until_returns, value,
};

/// Fixed so every run and every restart generates the same events.
const BASE_TIME: &str = "1700000000000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_sink_is_checked_against_its_target_at_create() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute(
            "CREATE TABLE hits (auction bigint, price bigint);
             CREATE TABLE per_auction (auction bigint PRIMARY KEY, price bigint)",
        )
        .await
        .unwrap();
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '10',
                 base_time = '{BASE_TIME}')"
        ))
        .await
        .unwrap();
    let dsn = pg.dsn();
    let create = |rest: &str| {
        format!(
            "CREATE SINK s AS SELECT auction, price FROM bid WITH (connector = 'postgres', dsn = '{dsn}', {rest})"
        )
    };

    let (code, message) = error_of(&client, &create("table = 'nowhere'")).await;
    assert_eq!(code, "22023", "{message}");
    assert!(
        message.contains("\"public\".\"nowhere\" does not exist"),
        "{message}"
    );

    upstream
        .batch_execute("CREATE TABLE narrow (auction bigint)")
        .await
        .unwrap();
    let (_, message) = error_of(&client, &create("table = 'narrow'")).await;
    assert!(message.contains("has no column price"), "{message}");

    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SINK s AS SELECT auction, price FROM bid WITH (connector = 'postgres',
                 dsn = '{dsn} password=hunter2', table = 'hits')"
        ),
    )
    .await;
    assert_eq!(code, "22023");
    assert!(message.contains("password_env"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");

    // Counts are updated (retracted and inserted): an append sink cannot
    // write them, an upsert by key or a changelog can.
    let counts = |rest: &str| {
        format!(
            "CREATE SINK c AS SELECT auction, count(*) AS price FROM bid GROUP BY auction
             WITH (connector = 'postgres', dsn = '{dsn}', table = 'per_auction'{rest})"
        )
    };
    let (code, message) = error_of(&client, &counts("")).await;
    assert_eq!(code, "22023");
    assert!(message.contains("mode = 'upsert'"), "{message}");
    let (_, message) = error_of(&client, &counts(", mode = 'upsert'")).await;
    assert!(message.contains("key"), "{message}");
    client
        .batch_execute(&counts(", key = 'auction'"))
        .await
        .expect("an upsert by key");
    client
        .batch_execute(&create("table = 'hits'"))
        .await
        .expect("an append sink over inserts");
    // Two sinks never share a target, however its dsn is spelled.
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SINK s2 AS SELECT auction, price FROM bid WITH (connector = 'postgres',
                 dsn = 'postgresql://weir@127.0.0.1:{}/weir', table = 'public.HITS')",
            pg.port
        ),
    )
    .await;
    assert_eq!(code, "42710", "{message}");
    assert!(message.contains("(sink s) already exists"), "{message}");
    let shown = value(&client, "SHOW CREATE SINK s").await;
    assert!(shown.contains("'postgres'"), "{shown}");
}

fn two_columns() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// Changes of (k, v, weight).
fn changes(rows: &[(i64, i64, i64)]) -> ChangeBatch {
    let batch = RecordBatch::try_new(
        two_columns(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        ],
    )
    .unwrap();
    ChangeBatch::new(
        batch,
        Int64Array::from_iter_values(rows.iter().map(|r| r.2)),
    )
    .unwrap()
}

fn open(
    options: &BTreeMap<String, String>,
    generation: u64,
    sealed: Option<(u64, &str)>,
) -> Box<dyn Sink> {
    weir_connectors::connector("postgres", ConnectorKind::Sink)
        .unwrap()
        .open_sink(SinkOpen {
            name: "kv",
            schema: two_columns(),
            options,
            sealed,
            generation,
            failures: 0,
        })
        .unwrap()
}

/// The protocol, one process at a time as the runtime drives it, and two
/// at once as a deposed leader and its successor would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_sink_commits_sealed_epochs_once_and_fences_a_deposed_writer() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute("CREATE TABLE kv (k bigint PRIMARY KEY, v bigint)")
        .await
        .unwrap();
    let options = BTreeMap::from([
        ("dsn".to_string(), pg.dsn()),
        ("table".to_string(), "kv".to_string()),
        ("key".to_string(), "k".to_string()),
    ]);
    let table = || async { rows(&upstream, "SELECT k, v FROM kv").await.unwrap() };

    // Generation 1: epochs 1 and 2 committed, 3 pre-committed (and sealed)
    // but not committed when it "crashes".
    let mut first = open(&options, 1, None);
    first
        .write(1, &changes(&[(1, 10, 1), (2, 20, 1)]))
        .await
        .unwrap();
    let d1 = first.pre_commit(1).await.unwrap();
    first.commit(1, &d1).await.unwrap();
    assert_eq!(table().await, ["1|10", "2|20"]);
    first
        .write(2, &changes(&[(1, 10, -1), (1, 11, 1), (2, 20, -1)]))
        .await
        .unwrap();
    let d2 = first.pre_commit(2).await.unwrap();
    first.write(3, &changes(&[(3, 30, 1)])).await.unwrap();
    let d3 = first.pre_commit(3).await.unwrap();
    // Folded: one commit covers epochs 2 and 3... but only 2 is sealed.
    first.commit(2, &d2).await.unwrap();
    assert_eq!(table().await, ["1|11"]);

    // Generation 2 starts from the seal of epoch 3: it delivers 3.
    let mut second = open(&options, 2, Some((3, &d3)));
    second.write(4, &changes(&[(4, 40, 1)])).await.unwrap();
    let d4 = second.pre_commit(4).await.unwrap();
    assert_eq!(table().await, ["1|11", "3|30"]);

    // The deposed first process can neither stage nor commit.
    first.write(4, &changes(&[(9, 99, 1)])).await.unwrap();
    let staged = first.pre_commit(4).await.unwrap_err().to_string();
    assert!(staged.contains("deposed"), "{staged}");

    // Generation 3 starts from the seal of epoch 3 again (epoch 4's seal
    // never landed): what generation 2 staged for 4 is dropped, not applied.
    let mut third = open(&options, 3, Some((3, &d3)));
    let d3_again = third.pre_commit(3).await.unwrap();
    assert_eq!(table().await, ["1|11", "3|30"]);
    let refused = second.commit(4, &d4).await.unwrap_err().to_string();
    assert!(refused.contains("deposed"), "{refused}");
    assert_eq!(table().await, ["1|11", "3|30"]);
    third
        .write(5, &changes(&[(3, 30, -1), (5, 50, 1)]))
        .await
        .unwrap();
    let d5 = third.pre_commit(5).await.unwrap();
    third.commit(3, &d3_again).await.unwrap();
    third.commit(5, &d5).await.unwrap();
    // Committing again (after a restart) changes nothing.
    third.commit(5, &d5).await.unwrap();
    assert_eq!(table().await, ["1|11", "5|50"]);
    assert_eq!(
        rows(
            &upstream,
            "SELECT generation, epoch FROM weir_sink_progress WHERE sink = 'kv'"
        )
        .await
        .unwrap(),
        ["3|5"]
    );
    assert_eq!(
        rows(&upstream, "SELECT count(*) FROM weir_stage_kv")
            .await
            .unwrap(),
        ["0"]
    );

    // Two rows for one key in one epoch: the key is not unique.
    let duplicate = third
        .write(6, &changes(&[(7, 1, 1), (7, 2, 1)]))
        .await
        .unwrap_err()
        .to_string();
    assert!(duplicate.contains("not unique"), "{duplicate}");
}

/// Append, upsert and changelog sinks over a nexmark source, the server
/// killed with SIGKILL at random moments: each target ends up exactly as
/// an uninterrupted read of the same events gives, no row twice or lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sinks_are_exact_after_kill_9_at_random_moments() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute(
            "CREATE TABLE pricey (auction bigint, bidder bigint, price bigint);
             CREATE TABLE counts (k bigint PRIMARY KEY, n bigint);
             CREATE TABLE counts_log (k bigint, n bigint, weir_op text, weir_epoch bigint);",
        )
        .await
        .unwrap();
    let mut rng = crash_rng(0x9051);
    let mut server = crash_server();
    let client = server.connect().await;
    let dsn = pg.dsn();
    const COUNTS: &str = "SELECT auction % 10 AS k, count(*) AS n FROM bid GROUP BY 1";
    client
        .batch_execute(&format!(
            "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '100000',
                 rate_limit = '25000', base_time = '{BASE_TIME}');
             CREATE SINK pricey AS SELECT auction, bidder, price FROM bid WHERE price > 5000000
               WITH (connector = 'postgres', dsn = '{dsn}', table = 'pricey');
             CREATE SINK counts AS {COUNTS}
               WITH (connector = 'postgres', dsn = '{dsn}', table = 'counts', key = 'k');
             CREATE SINK counts_log AS {COUNTS}
               WITH (connector = 'postgres', dsn = '{dsn}', table = 'counts_log', format = 'changelog');"
        ))
        .await
        .expect("setup");
    drop(client);
    let client = killed_then_every_bid(&mut server, &mut rng, 400, "92000").await;
    let log = server.log_tail();

    let expected = rows(
        &client,
        "SELECT auction, bidder, price FROM every_bid WHERE price > 5000000",
    )
    .await
    .unwrap();
    assert!(!expected.is_empty());
    let delivered = rows(&upstream, "SELECT auction, bidder, price FROM pricey")
        .await
        .unwrap();
    assert_eq!(
        delivered.len(),
        expected.len(),
        "append sink rows after {ROUNDS} kills\n{log}"
    );
    assert_eq!(
        delivered, expected,
        "append sink after {ROUNDS} kills\n{log}"
    );

    let expected = rows(
        &client,
        "SELECT auction % 10, count(*) FROM every_bid GROUP BY 1",
    )
    .await
    .unwrap();
    assert_eq!(expected.len(), 10);
    let upserted = rows(&upstream, "SELECT k, n FROM counts").await.unwrap();
    assert_eq!(
        upserted, expected,
        "upsert sink after {ROUNDS} kills\n{log}"
    );

    // The changelog nets out to the same rows, each exactly once.
    let netted = rows(
        &upstream,
        "SELECT k, n, sum(CASE weir_op WHEN 'insert' THEN 1 ELSE -1 END) AS net
         FROM counts_log GROUP BY k, n HAVING sum(CASE weir_op WHEN 'insert' THEN 1 ELSE -1 END) <> 0",
    )
    .await
    .unwrap();
    let expected_net: Vec<String> = expected.iter().map(|r| format!("{r}|1")).collect();
    assert_eq!(
        netted, expected_net,
        "changelog sink after {ROUNDS} kills\n{log}"
    );
    let updates: i64 = value_of(&upstream, "SELECT count(*) FROM counts_log").await;
    assert!(
        updates > 10,
        "the counts were updated, not just inserted ({updates})"
    );

    for stage in [
        "weir_stage_pricey",
        "weir_stage_counts",
        "weir_stage_counts_log",
    ] {
        assert_eq!(
            value_of(&upstream, &format!("SELECT count(*) FROM {stage}")).await,
            0,
            "{stage} is empty once everything is committed"
        );
    }
}

async fn value_of(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_sink_commits_once_its_group_is_full_or_old_and_loses_nothing_to_kill_9() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        mut server,
        client,
        dsn,
    } = pg_and_weir(
        "CREATE TABLE by_size (id bigint PRIMARY KEY, v bigint);
             CREATE TABLE by_time (id bigint PRIMARY KEY, v bigint)",
    )
    .await;
    let sink = |name: &str, table: &str, grouping: &str| {
        format!(
            "CREATE SINK {name} AS SELECT id, v FROM src WITH (connector = 'postgres', dsn = '{dsn}',
                 table = '{table}', key = 'id', {grouping})"
        )
    };
    client
        .batch_execute("CREATE TABLE src (id bigint PRIMARY KEY, v bigint)")
        .await
        .unwrap();
    let (code, message) = error_of(&client, &sink("bad", "by_size", "group_size = '0'")).await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("group_size"), "{message}");
    client
        .batch_execute(&sink(
            "sized",
            "by_size",
            "group_size = '5', group_max_wait = '1h'",
        ))
        .await
        .unwrap();
    client
        .batch_execute(&sink("timed", "by_time", "group_max_wait = '300ms'"))
        .await
        .unwrap();
    for i in 1..=4 {
        client
            .batch_execute(&format!("INSERT INTO src VALUES ({i}, {i}); FLUSH"))
            .await
            .unwrap();
    }
    // The timed sink's last group commits though no more epochs come;
    // the same seals hold the sized sink's four rows, which wait for a
    // fifth.
    until_returns(&upstream, "SELECT count(*) FROM by_time", "4").await;
    assert_eq!(value(&upstream, "SELECT count(*) FROM by_size").await, "0");
    assert_eq!(
        value(
            &client,
            "SELECT rows_out, committed_rows FROM weir_catalog.sinks WHERE name = 'sized'"
        )
        .await,
        "4|0"
    );
    client
        .batch_execute("INSERT INTO src VALUES (5, 5); FLUSH")
        .await
        .unwrap();
    until_returns(&upstream, "SELECT count(*) FROM by_size", "5").await;

    // A group waiting when Weir is killed is committed by the restart:
    // its epochs are sealed.
    client
        .batch_execute("INSERT INTO src VALUES (6, 6); FLUSH")
        .await
        .unwrap();
    until_returns(&upstream, "SELECT count(*) FROM by_time", "6").await;
    assert_eq!(value(&upstream, "SELECT count(*) FROM by_size").await, "5");
    drop(client);
    server.kill();
    server.restart();
    let _client = server.connect().await;
    until_returns(&upstream, "SELECT sum(v) FROM by_size", "21").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_offset_delivers_a_sink_again_from_the_beginning() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        server: _server,
        client,
        dsn,
    } = pg_and_weir("CREATE TABLE copies (auction bigint, price bigint)").await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '200',
                 base_time = '{BASE_TIME}');
             CREATE SINK out AS SELECT auction, price FROM bid WITH (connector = 'postgres',
                 dsn = '{dsn}', table = 'copies', mode = 'append');"
        ))
        .await
        .unwrap();
    until_returns(
        &client,
        "SELECT status FROM weir_catalog.sources WHERE name = 'bid'",
        "completed",
    )
    .await;
    crate::sources::sinks_committed(&client).await;
    let once: u64 = value(&upstream, "SELECT count(*) FROM copies")
        .await
        .parse()
        .unwrap();
    assert!(once > 0);
    let (code, message) = error_of(&client, "ALTER SINK nowhere RESET OFFSET").await;
    assert_eq!(code, "42704", "{message}");

    // Delivered again from the beginning (the source replays): an append
    // target holds every row twice.
    client
        .batch_execute("ALTER SINK out RESET OFFSET")
        .await
        .unwrap();
    until_returns(
        &upstream,
        "SELECT count(*) FROM copies",
        &(2 * once).to_string(),
    )
    .await;
    assert_eq!(
        value(
            &upstream,
            "SELECT count(*) FROM (SELECT auction, price, count(*) AS n FROM copies
               GROUP BY auction, price HAVING count(*) % 2 <> 0) AS odd"
        )
        .await,
        "0"
    );
    assert_eq!(
        value(
            &client,
            "SELECT count(*) FROM weir_catalog.sinks WHERE name = 'out'"
        )
        .await,
        "1"
    );
}

/// Waits until a seal covers every epoch visible now (projection
/// `total` shows the latest).
async fn sealed_up_to_now(client: &Client) {
    client.batch_execute("FLUSH").await.unwrap();
    let now: u64 = value(
        client,
        "SELECT last_epoch FROM weir_catalog.projections WHERE name = 'total'",
    )
    .await
    .parse()
    .unwrap();
    crate::harness::eventually(
        std::time::Duration::from_secs(60),
        "a seal of what is visible",
        || async {
            let sealed = value(client, "SELECT max(epoch) FROM weir_catalog.epochs").await;
            (sealed.parse::<u64>().ok()? >= now).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sink_keeps_what_it_misses_across_kill_9_and_delivers_it_once_on_resume() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        mut server,
        client,
        dsn,
    } = pg_and_weir(
        "CREATE TABLE kv (id bigint PRIMARY KEY, v bigint);
         CREATE TABLE kv_log (id bigint, v bigint, weir_op text, weir_epoch bigint);",
    )
    .await;
    client
        .batch_execute(&format!(
            "CREATE TABLE src (id bigint PRIMARY KEY, v bigint);
             INSERT INTO src VALUES (1, 1), (2, 2);
             CREATE PROJECTION total AS SELECT count(*) AS n FROM src;
             CREATE SINK kv AS SELECT id, v FROM src
               WITH (connector = 'postgres', dsn = '{dsn}', table = 'kv', key = 'id');
             CREATE SINK kv_log AS SELECT id, v FROM src
               WITH (connector = 'postgres', dsn = '{dsn}', table = 'kv_log', format = 'changelog');"
        ))
        .await
        .unwrap();
    crate::sources::sinks_committed(&client).await;
    assert_eq!(value(&upstream, "SELECT count(*) FROM kv_log").await, "2");
    let (code, message) = error_of(&client, "ALTER SINK kv RESUME").await;
    assert_eq!(code, "55000", "{message}");
    assert!(message.contains("running"), "{message}");

    client
        .batch_execute("ALTER SINK kv PAUSE; ALTER SINK kv_log PAUSE")
        .await
        .unwrap();
    for name in ["kv", "kv_log"] {
        status_becomes(&client, "sinks", name, "paused").await;
    }
    assert_eq!(
        value(
            &client,
            "SELECT desired, status FROM weir_catalog.sink_offsets WHERE name = 'kv'"
        )
        .await,
        "paused|paused"
    );
    let (code, _) = error_of(&client, "ALTER SINK kv PAUSE").await;
    assert_eq!(code, "55000");

    // Changes while paused reach neither target, and are sealed (with
    // the sinks' graphs past them) before the plug is pulled.
    client
        .batch_execute(
            "INSERT INTO src VALUES (3, 3); UPDATE src SET v = 20 WHERE id = 2;
             DELETE FROM src WHERE id = 1",
        )
        .await
        .unwrap();
    sealed_up_to_now(&client).await;
    assert_eq!(value(&upstream, "SELECT count(*) FROM kv_log").await, "2");
    assert_eq!(
        rows(&upstream, "SELECT id, v FROM kv").await.unwrap(),
        ["1|1", "2|2"]
    );
    drop(client);
    let client = crate::sources::kill_and_restart(&mut server, "restart while paused").await;
    status_becomes(&client, "sinks", "kv", "paused").await;
    client
        .batch_execute("INSERT INTO src VALUES (4, 4)")
        .await
        .unwrap();
    sealed_up_to_now(&client).await;
    drop(client);
    let client = crate::sources::kill_and_restart(&mut server, "restart while paused").await;
    assert_eq!(value(&upstream, "SELECT count(*) FROM kv_log").await, "2");

    // RESUME delivers every change missed, each once, then goes on.
    client
        .batch_execute(
            "ALTER SINK kv RESUME; ALTER SINK kv_log RESUME; INSERT INTO src VALUES (5, 5)",
        )
        .await
        .unwrap();
    crate::sources::sinks_committed(&client).await;
    let want = ["2|20", "3|3", "4|4", "5|5"];
    assert_eq!(rows(&upstream, "SELECT id, v FROM kv").await.unwrap(), want);
    // Two inserts, then +3, -2 +20, -1, +4 and +5: eight changes in all.
    assert_eq!(
        rows(&upstream, "SELECT id, v, weir_op FROM kv_log")
            .await
            .unwrap(),
        [
            "1|1|delete",
            "1|1|insert",
            "2|20|insert",
            "2|2|delete",
            "2|2|insert",
            "3|3|insert",
            "4|4|insert",
            "5|5|insert"
        ]
    );
    let (code, _) = error_of(&client, "ALTER SINK kv_log RESUME").await;
    assert_eq!(code, "55000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_most_once_sink_saves_its_progress_before_its_rows() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        server: _server,
        client,
        dsn,
    } = pg_and_weir("CREATE TABLE amo (id bigint PRIMARY KEY, v bigint CHECK (v < 100))").await;
    client
        .batch_execute(&format!(
            "CREATE TABLE src (id bigint PRIMARY KEY, v bigint);
             CREATE SINK out AS SELECT id, v FROM src WITH (connector = 'postgres', dsn = '{dsn}',
                 table = 'amo', key = 'id', delivery = 'at_most_once')"
        ))
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO src VALUES (1, 10)")
        .await
        .unwrap();
    until_returns(&upstream, "SELECT count(*) FROM amo", "1").await;
    let before: i64 = value(&upstream, "SELECT epoch FROM weir_sink_progress")
        .await
        .parse()
        .unwrap();
    // The rows of this epoch are refused after its progress was saved:
    // the sink fails, the epoch counts as delivered, its row never came.
    client
        .batch_execute("INSERT INTO src VALUES (2, 500)")
        .await
        .unwrap();
    until_returns(
        &client,
        "SELECT status FROM weir_catalog.sinks WHERE name = 'out'",
        "failed",
    )
    .await;
    let after: i64 = value(&upstream, "SELECT epoch FROM weir_sink_progress")
        .await
        .parse()
        .unwrap();
    assert!(after > before, "progress {before} -> {after}");
    assert_eq!(value(&upstream, "SELECT count(*) FROM amo").await, "1");
}
