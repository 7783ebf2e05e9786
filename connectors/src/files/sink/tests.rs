//! The protocol driven directly, over a local directory and over S3
//! (moto): what readers see after each step, restarts at every point,
//! and a deposed writer's re-commit.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]))
}

fn changes(values: &[i64], weight: i64) -> ChangeBatch {
    let rows = RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(values.to_vec())) as ArrayRef],
    )
    .unwrap();
    ChangeBatch::new(rows, Int64Array::from(vec![weight; values.len()])).unwrap()
}

fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn open(
    options: &BTreeMap<String, String>,
    generation: u64,
    sealed: Option<(u64, &str)>,
) -> FilesSink {
    let schema = schema();
    let open = SinkOpen {
        name: "out",
        schema,
        options,
        sealed,
        generation,
        failures: 0,
    };
    FilesSink::new(open.clone(), Target::parse(open.options).unwrap()).unwrap()
}

/// Every committed file under `root` (name order) with its values, and how
/// many staged files there are.
async fn read_back(store: &Arc<dyn ObjectStore>, root: &Path) -> (Vec<(String, Vec<i64>)>, usize) {
    let mut all: Vec<_> = store.list(Some(root)).try_collect().await.unwrap();
    all.sort_by(|a, b| a.location.cmp(&b.location));
    let mut committed = Vec::new();
    let mut staged = 0;
    for meta in all {
        let name = meta.location.filename().unwrap().to_string();
        if meta.location.as_ref().contains(STAGING) {
            staged += 1;
            continue;
        }
        let bytes = store
            .get(&meta.location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let mut values = Vec::new();
        for batch in
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024).unwrap()
        {
            let batch = batch.unwrap();
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            values.extend((0..column.len()).map(|i| column.value(i)));
        }
        committed.push((name, values));
    }
    (committed, staged)
}

fn values(files: &[(String, Vec<i64>)]) -> Vec<i64> {
    files.iter().flat_map(|(_, v)| v.clone()).collect()
}

/// Two epochs committed, a third sealed but not committed, a fourth staged
/// and never sealed; a successor re-commits the third and drops the
/// fourth; the deposed writer's late commit of the third changes nothing.
async fn protocol(options: BTreeMap<String, String>) {
    let target = Target::parse(&options).unwrap();
    let (store, root) = (target.location.store.clone(), target.location.root.clone());

    let mut first = open(&options, 1, None);
    let d0 = first.pre_commit(5).await.unwrap();
    first.commit(5, &d0).await.unwrap();
    first.write(6, &changes(&[1, 2], 1)).await.unwrap();
    let d6 = first.pre_commit(6).await.unwrap();
    let (files, staged) = read_back(&store, &root).await;
    assert!(
        files.is_empty(),
        "nothing is visible before the commit: {files:?}"
    );
    assert_eq!(staged, 1);
    first.commit(6, &d6).await.unwrap();
    first.commit(6, &d6).await.unwrap();
    let (files, staged) = read_back(&store, &root).await;
    assert_eq!(values(&files), vec![1, 2]);
    assert_eq!(staged, 0);
    assert!(
        files[0].0.starts_with("part-00000000000000000006-0000-"),
        "{files:?}"
    );

    // Epoch 7 in two writes (two files); sealed, then the process dies
    // before committing it. Epoch 8 is staged and never sealed.
    first.write(7, &changes(&[3], 1)).await.unwrap();
    first.write(7, &changes(&[4], 2)).await.unwrap();
    let d7 = first.pre_commit(7).await.unwrap();
    first.write(8, &changes(&[99], 1)).await.unwrap();
    let _d8 = first.pre_commit(8).await.unwrap();
    assert_eq!(values(&read_back(&store, &root).await.0), vec![1, 2]);

    let mut second = open(&options, 2, Some((7, &d7)));
    second.write(8, &changes(&[5], 1)).await.unwrap();
    let (files, staged) = read_back(&store, &root).await;
    assert_eq!(
        values(&files),
        vec![1, 2, 3, 4, 4],
        "epoch 7 re-committed, 8 not"
    );
    assert_eq!(
        staged, 1,
        "the deposed writer's epoch 8 is gone, the new one staged"
    );
    // The deposed writer commits what it sealed: the same renames, done.
    first.commit(7, &d7).await.unwrap();
    let d8 = second.pre_commit(8).await.unwrap();
    second.commit(8, &d8).await.unwrap();
    let (files, staged) = read_back(&store, &root).await;
    assert_eq!(values(&files), vec![1, 2, 3, 4, 4, 5]);
    assert_eq!(staged, 0);
    assert_eq!(files.len(), 4);

    // A restart at a seal already committed changes nothing.
    let mut third = open(&options, 3, Some((8, &d8)));
    let d9 = third.pre_commit(9).await.unwrap();
    third.commit(9, &d9).await.unwrap();
    assert_eq!(read_back(&store, &root).await.0, files);

    // A committed file removed outside Weir fails a re-commit naming it.
    store
        .delete(&root.clone().join(files[3].0.as_str()))
        .await
        .unwrap();
    let mut fourth = open(&options, 4, Some((8, &d8)));
    let err = fourth.pre_commit(9).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("something outside Weir removed it"),
        "{err}"
    );
}

#[tokio::test]
async fn files_are_committed_once_across_restarts_in_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    protocol(options(&[("path", path.to_str().unwrap())])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_committed_once_across_restarts_in_s3() {
    let moto = weir_storage::testing::start_moto();
    weir_storage::testing::create_bucket(moto.port, "sink").await;
    let endpoint = format!("http://127.0.0.1:{}", moto.port);
    // SAFETY: the only variable this test binary sets, set before any
    // thread reads it (each test reads its own name).
    unsafe { std::env::set_var("WEIR_FILES_SINK_TEST_SECRET", "test") };
    protocol(options(&[
        ("path", "s3://sink/some/prefix/"),
        ("s3.endpoint", &endpoint),
        ("s3.allow_http", "true"),
        ("s3.region", "us-east-1"),
        ("s3.access_key_id", "test"),
        ("s3.secret_access_key_env", "WEIR_FILES_SINK_TEST_SECRET"),
    ]))
    .await;
}

#[tokio::test]
async fn a_changelog_writes_retractions_and_plain_files_refuse_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let plain = options(&[("path", &path), ("format", "csv")]);
    let mut sink = open(&plain, 1, None);
    let err = sink.write(3, &changes(&[1], -1)).await.unwrap_err();
    assert!(err.to_string().contains("changelog = 'true'"), "{err}");

    let log = options(&[("path", &path), ("format", "csv"), ("changelog", "true")]);
    let mut sink = open(&log, 1, None);
    sink.write(3, &changes(&[1, 2], 1)).await.unwrap();
    sink.write(3, &changes(&[1], -1)).await.unwrap();
    let d = sink.pre_commit(3).await.unwrap();
    sink.commit(3, &d).await.unwrap();
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".csv"))
        .collect();
    names.sort();
    let text: String = names
        .iter()
        .map(|n| std::fs::read_to_string(dir.path().join(n)).unwrap())
        .collect();
    assert_eq!(
        text,
        "v,weir_op,weir_epoch\n1,insert,3\n2,insert,3\nv,weir_op,weir_epoch\n1,delete,3\n"
    );
}
