//! CREATE / DROP / EXPLAIN CREATE PROJECTION (also spelled MATERIALIZED
//! VIEW), FLUSH and read-your-writes.
//!
//! A projection is planned twice: when created (so an unsupported query
//! fails before anything is written) and when deployed, after its catalog
//! entry commits (and again at every start), against the catalog of that
//! moment. Deployment backfills it from its inputs; if that fails, the
//! creation is undone and the error returned, as PostgreSQL fails a
//! `CREATE MATERIALIZED VIEW` whose query fails.

use datafusion::sql::sqlparser::ast::{CreateTableOptions, CreateView, Statement};
use weir_common::ObjectId;
use weir_pgsem::SqlType;
use weir_planner::StreamPlan;

use super::{Session, StatementResult, command, show::text_rows};
use crate::catalog::model::{ColumnDef, ProjectionDef};
use crate::catalog::{Catalog, CatalogChange};
use crate::db::TxnWrites;
use crate::error::ServerError;
use crate::planning::PlanContext;

impl Session {
    /// Where this session's statements are planned.
    pub(crate) fn plan_context(&self) -> PlanContext {
        PlanContext::new(
            self.ctx.state(),
            self.snapshot().catalog.clone(),
            self.vars.default_schema(),
            &self.db,
        )
    }

    pub(super) async fn create_projection(
        &mut self,
        create: CreateView,
    ) -> Result<StatementResult, ServerError> {
        if create.or_replace || create.or_alter || create.temporary {
            return Err(ServerError::feature_not_supported(
                "CREATE OR REPLACE and TEMPORARY projections",
            ));
        }
        let emit_on_window_close = emits_on_window_close(&create)?;
        let (schema, name) = self.split_name(&create.name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if catalog.relation_exists(&schema, &name) {
            if create.if_not_exists {
                return Ok(command("CREATE MATERIALIZED VIEW"));
            }
            return Err(ServerError::DuplicateTable(name));
        }
        let column_names = declared_columns(&create);
        self.view.start_noting();
        let planned = self
            .plan_context()
            .plan_projection_emitting(&create.query, &column_names, emit_on_window_close)
            .await;
        let noted = self.view.take_noted();
        let planned = planned?;
        let columns = column_defs(&planned.stream)?;
        // What it scans, and the views it names (planned inline, so not
        // among the scans).
        let mut reads: Vec<ObjectId> = planned.bindings.iter().map(|b| b.object).collect();
        reads.extend(noted.iter().filter(|id| catalog.views.contains_key(id)));
        // `t` and `public.t` are two scans of one object.
        reads.sort();
        reads.dedup();
        let id = (*catalog).clone().allocate_id();
        let settings = self.object_settings();
        let query = self.stored_query(&create.query).await;
        let def = ProjectionDef {
            id,
            schema,
            name,
            query: query.to_string(),
            columns,
            reads,
            settings,
            emit_on_window_close,
            append_only: planned.stream.append_only,
            watermark_columns: planned.stream.watermark_columns.clone(),
        };
        let unbounded = planned.stream.unbounded_state.clone();
        let named = def.name.clone();
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateProjection(def)],
            tables: vec![],
        })?;
        self.notice_unbounded_state("projection", &named, &unbounded);
        Ok(command("CREATE MATERIALIZED VIEW"))
    }

    /// The settings a stored query is planned under again
    /// ([`crate::catalog::model::PROJECTION_SETTINGS`]), as they are now.
    pub(super) fn object_settings(&self) -> std::collections::BTreeMap<String, String> {
        crate::catalog::model::PROJECTION_SETTINGS
            .iter()
            .filter_map(|name| Some((name.to_string(), self.vars.get(name)?)))
            .collect()
    }

    /// A NOTICE per operator whose state can grow without bound
    /// ([`weir_planner::StreamPlan::unbounded_state`]).
    pub(super) fn notice_unbounded_state(&mut self, kind: &str, name: &str, operators: &[String]) {
        for operator in operators {
            self.notice(format!(
                "{kind} {name}: operator {operator} keeps state that grows without bound as its \
                 input keeps coming; bound it with a window over a source with WATERMARK FOR \
                 (TUMBLE/HOP grouped by window_start or window_end, or a join on it or within an \
                 interval of it) or a temporal filter (WHERE ts > now() - INTERVAL ...)"
            ));
        }
    }

    /// `EXPLAIN CREATE PROJECTION`: the operator graph, one node per row.
    pub(super) async fn explain_projection(
        &mut self,
        create: &CreateView,
    ) -> Result<StatementResult, ServerError> {
        let column_names = declared_columns(create);
        let planned = self
            .plan_context()
            .plan_projection_emitting(&create.query, &column_names, emits_on_window_close(create)?)
            .await?;
        let mut lines: Vec<Vec<String>> = planned
            .stream
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| vec![format!("source {i}: {}", s.name)])
            .collect();
        lines.extend(planned.stream.explain.iter().map(|l| vec![l.clone()]));
        text_rows(&["QUERY PLAN"], lines)
    }

    /// Runs after a transaction commits: deploys the projections it
    /// created and stops the ones it dropped; a shared source whose tables
    /// it created or dropped has its reader restarted with the tables there
    /// are now (nothing happens if nothing reads it). `before` is the
    /// catalog the transaction started from.
    pub(super) async fn after_commit(
        &mut self,
        ddl: &[CatalogChange],
        before: &Catalog,
    ) -> Result<(), ServerError> {
        let done = self.deploy_committed(ddl).await;
        // After the drops, so a reader nothing needs any more is stopped,
        // not restarted.
        let catalog = self.snapshot().catalog.clone();
        for parent in super::sources::shared_sources_changed(ddl, before, &catalog) {
            match self.plan_context().source_to_read(&parent) {
                Ok(read) => self.db.runtime().restart_source(read).await,
                // Its reader fails at open with the same error, in
                // weir_catalog.sources.
                Err(e) => {
                    tracing::warn!(source = %parent.qualified_name(), error = %e, "cannot restart a shared source's reader with its tables")
                }
            }
        }
        done
    }

    async fn deploy_committed(&mut self, ddl: &[CatalogChange]) -> Result<(), ServerError> {
        for change in ddl {
            match change {
                CatalogChange::CreateProjection(def) => {
                    if let Err(e) = self.deploy(def).await {
                        // Undo the creation, as a failed CREATE leaves nothing.
                        let base = self.db.snapshot();
                        let undo = TxnWrites {
                            ddl: vec![CatalogChange::DropProjection { id: def.id }],
                            tables: vec![],
                        };
                        if let Err(undo_error) = self.db.commit(&base, undo).await {
                            tracing::error!(projection = %def.name, error = %undo_error, "could not undo a failed projection");
                        }
                        return Err(e);
                    }
                }
                CatalogChange::DropProjection { id } | CatalogChange::DropSink { id } => {
                    self.db.runtime().drop_projection(*id).await;
                }
                CatalogChange::CreateSink(def) => {
                    if let Err(e) = self.deploy_sink(def).await {
                        let base = self.db.snapshot();
                        let undo = TxnWrites {
                            ddl: vec![CatalogChange::DropSink { id: def.id }],
                            tables: vec![],
                        };
                        if let Err(undo_error) = self.db.commit(&base, undo).await {
                            tracing::error!(sink = %def.name, error = %undo_error, "could not undo a failed sink");
                        }
                        return Err(e);
                    }
                }
                CatalogChange::DropSource { id } => {
                    self.db.runtime().drop_source(*id).await;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Plans a committed projection and starts maintaining it.
    pub(crate) async fn deploy(&mut self, def: &ProjectionDef) -> Result<(), ServerError> {
        let deployment = self.plan_deployment(def).await?;
        self.check_sources_that_cannot_replay("projection", &def.qualified_name(), &deployment)?;
        self.db.deploy_projection(deployment).await
    }

    /// Says that `object` sees only the rows its sources that cannot
    /// replay read from now on (the ones read before are gone), and
    /// refuses it over such a source that also retracts and has been
    /// read: its updates and deletes would then retract rows the object
    /// never saw, and its result would be wrong, not just late.
    pub(super) fn check_sources_that_cannot_replay(
        &mut self,
        kind: &str,
        object: &str,
        deployment: &weir_engine::runtime::Deployment,
    ) -> Result<(), ServerError> {
        // The relations read: a source, or the tables of a shared source
        // that the object reads, each read or not on its own (its split).
        let relations = deployment
            .sources_read
            .iter()
            .filter(|s| !s.replayable)
            .flat_map(|source| {
                if source.tables.is_empty() {
                    return vec![(source, source.id, source.name.clone())];
                }
                source
                    .tables
                    .iter()
                    .filter(|t| deployment.sources.iter().any(|b| b.object == t.id))
                    .map(|t| (source, t.id, t.name.clone()))
                    .collect()
            })
            .collect::<Vec<_>>();
        for (source, id, name) in relations {
            let retracts = weir_connectors::connector(
                &source.connector,
                weir_connectors::ConnectorKind::Source,
            )
            .is_ok_and(|c| !c.spec().capabilities.append_only);
            let read = self
                .db
                .runtime()
                .stream_status()
                .sources
                .get(&id)
                .is_some_and(|s| !s.offsets.is_empty());
            if retracts && read {
                return Err(ServerError::Sqlstate {
                    code: "55000",
                    message: format!(
                        "{kind} {object} cannot read source {name}: the source carries updates and deletes, \
                         has already been read and cannot replay, so the {kind} would retract rows it \
                         never saw; create it before the source is first read (in the same statement \
                         batch as the source), or read the table through a new source with its own slot"
                    ),
                });
            }
            self.notice(format!(
                "{kind} {object} reads source {name}, whose connector cannot replay: it starts at the \
                 source's current position and does not see the rows read before"
            ));
        }
        Ok(())
    }

    /// Plans a committed projection into what the runtime deploys
    /// (without table contents, which the caller adds under the commit lock).
    pub(crate) async fn plan_deployment(
        &self,
        def: &ProjectionDef,
    ) -> Result<weir_engine::runtime::Deployment, ServerError> {
        self.plan_context().projection(def).await
    }

    pub(super) async fn flush(&mut self) -> Result<StatementResult, ServerError> {
        self.db.flush().await?;
        Ok(command("FLUSH"))
    }

    /// Whether `statement` may read what the runtime maintains: a
    /// projection, or a `weir_catalog` table (whose counters and statuses
    /// follow epochs). Only such a statement waits for read-your-writes;
    /// the rest (writes, reads of tables, settings) never close an epoch.
    /// Names are matched without their schema, so a table that shares a
    /// projection's name costs a barrier, never a stale read.
    pub(super) fn reads_runtime(&self, statement: &Statement) -> bool {
        let names = weir_planner::compat::relation_names(statement);
        if names.is_empty() {
            return false;
        }
        let snapshot = self.db.snapshot();
        names.iter().any(|parts| match parts.as_slice() {
            [.., schema, _] if schema == "weir_catalog" => true,
            [.., name] => snapshot
                .catalog
                .projections
                .values()
                .any(|p| p.name == *name),
            [] => false,
        })
    }

    /// With `read_your_writes` on, waits until this session's committed
    /// writes are visible in every projection: a barrier whose target is
    /// this session's last write position, answered by the first epoch
    /// that covers it.
    pub(super) async fn read_your_writes(&mut self) -> Result<(), ServerError> {
        if self.last_write_seq <= self.db.runtime().covered()
            || self.db.snapshot().catalog.projections.is_empty()
            || !self.vars.get("read_your_writes").is_none_or(|v| v == "on")
        {
            return Ok(());
        }
        self.db.flush_to(self.last_write_seq).await
    }
}

/// `CREATE PROJECTION p (a, b) AS ...`: the names given to its columns.
pub(crate) fn declared_columns(create: &CreateView) -> Vec<String> {
    create
        .columns
        .iter()
        .map(|c| super::dml::normalize_ident(&c.name))
        .collect()
}

pub(crate) fn column_defs(stream: &StreamPlan) -> Result<Vec<ColumnDef>, ServerError> {
    let mut seen = std::collections::HashSet::new();
    stream
        .schema
        .fields()
        .iter()
        .map(|f| {
            // A repeated select-list name is marked to plan (see
            // `weir_pgsem::name_columns`); a projection's columns must be unique.
            let name = weir_pgsem::presented_name(f.name());
            if !seen.insert(name.to_string()) {
                return Err(ServerError::DuplicateColumn(name.to_string()));
            }
            column_def_of(f, "projection column")
        })
        .collect()
}

/// The catalog column of a field some query or connector produces;
/// `what` names it in the error when its type has no SQL type.
pub(crate) fn column_def_of(
    field: &arrow::datatypes::Field,
    what: &str,
) -> Result<ColumnDef, ServerError> {
    let sql_type = SqlType::from_field(field).ok_or_else(|| {
        ServerError::feature_not_supported(format!(
            "{what} \"{}\" of type {}",
            field.name(),
            field.data_type()
        ))
    })?;
    Ok(ColumnDef {
        name: field.name().clone(),
        sql_type,
        nullable: field.is_nullable(),
        default: None,
        generated: None,
    })
}

/// The DROP changes for the projections reading `id`, readers of readers
/// first, appended to `changes` (each once). Without CASCADE, any reader is
/// an error naming them.
pub(super) fn drop_readers(
    catalog: &Catalog,
    id: ObjectId,
    what: &str,
    cascade: bool,
    changes: &mut Vec<CatalogChange>,
) -> Result<(), ServerError> {
    let readers = catalog.readers_of(id);
    let sinks = catalog.sinks_reading(id);
    let views = catalog.views_reading(id);
    if readers.is_empty() && sinks.is_empty() && views.is_empty() {
        return Ok(());
    }
    if !cascade {
        return Err(ServerError::DependentObjects {
            object: what.to_string(),
            dependents: readers
                .iter()
                .map(|p| format!("projection {}", p.qualified_name()))
                .chain(sinks.iter().map(|s| {
                    let kind = if s.destination.is_some() {
                        "destination"
                    } else {
                        "sink"
                    };
                    format!("{kind} {}", s.qualified_name())
                }))
                .chain(views.iter().map(|v| format!("view {}", v.qualified_name())))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    for sink in sinks {
        let change = CatalogChange::DropSink { id: sink.id };
        if !changes.contains(&change) {
            changes.push(change);
        }
    }
    for reader in readers {
        drop_readers(catalog, reader.id, "", true, changes)?;
        let change = CatalogChange::DropProjection { id: reader.id };
        if !changes.contains(&change) {
            changes.push(change);
        }
    }
    for view in views {
        drop_readers(catalog, view.id, "", true, changes)?;
        let change = CatalogChange::DropView { id: view.id };
        if !changes.contains(&change) {
            changes.push(change);
        }
    }
    Ok(())
}

/// Whether `create` ends in `EMIT ON WINDOW CLOSE` (read as the option
/// [`weir_planner::emit_clause::EMIT_ON_WINDOW_CLOSE_OPTION`]); any other
/// option is refused.
fn emits_on_window_close(create: &CreateView) -> Result<bool, ServerError> {
    use datafusion::sql::sqlparser::ast::SqlOption;
    let options = match &create.options {
        CreateTableOptions::None => return Ok(false),
        CreateTableOptions::With(options) => options,
        other => {
            return Err(ServerError::feature_not_supported(format!(
                "projection options {other} (none are supported yet)"
            )));
        }
    };
    match options.as_slice() {
        [SqlOption::KeyValue { key, .. }]
            if key.value == weir_planner::emit_clause::EMIT_ON_WINDOW_CLOSE_OPTION =>
        {
            Ok(true)
        }
        _ => Err(ServerError::feature_not_supported(format!(
            "projection options {} (none are supported yet)",
            create.options
        ))),
    }
}
