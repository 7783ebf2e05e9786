//! The `files` sink through the server: CREATE SINK checks (a bad path,
//! input that retracts without a changelog, two sinks on one directory),
//! and Parquet and CSV-changelog sinks over a nexmark source exactly right
//! after `kill -9` at random moments: the committed files hold every row
//! once, nothing is left staged.

use std::path::Path;

use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::harness::try_rows as rows;
use crate::sources::{ROUNDS, crash_rng, crash_server, error_of, killed_then_every_bid, value};

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
