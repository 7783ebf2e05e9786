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
//! A file is read as it streams from the store ([`super::read`]), never
//! whole. CSV and JSON-lines files may be gzip-compressed (`compression`:
//! by a `.gz` suffix, or always). A record that does not parse fails the
//! source naming the file and row, or with `on_error = 'skip'` is dropped
//! and counted; offsets count the rows kept, which a restart decodes again
//! the same way.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use async_trait::async_trait;
use futures::TryStreamExt;
use weir_common::ChangeBatch;

use super::read::{FileReader, ReadError};
use super::{Format, Location, NAME, bad_option, normalized_url, with_s3_options};
use crate::spec::{
    Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType, Options,
};
use crate::{Connector, ConnectorError, Offsets, Source, SourceBatch, SourceEvent, SourceOpen};

/// The one split name the runtime is told about; batches name their file.
const SPLIT: &str = "files";

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
    pub(super) skip_bad: bool,
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

/// The file being read.
struct OpenFile {
    name: String,
    reader: FileReader,
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

    /// Opens the next queued file, to resume after the rows read before
    /// (or, replaying, to stop at the replay's end).
    async fn open_next(&mut self) -> Result<bool, ConnectorError> {
        let Some(name) = self.queue.pop_front() else {
            return Ok(false);
        };
        let (skip, limit) = match &self.until {
            Some(until) => (0, until.get(&name).filter(|o| !o.done).map(|o| o.rows)),
            None => (self.offsets.get(&name).map_or(0, |o| o.rows), None),
        };
        let opened = FileReader::open(
            &self.location,
            &name,
            &self.settings,
            &self.schema,
            skip,
            limit,
        )
        .await;
        let reader = match opened {
            Ok(reader) => reader,
            Err(ReadError::Store(object_store::Error::NotFound { .. })) if self.until.is_none() => {
                tracing::warn!(source = %self.name, file = %name, "a listed file was gone before it was read");
                return Ok(true);
            }
            Err(e) => return Err(self.read_error(&name, e)),
        };
        self.current = Some(OpenFile { name, reader });
        Ok(true)
    }

    /// The next batch of the open file, or the end-of-file mark; None
    /// when it is finished (it is then closed).
    async fn read_current(&mut self) -> Result<Option<SourceEvent>, ConnectorError> {
        let Some(file) = self.current.as_mut() else {
            return Ok(None);
        };
        let read = file.reader.next().await;
        let rows = file.reader.rows();
        match read {
            Ok(Some(batch)) => {
                let offset = FileOffset { rows, done: false };
                let name = file.name.clone();
                self.offsets.insert(name.clone(), offset);
                Ok(Some(batch_event(name, batch, offset)))
            }
            Ok(None) => {
                let skipped = file.reader.dropped();
                let name = file.name.clone();
                self.current = None;
                if self.until.is_some() {
                    return Ok(None);
                }
                let offset = FileOffset { rows, done: true };
                self.offsets.insert(name.clone(), offset);
                let empty = RecordBatch::new_empty(self.schema.clone());
                // Counted once per file, with the mark that ends it.
                let mut event = batch_event(name, empty, offset);
                if let SourceEvent::Batch(b) = &mut event {
                    b.skipped = skipped;
                }
                Ok(Some(event))
            }
            Err(e) => {
                let name = file.name.clone();
                // Reopened at its sealed offset after a retry.
                self.current = None;
                self.queue.push_front(name.clone());
                Err(self.read_error(&name, e))
            }
        }
    }

    fn read_error(&self, file: &str, e: ReadError) -> ConnectorError {
        match e {
            ReadError::Store(e) => transient(&format!("reading {}", self.location.path(file)), e),
            ReadError::Decode { row, error } => rejected(file, row, error),
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
            if let Some(event) = self.read_current().await? {
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
