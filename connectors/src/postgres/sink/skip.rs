//! Skipping what the target refuses (`on_error = 'skip'`, or
//! `retry_and_skip` once its retries are spent): an epoch whose move into
//! the target fails with a data error (a constraint, a key that is not
//! unique), an epoch the stage refuses (a value the target's type cannot
//! hold), and a row whose key is NULL.
//!
//! Refused changes go to a third table beside the target,
//! `weir_refused_<T>`: the stage's columns as `text` plus the error, so
//! whatever was refused fits. The commit that moves a range of epochs
//! into the target also takes that range's refused changes out, in the
//! same transaction: they are counted into the progress row
//! (`skipped_epochs`, `skipped_rows`, `last_skip_error`) and, with
//! `dead_letter = 'table'`, kept in `weir_dead_letter` (one per schema,
//! like the progress table) as JSON. So a skip is recorded exactly once,
//! a takeover after a crash included, and the epoch's offset is committed
//! without its changes: the target then knowingly differs from the sink's
//! input by what was skipped.

use bytes::Bytes;
use tokio_postgres::Transaction;

use super::{Tables, copy_lines};
use crate::postgres::{pg_error, quote};
use crate::{ConnectorError, Skips};

/// The dead-letter table's name, in the target's schema.
pub(super) const DEAD_LETTER: &str = "weir_dead_letter";

impl Tables {
    /// Creates the refused and dead-letter tables if missing.
    pub(super) fn create_skip_tables(&self) -> String {
        let columns: String = self
            .target
            .columns
            .fields()
            .iter()
            .map(|f| format!(", {} text", quote(f.name())))
            .collect();
        format!(
            "CREATE TABLE IF NOT EXISTS {} (weir_epoch bigint NOT NULL, weir_weight bigint NOT NULL{columns}, weir_error text); \
             CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, target text NOT NULL, epoch bigint NOT NULL, \
             weight bigint NOT NULL, error text, change jsonb NOT NULL, skipped_at timestamptz NOT NULL DEFAULT now())",
            self.refused, self.dead_letters
        )
    }

    /// Moves the staged epochs of `(after, through]` into the target one
    /// at a time, each under a savepoint; an epoch the target refuses is
    /// rolled back and its staged rows move to the refused table.
    pub(super) async fn move_skipping(
        &self,
        tx: &Transaction<'_>,
        after: u64,
        through: u64,
    ) -> Result<(), ConnectorError> {
        let epochs: Vec<i64> = tx
            .query(
                &format!(
                    "SELECT DISTINCT weir_epoch FROM {} WHERE weir_epoch > $1 AND weir_epoch <= $2 ORDER BY 1",
                    self.stage
                ),
                &[&(after as i64), &(through as i64)],
            )
            .await
            .map_err(|e| pg_error("listing staged epochs", e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        for epoch in epochs {
            savepoint(tx, "SAVEPOINT weir_epoch").await?;
            match self.move_epochs(tx, epoch as u64 - 1, epoch as u64).await {
                Ok(()) => savepoint(tx, "RELEASE SAVEPOINT weir_epoch").await?,
                Err(error) if error.is_refused_data() => {
                    savepoint(tx, "ROLLBACK TO SAVEPOINT weir_epoch").await?;
                    tracing::warn!(sink = %self.name, epoch, %error, "skipping an epoch the target refused");
                    let columns = self.column_list();
                    let as_text: String = self
                        .target
                        .columns
                        .fields()
                        .iter()
                        .map(|f| format!(", {}::text", quote(f.name())))
                        .collect();
                    tx.execute(
                        &format!(
                            "INSERT INTO {} (weir_epoch, weir_weight, {columns}, weir_error) \
                             SELECT weir_epoch, weir_weight{as_text}, $2 FROM {} WHERE weir_epoch = $1",
                            self.refused, self.stage
                        ),
                        &[&epoch, &error.to_string()],
                    )
                    .await
                    .map_err(|e| pg_error("keeping a refused epoch", e))?;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Sets `lines` (stage COPY text) aside as refused with `error`, in
    /// a transaction of its own that holds the progress row for share
    /// (as staging does).
    pub(super) async fn refuse(
        &self,
        client: &mut tokio_postgres::Client,
        lines: Bytes,
        error: &str,
    ) -> Result<(), ConnectorError> {
        tracing::warn!(sink = %self.name, %error, "setting aside changes the target refused");
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("starting a transaction", e))?;
        self.lock(&tx, "SHARE").await?;
        self.stage_refused(&tx, lines, error).await?;
        tx.commit()
            .await
            .map_err(|e| pg_error("keeping refused changes", e))
    }

    /// Copies `lines` (stage COPY text) into the refused table with
    /// `error`, in `tx`.
    pub(super) async fn stage_refused(
        &self,
        tx: &Transaction<'_>,
        lines: Bytes,
        error: &str,
    ) -> Result<(), ConnectorError> {
        let statement = format!(
            "COPY {} (weir_epoch, weir_weight, {}) FROM STDIN",
            self.refused,
            self.column_list()
        );
        let _ = copy_lines(tx, &statement, lines, "keeping refused changes").await?;
        tx.execute(
            &format!(
                "UPDATE {} SET weir_error = $1 WHERE weir_error IS NULL",
                self.refused
            ),
            &[&error],
        )
        .await
        .map_err(|e| pg_error("keeping refused changes", e))?;
        Ok(())
    }

    /// Takes the refused changes of `(after, through]` out of the refused
    /// table: counted, and kept in the dead-letter table if asked.
    pub(super) async fn take_refused(
        &self,
        tx: &Transaction<'_>,
        after: u64,
        through: u64,
    ) -> Result<Skips, ConnectorError> {
        let (after, through) = (after as i64, through as i64);
        let within = "weir_epoch > $1 AND weir_epoch <= $2";
        let row = tx
            .query_one(
                &format!(
                    "SELECT count(DISTINCT weir_epoch), count(*), \
                     (SELECT weir_error FROM {r} WHERE {within} ORDER BY weir_epoch DESC LIMIT 1) \
                     FROM {r} WHERE {within}",
                    r = self.refused
                ),
                &[&after, &through],
            )
            .await
            .map_err(|e| pg_error("counting refused changes", e))?;
        let skipped = Skips {
            epochs: row.get::<_, i64>(0) as u64,
            rows: row.get::<_, i64>(1) as u64,
            last_error: row.get(2),
        };
        if skipped.rows == 0 {
            return Ok(skipped);
        }
        if self.dead_letter {
            tx.execute(
                &format!(
                    "INSERT INTO {} (sink, target, epoch, weight, error, change) \
                     SELECT $3, $4, weir_epoch, weir_weight, weir_error, \
                     to_jsonb(r) - 'weir_epoch' - 'weir_weight' - 'weir_error' \
                     FROM {} AS r WHERE {within}",
                    self.dead_letters, self.refused
                ),
                &[&after, &through, &self.name, &self.target.qualified()],
            )
            .await
            .map_err(|e| pg_error("writing the dead letters", e))?;
        }
        tx.execute(
            &format!("DELETE FROM {} WHERE {within}", self.refused),
            &[&after, &through],
        )
        .await
        .map_err(|e| pg_error("clearing refused changes", e))?;
        Ok(skipped)
    }
}

async fn savepoint(tx: &Transaction<'_>, statement: &str) -> Result<(), ConnectorError> {
    tx.batch_execute(statement)
        .await
        .map_err(|e| pg_error("skipping a refused epoch", e))
}
