//! The commit path of [`Database`]: group commit of table writes.
//!
//! A commit goes through three steps, and only the first holds the commit
//! lock:
//!
//! 1. **Validate and enqueue** (under `commit_lock`, which guards the
//!    *head*): the writes are applied to the head snapshot, which holds every
//!    commit validated and enqueued so far, durable or not, so a later commit
//!    sees the keys of an earlier one that is still waiting for its `fsync`
//!    (and gets 23505 for a duplicate). The record is enqueued in the table
//!    log, which hands out its LSN there and then, in enqueue order; the head
//!    becomes the new snapshot and the lock is released.
//! 2. **Durability**: the table log's writer folds every record queued
//!    while it was syncing into its next `fsync` (group commit). This is why
//!    the lock must not be held across the `fsync`.
//! 3. **Publication** (the publisher task): in LSN order, each commit waits
//!    for its own `fsync`, then becomes what readers see (the *published*
//!    snapshot and [`Database::commit_seq`]) and is handed to the streaming
//!    runtime. Only then is the committer answered, so a client is
//!    acknowledged after its `fsync`, and read-your-writes holds: the LSN a
//!    commit returns is published. The task, not the committer's future,
//!    publishes: a committer whose client went away cannot leave a durable
//!    record unpublished or stall the commits behind it.
//!
//! A failed `fsync` poisons the table log: the failed record, every record
//! queued behind it and every later enqueue fail (see `weir_storage`'s table
//! log). So every commit validated on top of the failed one fails and none
//! is published; the publisher marks the head stale and the next commit
//! resets it to the published snapshot. Every write then fails with an error
//! that tells the operator to restart, as PostgreSQL PANICs on a failed
//! `fsync`.
//!
//! Commits with DDL stay fully serialized, as before group commit: under
//! the lock, a DDL commit first waits until every table commit in flight is
//! published (then head and published are the same snapshot), then writes
//! the table log, the control log and publishes, all under the lock. DDL is
//! rare; keeping it out of the pipeline keeps the control log's revision
//! check and the catalog a reader sees simple. [`Database::deploy_projection`]
//! drains the same way, so a projection's backfill and the changes after it
//! meet exactly at the published snapshot.
//!
//! **One apply per write.** A session's overlay already holds the
//! transaction's writes applied to its base snapshot. A table whose version
//! in the head is the very version the transaction started from
//! ([`TableState::same_version`]) takes the overlay's state as is; the
//! others are applied to the head again, which re-checks their keys.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot, watch};
use weir_common::{ChangeBatch, ObjectId};
use weir_engine::runtime::Runtime;
use weir_storage::Appended;

use super::{Database, Snapshot, TxnWrites, projection_changes};
use crate::catalog::ControlEntry;
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::wal::{TableWrite, WalRecord};

/// What readers see: every commit up to the latest published one, and
/// nothing validated after it.
#[derive(Debug)]
pub(super) struct Published {
    snapshot: RwLock<Arc<Snapshot>>,
    /// The table-log LSN of the latest published commit with table writes.
    commit_seq: AtomicU64,
}

impl Published {
    pub(super) fn new(snapshot: Arc<Snapshot>, commit_seq: u64) -> Self {
        Self {
            snapshot: RwLock::new(snapshot),
            commit_seq: AtomicU64::new(commit_seq),
        }
    }

    pub(super) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().clone()
    }

    pub(super) fn commit_seq(&self) -> u64 {
        self.commit_seq.load(Ordering::Acquire)
    }

    /// Makes a commit visible. Called in LSN order only: by the publisher,
    /// or by a DDL commit once nothing else is in flight.
    fn publish(&self, snapshot: Arc<Snapshot>, lsn: Option<u64>) {
        *self.snapshot.write() = snapshot;
        if let Some(lsn) = lsn {
            self.commit_seq.store(lsn, Ordering::Release);
        }
    }
}

/// A table commit, validated against the head and enqueued in the log.
struct Enqueued {
    appended: Appended,
    /// The head after it: what readers see once it is published.
    next: Arc<Snapshot>,
    changes: Vec<(ObjectId, ChangeBatch)>,
    reply: oneshot::Sender<Result<u64, ServerError>>,
}

/// The queue between the commit lock and the publisher task.
pub(super) struct Pipeline {
    queue: mpsc::UnboundedSender<Enqueued>,
    /// Commits submitted and not yet published or failed.
    in_flight: watch::Sender<usize>,
    /// Set by the publisher when a commit failed after entering the head.
    head_stale: Arc<AtomicBool>,
}

impl Pipeline {
    /// Starts the publisher task on the current tokio runtime; it stops
    /// when the pipeline is dropped.
    pub(super) fn start(
        published: Arc<Published>,
        runtime: Arc<Runtime>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (queue, commits) = mpsc::unbounded_channel();
        let (in_flight, _) = watch::channel(0);
        let head_stale = Arc::new(AtomicBool::new(false));
        let publisher = Publisher {
            published,
            runtime,
            metrics,
            in_flight: in_flight.clone(),
            head_stale: head_stale.clone(),
        };
        tokio::spawn(publisher.run(commits));
        Self {
            queue,
            in_flight,
            head_stale,
        }
    }

    /// Hands an enqueued commit to the publisher. Called under the commit
    /// lock, right after the enqueue, so commits arrive in LSN order.
    fn submit(
        &self,
        appended: Appended,
        next: Arc<Snapshot>,
        changes: Vec<(ObjectId, ChangeBatch)>,
    ) -> oneshot::Receiver<Result<u64, ServerError>> {
        let (reply, published) = oneshot::channel();
        self.in_flight.send_modify(|n| *n += 1);
        let commit = Enqueued {
            appended,
            next,
            changes,
            reply,
        };
        if let Err(mpsc::error::SendError(commit)) = self.queue.send(commit) {
            // Only when the runtime is shutting down: the record may still
            // become durable, but nothing will publish it.
            self.in_flight.send_modify(|n| *n -= 1);
            let _ = commit.reply.send(Err(ServerError::internal(
                "the commit publisher has stopped (shutting down)",
            )));
        }
        published
    }

    /// Waits until every submitted commit is published or failed. Called
    /// under the commit lock, so nothing is submitted meanwhile.
    async fn drain(&self) {
        let mut in_flight = self.in_flight.subscribe();
        // Err only if the sender is gone, which `self` rules out.
        let _ = in_flight.wait_for(|n| *n == 0).await;
    }

    /// Whether a commit failed after entering the head (clears the mark).
    fn take_head_stale(&self) -> bool {
        self.head_stale.swap(false, Ordering::AcqRel)
    }
}

/// Publishes commits in LSN order, each after its own `fsync`.
struct Publisher {
    published: Arc<Published>,
    runtime: Arc<Runtime>,
    metrics: Arc<Metrics>,
    in_flight: watch::Sender<usize>,
    head_stale: Arc<AtomicBool>,
}

impl Publisher {
    async fn run(self, mut commits: mpsc::UnboundedReceiver<Enqueued>) {
        while let Some(commit) = commits.recv().await {
            let result = match commit.appended.durable().await {
                Ok(lsn) => {
                    self.published.publish(commit.next.clone(), Some(lsn));
                    self.metrics.commit();
                    // In LSN order, like the publication: the coordinator
                    // sees commits in the order readers do.
                    let tables = commit.next.tables.clone();
                    self.runtime.changes(lsn, commit.changes, tables).await;
                    Ok(lsn)
                }
                Err(e) => {
                    // The log is poisoned: every commit behind this one
                    // fails too, and the head holds writes nobody will see.
                    self.head_stale.store(true, Ordering::Release);
                    Err(e.into())
                }
            };
            // The committer may be gone (its client disconnected): the
            // commit is published all the same.
            let _ = commit.reply.send(result);
            self.in_flight.send_modify(|n| *n -= 1);
        }
    }
}

impl Database {
    /// Makes a transaction's writes durable and visible, or fails without
    /// effect. `base` is the snapshot the transaction started from.
    /// Returns the commit's sequence number (the latest one when it wrote
    /// no table) once the commit is published, which read-your-writes
    /// waits for.
    pub async fn commit(&self, base: &Snapshot, writes: TxnWrites) -> Result<u64, ServerError> {
        self.commit_applied(base, None, writes).await
    }

    /// [`Self::commit`] of a transaction whose writes are already applied
    /// to `base` in `applied` (a session's overlay): tables nobody changed
    /// meanwhile take their state from it instead of applying the writes
    /// again.
    pub async fn commit_applied(
        &self,
        base: &Snapshot,
        applied: Option<&Snapshot>,
        writes: TxnWrites,
    ) -> Result<u64, ServerError> {
        if writes.is_empty() {
            return Ok(self.commit_seq());
        }
        self.table_log.check_poison()?;
        if let Some(reason) = self.runtime.fenced() {
            return Err(ServerError::Fenced(reason.to_string()));
        }
        // Every path that writes (statements, COPY, Flight ingest) ends
        // here: no commit may reach projections ahead of the restore's replay.
        if !self.is_recovered() {
            return Err(ServerError::NotReady(
                "Weir is restoring its projections after a start; writes are accepted once it is ready".into(),
            ));
        }
        if writes.ddl.is_empty() {
            self.commit_tables(base, applied, writes.tables).await
        } else {
            self.commit_serialized(base, applied, writes).await
        }
    }

    /// A commit without DDL: validated and enqueued under the lock,
    /// published by the pipeline after its `fsync`.
    async fn commit_tables(
        &self,
        base: &Snapshot,
        applied: Option<&Snapshot>,
        ops: Vec<(ObjectId, TableWrite)>,
    ) -> Result<u64, ServerError> {
        let published = {
            let mut head = self.commit_lock.lock().await;
            if self.pipeline.take_head_stale() {
                *head = self.published.snapshot();
            }
            let next = apply_to_head(&head, base, applied, &ops)?;
            // Against what committed since the transaction's statements
            // checked them: a parent deleted meanwhile, a child added.
            next.check_foreign_keys(&ops)?;
            let changes = projection_changes(&head, &next, &ops)?;
            let record = WalRecord {
                txn: uuid::Uuid::new_v4(),
                has_ddl: false,
                ops,
            };
            let appended = self.table_log.enqueue(record.encode()?)?;
            let next = Arc::new(next);
            let published = self.pipeline.submit(appended, next.clone(), changes);
            *head = next;
            published
        };
        published.await.map_err(|_| {
            ServerError::internal("the commit publisher stopped before answering (shutting down)")
        })?
    }

    /// A commit with DDL, serialized against every other commit: it waits
    /// for the commits in flight, then writes and publishes under the lock.
    async fn commit_serialized(
        &self,
        base: &Snapshot,
        applied: Option<&Snapshot>,
        writes: TxnWrites,
    ) -> Result<u64, ServerError> {
        let mut head = self.commit_lock.lock().await;
        self.pipeline.drain().await;
        // Nothing in flight: the head is the published snapshot, unless a
        // failed commit left it ahead (then this resets it).
        self.pipeline.take_head_stale();
        *head = self.published.snapshot();
        let previous = head.clone();
        if previous.catalog.revision != base.catalog.revision {
            return Err(ServerError::SerializationFailure(
                "the catalog changed since this transaction started".into(),
            ));
        }
        // A rewrite (ALTER TABLE) holds the whole table as this
        // transaction saw it: a write committed to that table since would
        // be lost under it.
        for (id, op) in &writes.tables {
            if let TableWrite::Rewrite { .. } = op
                && let (Some(now), Some(then)) = (previous.tables.get(id), base.tables.get(id))
                && !now.same_version(then)
            {
                return Err(ServerError::SerializationFailure(
                    "a table this transaction alters was written by a concurrent transaction"
                        .into(),
                ));
            }
        }
        let mut next = (*previous).clone();
        next.apply_catalog(&writes.ddl)?;
        apply_after_ddl(&mut next, &previous, base, applied, &writes.tables)?;
        next.check_foreign_keys(&writes.tables)?;

        let txn = uuid::Uuid::new_v4();
        let mut lsn = None;
        if !writes.tables.is_empty() {
            let record = WalRecord {
                txn,
                has_ddl: true,
                ops: writes.tables.clone(),
            };
            lsn = Some(self.table_log.append(record.encode()?).await?);
            self.metrics.commit();
        }
        let entry = ControlEntry {
            txn,
            changes: writes.ddl,
        };
        let bytes = serde_json::to_vec(&entry).map_err(|e| ServerError::internal(e.to_string()))?;
        let revision = self
            .control_log
            .append(next.catalog.revision, Bytes::from(bytes))
            .await?;
        Arc::make_mut(&mut next.catalog).revision = revision;
        let changes = match lsn {
            Some(_) => projection_changes(&previous, &next, &writes.tables)?,
            None => Vec::new(),
        };
        let next = Arc::new(next);
        self.published.publish(next.clone(), lsn);
        *head = next.clone();
        let Some(lsn) = lsn else {
            return Ok(self.commit_seq());
        };
        // Still under the commit lock: the coordinator sees commits in order.
        self.runtime
            .changes(lsn, changes, next.tables.clone())
            .await;
        Ok(lsn)
    }

    /// Holds the commit lock with no commit in flight: the published
    /// snapshot is the head. What a projection's backfill starts from.
    pub(super) async fn quiesce(&self) -> tokio::sync::MutexGuard<'_, Arc<Snapshot>> {
        let mut head = self.commit_lock.lock().await;
        self.pipeline.drain().await;
        self.pipeline.take_head_stale();
        *head = self.published.snapshot();
        head
    }
}

/// Applies a DDL transaction's table writes to `next` (the head with its
/// catalog changes applied). Its statements applied DDL and writes
/// interleaved, in order, to its overlay (`applied`); here the DDL went
/// first, so writing its rows again could trip an index the transaction
/// created only after them. A table nobody wrote since the transaction
/// began (or that it created) takes the overlay's state instead; only the
/// others get the writes again, checked against what committed meanwhile.
fn apply_after_ddl(
    next: &mut Snapshot,
    previous: &Snapshot,
    base: &Snapshot,
    applied: Option<&Snapshot>,
    ops: &[(ObjectId, TableWrite)],
) -> Result<(), ServerError> {
    let Some(applied) = applied else {
        return next.apply_writes(ops);
    };
    let untouched = |id: &ObjectId| {
        applied.tables.contains_key(id)
            && next.tables.contains_key(id)
            && match (previous.tables.get(id), base.tables.get(id)) {
                (Some(now), Some(then)) => now.same_version(then),
                (None, None) => true,
                _ => false,
            }
    };
    let (keep, redo): (Vec<_>, Vec<_>) = ops.iter().cloned().partition(|(id, _)| untouched(id));
    next.apply_writes(&redo)?;
    if !keep.is_empty() {
        let mut tables = (*next.tables).clone();
        for (id, _) in &keep {
            tables.insert(*id, applied.tables[id].clone());
        }
        next.tables = Arc::new(tables);
    }
    Ok(())
}

/// The head with `ops` applied. A table whose head version is the very
/// version `base` had takes its state from `applied` (`base` with `ops`
/// applied, its keys already checked); the others get `ops` applied again,
/// against what committed since.
fn apply_to_head(
    head: &Snapshot,
    base: &Snapshot,
    applied: Option<&Snapshot>,
    ops: &[(ObjectId, TableWrite)],
) -> Result<Snapshot, ServerError> {
    let mut next = head.clone();
    let Some(applied) = applied else {
        next.apply_writes(ops)?;
        return Ok(next);
    };
    if Arc::ptr_eq(&head.tables, &base.tables) {
        // Nothing committed since the transaction started.
        next.tables = applied.tables.clone();
        return Ok(next);
    }
    let unchanged: HashSet<ObjectId> = ops
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| {
            match (
                head.tables.get(id),
                base.tables.get(id),
                applied.tables.get(id),
            ) {
                (Some(now), Some(then), Some(_)) => now.same_version(then),
                _ => false,
            }
        })
        .collect();
    let changed: Vec<(ObjectId, TableWrite)> = ops
        .iter()
        .filter(|(id, _)| !unchanged.contains(id))
        .cloned()
        .collect();
    next.apply_writes(&changed)?;
    if !unchanged.is_empty() {
        let mut tables = (*next.tables).clone();
        for id in unchanged {
            tables.insert(id, applied.tables[&id].clone());
        }
        next.tables = Arc::new(tables);
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, RecordBatch};
    use weir_pgsem::SqlType;

    use super::*;
    use crate::catalog::model::{ColumnDef, DEFAULT_SCHEMA, TableDef};
    use crate::catalog::{Catalog, CatalogChange};

    const A: ObjectId = ObjectId(1);
    const B: ObjectId = ObjectId(2);

    fn empty_tables() -> Snapshot {
        let mut snapshot = Snapshot {
            catalog: Arc::new(Catalog::bootstrap()),
            tables: Arc::default(),
            projections: Arc::default(),
        };
        let changes: Vec<CatalogChange> = [(A, "a"), (B, "b")]
            .into_iter()
            .map(|(id, name)| {
                CatalogChange::CreateTable(TableDef {
                    id,
                    schema: DEFAULT_SCHEMA.into(),
                    name: name.into(),
                    columns: vec![ColumnDef {
                        name: "k".into(),
                        sql_type: SqlType::Int8,
                        nullable: false,
                        default: None,
                        generated: None,
                    }],
                    primary_key: vec!["k".into()],
                    append_only: false,
                    watermark: None,
                    indexes: Vec::new(),
                    checks: Vec::new(),
                    foreign_keys: Vec::new(),
                    primary_key_name: None,
                })
            })
            .collect();
        snapshot.apply_catalog(&changes).unwrap();
        snapshot
    }

    fn insert(snapshot: &Snapshot, id: ObjectId, keys: &[i64]) -> (ObjectId, TableWrite) {
        let schema = snapshot.tables[&id].schema().clone();
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys.to_vec()))]).unwrap();
        (id, TableWrite::Changes(ChangeBatch::inserts(rows)))
    }

    fn keys(snapshot: &Snapshot, id: ObjectId) -> Vec<i64> {
        let mut keys: Vec<i64> = snapshot.tables[&id]
            .scan()
            .unwrap()
            .iter()
            .flat_map(|b| {
                let column = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                column.values().to_vec()
            })
            .collect();
        keys.sort();
        keys
    }

    /// A transaction over `base` writing `ops`, and its overlay.
    fn transaction(base: &Snapshot, ops: &[(ObjectId, TableWrite)]) -> Snapshot {
        let mut overlay = base.clone();
        overlay.apply_writes(ops).unwrap();
        overlay
    }

    #[test]
    fn a_head_nobody_moved_takes_the_overlay_as_is() {
        let base = empty_tables();
        let ops = vec![insert(&base, A, &[1]), insert(&base, B, &[10])];
        let overlay = transaction(&base, &ops);
        let next = apply_to_head(&base, &base, Some(&overlay), &ops).unwrap();
        assert!(Arc::ptr_eq(&next.tables, &overlay.tables));
    }

    #[test]
    fn only_tables_committed_to_since_the_base_are_applied_again() {
        let base = empty_tables();
        let ops = vec![insert(&base, A, &[1]), insert(&base, B, &[10])];
        let overlay = transaction(&base, &ops);
        // Another commit wrote B in between.
        let head = transaction(&base, &[insert(&base, B, &[11])]);
        let next = apply_to_head(&head, &base, Some(&overlay), &ops).unwrap();
        assert!(
            next.tables[&A].same_version(&overlay.tables[&A]),
            "A reused"
        );
        assert!(!next.tables[&B].same_version(&overlay.tables[&B]));
        assert_eq!(keys(&next, A), vec![1]);
        assert_eq!(keys(&next, B), vec![10, 11], "B has both commits");
    }

    #[test]
    fn a_key_committed_since_the_base_is_a_unique_violation() {
        let base = empty_tables();
        let ops = vec![insert(&base, A, &[1]), insert(&base, B, &[10])];
        let overlay = transaction(&base, &ops);
        let head = transaction(&base, &[insert(&base, B, &[10])]);
        let error = apply_to_head(&head, &base, Some(&overlay), &ops).unwrap_err();
        assert!(
            matches!(error, ServerError::UniqueViolation { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn without_an_overlay_every_write_is_applied_to_the_head() {
        let base = empty_tables();
        let ops = vec![insert(&base, A, &[1])];
        let head = transaction(&base, &[insert(&base, A, &[2])]);
        let next = apply_to_head(&head, &base, None, &ops).unwrap();
        assert_eq!(keys(&next, A), vec![1, 2]);
    }
}
