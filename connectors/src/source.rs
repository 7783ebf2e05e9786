//! The [`Source`] trait: how rows from outside enter the runtime.

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use weir_common::ChangeBatch;

use crate::ConnectorError;

/// A position per split: split name -> the connector's offset text (for
/// nexmark the event count, for Kafka a partition offset, for a table
/// log an LSN). Stored in each seal, so a restart resumes exactly there.
pub type Offsets = BTreeMap<String, String>;

/// The option the server adds to a source's options with the number of
/// retention gaps accepted for it (`ALTER DESTINATION ... ACCEPT GAP`):
/// one more than the source's offsets record lets it go on past a gap.
/// Not the user's (no spec declares it).
pub const GAPS_ACCEPTED: &str = "weir.gaps_accepted";

/// One batch a source produced.
#[derive(Debug, Clone)]
pub struct SourceBatch {
    /// The split the rows came from.
    pub split: String,
    /// The rows, in the source's declared columns (weights +1 for an
    /// append-only source, -old/+new for one that carries changes).
    pub changes: ChangeBatch,
    /// The split's offset after these rows: reopening at it yields the
    /// rows that follow, never these again.
    pub offset: String,
    /// The largest event time among the rows (microseconds since the Unix
    /// epoch), when the source knows one; watermarks are derived from it.
    pub max_event_time: Option<i64>,
    /// Input records before `offset` that `on_error = 'skip'` dropped
    /// (counted in `weir_catalog.sources.rows_skipped`).
    pub skipped: u64,
}

/// What [`Source::next`] returns.
#[derive(Debug, Clone)]
pub enum SourceEvent {
    Batch(SourceBatch),
    /// The batches of one upstream transaction (a table-log commit, a
    /// replicated transaction), of one or several splits: an epoch
    /// includes all of them or none. `position` is where the source as a
    /// whole stands after it (a log sequence number); a transaction with
    /// no batches for this source still moves it.
    Transaction {
        batches: Vec<SourceBatch>,
        position: String,
    },
    /// This split has no more input; its offset is final.
    SplitEnd {
        split: String,
    },
    /// This split cannot go on (one table of a source that covers several
    /// broke: truncated, dropped, changed); its offset, sealed with the
    /// batches before this event, is final and records the failure. The
    /// other splits go on. `gap` when changes were lost upstream (the
    /// failure can be accepted with `ALTER DESTINATION ... ACCEPT GAP`).
    SplitFailed {
        split: String,
        gap: bool,
        message: String,
    },
    /// Nothing arrived within the poll interval; call again.
    Idle,
}

/// A running source: one reader of one source object, however many
/// projections and sinks read it.
///
/// Invariants the runtime relies on:
/// - it is opened at the offsets of the latest seal (empty: the beginning)
///   and yields, per split, rows in offset order with no gap and no repeat;
/// - [`Self::next`] is only called by the runtime's reader task, one call at
///   a time; it may wait (for I/O or a rate limit) but should return
///   [`SourceEvent::Idle`] within about a second so the task can stop;
/// - [`Self::on_sealed`] is called with offsets the source itself produced,
///   after the seal that holds them is durable, in epoch order.
#[async_trait]
pub trait Source: Send {
    /// The splits this source reads, fixed while it runs.
    fn splits(&self) -> Vec<String>;

    /// The next batch, the end of a split, or idle.
    async fn next(&mut self) -> Result<SourceEvent, ConnectorError>;

    /// Every row up to `offsets` is sealed in `epoch`: upstream may forget
    /// it (a broker commit, a replication slot's confirmed position).
    /// Must be idempotent. Sources with nothing to acknowledge keep the default.
    async fn on_sealed(&mut self, _epoch: u64, _offsets: &Offsets) -> Result<(), ConnectorError> {
        Ok(())
    }
}

const _: Option<&dyn Source> = None;

/// What opening a source needs.
#[derive(Debug, Clone)]
pub struct SourceOpen<'a> {
    /// The source object's name, for errors and logs.
    pub name: &'a str,
    /// The declared columns (already checked against the connector).
    pub schema: SchemaRef,
    /// The validated options, as stored.
    pub options: &'a BTreeMap<String, String>,
    /// Where to resume per split (from the latest seal); empty to start.
    pub offsets: &'a Offsets,
    /// For a replay (a replayable source only): where each split must end.
    /// The source yields exactly the rows before these offsets, then ends
    /// the split; a split not named here ends at once.
    pub until: Option<&'a Offsets>,
    /// For a source that covers several upstream tables (a shared
    /// postgres-cdc source): the tables read now, each its own split and
    /// relation. Empty for every other source (`schema` is then the
    /// source's one relation).
    pub tables: &'a [SourceTable],
}

/// One upstream table of a source that covers several.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceTable {
    /// The split its rows and offset travel under: the id of the Weir
    /// relation it feeds, in decimal, so a table dropped and added again
    /// (a new relation) never resumes at stale progress.
    pub split: String,
    /// The upstream table, as `name` or `schema.name`.
    pub upstream: String,
    /// The relation's columns (already checked against the upstream).
    pub schema: SchemaRef,
    /// Retention gaps accepted for this table (`ALTER DESTINATION ...
    /// ACCEPT GAP` on a destination that reads it).
    pub gaps_accepted: u32,
}
