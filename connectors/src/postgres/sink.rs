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
//! At-most-once (`delivery = 'at_most_once'`): a commit saves the
//! progress row in a transaction of its own before the one that moves the
//! rows; a take-over finds the epoch saved and drops its staged rows, so
//! a crash between loses that epoch instead of repeating it.
//!
//! Receipts: the descriptor counts the rows staged in all, and a commit
//! checks that the stage holds exactly the rows staged since the last
//! commit, so a stage changed outside Weir fails the sink instead of
//! delivering a partial epoch.
//!
//! Skipping ([`skip`]): with `on_error = 'skip'` an epoch the target
//! refuses is set aside instead of failing the sink, and recorded by the
//! commit that passes it.
//!
//! Also here: [`lines`] (changes as COPY text), [`take_over`] (the first
//! connection's transaction).

mod lines;
mod skip;
mod take_over;

use std::collections::HashSet;

use async_trait::async_trait;
use bytes::Bytes;
use futures::SinkExt;
use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, Transaction};
use weir_common::ChangeBatch;

use self::skip::DEAD_LETTER;
use super::target::{check_target, create_target, target_exists};
use super::{Mode, NAME, Target, pg_error, quote};
use crate::{ConnectorError, Sink, SinkOpen, Skips};

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
    /// `on_error` skips (so the refused table exists and commits read it),
    /// and whether this open skips already (`retry_and_skip` skips only
    /// once its retries are spent).
    skips: bool,
    skip_now: bool,
    dead_letter: bool,
    /// `"schema"."weir_refused_<table>"` and `"schema"."weir_dead_letter"`.
    refused: String,
    dead_letters: String,
}

pub(crate) struct PostgresSink {
    tables: Tables,
    /// The latest seal's epoch and descriptor, until the connection is made.
    sealed: Option<(u64, Descriptor)>,
    client: Option<Client>,
    /// COPY lines of changes written and not yet staged.
    pending: Vec<u8>,
    pending_rows: u64,
    /// Where each epoch's lines start in `pending`, and how many there
    /// are: a refused epoch is staged apart from the others.
    pending_epochs: Vec<(u64, usize, u64)>,
    /// Lines of rows refused as written (a NULL key), with the error,
    /// staged into the refused table at the next pre-commit.
    pending_refused: Vec<u8>,
    pending_refused_error: Option<String>,

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
    /// What it skipped in all, as of the latest commit.
    skipped: Skips,
    /// What it encoded since its last receipt.
    tally: crate::Tally,
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
        let on_error = target.recovery.on_error;
        Ok(Self {
            tables: Tables {
                name: open.name.to_string(),
                generation: open.generation,
                progress,
                stage,
                skips: on_error.skips(),
                skip_now: on_error.skips_after(open.failures),
                dead_letter: target.recovery.dead_letter,
                refused: target.beside(&name_beside("weir_refused_", &target.table)),
                dead_letters: target.beside(DEAD_LETTER),
                target,
            },
            sealed,
            client: None,
            pending: Vec::new(),
            pending_rows: 0,
            pending_epochs: Vec::new(),
            pending_refused: Vec::new(),
            pending_refused_error: None,
            staged_rows: sealed.map_or(0, |(_, d)| d.staged_rows),
            staged_through: committed,
            committed,
            keys: HashSet::new(),
            keys_epoch: 0,
            truncate_pending: false,
            skipped: Skips::default(),
            tally: crate::Tally::default(),
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
                let (truncate_pending, skipped) = self
                    .tables
                    .take_over(&mut client, &types, self.sealed)
                    .await?;
                self.truncate_pending = truncate_pending;
                self.skipped = skipped;
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
}

impl Tables {
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
        skipped: &Skips,
    ) -> Result<Skips, ConnectorError> {
        let row = tx
            .query_one(
                &format!(
                    "UPDATE {} SET generation = $2, epoch = $3, rows = $4, sink = $5, \
                 destination_generation = $6, truncate_pending = $7, updated_at = now(), \
                 skipped_epochs = skipped_epochs + $8, skipped_rows = skipped_rows + $9, \
                 last_skip_error = coalesce($10, last_skip_error) \
                 WHERE target = $1 RETURNING skipped_epochs, skipped_rows, last_skip_error",
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
                    &(skipped.epochs as i64),
                    &(skipped.rows as i64),
                    &skipped.last_error,
                ],
            )
            .await
            .map_err(|e| pg_error("updating the progress row", e))?;
        Ok(Skips {
            epochs: row.get::<_, i64>(0) as u64,
            rows: row.get::<_, i64>(1) as u64,
            last_error: row.get(2),
        })
    }

    /// Moves the staged epochs after `from.epoch` up to `to` into the
    /// target, checking the stage holds the `staged_rows - from.rows` rows
    /// staged since; the caller clears them from the stage. Skipping, an
    /// epoch the target refuses is set aside; returns what was skipped.
    async fn apply(
        &self,
        tx: &Transaction<'_>,
        from: Progress,
        to: u64,
        staged_rows: u64,
    ) -> Result<Skips, ConnectorError> {
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
        if self.skip_now {
            self.move_skipping(tx, from.epoch, to).await?;
        } else {
            self.move_epochs(tx, from.epoch, to).await?;
        }
        if self.skips {
            return self.take_refused(tx, from.epoch, to).await;
        }
        Ok(Skips::default())
    }

    /// Moves the staged epochs of `(after, through]` into the target.
    async fn move_epochs(
        &self,
        tx: &Transaction<'_>,
        after: u64,
        through: u64,
    ) -> Result<(), ConnectorError> {
        let (after, through) = (after as i64, through as i64);
        let range: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&after, &through];
        let within = "weir_epoch > $1 AND weir_epoch <= $2";
        let target = self.target.qualified();
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
            Some(row) => Err(ConnectorError::Refused {
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

    /// Stages `pending` (the lines of `epochs`, `rows` in all); skipping,
    /// when the target refuses them, stages epoch by epoch and sets the
    /// refused epochs aside. Returns the rows staged.
    async fn stage_or_refuse(
        &self,
        client: &mut Client,
        pending: Bytes,
        epochs: &[(u64, usize, u64)],
        rows: u64,
    ) -> Result<u64, ConnectorError> {
        Ok(
            match self.stage_pending(client, pending.clone(), rows).await {
                Ok(()) => rows,
                Err(e) if e.is_refused_data() && self.skip_now => {
                    // Stage epoch by epoch, setting aside those refused.
                    let mut staged = 0;
                    for (i, &(_, start, rows)) in epochs.iter().enumerate() {
                        let end = epochs.get(i + 1).map_or(pending.len(), |next| next.1);
                        let lines = pending.slice(start..end);
                        if lines.is_empty() {
                            continue;
                        }
                        match self.stage_pending(client, lines.clone(), rows).await {
                            Ok(()) => staged += rows,
                            Err(e) if e.is_refused_data() => {
                                self.refuse(client, lines, &e.to_string()).await?;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    staged
                }
                Err(e) => return Err(e),
            },
        )
    }

    /// Copies `pending` (`rows` lines) into the stage, holding the
    /// progress row for share so no take-over happens between the check
    /// and the copy; the server must report copying every line.
    async fn stage_pending(
        &self,
        client: &mut Client,
        pending: Bytes,
        rows: u64,
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
        let copied = copy_lines(&tx, &statement, pending, "staging an epoch").await?;
        if copied != rows {
            return Err(ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "staging into {} copied {copied} rows where {rows} lines were sent",
                    self.stage
                ),
            });
        }
        tx.commit()
            .await
            .map_err(|e| pg_error("staging an epoch", e))
    }
}

/// Sends `lines` to `statement` (a `COPY ... FROM STDIN`) in pieces;
/// the rows the server says it copied.
async fn copy_lines(
    tx: &Transaction<'_>,
    statement: &str,
    lines: Bytes,
    doing: &str,
) -> Result<u64, ConnectorError> {
    let copy = tx
        .copy_in(statement)
        .await
        .map_err(|e| pg_error(doing, e))?;
    futures::pin_mut!(copy);
    let mut at = 0;
    while at < lines.len() {
        let end = (at + COPY_CHUNK).min(lines.len());
        copy.send(lines.slice(at..end))
            .await
            .map_err(|e| pg_error(doing, e))?;
        at = end;
    }
    copy.finish().await.map_err(|e| pg_error(doing, e))
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

    fn receipt(&mut self) -> crate::Receipt {
        self.tally.take()
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<String, ConnectorError> {
        let epochs = std::mem::take(&mut self.pending_epochs);
        if self.pending.is_empty() && self.pending_refused.is_empty() {
            // Nothing to stage, but a first call still takes the sink over.
            self.connected().await?;
            return Ok(self.descriptor());
        }
        let pending = Bytes::from(std::mem::take(&mut self.pending));
        let rows = std::mem::take(&mut self.pending_rows);
        let refused = Bytes::from(std::mem::take(&mut self.pending_refused));
        let refused_error = self.pending_refused_error.take().unwrap_or_default();
        let (client, tables) = self.connected().await?;
        if !refused.is_empty() {
            tables.refuse(client, refused, &refused_error).await?;
        }
        let staged = if pending.is_empty() {
            // Only refused rows: nothing to stage.
            0
        } else {
            tables
                .stage_or_refuse(client, pending, &epochs, rows)
                .await?
        };
        self.staged_rows += staged;
        // Even with every row refused: the commit records the refusal.
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
        let mut tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("starting a transaction", e))?;
        let stored = tables.lock_progress(&tx).await?;
        let mut totals = None;
        if stored.epoch < epoch {
            if tables.target.at_most_once {
                // Save, then handle: the progress row commits first, so a
                // crash or an error before the rows move loses them, and
                // nothing ever moves them twice.
                tables
                    .set_progress(
                        &tx,
                        epoch,
                        descriptor.staged_rows,
                        stored.truncate_pending,
                        &Skips::default(),
                    )
                    .await?;
                tx.commit()
                    .await
                    .map_err(|e| pg_error("saving the progress row", e))?;
                tx = client
                    .transaction()
                    .await
                    .map_err(|e| pg_error("starting a transaction", e))?;
                tables.lock_progress(&tx).await?;
            }
            let skipped = tables
                .apply(&tx, stored, epoch, descriptor.staged_rows)
                .await?;
            tables
                .clear_stage(&tx, later_staged.then_some(epoch))
                .await?;
            totals = Some(
                tables
                    .set_progress(&tx, epoch, descriptor.staged_rows, false, &skipped)
                    .await?,
            );
        }
        tx.commit()
            .await
            .map_err(|e| pg_error("committing an epoch", e))?;
        if let Some(totals) = totals {
            self.skipped = totals;
        }
        self.committed = epoch;
        self.truncate_pending = false;
        Ok(())
    }

    fn skipped(&self) -> Option<Skips> {
        self.tables.skips.then(|| self.skipped.clone())
    }

    async fn abort(&mut self, epoch: u64) -> Result<(), ConnectorError> {
        self.pending.clear();
        self.pending_rows = 0;
        self.pending_epochs.clear();
        self.pending_refused.clear();
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
        if tables.skips {
            tx.execute(
                &format!("DELETE FROM {} WHERE weir_epoch > $1", tables.refused),
                &[&(epoch as i64)],
            )
            .await
            .map_err(|e| pg_error("dropping refused changes", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| pg_error("dropping staged changes", e))
    }
}

/// The stage table's name for target table `table` (in its schema):
/// PostgreSQL cuts names at 63 bytes, so a long one keeps a hash of the
/// whole to stay distinct.
fn stage_name(table: &str) -> String {
    name_beside("weir_stage_", table)
}

/// `prefix` + `table`, cut to PostgreSQL's 63 bytes with a hash of the
/// whole when longer.
fn name_beside(prefix: &str, table: &str) -> String {
    let full = format!("{prefix}{table}");
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
