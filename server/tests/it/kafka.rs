//! The `kafka` connectors through the server, against a throwaway tansu
//! broker: a topic whose messages keep arriving while the server is
//! killed with SIGKILL at random moments, read into a projection (exact:
//! each message once) and copied by a kafka sink to another topic (at
//! least once: every message there, nothing else); a projection created
//! afterwards replays the topic to the same result.

use std::collections::BTreeSet;
use std::time::Duration;

use weir_connectors::testing::{Tansu, start_tansu};

use crate::harness::{eventually, try_rows as rows};
use crate::sources::{
    ROUNDS, crash_rng, crash_server, error_of, kill_at_a_random_moment, sinks_committed,
};

/// Messages produced before each kill.
const PER_ROUND: i64 = 2000;

/// Ids `ids` as JSON messages to `topic`'s three partitions.
async fn produce(tansu: &Tansu, topic: &str, ids: std::ops::Range<i64>) {
    let values: Vec<String> = ids
        .map(|id| format!("{{\"id\": {id}, \"name\": \"n{id}\"}}"))
        .collect();
    tansu.produce(topic, 3, &values).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_feeds_a_projection_exactly_and_a_kafka_sink_at_least_once_across_kill_9() {
    let tansu = start_tansu();
    tansu.create_topic("clicks", 3);
    tansu.create_topic("copy", 2);
    produce(&tansu, "clicks", 0..PER_ROUND).await;
    let brokers = tansu.brokers();
    let mut rng = crash_rng(0x4AF4A);
    let mut server = crash_server();
    let client = server.connect().await;
    let (code, missing) = error_of(
        &client,
        &format!(
            "CREATE SINK s AS SELECT 1 AS one WITH (connector = 'kafka', brokers = '{brokers}', topic = 'nope')"
        ),
    )
    .await;
    assert_eq!(code, "22023", "{missing}");
    assert!(
        missing.contains("topic \"nope\" does not exist"),
        "{missing}"
    );
    client
        .batch_execute(&format!(
            "CREATE SOURCE clicks (id BIGINT NOT NULL, name TEXT)
               WITH (connector = 'kafka', brokers = '{brokers}', topic = 'clicks', group_id = 'weir-test');
             CREATE PROJECTION totals AS SELECT count(*) AS n, sum(id) AS s, count(DISTINCT id) AS d FROM clicks;
             CREATE SINK copy FROM clicks WITH (connector = 'kafka', brokers = '{brokers}', topic = 'copy', key = 'id');"
        ))
        .await
        .expect("setup");
    drop(client);
    let mut produced = PER_ROUND;
    for round in 0..ROUNDS {
        produce(&tansu, "clicks", produced..produced + PER_ROUND).await;
        produced += PER_ROUND;
        kill_at_a_random_moment(&mut server, &mut rng, 300, round).await;
    }
    let client = server.connect().await;
    let want = format!("{produced}|{}|{produced}", produced * (produced - 1) / 2);
    eventually(Duration::from_secs(60), "every message read", || async {
        let got = rows(&client, "SELECT n, s, d FROM totals").await.ok()?;
        (got == [want.clone()]).then_some(())
    })
    .await;
    // A projection created now reads the topic again from where the
    // source started, up to where its reader is, then follows it.
    client
        .batch_execute("CREATE PROJECTION late AS SELECT count(*) AS n, sum(id) AS s, count(DISTINCT id) AS d FROM clicks")
        .await
        .unwrap();
    assert_eq!(
        rows(&client, "SELECT n, s, d FROM late").await.unwrap(),
        [want.clone()]
    );
    sinks_committed(&client).await;
    let skipped = rows(
        &client,
        "SELECT rows_skipped FROM weir_catalog.sources WHERE name = 'clicks'",
    )
    .await
    .unwrap();
    assert_eq!(skipped, ["0"]);
    let copied: Vec<String> = tansu
        .consume("copy", 2, produced as usize)
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    let distinct: BTreeSet<String> = copied.iter().cloned().collect();
    let expected: BTreeSet<String> = (0..produced)
        .map(|id| format!("{{\"id\":{id},\"name\":\"n{id}\"}}"))
        .collect();
    assert_eq!(
        distinct,
        expected,
        "every message copied, nothing else ({} messages, {} distinct)\n{}",
        copied.len(),
        distinct.len(),
        server.log_tail()
    );
}

/// Columns filled from the message, not its value: a kafka sink writes
/// keyed messages to two partitions, and a source reads them back with
/// the key, timestamp, partition and offset of each in columns of their
/// own. Columns that cannot hold them are refused at CREATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_keys_timestamps_partitions_and_offsets_fill_columns() {
    let tansu = start_tansu();
    tansu.create_topic("keyed", 2);
    let brokers = tansu.brokers();
    let server = crate::harness::WeirServer::start();
    let client = server.connect().await;
    for (options, says) in [
        ("key_column = 'nope'", "has no column \"nope\""),
        ("timestamp_column = 'id'", "cannot hold it"),
        ("key_column = 'k', offset_column = 'k'", "already holds"),
    ] {
        let (code, message) = error_of(
            &client,
            &format!(
                "CREATE SOURCE bad (id BIGINT, k TEXT) WITH (connector = 'kafka', brokers = '{brokers}', topic = 'keyed', {options})"
            ),
        )
        .await;
        assert_eq!(code, "22023", "{options}: {message}");
        assert!(message.contains(says), "{options}: {message}");
    }
    let before = rows(&client, "SELECT now()::text").await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE facts (id BIGINT PRIMARY KEY, name TEXT);
             INSERT INTO facts SELECT i, 'n' || i FROM generate_series(1, 300) AS g(i);
             CREATE SINK out FROM facts WITH (connector = 'kafka', brokers = '{brokers}', topic = 'keyed',
                 key = 'id', changelog = 'true');
             CREATE SOURCE back (id BIGINT NOT NULL, name TEXT, k TEXT, ts TIMESTAMPTZ, p INTEGER, o BIGINT)
               WITH (connector = 'kafka', brokers = '{brokers}', topic = 'keyed',
                     key_column = 'k', timestamp_column = 'ts', partition_column = 'p', offset_column = 'o');
             CREATE PROJECTION keyed AS
               SELECT count(*) AS n,
                      count(*) FILTER (WHERE k = '{{\"id\":' || id || '}}') AS keys_right,
                      count(*) FILTER (WHERE ts BETWEEN '{before}'::timestamptz - INTERVAL '1 minute'
                                                  AND '{before}'::timestamptz + INTERVAL '10 minutes') AS times_right,
                      count(DISTINCT p * 1000000 + o) AS places
               FROM back;
             CREATE PROJECTION per_partition AS SELECT p, min(o) AS first, max(o) AS last, count(*) AS n FROM back GROUP BY p;",
            before = before[0]
        ))
        .await
        .expect("a source with metadata columns");
    eventually(
        Duration::from_secs(60),
        "every message read back",
        || async {
            let got = rows(&client, "SELECT n FROM keyed").await.ok()?;
            (got == ["300"]).then_some(())
        },
    )
    .await;
    assert_eq!(
        rows(
            &client,
            "SELECT n, keys_right, times_right, places FROM keyed"
        )
        .await
        .unwrap(),
        ["300|300|300|300"]
    );
    // Each partition's offsets run from 0 without a hole.
    let partitions = rows(
        &client,
        "SELECT p, first, last + 1 = n FROM per_partition ORDER BY p",
    )
    .await
    .unwrap();
    assert_eq!(partitions.len(), 2, "{partitions:?}");
    for line in &partitions {
        assert!(line.ends_with("|0|t"), "{partitions:?}");
    }
    let shown = rows(&client, "SHOW CREATE SOURCE back")
        .await
        .unwrap()
        .join("\n");
    assert!(shown.contains("timestamp_column = 'ts'"), "{shown}");
}
