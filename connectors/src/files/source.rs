//! The `files` source: rows from Parquet, CSV or JSON-lines files in a
//! local directory or an object store, each file read once.
//!
//! Files are read in name order; every file is its own split, and its
//! offset in the seal is the rows read so far (`"n"`) or `"done:n"` once
//! it is read to its end (a zero-row batch carries that mark). A restart
//! skips the files marked done, and resumes a partly read one after its
//! `n` rows. Names that begin with `_` or `.` (in any directory under the
//! root) are skipped, so a `files` sink's directory reads as its committed
//! files only. Files are assumed immutable once they appear under their
//! name: a file changed after it was read is not read again.
//!
//! With `watch = 'true'` (the default) the root is listed again every
//! `poll_interval_ms` and new files are read as they appear; with
//! `'false'` the source ends after the files present when it starts.
//! A replay (`until`) reads exactly the files and rows the offsets name,
//! so a projection created later backfills the rows read before it.
//!
//! CSV and JSON-lines files may be gzip-compressed (`compression`: by a
//! `.gz` suffix, or always). A line that does not parse fails the source
//! naming the file and row, or with `on_error = 'skip'` is dropped and
//! counted ([`decode_skipping`]); offsets count the rows kept, which a
//! restart decodes again the same way.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use weir_common::ChangeBatch;

use super::{Format, Location, NAME, bad_option, normalized_url, with_s3_options};
use crate::spec::{
    Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType, Options,
};
use crate::{Connector, ConnectorError, Offsets, Source, SourceBatch, SourceEvent, SourceOpen};

/// The one split name the runtime is told about; batches name their file.
const SPLIT: &str = "files";
/// Rows per batch handed to the runtime.
const BATCH_ROWS: usize = 8192;

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Source,
    help: "reads Parquet, CSV or JSON-lines files from a directory or an object store, each file once, new files as they appear",
    options: with_s3_options![
        OptionSpec::optional(
            "path",
            OptionType::Text,
            "the directory to read: file:///abs/dir (or /abs/dir) or s3://bucket/prefix; files in subdirectories are read too",
        )
        .required(),
        OptionSpec::optional(
            "format",
            OptionType::OneOf(&["parquet", "csv", "json"]),
            "the file format (json: one JSON object per line); only files ending in .parquet, .csv, or .json/.jsonl/.ndjson are read",
        )
        .with_default("parquet"),
        OptionSpec::optional(
            "watch",
            OptionType::OneOf(&["true", "false"]),
            "true keeps listing the directory for new files; false ends after the files present at start",
        )
        .with_default("true"),
        OptionSpec::optional(
            "poll_interval_ms",
            OptionType::Count,
            "how often the directory is listed for new files",
        )
        .with_default("1000"),
        OptionSpec::optional(
            "csv.header",
            OptionType::OneOf(&["true", "false"]),
            "true: the first line names the columns (matched by name); false: columns by position",
        )
        .with_default("true"),
        OptionSpec::optional(
            "csv.delimiter",
            OptionType::Text,
            "the field delimiter, one character",
        )
        .with_default(","),
        OptionSpec::optional(
            "compression",
            OptionType::OneOf(&["auto", "none", "gzip"]),
            "csv and json: auto reads files ending in .gz (like data.csv.gz) as gzip; gzip reads every file as gzip",
        )
        .with_default("auto"),
        OptionSpec::optional(
            "on_error",
            OptionType::OneOf(&["fail", "skip"]),
            "csv and json: a line that does not parse as the declared columns fails the source (fail) or is dropped and counted in rows_skipped (skip)",
        )
        .with_default("fail"),
    ],
    capabilities: Capabilities {
        read_modes: &[],
        append_only: true,
        replayable: true,
        bounded: false,
        delivery: &[Delivery::ExactlyOnce],
        skips: false,
    },
};

pub(crate) struct FilesSourceConnector;

impl Connector for FilesSourceConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn check_source(&self, options: &BTreeMap<String, String>) -> Result<(), ConnectorError> {
        normalized_url(options.get("path").map_or("", String::as_str))?;
        Settings::parse(options).map(drop)
    }

    fn open_source(&self, open: SourceOpen<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(FilesSource::new(&open)?))
    }

    /// Declared columns as declared; none declared, those of the first
    /// file under the path ([`super::discover`]).
    fn describe_source<'a>(
        &'a self,
        declared: Option<&'a SchemaRef>,
        options: &'a BTreeMap<String, String>,
    ) -> futures::future::BoxFuture<'a, Result<SchemaRef, ConnectorError>> {
        Box::pin(async move {
            if declared.is_some() {
                return self.source_columns(declared, options);
            }
            self.check_source(options)?;
            let location = Location::parse(options)?;
            super::discover::discover(&location, &Settings::parse(options)?).await
        })
    }
}

/// The options that say how files are read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub(super) format: Format,
    watch: bool,
    poll: Duration,
    pub(super) csv_header: bool,
    pub(super) csv_delimiter: u8,
    compression: Compression,
    skip_bad: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Compression {
    /// By the `.gz` suffix.
    Auto,
    None,
    Gzip,
}

impl Settings {
    pub(super) fn parse(options: &BTreeMap<String, String>) -> Result<Self, ConnectorError> {
        let opts = Options::new(&SPEC, options);
        let delimiter = opts.get("csv.delimiter").unwrap_or(",");
        let csv_delimiter = match delimiter.as_bytes() {
            [b] => *b,
            _ => {
                return Err(bad_option(
                    "csv.delimiter",
                    format!("\"{delimiter}\" is not one single-byte character"),
                ));
            }
        };
        let format = Format::parse(opts.get("format"));
        let compression = match opts.get("compression") {
            Some("gzip") => Compression::Gzip,
            Some("none") => Compression::None,
            _ => Compression::Auto,
        };
        let skip_bad = opts.get("on_error") == Some("skip");
        if format == Format::Parquet && (compression == Compression::Gzip || skip_bad) {
            return Err(bad_option(
                if skip_bad { "on_error" } else { "compression" },
                "is for csv and json files; Parquet compresses its own pages and its values are typed",
            ));
        }
        Ok(Self {
            format,
            compression,
            skip_bad,
            watch: opts.get("watch") != Some("false"),
            poll: Duration::from_millis(opts.u64("poll_interval_ms")?.unwrap_or(1000).max(10)),
            csv_header: opts.get("csv.header") != Some("false"),
            csv_delimiter,
        })
    }

    /// Whether a file of this name is one to read.
    pub(super) fn wants(&self, relative: &str) -> bool {
        let hidden = relative
            .split('/')
            .any(|part| part.starts_with('_') || part.starts_with('.'));
        let extensions: &[&str] = match self.format {
            Format::Parquet => &[".parquet"],
            Format::Csv => &[".csv"],
            Format::Json => &[".json", ".jsonl", ".ndjson"],
        };
        let name = match self.format {
            Format::Parquet => relative,
            _ => relative.strip_suffix(".gz").unwrap_or(relative),
        };
        !hidden && extensions.iter().any(|e| name.ends_with(e))
    }

    /// Whether the file `name` is read through gzip.
    pub(super) fn gzipped(&self, name: &str) -> bool {
        match self.compression {
            Compression::Gzip => true,
            Compression::None => false,
            Compression::Auto => self.format != Format::Parquet && name.ends_with(".gz"),
        }
    }
}

/// How far one file has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileOffset {
    rows: u64,
    done: bool,
}

impl FileOffset {
    fn parse(text: &str) -> Result<Self, ConnectorError> {
        let (done, rows) = match text.strip_prefix("done:") {
            Some(rows) => (true, rows),
            None => (false, text),
        };
        let rows = rows.parse().map_err(|_| ConnectorError::BadPosition {
            connector: NAME.into(),
            value: text.to_string(),
            message: "expected a row count, or done: and a row count".into(),
        })?;
        Ok(Self { rows, done })
    }

    fn text(self) -> String {
        if self.done {
            format!("done:{}", self.rows)
        } else {
            self.rows.to_string()
        }
    }
}

fn parse_offsets(offsets: &Offsets) -> Result<HashMap<String, FileOffset>, ConnectorError> {
    offsets
        .iter()
        .filter(|(file, _)| file.as_str() != SPLIT)
        .map(|(file, text)| Ok((file.clone(), FileOffset::parse(text)?)))
        .collect()
}

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// The file being read.
struct OpenFile {
    name: String,
    batches: Batches,
    /// Lines dropped by `on_error = 'skip'`, counted when the file ends.
    skipped: u64,
    /// Rows read from the file so far (skipped ones included).
    rows: u64,
    /// Rows still to skip (read before a restart).
    skip: u64,
    /// A replay's end within this file.
    limit: Option<u64>,
}

pub(crate) struct FilesSource {
    name: String,
    location: Location,
    settings: Settings,
    schema: SchemaRef,
    /// Every file seen and how far it was read.
    offsets: HashMap<String, FileOffset>,
    /// A replay reads these files up to these offsets, then ends.
    until: Option<HashMap<String, FileOffset>>,
    queue: VecDeque<String>,
    current: Option<OpenFile>,
    listed_at: Option<Instant>,
    ended: bool,
}

impl FilesSource {
    fn new(open: &SourceOpen<'_>) -> Result<Self, ConnectorError> {
        let until = open.until.map(parse_offsets).transpose()?;
        let mut queue = VecDeque::new();
        if let Some(until) = &until {
            let mut files: Vec<&String> = until.keys().collect();
            files.sort();
            queue.extend(files.into_iter().cloned());
        }
        Ok(Self {
            name: open.name.to_string(),
            location: Location::parse(open.options)?,
            settings: Settings::parse(open.options)?,
            schema: open.schema.clone(),
            offsets: parse_offsets(open.offsets)?,
            until,
            queue,
            current: None,
            listed_at: None,
            ended: false,
        })
    }

    /// Lists the root and queues, in name order, every file to read that
    /// is not done. Called only with nothing open and nothing queued.
    async fn list(&mut self) -> Result<(), ConnectorError> {
        debug_assert!(self.queue.is_empty() && self.current.is_none());
        self.listed_at = Some(Instant::now());
        let prefix = format!("{}/", self.location.root);
        let listed: Vec<object_store::ObjectMeta> = self
            .location
            .store
            .list(Some(&self.location.root))
            .try_collect()
            .await
            .map_err(|e| transient(&format!("listing {}", self.location.url), e))?;
        let mut names: Vec<String> = listed
            .iter()
            .map(|meta| {
                let full = meta.location.as_ref();
                full.strip_prefix(&prefix).unwrap_or(full).to_string()
            })
            .filter(|name| self.settings.wants(name))
            .filter(|name| !self.offsets.get(name).is_some_and(|o| o.done))
            .collect();
        names.sort();
        self.queue.extend(names);
        Ok(())
    }

    /// Opens the next queued file, skipping the rows read before.
    async fn open_next(&mut self) -> Result<bool, ConnectorError> {
        let Some(name) = self.queue.pop_front() else {
            return Ok(false);
        };
        let location = self.location.path(&name);
        let bytes = match self.location.store.get(&location).await {
            Ok(got) => got
                .bytes()
                .await
                .map_err(|e| transient(&format!("reading {location}"), e))?,
            Err(object_store::Error::NotFound { .. }) if self.until.is_none() => {
                tracing::warn!(source = %self.name, file = %name, "a listed file was gone before it was read");
                return Ok(true);
            }
            Err(e) => return Err(transient(&format!("reading {location}"), e)),
        };
        let bytes = if self.settings.gzipped(&name) {
            gunzip(&bytes).map_err(|e| rejected(&name, 0, e))?
        } else {
            bytes
        };
        let (batches, skipped) = if self.settings.skip_bad {
            decode_skipping(&self.settings, bytes, &self.schema)
                .map_err(|e| rejected(&name, 0, e))?
        } else {
            (
                decode(&self.settings, bytes, &self.schema).map_err(|e| rejected(&name, 0, e))?,
                0,
            )
        };
        let skip = self.offsets.get(&name).map_or(0, |o| o.rows);
        let limit = self
            .until
            .as_ref()
            .and_then(|u| u.get(&name))
            .filter(|o| !o.done)
            .map(|o| o.rows);
        self.current = Some(OpenFile {
            name,
            batches,
            skipped,
            rows: 0,
            skip: if self.until.is_some() { 0 } else { skip },
            limit,
        });
        Ok(true)
    }

    /// The next batch of the open file, or the end-of-file mark; None
    /// when it is finished (it is then closed).
    fn read_current(&mut self) -> Result<Option<SourceEvent>, ConnectorError> {
        let Some(file) = self.current.as_mut() else {
            return Ok(None);
        };
        loop {
            if file.limit.is_some_and(|l| file.rows >= l) {
                self.current = None;
                return Ok(None);
            }
            let Some(batch) = file.batches.next() else {
                let skipped = file.skipped;
                let offset = FileOffset {
                    rows: file.rows,
                    done: true,
                };
                let name = file.name.clone();
                self.current = None;
                if self.until.is_some() {
                    return Ok(None);
                }
                self.offsets.insert(name.clone(), offset);
                let empty = RecordBatch::new_empty(self.schema.clone());
                // Counted once per file, with the mark that ends it.
                let mut event = batch_event(name, empty, offset);
                if let SourceEvent::Batch(b) = &mut event {
                    b.skipped = skipped;
                }
                return Ok(Some(event));
            };
            let mut batch = batch.map_err(|e| rejected(&file.name, file.rows, e))?;
            let start = file.rows;
            file.rows += batch.num_rows() as u64;
            if file.skip >= batch.num_rows() as u64 {
                file.skip -= batch.num_rows() as u64;
                continue;
            }
            let skip = std::mem::take(&mut file.skip) as usize;
            if let Some(limit) = file.limit {
                let keep = (limit.saturating_sub(start) as usize).min(batch.num_rows());
                file.rows = start + keep as u64;
                batch = batch.slice(0, keep);
            }
            let batch = batch.slice(skip, batch.num_rows() - skip);
            let batch = conform(batch, &self.schema).map_err(|e| rejected(&file.name, start, e))?;
            let offset = FileOffset {
                rows: file.rows,
                done: false,
            };
            self.offsets.insert(file.name.clone(), offset);
            return Ok(Some(batch_event(file.name.clone(), batch, offset)));
        }
    }
}

fn batch_event(file: String, rows: RecordBatch, offset: FileOffset) -> SourceEvent {
    SourceEvent::Batch(SourceBatch {
        split: file,
        changes: ChangeBatch::inserts(rows),
        offset: offset.text(),
        max_event_time: None,
        skipped: 0,
    })
}

#[async_trait]
impl Source for FilesSource {
    fn splits(&self) -> Vec<String> {
        vec![SPLIT.to_string()]
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
        loop {
            if let Some(event) = self.read_current()? {
                return Ok(event);
            }
            if self.open_next().await? {
                continue;
            }
            // Nothing open and nothing queued.
            let first = self.listed_at.is_none();
            if self.until.is_none() && (first || self.settings.watch) {
                let due = self.listed_at.map_or(Duration::ZERO, |at| {
                    self.settings.poll.saturating_sub(at.elapsed())
                });
                if !due.is_zero() {
                    tokio::time::sleep(due.min(Duration::from_secs(1))).await;
                    return Ok(SourceEvent::Idle);
                }
                self.list().await?;
                if !self.queue.is_empty() {
                    continue;
                }
                if self.settings.watch {
                    return Ok(SourceEvent::Idle);
                }
            }
            if self.ended {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(SourceEvent::Idle);
            }
            self.ended = true;
            return Ok(SourceEvent::SplitEnd {
                split: SPLIT.to_string(),
            });
        }
    }
}

/// Batches of one file's rows, in the declared columns' types (CSV and
/// JSON are parsed as those types; Parquet columns are read by name and
/// cast in [`conform`]).
fn decode(settings: &Settings, bytes: Bytes, schema: &SchemaRef) -> Result<Batches, ArrowError> {
    match settings.format {
        Format::Json => {
            let reader = arrow::json::ReaderBuilder::new(schema.clone())
                .with_batch_size(BATCH_ROWS)
                .build(std::io::Cursor::new(bytes))?;
            Ok(Box::new(reader))
        }
        Format::Csv => {
            let mut builder = arrow::csv::ReaderBuilder::new(schema.clone())
                .with_header(settings.csv_header)
                .with_delimiter(settings.csv_delimiter)
                .with_batch_size(BATCH_ROWS);
            if settings.csv_header {
                // Columns are matched by the header's names: parse every
                // column of the file, the declared ones as declared, and
                // keep only those.
                let format = arrow::csv::reader::Format::default()
                    .with_header(true)
                    .with_delimiter(settings.csv_delimiter);
                let (header, _) = format.infer_schema(std::io::Cursor::new(&bytes), Some(0))?;
                let mut projection = Vec::new();
                let fields: Vec<Field> = header
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| match schema.field_with_name(f.name()) {
                        Ok(declared) => {
                            projection.push(i);
                            declared.clone()
                        }
                        Err(_) => Field::new(f.name(), DataType::Utf8, true),
                    })
                    .collect();
                if let Some(missing) = schema
                    .fields()
                    .iter()
                    .find(|f| header.field_with_name(f.name()).is_err())
                {
                    return Err(ArrowError::CsvError(format!(
                        "the header has no column \"{}\" (it has: {})",
                        missing.name(),
                        header
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                builder = arrow::csv::ReaderBuilder::new(Arc::new(Schema::new(fields)))
                    .with_header(true)
                    .with_delimiter(settings.csv_delimiter)
                    .with_batch_size(BATCH_ROWS)
                    .with_projection(projection);
            }
            Ok(Box::new(builder.build(std::io::Cursor::new(bytes))?))
        }
        Format::Parquet => {
            let parquet = |e: parquet::errors::ParquetError| ArrowError::ExternalError(Box::new(e));
            let builder =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .map_err(parquet)?;
            let file = builder.schema().clone();
            let indices = schema
                .fields()
                .iter()
                .map(|f| {
                    file.index_of(f.name()).map_err(|_| {
                        ArrowError::SchemaError(format!(
                            "the file has no column \"{}\" (it has: {})",
                            f.name(),
                            file.fields()
                                .iter()
                                .map(|f| f.name().as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), indices);
            let reader = builder
                .with_projection(mask)
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(parquet)?;
            Ok(Box::new(reader))
        }
    }
}

/// A gzip file's bytes, decompressed.
pub(super) fn gunzip(bytes: &[u8]) -> Result<Bytes, ArrowError> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
    Ok(Bytes::from(out))
}

/// [`decode`] under `on_error = 'skip'` (CSV and JSON lines): the whole
/// file when it parses; else line by line, dropping the lines that do not
/// (a quoted CSV field with a line break in it counts as bad lines then).
/// Returns the batches and how many lines were dropped.
fn decode_skipping(
    settings: &Settings,
    bytes: Bytes,
    schema: &SchemaRef,
) -> Result<(Batches, u64), ArrowError> {
    let whole = decode(settings, bytes.clone(), schema)
        .and_then(|batches| batches.collect::<Result<Vec<_>, _>>());
    if let Ok(batches) = whole {
        return Ok((Box::new(batches.into_iter().map(Ok)), 0));
    }
    let mut lines = bytes.split(|b| *b == b'\n');
    let header = match settings.format {
        Format::Csv if settings.csv_header => lines.next().map(|h| h.to_vec()),
        _ => None,
    };
    let mut kept = Vec::new();
    let mut skipped = 0;
    for line in lines {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let mut text = header.clone().map_or_else(Vec::new, |mut h| {
            h.push(b'\n');
            h
        });
        text.extend_from_slice(line);
        text.push(b'\n');
        let row = decode(settings, Bytes::from(text), schema)
            .and_then(|batches| batches.collect::<Result<Vec<_>, _>>())
            .and_then(|batches| {
                let batches: Vec<RecordBatch> = batches
                    .into_iter()
                    .map(|b| conform(b, schema))
                    .collect::<Result<_, _>>()?;
                arrow::compute::concat_batches(schema, &batches)
            });
        match row {
            Ok(row) if row.num_rows() == 1 => kept.push(row),
            _ => skipped += 1,
        }
    }
    let mut batches = Vec::new();
    for chunk in kept.chunks(BATCH_ROWS) {
        batches.push(arrow::compute::concat_batches(schema, chunk));
    }
    Ok((Box::new(batches.into_iter()), skipped))
}

/// `batch` with the declared columns, in their order, cast to their types.
fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let column = batch.column_by_name(field.name()).ok_or_else(|| {
                ArrowError::SchemaError(format!("no column \"{}\"", field.name()))
            })?;
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                arrow::compute::cast(column, field.data_type()).map_err(|e| {
                    ArrowError::CastError(format!(
                        "column \"{}\" ({} in the file) as {}: {e}",
                        field.name(),
                        column.data_type(),
                        field.data_type()
                    ))
                })
            }
        })
        .collect::<Result<Vec<_>, ArrowError>>()?;
    RecordBatch::try_new(schema.clone(), columns)
}

fn transient(what: &str, e: object_store::Error) -> ConnectorError {
    ConnectorError::Transient {
        connector: NAME.into(),
        message: format!("{what}: {e}"),
    }
}

/// A file that cannot be read as declared: the source fails, naming it.
fn rejected(file: &str, row: u64, e: ArrowError) -> ConnectorError {
    ConnectorError::Rejected {
        connector: NAME.into(),
        message: format!("file {file}, after row {row}: {e}"),
    }
}

#[cfg(test)]
mod tests;
