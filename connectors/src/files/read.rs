//! One file's rows as they stream from the store, never the whole file in
//! memory: a reader holds one block of about [`BATCH_ROWS`] records and
//! one chunk of the object (or, for Parquet, one row group's columns),
//! whatever the file's size.
//!
//! CSV and JSON lines are cut into whole records as bytes arrive (a line;
//! for CSV a line break outside a quoted field, so a quoted field may hold
//! line breaks: [`RecordEnds`]) and decoded a block at a time, gzip inflated on the way.
//! A block that does not decode is decoded again record by record, to name
//! the record at fault or, with `on_error = 'skip'`, to drop just the
//! records that do not parse. Parquet is read through the store's range
//! reads, a row group at a time, its columns by name.
//!
//! Rows are counted as kept (dropped records are not rows), which is what
//! a file's offset in the seal counts: [`FileReader::open`] skips that many
//! again after a restart and stops at a replay's end.

use std::io::Write;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::{
    AsyncFileReader, MetadataSuffixFetch, ParquetRecordBatchStream,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use super::source::Settings;
use super::{Format, Location};

/// Rows per batch handed to the runtime, and records per decoded block.
pub(super) const BATCH_ROWS: usize = 8192;

/// Why a file could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// Reading the object failed (worth retrying); `NotFound` when it went.
    Store(object_store::Error),
    /// The bytes are not the declared rows; `row` rows were kept before.
    Decode { row: u64, error: ArrowError },
}

/// The rows of one file, from the offset a restart resumes at.
pub(super) struct FileReader {
    rows: Rows,
    schema: SchemaRef,
    /// Rows still to drop before the first one returned.
    skip: u64,
    /// Rows past which nothing is returned (a replay's end).
    limit: Option<u64>,
    /// Rows counted so far: the ones dropped by `skip` included.
    counted: u64,
}

enum Rows {
    Text(Box<TextRows>),
    Parquet(ParquetRecordBatchStream<StoreFile>),
}

impl FileReader {
    /// Opens `name` under `location`, to yield its rows after the first
    /// `skip` and, with a `limit`, none past that many.
    pub(super) async fn open(
        location: &Location,
        name: &str,
        settings: &Settings,
        schema: &SchemaRef,
        skip: u64,
        limit: Option<u64>,
    ) -> Result<Self, ReadError> {
        let path = location.path(name);
        let (rows, skip, counted) = match settings.format {
            Format::Parquet => {
                let stream = open_parquet(location, &path, schema, skip, limit).await?;
                // The reader drops the first `skip` rows itself.
                (Rows::Parquet(stream), 0, skip)
            }
            Format::Csv | Format::Json => {
                let input = Input::open(location, name, settings.gzipped(name)).await?;
                let text = TextRows::new(input, settings, schema);
                (Rows::Text(Box::new(text)), skip, 0)
            }
        };
        Ok(Self {
            rows,
            schema: schema.clone(),
            skip,
            limit,
            counted,
        })
    }

    /// The next rows, in the declared columns; None at the file's end.
    pub(super) async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        loop {
            if self.limit.is_some_and(|limit| self.counted >= limit) {
                return Ok(None);
            }
            let batch = match &mut self.rows {
                Rows::Text(text) => text.next().await?,
                Rows::Parquet(stream) => match stream.next().await.transpose() {
                    Ok(batch) => batch
                        .map(|b| conform(b, &self.schema))
                        .transpose()
                        .map_err(|error| ReadError::Decode {
                            row: self.counted,
                            error,
                        })?,
                    Err(e) => return Err(parquet_error(self.counted, e)),
                },
            };
            let Some(batch) = batch else {
                return Ok(None);
            };
            let start = self.counted;
            let rows = batch.num_rows() as u64;
            let from = self.skip.min(rows);
            self.skip -= from;
            let end = self
                .limit
                .map_or(rows, |limit| rows.min(limit.saturating_sub(start)));
            self.counted = start + end.max(from);
            if end > from {
                return Ok(Some(batch.slice(from as usize, (end - from) as usize)));
            }
        }
    }

    /// Rows counted so far, the ones a restart skipped included.
    pub(super) fn rows(&self) -> u64 {
        self.counted
    }

    /// Records dropped by `on_error = 'skip'` so far.
    pub(super) fn dropped(&self) -> u64 {
        match &self.rows {
            Rows::Text(text) => text.dropped,
            Rows::Parquet(_) => 0,
        }
    }
}

/// A Parquet file's declared columns, by name, from row `skip` on.
async fn open_parquet(
    location: &Location,
    path: &Path,
    schema: &SchemaRef,
    skip: u64,
    limit: Option<u64>,
) -> Result<ParquetRecordBatchStream<StoreFile>, ReadError> {
    let reader = StoreFile {
        store: location.store.clone(),
        path: path.clone(),
    };
    let builder = ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(|e| parquet_error(0, e))?;
    let file = builder.schema().clone();
    let indices = schema
        .fields()
        .iter()
        .map(|f| {
            file.index_of(f.name()).map_err(|_| ReadError::Decode {
                row: 0,
                error: ArrowError::SchemaError(format!(
                    "the file has no column \"{}\" (it has: {})",
                    f.name(),
                    names(&file)
                )),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), indices);
    let mut builder = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .with_offset(skip as usize);
    if let Some(limit) = limit {
        builder = builder.with_limit(limit.saturating_sub(skip) as usize);
    }
    builder.build().map_err(|e| parquet_error(0, e))
}

/// The columns of a Parquet file, read from its footer alone.
pub(super) async fn parquet_schema(location: &Location, name: &str) -> Result<Schema, ReadError> {
    let reader = StoreFile {
        store: location.store.clone(),
        path: location.path(name),
    };
    let builder = ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(|e| parquet_error(0, e))?;
    Ok(builder.schema().as_ref().clone())
}

/// The first `lines` lines of a CSV or JSON file (fewer if it has fewer),
/// inflated if it is gzip: what column discovery looks at.
pub(super) async fn first_lines(
    location: &Location,
    name: &str,
    settings: &Settings,
    lines: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut text = Vec::new();
    if lines == 0 {
        return Ok(text);
    }
    let mut input = Input::open(location, name, settings.gzipped(name)).await?;
    let mut seen = 0;
    while seen < lines && !input.ended {
        input.fill(0).await?;
        let unread = input.unread();
        let take = memchr::memchr_iter(b'\n', unread)
            .nth(lines - seen - 1)
            .map_or(unread.len(), |end| end + 1);
        seen += memchr::memchr_iter(b'\n', &unread[..take]).count();
        text.extend_from_slice(&unread[..take]);
        input.taken += take;
    }
    Ok(text)
}

/// A Parquet file in an object store, read by ranges: its footer, then
/// the column chunks of each row group as the reader reaches it.
pub(super) struct StoreFile {
    store: Arc<dyn ObjectStore>,
    path: Path,
}

fn store_error(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for StoreFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .get_range(&self.path, range)
                .await
                .map_err(store_error)
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(store_error)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_via_suffix_and_finish(self)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

impl MetadataSuffixFetch for &mut StoreFile {
    fn fetch_suffix(&mut self, suffix: usize) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        let options = GetOptions {
            range: Some(GetRange::Suffix(suffix as u64)),
            ..Default::default()
        };
        async move {
            let got = self
                .store
                .get_opts(&self.path, options)
                .await
                .map_err(store_error)?;
            got.bytes().await.map_err(store_error)
        }
        .boxed()
    }
}

/// Bytes asked of the store at a time: few enough requests (S3 charges
/// per request; a local read is one blocking-pool hop each), little memory.
const CHUNK_BYTES: u64 = 4 << 20;

/// An object's bytes as they arrive, inflated if they are gzip: ranges
/// of [`CHUNK_BYTES`] read one after the other.
struct Input {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    /// The next byte to ask for, and how many to ask for at a time.
    at: u64,
    chunk: u64,
    inflate: Option<flate2::write::MultiGzDecoder<Vec<u8>>>,
    /// Bytes read; those before `taken` are used up.
    pending: Vec<u8>,
    taken: usize,
    ended: bool,
}

impl Input {
    async fn open(location: &Location, name: &str, gzip: bool) -> Result<Self, ReadError> {
        let path = location.path(name);
        let size = location
            .store
            .head(&path)
            .await
            .map_err(ReadError::Store)?
            .size;
        Ok(Self {
            store: location.store.clone(),
            path,
            size,
            at: 0,
            chunk: CHUNK_BYTES,
            inflate: gzip.then(|| flate2::write::MultiGzDecoder::new(Vec::new())),
            pending: Vec::new(),
            taken: 0,
            ended: false,
        })
    }

    /// The bytes not used up yet.
    fn unread(&self) -> &[u8] {
        &self.pending[self.taken..]
    }

    /// Appends the next range to the unread bytes, or marks the end.
    /// Returns how many used-up bytes were dropped from the front (by
    /// which positions into `pending` move). `row` is for naming where a
    /// broken gzip stream broke.
    async fn fill(&mut self, row: u64) -> Result<usize, ReadError> {
        let broken = |e: std::io::Error| ReadError::Decode {
            row,
            error: ArrowError::ExternalError(Box::new(e)),
        };
        let dropped = self.taken;
        self.pending.drain(..self.taken);
        self.taken = 0;
        if self.at >= self.size {
            if let Some(gzip) = &mut self.inflate {
                // Also where a truncated file shows: its checksum is missing.
                gzip.try_finish().map_err(broken)?;
                self.pending.append(gzip.get_mut());
            }
            self.ended = true;
            return Ok(dropped);
        }
        let end = (self.at + self.chunk).min(self.size);
        let chunk = self
            .store
            .get_range(&self.path, self.at..end)
            .await
            .map_err(ReadError::Store)?;
        self.at = end;
        match &mut self.inflate {
            Some(gzip) => {
                gzip.write_all(&chunk).map_err(broken)?;
                self.pending.append(gzip.get_mut());
            }
            None => self.pending.extend_from_slice(&chunk),
        }
        Ok(dropped)
    }
}

/// How a CSV block's fields become the declared columns: the header's
/// columns (declared ones typed, the others text) and which to keep.
struct CsvColumns {
    schema: SchemaRef,
    keep: Option<Vec<usize>>,
}

/// The rows of a CSV or JSON-lines file.
struct TextRows {
    input: Input,
    format: Format,
    delimiter: u8,
    skip_bad: bool,
    schema: SchemaRef,
    /// CSV: None until the header (if the file has one) is read.
    csv: Option<CsvColumns>,
    /// Finds record ends; `scanned` is where it stopped in
    /// `input.pending`.
    cutter: RecordEnds,
    scanned: usize,
    /// The end of the last whole record found in `input.pending`, and how
    /// many whole records are unread before it.
    cut: usize,
    records: usize,
    /// Rows returned so far, for naming where a fault is.
    kept: u64,
    /// Records dropped by `on_error = 'skip'`.
    dropped: u64,
}

impl TextRows {
    fn new(input: Input, settings: &Settings, schema: &SchemaRef) -> Self {
        let csv = (settings.format == Format::Csv && !settings.csv_header).then(|| CsvColumns {
            schema: schema.clone(),
            keep: None,
        });
        Self {
            input,
            format: settings.format,
            delimiter: settings.csv_delimiter,
            skip_bad: settings.skip_bad,
            schema: schema.clone(),
            csv,
            cutter: RecordEnds::new(settings.format, settings.csv_delimiter),
            scanned: 0,
            cut: 0,
            records: 0,
            kept: 0,
            dropped: 0,
        }
    }

    fn wants_header(&self) -> bool {
        self.format == Format::Csv && self.csv.is_none()
    }

    /// The next block's rows; None at the end of the file.
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        loop {
            let want = if self.wants_header() { 1 } else { BATCH_ROWS };
            self.scan(want);
            if self.records < want && !self.input.ended {
                let moved = self.input.fill(self.kept).await?;
                self.scanned -= moved;
                self.cut -= moved;
                continue;
            }
            if self.records < want && self.cut < self.input.pending.len() {
                // The last record, without a line break after it.
                self.cut = self.input.pending.len();
                self.scanned = self.cut;
                self.records += 1;
            }
            if self.records == 0 {
                return Ok(None);
            }
            // The block is decoded in place; `pending` is put back after.
            let pending = std::mem::take(&mut self.input.pending);
            let block = &pending[self.input.taken..self.cut];
            let decoded = if self.wants_header() {
                self.header(block).map(|columns| {
                    self.csv = Some(columns);
                    None
                })
            } else {
                self.decode_block(block).map(Some)
            };
            self.input.pending = pending;
            self.input.taken = self.cut;
            self.records = 0;
            if let Some(batch) = decoded? {
                if batch.num_rows() > 0 {
                    self.kept += batch.num_rows() as u64;
                    return Ok(Some(batch));
                }
            }
        }
    }

    /// Finds record ends past `scanned` until `want` records are whole
    /// (or the bytes run out).
    fn scan(&mut self, want: usize) {
        let bytes = &self.input.pending;
        while self.records < want {
            match self.cutter.next_end(bytes, &mut self.scanned, self.cut) {
                Some(end) => {
                    self.records += 1;
                    self.cut = end;
                }
                None => break,
            }
        }
    }

    /// The columns the header line names, declared ones typed.
    fn header(&self, line: &[u8]) -> Result<CsvColumns, ReadError> {
        let fault = |error| ReadError::Decode { row: 0, error };
        let (header, _) = arrow::csv::reader::Format::default()
            .with_header(true)
            .with_delimiter(self.delimiter)
            .infer_schema(std::io::Cursor::new(line), Some(0))
            .map_err(fault)?;
        if let Some(missing) = self
            .schema
            .fields()
            .iter()
            .find(|f| header.field_with_name(f.name()).is_err())
        {
            return Err(fault(ArrowError::CsvError(format!(
                "the header has no column \"{}\" (it has: {})",
                missing.name(),
                names(&header)
            ))));
        }
        let mut keep = Vec::new();
        let fields: Vec<Field> = header
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match self.schema.field_with_name(f.name()) {
                Ok(declared) => {
                    keep.push(i);
                    declared.clone()
                }
                Err(_) => Field::new(f.name(), DataType::Utf8, true),
            })
            .collect();
        Ok(CsvColumns {
            schema: Arc::new(Schema::new(fields)),
            keep: Some(keep),
        })
    }

    /// A block's rows; a block that does not decode whole is decoded a
    /// record at a time, to name the first bad one or drop the bad ones.
    fn decode_block(&mut self, block: &[u8]) -> Result<RecordBatch, ReadError> {
        if let Ok(batch) = self.decode(block) {
            return Ok(batch);
        }
        let mut rows = Vec::new();
        let mut kept = 0;
        for record in records(block, self.cutter) {
            if record.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match self.decode(record) {
                Ok(row) => {
                    kept += row.num_rows() as u64;
                    rows.push(row);
                }
                Err(_) if self.skip_bad => self.dropped += 1,
                Err(error) => {
                    return Err(ReadError::Decode {
                        row: self.kept + kept,
                        error,
                    });
                }
            }
        }
        arrow::compute::concat_batches(&self.schema, &rows).map_err(|error| ReadError::Decode {
            row: self.kept,
            error,
        })
    }

    /// Whole records as the declared columns.
    fn decode(&self, text: &[u8]) -> Result<RecordBatch, ArrowError> {
        let cursor = std::io::Cursor::new(text);
        let csv = self.csv.as_ref().filter(|_| self.format == Format::Csv);
        let batches: Vec<RecordBatch> = match csv {
            None => arrow::json::ReaderBuilder::new(self.schema.clone())
                .with_batch_size(BATCH_ROWS)
                .build(cursor)?
                .collect::<Result<_, _>>()?,
            Some(columns) => {
                let mut builder = arrow::csv::ReaderBuilder::new(columns.schema.clone())
                    .with_header(false)
                    .with_delimiter(self.delimiter)
                    .with_batch_size(BATCH_ROWS);
                if let Some(keep) = &columns.keep {
                    builder = builder.with_projection(keep.clone());
                }
                builder.build_buffered(cursor)?.collect::<Result<_, _>>()?
            }
        };
        let mut batches = batches
            .into_iter()
            .map(|b| conform(b, &self.schema))
            .collect::<Result<Vec<_>, _>>()?;
        if batches.len() == 1 {
            return Ok(batches.remove(0));
        }
        arrow::compute::concat_batches(&self.schema, &batches)
    }
}

/// Finds where records end: at a line break, for CSV only outside a
/// quoted field. As the CSV parser reads it, a field is quoted only if its
/// first byte is `"`, and `""` inside one is a quote; a `"` elsewhere is
/// an ordinary byte (so a stray quote in an unquoted field does not
/// swallow the lines after it). Jumps between line breaks and quotes with
/// `memchr`.
#[derive(Debug, Clone, Copy)]
struct RecordEnds {
    csv: bool,
    delimiter: u8,
    /// Inside a quoted field.
    quoted: bool,
}

impl RecordEnds {
    fn new(format: Format, delimiter: u8) -> Self {
        Self {
            csv: format == Format::Csv,
            delimiter,
            quoted: false,
        }
    }

    /// The end (just past its line break) of the record that began at
    /// `record_start`, scanning `bytes` from `*at`; None when the bytes
    /// run out first, with `*at` where to go on once more arrive.
    fn next_end(&mut self, bytes: &[u8], at: &mut usize, record_start: usize) -> Option<usize> {
        if !self.csv {
            return match memchr::memchr(b'\n', &bytes[*at..]) {
                Some(i) => {
                    *at += i + 1;
                    Some(*at)
                }
                None => {
                    *at = bytes.len();
                    None
                }
            };
        }
        loop {
            if self.quoted {
                let Some(i) = memchr::memchr(b'"', &bytes[*at..]) else {
                    *at = bytes.len();
                    return None;
                };
                let quote = *at + i;
                match bytes.get(quote + 1) {
                    // Closing or doubled: the next byte says which.
                    None => {
                        *at = quote;
                        return None;
                    }
                    Some(b'"') => *at = quote + 2,
                    Some(_) => {
                        self.quoted = false;
                        *at = quote + 1;
                    }
                }
                continue;
            }
            let Some(i) = memchr::memchr2(b'\n', b'"', &bytes[*at..]) else {
                *at = bytes.len();
                return None;
            };
            let found = *at + i;
            *at = found + 1;
            if bytes[found] == b'\n' {
                return Some(found + 1);
            }
            self.quoted = found == record_start || bytes[found - 1] == self.delimiter;
        }
    }
}

/// The records of a block of whole records, each with its line break.
fn records(block: &[u8], cutter: RecordEnds) -> impl Iterator<Item = &[u8]> {
    let mut cutter = RecordEnds {
        quoted: false,
        ..cutter
    };
    let mut start = 0;
    let mut at = 0;
    std::iter::from_fn(move || {
        if start >= block.len() {
            return None;
        }
        let end = cutter
            .next_end(block, &mut at, start)
            .unwrap_or(block.len());
        let record = &block[start..end];
        start = end;
        at = at.max(end);
        Some(record)
    })
}

/// `batch` with the declared columns, in their order, cast to their types.
pub(super) fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
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

/// A Parquet reader's error: the store's own errors stay retryable.
fn parquet_error(row: u64, e: ParquetError) -> ReadError {
    match e {
        ParquetError::External(inner) => match inner.downcast::<object_store::Error>() {
            Ok(store) => ReadError::Store(*store),
            Err(other) => ReadError::Decode {
                row,
                error: ArrowError::ExternalError(other),
            },
        },
        other => ReadError::Decode {
            row,
            error: ArrowError::ExternalError(Box::new(other)),
        },
    }
}

/// A schema's column names, for messages.
fn names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
pub(super) mod tests;
