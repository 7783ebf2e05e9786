//! The postgres sink's exactly-once protocol.
//!
//! Beside the target table `T` live two tables of Weir's, in `T`'s schema:
//! - `weir_sink_progress`, one row per target table (naming the sink that
//!   writes it): the `generation` of the Weir process writing it, the last
//!   `epoch` committed to `T`, and `rows`, how many staged rows that
//!   epoch's descriptor counted in all;
//! - the sink's stage, `weir_stage_<T>`: `T`'s columns (with `T`'s types)
//!   plus `weir_epoch` and `weir_weight`, holding changes staged but not
//!   yet committed.
//!
//! Per epoch E: `write` encodes E's changes as COPY text in memory;
//! `pre_commit(E)` copies them into the stage (durable in PostgreSQL before
//! Weir seals E); after the seal, `commit(E)` moves every staged epoch up
//! to E into `T`, deletes them from the stage and sets the progress row to
//! E, all in one transaction. A commit whose epoch the progress row
//! already holds does nothing, so committing again after a crash is safe.
//!
//! Fencing: every transaction first locks the progress row and checks its
//! generation. Opening takes the row over (its generation set to ours)
//! after re-committing the sealed epoch and deleting what was staged after
//! it, so a deposed process's stage writes either landed before (and are
//! deleted) or find a newer generation and fail; it can never commit.
//!
//! First fill: a sink opened with nothing sealed (new, or a destination's
//! new generation) may find rows in the target. `on_existing = 'error'`
//! refuses to start; `'truncate'` marks the progress row, and the first
//! commit empties the target in its own transaction, so readers see the
//! old contents until the new ones are complete.
//!
//! Receipts: the descriptor counts the rows staged in all, and a commit
//! checks that the stage holds exactly the rows staged since the last
//! commit, so a stage changed outside Weir fails the sink instead of
//! delivering a partial epoch.

use std::collections::HashSet;
use std::io::Write;

use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use bytes::Bytes;
use futures::SinkExt;
use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, Transaction};
use weir_common::ChangeBatch;

use super::copy_text::{ColumnText, format_options};
use super::target::{check_target, create_target, target_exists, target_holds_rows};
use super::{Mode, NAME, OnExisting, Target, pg_error, quote};
use crate::{ConnectorError, Sink, SinkOpen};

/// The progress table's name, in the target's schema.
const PROGRESS: &str = "weir_sink_progress";
/// COPY data is sent in pieces of at most this many bytes.
const COPY_CHUNK: usize = 1 << 20;

/// What a seal stores for this sink.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Descriptor {
    /// The generation that staged it.
    generation: u64,
    /// Rows staged by this sink in all, up to the descriptor's epoch.
    staged_rows: u64,
}

impl Descriptor {
    fn parse(text: &str) -> Result<Self, ConnectorError> {
        serde_json::from_str(text).map_err(|e| ConnectorError::BadPosition {
            connector: NAME.into(),
            value: text.to_string(),
            message: e.to_string(),
        })
    }
}

/// The sink's identity and the tables it writes, beside its target: what
/// every transaction of the protocol needs.
struct Tables {
    name: String,
    target: Target,
    generation: u64,
    /// `"schema"."weir_sink_progress"` and `"schema"."weir_stage_<table>"`.
    progress: String,
    stage: String,
}

pub(crate) struct PostgresSink {
    tables: Tables,
    /// The latest seal's epoch and descriptor, until the connection is made.
    sealed: Option<(u64, Descriptor)>,
    client: Option<Client>,
    /// COPY lines of changes written and not yet staged.
    pending: Vec<u8>,
    pending_rows: u64,
    /// Rows staged in all (what the next descriptor says).
    staged_rows: u64,
    /// The latest epoch staged, and the latest committed.
    staged_through: u64,
    committed: u64,
    /// Upsert: the keys inserted in epoch `keys_epoch`, to refuse a second.
    keys: HashSet<Box<[u8]>>,
    keys_epoch: u64,
    /// The first fill's truncate is still to be committed.
    truncate_pending: bool,
}

impl PostgresSink {
    pub(crate) fn new(open: SinkOpen<'_>, target: Target) -> Result<Self, ConnectorError> {
        let sealed = open
            .sealed
            .map(|(epoch, text)| Descriptor::parse(text).map(|d| (epoch, d)))
            .transpose()?;
        let progress = target.beside(PROGRESS);
        let stage = target.beside(&stage_name(&target.table));
        let committed = sealed.map_or(0, |(epoch, _)| epoch);
        Ok(Self {
            tables: Tables {
                name: open.name.to_string(),
                target,
                generation: open.generation,
                progress,
                stage,
            },
            sealed,
            client: None,
            pending: Vec::new(),
            pending_rows: 0,
            staged_rows: sealed.map_or(0, |(_, d)| d.staged_rows),
            staged_through: committed,
            committed,
            keys: HashSet::new(),
            keys_epoch: 0,
            truncate_pending: false,
        })
    }

    /// The connection (made on first use, when the sink also takes its
    /// progress row over: [`Tables::take_over`]) and the tables it writes.
    async fn connected(&mut self) -> Result<(&mut Client, &Tables), ConnectorError> {
        let client = match self.client.take() {
            Some(client) => client,
            None => {
                let mut client = self.tables.target.connect().await?;
                let target = &self.tables.target;
                if target.create_table
                    && self.sealed.is_none()
                    && !target_exists(&client, target).await?
                {
                    create_target(&client, target).await?;
                }
                let types = check_target(&client, &self.tables.target).await?;
                self.truncate_pending = self
                    .tables
                    .take_over(&mut client, &types, self.sealed)
                    .await?;
                self.sealed = None;
                client
            }
        };
        Ok((self.client.insert(client), &self.tables))
    }

    fn descriptor(&self) -> String {
        serde_json::to_string(&Descriptor {
            generation: self.tables.generation,
            staged_rows: self.staged_rows,
        })
        .expect("descriptors serialize")
    }

    /// Encodes `changes` as stage lines of `epoch`.
    fn encode(&mut self, epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        let rows = changes.rows();
        let weights = changes.weights().values();
        let options = format_options();
        let columns = rows
            .columns()
            .iter()
            .map(|a| ColumnText::new(NAME, a, &options))
            .collect::<Result<Vec<_>, _>>()?;
        let keys = if self.tables.target.mode == Mode::Upsert {
            if self.keys_epoch != epoch {
                self.keys.clear();
                self.keys_epoch = epoch;
            }
            let key_columns: Vec<_> = self
                .tables
                .target
                .key
                .iter()
                .map(|&k| rows.column(k).clone())
                .collect();
            for (&k, column) in self.tables.target.key.iter().zip(&key_columns) {
                if column.null_count() > 0 {
                    return Err(ConnectorError::Rejected {
                        connector: NAME.into(),
                        message: format!(
                            "sink {} got a row whose key column {} is NULL; an upsert needs every key",
                            self.tables.name,
                            rows.schema().field(k).name()
                        ),
                    });
                }
            }
            let converter = RowConverter::new(
                key_columns
                    .iter()
                    .map(|c| SortField::new(c.data_type().clone()))
                    .collect(),
            )
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
            Some(
                converter
                    .convert_columns(&key_columns)
                    .map_err(|e| ConnectorError::arrow(NAME, e))?,
            )
        } else {
            None
        };
        let mut scratch = String::new();
        let mut line = |out: &mut Vec<u8>, row: usize, weight: i64| {
            // Writing into a Vec cannot fail; no String per row.
            let _ = write!(out, "{epoch}\t{weight}");
            for column in &columns {
                out.push(b'\t');
                column.write(row, out, &mut scratch);
            }
            out.push(b'\n');
        };
        for (row, &weight) in weights.iter().enumerate() {
            match self.tables.target.mode {
                Mode::Append if !self.tables.target.changelog && weight < 0 => {
                    return Err(ConnectorError::Rejected {
                        connector: NAME.into(),
                        message: format!(
                            "append sink {} got a retraction, which it cannot write: use mode = 'upsert' with a key, or format = 'changelog'",
                            self.tables.name
                        ),
                    });
                }
                Mode::Append => {
                    let sign = weight.signum();
                    for _ in 0..weight.unsigned_abs() {
                        line(&mut self.pending, row, sign);
                        self.pending_rows += 1;
                    }
                }
                Mode::Upsert => {
                    if weight > 0
                        && let Some(keys) = &keys
                    {
                        if weight > 1 || !self.keys.insert(keys.row(row).as_ref().into()) {
                            return Err(ConnectorError::Rejected {
                                connector: NAME.into(),
                                message: format!(
                                    "sink {} got two rows with one key ({}) in epoch {epoch}: the key is not unique in its input",
                                    self.tables.name,
                                    self.tables.key_list()
                                ),
                            });
                        }
                    }
                    if weight != 0 {
                        line(&mut self.pending, row, weight.signum());
                        self.pending_rows += 1;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Tables {
    /// Takes the sink's progress row over from whoever wrote it before:
    /// re-commits `sealed` if the row lags it, deletes what was staged
    /// after it and sets this process's generation, in one transaction.
    /// Returns whether the first fill's truncate is still to commit.
    async fn take_over(
        &self,
        client: &mut Client,
        types: &[String],
        sealed: Option<(u64, Descriptor)>,
    ) -> Result<bool, ConnectorError> {
        // The last two columns came with destinations: added to a
        // progress table made before them.
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {p} (target text PRIMARY KEY, sink text NOT NULL, \
                 generation bigint NOT NULL, epoch bigint NOT NULL, rows bigint NOT NULL, \
                 updated_at timestamptz NOT NULL DEFAULT now()); \
                 ALTER TABLE {p} ADD COLUMN IF NOT EXISTS destination_generation bigint, \
                 ADD COLUMN IF NOT EXISTS truncate_pending boolean NOT NULL DEFAULT false",
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
        let create_stage = format!(
            "CREATE TABLE IF NOT EXISTS {} (weir_epoch bigint NOT NULL, weir_weight bigint NOT NULL{stage_columns})",
            self.stage
        );
        let target = self.target.qualified();
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("starting a transaction", e))?;
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
        match sealed {
            None => {
                // Nothing of this sink was ever sealed, so nothing of it was
                // committed: a row or a stage left here is an earlier sink's.
                tx.batch_execute(&format!(
                    "DROP TABLE IF EXISTS {}; {create_stage}",
                    self.stage
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
                self.set_progress(&tx, 0, 0, truncate_pending).await?;
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
                if stored.epoch < epoch {
                    self.apply(&tx, stored, epoch, descriptor.staged_rows)
                        .await?;
                    truncate_pending = false;
                }
                // Applied, or staged after the seal and produced again.
                self.clear_stage(&tx, None).await?;
                self.set_progress(&tx, epoch, descriptor.staged_rows, truncate_pending)
                    .await?;
            }
        }
        tx.commit()
            .await
            .map_err(|e| pg_error("taking the sink over", e))?;
        Ok(truncate_pending)
    }

    /// Locks the progress row for update and fails if a newer generation
    /// holds it.
    async fn lock_progress(&self, tx: &Transaction<'_>) -> Result<Progress, ConnectorError> {
        self.lock(tx, "UPDATE").await
    }

    /// Locks the sink's progress row (`FOR UPDATE` or `FOR SHARE`) and
    /// fails if a newer generation holds it.
    async fn lock(&self, tx: &Transaction<'_>, how: &str) -> Result<Progress, ConnectorError> {
        let row = tx
            .query_opt(
                &format!(
                    "SELECT generation, epoch, rows, truncate_pending FROM {} WHERE target = $1 FOR {how}",
                    self.progress
                ),
                &[&self.target.qualified()],
            )
            .await
            .map_err(|e| pg_error("locking the progress row", e))?
            .ok_or_else(|| ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "the progress row of sink {} in {} was deleted while the sink ran",
                    self.name, self.progress
                ),
            })?;
        let stored = Progress {
            generation: row.get::<_, i64>(0) as u64,
            epoch: row.get::<_, i64>(1) as u64,
            rows: row.get::<_, i64>(2) as u64,
            truncate_pending: row.get(3),
        };
        if stored.generation > self.generation {
            return Err(ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "sink {} is written by a newer Weir process (generation {}, this one is {}): this process was deposed",
                    self.name, stored.generation, self.generation
                ),
            });
        }
        Ok(stored)
    }

    async fn set_progress(
        &self,
        tx: &Transaction<'_>,
        epoch: u64,
        rows: u64,
        truncate_pending: bool,
    ) -> Result<(), ConnectorError> {
        tx.execute(
            &format!(
                "UPDATE {} SET generation = $2, epoch = $3, rows = $4, sink = $5, \
                 destination_generation = $6, truncate_pending = $7, updated_at = now() \
                 WHERE target = $1",
                self.progress
            ),
            &[
                &self.target.qualified(),
                &(self.generation as i64),
                &(epoch as i64),
                &(rows as i64),
                &self.name,
                &self.target.destination_generation.map(|g| g as i64),
                &truncate_pending,
            ],
        )
        .await
        .map_err(|e| pg_error("updating the progress row", e))?;
        Ok(())
    }

    /// Moves the staged epochs after `from.epoch` up to `to` into the
    /// target, checking the stage holds the `staged_rows - from.rows` rows
    /// staged since; the caller clears them from the stage.
    async fn apply(
        &self,
        tx: &Transaction<'_>,
        from: Progress,
        to: u64,
        staged_rows: u64,
    ) -> Result<(), ConnectorError> {
        let (after, through) = (from.epoch as i64, to as i64);
        let range: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&after, &through];
        let within = "weir_epoch > $1 AND weir_epoch <= $2";
        let held: i64 = tx
            .query_one(
                &format!("SELECT count(*) FROM {} WHERE {within}", self.stage),
                &range,
            )
            .await
            .map_err(|e| pg_error("counting staged rows", e))?
            .get(0);
        let expected = staged_rows.saturating_sub(from.rows);
        if held as u64 != expected {
            return Err(ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "the stage {} holds {held} rows of epochs {}..={to} where {expected} were staged: it was changed outside Weir, so those epochs cannot be delivered exactly",
                    self.stage,
                    from.epoch + 1
                ),
            });
        }
        let target = self.target.qualified();
        if from.truncate_pending {
            tx.batch_execute(&format!("TRUNCATE {target}"))
                .await
                .map_err(|e| pg_error(&format!("emptying {target} for the first fill"), e))?;
        }
        if self.target.mode == Mode::Upsert {
            self.check_keys_stay_unique(tx, &range).await?;
        }
        let columns = self.column_list();
        let statements: Vec<String> = match self.target.mode {
            Mode::Append if self.target.changelog => vec![format!(
                "INSERT INTO {target} ({columns}, weir_op, weir_epoch) \
                 SELECT {columns}, CASE WHEN weir_weight > 0 THEN 'insert' ELSE 'delete' END, weir_epoch \
                 FROM {} WHERE {within} ORDER BY weir_epoch",
                self.stage
            )],
            Mode::Append => vec![format!(
                "INSERT INTO {target} ({columns}) SELECT {columns} FROM {} WHERE {within}",
                self.stage
            )],
            Mode::Upsert => {
                let key = self.key_list();
                let matches = self.key_matches();
                vec![
                    format!(
                        "DELETE FROM {target} AS t USING (SELECT DISTINCT {key} FROM {} WHERE {within}) AS l WHERE {matches}",
                        self.stage
                    ),
                    // The latest epoch's change of each key wins; within it an
                    // insert (the new row) over the retraction of the old.
                    format!(
                        "INSERT INTO {target} ({columns}) SELECT {columns} FROM \
                         (SELECT DISTINCT ON ({key}) * FROM {} WHERE {within} \
                          ORDER BY {key}, weir_epoch DESC, weir_weight DESC) AS l \
                         WHERE l.weir_weight > 0",
                        self.stage
                    ),
                ]
            }
        };
        for statement in statements {
            tx.execute(&statement, &range)
                .await
                .map_err(|e| pg_error(&format!("writing to {target}"), e))?;
        }
        Ok(())
    }

    /// Fails when the staged epochs would leave two rows with one key:
    /// a key whose changes add a row (net weight 1) while the target has
    /// one, or add two. The upsert would silently keep one of them, so
    /// the key does not identify the sink's rows.
    async fn check_keys_stay_unique(
        &self,
        tx: &Transaction<'_>,
        range: &[&(dyn tokio_postgres::types::ToSql + Sync); 2],
    ) -> Result<(), ConnectorError> {
        let key = self.key_list();
        let matches = self.key_matches();
        let duplicate = tx
            .query_opt(
                &format!(
                    "SELECT ({key})::text FROM (SELECT {key}, sum(weir_weight) AS net FROM {} \
                     WHERE weir_epoch > $1 AND weir_epoch <= $2 GROUP BY {key}) AS l \
                     WHERE l.net > 1 OR (l.net = 1 AND EXISTS (SELECT 1 FROM {} AS t WHERE {matches})) \
                     LIMIT 1",
                    self.stage,
                    self.target.qualified()
                ),
                range,
            )
            .await
            .map_err(|e| pg_error("checking the upsert keys", e))?;
        match duplicate {
            None => Ok(()),
            Some(row) => Err(ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "sink {} would hold two rows with key ({key}) = {}: the key does not identify one row of its input (for a GROUP BY, key by the grouping columns)",
                    self.name,
                    row.get::<_, Option<String>>(0).unwrap_or_default()
                ),
            }),
        }
    }

    /// Empties the stage of the epochs up to `through`, or of everything
    /// when nothing was staged after them (TRUNCATE: no dead rows left
    /// for vacuum, which halves PostgreSQL's work per staged row).
    async fn clear_stage(
        &self,
        tx: &Transaction<'_>,
        through: Option<u64>,
    ) -> Result<(), ConnectorError> {
        let cleared = match through {
            Some(epoch) => tx
                .execute(
                    &format!("DELETE FROM {} WHERE weir_epoch <= $1", self.stage),
                    &[&(epoch as i64)],
                )
                .await
                .map(drop),
            None => tx.batch_execute(&format!("TRUNCATE {}", self.stage)).await,
        };
        cleared.map_err(|e| pg_error("clearing the stage", e))
    }

    fn column_list(&self) -> String {
        self.target
            .columns
            .fields()
            .iter()
            .map(|f| quote(f.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `t.k = l.k AND ...` over the key columns: a target row `t` whose
    /// key is that of a staged change `l`.
    fn key_matches(&self) -> String {
        self.target
            .key
            .iter()
            .map(|&k| {
                let c = quote(self.target.columns.field(k).name());
                format!("t.{c} = l.{c}")
            })
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    fn key_list(&self) -> String {
        self.target
            .key
            .iter()
            .map(|&k| quote(self.target.columns.field(k).name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Copies `pending` into the stage, holding the progress row for
    /// share so no take-over happens between the check and the copy.
    async fn stage_pending(
        &self,
        client: &mut Client,
        pending: Bytes,
    ) -> Result<(), ConnectorError> {
        let statement = format!(
            "COPY {} (weir_epoch, weir_weight, {}) FROM STDIN",
            self.stage,
            self.column_list()
        );
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("starting a transaction", e))?;
        self.lock(&tx, "SHARE").await?;
        let copy = tx
            .copy_in(&statement)
            .await
            .map_err(|e| pg_error("staging an epoch", e))?;
        futures::pin_mut!(copy);
        let mut at = 0;
        while at < pending.len() {
            let end = (at + COPY_CHUNK).min(pending.len());
            copy.send(pending.slice(at..end))
                .await
                .map_err(|e| pg_error("staging an epoch", e))?;
            at = end;
        }
        copy.finish()
            .await
            .map_err(|e| pg_error("staging an epoch", e))?;
        tx.commit()
            .await
            .map_err(|e| pg_error("staging an epoch", e))
    }
}

/// The progress row as read.
#[derive(Debug, Clone, Copy)]
struct Progress {
    generation: u64,
    epoch: u64,
    rows: u64,
    /// The first fill's truncate is still to commit.
    truncate_pending: bool,
}

#[async_trait]
impl Sink for PostgresSink {
    async fn write(&mut self, epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        self.encode(epoch, changes)
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<String, ConnectorError> {
        if self.pending.is_empty() {
            // Nothing to stage, but a first call still takes the sink over.
            self.connected().await?;
            return Ok(self.descriptor());
        }
        let pending = Bytes::from(std::mem::take(&mut self.pending));
        let rows = std::mem::take(&mut self.pending_rows);
        let (client, tables) = self.connected().await?;
        tables.stage_pending(client, pending).await?;
        self.staged_rows += rows;
        self.staged_through = epoch;
        Ok(self.descriptor())
    }

    async fn commit(&mut self, epoch: u64, descriptor: &str) -> Result<(), ConnectorError> {
        if epoch <= self.committed {
            return Ok(());
        }
        let descriptor = Descriptor::parse(descriptor)?;
        let nothing_staged = self.staged_through <= self.committed && !self.truncate_pending;
        let later_staged = self.staged_through > epoch;
        let (client, tables) = self.connected().await?;
        if nothing_staged {
            // Nothing staged since the last commit: the progress row may
            // lag, and the next take-over finds nothing between.
            self.committed = epoch;
            return Ok(());
        }
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("starting a transaction", e))?;
        let stored = tables.lock_progress(&tx).await?;
        if stored.epoch < epoch {
            tables
                .apply(&tx, stored, epoch, descriptor.staged_rows)
                .await?;
            tables
                .clear_stage(&tx, later_staged.then_some(epoch))
                .await?;
            tables
                .set_progress(&tx, epoch, descriptor.staged_rows, false)
                .await?;
        }
        tx.commit()
            .await
            .map_err(|e| pg_error("committing an epoch", e))?;
        self.committed = epoch;
        self.truncate_pending = false;
        Ok(())
    }

    async fn abort(&mut self, epoch: u64) -> Result<(), ConnectorError> {
        self.pending.clear();
        self.pending_rows = 0;
        let (client, tables) = self.connected().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("starting a transaction", e))?;
        tables.lock_progress(&tx).await?;
        tx.execute(
            &format!("DELETE FROM {} WHERE weir_epoch > $1", tables.stage),
            &[&(epoch as i64)],
        )
        .await
        .map_err(|e| pg_error("dropping staged changes", e))?;
        tx.commit()
            .await
            .map_err(|e| pg_error("dropping staged changes", e))
    }
}

/// The stage table's name for target table `table` (in its schema):
/// PostgreSQL cuts names at 63 bytes, so a long one keeps a hash of the
/// whole to stay distinct.
fn stage_name(table: &str) -> String {
    let full = format!("weir_stage_{table}");
    if full.len() <= 63 {
        return full;
    }
    let hash = crc32fast::hash(table.as_bytes());
    let mut cut = 63 - 9;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}_{hash:08x}", &full[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_sink_names_keep_distinct_stage_names() {
        assert_eq!(stage_name("alerts"), "weir_stage_alerts");
        let a = stage_name(&"a".repeat(80));
        let b = stage_name(&format!("{}b", "a".repeat(79)));
        assert!(a.len() <= 63 && b.len() <= 63);
        assert_ne!(a, b);
    }
}
