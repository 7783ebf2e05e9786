//! What the source seals: where the stream stands and how far each
//! table's snapshot got, as split offsets, and the batches that carry
//! them.
//!
//! A source that reads one table (its `table` option) keeps both in its
//! one split, the table's qualified name, as [`Progress`] (the format
//! sealed before sources covered several tables, so existing seals read
//! on). A source that covers several seals [`StreamState`] under
//! [`STREAM_SPLIT`] and a [`TableProgress`] under each table's split.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use serde::{Deserialize, Serialize};
use weir_common::ChangeBatch;

use super::super::NAME;
use super::CdcSource;
use crate::{ConnectorError, SourceBatch, SourceEvent};

/// The split a source that covers several tables seals its stream under
/// (not a number, so never a table's split).
pub(crate) const STREAM_SPLIT: &str = "stream";

/// Where the stream of the slot stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct StreamState {
    /// The slot's consistent point, where the stream began.
    pub(super) start: u64,
    /// The end of the last transaction delivered (or a keepalive's
    /// position between transactions): the stream resumes after it.
    pub(super) lsn: u64,
    /// Slot gaps accepted: the source went on past each.
    #[serde(default)]
    pub(super) gaps_accepted: u32,
}

/// How far one table's snapshot got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TableProgress {
    pub(super) segments: Vec<Segment>,
    pub(super) snapshot_done: bool,
    /// The upstream table's OID: a table of the same name with another
    /// is another table.
    #[serde(default)]
    pub(super) table_oid: Option<u32>,
    /// Gaps of this table accepted (dropped and created again upstream).
    #[serde(default)]
    pub(super) gaps_accepted: u32,
    /// Why the table stopped being read, in a source that covers several
    /// (the others went on): sealed with the changes before it, and
    /// reported again at every start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) failed: Option<TableFailure>,
}

/// A table of a source that covers several that cannot be read on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TableFailure {
    /// Changes were lost upstream (the table dropped or created again):
    /// `ALTER DESTINATION ... ACCEPT GAP` goes on past it.
    pub(super) gap: bool,
    pub(super) message: String,
}

/// A snapshot segment: rows with keys up to `upto` (and above the
/// segment before) were read from a snapshot taken at `lsn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Segment {
    /// The consistent point of the snapshot this segment was read from.
    pub(super) lsn: u64,
    /// The last key read in it, as text per key column; None while no
    /// row of it has been read.
    pub(super) upto: Option<Vec<String>>,
}

/// The one split's offset of a source that reads one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Progress {
    pub(super) start: u64,
    pub(super) segments: Vec<Segment>,
    pub(super) snapshot_done: bool,
    pub(super) lsn: u64,
    /// Gaps accepted, of the slot and of the table alike.
    #[serde(default)]
    pub(super) gaps_accepted: u32,
    /// Absent in offsets sealed before it was kept.
    #[serde(default)]
    pub(super) table_oid: Option<u32>,
}

impl Progress {
    pub(super) fn split(self) -> (StreamState, TableProgress) {
        (
            StreamState {
                start: self.start,
                lsn: self.lsn,
                gaps_accepted: self.gaps_accepted,
            },
            TableProgress {
                segments: self.segments,
                snapshot_done: self.snapshot_done,
                table_oid: self.table_oid,
                gaps_accepted: self.gaps_accepted,
                failed: None,
            },
        )
    }

    pub(super) fn join(stream: &StreamState, table: &TableProgress) -> Self {
        Self {
            start: stream.start,
            segments: table.segments.clone(),
            snapshot_done: table.snapshot_done,
            lsn: stream.lsn,
            gaps_accepted: stream.gaps_accepted.max(table.gaps_accepted),
            table_oid: table.table_oid,
        }
    }
}

pub(super) fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConnectorError> {
    serde_json::from_str(text).map_err(|e| ConnectorError::BadPosition {
        connector: NAME.into(),
        value: text.to_string(),
        message: e.to_string(),
    })
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("progress serializes")
}

/// Which tables' offsets an event carries.
pub(super) enum Carry {
    /// The tables given changes (and, covering several, the stream).
    Changed,
    /// Every table (a change of state that is not a row: a slot created,
    /// a gap accepted).
    All,
}

impl CdcSource {
    /// An event carrying `changes` (per table index) and the offsets
    /// after them, with those of tables that failed since the last event.
    /// `whole`: the batches are one upstream transaction (an epoch takes
    /// them all or none).
    pub(super) fn emit(
        &mut self,
        mut changes: Vec<(usize, ChangeBatch)>,
        carry: Carry,
        whole: bool,
    ) -> SourceEvent {
        let mut carried: Vec<usize> = std::mem::take(&mut self.unsealed).into_iter().collect();
        if matches!(carry, Carry::All) {
            carried = (0..self.tables.len()).collect();
        }
        for i in carried {
            if !changes.iter().any(|(t, _)| *t == i) {
                changes.push((i, self.tables[i].empty()));
            }
        }
        let stream = self
            .stream
            .as_ref()
            .expect("a stream state before any event");
        let mut batches: Vec<SourceBatch> = Vec::new();
        if self.single {
            let table = &self.tables[0];
            let progress = table.progress.as_ref().expect("progress before an event");
            let rows = changes
                .into_iter()
                .next()
                .map_or_else(|| table.empty(), |(_, c)| c);
            batches.push(batch(
                &table.split,
                rows,
                json(&Progress::join(stream, progress)),
            ));
        } else {
            for (i, rows) in changes {
                let table = &self.tables[i];
                let progress = table.progress.as_ref().expect("progress before an event");
                batches.push(batch(&table.split, rows, json(progress)));
            }
            let nothing = RecordBatch::new_empty(Arc::new(Schema::empty()));
            batches.push(batch(
                STREAM_SPLIT,
                ChangeBatch::inserts(nothing),
                json(stream),
            ));
        }
        if whole {
            SourceEvent::Transaction {
                batches,
                position: stream.lsn.to_string(),
            }
        } else if batches.len() == 1 {
            SourceEvent::Batch(batches.pop().expect("one batch"))
        } else {
            // Several splits' offsets moved together: seal them together.
            SourceEvent::Transaction {
                batches,
                position: stream.lsn.to_string(),
            }
        }
    }
}

fn batch(split: &str, changes: ChangeBatch, offset: String) -> SourceBatch {
    SourceBatch {
        split: split.to_string(),
        changes,
        offset,
        max_event_time: None,
        skipped: 0,
    }
}
