//! Taking a sink's target over at its first connection: the progress
//! row, the stage (and, skipping, the refused and dead-letter tables)
//! created if missing, the sealed epoch re-committed, what was staged
//! after it dropped, and this process's generation set.

use tokio_postgres::Client;

use super::{Descriptor, Tables};
use crate::postgres::target::target_holds_rows;
use crate::postgres::{NAME, OnExisting, pg_error, quote};
use crate::{ConnectorError, Skips};

/// Serializes the creation of the tables sinks share in one database (the
/// progress and dead-letter tables): PostgreSQL's `CREATE TABLE IF NOT
/// EXISTS` is not safe against a concurrent one (it fails on
/// `pg_type_typname_nsp_index`), and sinks open concurrently.
const SHARED_TABLES_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('weir: sink tables'))";

impl Tables {
    /// Takes the sink's progress row over from whoever wrote it before:
    /// re-commits `sealed` if the row lags it, deletes what was staged
    /// after it and sets this process's generation, in one transaction.
    /// Returns whether the first fill's truncate is still to commit, and
    /// what the sink skipped in all.
    pub(super) async fn take_over(
        &self,
        client: &mut Client,
        types: &[String],
        sealed: Option<(u64, Descriptor)>,
    ) -> Result<(bool, Skips), ConnectorError> {
        // The last columns came later: added to a progress table made
        // before them. One implicit transaction, under the lock.
        client
            .batch_execute(&format!(
                "{SHARED_TABLES_LOCK}; CREATE TABLE IF NOT EXISTS {p} (target text PRIMARY KEY, sink text NOT NULL, \
                 generation bigint NOT NULL, epoch bigint NOT NULL, rows bigint NOT NULL, \
                 updated_at timestamptz NOT NULL DEFAULT now()); \
                 ALTER TABLE {p} ADD COLUMN IF NOT EXISTS destination_generation bigint, \
                 ADD COLUMN IF NOT EXISTS truncate_pending boolean NOT NULL DEFAULT false, \
                 ADD COLUMN IF NOT EXISTS skipped_epochs bigint NOT NULL DEFAULT 0, \
                 ADD COLUMN IF NOT EXISTS skipped_rows bigint NOT NULL DEFAULT 0, \
                 ADD COLUMN IF NOT EXISTS last_skip_error text",
                p = self.progress
            ))
            .await
            .map_err(|e| pg_error("creating the progress table", e))?;
        let stage_columns: String = self
            .target
            .columns
            .fields()
            .iter()
            .zip(types)
            .map(|(f, ty)| format!(", {} {ty}", quote(f.name())))
            .collect();
        let mut create_stage = format!(
            "CREATE TABLE IF NOT EXISTS {} (weir_epoch bigint NOT NULL, weir_weight bigint NOT NULL{stage_columns})",
            self.stage
        );
        if self.skips {
            create_stage = format!("{create_stage}; {}", self.create_skip_tables());
        }
        let target = self.target.qualified();
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("starting a transaction", e))?;
        if self.skips {
            // It creates the shared dead-letter table.
            tx.batch_execute(SHARED_TABLES_LOCK)
                .await
                .map_err(|e| pg_error("locking the sink tables", e))?;
        }
        tx.execute(
            &format!(
                "INSERT INTO {} (target, sink, generation, epoch, rows) VALUES ($1, $2, $3, 0, 0) \
                 ON CONFLICT (target) DO NOTHING",
                self.progress
            ),
            &[&target, &self.name, &(self.generation as i64)],
        )
        .await
        .map_err(|e| pg_error("adding the progress row", e))?;
        let stored = self.lock_progress(&tx).await?;
        let mut truncate_pending = stored.truncate_pending;
        let totals = match sealed {
            None => {
                // Nothing of this sink was ever sealed, so nothing of it was
                // committed: a row or a stage left here is an earlier sink's.
                tx.batch_execute(&format!(
                    "DROP TABLE IF EXISTS {}; DROP TABLE IF EXISTS {}; {create_stage}",
                    self.stage, self.refused
                ))
                .await
                .map_err(|e| pg_error("creating the stage table", e))?;
                truncate_pending = match self.target.on_existing {
                    OnExisting::Keep => false,
                    OnExisting::Truncate => true,
                    OnExisting::Error => {
                        if target_holds_rows(&tx, &self.target).await? {
                            return Err(ConnectorError::Rejected {
                                connector: NAME.into(),
                                message: format!(
                                    "{target} holds rows that sink {} did not write: empty it, or recreate the sink with on_existing = 'truncate'",
                                    self.name
                                ),
                            });
                        }
                        false
                    }
                };
                // What an earlier sink of this target skipped is not ours.
                tx.execute(
                    &format!(
                        "UPDATE {} SET skipped_epochs = 0, skipped_rows = 0, last_skip_error = NULL WHERE target = $1",
                        self.progress
                    ),
                    &[&target],
                )
                .await
                .map_err(|e| pg_error("resetting the progress row", e))?;
                self.set_progress(&tx, 0, 0, truncate_pending, &Skips::default())
                    .await?
            }
            Some((epoch, descriptor)) => {
                tx.batch_execute(&create_stage)
                    .await
                    .map_err(|e| pg_error("creating the stage table", e))?;
                if stored.epoch > epoch {
                    return Err(ConnectorError::Rejected {
                        connector: NAME.into(),
                        message: format!(
                            "{target} holds sink {}'s epoch {} but Weir's latest seal is epoch {epoch}: another Weir writes this target, or this one's state was reset; drop and create the sink again to start over",
                            self.name, stored.epoch
                        ),
                    });
                }
                let mut skipped = Skips::default();
                if stored.epoch < epoch {
                    skipped = self
                        .apply(&tx, stored, epoch, descriptor.staged_rows)
                        .await?;
                    truncate_pending = false;
                }
                // Applied, or staged after the seal and produced again.
                self.clear_stage(&tx, None).await?;
                if self.skips {
                    tx.batch_execute(&format!("TRUNCATE {}", self.refused))
                        .await
                        .map_err(|e| pg_error("clearing refused changes", e))?;
                }
                self.set_progress(
                    &tx,
                    epoch,
                    descriptor.staged_rows,
                    truncate_pending,
                    &skipped,
                )
                .await?
            }
        };
        tx.commit()
            .await
            .map_err(|e| pg_error("taking the sink over", e))?;
        Ok((truncate_pending, totals))
    }
}
