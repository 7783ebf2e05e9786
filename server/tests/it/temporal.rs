//! Temporal filters: a projection `WHERE ts > now() - INTERVAL '1 hour'
//! AND ts <= now()` changes as time passes with no input (rows enter when
//! their time comes and leave when it has passed), keeps doing so across
//! a kill -9, and equals the query run ad hoc; `now()` elsewhere is
//! refused.

use crate::harness::WeirServer;
use crate::sources::{error_of, kill_and_restart, until_returns, value};

const IDS: &str = "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '')";
const RECENT: &str = "FROM events WHERE ts > now() - INTERVAL '1 hour' AND ts <= now()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_enter_and_leave_a_temporal_filter_as_time_passes_even_across_kill_9() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE events (id INT PRIMARY KEY, ts TIMESTAMP);
             INSERT INTO events VALUES
               (1, now() - INTERVAL '10 minutes'),
               (2, now() + INTERVAL '5 seconds'),
               (3, now() - INTERVAL '1 hour' + INTERVAL '5 seconds'),
               (4, now() - INTERVAL '2 hours');",
        )
        .await
        .expect("table");
    client
        .batch_execute(&format!(
            "CREATE PROJECTION recent AS SELECT id, ts {RECENT}"
        ))
        .await
        .expect("a temporal filter");
    let explain = crate::harness::try_rows(
        &client,
        &format!("EXPLAIN CREATE PROJECTION r2 AS SELECT id {RECENT}"),
    )
    .await
    .unwrap()
    .join("\n");
    assert!(explain.contains("temporal filter"), "{explain}");
    // 2 is in the future, 4 too old; 3 is about to leave.
    assert_eq!(value(&client, &format!("{IDS} FROM recent")).await, "1,3");
    // Killed before either moves: the waiting row and the one that will
    // expire are in its checkpointed state (or rebuilt from the table).
    let client = kill_and_restart(&mut server, "temporal filter").await;
    // No write from here on: only time moves them.
    until_returns(&client, &format!("{IDS} FROM recent"), "1,2").await;
    assert_eq!(
        value(&client, &format!("{IDS} {RECENT}")).await,
        "1,2",
        "the projection equals the query run now"
    );
    // A row written now that is already due is in at once, and a
    // retraction of a visible row is seen.
    client
        .batch_execute(
            "INSERT INTO events VALUES (5, now() - INTERVAL '1 second');
             DELETE FROM events WHERE id = 1;",
        )
        .await
        .unwrap();
    assert_eq!(value(&client, &format!("{IDS} FROM recent")).await, "2,5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn now_outside_a_comparison_in_where_is_refused() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE events (id INT PRIMARY KEY, ts TIMESTAMP)")
        .await
        .unwrap();
    for (query, says) in [
        ("SELECT id, now() AS at FROM events", "outside a WHERE"),
        ("SELECT id FROM events WHERE ts > now() OR id = 1", "now()"),
        (
            "SELECT id FROM events WHERE ts > now() - INTERVAL '1 month'",
            "fixed interval",
        ),
        (
            "SELECT id FROM events WHERE id > extract(epoch FROM now())",
            "now()",
        ),
    ] {
        let (code, message) = error_of(&client, &format!("CREATE PROJECTION bad AS {query}")).await;
        assert_eq!(code, "0A000", "{query}: {message}");
        assert!(message.contains(says), "{query}: {message}");
    }
}

/// EXPLAIN marks operators whose state grows without bound over a source
/// that keeps inserting, CREATE raises a NOTICE naming each, and one that
/// a watermark closes gets neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_that_grows_without_bound_is_named_at_create() {
    use crate::harness::{RawPg, error_fields};
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE SOURCE ticks (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
               WITH (connector = 'datagen', max_rows = '10', fields.id.kind = 'sequence')",
        )
        .await
        .unwrap();
    let growing = "SELECT id % 7 AS k, count(*) AS n FROM ticks GROUP BY id % 7";
    let closing = "SELECT window_start, count(*) AS n
                   FROM TUMBLE(ticks, ts, INTERVAL '10' SECOND) GROUP BY window_start";
    let explain = |query: &str| {
        let client = &client;
        let query = query.to_string();
        async move {
            crate::harness::try_rows(client, &format!("EXPLAIN CREATE PROJECTION x AS {query}"))
                .await
                .unwrap()
                .join("\n")
        }
    };
    assert!(explain(growing).await.contains("[state unbounded"));
    assert!(!explain(closing).await.contains("[state unbounded"));
    let mut raw = RawPg::connect(server.pg_addr().port());
    let mut notices = |sql: &str| -> Vec<String> {
        raw.query(sql);
        raw.until_ready()
            .iter()
            .filter(|(tag, _)| *tag == b'N')
            .flat_map(|(_, body)| error_fields(body))
            .filter(|(field, _)| *field == 'M')
            .map(|(_, message)| message)
            .collect()
    };
    let raised = notices(&format!("CREATE PROJECTION growing AS {growing}"));
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert!(
        raised[0].contains("#1 aggregate") && raised[0].contains("grows without bound"),
        "{raised:?}"
    );
    assert_eq!(
        notices(&format!("CREATE PROJECTION closing AS {closing}")),
        Vec::<String>::new()
    );
}
