//! The kafka source and sink against a throwaway tansu broker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_common::ChangeBatch;

use super::Partition;
use super::sink::KafkaSink;
use super::source::KafkaSource;
use crate::testing::{Tansu, id_name_lines, start_tansu};
use crate::{ConnectorError, Offsets, Sink, SinkOpen, Source, SourceEvent, SourceOpen};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

fn options(tansu: &Tansu, topic: &str, more: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = more
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.insert("brokers".into(), tansu.brokers());
    out.insert("topic".into(), topic.into());
    out
}

fn source(options: &BTreeMap<String, String>, offsets: &Offsets) -> KafkaSource {
    KafkaSource::new(&SourceOpen {
        name: "k",
        schema: schema(),
        options,
        offsets,
        until: None,
        tables: &[],
    })
    .unwrap()
}

/// Reads until `want` rows arrived (or 30 s passed): the rows as `id|name`
/// (sorted) and the offsets after them.
async fn read(source: &mut KafkaSource, want: usize) -> (Vec<String>, Offsets) {
    let mut rows = Vec::new();
    let mut offsets = Offsets::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rows.len() < want && std::time::Instant::now() < deadline {
        match source.next().await.unwrap() {
            SourceEvent::Transaction { batches, .. } => {
                for batch in batches {
                    offsets.insert(batch.split.clone(), batch.offset.clone());
                    rows.extend(id_name_lines(batch.changes.rows()));
                }
            }
            SourceEvent::Idle => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    rows.sort();
    (rows, offsets)
}

fn json(ids: std::ops::Range<i64>) -> Vec<String> {
    ids.map(|i| format!("{{\"id\": {i}, \"name\": \"n{i}\", \"extra\": 1}}"))
        .collect()
}

fn expected(ids: std::ops::Range<i64>) -> Vec<String> {
    let mut out: Vec<String> = ids.map(|i| format!("{i}|n{i}")).collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_reads_every_partition_and_resumes_at_sealed_offsets() {
    let tansu = start_tansu();
    tansu.create_topic("events", 3);
    tansu.produce("events", 3, &json(0..3000)).await;
    let opts = options(&tansu, "events", &[]);
    let mut first = source(&opts, &Offsets::new());
    let (rows, offsets) = read(&mut first, 3000).await;
    assert_eq!(rows, expected(0..3000));
    // Per partition: the next offset and where it started.
    assert_eq!(offsets.len(), 6, "{offsets:?}");
    assert_eq!(offsets.get("1.start").map(String::as_str), Some("0"));
    drop(first);

    // Reopened at those offsets after more arrived: only the new ones.
    tansu.produce("events", 3, &json(3000..3300)).await;
    let mut second = source(&opts, &offsets);
    let (rows, _) = read(&mut second, 300).await;
    assert_eq!(rows, expected(3000..3300));
    assert!(
        matches!(second.next().await.unwrap(), SourceEvent::Idle),
        "nothing more"
    );

    // A replay up to the first reader's offsets: those 3000 rows, then
    // the end, though more follow in the topic.
    let mut replay = KafkaSource::new(&SourceOpen {
        name: "k",
        schema: schema(),
        options: &opts,
        offsets: &Offsets::new(),
        until: Some(&offsets),
        tables: &[],
    })
    .unwrap();
    let mut rows = Vec::new();
    loop {
        match replay.next().await.unwrap() {
            SourceEvent::Transaction { batches, .. } => {
                rows.extend(batches.iter().map(|b| b.changes.num_rows()))
            }
            SourceEvent::SplitEnd { .. } => break,
            SourceEvent::Idle => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(rows.iter().sum::<usize>(), 3000);

    // CSV values, columns by position.
    tansu.create_topic("lines", 1);
    tansu
        .produce("lines", 1, &["1,a".into(), "2,\"b, c\"".into()])
        .await;
    let csv = options(&tansu, "lines", &[("format", "csv")]);
    assert_eq!(
        read(&mut source(&csv, &Offsets::new()), 2).await.0,
        vec!["1|a", "2|b, c"]
    );
}

/// `headers_column`: each message's headers as a JSON object, NULL for a
/// message without any; a header without a value is a JSON null.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_fill_a_column_as_a_json_object() {
    let tansu = start_tansu();
    tansu.create_topic("traced", 1);
    tansu
        .produce_with_headers(
            "traced",
            &[
                (
                    r#"{"id": 1}"#,
                    &[("trace", Some("abc")), ("hop", Some("1"))],
                ),
                (r#"{"id": 2}"#, &[("flag", None), ("hop", Some("2"))]),
                (r#"{"id": 3}"#, &[]),
            ],
        )
        .await;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("h", DataType::Utf8, true),
    ]));
    let options = options(&tansu, "traced", &[("headers_column", "h")]);
    let offsets = Offsets::new();
    let mut source = KafkaSource::new(&SourceOpen {
        name: "k",
        schema,
        options: &options,
        offsets: &offsets,
        until: None,
        tables: &[],
    })
    .unwrap();
    let mut rows = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rows.len() < 3 && std::time::Instant::now() < deadline {
        if let SourceEvent::Transaction { batches, .. } = source.next().await.unwrap() {
            for batch in batches {
                rows.extend(id_name_lines(batch.changes.rows()));
            }
        }
    }
    assert_eq!(
        rows,
        vec![
            r#"1|{"hop":"1","trace":"abc"}"#,
            r#"2|{"flag":null,"hop":"2"}"#,
            "3|NULL",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_stops_at_a_retention_gap_and_fails_on_a_bad_message_and_a_missing_topic() {
    let tansu = start_tansu();
    tansu.create_topic("t", 1);
    tansu.produce("t", 1, &json(0..10)).await;
    let opts = options(&tansu, "t", &[]);
    // Below the earliest kept offset: retention took messages never read.
    let gap = source(&opts, &Offsets::new());
    let kept = Partition { id: 0, low: 5 };
    let err = gap.check_sealed(kept, 3).unwrap_err();
    assert!(matches!(err, ConnectorError::Gap { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("earliest offset the broker keeps is 5"),
        "{err}"
    );
    gap.check_sealed(kept, 5).unwrap();

    let bad = vec![
        "{\"id\": 100, \"name\": \"good\"}".to_string(),
        "{\"id\": \"not a number\"}".to_string(),
        "{\"id\": 102, \"name\": \"good\"}".to_string(),
    ];
    tansu.produce("t", 1, &bad).await;
    let at: Offsets = [("0".to_string(), "10".to_string())].into_iter().collect();
    let err = source(&opts, &at).next().await.unwrap_err();
    assert!(
        err.to_string()
            .contains("partition 0, the message at offset 11"),
        "{err}"
    );
    // on_error = 'skip': the bad message is dropped and counted, the
    // offset moves past it.
    let skip = options(&tansu, "t", &[("on_error", "skip")]);
    let mut skipping = source(&skip, &at);
    let SourceEvent::Transaction { batches, .. } = skipping.next().await.unwrap() else {
        panic!("a transaction")
    };
    let batch = batches.iter().find(|b| b.split == "0").unwrap();
    assert_eq!(batch.changes.num_rows(), 2);
    assert_eq!(batch.skipped, 1);
    assert_eq!(batch.offset, "13");

    // A partition the seal names that the topic does not have.
    let gone: Offsets = [("3".to_string(), "0".to_string())].into_iter().collect();
    let err = source(&opts, &gone).next().await.unwrap_err();
    assert!(matches!(err, ConnectorError::Gap { .. }), "{err}");
    assert!(err.to_string().contains("has no partition 3"), "{err}");

    // The gap accepted: the source seals the count first, then reads on
    // from the earliest message kept; a partition gone is left behind.
    let accepted = options(
        &tansu,
        "t",
        &[(crate::GAPS_ACCEPTED, "1"), ("on_error", "skip")],
    );
    let mut going_on = source(&accepted, &gone);
    let SourceEvent::Transaction { batches, .. } = going_on.next().await.unwrap() else {
        panic!("a transaction")
    };
    assert_eq!(batches.len(), 1);
    assert_eq!(
        (batches[0].split.as_str(), batches[0].offset.as_str()),
        ("gaps_accepted", "1")
    );
    let (rows, offsets) = read(&mut going_on, 12).await;
    let mut want = expected(0..10);
    want.extend(["100|good".to_string(), "102|good".to_string()]);
    want.sort();
    assert_eq!(rows, want);
    assert!(!offsets.contains_key("3"), "{offsets:?}");
    // Once sealed, the same count is no gap to accept again.
    let mut sealed = gone.clone();
    sealed.insert("gaps_accepted".into(), "1".into());
    let err = source(&accepted, &sealed).next().await.unwrap_err();
    assert!(matches!(err, ConnectorError::Gap { .. }), "{err}");

    let missing = options(&tansu, "nope", &[]);
    let err = source(&missing, &Offsets::new()).next().await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_has_every_message_in_the_topic_before_the_seal() {
    let tansu = start_tansu();
    tansu.create_topic("out", 2);
    let opts = options(&tansu, "out", &[("key", "id"), ("changelog", "true")]);
    let mut sink = KafkaSink::new(&SinkOpen {
        name: "s",
        schema: schema(),
        options: &opts,
        sealed: None,
        generation: 1,
        failures: 0,
    })
    .unwrap();
    let rows = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from((0..5000).collect::<Vec<i64>>())) as ArrayRef,
            Arc::new(StringArray::from(
                (0..5000).map(|i| format!("n{i}")).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    sink.write(4, &ChangeBatch::inserts(rows.clone()))
        .await
        .unwrap();
    sink.write(4, &ChangeBatch::retractions(rows.slice(0, 1)))
        .await
        .unwrap();
    assert_eq!(sink.pre_commit(4).await.unwrap(), "5001");

    let got: Vec<(String, String)> = tansu
        .consume("out", 2, 5001)
        .into_iter()
        .map(|(key, value)| (key.unwrap(), value))
        .collect();
    assert_eq!(got.len(), 5001);
    assert!(got.contains(&(
        "{\"id\":7}".to_string(),
        "{\"id\":7,\"name\":\"n7\",\"weir_op\":\"insert\",\"weir_epoch\":4}".to_string()
    )));
    assert!(got.contains(&(
        "{\"id\":0}".to_string(),
        "{\"id\":0,\"name\":\"n0\",\"weir_op\":\"delete\",\"weir_epoch\":4}".to_string()
    )));
}

/// Not a test: how fast the source drains a topic (release build:
/// `cargo test --release -p weir-connectors --lib drain_rate -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn drain_rate() {
    let tansu = start_tansu();
    tansu.create_topic("many", 2);
    let n = 300_000;
    tansu.produce("many", 2, &json(0..n)).await;
    let opts = options(&tansu, "many", &[]);
    let mut s = source(&opts, &Offsets::new());
    let start = std::time::Instant::now();
    let mut rows = 0;
    let mut events = 0;
    while rows < n as usize {
        if let SourceEvent::Transaction { batches, .. } = s.next().await.unwrap() {
            rows += batches.iter().map(|b| b.changes.num_rows()).sum::<usize>();
            events += 1;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{rows} rows in {wall:.2} s ({:.0} rows/s), {events} events",
        rows as f64 / wall
    );
}
