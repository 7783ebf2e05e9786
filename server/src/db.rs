//! [`Database`]: the state every connection shares, and the commit path.
//!
//! Readers take a [`Snapshot`] (catalog + table states, an immutable value)
//! and never block writers. They see the *published* snapshot: every commit
//! up to the latest one whose `fsync` returned, in LSN order. Commits
//! validate against the *head*, which is ahead of it by the commits enqueued
//! in the table log and waiting for their `fsync`; the lock that guards the
//! head is released before the `fsync`, so concurrent commits share one
//! (group commit). The protocol, including a failed `fsync` and the
//! serialized path of DDL commits, is in [`commit`].

mod commit;
mod references;

pub use references::added_and_removed;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};

use arrow::array::{Array, Int64Array};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use weir_common::{ChangeBatch, ObjectId};
use weir_engine::{EpochView, TableState};
use weir_storage::StateBackend as _;
use weir_storage::{ControlLog, DataDirLock, TableLog};

use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::prelude::SessionConfig;
use datafusion_pg_catalog::pg_catalog::PgCatalogStaticTables;

use crate::advisory_locks::AdvisoryLocks;
use crate::catalog::model::{DATABASE_NAME, DEFAULT_SCHEMA, ROW_ID_COLUMN, SUPERUSER, ScramSecret};
use crate::catalog::{Catalog, CatalogChange, ControlEntry};
use crate::config::{AuthMode, ServeConfig};
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::wal::{TableWrite, WalRecord};
use weir_engine::runtime::{BarrierTarget, Deployment, Runtime, RuntimeConfig, TableContents};

/// A consistent view of everything: what a statement reads.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub catalog: Arc<Catalog>,
    pub tables: Arc<HashMap<ObjectId, TableState>>,
    /// Every projection's result at the latest completed epoch.
    pub projections: Arc<EpochView>,
}

impl Snapshot {
    /// Applies table writes to this snapshot, keys and unique indexes
    /// checked. All or nothing. Foreign keys are the caller's to check
    /// after ([`Self::check_foreign_keys`]): a statement's writes to
    /// several tables hold together only once all are applied.
    pub fn apply_writes(&mut self, ops: &[(ObjectId, TableWrite)]) -> Result<(), ServerError> {
        self.apply_writes_checked(ops, true)
    }

    /// Applies writes read back from the table log: they were checked when
    /// they committed, possibly before a unique index that exists now, so
    /// unique indexes are kept but not checked.
    pub fn replay_writes(&mut self, ops: &[(ObjectId, TableWrite)]) -> Result<(), ServerError> {
        self.apply_writes_checked(ops, false)
    }

    fn apply_writes_checked(
        &mut self,
        ops: &[(ObjectId, TableWrite)],
        check_unique: bool,
    ) -> Result<(), ServerError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut tables = (*self.tables).clone();
        for (id, op) in ops {
            let state = tables.get_mut(id).ok_or_else(|| {
                ServerError::SerializationFailure(format!(
                    "table {id} was dropped by a concurrent transaction"
                ))
            })?;
            let rewritten;
            let change = match op {
                TableWrite::Truncate => {
                    state.clear();
                    continue;
                }
                TableWrite::Changes(change) => change,
                TableWrite::Rewrite { key, rows } => {
                    let specs = self
                        .catalog
                        .tables
                        .get(id)
                        .map(|d| d.index_specs())
                        .unwrap_or_default();
                    *state = TableState::new(rows.schema(), key.clone())?
                        .with_indexes(&specs, check_unique)?;
                    rewritten = ChangeBatch::inserts(rows.clone());
                    &rewritten
                }
            };
            let applied = if check_unique {
                state.apply(change)
            } else {
                state.apply_unchecked(change)
            };
            applied.map_err(|e| {
                let def = self.catalog.tables.get(id);
                match (e, def) {
                    (weir_engine::EngineError::DuplicateKey { key }, Some(def)) => {
                        ServerError::UniqueViolation {
                            constraint: def.pkey_constraint_name(),
                            columns: def.primary_key.join(", "),
                            values: key,
                        }
                    }
                    (e, _) => e.into(),
                }
            })?;
        }
        self.tables = Arc::new(tables);
        Ok(())
    }

    /// Applies catalog changes, creating and dropping table states with them.
    /// A projection's status word: `running`, `starting` (committed, not
    /// yet deployed) or `failed: <why>`.
    pub fn projection_status(&self, id: ObjectId) -> String {
        match self.projections.projections.get(&id) {
            None => "starting".into(),
            Some(view) => match &view.failure {
                Some(e) => format!("failed: {e}"),
                None => "running".into(),
            },
        }
    }

    pub fn apply_catalog(&mut self, changes: &[CatalogChange]) -> Result<(), ServerError> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut catalog = (*self.catalog).clone();
        let mut tables = (*self.tables).clone();
        for change in changes {
            catalog.apply(change)?;
            match change {
                CatalogChange::CreateTable(def) => {
                    let state = TableState::new(def.physical_schema(), def.key_indices())?
                        .with_indexes(&def.index_specs(), true)?;
                    tables.insert(def.id, state);
                }
                // An index added or dropped: the stored state follows. A
                // definition whose layout changed is followed by a Rewrite
                // in the same transaction, which builds the indexes.
                CatalogChange::ReplaceTable(def) => {
                    if let Some(state) = tables.get_mut(&def.id)
                        && state.schema() == &def.physical_schema()
                    {
                        let specs = def.index_specs();
                        if !state.index_specs().eq(specs.iter()) {
                            *state = state.clone().with_indexes(&specs, true)?;
                        }
                    }
                }
                CatalogChange::DropTable { id } => {
                    tables.remove(id);
                }
                _ => {}
            }
        }
        self.catalog = Arc::new(catalog);
        self.tables = Arc::new(tables);
        Ok(())
    }
}

/// The writes of one transaction, in statement order.
#[derive(Debug, Default, Clone)]
pub struct TxnWrites {
    pub ddl: Vec<CatalogChange>,
    pub tables: Vec<(ObjectId, TableWrite)>,
}

impl TxnWrites {
    pub fn is_empty(&self) -> bool {
        self.ddl.is_empty() && self.tables.is_empty()
    }
}

struct BackendEntry {
    secret: i32,
    running: Option<CancellationToken>,
}

/// What every session's DataFusion context starts from: the PostgreSQL
/// session template (`weir_pgsem::session_template`) with the server's
/// yield points, and pg_catalog's static tables, built once.
pub struct QueryEnv {
    pub template: SessionState,
    pub pg_static: Arc<PgCatalogStaticTables>,
}

impl QueryEnv {
    fn new() -> Result<Self, ServerError> {
        let config = SessionConfig::new()
            .with_default_catalog_and_schema(DATABASE_NAME, DEFAULT_SCHEMA)
            // Weir serves information_schema itself (catalog::info_schema);
            // DataFusion's would shadow it.
            .with_information_schema(false);
        let mut template = weir_pgsem::session_template(
            config,
            [Arc::new(crate::yield_points::YieldAfterExpanders) as _],
        )?;
        for function in weir_planner::session_window::functions() {
            template.register_udwf(Arc::new(function))?;
        }
        let pg_static = Arc::new(
            PgCatalogStaticTables::try_new()
                .map_err(|e| ServerError::internal(format!("pg_catalog tables: {e}")))?,
        );
        Ok(Self {
            template,
            pg_static,
        })
    }
}

pub struct Database {
    config: ServeConfig,
    /// Projection checkpoints, claimed (and so fenced) at open.
    state: Arc<weir_storage::ObjectStateBackend>,
    /// Where queries and projection epochs run; see [`QueryRuntime`].
    query_runtime: crate::query_runtime::QueryRuntime,
    query_env: QueryEnv,
    advisory_locks: AdvisoryLocks,
    metrics: Arc<Metrics>,
    /// Shared with the commit publisher, which hands it table changes.
    runtime: Arc<Runtime>,
    control_log: ControlLog,
    table_log: TableLog,
    /// What readers see, and the LSN of the latest published commit with
    /// table writes (commits are numbered by where their record ends).
    published: Arc<commit::Published>,
    /// Publishes enqueued table commits in LSN order after their `fsync`.
    pipeline: commit::Pipeline,
    /// Serializes validation and enqueue; guards the head snapshot (every
    /// commit validated and enqueued, durable or not).
    commit_lock: tokio::sync::Mutex<Arc<Snapshot>>,
    next_row_id: AtomicI64,
    backends: Mutex<HashMap<i32, BackendEntry>>,
    next_pid: AtomicI32,
    ready: AtomicBool,
    /// What the recovery after open needs; taken by [`crate::recovery::recover`].
    recovery: Mutex<Option<crate::recovery::seal::Recovery>>,
    /// Seals and opens the values of secrets.
    secret_key: Arc<crate::secrets::SecretKey>,
    /// What sequences hand out (`nextval`), outside transactions.
    sequence_values: crate::sequences::SequenceValues,
    _lock: DataDirLock,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("data_dir", &self.config.data_dir)
            .finish()
    }
}

impl Database {
    /// Opens (or creates) the database in `config.data_dir`: takes the
    /// directory lock, replays the control log, then the table log.
    pub async fn open(config: ServeConfig) -> Result<Arc<Self>, ServerError> {
        if config.auth == AuthMode::Scram && config.superuser_password.is_none() {
            return Err(ServerError::invalid_param(
                "--auth scram needs a password for the weir superuser: pass --superuser-password or set WEIR_PASSWORD",
            ));
        }
        let lock = DataDirLock::acquire(&config.data_dir)?;
        let secret_key = Arc::new(crate::secrets::SecretKey::load(
            config.secret_key_file.as_deref(),
            &config.data_dir,
        )?);
        let store: Arc<dyn ObjectStore> = Arc::new(
            LocalFileSystem::new_with_prefix(&config.data_dir)
                .map_err(weir_storage::StorageError::from)?,
        );
        let control_log = ControlLog::new(store, "catalog");
        let instance = format!(
            "{}:{}:{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into()),
            std::process::id(),
            uuid::Uuid::new_v4()
        );
        let state = Arc::new(
            weir_storage::ObjectStateBackend::claim_url(&config.state_url(), instance).await?,
        );
        tracing::info!(url = %config.state_url(), generation = state.generation(), "claimed the state backend");

        let mut snapshot = Snapshot {
            catalog: Arc::new(Catalog::bootstrap()),
            tables: Arc::default(),
            projections: Arc::default(),
        };
        let mut committed = std::collections::HashSet::new();
        let entries = control_log.read_all().await?;
        for (revision, bytes) in &entries {
            let entry: ControlEntry = serde_json::from_slice(bytes).map_err(|e| {
                ServerError::internal(format!("control-log entry {revision} is unreadable: {e}"))
            })?;
            snapshot.apply_catalog(&entry.changes)?;
            committed.insert(entry.txn);
        }
        Arc::make_mut(&mut snapshot.catalog).revision = entries.len() as u64;
        let sequence_values = crate::sequences::SequenceValues::open(&config.data_dir)?;
        let incarnations: std::collections::HashSet<uuid::Uuid> = snapshot
            .catalog
            .sequences
            .values()
            .map(|s| s.incarnation)
            .collect();
        sequence_values.retain(|id| incarnations.contains(id))?;

        let (table_log, records) = TableLog::open(&config.data_dir.join("tablelog"))?;
        let table_log_id = table_log_identity(&config.data_dir)?;
        let mut max_row_id = 0i64;
        let mut replayed = 0usize;
        // The tables as of the latest table snapshot, then the log after it.
        let snapshot_lsn = crate::table_snapshot::latest_lsn(&config.data_dir)?;
        let last_lsn = records
            .last()
            .map_or(0, |(lsn, _)| *lsn)
            .max(snapshot_lsn.unwrap_or(0));
        let mut recovery = crate::recovery::seal::Recovery::start(
            &state,
            &table_log_id,
            snapshot_lsn.unwrap_or(0),
            last_lsn,
        )
        .await?;
        if snapshot.catalog.projections.is_empty() && snapshot.catalog.sinks.is_empty() {
            recovery.seal = None;
        }
        // Projection state is read and decoded on the runtime's threads
        // while this one loads the tables.
        recovery.prefetch(&state);
        let mut snapshot_bytes = 0;
        if let Some(lsn) = snapshot_lsn {
            let record = crate::table_snapshot::load(&config.data_dir, lsn)?;
            let ops = ops_of_live_tables(&snapshot, record);
            max_row_id = max_row_id.max(max_row_id_of(&snapshot, &ops));
            snapshot.replay_writes(&ops)?;
            snapshot_bytes = crate::table_snapshot::size_of(&config.data_dir, lsn);
        }
        let snapshot_lsn = snapshot_lsn.unwrap_or(0);
        for (lsn, bytes) in &records {
            if *lsn <= snapshot_lsn {
                continue;
            }
            let record = WalRecord::decode(bytes)?;
            if record.has_ddl && !committed.contains(&record.txn) {
                // Its catalog entry never landed: the transaction did not commit.
                continue;
            }
            let txn = record.txn;
            let ops = ops_of_live_tables(&snapshot, record);
            max_row_id = max_row_id.max(max_row_id_of(&snapshot, &ops));
            let before = recovery.replays(*lsn).then(|| snapshot.clone());
            if let Err(e) = snapshot.replay_writes(&ops) {
                tracing::error!(%txn, error = %e, "skipping a table-log record that no longer applies");
            } else if let Some(before) = before {
                recovery.push(*lsn, projection_changes(&before, &snapshot, &ops)?);
            }
            replayed += 1;
        }
        // Each ALTER TABLE that changed a table's layout wrote the table
        // rewritten: replayed, the rows end in the catalog's latest layout.
        for (id, def) in &snapshot.catalog.tables {
            if let Some(state) = snapshot.tables.get(id)
                && state.schema() != &def.physical_schema()
            {
                return Err(ServerError::internal(format!(
                    "table {} replayed into columns {:?}, but the catalog has {:?}: the table \
                     log lacks the rewrite of an ALTER TABLE",
                    def.qualified_name(),
                    state
                        .schema()
                        .fields()
                        .iter()
                        .map(|f| f.name())
                        .collect::<Vec<_>>(),
                    def.physical_schema()
                        .fields()
                        .iter()
                        .map(|f| f.name())
                        .collect::<Vec<_>>(),
                )));
            }
        }
        tracing::info!(
            revision = snapshot.catalog.revision,
            tables = snapshot.catalog.tables.len(),
            replayed,
            "opened database"
        );
        let metrics = Arc::new(Metrics::default());
        let query_runtime = crate::query_runtime::QueryRuntime::new()?;
        let sealed_epoch = state.latest_committed_epoch().await?.unwrap_or(0);
        let runtime = Runtime::start(
            query_runtime.handle(),
            RuntimeConfig {
                barrier_interval: config.barrier_interval,
                observer: metrics.clone(),
                state: state.clone(),
                sealed_epoch,
                last_lsn,
                table_log_id,
                tables: snapshot.tables.clone(),
                compaction: Box::new(crate::table_snapshot::Compactor::new(
                    config.data_dir.clone(),
                    table_log.clone(),
                    config.log_compaction_bytes,
                    (snapshot_lsn, snapshot_bytes),
                )),
                sealed_streams: recovery.sealed_streams.clone(),
            },
        );
        // Projections come back (restored or rebuilt) after the listeners
        // are up: until then managed statements answer 57P03.
        let ready = snapshot.catalog.projections.is_empty() && snapshot.catalog.sinks.is_empty();
        let runtime = Arc::new(runtime);
        let snapshot = Arc::new(snapshot);
        let published = Arc::new(commit::Published::new(snapshot.clone(), last_lsn));
        let pipeline = commit::Pipeline::start(published.clone(), runtime.clone(), metrics.clone());
        Ok(Arc::new(Self {
            config,
            state,
            query_runtime,
            query_env: QueryEnv::new()?,
            advisory_locks: AdvisoryLocks::default(),
            metrics,
            runtime,
            control_log,
            table_log,
            published,
            pipeline,
            commit_lock: tokio::sync::Mutex::new(snapshot),
            next_row_id: AtomicI64::new(max_row_id + 1),
            backends: Mutex::new(HashMap::new()),
            next_pid: AtomicI32::new(1000),
            ready: AtomicBool::new(ready),
            recovery: Mutex::new(Some(recovery)),
            secret_key,
            sequence_values,
            _lock: lock,
        }))
    }

    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    pub fn state(&self) -> &Arc<weir_storage::ObjectStateBackend> {
        &self.state
    }

    pub fn query_runtime(&self) -> &crate::query_runtime::QueryRuntime {
        &self.query_runtime
    }

    pub fn query_env(&self) -> &QueryEnv {
        &self.query_env
    }

    pub fn advisory_locks(&self) -> &AdvisoryLocks {
        &self.advisory_locks
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Group fsyncs of the table log since start.
    pub fn table_log_syncs(&self) -> u64 {
        self.table_log.syncs()
    }

    /// Every projection restored or rebuilt after the start, and the
    /// state backend still ours: what `/ready` reports.
    pub fn is_ready(&self) -> bool {
        self.is_recovered() && self.runtime.fenced().is_none()
    }

    /// Every projection restored or rebuilt after the start.
    pub fn is_recovered(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn set_ready(&self) {
        self.runtime.recovered();
        self.ready.store(true, Ordering::Release);
    }

    pub(crate) fn take_recovery(&self) -> Option<crate::recovery::seal::Recovery> {
        self.recovery.lock().take()
    }

    /// The latest committed snapshot, with projections at the latest
    /// completed epoch.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let mut snapshot = (*self.published.snapshot()).clone();
        snapshot.projections = self.runtime.view();
        Arc::new(snapshot)
    }

    /// The streaming runtime that keeps projections and sinks current.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn secret_key(&self) -> &Arc<crate::secrets::SecretKey> {
        &self.secret_key
    }

    pub fn sequence_values(&self) -> &crate::sequences::SequenceValues {
        &self.sequence_values
    }

    /// The sequence number of the latest published commit with table
    /// writes.
    pub fn commit_seq(&self) -> u64 {
        self.published.commit_seq()
    }

    /// Waits until every write committed before the call is visible in
    /// every projection.
    pub async fn flush(&self) -> Result<(), ServerError> {
        self.flush_to(self.commit_seq()).await
    }

    /// Waits until every write up to table-log position `lsn` (a session's
    /// last write, for read-your-writes) is visible in every projection.
    pub async fn flush_to(&self, lsn: u64) -> Result<(), ServerError> {
        let target = BarrierTarget { table_lsn: lsn };
        Ok(self.runtime.barrier(target).await?)
    }

    /// Starts maintaining a committed projection, backfilled from the
    /// tables as of now. Holds the commit lock with no commit in flight
    /// (published = head) so no commit slips between the backfill and the
    /// changes that follow it.
    pub async fn deploy_projection(&self, mut deployment: Deployment) -> Result<(), ServerError> {
        let current = self.quiesce().await;
        // Every published commit has been handed to the runtime: the
        // tables below are as of the latest.
        deployment.tables_at = self.commit_seq();
        for source in &deployment.sources {
            if let (Some(def), Some(state)) = (
                current.catalog.tables.get(&source.object),
                current.tables.get(&source.object),
            ) {
                let contents = TableContents {
                    state: state.clone(),
                    user_columns: def.columns.len(),
                };
                deployment.tables.insert(source.object, contents);
            }
        }
        Ok(self.runtime.deploy(deployment).await?)
    }

    /// Reserves `n` hidden row ids for inserts into tables without a key.
    pub fn allocate_row_ids(&self, n: usize) -> i64 {
        self.next_row_id.fetch_add(n as i64, Ordering::Relaxed)
    }

    /// SCRAM credentials of a user who may log in with a password.
    pub fn scram_credentials(&self, user: &str) -> Option<ScramSecret> {
        if user == SUPERUSER {
            let password = self.config.superuser_password.as_deref()?;
            return Some(scram_secret(password, b"weir-superuser-salt".to_vec()));
        }
        self.snapshot().catalog.users.get(user)?.scram.clone()
    }

    pub fn user_exists(&self, user: &str) -> bool {
        user == SUPERUSER || self.snapshot().catalog.users.contains_key(user)
    }

    pub fn database_exists(&self, name: &str) -> bool {
        name == crate::catalog::model::DATABASE_NAME
    }

    /// Registers a new backend (connection); returns its (pid, secret).
    pub fn register_backend(&self) -> (i32, i32) {
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        let secret = uuid::Uuid::new_v4().as_u128() as i32;
        self.backends.lock().insert(
            pid,
            BackendEntry {
                secret,
                running: None,
            },
        );
        (pid, secret)
    }

    pub fn unregister_backend(&self, pid: i32) {
        self.backends.lock().remove(&pid);
    }

    /// Marks a statement of `pid` as running; cancelling the token stops it.
    pub fn statement_started(&self, pid: i32) -> CancellationToken {
        let token = CancellationToken::new();
        if let Some(entry) = self.backends.lock().get_mut(&pid) {
            entry.running = Some(token.clone());
        }
        token
    }

    pub fn statement_finished(&self, pid: i32) {
        if let Some(entry) = self.backends.lock().get_mut(&pid) {
            entry.running = None;
        }
    }

    /// A cancel request: stops the running statement of `pid` if the secret
    /// matches. Returns whether something was cancelled.
    pub fn cancel(&self, pid: i32, secret: i32) -> bool {
        match self.backends.lock().get(&pid) {
            Some(entry) if entry.secret == secret => match &entry.running {
                Some(token) => {
                    token.cancel();
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    pub fn backend_count(&self) -> usize {
        self.backends.lock().len()
    }
}

/// A transaction's table writes as the changes projections read: user
/// columns only; a truncated table retracts everything it held and inserts
/// what it holds at commit.
pub(crate) fn projection_changes(
    previous: &Snapshot,
    next: &Snapshot,
    ops: &[(ObjectId, TableWrite)],
) -> Result<Vec<(ObjectId, weir_common::ChangeBatch)>, ServerError> {
    // A truncated or rewritten table is told as all its rows out, then
    // all its rows in, each in the columns of its own layout: projections
    // over it were checked to read nothing the rewrite changed, and the
    // runtime hands each the columns it reads, by name.
    let truncated: std::collections::HashSet<ObjectId> = ops
        .iter()
        .filter(|(_, op)| matches!(op, TableWrite::Truncate | TableWrite::Rewrite { .. }))
        .map(|(id, _)| *id)
        .collect();
    let user_columns = |id: &ObjectId| -> Option<Vec<usize>> {
        next.catalog
            .tables
            .get(id)
            .map(|def| (0..def.columns.len()).collect())
    };
    let mut out = Vec::new();
    for id in &truncated {
        if !next.catalog.tables.contains_key(id) {
            continue;
        }
        for (snapshot, weight) in [(previous, -1), (next, 1)] {
            if let Some(state) = snapshot.tables.get(id) {
                let columns: Vec<usize> = (0..state.schema().fields().len())
                    .filter(|&i| state.schema().field(i).name() != ROW_ID_COLUMN)
                    .collect();
                for batch in state.scan()?.iter() {
                    let rows = batch.project(&columns)?;
                    let change = if weight < 0 {
                        ChangeBatch::retractions(rows)
                    } else {
                        ChangeBatch::inserts(rows)
                    };
                    out.push((*id, change));
                }
            }
        }
    }
    for (id, op) in ops {
        if truncated.contains(id) {
            continue;
        }
        if let (TableWrite::Changes(change), Some(columns)) = (op, user_columns(id)) {
            let rows = change.rows().project(&columns)?;
            out.push((*id, ChangeBatch::new(rows, change.weights().clone())?));
        }
    }
    Ok(out)
}

/// The writes of `record` to tables the catalog still has (a dropped
/// table's records stay in the log until it is compacted).
fn ops_of_live_tables(snapshot: &Snapshot, record: WalRecord) -> Vec<(ObjectId, TableWrite)> {
    record
        .ops
        .into_iter()
        .filter(|(id, _)| snapshot.catalog.tables.contains_key(id))
        .collect()
}

/// The largest hidden row id `ops` insert into tables that have one.
fn max_row_id_of(snapshot: &Snapshot, ops: &[(ObjectId, TableWrite)]) -> i64 {
    let mut max_row_id = 0;
    for (id, op) in ops {
        let rows = match op {
            TableWrite::Changes(c) => c.rows(),
            TableWrite::Rewrite { rows, .. } => rows,
            TableWrite::Truncate => continue,
        };
        if let Some(def) = snapshot.catalog.tables.get(id)
            && def.has_row_id()
            && let Some(ids) = rows
                .columns()
                .last()
                .and_then(|a| a.as_any().downcast_ref::<Int64Array>())
            && let Some(m) = arrow::compute::max(ids)
        {
            max_row_id = max_row_id.max(m);
        }
    }
    max_row_id
}

/// The identity of this data directory's table log, created with it: a
/// seal names the log its LSNs refer to, so state sealed for another data
/// directory (two servers pointed at one bucket) is never replayed against
/// this log.
fn table_log_identity(data_dir: &std::path::Path) -> Result<String, ServerError> {
    let path = data_dir.join("tablelog").join("IDENTITY");
    match std::fs::read_to_string(&path) {
        Ok(id) => return Ok(id.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(ServerError::internal(format!(
                "reading {}: {e}",
                path.display()
            )));
        }
    }
    let id = uuid::Uuid::new_v4().to_string();
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut file, id.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(path.parent().unwrap_or(data_dir))?.sync_all()
    };
    write().map_err(|e| ServerError::internal(format!("writing {}: {e}", path.display())))?;
    Ok(id)
}

/// SCRAM-SHA-256 credentials for a password (RFC 5802 SaltedPassword).
pub fn scram_secret(password: &str, salt: Vec<u8>) -> ScramSecret {
    const ITERATIONS: usize = 4096;
    let salted_password =
        pgwire::api::auth::sasl::scram::gen_salted_password(password, &salt, ITERATIONS);
    ScramSecret {
        salt,
        iterations: ITERATIONS,
        salted_password,
    }
}
