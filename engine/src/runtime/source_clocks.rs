//! Watermarks of the sources being read: one [`SourceClock`] per relation
//! with a `WATERMARK FOR` clause, fed every batch the loop receives,
//! advanced when an epoch closes, and sealed with the source's offsets.
//!
//! - An epoch takes the watermark as of the rows it holds: the clocks
//!   advance right before it closes ([`Streams::advance_watermarks`]), so
//!   an operator's late rows are those behind the watermark of the epoch
//!   before the one they arrive in.
//! - The value is recorded among the source's received offsets, under the
//!   runtime's own split `weir.watermark.<relation>` ([`watermark_split`];
//!   connectors never see it), so a seal holds it with the offsets it goes
//!   with and a restart resumes there, never behind. A watermark that
//!   moved without rows (a split idle past `idle_timeout`, the source
//!   complete) changes the offsets, so an epoch closes for it
//!   ([`Streams::offsets_moved`]).
//! - A source that read everything (every split ended) gets the final
//!   watermark: every window closes.
//! - The splits a clock takes the minimum over are the ones the connector
//!   declares (Kafka partitions, a generator's one split). Batches under
//!   other names (the `files` source names each file, read one after the
//!   other as one stream) count as one split: a file read to its end must
//!   not hold the watermark back until it goes idle.

use std::time::Instant;

use arrow::array::BooleanArray;
use arrow::compute::filter_record_batch;
use arrow::datatypes::DataType;
use weir_common::ObjectId;
use weir_connectors::SourceBatch;

use super::streams::{SourceToRead, Streams};
use crate::Coordinator;
use crate::watermark::{FINAL, NONE_YET, SourceClock, Watermarks, to_micros};

/// The split that batches of splits a connector does not declare count
/// under ([`Streams::clock_read`]).
const UNDECLARED: &str = "*";

/// The clock of one relation a source feeds.
pub(super) struct RelationClock {
    /// The source whose offsets seal it (a table's own id: its clock is
    /// sealed under it, and it has no reader).
    source: ObjectId,
    /// A table's clock, fed by the table log.
    table: bool,
    /// The splits its connector declares (when it opened).
    declared: std::collections::HashSet<String>,
    clock: SourceClock,
    column: usize,
    data_type: DataType,
}

/// The split, among a source's offsets, that holds the watermark of
/// `relation` (the source itself, or one of its tables).
pub fn watermark_split(relation: ObjectId) -> String {
    format!("weir.watermark.{}", relation.0)
}

impl Streams {
    /// Starts a clock for each relation of `source` that declares a
    /// watermark and has none yet, at the watermark its offsets hold; one
    /// that has a clock takes its tunable options as they are now.
    pub(super) fn start_clocks(&mut self, source: &SourceToRead) {
        let relations: Vec<_> = if source.tables.is_empty() {
            vec![(source.id, source.schema.clone(), source.watermark.clone())]
        } else {
            source
                .tables
                .iter()
                .map(|t| (t.id, t.schema.clone(), t.watermark.clone()))
                .collect()
        };
        for (relation, schema, spec) in relations {
            let Some(spec) = spec else { continue };
            if let Some(clock) = self.clocks.get_mut(&relation) {
                clock.clock.retune(&spec);
                continue;
            }
            let sealed = self
                .received
                .get(&source.id)
                .and_then(|o| o.get(&watermark_split(relation)))
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(NONE_YET);
            let column = spec.column;
            let data_type = schema.field(column).data_type().clone();
            self.clocks.insert(
                relation,
                RelationClock {
                    source: source.id,
                    table: false,
                    declared: Default::default(),
                    clock: SourceClock::new(spec, schema, sealed),
                    column,
                    data_type,
                },
            );
        }
    }

    /// Starts a clock for each append-only table of `tables` that has
    /// none yet, at the watermark sealed for it.
    pub(super) fn start_table_clocks(&mut self, tables: &[super::TableWatermark]) {
        for table in tables {
            if self.clocks.contains_key(&table.table) {
                continue;
            }
            let sealed = self
                .received
                .get(&table.table)
                .and_then(|o| o.get(&watermark_split(table.table)))
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(NONE_YET);
            let column = table.spec.column;
            let data_type = table.schema.field(column).data_type().clone();
            self.clocks.insert(
                table.table,
                RelationClock {
                    source: table.table,
                    table: true,
                    declared: Default::default(),
                    clock: SourceClock::new(table.spec.clone(), table.schema.clone(), sealed),
                    column,
                    data_type,
                },
            );
        }
    }

    /// The splits `source`'s connector declares, as it opened.
    pub(super) fn clock_splits(&mut self, source: ObjectId, splits: Vec<String>) {
        let splits: std::collections::HashSet<String> = splits.into_iter().collect();
        for clock in self.clocks.values_mut().filter(|c| c.source == source) {
            clock.declared = splits.clone();
        }
    }

    /// Rows of `batch` reached `relation`: its clock (if any) reads the
    /// inserted ones (a retraction's time is an old row's).
    pub(super) fn clock_read(&mut self, relation: ObjectId, batch: &SourceBatch) {
        let Some(clock) = self.clocks.get_mut(&relation) else {
            return;
        };
        // A table of a shared source is its own split; a split the
        // connector does not declare is part of one stream.
        let split = if relation != clock.source || clock.declared.contains(&batch.split) {
            batch.split.as_str()
        } else {
            UNDECLARED
        };
        let changes = &batch.changes;
        let weights = changes.weights();
        let read = if weights.values().iter().all(|&w| w > 0) {
            clock.clock.read(split, changes.rows())
        } else {
            let mask: BooleanArray = weights.iter().map(|w| w.map(|w| w > 0)).collect();
            filter_record_batch(changes.rows(), &mask)
                .map_err(Into::into)
                .and_then(|rows| clock.clock.read(split, &rows))
        };
        if let Err(e) = read {
            tracing::warn!(relation = %relation, error = %e, "the watermark column could not be read");
        }
    }

    /// Every split of `source` ended: its relations' watermarks are final.
    pub(super) fn clocks_finished(&mut self, source: ObjectId) {
        for clock in self.clocks.values_mut().filter(|c| c.source == source) {
            clock.clock.finish();
        }
    }

    /// A relation (or a whole source) is gone: so are its clocks.
    pub(super) fn clocks_dropped(&mut self, id: ObjectId) {
        self.clocks
            .retain(|relation, clock| *relation != id && clock.source != id);
    }

    /// Whether `source` runs ahead (watermark alignment): the rows of a
    /// relation it feeds reach more than its `max_drift` past those
    /// of a live relation of another source that some deployment reads
    /// along with it (or that one has read nothing yet). Its batches then
    /// wait until the other catches up, ends or idles out
    /// (`idle_timeout`); the slowest source never waits. Progress, not the
    /// watermark, is compared: watermarks move only when an epoch closes,
    /// and a fast source can deliver a great deal before that.
    pub(super) fn runs_ahead(&self, source: ObjectId) -> bool {
        let now = Instant::now();
        let micros = |c: &RelationClock| to_micros(c.clock.progress()?, &c.data_type);
        self.clocks
            .iter()
            .filter(|(_, c)| c.source == source)
            .filter_map(|(relation, clock)| {
                let drift = i64::try_from(clock.clock.max_drift()?.as_micros()).ok()?;
                Some((relation, micros(clock)?, drift))
            })
            .any(|(relation, mine, drift)| {
                self.relations_read
                    .values()
                    .filter(|read| read.contains(relation))
                    .flatten()
                    .filter_map(|peer| self.clocks.get(peer))
                    .filter(|peer| peer.source != source && peer.clock.live(now))
                    .any(|peer| match micros(peer) {
                        Some(theirs) => mine > theirs.saturating_add(drift),
                        None => true,
                    })
            })
    }

    /// Advances every clock to what the rows received allow now, records
    /// each value among its source's received offsets and hands it to the
    /// coordinator for the epoch about to close.
    pub fn advance_watermarks(&mut self, coordinator: &mut Coordinator) {
        let now = Instant::now();
        for (&relation, clock) in &mut self.clocks {
            if !clock.table && !self.readers.contains_key(&clock.source) {
                continue;
            }
            let value = match clock.clock.advance(now) {
                Ok(value) => value,
                Err(e) => {
                    tracing::warn!(relation = %relation, error = %e, "a watermark could not be computed");
                    continue;
                }
            };
            if value != NONE_YET {
                self.received
                    .entry(clock.source)
                    .or_default()
                    .insert(watermark_split(relation), value.to_string());
            }
            coordinator.set_watermarks(relation, Watermarks::of([(clock.column, value)]));
            let mut status = self.status.write();
            let entry = status.sources.entry(relation).or_default();
            entry.watermark = match value {
                NONE_YET => None,
                FINAL => Some(i64::MAX),
                v => to_micros(v, &clock.data_type),
            };
            entry.late_rows = clock.clock.late_rows;
        }
    }
}
