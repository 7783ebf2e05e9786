//! The postgres-cdc protocol: a snapshot in key order, then the stream.
//!
//! What is sealed ([`progress`]): where the stream stands (`start`, the
//! slot's consistent point, and `lsn`, the end of the last transaction
//! delivered) and, per table, how far its snapshot got:
//! - `segments`: the snapshot, read in primary-key order as one or more
//!   segments. Rows with keys up to a segment's `upto` (and above the one
//!   before) were read from a snapshot taken at the segment's `lsn`. The
//!   first segment's snapshot is the one the slot exported when it was
//!   created, so its `lsn` is `start`. A snapshot cut short by a crash or
//!   a lost connection is not read again from the beginning: a new
//!   segment continues after the last key sealed, from a fresh snapshot
//!   exported by a temporary slot (its consistent point is the segment's
//!   `lsn`). A table added to a source already streaming gets one segment
//!   from such a snapshot too.
//!
//! Every table's snapshot is read (one after the other, in one REPEATABLE
//! READ transaction) before the stream starts at `lsn`; a change committed
//! at `c` to a row whose key lies in a segment read at `lsn > c` is
//! skipped, because that segment's snapshot already holds it. Each
//! upstream transaction is delivered whole, as one
//! [`SourceEvent::Transaction`] with a batch per table it touched, so an
//! epoch never holds half of one. The slot's confirmed position advances
//! only in [`Source::on_sealed`], to the sealed `lsn`.
//!
//! A slot that is gone, or that was confirmed past the sealed position by
//! someone else, is a gap: the source fails, saying so, instead of
//! silently losing changes. So is a table dropped (and perhaps created
//! again under its name): each table's progress records its OID, checked
//! at every connection, against every relation message naming the table,
//! and every [`IDENTITY_CHECK`] while streaming (a table dropped from a
//! `FOR TABLE` publication sends nothing at all).

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use pgwire_replication::Lsn;
use tokio_postgres::Client;
use weir_common::ChangeBatch;

use super::keys::KeyOrder;
use super::pgoutput::Value;
use super::text::field_of;
use super::{NAME, Shape, Upstream, UpstreamTable, gap, rejected};
use crate::{ConnectorError, Offsets, Source, SourceEvent, SourceOpen};
use progress::{Carry, Progress, STREAM_SPLIT, Segment, StreamState, TableProgress};

/// How long `next` waits for the stream before answering Idle.
const POLL: Duration = Duration::from_millis(500);
/// How often a streaming source checks that its tables are still the
/// ones it read.
const IDENTITY_CHECK: Duration = Duration::from_secs(5);

enum Phase {
    /// Connect (again) and decide from the progress what comes next.
    Connect,
    /// Reading the snapshot inside an open REPEATABLE READ transaction.
    Snapshot(Client),
    Stream(Box<stream::Stream>),
}

/// Where the columns the source needs sit in an upstream row.
#[derive(Debug, Clone)]
pub(super) struct RowLayout {
    /// Per output column, its index in the row.
    pub(super) output: Vec<usize>,
    /// Per key column, its index in the row.
    pub(super) key: Vec<usize>,
}

/// One upstream table the source reads.
struct TableState {
    split: String,
    upstream: UpstreamTable,
    /// The relation's columns.
    schema: SchemaRef,
    /// Gaps of this table the user accepted.
    gaps_accepted: u32,
    /// What has been delivered (ahead of what is sealed).
    progress: Option<TableProgress>,
    shape: Option<Shape>,
    /// Orders keys as the snapshot query does (C collation for text).
    keys: Option<KeyOrder>,
    /// From the stream's relation message for the table.
    layout: Option<RowLayout>,
}

impl TableState {
    fn empty(&self) -> ChangeBatch {
        ChangeBatch::inserts(RecordBatch::new_empty(self.schema.clone()))
    }

    fn progress(&mut self) -> &mut TableProgress {
        self.progress
            .as_mut()
            .expect("a table's progress once the slot exists")
    }
}

pub(crate) struct CdcSource {
    name: String,
    upstream: Upstream,
    /// Reads one table (its `table` option), sealed in one split.
    single: bool,
    tables: Vec<TableState>,
    /// What has been delivered (ahead of what is sealed); None before
    /// the slot exists.
    stream: Option<StreamState>,
    /// The `lsn` of the latest seal: what the slot may confirm.
    sealed_lsn: Option<u64>,
    phase: Phase,
    /// Events to return before reading on (tables' failures, after the
    /// event that seals them).
    pending: VecDeque<SourceEvent>,
    /// Tables whose failure the next event must seal.
    unsealed: BTreeSet<usize>,
}

impl CdcSource {
    pub(crate) fn new(open: &SourceOpen<'_>, upstream: Upstream) -> Result<Self, ConnectorError> {
        let mut stream = None;
        let tables = match &upstream.table {
            Some(table) => {
                let split = format!("{}.{}", table.schema, table.table);
                let mut progress = None;
                if let Some(text) = open.offsets.get(&split) {
                    let (s, t) = progress::parse::<Progress>(text)?.split();
                    stream = Some(s);
                    progress = Some(t);
                }
                vec![TableState {
                    split,
                    upstream: table.clone(),
                    schema: open.schema.clone(),
                    gaps_accepted: upstream.gaps_accepted,
                    progress,
                    shape: None,
                    keys: None,
                    layout: None,
                }]
            }
            None => {
                if let Some(text) = open.offsets.get(STREAM_SPLIT) {
                    stream = Some(progress::parse::<StreamState>(text)?);
                }
                open.tables
                    .iter()
                    .map(|t| {
                        Ok(TableState {
                            split: t.split.clone(),
                            upstream: UpstreamTable::parse(&t.upstream)?,
                            schema: t.schema.clone(),
                            gaps_accepted: t.gaps_accepted,
                            // Progress without a stream is from a slot
                            // that was never sealed: start over.
                            progress: match (&stream, open.offsets.get(&t.split)) {
                                (Some(_), Some(text)) => Some(progress::parse(text)?),
                                _ => None,
                            },
                            shape: None,
                            keys: None,
                            layout: None,
                        })
                    })
                    .collect::<Result<_, ConnectorError>>()?
            }
        };
        let mut source = Self {
            name: open.name.to_string(),
            single: upstream.table.is_some(),
            sealed_lsn: stream.as_ref().map(|s| s.lsn),
            upstream,
            tables,
            stream,
            phase: Phase::Connect,
            pending: VecDeque::new(),
            unsealed: BTreeSet::new(),
        };
        source.accept_table_gaps();
        source.report_sealed_failures();
        Ok(source)
    }

    /// The tables read on (not failed).
    fn upstream_tables(&self) -> Vec<UpstreamTable> {
        self.tables
            .iter()
            .filter(|t| !t.failed())
            .map(|t| t.upstream.clone())
            .collect()
    }

    /// Reads the shape of each table read on; a table that no longer fits
    /// fails alone (reading one table, the source fails).
    async fn read_shapes(&mut self, client: &Client) -> Result<(), ConnectorError> {
        for i in 0..self.tables.len() {
            if self.tables[i].failed() {
                continue;
            }
            match self.read_shape(client, i).await {
                Ok(()) => {}
                Err(
                    e @ (ConnectorError::Rejected { .. }
                    | ConnectorError::Gap { .. }
                    | ConnectorError::ColumnMismatch { .. }),
                ) => self.fail_table(i, e)?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads table `i`'s shape and checks the relation's columns still
    /// fit it. Covering several tables, a table dropped upstream is a gap.
    async fn read_shape(&mut self, client: &Client, i: usize) -> Result<(), ConnectorError> {
        let read = self.tables[i].progress.as_ref().and_then(|p| p.table_oid);
        if !self.single
            && read.is_some()
            && self
                .upstream
                .table_oid(client, &self.tables[i].upstream)
                .await?
                .is_none()
        {
            let lsn = self.stream.as_ref().map_or(0, |s| s.lsn);
            return Err(self.table_replaced(i, read, None, lsn));
        }
        let t = &mut self.tables[i];
        {
            let shape = self.upstream.shape(client, &t.upstream).await?;
            for field in t.schema.fields() {
                let Some(c) = shape.column(field.name()) else {
                    return Err(rejected(format!(
                        "upstream table {} has no column \"{}\" any more; the source's columns no longer fit it (schema_evolution = fail): DROP and CREATE the source",
                        t.upstream.qualified(),
                        field.name()
                    )));
                };
                let now = field_of(&c.name, c.type_oid, c.type_modifier, true);
                if now.as_ref().map(|f| f.data_type()) != Some(field.data_type()) {
                    return Err(rejected(format!(
                        "column \"{}\" of upstream table {} is now {}, which does not fit the source's {} (schema_evolution = fail): DROP and CREATE the source",
                        c.name,
                        t.upstream.qualified(),
                        c.type_name,
                        field.data_type()
                    )));
                }
            }
            t.keys = Some(KeyOrder::new(&shape)?);
            t.shape = Some(shape);
        }
        Ok(())
    }

    /// Connects and moves to the snapshot or the stream; returns an
    /// event when there is something to seal at once.
    async fn connect(&mut self) -> Result<Option<SourceEvent>, ConnectorError> {
        let client = self.upstream.connect().await?;
        let mut accepted = false;
        self.read_shapes(&client).await?;
        let Some(stream) = self.stream.clone() else {
            return self.create_slot(client).await;
        };
        // Tables dropped and created again under their names.
        for i in 0..self.tables.len() {
            let t = &self.tables[i];
            if t.failed() {
                continue;
            }
            let oid = t.shape.as_ref().expect("shapes read").oid;
            let Some(progress) = &t.progress else {
                continue;
            };
            let recreated = progress.table_oid.is_some_and(|old| old != oid);
            if recreated && t.gaps_accepted <= progress.gaps_accepted {
                let error = self.table_replaced(i, progress.table_oid, Some(oid), stream.lsn);
                self.fail_table(i, error)?;
                continue;
            }
            if recreated {
                // Accepted: read on from the table there is now (its
                // changes before it joined the publication are part of
                // the gap).
                self.upstream
                    .ensure_publication(&client, &self.upstream_tables())
                    .await?;
                self.upstream
                    .add_to_publication(&client, &t.upstream)
                    .await?;
                tracing::warn!(source = %self.name, table = %t.upstream.qualified(), old = ?progress.table_oid, new = oid, "going on past an accepted gap with a table created again");
                let gaps = t.gaps_accepted;
                self.tables[i].progress().gaps_accepted = gaps;
                accepted = true;
            }
            self.tables[i].progress().table_oid = Some(oid);
        }
        if !self.single {
            self.upstream
                .reconcile_publication(&client, &self.upstream_tables())
                .await?;
        }
        let accepting = self.upstream.gaps_accepted > stream.gaps_accepted;
        let Some((confirmed, active)) = self.slot_state(&client).await? else {
            if accepting {
                return self.go_on_after_gap(client).await;
            }
            return Err(gap(format!(
                "replication slot {} no longer exists upstream: the changes after LSN {} are lost (a retention gap); ALTER DESTINATION ... ACCEPT GAP to go on without them, or DROP and CREATE the source to read the tables again",
                self.upstream.slot,
                Lsn::from_u64(stream.lsn)
            )));
        };
        if confirmed > stream.lsn {
            if !accepting {
                return Err(gap(format!(
                    "replication slot {} was confirmed up to {} by another consumer, past this source's sealed {}: the changes between are lost (a retention gap); ALTER DESTINATION ... ACCEPT GAP to go on without them, or DROP and CREATE the source",
                    self.upstream.slot,
                    Lsn::from_u64(confirmed),
                    Lsn::from_u64(stream.lsn)
                )));
            }
            tracing::warn!(source = %self.name, from = %Lsn::from_u64(stream.lsn), to = %Lsn::from_u64(confirmed), "going on past an accepted retention gap");
            let gaps = self.upstream.gaps_accepted;
            let stream = self.stream.as_mut().expect("checked above");
            stream.lsn = confirmed;
            stream.gaps_accepted = gaps;
            self.sealed_lsn = Some(confirmed);
            self.phase = Phase::Connect;
            return Ok(Some(self.emit(Vec::new(), Carry::All, false)));
        }
        if accepted || !self.unsealed.is_empty() {
            // The slot is fine: acceptances are sealed with the new OIDs,
            // and failures found now are sealed, before reading on.
            self.phase = Phase::Connect;
            return Ok(Some(self.emit(Vec::new(), Carry::All, false)));
        }
        if let Some(pid) = active {
            return Err(ConnectorError::Transient {
                connector: NAME.into(),
                message: format!(
                    "replication slot {} is in use by process {pid}",
                    self.upstream.slot
                ),
            });
        }
        if !self.upstream.snapshot && self.tables.iter().any(|t| t.progress.is_none()) {
            // Tables added with `snapshot = 'never'`: their changes from
            // here on.
            for t in &mut self.tables {
                if t.progress.is_none() {
                    t.progress = Some(TableProgress {
                        segments: Vec::new(),
                        snapshot_done: true,
                        table_oid: t.shape.as_ref().map(|s| s.oid),
                        gaps_accepted: t.gaps_accepted,
                        failed: None,
                    });
                }
            }
            self.phase = Phase::Connect;
            return Ok(Some(self.emit(Vec::new(), Carry::All, false)));
        }
        if self.tables.iter().any(|t| {
            t.progress
                .as_ref()
                .is_none_or(|p| !p.snapshot_done && p.failed.is_none())
        }) {
            self.resume_snapshot(client).await?;
            return Ok(None);
        }
        self.start_stream(stream.lsn).await?;
        Ok(None)
    }

    /// First start: the publication, the slot, and (unless `snapshot =
    /// 'never'`) the snapshot it exports.
    async fn create_slot(&mut self, client: Client) -> Result<Option<SourceEvent>, ConnectorError> {
        let tables = self.upstream_tables();
        if self.single {
            self.upstream.ensure_publication(&client, &tables).await?;
        } else {
            self.upstream
                .reconcile_publication(&client, &tables)
                .await?;
        }
        // Nothing was sealed, so a slot of this name is one this source
        // created before a crash (CREATE checked that none existed).
        self.upstream.drop_slot(&client).await?;
        let start = if self.upstream.snapshot {
            let (point, _exporter) = self
                .export_snapshot(&client, &self.upstream.slot, false)
                .await?;
            point
        } else {
            let row = client
                .query_one(
                    "SELECT (lsn - '0/0')::int8 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&self.upstream.slot],
                )
                .await
                .map_err(|e| super::pg_error("creating the replication slot", e))?;
            row.get::<_, i64>(0) as u64
        };
        self.stream = Some(StreamState {
            start,
            lsn: start,
            gaps_accepted: self.upstream.gaps_accepted,
        });
        for t in &mut self.tables {
            if t.failed() {
                continue;
            }
            t.progress = Some(TableProgress {
                segments: if self.upstream.snapshot {
                    vec![Segment {
                        lsn: start,
                        upto: None,
                    }]
                } else {
                    Vec::new()
                },
                snapshot_done: !self.upstream.snapshot,
                table_oid: t.shape.as_ref().map(|s| s.oid),
                gaps_accepted: t.gaps_accepted,
                failed: None,
            });
        }
        if !self.upstream.snapshot {
            // Seal the start, so a restart streams from it.
            self.phase = Phase::Connect;
            return Ok(Some(self.emit(Vec::new(), Carry::All, false)));
        }
        self.phase = Phase::Snapshot(client);
        Ok(None)
    }

    /// Continues snapshots cut short, after their last sealed keys, and
    /// starts those of tables added since, each in a new segment read
    /// from one fresh snapshot.
    async fn resume_snapshot(&mut self, client: Client) -> Result<(), ConnectorError> {
        let slot = format!("{}_resume", self.upstream.slot);
        let (point, _exporter) = self.export_snapshot(&client, &slot, true).await?;
        for t in &mut self.tables {
            let oid = t.shape.as_ref().map(|s| s.oid);
            let gaps_accepted = t.gaps_accepted;
            let progress = t.progress.get_or_insert_with(|| TableProgress {
                segments: Vec::new(),
                snapshot_done: false,
                table_oid: oid,
                gaps_accepted,
                failed: None,
            });
            if progress.snapshot_done || progress.failed.is_some() {
                continue;
            }
            // A segment nothing was read from covers no key.
            if progress.segments.last().is_some_and(|s| s.upto.is_none()) {
                progress.segments.pop();
            }
            progress.segments.push(Segment {
                lsn: point,
                upto: None,
            });
            tracing::info!(source = %self.name, table = %t.upstream.qualified(), segments = progress.segments.len(), "reading the table's snapshot after its last sealed key");
        }
        self.phase = Phase::Snapshot(client);
        Ok(())
    }

    fn bad_value(&self, table: usize, column: &str, message: &str) -> ConnectorError {
        rejected(format!(
            "column \"{column}\" of {}: {message}",
            self.tables[table].upstream.qualified()
        ))
    }
}

pub(super) fn value_bytes<'a>(
    value: &'a Value,
    column: &str,
) -> Result<Option<&'a [u8]>, ConnectorError> {
    match value {
        Value::Null => Ok(None),
        Value::Text(b) => Ok(Some(b)),
        Value::Unchanged => Err(rejected(format!(
            "column \"{column}\" came without its value (an unchanged TOAST value with no old row to take it from)"
        ))),
    }
}

fn replication_error(e: pgwire_replication::PgWireError) -> ConnectorError {
    use pgwire_replication::PgWireError;
    match e {
        // A slot still held by a session that is going away is busy, not
        // gone; a server shutting down, or ending the session (57P01,
        // 57P02, 57P03), or out of connections (53300) comes back.
        PgWireError::Server(ref m)
            if m.contains("is active for PID")
                || ["(SQLSTATE 57P0", "(SQLSTATE 53"]
                    .iter()
                    .any(|code| m.contains(code)) =>
        {
            ConnectorError::Transient {
                connector: NAME.into(),
                message: format!("replication session: {e}"),
            }
        }
        PgWireError::Io(_) | PgWireError::Task(_) => ConnectorError::Transient {
            connector: NAME.into(),
            message: format!("replication session: {e}"),
        },
        other => rejected(format!("replication session: {other}")),
    }
}

#[async_trait]
impl Source for CdcSource {
    fn splits(&self) -> Vec<String> {
        let tables = self.tables.iter().map(|t| t.split.clone());
        if self.single {
            tables.collect()
        } else {
            std::iter::once(STREAM_SPLIT.to_string())
                .chain(tables)
                .collect()
        }
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
        if let Some(event) = self.pending.pop_front() {
            return Ok(event);
        }
        match &self.phase {
            Phase::Connect => {
                let result = self.connect().await;
                match result {
                    Ok(Some(event)) => Ok(event),
                    Ok(None) => Ok(SourceEvent::Idle),
                    Err(e) => {
                        self.phase = Phase::Connect;
                        Err(e)
                    }
                }
            }
            Phase::Snapshot(_) => {
                let result = self.read_page().await;
                if result.is_err() {
                    // The snapshot's transaction is gone with the error:
                    // a reconnect resumes after the last key delivered.
                    self.phase = Phase::Connect;
                }
                result
            }
            Phase::Stream(_) => self.stream().await,
        }
    }

    async fn on_sealed(&mut self, _epoch: u64, offsets: &Offsets) -> Result<(), ConnectorError> {
        let lsn = if self.single {
            offsets
                .get(&self.tables[0].split)
                .and_then(|text| serde_json::from_str::<Progress>(text).ok())
                .map(|p| p.lsn)
        } else {
            offsets
                .get(STREAM_SPLIT)
                .and_then(|text| serde_json::from_str::<StreamState>(text).ok())
                .map(|s| s.lsn)
        };
        let Some(lsn) = lsn else {
            return Ok(());
        };
        self.sealed_lsn = Some(lsn);
        if let Phase::Stream(stream) = &self.phase {
            stream.client.update_applied_lsn(Lsn::from_u64(lsn));
        }
        Ok(())
    }
}

mod faults;
mod gaps;
mod progress;
mod snapshot;
mod stream;

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
