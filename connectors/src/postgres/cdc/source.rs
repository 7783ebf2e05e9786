//! The postgres-cdc protocol: a snapshot in key order, then the stream.
//!
//! The source's one split (the table's qualified name) seals a
//! [`Progress`]:
//! - `start`: the slot's consistent point, where the stream begins;
//! - `segments`: the snapshot, read in primary-key order as one or more
//!   segments. Rows with keys up to a segment's `upto` (and above the one
//!   before) were read from a snapshot taken at the segment's `lsn`. The
//!   first segment's snapshot is the one the slot exported when it was
//!   created, so its `lsn` is `start`. A snapshot cut short by a crash or
//!   a lost connection is not read again from the beginning: a new
//!   segment continues after the last key sealed, from a fresh snapshot
//!   exported by a temporary slot (its consistent point is the segment's
//!   `lsn`);
//! - `lsn`: the end of the last transaction delivered (or a keepalive's
//!   position between transactions): the stream resumes after it.
//!
//! The stream starts at `start` once the snapshot is done, and a change
//! committed at `c` to a row whose key lies in a segment read at `lsn > c`
//! is skipped, because that segment's snapshot already holds it. With one
//! segment (no resume) nothing is skipped. Each upstream transaction is
//! delivered whole, as one [`SourceEvent::Transaction`], so an epoch never
//! holds half of one. The slot's confirmed position advances only in
//! [`Source::on_sealed`], to the sealed `lsn`.
//!
//! A slot that is gone, or that was confirmed past the sealed position by
//! someone else, is a gap: the source fails, saying so, instead of
//! silently losing changes. So is a table dropped (and perhaps created
//! again under its name): the progress records the table's OID, checked
//! at every connection, against every relation message naming the table,
//! and every [`IDENTITY_CHECK`] while streaming (a table dropped from a
//! `FOR TABLE` publication sends nothing at all).

use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, SimpleQueryMessage};
use weir_common::ChangeBatch;

use super::keys::{KeyOrder, page_query};
use super::pgoutput::{self, Message, OldKind, Relation, Value};
use super::text::{self, field_of};
use super::{NAME, Shape, Upstream, gap, pg_error, rejected};
use crate::postgres::quote;
use crate::{ConnectorError, Offsets, Source, SourceBatch, SourceEvent, SourceOpen};

/// How long `next` waits for the stream before answering Idle.
const POLL: Duration = Duration::from_millis(500);
/// How often a streaming source checks that its table is still the one
/// it read.
const IDENTITY_CHECK: Duration = Duration::from_secs(5);

/// What one split's offset holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Progress {
    start: u64,
    segments: Vec<Segment>,
    snapshot_done: bool,
    lsn: u64,
    /// Retention gaps accepted: the source went on past each.
    #[serde(default)]
    gaps_accepted: u32,
    /// The upstream table's OID: a table of the same name with another
    /// is another table. (Absent in offsets sealed before it was kept.)
    #[serde(default)]
    table_oid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Segment {
    /// The consistent point of the snapshot this segment was read from.
    lsn: u64,
    /// The last key read in it, as text per key column; None while no
    /// row of it has been read.
    upto: Option<Vec<String>>,
}

enum Phase {
    /// Connect (again) and decide from `progress` what comes next.
    Connect,
    /// Reading the snapshot inside an open REPEATABLE READ transaction.
    Snapshot(Client),
    Stream(Box<Stream>),
}

struct Stream {
    client: ReplicationClient,
    /// The table's relation message: where each output and key column
    /// sits in a replicated row.
    relation: Option<RowLayout>,
    /// The transaction being received: its rows, each `(weight, values)`
    /// in upstream column order.
    txn: Option<Vec<(i64, Vec<Value>)>>,
    /// A session for the periodic identity check, and when it ran.
    checker: Option<Client>,
    checked_at: tokio::time::Instant,
}

/// Where the columns the source needs sit in an upstream row.
#[derive(Debug, Clone)]
pub(super) struct RowLayout {
    /// Per output column, its index in the row.
    pub(super) output: Vec<usize>,
    /// Per key column, its index in the row.
    pub(super) key: Vec<usize>,
}

pub(crate) struct CdcSource {
    name: String,
    upstream: Upstream,
    schema: SchemaRef,
    split: String,
    /// What has been delivered (ahead of what is sealed).
    progress: Option<Progress>,
    /// The `lsn` of the latest seal: what the slot may confirm.
    sealed_lsn: Option<u64>,
    phase: Phase,
    shape: Option<Shape>,
    /// Orders keys as the snapshot query does (C collation for text).
    keys: Option<KeyOrder>,
}

impl CdcSource {
    pub(crate) fn new(open: &SourceOpen<'_>, upstream: Upstream) -> Result<Self, ConnectorError> {
        let split = format!("{}.{}", upstream.schema, upstream.table);
        let progress = match open.offsets.get(&split) {
            None => None,
            Some(text) => Some(serde_json::from_str::<Progress>(text).map_err(|e| {
                ConnectorError::BadPosition {
                    connector: NAME.into(),
                    value: text.clone(),
                    message: e.to_string(),
                }
            })?),
        };
        Ok(Self {
            name: open.name.to_string(),
            sealed_lsn: progress.as_ref().map(|p| p.lsn),
            upstream,
            schema: open.schema.clone(),
            split,
            progress,
            phase: Phase::Connect,
            shape: None,
            keys: None,
        })
    }

    fn batch(&self, changes: ChangeBatch) -> Result<SourceBatch, ConnectorError> {
        let progress = self.progress.as_ref().expect("progress before a batch");
        Ok(SourceBatch {
            split: self.split.clone(),
            changes,
            offset: serde_json::to_string(progress).expect("progress serializes"),
            max_event_time: None,
            skipped: 0,
        })
    }

    fn empty(&self) -> Result<ChangeBatch, ConnectorError> {
        Ok(ChangeBatch::inserts(RecordBatch::new_empty(
            self.schema.clone(),
        )))
    }

    /// Connects and moves to the snapshot or the stream; returns an
    /// event when there is something to seal at once.
    async fn connect(&mut self) -> Result<Option<SourceEvent>, ConnectorError> {
        let client = self.upstream.connect().await?;
        let shape = self.upstream.shape(&client).await?;
        for field in self.schema.fields() {
            let Some(c) = shape.column(field.name()) else {
                return Err(rejected(format!(
                    "upstream table {} has no column \"{}\" any more; the source's columns no longer fit it (schema_evolution = fail): DROP and CREATE the source",
                    self.upstream.qualified(),
                    field.name()
                )));
            };
            let now = field_of(&c.name, c.type_oid, c.type_modifier, true);
            if now.as_ref().map(|f| f.data_type()) != Some(field.data_type()) {
                return Err(rejected(format!(
                    "column \"{}\" of upstream table {} is now {}, which does not fit the source's {} (schema_evolution = fail): DROP and CREATE the source",
                    c.name,
                    self.upstream.qualified(),
                    c.type_name,
                    field.data_type()
                )));
            }
        }
        self.keys = Some(KeyOrder::new(&shape)?);
        let oid = shape.oid;
        self.shape = Some(shape);
        let Some(progress) = self.progress.clone() else {
            return self.create_slot(client).await;
        };
        let accepting = self.upstream.gaps_accepted > progress.gaps_accepted;
        let recreated = progress.table_oid.is_some_and(|old| old != oid);
        if recreated && !accepting {
            return Err(self.table_replaced(progress.table_oid, Some(oid), progress.lsn));
        }
        if recreated {
            // Accepted: read on from the table there is now (its changes
            // before it joined the publication are part of the gap).
            self.upstream.ensure_publication_covers(&client).await?;
            tracing::warn!(source = %self.name, old = ?progress.table_oid, new = oid, "going on past an accepted gap with a table created again");
        }
        self.progress.as_mut().expect("checked above").table_oid = Some(oid);
        let slot = self.slot_state(&client).await?;
        let Some((confirmed, active)) = slot else {
            if accepting {
                return self.go_on_after_gap(client).await;
            }
            return Err(gap(format!(
                "replication slot {} no longer exists upstream: the changes after LSN {} are lost (a retention gap); ALTER DESTINATION ... ACCEPT GAP to go on without them, or DROP and CREATE the source to read the table again",
                self.upstream.slot,
                Lsn::from_u64(progress.lsn)
            )));
        };
        if confirmed > progress.lsn {
            if !accepting {
                return Err(gap(format!(
                    "replication slot {} was confirmed up to {} by another consumer, past this source's sealed {}: the changes between are lost (a retention gap); ALTER DESTINATION ... ACCEPT GAP to go on without them, or DROP and CREATE the source",
                    self.upstream.slot,
                    Lsn::from_u64(confirmed),
                    Lsn::from_u64(progress.lsn)
                )));
            }
            tracing::warn!(source = %self.name, from = %Lsn::from_u64(progress.lsn), to = %Lsn::from_u64(confirmed), "going on past an accepted retention gap");
            let progress = self.progress.as_mut().expect("checked above");
            progress.lsn = confirmed;
            progress.gaps_accepted = self.upstream.gaps_accepted;
            self.sealed_lsn = Some(confirmed);
            let batch = self.batch(self.empty()?)?;
            self.phase = Phase::Connect;
            return Ok(Some(SourceEvent::Batch(batch)));
        }
        if recreated {
            // The slot is fine: the acceptance is sealed with the new OID.
            let progress = self.progress.as_mut().expect("checked above");
            progress.gaps_accepted = self.upstream.gaps_accepted;
            let batch = self.batch(self.empty()?)?;
            self.phase = Phase::Connect;
            return Ok(Some(SourceEvent::Batch(batch)));
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
        if !progress.snapshot_done {
            self.resume_snapshot(client).await?;
            return Ok(None);
        }
        self.start_stream(progress.lsn).await?;
        Ok(None)
    }

    /// First start: the publication, the slot, and (unless `snapshot =
    /// 'never'`) the snapshot it exports.
    async fn create_slot(&mut self, client: Client) -> Result<Option<SourceEvent>, ConnectorError> {
        self.upstream.ensure_publication(&client).await?;
        // Nothing was sealed, so a slot of this name is one this source
        // created before a crash (CREATE checked that none existed).
        self.upstream.drop_slot(&client).await?;
        if !self.upstream.snapshot {
            let row = client
                .query_one(
                    "SELECT (lsn - '0/0')::int8 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&self.upstream.slot],
                )
                .await
                .map_err(|e| pg_error("creating the replication slot", e))?;
            let start = row.get::<_, i64>(0) as u64;
            self.progress = Some(Progress {
                start,
                segments: Vec::new(),
                snapshot_done: true,
                lsn: start,
                gaps_accepted: 0,
                table_oid: self.shape.as_ref().map(|s| s.oid),
            });
            // Seal the start, so a restart streams from it.
            let batch = self.batch(self.empty()?)?;
            self.phase = Phase::Connect;
            return Ok(Some(SourceEvent::Batch(batch)));
        }
        let (point, _exporter) = self
            .export_snapshot(&client, &self.upstream.slot, false)
            .await?;
        self.progress = Some(Progress {
            start: point,
            segments: vec![Segment {
                lsn: point,
                upto: None,
            }],
            snapshot_done: false,
            lsn: point,
            gaps_accepted: 0,
            table_oid: self.shape.as_ref().map(|s| s.oid),
        });
        self.phase = Phase::Snapshot(client);
        Ok(None)
    }

    /// Continues a snapshot cut short, after its last sealed key, in a
    /// new segment read from a fresh snapshot.
    async fn resume_snapshot(&mut self, client: Client) -> Result<(), ConnectorError> {
        let slot = format!("{}_resume", self.upstream.slot);
        let (point, _exporter) = self.export_snapshot(&client, &slot, true).await?;
        let progress = self.progress.as_mut().expect("resuming a started snapshot");
        // A segment nothing was read from covers no key.
        if progress.segments.last().is_some_and(|s| s.upto.is_none()) {
            progress.segments.pop();
        }
        progress.segments.push(Segment {
            lsn: point,
            upto: None,
        });
        tracing::info!(source = %self.name, segments = progress.segments.len(), "resuming the snapshot after its last sealed key");
        self.phase = Phase::Snapshot(client);
        Ok(())
    }

    /// Creates `slot` with an exported snapshot and makes `client`'s new
    /// transaction read it. Returns the slot's consistent point and the
    /// replication session, which must outlive the import.
    async fn export_snapshot(
        &self,
        client: &Client,
        slot: &str,
        temporary: bool,
    ) -> Result<(u64, ReplicationClient), ConnectorError> {
        let config = self.upstream.replication(0, 0);
        let mut session = ReplicationClient::connect_gated(config)
            .await
            .map_err(replication_error)?;
        let rows = session
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT {}{} LOGICAL pgoutput EXPORT_SNAPSHOT",
                quote(slot),
                if temporary { " TEMPORARY" } else { "" }
            ))
            .await
            .map_err(replication_error)?;
        let row = rows
            .first()
            .ok_or_else(|| rejected("CREATE_REPLICATION_SLOT returned no row"))?;
        let field = |i: usize| {
            row.get(i)
                .and_then(|v| v.as_ref())
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .ok_or_else(|| rejected("CREATE_REPLICATION_SLOT returned a short row"))
        };
        let point: Lsn = field(1)?
            .parse()
            .map_err(|_| rejected("CREATE_REPLICATION_SLOT returned a bad consistent point"))?;
        let snapshot = field(2)?;
        client
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{}'",
                snapshot.replace('\'', "''")
            ))
            .await
            .map_err(|e| pg_error("importing the slot's snapshot", e))?;
        Ok((point.as_u64(), session))
    }

    /// Reads the next page of the snapshot.
    async fn read_page(&mut self) -> Result<SourceEvent, ConnectorError> {
        let Phase::Snapshot(client) = &self.phase else {
            unreachable!("read_page outside the snapshot")
        };
        let shape = self.shape.as_ref().expect("shape after connect");
        let progress = self.progress.as_ref().expect("progress in a snapshot");
        let after = progress.segments.iter().rev().find_map(|s| s.upto.clone());
        let sql = page_query(
            &self.upstream.qualified(),
            self.upstream.batch_rows,
            shape,
            &self.schema,
            after.as_deref(),
        );
        let messages = client
            .simple_query(&sql)
            .await
            .map_err(|e| pg_error("reading the snapshot", e))?;
        let width = self.schema.fields().len();
        let mut rows: Vec<Vec<Option<String>>> = Vec::new();
        for m in messages {
            if let SimpleQueryMessage::Row(row) = m {
                rows.push(
                    (0..width + shape.key.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                );
            }
        }
        let done = (rows.len() as u64) < self.upstream.batch_rows;
        let columns = (0..width)
            .map(|i| {
                let values: Vec<Option<&[u8]>> = rows
                    .iter()
                    .map(|r| r[i].as_deref().map(str::as_bytes))
                    .collect();
                text::column(&values, self.schema.field(i).data_type())
                    .map_err(|e| self.bad_value(self.schema.field(i).name(), &e.0))
            })
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        let last_key = rows.last().map(|r| {
            r[width..]
                .iter()
                .map(|v| v.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        });
        let progress = self.progress.as_mut().expect("progress in a snapshot");
        if let Some(key) = last_key {
            progress.segments.last_mut().expect("a segment").upto = Some(key);
        }
        if done {
            progress.snapshot_done = true;
            if let Phase::Snapshot(client) = &self.phase {
                client
                    .batch_execute("COMMIT")
                    .await
                    .map_err(|e| pg_error("ending the snapshot", e))?;
            }
            tracing::info!(source = %self.name, "snapshot read; streaming changes");
            self.phase = Phase::Connect;
        }
        Ok(SourceEvent::Batch(self.batch(ChangeBatch::inserts(batch))?))
    }

    async fn start_stream(&mut self, from: u64) -> Result<(), ConnectorError> {
        let acked = self.sealed_lsn.unwrap_or(from).min(from);
        let config = self.upstream.replication(from, acked);
        let client = ReplicationClient::connect(config)
            .await
            .map_err(replication_error)?;
        self.phase = Phase::Stream(Box::new(Stream {
            client,
            relation: None,
            txn: None,
            checker: None,
            checked_at: tokio::time::Instant::now(),
        }));
        Ok(())
    }

    /// Receives stream events until a transaction completes or the poll
    /// interval passes.
    async fn stream(&mut self) -> Result<SourceEvent, ConnectorError> {
        let deadline = tokio::time::Instant::now() + POLL;
        loop {
            let Phase::Stream(stream) = &mut self.phase else {
                unreachable!("stream outside the stream phase")
            };
            let event = match tokio::time::timeout_at(deadline, stream.client.recv()).await {
                Err(_) => {
                    self.check_identity().await?;
                    return Ok(SourceEvent::Idle);
                }
                Ok(Ok(Some(event))) => event,
                Ok(Ok(None)) => {
                    self.phase = Phase::Connect;
                    return Err(ConnectorError::Transient {
                        connector: NAME.into(),
                        message: "the replication stream ended".into(),
                    });
                }
                Ok(Err(e)) => {
                    self.phase = Phase::Connect;
                    return Err(replication_error(e));
                }
            };
            match event {
                ReplicationEvent::Begin { .. } => stream.txn = Some(Vec::new()),
                ReplicationEvent::XLogData { data, .. } => {
                    let message = pgoutput::decode(&data).map_err(|e| {
                        rejected(format!("a replication message did not decode: {}", e.0))
                    })?;
                    self.on_message(message)?;
                }
                ReplicationEvent::Commit { lsn, end_lsn, .. } => {
                    let rows = stream.txn.take().unwrap_or_default();
                    return self.on_commit(lsn.as_u64(), end_lsn.as_u64(), rows);
                }
                ReplicationEvent::KeepAlive { wal_end, .. } => {
                    let progress = self.progress.as_mut().expect("progress while streaming");
                    if stream.txn.is_none() && wal_end.as_u64() > progress.lsn {
                        // Nothing of ours is open: every change before
                        // here was delivered, so the slot may move on.
                        progress.lsn = wal_end.as_u64();
                        return Ok(SourceEvent::Batch(self.batch(self.empty()?)?));
                    }
                }
                ReplicationEvent::Message { .. } => {}
                ReplicationEvent::StoppedAt { .. } => {
                    self.phase = Phase::Connect;
                    return Ok(SourceEvent::Idle);
                }
            }
        }
    }

    fn on_message(&mut self, message: Message) -> Result<(), ConnectorError> {
        let shape = self.shape.as_ref().expect("shape while streaming");
        let Phase::Stream(stream) = &mut self.phase else {
            unreachable!()
        };
        let ours = |relation: u32| relation == shape.oid;
        let txn = stream.txn.get_or_insert_with(Vec::new);
        match message {
            Message::Relation(relation)
                if relation.oid != shape.oid
                    && relation.namespace == self.upstream.schema
                    && relation.name == self.upstream.table =>
            {
                let lsn = self.progress.as_ref().map_or(0, |p| p.lsn);
                return Err(self.table_replaced(Some(shape.oid), Some(relation.oid), lsn));
            }
            Message::Relation(relation) if ours(relation.oid) => {
                stream.relation = Some(layout(&self.upstream, &self.schema, shape, &relation)?);
            }
            Message::Insert { relation, new } if ours(relation) => txn.push((1, new)),
            Message::Update { relation, old, new } if ours(relation) => {
                let Some((OldKind::Full, old)) = old else {
                    return Err(rejected(format!(
                        "an update of {} came without its old row: the table's REPLICA IDENTITY is no longer FULL (ALTER TABLE {} REPLICA IDENTITY FULL, then DROP and CREATE the source)",
                        self.upstream.qualified(),
                        self.upstream.qualified()
                    )));
                };
                let new = new
                    .into_iter()
                    .zip(&old)
                    .map(|(n, o)| if n == Value::Unchanged { o.clone() } else { n })
                    .collect();
                txn.push((-1, old));
                txn.push((1, new));
            }
            Message::Delete { relation, old } if ours(relation) => {
                if old.0 != OldKind::Full {
                    return Err(rejected(format!(
                        "a delete from {} came without its old row: the table's REPLICA IDENTITY is no longer FULL",
                        self.upstream.qualified()
                    )));
                }
                txn.push((-1, old.1));
            }
            Message::Truncate { relations } if relations.iter().any(|r| ours(*r)) => {
                return Err(rejected(format!(
                    "{} was truncated upstream; a truncate does not say which rows it removed: DROP and CREATE the source to read the table again",
                    self.upstream.qualified()
                )));
            }
            _ => {}
        }
        Ok(())
    }

    fn on_commit(
        &mut self,
        commit: u64,
        end: u64,
        rows: Vec<(i64, Vec<Value>)>,
    ) -> Result<SourceEvent, ConnectorError> {
        let Phase::Stream(stream) = &self.phase else {
            unreachable!()
        };
        let progress = self.progress.as_ref().expect("progress while streaming");
        if end <= progress.lsn {
            // Delivered before the stream restarted.
            return Ok(SourceEvent::Idle);
        }
        let changes = if rows.is_empty() {
            self.empty()?
        } else {
            let layout = stream
                .relation
                .clone()
                .ok_or_else(|| rejected("a change arrived before its table's relation message"))?;
            let kept = self.keep(&layout, commit, rows)?;
            self.changes(&layout, &kept)?
        };
        self.progress.as_mut().expect("progress").lsn = end;
        let batch = self.batch(changes)?;
        Ok(SourceEvent::Transaction {
            batches: vec![batch],
            position: end.to_string(),
        })
    }

    /// The rows of a transaction committed at `commit` that no snapshot
    /// segment already holds.
    fn keep(
        &self,
        layout: &RowLayout,
        commit: u64,
        rows: Vec<(i64, Vec<Value>)>,
    ) -> Result<Vec<(i64, Vec<Value>)>, ConnectorError> {
        let progress = self.progress.as_ref().expect("progress");
        let segments = &progress.segments;
        if segments.len() < 2 || segments.iter().all(|s| commit >= s.lsn) {
            return Ok(rows);
        }
        let keys = self.keys.as_ref().expect("key order after connect");
        let bounds = segments
            .iter()
            .map(|s| s.upto.as_ref().map(|k| keys.row_of_text(k)).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let row_keys = keys.rows_of_values(layout, &rows)?;
        Ok(rows
            .into_iter()
            .zip(row_keys)
            .filter(|(_, key)| {
                // The first segment whose last key is at or above this
                // one; past them all, the last (it ran to the end).
                let i = bounds
                    .iter()
                    .position(|b| b.as_ref().is_some_and(|b| key.row() <= b.row()))
                    .unwrap_or(segments.len() - 1);
                commit >= segments[i].lsn
            })
            .map(|(row, _)| row)
            .collect())
    }

    fn changes(
        &self,
        layout: &RowLayout,
        rows: &[(i64, Vec<Value>)],
    ) -> Result<ChangeBatch, ConnectorError> {
        let columns = layout
            .output
            .iter()
            .zip(self.schema.fields())
            .map(|(&i, field)| {
                let values = rows
                    .iter()
                    .map(|(_, row)| value_bytes(&row[i], field.name()))
                    .collect::<Result<Vec<_>, _>>()?;
                text::column(&values, field.data_type())
                    .map_err(|e| self.bad_value(field.name(), &e.0))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        let weights = Int64Array::from(rows.iter().map(|(w, _)| *w).collect::<Vec<_>>());
        ChangeBatch::new(batch, weights).map_err(|e| rejected(e.to_string()))
    }

    fn bad_value(&self, column: &str, message: &str) -> ConnectorError {
        rejected(format!(
            "column \"{column}\" of {}: {message}",
            self.upstream.qualified()
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

/// Where the source's columns sit in `relation`'s rows; the relation must
/// still have every column the source reads, with the same type.
fn layout(
    upstream: &Upstream,
    schema: &SchemaRef,
    shape: &Shape,
    relation: &Relation,
) -> Result<RowLayout, ConnectorError> {
    let index = |name: &str| relation.columns.iter().position(|c| c.name == name);
    let mut output = Vec::new();
    for field in schema.fields() {
        let i = index(field.name()).ok_or_else(|| {
            rejected(format!(
                "column \"{}\" was dropped from upstream table {} (schema_evolution = fail): DROP and CREATE the source",
                field.name(),
                upstream.qualified()
            ))
        })?;
        let c = &relation.columns[i];
        let now = field_of(&c.name, c.type_oid, c.type_modifier, true);
        if now.as_ref().map(|f| f.data_type()) != Some(field.data_type()) {
            return Err(rejected(format!(
                "column \"{}\" of upstream table {} changed type (schema_evolution = fail): DROP and CREATE the source",
                c.name,
                upstream.qualified()
            )));
        }
        output.push(i);
    }
    let key = shape
        .key
        .iter()
        .map(|k| {
            index(k).ok_or_else(|| {
                rejected(format!(
                    "key column \"{k}\" is gone from upstream table {}",
                    upstream.qualified()
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(RowLayout { output, key })
}

#[async_trait]
impl Source for CdcSource {
    fn splits(&self) -> Vec<String> {
        vec![self.split.clone()]
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
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
        let Some(text) = offsets.get(&self.split) else {
            return Ok(());
        };
        let Ok(progress) = serde_json::from_str::<Progress>(text) else {
            return Ok(());
        };
        self.sealed_lsn = Some(progress.lsn);
        if let Phase::Stream(stream) = &self.phase {
            stream
                .client
                .update_applied_lsn(Lsn::from_u64(progress.lsn));
        }
        Ok(())
    }
}

mod gaps;

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
