//! Connectors: where data enters Weir (sources) and where it leaves (sinks).
//!
//! - [`spec`]: what a connector declares before it runs: its options (name,
//!   type, default, required, secret, help) and capabilities (read modes,
//!   append-only, replayable, bounded, delivery). CREATE SOURCE/SINK
//!   validates against it, so a bad option fails at CREATE, not later.
//! - [`Source`] ([`source`]): splits with offsets, batches tagged with the
//!   offset after them, the end of a split, acknowledgement after a seal.
//! - [`Sink`] ([`sink`]): write per epoch, `pre_commit` at the barrier,
//!   idempotent `commit` after the seal, idempotent `abort`; [`recovery`]:
//!   the `on_error` and restart options every sink takes; [`grouping`]:
//!   `group_size` and `group_max_wait` (a commit per group of epochs).
//! - [`Connector`] and [`registry`]: every connector compiled in, each a
//!   module behind its Cargo feature: `nexmark`, `datagen`, `files`,
//!   `kafka`, `postgres-cdc` and `postgres` (sources), `blackhole`, `log`/`stdout`, `postgres`, `files`
//!   and `kafka` (sinks; `postgres` writes exactly once through a stage
//!   table and a fenced progress row, `files` through staged files renamed
//!   after the seal, `kafka` at least once).
//! - [`testing`] (feature `testing`): a throwaway Kafka-compatible broker
//!   (tansu) for tests.
//! - `changelog`: changes as the rows a sink writes out (weights repeated,
//!   a changelog's op and epoch columns).
//!
//! The runtime in `weir-engine` opens sources at the offsets of the latest
//! seal and sinks with the latest seal's descriptor; this crate knows
//! nothing of epochs beyond the numbers it is handed, nor of SQL.

#[cfg(any(feature = "files", feature = "kafka"))]
mod changelog;
mod error;
pub mod grouping;
pub mod receipt;
pub mod recovery;
pub mod sink;
pub mod source;
pub mod spec;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(feature = "blackhole")]
mod blackhole;
#[cfg(feature = "datagen")]
mod datagen;
#[cfg(feature = "files")]
mod files;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "log")]
mod log_sink;
#[cfg(feature = "nexmark")]
mod nexmark;
#[cfg(feature = "postgres")]
mod postgres;

use arrow::datatypes::SchemaRef;

pub use error::ConnectorError;
pub use receipt::{Receipt, Tally};
pub use sink::{Sink, SinkOpen, Skips};
pub use source::{
    GAPS_ACCEPTED, Offsets, Source, SourceBatch, SourceEvent, SourceOpen, SourceTable,
};
pub use spec::{Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType};

/// One connector: its spec and how to open it.
pub trait Connector: Send + Sync {
    fn spec(&self) -> &'static ConnectorSpec;

    /// The columns a source produces under `options` (validated): what a
    /// CREATE SOURCE without columns gets, and what declared columns are
    /// checked against.
    fn produced_columns(
        &self,
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<SchemaRef>, ConnectorError> {
        let _ = options;
        Ok(None)
    }

    /// The columns of a CREATE SOURCE under `options` (validated): the
    /// declared ones when they fit what the connector produces, else
    /// the produced ones. Errors name the column that does not fit.
    fn source_columns(
        &self,
        declared: Option<&SchemaRef>,
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<SchemaRef, ConnectorError> {
        self.check_source(options)?;
        let name = self.spec().name;
        match self.produced_columns(options)? {
            Some(produced) => spec::fit_columns(name, declared, &produced),
            None => declared.cloned().ok_or_else(|| ConnectorError::BadOption {
                connector: name.to_string(),
                option: "columns".into(),
                message: format!(
                    "a {name} source needs its columns declared: CREATE SOURCE name (column type, ...) WITH (connector = '{name}', ...)"
                ),
            }),
        }
    }

    /// The columns of a CREATE SOURCE, checked against the world outside
    /// when the connector can look (an upstream table's columns, key and
    /// settings). Defaults to [`Self::source_columns`].
    fn describe_source<'a>(
        &'a self,
        declared: Option<&'a SchemaRef>,
        options: &'a std::collections::BTreeMap<String, String>,
    ) -> futures::future::BoxFuture<'a, Result<SchemaRef, ConnectorError>> {
        Box::pin(async move { self.source_columns(declared, options) })
    }

    /// Whether a source with these options covers several upstream tables,
    /// each read as its own relation (`CREATE SOURCE t FROM name TABLE
    /// 'schema.table'`), rather than being a relation itself: a
    /// postgres-cdc source without a `table`.
    fn covers_tables(&self, options: &std::collections::BTreeMap<String, String>) -> bool {
        let _ = options;
        false
    }

    /// The columns of one table of a source that covers several, checked
    /// against the upstream as [`Self::describe_source`] checks a source's
    /// own table. `options` are the covering source's (secrets resolved).
    fn describe_source_table<'a>(
        &'a self,
        declared: Option<&'a SchemaRef>,
        options: &'a std::collections::BTreeMap<String, String>,
        table: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<SchemaRef, ConnectorError>> {
        let _ = (declared, options);
        Box::pin(async move {
            Err(ConnectorError::Rejected {
                connector: self.spec().name.to_string(),
                message: format!(
                    "a {} source does not cover several tables, so it has no table {table}",
                    self.spec().name
                ),
            })
        })
    }

    /// Releases what a dropped source held outside (a replication slot),
    /// after its reader stopped. Idempotent.
    fn release_source<'a>(
        &'a self,
        options: &'a std::collections::BTreeMap<String, String>,
    ) -> futures::future::BoxFuture<'a, Result<(), ConnectorError>> {
        let _ = options;
        Box::pin(async { Ok(()) })
    }

    /// Checks what the options of a CREATE SOURCE say beyond their types
    /// (a path's form, a delimiter's length), without reaching outside.
    fn check_source(
        &self,
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), ConnectorError> {
        let _ = options;
        Ok(())
    }

    /// Checks a CREATE SINK against the world outside (a target table
    /// and its columns), after its options were validated. `schema` is the
    /// sink's columns; `input_append_only` whether its input only inserts.
    fn check_sink<'a>(
        &'a self,
        schema: &'a SchemaRef,
        options: &'a std::collections::BTreeMap<String, String>,
        input_append_only: bool,
    ) -> futures::future::BoxFuture<'a, Result<(), ConnectorError>> {
        let _ = (schema, options, input_append_only);
        Box::pin(async { Ok(()) })
    }

    /// What a sink with these (validated) options writes to, said so that
    /// two sinks name the same target with the same text (for a database
    /// table: its server, database and table), or None when sinks never
    /// share one. CREATE SINK refuses a target another sink owns.
    fn sink_target(&self, options: &std::collections::BTreeMap<String, String>) -> Option<String> {
        let _ = options;
        None
    }

    fn open_source(&self, open: SourceOpen<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Err(self.wrong_kind(open.name, "source"))
    }

    fn open_sink(&self, open: SinkOpen<'_>) -> Result<Box<dyn Sink>, ConnectorError> {
        Err(self.wrong_kind(open.name, "sink"))
    }

    #[doc(hidden)]
    fn wrong_kind(&self, _object: &str, wanted: &'static str) -> ConnectorError {
        ConnectorError::WrongKind {
            name: self.spec().name.to_string(),
            wanted,
            kind: self.spec().kind.as_str(),
        }
    }
}

const _: Option<&dyn Connector> = None;

/// Every connector compiled in, sources first, each by name.
pub fn registry() -> Vec<&'static dyn Connector> {
    let mut all: Vec<&'static dyn Connector> = Vec::new();
    #[cfg(feature = "nexmark")]
    all.push(&nexmark::NexmarkConnector);
    #[cfg(feature = "datagen")]
    all.push(&datagen::DatagenConnector);
    #[cfg(feature = "files")]
    all.push(&files::FilesSourceConnector);
    #[cfg(feature = "kafka")]
    all.push(&kafka::KafkaSourceConnector);
    #[cfg(feature = "postgres")]
    all.push(&postgres::cdc::PostgresCdcConnector);
    #[cfg(feature = "postgres")]
    all.push(&postgres::table_source::PostgresTableConnector);
    #[cfg(feature = "blackhole")]
    all.push(&blackhole::BlackholeConnector);
    #[cfg(feature = "log")]
    {
        all.push(&log_sink::LOG);
        all.push(&log_sink::STDOUT);
    }
    #[cfg(feature = "postgres")]
    all.push(&postgres::PostgresConnector);
    #[cfg(feature = "files")]
    all.push(&files::FilesConnector);
    #[cfg(feature = "kafka")]
    all.push(&kafka::KafkaSinkConnector);
    all
}

/// The connector called `name`, of `kind`.
pub fn connector(
    name: &str,
    kind: ConnectorKind,
) -> Result<&'static dyn Connector, ConnectorError> {
    let all = registry();
    // A name may stand for a source and a sink (`files`): the kind asked
    // for wins, and only a name without it is the wrong kind.
    let found = all
        .iter()
        .find(|c| c.spec().name == name && c.spec().kind == kind)
        .or_else(|| all.iter().find(|c| c.spec().name == name))
        .copied();
    match found {
        Some(c) if c.spec().kind == kind => Ok(c),
        Some(c) => Err(ConnectorError::WrongKind {
            name: name.to_string(),
            wanted: kind.as_str(),
            kind: c.spec().kind.as_str(),
        }),
        None => Err(ConnectorError::UnknownConnector {
            name: name.to_string(),
            known: all
                .iter()
                .filter(|c| c.spec().kind == kind)
                .map(|c| c.spec().name)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Milliseconds since the Unix epoch now (the clock CREATE fixes defaults with).
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The one split of a generator (nexmark, datagen): its offset is the
/// count of rows emitted; it ends at a limit, paced by a rate.
#[derive(Debug)]
pub(crate) struct GeneratorSplit {
    offset: u64,
    limit: Option<u64>,
    ended: bool,
    rate: RateLimit,
}

/// The split name of a generator's only split.
pub(crate) const GENERATOR_SPLIT: &str = "0";

impl GeneratorSplit {
    /// Resumes at `open.offsets`, ending at `limit` rows or at
    /// `open.until`, whichever is first.
    pub(crate) fn open(
        connector: &str,
        open: &SourceOpen<'_>,
        limit: Option<u64>,
        per_second: Option<u64>,
    ) -> Result<Self, ConnectorError> {
        let parse = |text: &String| {
            text.parse::<u64>()
                .map_err(|e| ConnectorError::BadPosition {
                    connector: connector.into(),
                    value: text.clone(),
                    message: e.to_string(),
                })
        };
        let offset = open
            .offsets
            .get(GENERATOR_SPLIT)
            .map(parse)
            .transpose()?
            .unwrap_or(0);
        let until = match open.until {
            Some(until) => Some(
                until
                    .get(GENERATOR_SPLIT)
                    .map(parse)
                    .transpose()?
                    .unwrap_or(0),
            ),
            None => None,
        };
        let limit = match (limit, until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Self {
            offset,
            limit,
            ended: false,
            rate: RateLimit::new(per_second),
        })
    }

    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// How many rows the next batch holds (at most `max`), after waiting
    /// for the rate; or, when none are left, the event to return instead.
    pub(crate) async fn next_rows(&mut self, max: usize) -> Result<usize, SourceEvent> {
        let left = self
            .limit
            .map_or(u64::MAX, |l| l.saturating_sub(self.offset));
        if left == 0 {
            if self.ended {
                // Ended already: nothing will come; do not spin the reader.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                return Err(SourceEvent::Idle);
            }
            self.ended = true;
            return Err(SourceEvent::SplitEnd {
                split: GENERATOR_SPLIT.to_string(),
            });
        }
        let rows = self.rate.batch_rows(max).min(left as usize);
        self.rate.wait(rows).await;
        Ok(rows)
    }

    /// The batch of the `rows` made after [`Self::next_rows`].
    pub(crate) fn batch(
        &mut self,
        rows: arrow::array::RecordBatch,
        max_event_time: Option<i64>,
    ) -> SourceEvent {
        self.offset += rows.num_rows() as u64;
        SourceEvent::Batch(SourceBatch {
            split: GENERATOR_SPLIT.to_string(),
            changes: weir_common::ChangeBatch::inserts(rows),
            offset: self.offset.to_string(),
            max_event_time,
            skipped: 0,
        })
    }
}

/// Paces a producer to `per_second` rows of wall clock (none: unpaced).
#[derive(Debug)]
pub(crate) struct RateLimit {
    per_second: Option<u64>,
    started: Option<std::time::Instant>,
    produced: u64,
}

impl RateLimit {
    pub(crate) fn new(per_second: Option<u64>) -> Self {
        Self {
            per_second: per_second.filter(|r| *r > 0),
            started: None,
            produced: 0,
        }
    }

    /// Rows to produce in the next batch, at most `max`.
    pub(crate) fn batch_rows(&self, max: usize) -> usize {
        match self.per_second {
            // About ten batches a second, so a slow rate still flows.
            Some(r) => (r as usize / 10).clamp(1, max),
            None => max,
        }
    }

    /// Waits until `rows` more rows are due.
    pub(crate) async fn wait(&mut self, rows: usize) {
        let Some(rate) = self.per_second else {
            return;
        };
        let started = *self.started.get_or_insert_with(std::time::Instant::now);
        self.produced += rows as u64;
        let due = std::time::Duration::from_secs_f64(self.produced as f64 / rate as f64);
        let elapsed = started.elapsed();
        if due > elapsed {
            tokio::time::sleep(due - elapsed).await;
        }
    }
}
