//! Gaps: what the source does when the upstream lost changes it had
//! not read (its slot gone, or confirmed past the seal by someone else)
//! or a table is no longer the one it read (dropped, or created again
//! under the name), and how it goes on once a gap is accepted.

use pgwire_replication::Lsn;
use tokio_postgres::Client;

use super::progress::Carry;
use super::{CdcSource, IDENTITY_CHECK, Phase};
use crate::postgres::cdc::{gap, pg_error};
use crate::{ConnectorError, SourceEvent};

impl CdcSource {
    /// Goes on past a lost slot, the gap accepted: a new slot at the
    /// current end of the WAL, from which the stream resumes. Keys a
    /// snapshot cut short had not read are part of the gap.
    pub(super) async fn go_on_after_gap(
        &mut self,
        client: Client,
    ) -> Result<Option<SourceEvent>, ConnectorError> {
        self.upstream
            .ensure_publication(&client, &self.upstream_tables())
            .await?;
        let row = client
            .query_one(
                "SELECT (lsn - '0/0')::int8 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&self.upstream.slot],
            )
            .await
            .map_err(|e| pg_error("creating the replication slot again", e))?;
        let start = row.get::<_, i64>(0) as u64;
        let gaps = self.upstream.gaps_accepted;
        let stream = self.stream.as_mut().expect("a gap has a stream state");
        tracing::warn!(source = %self.name, from = %Lsn::from_u64(stream.lsn), to = %Lsn::from_u64(start), "going on past an accepted retention gap with a new slot");
        stream.lsn = start;
        stream.gaps_accepted = gaps;
        for t in &mut self.tables {
            if let Some(progress) = &mut t.progress {
                progress.snapshot_done = true;
            }
        }
        self.sealed_lsn = Some(start);
        // Seal the new position, so a restart streams from it.
        self.phase = Phase::Connect;
        Ok(Some(self.emit(Vec::new(), Carry::All, false)))
    }

    /// The slot's confirmed position and the process holding it, if any;
    /// None when it does not exist.
    pub(super) async fn slot_state(
        &self,
        client: &Client,
    ) -> Result<Option<(u64, Option<i32>)>, ConnectorError> {
        let row = client
            .query_opt(
                "SELECT (confirmed_flush_lsn - '0/0')::int8, active_pid
                 FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.upstream.slot],
            )
            .await
            .map_err(|e| pg_error("looking up the slot", e))?;
        Ok(row.map(|r| {
            (
                r.get::<_, Option<i64>>(0).unwrap_or(0) as u64,
                r.get::<_, Option<i32>>(1),
            )
        }))
    }

    /// Every [`IDENTITY_CHECK`] while streaming: each table is still
    /// there, and still the one read. A failed lookup is left to the stream to
    /// notice (the server down ends it too).
    pub(super) async fn check_identity(&mut self) -> Result<(), ConnectorError> {
        let Phase::Stream(stream) = &mut self.phase else {
            return Ok(());
        };
        if stream.checked_at.elapsed() < IDENTITY_CHECK {
            return Ok(());
        }
        stream.checked_at = tokio::time::Instant::now();
        if stream.checker.as_ref().is_none_or(|c| c.is_closed()) {
            stream.checker = self.upstream.connect().await.ok();
        }
        let Some(checker) = stream.checker.take() else {
            return Ok(());
        };
        let mut replaced = Vec::new();
        for (i, table) in self.tables.iter().enumerate() {
            if table.failed() {
                continue;
            }
            let Ok(now) = self.upstream.table_oid(&checker, &table.upstream).await else {
                break;
            };
            let read = table.shape.as_ref().map(|s| s.oid);
            if now != read {
                replaced.push((i, read, now));
            }
        }
        if let Phase::Stream(stream) = &mut self.phase {
            stream.checker = Some(checker);
        }
        let lsn = self.stream.as_ref().map_or(0, |s| s.lsn);
        for (i, read, now) in replaced {
            let error = self.table_replaced(i, read, now, lsn);
            if self.single {
                self.phase = Phase::Connect;
                return Err(error);
            }
            // Sealed by the caller's next event.
            self.fail_table(i, error)?;
        }
        Ok(())
    }

    /// The gap of a table dropped (`now` None) or replaced by another of
    /// its name.
    pub(super) fn table_replaced(
        &self,
        table: usize,
        read: Option<u32>,
        now: Option<u32>,
        lsn: u64,
    ) -> ConnectorError {
        let table = self.tables[table].upstream.qualified();
        let what = match now {
            None => format!("table {table} was dropped upstream"),
            Some(now) => format!(
                "table {table} was dropped and created again upstream (OID {} is now {now})",
                read.map_or("?".into(), |o| o.to_string())
            ),
        };
        gap(format!(
            "{what}: its changes after LSN {} are lost to this source (a retention gap); ALTER DESTINATION ... ACCEPT GAP to go on with the table there is now, or DROP and CREATE the source to read it again",
            Lsn::from_u64(lsn)
        ))
    }
}
