//! A source that covers several upstream tables (a shared postgres-cdc
//! source): one reader, one split per table, and each split's rows fed to
//! the table's own relation.
//!
//! - A table's split is its relation id in decimal ([`TableToRead::split`]),
//!   so a table dropped and added again (a new relation) never resumes at
//!   stale progress. The source's own splits (`stream`, its position in the
//!   upstream log) feed no relation.
//! - Offsets are received, covered and sealed under the source
//!   (`source:<id>`), every split together: an epoch and its seal take a
//!   transaction's tables and the stream position after it at once.
//! - Status: the source's entry is the reader's (every offset, every row);
//!   each table's entry has its own split's offset and rows, and follows
//!   the reader's state unless the table failed alone
//!   ([`Streams::split_failed`]). That failure holds until the reader
//!   starts again, when the connector reports it again if it still holds
//!   (it seals its failed tables).

use std::collections::HashSet;

use arrow::datatypes::SchemaRef;
use weir_common::ObjectId;
use weir_connectors::{Offsets, SourceBatch, SourceTable};

use super::streams::{ReaderId, SourceStatus, SourceToRead, StreamStatus, Streams, TableToRead};

impl TableToRead {
    /// The split its rows and offset travel under.
    pub fn split(&self) -> String {
        self.id.0.to_string()
    }
}

impl SourceToRead {
    /// The relation the rows of `split` feed: the table whose split it is,
    /// the source itself when it covers no tables, none for any other
    /// split (the `stream` split, or a table no longer read).
    pub fn relation_of(&self, split: &str) -> Option<ObjectId> {
        if self.tables.is_empty() {
            return Some(self.id);
        }
        self.table_of(split).map(|t| t.id)
    }

    fn table_of(&self, split: &str) -> Option<&TableToRead> {
        let id = ObjectId(split.parse().ok()?);
        self.tables.iter().find(|t| t.id == id)
    }

    /// Every relation its rows feed, with its columns.
    pub(super) fn relations(&self) -> Vec<(ObjectId, &SchemaRef)> {
        if self.tables.is_empty() {
            return vec![(self.id, &self.schema)];
        }
        self.tables.iter().map(|t| (t.id, &t.schema)).collect()
    }

    /// The tables as the connector is told them.
    pub(super) fn source_tables(&self) -> Vec<SourceTable> {
        self.tables
            .iter()
            .map(|t| SourceTable {
                split: t.split(),
                upstream: t.upstream.clone(),
                schema: t.schema.clone(),
                gaps_accepted: t.gaps_accepted,
            })
            .collect()
    }
}

/// Adds `batch` to what a status entry counts.
pub(super) fn count(entry: &mut SourceStatus, batch: &SourceBatch) {
    entry.rows_in += batch.changes.num_rows() as u64;
    entry.rows_skipped += batch.skipped;
    entry
        .offsets
        .insert(batch.split.clone(), batch.offset.clone());
    if let Some(t) = batch.max_event_time {
        entry.max_event_time = Some(entry.max_event_time.map_or(t, |m| m.max(t)));
    }
}

/// Applies a state of the whole reader to the entries of `tables` that
/// did not fail alone (a table's failure outlasts the reader's retries).
pub(super) fn tables_follow(
    status: &mut StreamStatus,
    tables: &[TableToRead],
    failed: &HashSet<ObjectId>,
    mut update: impl FnMut(&mut SourceStatus),
) {
    for table in tables.iter().filter(|t| !failed.contains(&t.id)) {
        if let Some(entry) = status.sources.get_mut(&table.id) {
            update(entry);
        }
    }
}

impl Streams {
    /// A reader of `source` starts (or, `paused`, would): its entry and
    /// its tables' show `state`, with `offsets` when given. Failures of the
    /// tables of the run before are forgotten, as are those of tables no
    /// longer read: the connector reports again at open the failures it
    /// sealed, and a table read under a new id is a new relation.
    pub(super) fn reader_starts(
        &mut self,
        source: &SourceToRead,
        state: &'static str,
        offsets: Option<&Offsets>,
    ) {
        self.forget_table_failures(source);
        let mut status = self.status.write();
        let entry = status.sources.entry(source.id).or_default();
        entry.status = state;
        entry.error = None;
        if let Some(offsets) = offsets {
            entry.offsets = offsets.clone();
        }
        for table in &source.tables {
            let entry = status.sources.entry(table.id).or_default();
            entry.status = state;
            entry.error = None;
            if let Some(offsets) = offsets {
                let split = table.split();
                entry.offsets = offsets
                    .get(&split)
                    .map(|o| Offsets::from([(split, o.clone())]))
                    .unwrap_or_default();
            }
        }
    }

    /// No reader of `source` runs any more (`paused` or nothing reads it):
    /// the entries it has show `state`; its tables' failures are
    /// forgotten, as at a start.
    pub(super) fn reader_stops(&mut self, source: &SourceToRead, state: &'static str) {
        self.forget_table_failures(source);
        let mut status = self.status.write();
        if let Some(entry) = status.sources.get_mut(&source.id) {
            entry.status = state;
        }
        for table in &source.tables {
            if let Some(entry) = status.sources.get_mut(&table.id) {
                entry.status = state;
                entry.error = None;
            }
        }
    }

    /// Before `source` is read anew (it replaces the definition read so
    /// far, if any).
    fn forget_table_failures(&mut self, source: &SourceToRead) {
        let before = self.defs.get(&source.id).map(|d| d.tables.as_slice());
        for table in before.unwrap_or_default().iter().chain(&source.tables) {
            self.failed_tables.remove(&table.id);
        }
    }

    /// Counts `batch` in the status of its source and of the table it
    /// feeds, if any; a retrying reader that delivers is running again.
    pub(super) fn count_received(&self, reader: ReaderId, batch: &SourceBatch) {
        let Some(def) = self.defs.get(&reader.source) else {
            return;
        };
        let mut status = self.status.write();
        let entry = status.sources.entry(reader.source).or_default();
        let recovered = entry.status == "retrying";
        if recovered {
            entry.status = "running";
            entry.error = None;
        }
        count(entry, batch);
        if recovered {
            tables_follow(&mut status, &def.tables, &self.failed_tables, |e| {
                e.status = "running";
                e.error = None;
            });
        }
        if let Some(table) = def.table_of(&batch.split) {
            count(status.sources.entry(table.id).or_default(), batch);
        }
    }

    /// One split of `reader`'s source cannot go on: its table is `gap`
    /// (changes were lost upstream) or `failed`, with `error`, and stays so
    /// whatever the reader does until it starts again; the other tables
    /// go on. A split that is not a table's (the source's own, or any
    /// split of a source that covers no tables) fails the source's entry.
    pub fn split_failed(&mut self, reader: ReaderId, split: &str, gap: bool, error: String) {
        if !self.is_current(reader) {
            return;
        }
        let state = if gap { "gap" } else { "failed" };
        let table = self
            .defs
            .get(&reader.source)
            .and_then(|d| d.table_of(split))
            .map(|t| t.id);
        let mut status = self.status.write();
        let entry = match table {
            Some(table) => {
                self.failed_tables.insert(table);
                status.sources.entry(table).or_default()
            }
            None => status.sources.entry(reader.source).or_default(),
        };
        entry.status = state;
        entry.error = Some(error);
    }

    /// `id`, dropped, was a table of a source being read: its progress
    /// leaves the source's offsets, and the reader goes on without it.
    pub(super) fn table_dropped(&mut self, id: ObjectId) {
        let Some(mut source) = self
            .defs
            .values()
            .find(|d| d.tables.iter().any(|t| t.id == id))
            .cloned()
        else {
            return;
        };
        let split = id.0.to_string();
        for offsets in [&mut self.received, &mut self.covered] {
            if let Some(offsets) = offsets.get_mut(&source.id) {
                offsets.remove(&split);
            }
        }
        if let Some(entry) = self.status.write().sources.get_mut(&source.id) {
            entry.offsets.remove(&split);
        }
        self.failed_tables.remove(&id);
        source.tables.retain(|t| t.id != id);
        if self.readers.contains_key(&source.id) {
            self.restart_source(source);
        } else {
            self.defs.insert(source.id, source);
        }
    }
}
