//! Tests of the CDC source's pieces that need no PostgreSQL.

use super::progress::parse;
use super::*;

#[test]
fn progress_round_trips_as_json() {
    let p = Progress {
        start: 10,
        segments: vec![
            Segment {
                lsn: 10,
                upto: Some(vec!["41".into()]),
            },
            Segment {
                lsn: 20,
                upto: None,
            },
        ],
        snapshot_done: false,
        lsn: 10,
        gaps_accepted: 1,
        table_oid: Some(16385),
    };
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Progress>(&text).unwrap(), p);
    // Offsets sealed before the table's OID was kept still read.
    let old = r#"{"start":1,"segments":[],"snapshot_done":true,"lsn":1}"#;
    assert_eq!(
        serde_json::from_str::<Progress>(old).unwrap().table_oid,
        None
    );
}

/// A single-table source's offset, as sealed before sources covered
/// several tables, splits into the stream's and the table's parts and
/// joins back into exactly the same text.
#[test]
fn a_single_table_offset_sealed_before_reads_the_same() {
    let sealed = r#"{"start":100,"segments":[{"lsn":100,"upto":["7"]},{"lsn":250,"upto":null}],"snapshot_done":false,"lsn":300,"gaps_accepted":2,"table_oid":16390}"#;
    let (stream, table) = parse::<Progress>(sealed).unwrap().split();
    assert_eq!(
        (stream.start, stream.lsn, stream.gaps_accepted),
        (100, 300, 2)
    );
    assert_eq!(table.segments.len(), 2);
    assert_eq!(table.table_oid, Some(16390));
    let joined = serde_json::to_string(&Progress::join(&stream, &table)).unwrap();
    assert_eq!(joined, sealed);
}

#[test]
fn a_shared_source_seals_the_stream_and_each_table_apart() {
    let stream = StreamState {
        start: 5,
        lsn: 9,
        gaps_accepted: 0,
    };
    let text = serde_json::to_string(&stream).unwrap();
    assert_eq!(parse::<StreamState>(&text).unwrap(), stream);
    let table = TableProgress {
        segments: vec![Segment { lsn: 7, upto: None }],
        snapshot_done: false,
        table_oid: Some(1),
        gaps_accepted: 0,
        failed: None,
    };
    let text = serde_json::to_string(&table).unwrap();
    assert_eq!(parse::<TableProgress>(&text).unwrap(), table);
    assert!(parse::<StreamState>("not json").is_err());
}

#[test]
fn keys_compare_in_the_snapshot_order() {
    let shape = Shape {
        oid: 1,
        columns: vec![super::super::UpstreamColumn {
            name: "k".into(),
            type_oid: 25,
            type_modifier: -1,
            not_null: true,
            type_name: "text".into(),
        }],
        key: vec!["k".into()],
    };
    let order = KeyOrder::new(&shape).unwrap();
    let a = order.row_of_text(&["B".into()]).unwrap();
    let b = order.row_of_text(&["a".into()]).unwrap();
    // C collation: upper case sorts before lower case.
    assert!(a.row() < b.row());
}

/// A shared source with one table `public.t (k int8 key, v text)` whose
/// snapshot was read in `segments`.
fn options() -> std::collections::BTreeMap<String, String> {
    [
        ("dsn", "host=localhost user=weir dbname=app"),
        ("slot", "weir_test"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn source_with(segments: Vec<Segment>) -> CdcSource {
    use arrow::datatypes::{DataType, Field, Schema};
    let options = options();
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]));
    let tables = [crate::SourceTable {
        split: "42".into(),
        upstream: "public.t".into(),
        schema: schema.clone(),
        gaps_accepted: 0,
    }];
    let offsets = crate::Offsets::new();
    let open = SourceOpen {
        name: "shop",
        schema: std::sync::Arc::new(Schema::empty()),
        options: &options,
        offsets: &offsets,
        until: None,
        tables: &tables,
    };
    let mut source = CdcSource::new(&open, Upstream::parse(&options).unwrap()).unwrap();
    let shape = Shape {
        oid: 7,
        columns: vec![
            super::super::UpstreamColumn {
                name: "k".into(),
                type_oid: 20,
                type_modifier: -1,
                not_null: true,
                type_name: "bigint".into(),
            },
            super::super::UpstreamColumn {
                name: "v".into(),
                type_oid: 25,
                type_modifier: -1,
                not_null: false,
                type_name: "text".into(),
            },
        ],
        key: vec!["k".into()],
    };
    let table = &mut source.tables[0];
    table.keys = Some(KeyOrder::new(&shape).unwrap());
    table.shape = Some(shape);
    table.progress = Some(TableProgress {
        segments,
        snapshot_done: true,
        table_oid: Some(7),
        gaps_accepted: 0,
        failed: None,
    });
    source
}

fn kept(source: &CdcSource, commit: u64, keys: &[i64]) -> Vec<i64> {
    let layout = RowLayout {
        output: vec![0, 1],
        key: vec![0],
    };
    let rows = keys
        .iter()
        .map(|k| {
            (
                1,
                vec![Value::Text(k.to_string().into_bytes().into()), Value::Null],
            )
        })
        .collect();
    source
        .keep(0, &layout, commit, rows)
        .unwrap()
        .into_iter()
        .map(|(_, row)| match &row[0] {
            Value::Text(t) => std::str::from_utf8(&t[..]).unwrap().parse().unwrap(),
            _ => unreachable!(),
        })
        .collect()
}

/// A table whose one segment was read from a snapshot later than the
/// stream's start (a table added to a source already streaming, or one
/// whose first page was never sealed): its commits before that snapshot
/// are in it, so the stream skips them; later ones pass.
#[test]
fn a_table_read_from_a_later_snapshot_skips_the_commits_it_holds() {
    let source = source_with(vec![Segment {
        lsn: 500,
        upto: Some(vec!["9".into()]),
    }]);
    assert_eq!(kept(&source, 400, &[1, 20]), Vec::<i64>::new());
    assert_eq!(kept(&source, 500, &[1, 20]), vec![1, 20]);
    assert_eq!(kept(&source, 600, &[3]), vec![3]);
}

/// Two segments (a snapshot resumed after key 10 from a snapshot at 300):
/// a change committed between the two is skipped only for keys of the
/// second segment.
#[test]
fn a_resumed_snapshot_skips_per_key_range() {
    let source = source_with(vec![
        Segment {
            lsn: 100,
            upto: Some(vec!["10".into()]),
        },
        Segment {
            lsn: 300,
            upto: Some(vec!["50".into()]),
        },
    ]);
    assert_eq!(kept(&source, 200, &[5, 10, 11, 60]), vec![5, 10]);
    assert_eq!(kept(&source, 50, &[5, 60]), Vec::<i64>::new());
    assert_eq!(kept(&source, 300, &[5, 11, 60]), vec![5, 11, 60]);
}

/// A table's failure, sealed in its progress, is reported again as the
/// source opens (before anything is read), and the table is left out of
/// what is read on.
#[tokio::test]
async fn a_sealed_table_failure_is_reported_again_at_open() {
    use super::progress::TableFailure;
    let mut source = source_with(Vec::new());
    let progress = TableProgress {
        segments: Vec::new(),
        snapshot_done: true,
        table_oid: Some(7),
        gaps_accepted: 0,
        failed: Some(TableFailure {
            gap: false,
            message: "public.t was truncated upstream".into(),
        }),
    };
    let offsets: crate::Offsets = [
        (
            "stream".to_string(),
            serde_json::to_string(&StreamState {
                start: 1,
                lsn: 5,
                gaps_accepted: 0,
            })
            .unwrap(),
        ),
        ("42".to_string(), serde_json::to_string(&progress).unwrap()),
    ]
    .into();
    let tables = [crate::SourceTable {
        split: "42".into(),
        upstream: "public.t".into(),
        schema: source.tables[0].schema.clone(),
        gaps_accepted: 0,
    }];
    let options = options();
    let open = SourceOpen {
        name: "shop",
        schema: std::sync::Arc::new(arrow::datatypes::Schema::empty()),
        options: &options,
        offsets: &offsets,
        until: None,
        tables: &tables,
    };
    source = CdcSource::new(&open, Upstream::parse(&options).unwrap()).unwrap();
    assert!(source.tables[0].failed());
    assert!(source.upstream_tables().is_empty());
    match source.next().await.unwrap() {
        SourceEvent::SplitFailed {
            split,
            gap,
            message,
        } => {
            assert_eq!((split.as_str(), gap), ("42", false));
            assert!(message.contains("truncated"), "{message}");
        }
        other => panic!("expected the failure first, got {other:?}"),
    }
    // A single-table source fails whole instead.
    let mut single = source_with(Vec::new());
    single.single = true;
    assert!(single.fail_table(0, rejected("broken")).is_err());
    assert!(single.pending.is_empty());
}
