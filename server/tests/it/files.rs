//! The `files` connectors through the server:
//! - the sink: CREATE SINK checks (a bad path, input that retracts without
//!   a changelog, two sinks on one directory), and Parquet and
//!   CSV-changelog sinks over a nexmark source exactly right after `kill -9`
//!   at random moments: the committed files hold every row once, nothing is
//!   left staged;
//! - the source: a watched directory whose files keep arriving while the
//!   server is killed, read into a projection and a sink, each row once.

use std::path::Path;
use std::time::Duration;

use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::harness::{eventually, try_rows as rows};
use crate::sources::{
    ROUNDS, crash_rng, crash_server, error_of, kill_at_a_random_moment, killed_then_every_bid,
    sinks_committed, value,
};

/// Fixed so every run and every restart generates the same events.
const BASE_TIME: &str = "1700000000000";

/// The committed files in `dir` with extension `ext`, in name order.
fn committed(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// Every row of the Parquet files in `dir`, as `a|b|c`, sorted.
fn parquet_rows(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for path in committed(dir, "parquet") {
        let file = std::fs::File::open(&path).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let columns: Vec<_> = batch
                .columns()
                .iter()
                .map(|c| {
                    arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &Default::default())
                        .unwrap()
                })
                .collect();
            for row in 0..batch.num_rows() {
                let cells: Vec<String> = columns.iter().map(|c| c.value(row).to_string()).collect();
                out.push(cells.join("|"));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_sink_is_checked_at_create() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let server = crate::harness::WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '1000', base_time = '{BASE_TIME}')"
        ))
        .await
        .unwrap();
    let (code, relative) = error_of(
        &client,
        "CREATE SINK s FROM bid WITH (connector = 'files', path = 'out/dir')",
    )
    .await;
    assert_eq!(code, "22023", "{relative}");
    assert!(relative.contains("absolute path"), "{relative}");
    let (code, retracting) = error_of(
        &client,
        &format!(
            "CREATE SINK s AS SELECT auction, count(*) FROM bid GROUP BY 1 WITH (connector = 'files', path = '{out}')"
        ),
    )
    .await;
    assert_eq!(code, "22023", "{retracting}");
    assert!(retracting.contains("changelog = 'true'"), "{retracting}");
    client
        .batch_execute(&format!(
            "CREATE SINK s FROM bid WITH (connector = 'files', path = '{out}/')"
        ))
        .await
        .unwrap();
    let (code, twice) = error_of(
        &client,
        &format!("CREATE SINK t FROM bid WITH (connector = 'files', path = 'file://{out}', format = 'csv')"),
    )
    .await;
    assert_eq!(code, "42710", "{twice}");
    assert!(twice.contains("(sink s) already exists"), "{twice}");
    let shown = value(&client, "SHOW CREATE SINK s").await;
    assert!(shown.contains("'files'"), "{shown}");
}

/// A Parquet sink of bids and a CSV changelog of counts over a nexmark
/// source, the server killed with SIGKILL at random moments: the committed
/// files equal an uninterrupted read of the same events, each row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_sinks_are_exact_after_kill_9_at_random_moments() {
    let dir = tempfile::tempdir().unwrap();
    let (pricey, counts) = (dir.path().join("pricey"), dir.path().join("counts"));
    let mut rng = crash_rng(0xF11E);
    let mut server = crash_server();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bid WITH (connector = 'nexmark', event = 'bid', max_events = '100000',
                 rate_limit = '25000', base_time = '{BASE_TIME}');
             CREATE SINK pricey AS SELECT auction, bidder, price FROM bid WHERE price > 5000000
               WITH (connector = 'files', path = '{}');
             CREATE SINK counts AS SELECT auction % 10 AS k, count(*) AS n FROM bid GROUP BY 1
               WITH (connector = 'files', path = '{}', format = 'csv', changelog = 'true');",
            pricey.display(),
            counts.display()
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
    assert_eq!(
        parquet_rows(&pricey),
        expected,
        "Parquet sink after {ROUNDS} kills\n{log}"
    );

    // The changelog nets out to the final counts, each change once.
    let mut net: std::collections::BTreeMap<String, i64> = Default::default();
    let mut changes = 0;
    for path in committed(&counts, "csv") {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("k,n,weir_op,weir_epoch"),
            "{}",
            path.display()
        );
        for line in lines {
            let fields: Vec<&str> = line.split(',').collect();
            let weight = if fields[2] == "insert" { 1 } else { -1 };
            *net.entry(format!("{}|{}", fields[0], fields[1]))
                .or_default() += weight;
            changes += 1;
        }
    }
    net.retain(|_, w| *w != 0);
    let expected = rows(
        &client,
        "SELECT auction % 10, count(*) FROM every_bid GROUP BY 1",
    )
    .await
    .unwrap();
    let netted: Vec<String> = net.iter().map(|(row, w)| format!("{row}|{w}")).collect();
    let expected_net: Vec<String> = expected.iter().map(|r| format!("{r}|1")).collect();
    assert_eq!(
        netted, expected_net,
        "changelog after {ROUNDS} kills\n{log}"
    );
    assert!(
        changes > 10,
        "the counts were updated, not just inserted ({changes})"
    );

    for (out, ext) in [(&pricey, "parquet"), (&counts, "csv")] {
        // One token names every committed file of a sink; nothing stays
        // staged under it.
        let tokens: std::collections::BTreeSet<String> = committed(out, ext)
            .iter()
            .map(|p| {
                let stem = p.file_stem().unwrap().to_str().unwrap();
                stem.rsplit('-').next().unwrap().to_string()
            })
            .collect();
        assert_eq!(tokens.len(), 1, "{tokens:?}");
        let sink = out.file_name().unwrap().to_str().unwrap();
        let token = tokens.first().unwrap();
        let left = walk(&out.join(format!("_weir_staging/{sink}-{token}")));
        assert!(left.is_empty(), "nothing stays staged: {left:?}");
    }
}

/// Every file under `dir` (none if it does not exist).
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .flat_map(|p| if p.is_dir() { walk(&p) } else { vec![p] })
        .collect()
}

/// Rows per input file of the source test.
const FILE_ROWS: i64 = 5000;

/// Input file `k` of the source test: ids `k * FILE_ROWS ..`, written
/// under a hidden name and renamed, as a producer must so that no reader
/// sees half a file.
fn write_input(dir: &Path, k: i64) {
    let mut text = String::from("name,id\n");
    for id in k * FILE_ROWS..(k + 1) * FILE_ROWS {
        text.push_str(&format!("n{id},{id}\n"));
    }
    let hidden = dir.join(format!(".{k:04}.csv.tmp"));
    std::fs::write(&hidden, text).unwrap();
    std::fs::rename(&hidden, dir.join(format!("{k:04}.csv"))).unwrap();
}

/// A watched directory gains two files before each of the kills: the
/// projection over it counts every row once, and the files sink copying
/// it holds every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_directory_feeds_a_projection_and_a_sink_exactly_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let (input, copy) = (dir.path().join("in"), dir.path().join("copy"));
    std::fs::create_dir_all(&input).unwrap();
    for k in 0..5 {
        write_input(&input, k);
    }
    let mut rng = crash_rng(0xF11E5);
    let mut server = crash_server();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE f (id BIGINT NOT NULL, name TEXT)
               WITH (connector = 'files', path = '{}', format = 'csv', poll_interval_ms = '50');
             CREATE PROJECTION totals AS SELECT count(*) AS n, sum(id) AS s, count(DISTINCT id) AS d FROM f;
             CREATE SINK copy FROM f WITH (connector = 'files', path = '{}');",
            input.display(),
            copy.display()
        ))
        .await
        .expect("setup");
    drop(client);
    let mut files = 5;
    for round in 0..ROUNDS {
        for _ in 0..2 {
            write_input(&input, files);
            files += 1;
        }
        kill_at_a_random_moment(&mut server, &mut rng, 300, round).await;
    }
    let client = server.connect().await;
    let rows_in = files * FILE_ROWS;
    let want = format!("{rows_in}|{}|{rows_in}", rows_in * (rows_in - 1) / 2);
    eventually(Duration::from_secs(60), "every file read", || async {
        let got = rows(&client, "SELECT n, s, d FROM totals").await.ok()?;
        (got == [want.clone()]).then_some(())
    })
    .await;
    sinks_committed(&client).await;
    let mut expected: Vec<String> = (0..rows_in).map(|id| format!("{id}|n{id}")).collect();
    expected.sort();
    assert_eq!(
        parquet_rows(&copy),
        expected,
        "the copy after {ROUNDS} kills\n{}",
        server.log_tail()
    );
    let status = value(
        &client,
        "SELECT status FROM weir_catalog.sources WHERE name = 'f'",
    )
    .await;
    assert_eq!(status, "running");
}

/// A source created without columns takes them from the first file under
/// its path, in each format; with no file there, CREATE says to declare
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_source_without_columns_discovers_them_from_its_first_file() {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
    use datafusion::parquet::arrow::ArrowWriter;

    let dir = tempfile::tempdir().unwrap();
    let (csv, json, parquet, empty) = (
        dir.path().join("csv"),
        dir.path().join("json"),
        dir.path().join("parquet"),
        dir.path().join("empty"),
    );
    for d in [&csv, &json, &parquet, &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(csv.join("a.csv"), "label,id,price\nx,1,2.5\ny,2,3\n").unwrap();
    std::fs::write(csv.join("b.csv"), "label,id,price\nz,3,1\n").unwrap();
    std::fs::write(
        json.join("a.jsonl"),
        "{\"k\": 1, \"tag\": \"p\", \"ok\": true}\n{\"k\": 2, \"tag\": null, \"ok\": false}\n",
    )
    .unwrap();
    let batch = RecordBatch::try_from_iter([
        ("k", Arc::new(Int32Array::from(vec![7, 8])) as ArrayRef),
        ("v", Arc::new(StringArray::from(vec!["s", "t"])) as ArrayRef),
    ])
    .unwrap();
    let file = std::fs::File::create(parquet.join("a.parquet")).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    let server = crate::harness::WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE c WITH (connector = 'files', path = '{}', format = 'csv', watch = 'false');
             CREATE SOURCE j WITH (connector = 'files', path = '{}', format = 'json', watch = 'false');
             CREATE SOURCE p WITH (connector = 'files', path = '{}', watch = 'false');
             CREATE PROJECTION c_sum AS SELECT count(*) AS n, sum(id) AS ids, sum(price) AS total FROM c;
             CREATE PROJECTION j_ok AS SELECT k, tag FROM j WHERE ok;
             CREATE PROJECTION p_all AS SELECT k + 1 AS k1, v FROM p;",
            csv.display(),
            json.display(),
            parquet.display()
        ))
        .await
        .expect("sources without columns");
    for (source, columns) in [
        ("c", "label TEXT, id BIGINT, price DOUBLE PRECISION"),
        ("j", "k BIGINT, ok BOOLEAN, tag TEXT"),
        ("p", "k INTEGER, v TEXT"),
    ] {
        let shown = value(&client, &format!("SHOW CREATE SOURCE {source}")).await;
        assert!(
            shown
                .to_uppercase()
                .contains(&format!("({columns})").to_uppercase()),
            "{shown}"
        );
    }
    for (sql, want) in [
        ("SELECT n, ids, total FROM c_sum", vec!["3|6|6.5"]),
        ("SELECT k, tag FROM j_ok", vec!["1|p"]),
        ("SELECT k1, v FROM p_all", vec!["8|s", "9|t"]),
    ] {
        eventually(Duration::from_secs(30), sql, || async {
            let got = rows(&client, sql).await.ok()?;
            (got == want).then_some(())
        })
        .await;
    }

    let (_, message) = error_of(
        &client,
        &format!(
            "CREATE SOURCE e WITH (connector = 'files', path = '{}', format = 'csv')",
            empty.display()
        ),
    )
    .await;
    assert!(message.contains("declare them"), "{message}");
}
