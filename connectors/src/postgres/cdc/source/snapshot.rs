//! The snapshot: pages of each table in primary-key order, read in one
//! REPEATABLE READ transaction that imports a slot's exported snapshot.

use arrow::array::{ArrayRef, RecordBatch};
use pgwire_replication::{Lsn, ReplicationClient};
use tokio_postgres::{Client, SimpleQueryMessage};
use weir_common::ChangeBatch;

use super::super::keys::page_query;
use super::super::{NAME, pg_error, rejected, text};
use super::progress::Carry;
use super::{CdcSource, Phase, replication_error};
use crate::postgres::quote;
use crate::{ConnectorError, SourceEvent};

impl CdcSource {
    /// Creates `slot` with an exported snapshot and makes `client`'s new
    /// transaction read it. Returns the slot's consistent point and the
    /// replication session, which must outlive the import.
    pub(super) async fn export_snapshot(
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

    /// Reads the next page of the first table whose snapshot is not done.
    pub(super) async fn read_page(&mut self) -> Result<SourceEvent, ConnectorError> {
        let Some(i) = self.tables.iter().position(|t| {
            t.progress
                .as_ref()
                .is_some_and(|p| !p.snapshot_done && p.failed.is_none())
        }) else {
            return self.end_snapshot().await;
        };
        let Phase::Snapshot(client) = &self.phase else {
            unreachable!("read_page outside the snapshot")
        };
        let table = &self.tables[i];
        let shape = table.shape.as_ref().expect("shape after connect");
        let progress = table.progress.as_ref().expect("checked above");
        let after = progress.segments.iter().rev().find_map(|s| s.upto.clone());
        let sql = page_query(
            &table.upstream.qualified(),
            self.upstream.batch_rows,
            shape,
            &table.schema,
            after.as_deref(),
        );
        let messages = client
            .simple_query(&sql)
            .await
            .map_err(|e| pg_error("reading the snapshot", e))?;
        let width = table.schema.fields().len();
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
            .map(|c| {
                let values: Vec<Option<&[u8]>> = rows
                    .iter()
                    .map(|r| r[c].as_deref().map(str::as_bytes))
                    .collect();
                let field = table.schema.field(c);
                text::column(&values, field.data_type())
                    .map_err(|e| self.bad_value(i, field.name(), &e.0))
            })
            .collect::<Result<Vec<ArrayRef>, _>>();
        let columns = match columns {
            Ok(columns) => columns,
            // A value that does not parse fails its table (or, reading
            // one table, the source).
            Err(e) => {
                self.fail_table(i, e)?;
                if self.snapshot_done() {
                    self.end_snapshot_transaction().await?;
                }
                return Ok(self.emit(Vec::new(), Carry::Changed, false));
            }
        };
        let batch = RecordBatch::try_new(table.schema.clone(), columns)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        let last_key = rows.last().map(|r| {
            r[width..]
                .iter()
                .map(|v| v.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        });
        let progress = self.tables[i].progress();
        if let Some(key) = last_key {
            progress.segments.last_mut().expect("a segment").upto = Some(key);
        }
        if done {
            progress.snapshot_done = true;
            tracing::info!(source = %self.name, table = %self.tables[i].upstream.qualified(), "table's snapshot read");
            if self.snapshot_done() {
                self.end_snapshot_transaction().await?;
            }
        }
        Ok(self.emit(
            vec![(i, ChangeBatch::inserts(batch))],
            Carry::Changed,
            false,
        ))
    }

    fn snapshot_done(&self) -> bool {
        self.tables.iter().all(|t| {
            t.progress
                .as_ref()
                .is_some_and(|p| p.snapshot_done || p.failed.is_some())
        })
    }

    async fn end_snapshot_transaction(&mut self) -> Result<(), ConnectorError> {
        if let Phase::Snapshot(client) = &self.phase {
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| pg_error("ending the snapshot", e))?;
        }
        tracing::info!(source = %self.name, "snapshot read; streaming changes");
        self.phase = Phase::Connect;
        Ok(())
    }

    /// No table has a snapshot to read (a source with no tables yet).
    async fn end_snapshot(&mut self) -> Result<SourceEvent, ConnectorError> {
        self.end_snapshot_transaction().await?;
        Ok(self.emit(Vec::new(), Carry::All, false))
    }
}
