//! `on_error = 'skip'` and `'retry_and_skip'` on the `postgres` sink,
//! against a throwaway PostgreSQL: an epoch the target refuses at commit
//! (a CHECK constraint), one it refuses while staging (a value too long
//! for its column) and a row with a NULL key are each set aside, counted
//! in `weir_catalog.sink_offsets` and kept in the dead-letter table, while
//! the epochs around them arrive; the counts survive a restart; sinks
//! that cannot skip refuse the option at CREATE; without `on_error` the
//! same refusal fails the sink.

use crate::harness::try_rows as rows;
use crate::postgres::{PgAndWeir, pg_and_weir};
use crate::sources::{error_of, sinks_committed, status_becomes, value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_skips_what_its_target_refuses_and_keeps_it_as_dead_letters() {
    let PgAndWeir {
        pg: _pg,
        upstream,
        mut server,
        client,
        dsn,
    } = pg_and_weir(
        "CREATE TABLE scores (k bigint PRIMARY KEY, v bigint CHECK (v < 100), tag varchar(3));
             CREATE TABLE strict (k bigint PRIMARY KEY, v bigint CHECK (v < 100), tag varchar(3));
             CREATE TABLE later (k bigint PRIMARY KEY, v bigint CHECK (v < 100), tag varchar(3))",
    )
    .await;
    client
        .batch_execute(&format!(
            "CREATE TABLE src (id bigint PRIMARY KEY, k bigint, v bigint, tag text);
             CREATE SINK s AS SELECT k, v, tag FROM src WITH (connector = 'postgres', dsn = '{dsn}',
                 table = 'scores', key = 'k', on_error = 'skip', dead_letter = 'table');
             CREATE SINK r AS SELECT k, v, tag FROM src WHERE id < 100 WITH (connector = 'postgres',
                 dsn = '{dsn}', table = 'later', key = 'k', on_error = 'retry_and_skip(2, 100ms)',
                 restart_min_backoff = '100ms')"
        ))
        .await
        .unwrap();

    // Only sinks that can commit an offset alone skip.
    let (code, message) = error_of(
        &client,
        "CREATE SINK b AS SELECT k FROM src WITH (connector = 'blackhole', on_error = 'skip')",
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("cannot skip"), "{message}");
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SINK d AS SELECT k, v, tag FROM src WITH (connector = 'postgres', dsn = '{dsn}',
                 table = 'strict', key = 'k', dead_letter = 'table')"
        ),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("on_error = 'skip'"), "{message}");

    // One statement per epoch: FLUSH closes each.
    for insert in [
        "INSERT INTO src VALUES (1, 1, 10, 'a')",
        // Refused at commit: CHECK (v < 100).
        "INSERT INTO src VALUES (2, 2, 500, 'b')",
        // Refused while staging: varchar(3).
        "INSERT INTO src VALUES (3, 3, 30, 'toolong')",
        // A NULL key: that row alone is refused.
        "INSERT INTO src VALUES (4, NULL, 5, 'n'), (5, 4, 40, 'd')",
        "INSERT INTO src VALUES (6, 5, 50, 'e')",
        "UPDATE src SET v = 11 WHERE id = 1",
    ] {
        client.batch_execute(insert).await.unwrap();
        client.batch_execute("FLUSH").await.unwrap();
    }
    sinks_committed(&client).await;
    let got = rows(&upstream, "SELECT k, v, tag FROM scores ORDER BY k")
        .await
        .unwrap();
    assert_eq!(got, ["1|11|a", "4|40|d", "5|50|e"]);
    let skipped = |name: &str| {
        format!(
            "SELECT status, skipped_epochs, skipped_rows, last_skip_error IS NOT NULL
             FROM weir_catalog.sink_offsets WHERE name = '{name}'"
        )
    };
    assert_eq!(value(&client, &skipped("s")).await, "running|3|3|t");
    let dead = rows(
        &upstream,
        "SELECT sink, epoch > 0, weight, change->>'k', change->>'v', error FROM weir_dead_letter",
    )
    .await
    .unwrap();
    assert_eq!(dead.len(), 3, "{dead:?}");
    // Sorted as text: the CHECK, the long tag, the NULL key.
    assert!(dead[0].starts_with("s|t|1|2|500|"), "{dead:?}");
    assert!(dead[0].contains("scores_v_check"), "{dead:?}");
    assert!(dead[1].starts_with("s|t|1|3|30|"), "{dead:?}");
    assert!(dead[1].contains("too long"), "{dead:?}");
    assert!(dead[2].starts_with("s|t|1|NULL|5|"), "{dead:?}");
    assert!(dead[2].contains("is NULL"), "{dead:?}");

    // retry_and_skip retried the refused epochs, then skipped them; no
    // dead letters without dead_letter.
    let got = rows(&upstream, "SELECT k, v FROM later ORDER BY k")
        .await
        .unwrap();
    assert_eq!(got, ["1|11", "4|40", "5|50"]);
    assert_eq!(value(&client, &skipped("r")).await, "running|3|3|t");

    // The counts live with the target's progress row: a restart keeps them.
    drop(client);
    server.restart();
    let client = server.connect().await;
    client
        .batch_execute("INSERT INTO src VALUES (7, 6, 60, 'f')")
        .await
        .unwrap();
    sinks_committed(&client).await;
    assert_eq!(
        value(&upstream, "SELECT count(*) FROM scores").await,
        "4",
        "the epochs after the restart arrive"
    );
    assert_eq!(value(&client, &skipped("s")).await, "running|3|3|t");

    // Without on_error, the same refusal fails the sink.
    client
        .batch_execute(&format!(
            "CREATE SINK f AS SELECT k, v, tag FROM src WHERE id > 100 WITH (connector = 'postgres',
                 dsn = '{dsn}', table = 'strict', key = 'k')"
        ))
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO src VALUES (101, 101, 999, 'x')")
        .await
        .unwrap();
    client.batch_execute("FLUSH").await.unwrap();
    let failed = status_becomes(&client, "sinks", "f", "failed").await;
    assert!(failed.contains("strict_v_check"), "{failed}");
    assert_eq!(
        value(&client, &skipped("f")).await,
        "failed|NULL|NULL|f",
        "a sink that does not skip shows no counts"
    );
}
