//! The files source over a local directory: formats and column matching,
//! resuming part way through a file, new files while watching, replays,
//! bad rows, and reading what a files sink wrote.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use super::*;
use crate::Sink;
use crate::files::read::BATCH_ROWS;
use crate::files::read::tests::show;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

fn options(dir: &Path, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.insert("path".into(), dir.to_str().unwrap().to_string());
    out
}

fn open(
    options: &BTreeMap<String, String>,
    offsets: &Offsets,
    until: Option<&Offsets>,
) -> FilesSource {
    FilesSource::new(&SourceOpen {
        name: "src",
        schema: schema(),
        options,
        offsets,
        until,
        tables: &[],
    })
    .unwrap()
}

/// What a source yields until its split ends (or, watching, until it is
/// idle twice): the rows as `id|name`, and the offsets after them.
async fn drain(source: &mut FilesSource) -> (Vec<String>, Offsets) {
    let mut rows = Vec::new();
    let mut offsets = Offsets::new();
    let mut idle = 0;
    loop {
        match source.next().await.unwrap() {
            SourceEvent::Batch(batch) => {
                offsets.insert(batch.split.clone(), batch.offset.clone());
                rows.extend(show(batch.changes.rows()));
            }
            SourceEvent::SplitEnd { .. } => return (rows, offsets),
            SourceEvent::SplitFailed { message, .. } => panic!("a split failed: {message}"),
            SourceEvent::Idle => {
                idle += 1;
                if idle == 2 {
                    return (rows, offsets);
                }
            }
            SourceEvent::Transaction { .. } => panic!("files are not transactions"),
        }
    }
}

#[tokio::test]
async fn csv_json_and_parquet_are_read_by_column_name_each_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Columns in another order than declared, and one more, by name.
    std::fs::write(d.join("a.csv"), "name,extra,id\nann,x,1\n\"b, q\",y,2\n").unwrap();
    std::fs::write(d.join("b.csv"), "id,name\n3,\n").unwrap();
    std::fs::write(d.join("notes.txt"), "not a csv\n").unwrap();
    std::fs::create_dir_all(d.join("_weir_staging")).unwrap();
    std::fs::write(d.join("_weir_staging/c.csv"), "id,name\n99,staged\n").unwrap();
    let csv = options(d, &[("format", "csv"), ("watch", "false")]);
    let (rows, offsets) = drain(&mut open(&csv, &Offsets::new(), None)).await;
    assert_eq!(rows, vec!["1|ann", "2|b, q", "3|NULL"]);
    let want: Offsets = [("a.csv", "done:2"), ("b.csv", "done:1")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(offsets, want);
    // Reopened at those offsets: nothing again.
    assert_eq!(
        drain(&mut open(&csv, &offsets, None)).await.0,
        Vec::<String>::new()
    );

    std::fs::write(
        d.join("j.jsonl"),
        "{\"name\": \"jo\", \"id\": 4, \"more\": true}\n{\"id\": 5}\n",
    )
    .unwrap();
    let json = options(d, &[("format", "json"), ("watch", "false")]);
    assert_eq!(
        drain(&mut open(&json, &Offsets::new(), None)).await.0,
        vec!["4|jo", "5|NULL"]
    );

    // Parquet with an INT32 id (cast) and the columns swapped.
    let file = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, true),
        Field::new("id", DataType::Int32, false),
    ]));
    let batch = RecordBatch::try_new(
        file,
        vec![
            Arc::new(StringArray::from(vec![Some("pq"), None])) as ArrayRef,
            Arc::new(arrow::array::Int32Array::from(vec![6, 7])),
        ],
    )
    .unwrap();
    std::fs::write(
        d.join("p.parquet"),
        super::super::encode::encode(Format::Parquet, &batch).unwrap(),
    )
    .unwrap();
    let parquet = options(d, &[("watch", "false")]);
    assert_eq!(
        drain(&mut open(&parquet, &Offsets::new(), None)).await.0,
        vec!["6|pq", "7|NULL"]
    );
}

/// 20 000 rows: three batches. Stopped after the first, reopened at its
/// offset: the rest, once.
#[tokio::test]
async fn a_restart_resumes_inside_a_file_and_a_replay_stops_at_its_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("id,name\n");
    for i in 0..20_000 {
        text.push_str(&format!("{i},n{i}\n"));
    }
    std::fs::write(dir.path().join("big.csv"), text).unwrap();
    let csv = options(dir.path(), &[("format", "csv"), ("watch", "false")]);
    let mut source = open(&csv, &Offsets::new(), None);
    let SourceEvent::Batch(first) = source.next().await.unwrap() else {
        panic!("a batch first")
    };
    assert_eq!(first.offset, BATCH_ROWS.to_string());
    let at: Offsets = [(first.split.clone(), first.offset.clone())]
        .into_iter()
        .collect();
    let (rest, end) = drain(&mut open(&csv, &at, None)).await;
    let mut all = show(first.changes.rows());
    all.extend(rest);
    let want: Vec<String> = (0..20_000).map(|i| format!("{i}|n{i}")).collect();
    assert_eq!(all, want);
    assert_eq!(end.get("big.csv").map(String::as_str), Some("done:20000"));

    // A replay up to the first batch's offset yields exactly those rows.
    let (replayed, _) = drain(&mut open(&csv, &Offsets::new(), Some(&at))).await;
    assert_eq!(replayed, want[..BATCH_ROWS]);
}

#[tokio::test]
async fn a_watching_source_reads_new_files_as_they_appear() {
    let dir = tempfile::tempdir().unwrap();
    let csv = options(dir.path(), &[("format", "csv"), ("poll_interval_ms", "10")]);
    let mut source = open(&csv, &Offsets::new(), None);
    assert!(matches!(source.next().await.unwrap(), SourceEvent::Idle));
    std::fs::write(dir.path().join("1.csv"), "id,name\n1,a\n").unwrap();
    let (rows, _) = drain(&mut source).await;
    assert_eq!(rows, vec!["1|a"]);
    std::fs::create_dir_all(dir.path().join("later")).unwrap();
    std::fs::write(dir.path().join("later/2.csv"), "id,name\n2,b\n").unwrap();
    let (rows, offsets) = drain(&mut source).await;
    assert_eq!(rows, vec!["2|b"]);
    assert_eq!(
        offsets.get("later/2.csv").map(String::as_str),
        Some("done:1")
    );
}

#[tokio::test]
async fn a_bad_row_fails_the_source_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.csv"), "id,name\n1,a\nnope,b\n").unwrap();
    let csv = options(dir.path(), &[("format", "csv"), ("watch", "false")]);
    let mut source = open(&csv, &Offsets::new(), None);
    let err = loop {
        match source.next().await {
            Ok(SourceEvent::SplitEnd { .. }) => panic!("a bad row must not be skipped silently"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("file bad.csv"), "{err}");
    std::fs::write(dir.path().join("bad.csv"), "id\n1\n").unwrap();
    let err = loop {
        match open(&csv, &Offsets::new(), None).next().await {
            Ok(_) => panic!("a missing column must fail"),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("no column \"name\""), "{err}");
}

/// The files a sink committed read back as the rows it was given; its
/// staging directory is skipped.
/// A files sink (`out`, generation 1, nothing sealed) under `options`.
fn files_sink(options: &BTreeMap<String, String>) -> super::super::sink::FilesSink {
    super::super::sink::FilesSink::new(
        crate::SinkOpen {
            name: "out",
            schema: schema(),
            options,
            sealed: None,
            generation: 1,
            failures: 0,
        },
        super::super::Target::parse(options).unwrap(),
    )
    .unwrap()
}

/// `1|a` and `2|b`.
fn two_rows() -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef,
            Arc::new(StringArray::from(vec!["a", "b"])),
        ],
    )
    .unwrap()
}

#[tokio::test]
async fn a_files_source_reads_what_a_files_sink_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let sink_options: BTreeMap<String, String> =
        [("path".to_string(), path.clone())].into_iter().collect();
    let mut sink = files_sink(&sink_options);
    let rows = two_rows();
    sink.write(1, &ChangeBatch::inserts(rows.clone()))
        .await
        .unwrap();
    let d = sink.pre_commit(1).await.unwrap();
    sink.commit(1, &d).await.unwrap();
    sink.write(2, &ChangeBatch::inserts(rows)).await.unwrap();
    sink.pre_commit(2).await.unwrap();
    let source_options = options(dir.path(), &[("watch", "false")]);
    let (read, _) = drain(&mut open(&source_options, &Offsets::new(), None)).await;
    assert_eq!(read, vec!["1|a", "2|b"], "epoch 2 is staged, not committed");
}

fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes()).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test]
async fn gzip_files_are_read_and_bad_lines_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.csv.gz"),
        gzip("id,name\n1,one\nnot a number,two\n3,three\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("b.csv"), "id,name\n4,four\n").unwrap();
    // Without on_error = 'skip', the bad line fails the source, naming it.
    let failing = options(dir.path(), &[("format", "csv"), ("watch", "false")]);
    let mut source = open(&failing, &Offsets::new(), None);
    let error = loop {
        match source.next().await {
            Err(e) => break e.to_string(),
            Ok(SourceEvent::SplitEnd { .. }) => panic!("the bad line was read"),
            Ok(_) => {}
        }
    };
    assert!(error.contains("a.csv.gz"), "{error}");

    let skipping = options(
        dir.path(),
        &[("format", "csv"), ("watch", "false"), ("on_error", "skip")],
    );
    let mut source = open(&skipping, &Offsets::new(), None);
    let mut rows = Vec::new();
    let mut skipped = 0;
    loop {
        match source.next().await.unwrap() {
            SourceEvent::Batch(batch) => {
                skipped += batch.skipped;
                rows.extend(show(batch.changes.rows()));
            }
            SourceEvent::SplitEnd { .. } => break,
            _ => {}
        }
    }
    assert_eq!(rows, ["1|one", "3|three", "4|four"]);
    assert_eq!(skipped, 1);

    // JSON lines, gzip by the option whatever the name.
    let json = tempfile::tempdir().unwrap();
    std::fs::write(
        json.path().join("c.jsonl"),
        gzip("{\"id\": 5, \"name\": \"five\"}\n{\"id\": \"six\"}\n{\"id\": 7}\n"),
    )
    .unwrap();
    let opts = options(
        json.path(),
        &[
            ("format", "json"),
            ("watch", "false"),
            ("compression", "gzip"),
            ("on_error", "skip"),
        ],
    );
    let (rows, offsets) = drain(&mut open(&opts, &Offsets::new(), None)).await;
    assert_eq!(rows, ["5|five", "7|NULL"]);
    assert_eq!(offsets["c.jsonl"], "done:2");

    // Parquet is typed and compressed already.
    let bad = options(dir.path(), &[("format", "parquet"), ("on_error", "skip")]);
    assert!(Settings::parse(&bad).is_err());
}

#[tokio::test]
async fn a_files_source_reads_the_gzip_csv_a_files_sink_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let sink_options: BTreeMap<String, String> = [
        ("path", path.as_str()),
        ("format", "csv"),
        ("compression", "gzip"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut sink = files_sink(&sink_options);
    let rows = two_rows();
    sink.write(1, &ChangeBatch::inserts(rows)).await.unwrap();
    let d = sink.pre_commit(1).await.unwrap();
    sink.commit(1, &d).await.unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('_') && !n.starts_with('.'))
        .collect();
    assert!(
        names.len() == 1 && names[0].ends_with(".csv.gz"),
        "{names:?}"
    );
    let source_options = options(dir.path(), &[("watch", "false"), ("format", "csv")]);
    let (read, _) = drain(&mut open(&source_options, &Offsets::new(), None)).await;
    assert_eq!(read, vec!["1|a", "2|b"]);
    let parquet: BTreeMap<String, String> = [("path", path.as_str()), ("compression", "gzip")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(super::super::Target::parse(&parquet).is_err());
}
