//! Planning projections and sinks into what the runtime deploys, apart
//! from any session: a CREATE plans through here with its session's
//! DataFusion state, and recovery plans every projection and sink again at
//! a start with a state of its own ([`PlanContext::for_settings`]), under
//! the settings the object was created with.
//!
//! Binding and lowering are the planner's ([`weir_planner::bind()`],
//! [`weir_planner::lower()`]); this module binds the scanned relations to
//! catalog objects and says which sources a graph reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::common::TableReference;
use datafusion::config::ConfigOptions;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder, col};
use datafusion::sql::sqlparser::ast::{Query, Statement};
use weir_common::ObjectId;
use weir_engine::SourceBinding;
use weir_engine::runtime::Deployment;
use weir_engine::runtime::streams::{SinkToOpen, SourceToRead};
use weir_engine::runtime::{TableToRead, TableWatermark};
use weir_engine::watermark::WatermarkSpec;
use weir_planner::StreamPlan;

use crate::catalog::Catalog;
use crate::catalog::model::{ProjectionDef, TableDef, WatermarkDef};
use crate::catalog::provider::{SessionView, WeirCatalogList};
use crate::catalog::streaming::{SinkDef, SourceDef, SourceKind};
use crate::catalog::view::{ViewDef, ViewPlanner};
use crate::db::Database;
use crate::error::ServerError;
use datafusion::error::DataFusionError;

/// A projection's graph with its sources bound to catalog objects.
pub(crate) struct PlannedProjection {
    pub stream: StreamPlan,
    pub bindings: Vec<SourceBinding>,
    /// The sources among the bindings' objects, each once.
    pub sources_read: Vec<SourceToRead>,
    /// The append-only tables among them with a watermark, each once.
    pub table_watermarks: Vec<TableWatermark>,
}

/// What a query is planned in: DataFusion's state (catalog providers,
/// settings), the catalog its relations resolve in, the schema unqualified
/// names mean, and how graphs are built (the server's `--workers`).
pub struct PlanContext {
    state: SessionState,
    catalog: Arc<Catalog>,
    default_schema: String,
    lower: weir_planner::LowerOptions,
    /// Opens the secrets sources and sinks name, for their connectors.
    secret_key: Arc<crate::secrets::SecretKey>,
}

impl PlanContext {
    pub fn new(
        state: SessionState,
        catalog: Arc<Catalog>,
        default_schema: String,
        db: &Database,
    ) -> Self {
        Self {
            state,
            catalog,
            default_schema,
            lower: weir_planner::LowerOptions {
                workers: db.config().workers(),
                emit_on_window_close: false,
            },
            secret_key: db.secret_key().clone(),
        }
    }

    /// A state of its own over the database's current snapshot, under
    /// `settings` (an object's stored `search_path`, `DateStyle` and
    /// `TimeZone`; PostgreSQL's defaults for those not given).
    pub fn for_settings(
        db: &Arc<Database>,
        settings: &BTreeMap<String, String>,
    ) -> Result<Self, ServerError> {
        Self::for_settings_over(db, settings, db.snapshot())
    }

    /// As [`Self::for_settings`], over `snapshot` (a transaction's, with
    /// its uncommitted DDL) instead of the database's current one.
    pub fn for_settings_over(
        db: &Arc<Database>,
        settings: &BTreeMap<String, String>,
        snapshot: Arc<crate::db::Snapshot>,
    ) -> Result<Self, ServerError> {
        let catalog = snapshot.catalog.clone();
        let view = Arc::new(SessionView::new(
            snapshot,
            Arc::new(crate::system::SystemSchema::new(db.clone())),
        ));
        view.set_view_planner(Arc::new(ViewPlanning { db: db.clone() }));
        let (state, default_schema) = state_over(db, view, settings)?;
        Ok(Self::new(state, catalog, default_schema, db))
    }

    /// Binds and lowers a projection (or sink) query; `column_names`
    /// rename its output columns in order (`CREATE PROJECTION p (a, b) AS
    /// ...`); `emit_on_window_close` as the statement says.
    pub(crate) async fn plan_projection_emitting(
        &self,
        query: &Query,
        column_names: &[String],
        emit_on_window_close: bool,
    ) -> Result<PlannedProjection, ServerError> {
        let statement = Statement::Query(Box::new(query.clone()));
        let plan = Box::pin(weir_planner::bind(&self.state, statement)).await?;
        let plan = rename_columns(plan, column_names)?;
        let relations = |name: &TableReference| {
            let id = resolve_source(&self.catalog, name, &self.default_schema).ok();
            if let Some(projection) = id.and_then(|id| self.catalog.projections.get(&id)) {
                return weir_planner::ScannedRelation {
                    append_only: projection.append_only,
                    watermarks: projection.watermark_columns.clone(),
                };
            }
            if let Some(table) = id.and_then(|id| self.catalog.tables.get(&id)) {
                return weir_planner::ScannedRelation {
                    append_only: table.append_only,
                    watermarks: table.watermark.iter().map(|w| w.column.clone()).collect(),
                };
            }
            let Some(def) = id.and_then(|id| self.catalog.sources.get(&id)) else {
                return weir_planner::ScannedRelation::default();
            };
            let connector = match def.kind {
                SourceKind::Table { source, .. } => self
                    .catalog
                    .sources
                    .get(&source)
                    .map_or(def.connector.as_str(), |s| s.connector.as_str()),
                _ => def.connector.as_str(),
            };
            weir_planner::ScannedRelation {
                append_only: weir_connectors::connector(
                    connector,
                    weir_connectors::ConnectorKind::Source,
                )
                .is_ok_and(|c| c.spec().capabilities.append_only),
                watermarks: def.watermark.iter().map(|w| w.column.clone()).collect(),
            }
        };
        let options = weir_planner::LowerOptions {
            emit_on_window_close,
            ..self.lower
        };
        let stream = weir_planner::lower(&plan, &self.state, &relations, &options)?;
        let bindings = stream
            .sources
            .iter()
            .map(|source| {
                let object = resolve_source(&self.catalog, &source.name, &self.default_schema)?;
                Ok(SourceBinding {
                    object,
                    schema: source.schema.clone(),
                })
            })
            .collect::<Result<Vec<_>, ServerError>>()?;
        let mut sources_read: Vec<SourceToRead> = Vec::new();
        for binding in &bindings {
            if let Some(def) = self.catalog.sources.get(&binding.object)
                && !sources_read.iter().any(|s| s.id == def.id)
            {
                sources_read.push(self.source_to_read(def)?);
            }
        }
        let mut table_watermarks: Vec<TableWatermark> = Vec::new();
        for binding in &bindings {
            if let Some(def) = self.catalog.tables.get(&binding.object)
                && !table_watermarks.iter().any(|t| t.table == def.id)
                && let Some(watermark) = self.table_watermark(def)?
            {
                table_watermarks.push(watermark);
            }
        }
        Ok(PlannedProjection {
            stream,
            bindings,
            sources_read,
            table_watermarks,
        })
    }

    /// What a source's or sink's connector is handed (its connection's
    /// options merged in, its secrets opened).
    fn connector_options(
        &self,
        connector: &str,
        options: &BTreeMap<String, String>,
        secrets: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, ServerError> {
        crate::secrets::resolve(&self.catalog, &self.secret_key, connector, options, secrets)
    }

    /// A committed projection, planned into what the runtime deploys
    /// (without table contents, which the caller adds under the commit lock).
    pub async fn projection(&self, def: &ProjectionDef) -> Result<Deployment, ServerError> {
        let query = parse_query(&def.query)?;
        let names: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
        let planned = self
            .plan_projection_emitting(&query, &names, def.emit_on_window_close)
            .await?;
        deployment_of(def.id, planned, def.arrow_schema(), None)
    }

    /// What the runtime needs to read a source: its options resolved
    /// (connection, secrets) and the gaps accepted so far. A table of a
    /// shared source is read by its parent's reader, so for one (and for
    /// the shared source itself) this is the parent's, with every table of
    /// it: one reader per slot, whichever table a deployment binds.
    pub fn source_to_read(&self, def: &SourceDef) -> Result<SourceToRead, ServerError> {
        let def = match def.kind {
            SourceKind::Table { source, .. } => {
                self.catalog.sources.get(&source).ok_or_else(|| {
                    ServerError::internal(format!(
                        "source {} is a table of source {source}, which is not in the catalog",
                        def.qualified_name()
                    ))
                })?
            }
            SourceKind::Rows | SourceKind::Shared => def,
        };
        let mut options = self.connector_options(&def.connector, &def.options, &def.secrets)?;
        if def.gaps_accepted > 0 {
            options.insert(
                crate::catalog::streaming::GAPS_ACCEPTED_OPTION.into(),
                def.gaps_accepted.to_string(),
            );
        }
        let tables = self
            .catalog
            .tables_of_source(def.id)
            .into_iter()
            .filter_map(|t| match &t.kind {
                SourceKind::Table { upstream, .. } => {
                    Some(self.watermark_spec(t).map(|watermark| TableToRead {
                        id: t.id,
                        name: t.qualified_name(),
                        upstream: upstream.clone(),
                        schema: t.arrow_schema(),
                        gaps_accepted: t.gaps_accepted,
                        watermark,
                    }))
                }
                _ => None,
            })
            .collect::<Result<Vec<_>, ServerError>>()?;
        Ok(SourceToRead {
            id: def.id,
            name: def.qualified_name(),
            connector: def.connector.clone(),
            options,
            schema: def.arrow_schema(),
            replayable: weir_connectors::connector(
                &def.connector,
                weir_connectors::ConnectorKind::Source,
            )
            .is_ok_and(|c| c.spec().capabilities.replayable),
            paused: def.paused,
            tables,
            generation: def.generation,
            watermark: self.watermark_spec(def)?,
        })
    }

    /// How the watermark of `def`'s relation is generated: its
    /// `WATERMARK FOR` expression planned over its columns, and its
    /// source's `idle_timeout`.
    pub fn watermark_spec(&self, def: &SourceDef) -> Result<Option<WatermarkSpec>, ServerError> {
        let Some(w) = &def.watermark else {
            return Ok(None);
        };
        let options = match def.kind {
            SourceKind::Table { source, .. } => self
                .catalog
                .sources
                .get(&source)
                .map_or(&def.options, |s| &s.options),
            _ => &def.options,
        };
        let duration = |option: &str, default| match options.get(option) {
            Some(text) => weir_connectors::recovery::parse_duration(text).map_err(|e| {
                ServerError::InvalidParameterValue(format!("{option} = '{text}': {e}"))
            }),
            None => Ok(default),
        };
        let idle_timeout = duration(
            weir_connectors::spec::IDLE_TIMEOUT,
            weir_connectors::spec::DEFAULT_IDLE_TIMEOUT,
        )?;
        let max_drift = match options.get(weir_connectors::spec::MAX_DRIFT) {
            Some(off) if off.eq_ignore_ascii_case("off") => None,
            _ => Some(duration(
                weir_connectors::spec::MAX_DRIFT,
                weir_engine::watermark::DEFAULT_MAX_DRIFT,
            )?),
        };
        let mut spec =
            self.watermark_over(&def.arrow_schema(), w, &def.qualified_name(), idle_timeout)?;
        spec.max_drift = max_drift;
        Ok(Some(spec))
    }

    /// How an append-only table's watermark is generated (its rows are
    /// one split, idle after the default `idle_timeout`).
    pub fn table_watermark(&self, def: &TableDef) -> Result<Option<TableWatermark>, ServerError> {
        let Some(w) = &def.watermark else {
            return Ok(None);
        };
        let schema = def.user_schema();
        let spec = self.watermark_over(
            &schema,
            w,
            &def.qualified_name(),
            weir_connectors::spec::DEFAULT_IDLE_TIMEOUT,
        )?;
        Ok(Some(TableWatermark {
            table: def.id,
            spec,
            schema,
        }))
    }

    /// `w` planned over `schema`, checked to keep the order of its column.
    fn watermark_over(
        &self,
        schema: &arrow::datatypes::SchemaRef,
        w: &WatermarkDef,
        relation: &str,
        idle_timeout: std::time::Duration,
    ) -> Result<WatermarkSpec, ServerError> {
        let column = schema.index_of(&w.column).map_err(|_| {
            ServerError::internal(format!(
                "the watermark column {} is not a column of {relation}",
                w.column
            ))
        })?;
        let expr = watermark_expr(&self.state, schema, &w.expr)?;
        if weir_engine::watermark::monotone_column(&expr) != Some(column) {
            return Err(ServerError::InvalidParameterValue(format!(
                "WATERMARK FOR {} AS {}: the expression must read only {} and never decrease as it grows \
                 (for example {} - INTERVAL '5' SECOND)",
                w.column, w.expr, w.column, w.column
            )));
        }
        Ok(WatermarkSpec {
            column,
            expr,
            idle_timeout,
            max_drift: Some(weir_engine::watermark::DEFAULT_MAX_DRIFT),
        })
    }

    /// A committed sink, planned into what the runtime deploys.
    pub async fn sink(&self, def: &SinkDef) -> Result<Deployment, ServerError> {
        let query = parse_query(&def.query)?;
        let names: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
        let planned = self
            .plan_projection_emitting(&query, &names, def.emit_on_window_close)
            .await?;
        let sink = self.sink_to_open(def)?;
        deployment_of(def.id, planned, def.arrow_schema(), Some(sink))
    }

    /// The connector a sink deployment writes to, its connection and
    /// secrets resolved as they are now.
    pub fn sink_to_open(&self, def: &SinkDef) -> Result<SinkToOpen, ServerError> {
        let mut options = self.connector_options(&def.connector, &def.options, &def.secrets)?;
        if let Some(destination) = &def.destination {
            options = destination.connector_options(options);
        }
        Ok(SinkToOpen {
            name: def.qualified_name(),
            connector: def.connector.clone(),
            options,
            schema: def.arrow_schema(),
            paused: def.paused,
        })
    }
}

/// Sets what a query's text means in DataFusion's options: the schema of
/// unqualified names, the time zone of `timestamptz` literals, how date
/// text is read. Sessions call it whenever one of them is SET.
pub(crate) fn apply_settings(
    options: &mut ConfigOptions,
    default_schema: &str,
    time_zone: String,
    date_style: String,
) {
    options.catalog.default_schema = default_schema.to_string();
    let mut settings = weir_pgsem::SessionSettings::default();
    settings.date_style = date_style;
    options.extensions.insert(settings);
    options.execution.time_zone = Some(if time_zone == "UTC" {
        "+00:00".to_string()
    } else {
        time_zone
    });
}

/// The schema unqualified names resolve in, for a `search_path` value: its
/// first entry other than `$user` (Weir has no per-user schemas).
pub(crate) fn default_schema_of(search_path: &str) -> String {
    search_path
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .find(|s| !s.is_empty() && s != "$user")
        .unwrap_or_else(|| "public".to_string())
}

/// What the runtime deploys for a planned projection or sink.
pub(crate) fn deployment_of(
    id: ObjectId,
    planned: PlannedProjection,
    schema: arrow::datatypes::SchemaRef,
    sink: Option<SinkToOpen>,
) -> Result<Deployment, ServerError> {
    let PlannedProjection {
        mut stream,
        bindings,
        sources_read,
        table_watermarks,
    } = planned;
    stream.conform_to(schema.clone())?;
    Ok(Deployment {
        id,
        fingerprint: weir_engine::state_fingerprint(&stream.graph, &schema),
        graph: stream.graph,
        sources: bindings,
        schema,
        tables: Default::default(),
        tables_at: 0,
        sources_read,
        sink,
        rebuilt: false,
        table_watermarks,
    })
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
        if s.is_shared() {
            return Err(catalog.shared_source_unreadable(s));
        }
        return Ok(s.id);
    }
    Err(ServerError::feature_not_supported(format!(
        "reading {name} in a projection: only tables, sources and projections can be maintained incrementally"
    )))
}

/// A stored projection's or sink's query text, parsed again.
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

/// A query state over `view` under an object's stored `settings`
/// (PostgreSQL's defaults for those not given), and its default schema.
fn state_over(
    db: &Database,
    view: Arc<SessionView>,
    settings: &BTreeMap<String, String>,
) -> Result<(SessionState, String), ServerError> {
    let env = db.query_env();
    let catalog_list = WeirCatalogList::new(view, env.pg_static.clone())?;
    let mut state = SessionStateBuilder::new_from_existing(env.template.clone())
        .with_catalog_list(Arc::new(catalog_list))
        .build();
    let setting = |name: &str, default: &str| {
        settings
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    };
    let default_schema = default_schema_of(&setting("search_path", "\"$user\", public"));
    apply_settings(
        state.config_mut().options_mut(),
        &default_schema,
        setting("TimeZone", "UTC"),
        setting("DateStyle", "ISO, MDY"),
    );
    Ok((state, default_schema))
}

/// Plans the views a statement reads: each view's query under the
/// settings it was created with, over the reader's snapshot (so one query
/// reads one snapshot, views included).
#[derive(Debug)]
pub struct ViewPlanning {
    pub db: Arc<Database>,
}

impl ViewPlanner for ViewPlanning {
    fn plan<'a>(
        &'a self,
        session: Arc<SessionView>,
        def: Arc<ViewDef>,
    ) -> futures::future::BoxFuture<'a, datafusion::error::Result<LogicalPlan>> {
        Box::pin(async move {
            let external = |e: ServerError| DataFusionError::External(Box::new(e));
            let (state, _) = state_over(&self.db, session, &def.settings).map_err(external)?;
            let query = parse_query(&def.query).map_err(external)?;
            let plan = Box::pin(weir_planner::bind(
                &state,
                Statement::Query(Box::new(query)),
            ))
            .await
            .map_err(|e| external(e.into()))?;
            let names: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
            let plan = rename_columns(plan, &names).map_err(external)?;
            let planned: Vec<_> = plan
                .schema()
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            let declared: Vec<_> = def
                .arrow_schema()
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            if planned != declared {
                return Err(external(ServerError::Sqlstate {
                    code: "42P16",
                    message: format!(
                        "view {} no longer plans to the columns it was created with ({}); \
                         recreate it with CREATE OR REPLACE VIEW",
                        def.qualified_name(),
                        names.join(", ")
                    ),
                }));
            }
            Ok(plan)
        })
    }
}

/// A `WATERMARK FOR` expression planned over a source's columns.
pub(crate) fn watermark_expr(
    state: &SessionState,
    schema: &arrow::datatypes::SchemaRef,
    expr: &str,
) -> Result<Arc<dyn datafusion::physical_expr::PhysicalExpr>, ServerError> {
    let df_schema = datafusion::common::DFSchema::try_from(schema.as_ref().clone())?;
    let logical = state.create_logical_expr(expr, &df_schema)?;
    Ok(state.create_physical_expr(logical, &df_schema)?)
}
