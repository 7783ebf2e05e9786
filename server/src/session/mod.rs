//! A client session: statement dispatch, transactions and planning context.
//!
//! Every statement runs inside a transaction: the explicit one opened with
//! `BEGIN`, or an implicit one that commits when the statement ends. A
//! transaction reads its own overlay snapshot (the committed snapshot it
//! started from plus its own writes) and records its writes; `COMMIT` hands
//! them to [`Database::commit`], which validates and persists them all at
//! once. A failed statement inside an explicit block marks the block failed
//! (SQLSTATE 25P02 until `ROLLBACK`).
//!
//! Submodules: [`api`] (what front ends see), `query` (SELECT/EXPLAIN and
//! planning helpers), `dml` (INSERT/UPDATE/DELETE/TRUNCATE/COPY/ingest),
//! `ddl` (CREATE/DROP), `streaming` (sources and sinks), `sources` (CREATE
//! SOURCE, shared sources and their tables), `secrets`
//! (secrets and connections), `show` (SHOW/DESCRIBE), `vars` (SET/SHOW variables),
//! `prepared` (extended protocol), `functions` (PostgreSQL functions).

mod alter_options;
mod alter_table;
pub mod api;
mod constraints;
mod copy;
mod create_table_as;
pub(crate) mod cursor;
mod ddl;
mod destination;
mod dml;
mod eval;
mod functions;
mod modify;
mod point_query;
pub(crate) mod prepared;
mod primary_key;
mod projection;
mod query;
mod recovery_gate;
mod rename;
mod secrets;
mod sequence;
mod sequence_functions;
mod show;
mod sources;
mod streaming;
mod vars;
mod view;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{SetExpr, Statement};

pub use crate::advisory_locks::AdvisoryLocks;
pub use api::{CopyFormat, CopyInTarget, CopyOptions, PreparedStatement, StatementResult};

use crate::catalog::provider::{SessionView, WeirCatalogList};
use crate::db::{Database, Snapshot, TxnWrites};
use crate::error::ServerError;
use crate::system::SystemSchema;
use vars::Vars;

/// Transaction state, as ReadyForQuery reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStatus {
    Idle,
    InBlock,
    Failed,
}

/// A table as metadata calls (Flight SQL GetTables) describe it.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub catalog: String,
    pub schema: String,
    pub name: String,
    pub kind: &'static str,
    pub arrow_schema: SchemaRef,
    pub primary_key: Vec<String>,
}

struct Txn {
    base: Arc<Snapshot>,
    overlay: Snapshot,
    writes: TxnWrites,
    explicit: bool,
    failed: bool,
    /// Unique per transaction: cursors without WITH HOLD die with it.
    id: u64,
    /// Opened for a single statement (no block, no multi-statement string).
    statement_only: bool,
    /// Open savepoints, oldest first. Names may repeat; the newest wins.
    savepoints: Vec<Savepoint>,
    /// Session settings as the block began, and what its SETs did to them:
    /// ROLLBACK undoes every SET of the block, COMMIT only the SET LOCALs.
    settings: vars::BlockSettings,
}

/// What `ROLLBACK TO SAVEPOINT` returns to. Writes only ever grow, so their
/// lengths mark the point; the overlay is a persistent map, so keeping it
/// costs O(1).
struct Savepoint {
    name: String,
    overlay: Snapshot,
    ddl_len: usize,
    tables_len: usize,
    /// The session settings, and what the block's SETs had done to them.
    vars: std::collections::BTreeMap<String, String>,
    settings: vars::BlockSettings,
}

impl Txn {
    fn starting_at(base: Arc<Snapshot>, explicit: bool) -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Txn {
            overlay: (*base).clone(),
            base,
            writes: TxnWrites::default(),
            explicit,
            failed: false,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            statement_only: false,
            savepoints: Vec::new(),
            settings: vars::BlockSettings::default(),
        }
    }

    fn position_of(&self, name: &str) -> Result<usize, ServerError> {
        self.savepoints
            .iter()
            .rposition(|s| s.name == name)
            .ok_or_else(|| ServerError::UndefinedSavepoint(name.to_string()))
    }
}

pub struct Session {
    db: Arc<Database>,
    user: String,
    pid: i32,
    secret: i32,
    vars: Vars,
    view: Arc<SessionView>,
    ctx: SessionContext,
    txn: Option<Txn>,
    cursors: cursor::Cursors,
    after_copy: Option<copy::AfterCopy>,
    /// The commit sequence number of this session's latest table write,
    /// which read-your-writes waits for.
    last_write_seq: u64,
    point_queries: point_query::PointQueries,
    /// NOTICEs raised by the statements run since the front end last
    /// took them.
    notices: Vec<String>,
}

impl Drop for Session {
    fn drop(&mut self) {
        functions::release_advisory_locks(&self.db, self.pid);
        self.db.unregister_backend(self.pid);
    }
}

/// An APPEND ONLY table takes inserts only: a write that retracts a row
/// (UPDATE, DELETE, ON CONFLICT DO UPDATE) or empties it (TRUNCATE) is
/// refused, since a window that its watermark closed could change.
fn refuse_on_append_only(
    def: &crate::catalog::TableDef,
    write: &crate::wal::TableWrite,
) -> Result<(), ServerError> {
    let retracts = match write {
        crate::wal::TableWrite::Truncate => true,
        crate::wal::TableWrite::Changes(change) => change.weights().values().iter().any(|&w| w < 0),
        // ALTER TABLE keeps every row; one that changes values the
        // table's readers see is refused while it has readers.
        crate::wal::TableWrite::Rewrite { .. } => false,
    };
    if retracts {
        return Err(ServerError::Sqlstate {
            code: "0A000",
            message: format!(
                "table \"{}\" is APPEND ONLY: it takes INSERT and COPY only, not UPDATE, DELETE, \
                 TRUNCATE or ON CONFLICT DO UPDATE (its rows never change once in, so windows \
                 over its watermark can close)",
                def.qualified_name()
            ),
        });
    }
    Ok(())
}

impl Session {
    /// The NOTICEs raised since the last call, if `client_min_messages`
    /// lets notices through (as PostgreSQL filters them).
    pub fn take_notices(&mut self) -> Vec<String> {
        if self.notices.is_empty() {
            // The usual case, on every execution: no setting to look up.
            return Vec::new();
        }
        let notices = std::mem::take(&mut self.notices);
        let level = self.vars.get("client_min_messages").unwrap_or_default();
        let shown = level.starts_with("debug") || matches!(level.as_str(), "log" | "notice");
        if shown { notices } else { Vec::new() }
    }

    /// Raises a NOTICE for the client.
    pub(crate) fn notice(&mut self, message: String) {
        self.notices.push(message);
    }

    pub fn new(db: Arc<Database>, user: &str, database: &str) -> Session {
        let (pid, secret) = db.register_backend();
        let view = Arc::new(SessionView::new(
            db.snapshot(),
            Arc::new(SystemSchema::new(db.clone())),
        ));
        view.set_view_planner(Arc::new(crate::planning::ViewPlanning { db: db.clone() }));
        let env = db.query_env();
        let catalog_list = WeirCatalogList::new(view.clone(), env.pg_static.clone())
            .expect("pg_catalog provider construction does not fail");
        let state = SessionStateBuilder::new_from_existing(env.template.clone())
            .with_catalog_list(Arc::new(catalog_list))
            .build();
        let ctx = SessionContext::new_with_state(state);
        let vars = Vars::new(user, database);
        functions::register_session_functions(&ctx, &db, pid, user, vars.shared());
        let mut session = Session {
            db,
            user: user.to_string(),
            pid,
            secret,
            vars,
            view,
            ctx,
            txn: None,
            cursors: cursor::Cursors::new(),
            after_copy: None,
            last_write_seq: 0,
            point_queries: Default::default(),
            notices: Vec::new(),
        };
        session.apply_vars_to_planner();
        session
    }

    pub fn backend_key(&self) -> (i32, i32) {
        (self.pid, self.secret)
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn startup_parameters(&self) -> Vec<(String, String)> {
        self.vars.startup_parameters()
    }

    pub fn set_startup_option(&mut self, name: &str, value: &str) {
        if name == "options" {
            // `options=-c name=value -c ...` (libpq's PGOPTIONS).
            let mut words = value.split_whitespace();
            while let Some(word) = words.next() {
                let assignment = match word {
                    "-c" => words.next().unwrap_or_default(),
                    w => w.strip_prefix("-c").unwrap_or(w),
                };
                let assignment = assignment.strip_prefix("--").unwrap_or(assignment);
                if let Some((k, v)) = assignment.split_once('=') {
                    let _ = self.set_var(k, v);
                }
            }
        } else if !matches!(name, "user" | "database" | "replication") {
            let _ = self.set_var(name, value);
        }
    }

    pub fn transaction_status(&self) -> TxnStatus {
        match &self.txn {
            Some(t) if t.failed => TxnStatus::Failed,
            Some(t) if t.explicit => TxnStatus::InBlock,
            _ => TxnStatus::Idle,
        }
    }

    /// Runs every statement of a simple-protocol query string.
    pub async fn execute_simple(&mut self, sql: &str) -> Vec<Result<StatementResult, ServerError>> {
        // A COPY FROM STDIN whose data never came (a front end without the
        // COPY sub-protocol) must not leave its string's transaction open.
        self.abandon_after_copy();
        // Notices a front end that shows none (Flight SQL) left behind.
        self.notices.clear();
        let statements = match weir_planner::parse_sql(sql) {
            Ok(s) => s,
            Err(e) => {
                let err = ServerError::Syntax {
                    message: e.message,
                    position: e.position,
                };
                self.note_error(&err);
                self.fail_block();
                return vec![Err(err)];
            }
        };
        if statements.is_empty() {
            return vec![Ok(StatementResult::Empty)];
        }
        // Like PostgreSQL, the statements of one query string form one
        // implicit transaction unless they manage transactions themselves.
        let grouped = statements.len() > 1 && self.txn.is_none();
        if grouped {
            self.txn = Some(Txn::starting_at(self.db.snapshot(), false));
        }
        self.run_statements(statements.into_iter().collect(), grouped)
            .await
    }

    /// Runs statements of one query string until the first error or the
    /// first `COPY FROM STDIN`; the statements after a COPY wait in
    /// `after_copy` until its data is in (see `copy::resume_after_copy`).
    async fn run_statements(
        &mut self,
        statements: std::collections::VecDeque<Statement>,
        grouped: bool,
    ) -> Vec<Result<StatementResult, ServerError>> {
        let mut statements = statements;
        let mut results = Vec::with_capacity(statements.len());
        while let Some(statement) = statements.pop_front() {
            let result = self.execute(statement, None).await;
            let failed = result.is_err();
            let copy_in = matches!(result, Ok(StatementResult::CopyIn(_)));
            results.push(result);
            if failed {
                break;
            }
            if copy_in {
                self.after_copy = Some(copy::AfterCopy {
                    statements,
                    grouped,
                });
                return results;
            }
        }
        self.finish_group(grouped, &mut results).await;
        results
    }

    /// Commits the implicit transaction of a multi-statement string if every
    /// statement succeeded (a failure already dropped it).
    async fn finish_group(
        &mut self,
        grouped: bool,
        results: &mut Vec<Result<StatementResult, ServerError>>,
    ) {
        if grouped && self.txn.as_ref().is_some_and(|t| !t.explicit) {
            let txn = self.txn.take().expect("checked above");
            if results.iter().all(Result::is_ok)
                && let Err(e) = self.commit_txn(txn).await
            {
                self.note_error(&e);
                results.pop();
                results.push(Err(e));
            }
        }
    }

    /// Runs one parsed statement with optional bound parameters, inside the
    /// session's transaction (or an implicit one), with cancellation.
    pub(crate) async fn execute(
        &mut self,
        statement: Statement,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        let kind = statement_kind(&statement);
        self.db.metrics().query(kind);
        let result = self.execute_inner(statement, params).await;
        if let Err(e) = &result {
            self.note_error(e);
        }
        result
    }

    fn note_error(&self, e: &ServerError) {
        self.db.metrics().error(e.sqlstate());
        if e.is_internal() {
            tracing::error!(error = %e, "statement failed");
        } else {
            tracing::debug!(error = %e, "statement failed");
        }
    }

    fn fail_block(&mut self) {
        match &mut self.txn {
            Some(t) if t.explicit => t.failed = true,
            _ => self.txn = None,
        }
    }

    async fn execute_inner(
        &mut self,
        statement: Statement,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        match &statement {
            Statement::StartTransaction { .. } => {
                if self.txn.is_none() {
                    self.read_your_writes().await?;
                }
                return Ok(self.begin());
            }
            Statement::Commit { .. } => return self.commit().await,
            Statement::Rollback {
                savepoint: None, ..
            } => {
                if let Some(t) = self.txn.take() {
                    t.settings.roll_back(&mut self.vars);
                    self.apply_vars_to_planner();
                }
                return Ok(command("ROLLBACK"));
            }
            Statement::Rollback {
                savepoint: Some(name),
                ..
            } => return self.rollback_to(&name.value),
            _ => {}
        }
        if self.txn.as_ref().is_some_and(|t| t.failed) {
            return Err(ServerError::InFailedTransaction);
        }
        if !self.db.is_recovered() && !recovery_gate::available_while_recovering(&statement) {
            return Err(ServerError::NotReady(
                "Weir is restoring its projections after a start; until then only reads of system catalogs and session settings are served".into(),
            ));
        }
        if self.txn.is_none() && self.reads_runtime(&statement) {
            self.read_your_writes().await?;
        }
        let implicit = self.open_implicit()?;
        let token = self.db.statement_started(self.pid);
        let outcome = tokio::select! {
            r = self.dispatch(statement, params) => r,
            _ = token.cancelled() => Err(ServerError::QueryCanceled),
        };
        self.db.statement_finished(self.pid);
        self.close_implicit(implicit, outcome).await
    }

    /// Opens an implicit transaction unless a block is open; returns whether
    /// it did. Fails inside a failed block.
    fn open_implicit(&mut self) -> Result<bool, ServerError> {
        if self.txn.as_ref().is_some_and(|t| t.failed) {
            return Err(ServerError::InFailedTransaction);
        }
        let implicit = self.txn.is_none();
        if implicit {
            let mut txn = Txn::starting_at(self.db.snapshot(), false);
            txn.statement_only = true;
            self.txn = Some(txn);
        }
        self.refresh_view();
        Ok(implicit)
    }

    /// Ends a statement: on error fails the block (or drops the implicit
    /// transaction); on success commits the implicit transaction.
    async fn close_implicit<T>(
        &mut self,
        implicit: bool,
        outcome: Result<T, ServerError>,
    ) -> Result<T, ServerError> {
        match outcome {
            Err(e) => {
                self.fail_block();
                Err(e)
            }
            Ok(result) if implicit => {
                let txn = self.txn.take().expect("implicit transaction is open");
                if let Err(e) = self.commit_txn(txn).await {
                    self.note_error(&e);
                    return Err(e);
                }
                Ok(result)
            }
            Ok(result) => Ok(result),
        }
    }

    fn begin(&mut self) -> StatementResult {
        if let Some(t) = &mut self.txn {
            // BEGIN inside a multi-statement string turns its implicit
            // transaction into a block.
            t.explicit = true;
        } else {
            self.txn = Some(Txn::starting_at(self.db.snapshot(), true));
        }
        let at_begin = self.vars.snapshot();
        if let Some(t) = &mut self.txn {
            t.settings.begin(at_begin);
        }
        // PostgreSQL only warns about BEGIN inside a block.
        command("BEGIN")
    }

    async fn commit(&mut self) -> Result<StatementResult, ServerError> {
        match self.txn.take() {
            None => Ok(command("COMMIT")),
            Some(t) if t.failed => {
                t.settings.roll_back(&mut self.vars);
                self.apply_vars_to_planner();
                Ok(command("ROLLBACK"))
            }
            Some(mut t) => {
                let settings = std::mem::take(&mut t.settings);
                let committed = self.commit_txn(t).await;
                settings.commit(&mut self.vars);
                self.apply_vars_to_planner();
                committed?;
                Ok(command("COMMIT"))
            }
        }
    }

    /// Commits a transaction's writes, then deploys or stops the
    /// projections its DDL created or dropped.
    async fn commit_txn(&mut self, txn: Txn) -> Result<(), ServerError> {
        let wrote_tables = !txn.writes.tables.is_empty();
        let ddl = txn.writes.ddl.clone();
        let before = txn.base.catalog.clone();
        let seq = self
            .db
            .commit_applied(&txn.base, Some(&txn.overlay), txn.writes)
            .await?;
        if wrote_tables {
            self.last_write_seq = self.last_write_seq.max(seq);
        }
        if ddl.is_empty() {
            return Ok(());
        }
        self.refresh_view();
        self.after_commit(&ddl, &before).await
    }

    /// The open transaction block, for statements that only make sense in
    /// one (SAVEPOINT and friends).
    fn block(&mut self, statement: &str) -> Result<&mut Txn, ServerError> {
        match &mut self.txn {
            Some(t) if t.explicit => Ok(t),
            _ => Err(ServerError::NoActiveTransaction(statement.to_string())),
        }
    }

    fn savepoint(&mut self, name: String) -> Result<StatementResult, ServerError> {
        let vars = self.vars.snapshot();
        let txn = self.block("SAVEPOINT")?;
        let savepoint = Savepoint {
            name,
            overlay: txn.overlay.clone(),
            ddl_len: txn.writes.ddl.len(),
            tables_len: txn.writes.tables.len(),
            vars,
            settings: txn.settings.clone(),
        };
        txn.savepoints.push(savepoint);
        Ok(command("SAVEPOINT"))
    }

    /// `RELEASE [SAVEPOINT] name`: forgets the savepoint and every later one;
    /// their writes stay in the transaction.
    fn release_savepoint(&mut self, name: &str) -> Result<StatementResult, ServerError> {
        let txn = self.block("RELEASE SAVEPOINT")?;
        let at = txn.position_of(name)?;
        txn.savepoints.truncate(at);
        Ok(command("RELEASE"))
    }

    /// `ROLLBACK TO [SAVEPOINT] name`: undoes the writes and SETs made since
    /// the savepoint, which stays open, and clears a failure, as PostgreSQL
    /// does.
    fn rollback_to(&mut self, name: &str) -> Result<StatementResult, ServerError> {
        let txn = self.block("ROLLBACK TO SAVEPOINT")?;
        let at = match txn.position_of(name) {
            Ok(at) => at,
            Err(e) => {
                txn.failed = true;
                return Err(e);
            }
        };
        txn.savepoints.truncate(at + 1);
        let savepoint = &txn.savepoints[at];
        txn.overlay = savepoint.overlay.clone();
        txn.writes.ddl.truncate(savepoint.ddl_len);
        txn.writes.tables.truncate(savepoint.tables_len);
        txn.settings = savepoint.settings.clone();
        let vars = savepoint.vars.clone();
        txn.failed = false;
        self.vars.restore(vars);
        self.apply_vars_to_planner();
        self.refresh_view();
        Ok(command("ROLLBACK"))
    }

    /// Marks the open block failed because of an error outside statement
    /// execution (a bad Bind, a broken COPY), as PostgreSQL does.
    pub fn fail_transaction(&mut self) {
        self.fail_block();
    }

    /// Points the planning view at what the current statement must read.
    pub(crate) fn refresh_view(&self) {
        let snapshot = match &self.txn {
            Some(t) => Arc::new(t.overlay.clone()),
            None => self.db.snapshot(),
        };
        self.view.set_snapshot(snapshot);
    }

    /// The snapshot the current statement reads.
    fn snapshot(&self) -> Arc<Snapshot> {
        self.view.snapshot()
    }

    /// Records writes in the open transaction and applies them to its overlay.
    /// Foreign keys' ON DELETE / ON UPDATE actions add their writes, and
    /// every constraint is checked over the statement's writes.
    fn write(&mut self, writes: TxnWrites) -> Result<(), ServerError> {
        let mut overlay = self
            .txn
            .as_ref()
            .expect("a statement runs in a transaction")
            .overlay
            .clone();
        overlay.apply_catalog(&writes.ddl)?;
        let tables = overlay.apply_with_actions(writes.tables)?;
        // After the actions: a cascade must not delete from an
        // append-only table either.
        for (table, write) in &tables {
            if let Some(def) = overlay.catalog.tables.get(table)
                && def.append_only
            {
                refuse_on_append_only(def, write)?;
            }
        }
        self.check_rows(&overlay.catalog, &tables)?;
        overlay.check_foreign_keys(&tables)?;
        let txn = self
            .txn
            .as_mut()
            .expect("a statement runs in a transaction");
        txn.overlay = overlay;
        txn.writes.ddl.extend(writes.ddl);
        txn.writes.tables.extend(tables);
        self.refresh_view();
        Ok(())
    }

    async fn dispatch(
        &mut self,
        statement: Statement,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        use Statement as S;
        if let Some(ddl) = weir_planner::streaming_ddl::from_statement(&statement) {
            return self.streaming(ddl).await;
        }
        match statement {
            S::Query(query) if matches!(query.body.as_ref(), SetExpr::Select(s) if s.into.is_some()) => {
                self.select_into(query).await
            }
            S::Query(_) => self.query(statement, params).await,
            S::Explain {
                statement: inner, ..
            } if matches!(inner.as_ref(), S::CreateView(v) if v.materialized) => {
                let S::CreateView(create) = *inner else {
                    unreachable!("matched above")
                };
                self.explain_projection(&create).await
            }
            S::Explain { .. } => self.explain(statement, params).await,
            S::CreateView(create) if create.materialized => self.create_projection(create).await,
            S::CreateView(create) => self.create_view(create).await,
            S::Flush { .. } if statement == weir_planner::parse::flush_statement() => {
                self.flush().await
            }
            S::ShowViews {
                materialized: true, ..
            } => self.show_projections(),
            S::Insert(insert) => self.insert(insert, params).await,
            S::Update(update) => self.update(update, params).await,
            S::Delete(delete) => self.delete(delete, params).await,
            S::Truncate(truncate) => self.truncate(truncate),
            S::Copy { .. } => self.copy(statement).await,
            S::Declare { stmts } => self.declare(stmts, params).await,
            S::Fetch {
                name,
                direction,
                into,
                ..
            } => self.fetch(&name, &direction, into.as_ref()),
            S::Close { cursor } => self.close_cursor(&cursor),
            S::CreateTable(create) => self.create_table(create).await,
            S::AlterTable(alter) => self.alter_table(alter).await,
            S::CreateIndex(create) => self.create_index(create),
            S::CreateSchema {
                schema_name,
                if_not_exists,
                ..
            } => self.create_schema(schema_name, if_not_exists),
            S::CreateSequence {
                if_not_exists,
                name,
                data_type,
                sequence_options,
                owned_by,
                temporary: false,
            } => self.create_sequence(
                if_not_exists,
                &name,
                data_type.as_ref(),
                &sequence_options,
                owned_by.as_ref(),
            ),
            S::CreateUser(create) => self.create_user(create),
            S::CreateRole(create) => self.create_role(create),
            S::Drop {
                object_type,
                if_exists,
                names,
                cascade,
                ..
            } => self.drop_objects(object_type, if_exists, names, cascade),
            S::Set(set) => self.set(set),
            S::ShowVariable { variable } => self.show_variable(&variable),
            S::Reset(reset) => self.reset(reset),
            S::ShowTables { .. } => self.show_tables().await,
            S::ShowCreate { obj_type, obj_name } => self.show_create(obj_type, &obj_name),
            S::ExplainTable { table_name, .. } => self.describe(&table_name).await,
            S::Discard { .. } => {
                self.vars.reset_all();
                Ok(command("DISCARD ALL"))
            }
            S::Deallocate { .. } => Ok(command("DEALLOCATE")),
            S::Comment {
                object_type,
                object_name,
                comment,
                if_exists,
            } => self.comment_on(object_type, &object_name, comment, if_exists),
            S::Savepoint { name } => self.savepoint(name.value),
            S::ReleaseSavepoint { name } => self.release_savepoint(&name.value),
            other => Err(ServerError::feature_not_supported(statement_name(&other))),
        }
    }

    fn set_var(&mut self, name: &str, value: &str) -> Result<(), ServerError> {
        self.vars.set(name, value)?;
        self.apply_vars_to_planner();
        Ok(())
    }

    pub async fn list_tables(&self) -> Vec<TableInfo> {
        let snapshot = self.db.snapshot();
        let mut out: Vec<TableInfo> = snapshot
            .catalog
            .tables
            .values()
            .map(|t| TableInfo {
                catalog: crate::catalog::model::DATABASE_NAME.into(),
                schema: t.schema.clone(),
                name: t.name.clone(),
                kind: "TABLE",
                arrow_schema: t.user_schema(),
                primary_key: t.primary_key.clone(),
            })
            .collect();
        out.extend(snapshot.catalog.projections.values().map(|p| TableInfo {
            catalog: crate::catalog::model::DATABASE_NAME.into(),
            schema: p.schema.clone(),
            name: p.name.clone(),
            kind: "MATERIALIZED VIEW",
            arrow_schema: p.arrow_schema(),
            primary_key: vec![],
        }));
        for name in self.view.system.table_names_sorted() {
            if let Some(schema) = self.view.system.table_schema(&name) {
                out.push(TableInfo {
                    catalog: crate::catalog::model::DATABASE_NAME.into(),
                    schema: crate::catalog::provider::WEIR_CATALOG.into(),
                    name,
                    kind: "SYSTEM TABLE",
                    arrow_schema: schema,
                    primary_key: vec![],
                });
            }
        }
        out
    }

    pub fn list_schemas(&self) -> Vec<(String, String)> {
        let snapshot = self.db.snapshot();
        let db = crate::catalog::model::DATABASE_NAME.to_string();
        let mut out: Vec<_> = snapshot
            .catalog
            .schemas
            .iter()
            .map(|s| (db.clone(), s.clone()))
            .collect();
        for s in [
            crate::catalog::provider::INFORMATION_SCHEMA,
            crate::catalog::provider::PG_CATALOG,
            crate::catalog::provider::WEIR_CATALOG,
        ] {
            out.push((db.clone(), s.to_string()));
        }
        out
    }
}

pub(crate) fn command(tag: &str) -> StatementResult {
    StatementResult::Command {
        tag: tag.to_string(),
    }
}

/// The metrics label of a statement.
fn statement_kind(statement: &Statement) -> &'static str {
    use Statement as S;
    match statement {
        S::Query(_) => "select",
        S::Insert(_) => "insert",
        S::Update(_) => "update",
        S::Delete(_) => "delete",
        S::Copy { .. } => "copy",
        S::Truncate(_) => "truncate",
        S::CreateTable(_) | S::CreateSchema { .. } | S::Drop { .. } | S::CreateUser(_) => "ddl",
        S::StartTransaction { .. }
        | S::Commit { .. }
        | S::Rollback { .. }
        | S::Savepoint { .. }
        | S::ReleaseSavepoint { .. } => "transaction",
        S::Set(_) | S::ShowVariable { .. } | S::Reset(_) => "set",
        S::ShowTables { .. } | S::ShowCreate { .. } | S::ExplainTable { .. } => "show",
        S::Explain { .. } => "explain",
        _ => "other",
    }
}

/// The statement's leading keywords, to name it in a "not supported" error.
fn statement_name(statement: &Statement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    let name = words.join(" ").to_uppercase();
    name.trim_end_matches(|c: char| !c.is_ascii_alphabetic())
        .to_string()
}
