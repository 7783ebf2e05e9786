//! The stream: pgoutput messages of the slot, each upstream transaction
//! delivered whole, with the changes a snapshot segment already holds
//! left out.

use std::collections::HashMap;

use arrow::array::{Int64Array, RecordBatch};
use pgwire_replication::{ReplicationClient, ReplicationEvent};
use tokio_postgres::Client;
use weir_common::ChangeBatch;

use super::super::pgoutput::{self, Message, OldKind, Relation, Value};
use super::super::text::{self, field_of};
use super::super::{NAME, rejected};
use super::progress::Carry;
use super::{CdcSource, POLL, Phase, RowLayout, TableState, replication_error, value_bytes};
use crate::{ConnectorError, SourceEvent};

pub(super) struct Stream {
    pub(super) client: ReplicationClient,
    /// Upstream OID -> the index of the table it is.
    tables: HashMap<u32, usize>,
    /// The transaction being received: its rows, each `(table, weight,
    /// values)` in upstream column order.
    txn: Option<Vec<(usize, i64, Vec<Value>)>>,
    /// A session for the periodic identity check, and when it ran.
    pub(super) checker: Option<Client>,
    pub(super) checked_at: tokio::time::Instant,
}

impl Stream {
    /// Table `i` failed: its rows are no longer read, nor those of this
    /// transaction kept.
    pub(super) fn forget(&mut self, i: usize) {
        self.tables.retain(|_, t| *t != i);
        if let Some(txn) = &mut self.txn {
            txn.retain(|(t, _, _)| *t != i);
        }
    }
}

impl CdcSource {
    pub(super) async fn start_stream(&mut self, from: u64) -> Result<(), ConnectorError> {
        let acked = self.sealed_lsn.unwrap_or(from).min(from);
        let config = self.upstream.replication(from, acked);
        let client = ReplicationClient::connect(config)
            .await
            .map_err(replication_error)?;
        let tables = self
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.failed())
            .map(|(i, t)| (t.shape.as_ref().expect("shapes read").oid, i))
            .collect();
        for t in &mut self.tables {
            t.layout = None;
        }
        self.phase = Phase::Stream(Box::new(Stream {
            client,
            tables,
            txn: None,
            checker: None,
            checked_at: tokio::time::Instant::now(),
        }));
        Ok(())
    }

    /// Receives stream events until a transaction completes or the poll
    /// interval passes.
    pub(super) async fn stream(&mut self) -> Result<SourceEvent, ConnectorError> {
        let deadline = tokio::time::Instant::now() + POLL;
        loop {
            let Phase::Stream(stream) = &mut self.phase else {
                unreachable!("stream outside the stream phase")
            };
            let event = match tokio::time::timeout_at(deadline, stream.client.recv()).await {
                Err(_) => {
                    self.check_identity().await?;
                    return Ok(self.seal_failures().unwrap_or(SourceEvent::Idle));
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
                    let open = stream.txn.is_some();
                    let state = self
                        .stream
                        .as_mut()
                        .expect("a stream state while streaming");
                    if !open && wal_end.as_u64() > state.lsn {
                        // Nothing of ours is open: every change before
                        // here was delivered, so the slot may move on.
                        state.lsn = wal_end.as_u64();
                        return Ok(self.emit(Vec::new(), Carry::Changed, false));
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
        for (i, fault) in self.take_message(message)? {
            self.fail_table(i, fault)?;
        }
        Ok(())
    }

    /// Adds a message's change to the transaction; returns the faults of
    /// tables it shows broken (each fails alone, see [`super::faults`]).
    fn take_message(
        &mut self,
        message: Message,
    ) -> Result<Vec<(usize, ConnectorError)>, ConnectorError> {
        let Phase::Stream(stream) = &mut self.phase else {
            unreachable!()
        };
        let txn = stream.txn.get_or_insert_with(Vec::new);
        let ours = |relation: u32| stream.tables.get(&relation).copied();
        match message {
            Message::Relation(relation) => match ours(relation.oid) {
                Some(i) => match layout(&self.tables[i], &relation) {
                    Ok(layout) => self.tables[i].layout = Some(layout),
                    Err(e) => return Ok(vec![(i, e)]),
                },
                None => {
                    let named = self.tables.iter().position(|t| {
                        !t.failed()
                            && relation.namespace == t.upstream.schema
                            && relation.name == t.upstream.table
                    });
                    if let Some(i) = named {
                        let lsn = self.stream.as_ref().map_or(0, |s| s.lsn);
                        let read = self.tables[i].shape.as_ref().map(|s| s.oid);
                        let fault = self.table_replaced(i, read, Some(relation.oid), lsn);
                        return Ok(vec![(i, fault)]);
                    }
                }
            },
            Message::Insert { relation, new } => {
                if let Some(i) = ours(relation) {
                    txn.push((i, 1, new));
                }
            }
            Message::Update { relation, old, new } => {
                let Some(i) = ours(relation) else {
                    return Ok(Vec::new());
                };
                let Some((OldKind::Full, old)) = old else {
                    let table = self.tables[i].upstream.qualified();
                    return Ok(vec![(
                        i,
                        rejected(format!(
                            "an update of {table} came without its old row: the table's REPLICA IDENTITY is no longer FULL (ALTER TABLE {table} REPLICA IDENTITY FULL, then DROP and CREATE the source)"
                        )),
                    )]);
                };
                let new = new
                    .into_iter()
                    .zip(&old)
                    .map(|(n, o)| if n == Value::Unchanged { o.clone() } else { n })
                    .collect();
                txn.push((i, -1, old));
                txn.push((i, 1, new));
            }
            Message::Delete { relation, old } => {
                let Some(i) = ours(relation) else {
                    return Ok(Vec::new());
                };
                if old.0 != OldKind::Full {
                    return Ok(vec![(
                        i,
                        rejected(format!(
                            "a delete from {} came without its old row: the table's REPLICA IDENTITY is no longer FULL",
                            self.tables[i].upstream.qualified()
                        )),
                    )]);
                }
                txn.push((i, -1, old.1));
            }
            Message::Truncate { relations } => {
                let truncated: Vec<usize> = relations.iter().filter_map(|r| ours(*r)).collect();
                return Ok(truncated
                    .into_iter()
                    .map(|i| {
                        (i, rejected(format!(
                            "{} was truncated upstream; a truncate does not say which rows it removed: DROP and CREATE the source to read the table again",
                            self.tables[i].upstream.qualified()
                        )))
                    })
                    .collect());
            }
            _ => {}
        }
        Ok(Vec::new())
    }

    fn on_commit(
        &mut self,
        commit: u64,
        end: u64,
        rows: Vec<(usize, i64, Vec<Value>)>,
    ) -> Result<SourceEvent, ConnectorError> {
        let state = self
            .stream
            .as_ref()
            .expect("a stream state while streaming");
        if end <= state.lsn {
            // Delivered before the stream restarted.
            return Ok(SourceEvent::Idle);
        }
        // Per table, its rows in upstream order.
        let mut per_table: Vec<(usize, Vec<(i64, Vec<Value>)>)> = Vec::new();
        for (i, weight, values) in rows {
            match per_table.iter_mut().find(|(t, _)| *t == i) {
                Some((_, rows)) => rows.push((weight, values)),
                None => per_table.push((i, vec![(weight, values)])),
            }
        }
        let mut changes = Vec::with_capacity(per_table.len());
        for (i, rows) in per_table {
            let layout = self.tables[i]
                .layout
                .clone()
                .ok_or_else(|| rejected("a change arrived before its table's relation message"))?;
            let made = self
                .keep(i, &layout, commit, rows)
                .and_then(|kept| self.changes(i, &layout, &kept));
            match made {
                Ok(batch) if batch.num_rows() == 0 => {}
                Ok(batch) => changes.push((i, batch)),
                // A value that does not parse fails its table.
                Err(e) => self.fail_table(i, e)?,
            }
        }
        self.stream.as_mut().expect("checked above").lsn = end;
        Ok(self.emit(changes, Carry::Changed, true))
    }

    /// The rows of table `i` in a transaction committed at `commit` that
    /// no snapshot segment already holds. A segment read at `lsn` holds
    /// every change committed before `lsn` to the keys it covers.
    pub(super) fn keep(
        &self,
        i: usize,
        layout: &RowLayout,
        commit: u64,
        rows: Vec<(i64, Vec<Value>)>,
    ) -> Result<Vec<(i64, Vec<Value>)>, ConnectorError> {
        let table = &self.tables[i];
        let segments = &table.progress.as_ref().expect("progress").segments;
        if segments.iter().all(|s| commit >= s.lsn) {
            return Ok(rows);
        }
        let keys = table.keys.as_ref().expect("key order after connect");
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
                let s = bounds
                    .iter()
                    .position(|b| b.as_ref().is_some_and(|b| key.row() <= b.row()))
                    .unwrap_or(segments.len() - 1);
                commit >= segments[s].lsn
            })
            .map(|(row, _)| row)
            .collect())
    }

    fn changes(
        &self,
        i: usize,
        layout: &RowLayout,
        rows: &[(i64, Vec<Value>)],
    ) -> Result<ChangeBatch, ConnectorError> {
        let schema = &self.tables[i].schema;
        let columns = layout
            .output
            .iter()
            .zip(schema.fields())
            .map(|(&c, field)| {
                let values = rows
                    .iter()
                    .map(|(_, row)| value_bytes(&row[c], field.name()))
                    .collect::<Result<Vec<_>, _>>()?;
                text::column(&values, field.data_type())
                    .map_err(|e| self.bad_value(i, field.name(), &e.0))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let batch = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        let weights = Int64Array::from(rows.iter().map(|(w, _)| *w).collect::<Vec<_>>());
        ChangeBatch::new(batch, weights).map_err(|e| rejected(e.to_string()))
    }
}

/// Where the table's columns sit in `relation`'s rows; the relation must
/// still have every column the source reads, with the same type.
fn layout(table: &TableState, relation: &Relation) -> Result<RowLayout, ConnectorError> {
    let index = |name: &str| relation.columns.iter().position(|c| c.name == name);
    let mut output = Vec::new();
    for field in table.schema.fields() {
        let i = index(field.name()).ok_or_else(|| {
            rejected(format!(
                "column \"{}\" was dropped from upstream table {} (schema_evolution = fail): DROP and CREATE the source",
                field.name(),
                table.upstream.qualified()
            ))
        })?;
        let c = &relation.columns[i];
        let now = field_of(&c.name, c.type_oid, c.type_modifier, true);
        if now.as_ref().map(|f| f.data_type()) != Some(field.data_type()) {
            return Err(rejected(format!(
                "column \"{}\" of upstream table {} changed type (schema_evolution = fail): DROP and CREATE the source",
                c.name,
                table.upstream.qualified()
            )));
        }
        output.push(i);
    }
    let shape = table.shape.as_ref().expect("shape while streaming");
    let key = shape
        .key
        .iter()
        .map(|k| {
            index(k).ok_or_else(|| {
                rejected(format!(
                    "key column \"{k}\" is gone from upstream table {}",
                    table.upstream.qualified()
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(RowLayout { output, key })
}
