//! CREATE / DROP / EXPLAIN CREATE PROJECTION (also spelled MATERIALIZED
//! VIEW), FLUSH and read-your-writes.
//!
//! A projection is planned twice: when created (so an unsupported query
//! fails before anything is written) and when deployed, after its catalog
//! entry commits (and again at every start), against the catalog of that
//! moment. Deployment backfills it from its inputs; if that fails, the
//! creation is undone and the error returned, as PostgreSQL fails a
//! `CREATE MATERIALIZED VIEW` whose query fails.

use datafusion::common::TableReference;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder, col};
use datafusion::sql::sqlparser::ast::{CreateTableOptions, CreateView, Query, Statement};
use weir_common::ObjectId;
use weir_engine::SourceBinding;
use weir_pgsem::SqlType;
use weir_planner::StreamPlan;

use super::{Session, StatementResult, command, show::text_rows};
use crate::catalog::model::{ColumnDef, ProjectionDef};
use crate::catalog::{Catalog, CatalogChange};
use crate::db::TxnWrites;
use crate::error::ServerError;

/// A projection's graph with its sources bound to catalog objects.
pub(crate) struct PlannedProjection {
    pub stream: StreamPlan,
    pub bindings: Vec<SourceBinding>,
    /// The sources among the bindings' objects, each once.
    pub sources_read: Vec<weir_engine::runtime::streams::SourceToRead>,
}

impl Session {
    /// Binds and lowers a projection query against the session's catalog.
    pub(crate) async fn plan_projection(
        &self,
        query: &Query,
        column_names: &[String],
    ) -> Result<PlannedProjection, ServerError> {
        let plan = self
            .plan_statement(Statement::Query(Box::new(query.clone())))
            .await?;
        let plan = rename_columns(plan, column_names)?;
        let stream = weir_planner::lower(&plan, &self.ctx.state())?;
        let catalog = self.snapshot().catalog.clone();
        let default_schema = self.vars.default_schema();
        let bindings = stream
            .sources
            .iter()
            .map(|source| {
                let object = resolve_source(&catalog, &source.name, &default_schema)?;
                Ok(SourceBinding {
                    object,
                    schema: source.schema.clone(),
                })
            })
            .collect::<Result<Vec<_>, ServerError>>()?;
        let mut sources_read: Vec<weir_engine::runtime::streams::SourceToRead> = Vec::new();
        for binding in &bindings {
            if let Some(def) = catalog.sources.get(&binding.object)
                && !sources_read.iter().any(|s| s.id == def.id)
            {
                sources_read.push(weir_engine::runtime::streams::SourceToRead {
                    id: def.id,
                    name: def.qualified_name(),
                    connector: def.connector.clone(),
                    options: def.options.clone(),
                    schema: def.arrow_schema(),
                });
            }
        }
        Ok(PlannedProjection {
            stream,
            bindings,
            sources_read,
        })
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
        if !matches!(create.options, CreateTableOptions::None) {
            return Err(ServerError::feature_not_supported(format!(
                "projection options {} (none are supported yet)",
                create.options
            )));
        }
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
        let planned = self.plan_projection(&create.query, &column_names).await?;
        let columns = column_defs(&planned.stream)?;
        let mut reads: Vec<ObjectId> = planned.bindings.iter().map(|b| b.object).collect();
        // `t` and `public.t` are two scans of one object.
        reads.sort();
        reads.dedup();
        let id = (*catalog).clone().allocate_id();
        let settings = crate::catalog::model::PROJECTION_SETTINGS
            .iter()
            .filter_map(|name| Some((name.to_string(), self.vars.get(name)?)))
            .collect();
        let def = ProjectionDef {
            id,
            schema,
            name,
            query: create.query.to_string(),
            columns,
            reads,
            settings,
        };
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateProjection(def)],
            tables: vec![],
        })?;
        Ok(command("CREATE MATERIALIZED VIEW"))
    }

    /// `EXPLAIN CREATE PROJECTION`: the operator graph, one node per row.
    pub(super) async fn explain_projection(
        &mut self,
        create: &CreateView,
    ) -> Result<StatementResult, ServerError> {
        let column_names = declared_columns(create);
        let planned = self.plan_projection(&create.query, &column_names).await?;
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
    /// created and stops the ones it dropped.
    pub(super) async fn after_commit(&mut self, ddl: &[CatalogChange]) -> Result<(), ServerError> {
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
    pub(crate) async fn deploy(&self, def: &ProjectionDef) -> Result<(), ServerError> {
        let deployment = self.plan_deployment(def).await?;
        self.db.deploy_projection(deployment).await
    }

    /// Takes on the settings a projection was created under, to plan it
    /// again at a start (see [`ProjectionDef::settings`]).
    pub(crate) fn adopt_settings(&mut self, def: &ProjectionDef) -> Result<(), ServerError> {
        for (name, value) in &def.settings {
            self.vars.set(name, value)?;
        }
        self.apply_vars_to_planner();
        Ok(())
    }

    /// Plans a committed projection into what the coordinator deploys
    /// (without table contents, which the caller adds under the commit lock).
    pub(crate) async fn plan_deployment(
        &self,
        def: &ProjectionDef,
    ) -> Result<weir_engine::runtime::Deployment, ServerError> {
        let query = parse_query(&def.query)?;
        let names: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
        let planned = self.plan_projection(&query, &names).await?;
        deployment_of(def.id, planned, def.arrow_schema(), None)
    }

    pub(super) async fn flush(&mut self) -> Result<StatementResult, ServerError> {
        self.db.flush().await?;
        Ok(command("FLUSH"))
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

/// What the coordinator deploys for a planned projection or sink.
pub(crate) fn deployment_of(
    id: ObjectId,
    planned: PlannedProjection,
    schema: arrow::datatypes::SchemaRef,
    sink: Option<weir_engine::runtime::streams::SinkToOpen>,
) -> Result<weir_engine::runtime::Deployment, ServerError> {
    let PlannedProjection {
        mut stream,
        bindings,
        sources_read,
    } = planned;
    stream.conform_to(schema.clone())?;
    Ok(weir_engine::runtime::Deployment {
        id,
        fingerprint: weir_engine::state_fingerprint(&stream.graph, &schema),
        graph: stream.graph,
        sources: bindings,
        schema,
        tables: Default::default(),
        sources_read,
        sink,
    })
}

/// `CREATE PROJECTION p (a, b) AS ...`: the names given to its columns.
pub(crate) fn declared_columns(create: &CreateView) -> Vec<String> {
    create
        .columns
        .iter()
        .map(|c| super::dml::normalize_ident(&c.name))
        .collect()
}

/// The catalog object a scanned relation of a projection is.
fn resolve_source(
    catalog: &Catalog,
    name: &TableReference,
    default_schema: &str,
) -> Result<ObjectId, ServerError> {
    let schema = name.schema().unwrap_or(default_schema);
    let table = name.table();
    if let Some(t) = catalog.table(schema, table) {
        return Ok(t.id);
    }
    if let Some(p) = catalog.projection(schema, table) {
        return Ok(p.id);
    }
    if let Some(s) = catalog.source(schema, table) {
        return Ok(s.id);
    }
    Err(ServerError::feature_not_supported(format!(
        "reading {name} in a projection: only tables, sources and projections can be maintained incrementally"
    )))
}

pub(crate) fn parse_query(text: &str) -> Result<Query, ServerError> {
    let mut statements = weir_planner::parse_sql(text)
        .map_err(|e| ServerError::internal(format!("stored projection query: {e}")))?;
    match statements.pop() {
        Some(Statement::Query(q)) if statements.is_empty() => Ok(*q),
        _ => Err(ServerError::internal(format!(
            "stored projection query is not one query: {text}"
        ))),
    }
}

/// `CREATE PROJECTION p (a, b) AS ...` names the columns.
fn rename_columns(plan: LogicalPlan, names: &[String]) -> Result<LogicalPlan, ServerError> {
    if names.is_empty() {
        return Ok(plan);
    }
    let fields = plan.schema().columns();
    if names.len() > fields.len() {
        return Err(ServerError::invalid_param(format!(
            "CREATE PROJECTION names {} columns but the query has {}",
            names.len(),
            fields.len()
        )));
    }
    let exprs = fields
        .into_iter()
        .enumerate()
        .map(|(i, c)| match names.get(i) {
            Some(n) => col(c).alias(n),
            None => col(c),
        });
    Ok(LogicalPlanBuilder::from(plan).project(exprs)?.build()?)
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
    if readers.is_empty() && sinks.is_empty() {
        return Ok(());
    }
    if !cascade {
        return Err(ServerError::DependentObjects {
            object: what.to_string(),
            dependents: readers
                .iter()
                .map(|p| format!("projection {}", p.qualified_name()))
                .chain(sinks.iter().map(|s| format!("sink {}", s.qualified_name())))
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
    Ok(())
}
