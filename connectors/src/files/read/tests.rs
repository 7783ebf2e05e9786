//! Reading a file as it streams: how much of it is held, records cut
//! across chunks (quoted line breaks included), gzip, bad records named or
//! dropped, and Parquet resumed and stopped inside its row groups.

use std::collections::BTreeMap;

use arrow::array::{Int64Array, StringArray};

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

fn settings(pairs: &[(&str, &str)]) -> Settings {
    let options: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Settings::parse(&options).unwrap()
}

/// `bytes` as the object `data` of an in-memory store, read through a
/// reader asking for `chunk` bytes at a time.
async fn text_rows(bytes: Vec<u8>, chunk: u64, settings: &Settings, gzip: bool) -> TextRows {
    let store = Arc::new(object_store::memory::InMemory::new());
    store.put(&Path::from("data"), bytes.into()).await.unwrap();
    let location = Location {
        url: "memory:///".into(),
        store,
        root: Path::from(""),
        local: None,
    };
    let mut input = Input::open(&location, "data", gzip).await.unwrap();
    input.chunk = chunk;
    TextRows::new(input, settings, &schema())
}

/// Every row of `rows` as `id|name`, or the first error's row and text.
async fn drain(rows: &mut TextRows) -> Result<Vec<String>, (u64, String)> {
    let mut out = Vec::new();
    loop {
        match rows.next().await {
            Ok(Some(batch)) => out.extend(show(&batch)),
            Ok(None) => return Ok(out),
            Err(ReadError::Decode { row, error }) => return Err((row, error.to_string())),
            Err(ReadError::Store(e)) => panic!("store: {e}"),
        }
    }
}

pub(in crate::files) use crate::testing::id_name_lines as show;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// 200 000 rows (about 3 MB): the first batch arrives once a block's
/// worth of bytes is in, not the file; every row arrives once.
#[tokio::test]
async fn a_large_file_is_held_a_block_at_a_time() {
    let mut text = String::from("id,name\n");
    for i in 0..200_000 {
        text.push_str(&format!("{i},name number {i}\n"));
    }
    let size = text.len() as u64;
    let csv = settings(&[("path", "/x"), ("format", "csv")]);
    let mut rows = text_rows(text.into_bytes(), 4096, &csv, false).await;
    let first = rows.next().await.unwrap().unwrap();
    assert_eq!(first.num_rows(), BATCH_ROWS);
    let held = rows.input.at;
    // A block of 8 192 rows of about 25 bytes, and the chunk it ended in.
    assert!(
        held < 300_000,
        "{held} of {size} bytes were read for the first batch"
    );
    assert!(rows.input.pending.len() < 300_000);
    let rest = drain(&mut rows).await.unwrap();
    assert_eq!(rest.len() + BATCH_ROWS, 200_000);
    assert_eq!(rest.last().unwrap(), "199999|name number 199999");
    assert_eq!(rows.input.at, size);
}

/// A CSV whose quoted fields hold line breaks, commas and doubled quotes,
/// streamed 7 bytes at a time (records cut across chunks and blocks), with
/// one bad record: failing, it is named by the rows before it; skipping,
/// it alone is dropped. The same through gzip; a truncated gzip file is
/// an error, not a short file.
#[tokio::test]
async fn records_span_chunks_and_quoted_line_breaks_and_a_bad_one_is_named_or_dropped() {
    let mut text = String::from("name,id\n");
    let mut want = Vec::new();
    for i in 0..20_000 {
        if i == 12_345 {
            text.push_str("\"bad\",twelve\n");
            continue;
        }
        let name = format!("line {i}\nsaid \"\"hi\"\", ok");
        text.push_str(&format!("\"{name}\",{i}\n"));
        want.push(format!("{i}|line {i}\nsaid \"hi\", ok"));
    }
    let csv = settings(&[("path", "/x"), ("format", "csv")]);
    let (row, error) = drain(&mut text_rows(text.clone().into_bytes(), 7, &csv, false).await)
        .await
        .unwrap_err();
    assert_eq!(row, 12_345, "{error}");
    assert!(error.contains("twelve"), "{error}");

    let skip = settings(&[("path", "/x"), ("format", "csv"), ("on_error", "skip")]);
    let mut rows = text_rows(text.clone().into_bytes(), 7, &skip, false).await;
    assert_eq!(drain(&mut rows).await.unwrap(), want);
    assert_eq!(rows.dropped, 1);

    let zipped = gzip(text.as_bytes());
    let mut rows = text_rows(zipped.clone(), 1000, &skip, true).await;
    assert_eq!(drain(&mut rows).await.unwrap(), want);
    let cut = zipped[..zipped.len() - 100].to_vec();
    assert!(
        drain(&mut text_rows(cut, 1000, &skip, true).await)
            .await
            .is_err()
    );
}

/// JSON lines across chunks, a last line without a line break, a blank
/// line; a bad object dropped under skip.
#[tokio::test]
async fn json_lines_are_cut_across_chunks() {
    let text = "{\"id\": 1, \"name\": \"a\"}\n\n{\"id\": \"x\"}\n{\"id\": 3}\n{\"name\": \"d\", \"id\": 4}";
    let json = settings(&[("path", "/x"), ("format", "json"), ("on_error", "skip")]);
    let mut rows = text_rows(text.as_bytes().to_vec(), 5, &json, false).await;
    assert_eq!(
        drain(&mut rows).await.unwrap(),
        vec!["1|a", "3|NULL", "4|d"]
    );
    assert_eq!(rows.dropped, 1);
}

/// 10 000 rows in row groups of 1 000: resumed at row 2 500 and stopped at
/// 7 300 (a replay's end), the reader yields exactly those rows.
#[tokio::test]
async fn parquet_resumes_and_stops_inside_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<i64> = (0..10_000).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(1_000))
        .build();
    let file = std::fs::File::create(dir.path().join("a.parquet")).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema(), Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    let options: BTreeMap<String, String> =
        [("path".to_string(), dir.path().to_str().unwrap().to_string())]
            .into_iter()
            .collect();
    let location = Location::parse(&options).unwrap();
    let parquet = settings(&[("path", "/x")]);
    let read = |skip, limit| {
        let location = &location;
        async move {
            let mut reader =
                FileReader::open(location, "a.parquet", &parquet, &schema(), skip, limit)
                    .await
                    .unwrap();
            let mut out = Vec::new();
            while let Some(batch) = reader.next().await.unwrap() {
                out.extend(show(&batch));
            }
            (out, reader.rows())
        }
    };
    let (rows, counted) = read(2_500, Some(7_300)).await;
    let want: Vec<String> = (2_500..7_300).map(|i| format!("{i}|n{i}")).collect();
    assert_eq!(rows, want);
    assert_eq!(counted, 7_300);
    let (rows, counted) = read(9_999, None).await;
    assert_eq!(rows, vec!["9999|n9999"]);
    assert_eq!(counted, 10_000);
}

/// A quote inside an unquoted field is an ordinary byte, as the CSV
/// parser reads it: it neither swallows the lines after it nor merges
/// records; a quoted field may still hold a delimiter and a line break.
#[tokio::test]
async fn a_stray_quote_in_an_unquoted_field_ends_nothing() {
    let text = "id,name\n5,He said \"hi\n6,ok\n7,\"a, b\nc\"\n8,\"x\"\"y\"\n";
    let csv = settings(&[("path", "/x"), ("format", "csv")]);
    let mut rows = text_rows(text.as_bytes().to_vec(), 3, &csv, false).await;
    assert_eq!(
        drain(&mut rows).await.unwrap(),
        vec!["5|He said \"hi", "6|ok", "7|a, b\nc", "8|x\"y"]
    );
}
