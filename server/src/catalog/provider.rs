//! DataFusion's view of a Weir database, as one session sees it.
//!
//! A [`SessionView`] holds the snapshot the current statement reads (the
//! latest committed one, or the session's transaction overlay). The
//! providers here resolve names against that snapshot only, so every table
//! of one query reads the same committed state.
//!
//! Layout: catalog `weir` with the user schemas (`public`, ...),
//! `pg_catalog` ([`super::pg`], over datafusion-pg-catalog), `weir_catalog`
//! (Weir's system tables) and `information_schema` ([`super::info_schema`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, SchemaProvider, Session, TableProvider,
};
use datafusion::common::{Constraint, Constraints, DFSchema};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};
use parking_lot::RwLock;
use weir_engine::TableState;

use super::TableDef;
use super::info_schema::InformationSchema;
use super::key_access::{self, KeyAccess, KeyColumns};
use super::model::{DATABASE_NAME, ProjectionDef};
use super::pg::PgCatalog;
use super::view::{MAX_VIEW_DEPTH, ViewDef, ViewPlanner};
use crate::db::Snapshot;
use crate::system::SystemSchema;

pub const PG_CATALOG: &str = "pg_catalog";
pub const WEIR_CATALOG: &str = "weir_catalog";
pub const INFORMATION_SCHEMA: &str = "information_schema";

/// A session's variables (the session's `SharedVars`).
pub type SharedVars = Arc<RwLock<std::collections::BTreeMap<String, String>>>;

/// What the current statement of one session reads.
#[derive(Debug)]
pub struct SessionView {
    snapshot: RwLock<Arc<Snapshot>>,
    /// While set, tables expose their hidden row-id column (DML planning).
    expose_hidden: AtomicBool,
    /// Parsed DEFAULT expressions per table, planned once per table version.
    defaults: RwLock<HashMap<weir_common::ObjectId, Arc<HashMap<String, Expr>>>>,
    /// The session's variables, for `search_path` and `pg_settings`; set
    /// when the session registers its functions.
    vars: RwLock<Option<SharedVars>>,
    pub system: Arc<SystemSchema>,
    /// Plans the views a statement reads; without one, reading a view is
    /// an error.
    view_planner: RwLock<Option<Arc<dyn ViewPlanner>>>,
    /// How many views deep the planning of the current statement is.
    view_depth: std::sync::atomic::AtomicUsize,
    /// While set, the relations the statement names itself (not those its
    /// views read) are noted here: what a new view or projection reads.
    noted: parking_lot::Mutex<Option<Vec<weir_common::ObjectId>>>,
}

impl SessionView {
    pub fn new(snapshot: Arc<Snapshot>, system: Arc<SystemSchema>) -> Self {
        Self {
            snapshot: RwLock::new(snapshot),
            expose_hidden: AtomicBool::new(false),
            defaults: RwLock::default(),
            vars: RwLock::default(),
            system,
            view_planner: RwLock::default(),
            view_depth: Default::default(),
            noted: Default::default(),
        }
    }

    pub fn set_view_planner(&self, planner: Arc<dyn ViewPlanner>) {
        *self.view_planner.write() = Some(planner);
    }

    /// Starts noting the relations a statement names (see [`Self::noted`]).
    pub fn start_noting(&self) {
        *self.noted.lock() = Some(Vec::new());
    }

    /// Stops noting; the relations named since [`Self::start_noting`],
    /// each once, in id order.
    pub fn take_noted(&self) -> Vec<weir_common::ObjectId> {
        let mut ids = self.noted.lock().take().unwrap_or_default();
        ids.sort();
        ids.dedup();
        ids
    }

    fn note(&self, id: weir_common::ObjectId) {
        if self.view_depth.load(Ordering::Acquire) == 0
            && let Some(ids) = self.noted.lock().as_mut()
        {
            ids.push(id);
        }
    }

    /// A view's query planned for reading, inline.
    async fn view_table(self: &Arc<Self>, def: Arc<ViewDef>) -> DfResult<Arc<dyn TableProvider>> {
        let Some(planner) = self.view_planner.read().clone() else {
            return Err(DataFusionError::Plan(format!(
                "view {} cannot be read here",
                def.qualified_name()
            )));
        };
        // Counted down on drop, so a statement canceled while planning a
        // view does not leave the session deeper than it is.
        struct Deeper<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Deeper<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let depth = self.view_depth.fetch_add(1, Ordering::AcqRel);
        let _deeper = Deeper(&self.view_depth);
        let planned = if depth >= MAX_VIEW_DEPTH {
            Err(DataFusionError::External(Box::new(
                crate::error::ServerError::Sqlstate {
                    code: "42P17",
                    message: format!(
                        "infinite recursion detected in rules for relation \"{}\"",
                        def.name
                    ),
                },
            )))
        } else {
            planner.plan(self.clone(), def.clone()).await
        };
        Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
            planned?,
            Some(def.query.clone()),
        )))
    }

    pub fn set_vars(&self, vars: SharedVars) {
        *self.vars.write() = Some(vars);
    }

    /// The value of one session variable (names are case-insensitive).
    pub fn var(&self, name: &str) -> Option<String> {
        let vars = self.vars.read().clone()?;
        let values = vars.read();
        values
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }

    pub fn vars(&self) -> Option<SharedVars> {
        self.vars.read().clone()
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().clone()
    }

    pub fn set_snapshot(&self, snapshot: Arc<Snapshot>) {
        *self.snapshot.write() = snapshot;
    }

    pub fn set_expose_hidden(&self, on: bool) {
        self.expose_hidden.store(on, Ordering::Release);
    }

    pub fn set_defaults(&self, id: weir_common::ObjectId, defaults: Arc<HashMap<String, Expr>>) {
        self.defaults.write().insert(id, defaults);
    }

    fn table(&self, schema: &str, name: &str) -> Option<Arc<dyn TableProvider>> {
        let snapshot = self.snapshot();
        if let Some(def) = snapshot.catalog.source(schema, name) {
            return Some(Arc::new(SourceTable { def: def.clone() }));
        }
        if let Some(def) = snapshot.catalog.projection(schema, name) {
            return Some(Arc::new(ProjectionTable {
                def: def.clone(),
                view: snapshot.projections.projections.get(&def.id).cloned(),
            }));
        }
        let def = snapshot.catalog.table(schema, name)?.clone();
        let state = snapshot.tables.get(&def.id)?.clone();
        let defaults = self
            .defaults
            .read()
            .get(&def.id)
            .cloned()
            .unwrap_or_default();
        Some(Arc::new(WeirTable::new(
            def,
            state,
            self.expose_hidden.load(Ordering::Acquire),
            defaults,
        )))
    }
}

/// The catalog list of one session: just the `weir` database.
#[derive(Debug)]
pub struct WeirCatalogList {
    catalog: Arc<WeirCatalog>,
}

impl WeirCatalogList {
    pub fn new(view: Arc<SessionView>, pg_static: Arc<PgCatalogStaticTables>) -> DfResult<Self> {
        let inner = Arc::new(PgCatalogSchemaProvider::try_new(
            ViewCatalogInfo { view: view.clone() },
            pg_static.clone(),
            EmptyContextProvider,
        )?);
        let pg_catalog = Arc::new(PgCatalog::new(inner, view.clone(), pg_static));
        let information_schema = Arc::new(InformationSchema::new(view.clone()));
        Ok(Self {
            catalog: Arc::new(WeirCatalog {
                view,
                pg_catalog,
                information_schema,
            }),
        })
    }

    pub fn view(&self) -> &Arc<SessionView> {
        &self.catalog.view
    }
}

impl CatalogProviderList for WeirCatalogList {
    fn register_catalog(
        &self,
        _name: String,
        _catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        None
    }

    fn catalog_names(&self) -> Vec<String> {
        vec![DATABASE_NAME.to_string()]
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        (name == DATABASE_NAME).then(|| self.catalog.clone() as Arc<dyn CatalogProvider>)
    }
}

#[derive(Debug)]
struct WeirCatalog {
    view: Arc<SessionView>,
    pg_catalog: Arc<PgCatalog>,
    information_schema: Arc<InformationSchema>,
}

impl CatalogProvider for WeirCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .view
            .snapshot()
            .catalog
            .schemas
            .iter()
            .cloned()
            .collect();
        names.push(PG_CATALOG.to_string());
        names.push(INFORMATION_SCHEMA.to_string());
        names.push(WEIR_CATALOG.to_string());
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        match name {
            PG_CATALOG => Some(self.pg_catalog.clone()),
            INFORMATION_SCHEMA => Some(self.information_schema.clone()),
            WEIR_CATALOG => Some(self.view.system.clone()),
            _ if self.view.snapshot().catalog.schemas.contains(name) => {
                Some(Arc::new(UserSchema {
                    view: self.view.clone(),
                    name: name.to_string(),
                }))
            }
            _ => None,
        }
    }
}

#[derive(Debug)]
struct UserSchema {
    view: Arc<SessionView>,
    name: String,
}

#[async_trait]
impl SchemaProvider for UserSchema {
    fn table_names(&self) -> Vec<String> {
        self.view
            .snapshot()
            .catalog
            .tables
            .values()
            .filter(|t| t.schema == self.name)
            .map(|t| t.name.clone())
            .chain(
                self.view
                    .snapshot()
                    .catalog
                    .projections
                    .values()
                    .filter(|p| p.schema == self.name)
                    .map(|p| p.name.clone()),
            )
            .chain(
                self.view
                    .snapshot()
                    .catalog
                    .sources
                    .values()
                    .filter(|s| s.schema == self.name && !s.is_shared())
                    .map(|s| s.name.clone()),
            )
            .chain(
                self.view
                    .snapshot()
                    .catalog
                    .views
                    .values()
                    .filter(|v| v.schema == self.name)
                    .map(|v| v.name.clone()),
            )
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        // A shared source is not a relation: its rows are its tables'.
        let snapshot = self.view.snapshot();
        if let Some(def) = snapshot.catalog.source(&self.name, name)
            && def.is_shared()
        {
            let refused = snapshot.catalog.shared_source_unreadable(def);
            return Err(DataFusionError::External(Box::new(refused)));
        }
        if let Some(id) = snapshot.catalog.relation_id(&self.name, name) {
            self.view.note(id);
        }
        if let Some(def) = snapshot.catalog.view(&self.name, name) {
            return self.view.view_table(def.clone()).await.map(Some);
        }
        Ok(self.view.table(&self.name, name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.view
            .snapshot()
            .catalog
            .relation_exists(&self.name, name)
    }
}

/// A table as of one snapshot.
#[derive(Debug)]
pub struct WeirTable {
    def: Arc<TableDef>,
    state: TableState,
    schema: SchemaRef,
    constraints: Constraints,
    defaults: Arc<HashMap<String, Expr>>,
}

impl WeirTable {
    fn new(
        def: Arc<TableDef>,
        state: TableState,
        expose_hidden: bool,
        defaults: Arc<HashMap<String, Expr>>,
    ) -> Self {
        let schema = if expose_hidden {
            def.physical_schema()
        } else {
            def.user_schema()
        };
        let pk: Vec<usize> = def
            .primary_key
            .iter()
            .filter_map(|k| def.columns.iter().position(|c| &c.name == k))
            .collect();
        let constraints = if pk.is_empty() {
            Constraints::default()
        } else {
            Constraints::new_unverified(vec![Constraint::PrimaryKey(pk)])
        };
        Self {
            def,
            state,
            schema,
            constraints,
            defaults,
        }
    }
}

impl WeirTable {
    pub fn def(&self) -> &Arc<TableDef> {
        &self.def
    }
}

#[async_trait]
impl TableProvider for WeirTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        let physical = self.def.physical_schema();
        let keys = KeyColumns::new(&physical, self.state.key_columns());
        let indexes: Vec<KeyColumns> = self
            .state
            .index_specs()
            .map(|s| KeyColumns::new(&physical, &s.columns))
            .collect();
        Ok(filters
            .iter()
            .map(|f| {
                if key_access::usable(&keys, f) || indexes.iter().any(|i| key_access::usable(i, f))
                {
                    // Inexact: the filter stays above the scan, which may
                    // return a superset (see key_access).
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let physical = self.def.physical_schema();
        let keys = KeyColumns::new(&physical, self.state.key_columns());
        let external = |e| DataFusionError::External(Box::new(e));
        let full = || -> DfResult<(Arc<Vec<RecordBatch>>, String)> {
            Ok((self.state.scan().map_err(external)?, "full scan".into()))
        };
        let (batches, access) = match key_access::access(&keys, filters) {
            KeyAccess::Points(keys) => (
                Arc::new(vec![self.state.rows_with_keys(&keys).map_err(external)?]),
                "primary key (points)".to_string(),
            ),
            KeyAccess::Range(lower, upper) => {
                match self
                    .state
                    .rows_in_key_range(lower.as_ref(), upper.as_ref())
                    .map_err(external)?
                {
                    Some(batches) => (Arc::new(batches), "primary key (range)".into()),
                    None => full()?,
                }
            }
            KeyAccess::Full => match self.index_access(&physical, filters).map_err(external)? {
                Some((batch, access)) => (Arc::new(vec![batch]), access),
                None => full()?,
            },
        };
        let visible = self.schema.fields().len();
        let batches: Vec<_> = if visible == physical.fields().len() {
            batches.iter().cloned().collect()
        } else {
            let cols: Vec<usize> = (0..visible).collect();
            batches
                .iter()
                .map(|b| {
                    b.project(&cols)
                        .and_then(|b| b.with_schema(self.schema.clone()))
                })
                .collect::<Result<_, _>>()?
        };
        let rows =
            MemorySourceConfig::try_new_exec(&[batches], self.schema.clone(), projection.cloned())?;
        Ok(Arc::new(super::table_access::TableAccessExec::new(
            self.def.qualified_name(),
            access,
            rows,
        )))
    }
}

impl WeirTable {
    /// The rows a secondary index reaches for `filters` (a superset of
    /// the matching ones), when the primary key reaches none: the first
    /// index whose columns the filters pin, else the first single-column
    /// index they bound.
    fn index_access(
        &self,
        physical: &SchemaRef,
        filters: &[Expr],
    ) -> Result<Option<(RecordBatch, String)>, weir_engine::EngineError> {
        let mut ranged = None;
        for spec in self.state.index_specs() {
            let columns = KeyColumns::new(physical, &spec.columns);
            match key_access::access(&columns, filters) {
                KeyAccess::Points(values) => {
                    let rows = self.state.rows_matching(&spec.columns, &values)?;
                    return Ok(rows.map(|r| (r, format!("index {} (points)", spec.name))));
                }
                KeyAccess::Range(lower, upper) if ranged.is_none() => {
                    ranged = Some((spec.columns[0], spec.name.clone(), lower, upper));
                }
                _ => {}
            }
        }
        let Some((column, name, lower, upper)) = ranged else {
            return Ok(None);
        };
        let rows = self
            .state
            .rows_in_index_range(column, lower.as_ref(), upper.as_ref())?;
        Ok(rows.map(|r| (r, format!("index {name} (range)"))))
    }
}

/// A source, as a relation: projections and sinks read it incrementally;
/// an ad-hoc read has no rows to give (a source keeps nothing), and says so.
#[derive(Debug)]
pub struct SourceTable {
    def: Arc<crate::catalog::streaming::SourceDef>,
}

#[async_trait]
impl TableProvider for SourceTable {
    fn schema(&self) -> SchemaRef {
        self.def.arrow_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let name = self.def.qualified_name();
        Err(DataFusionError::External(Box::new(
            crate::error::ServerError::feature_not_supported(format!(
                "reading source {name} ad hoc (a source keeps no rows; read it through a projection: CREATE PROJECTION p AS SELECT ... FROM {name}, or push it out with CREATE SINK)"
            )),
        )))
    }
}

/// A projection's rows at the epoch of the statement's snapshot.
#[derive(Debug)]
pub struct ProjectionTable {
    def: Arc<ProjectionDef>,
    /// `None` while the projection is committed but not yet deployed.
    view: Option<weir_engine::ProjectionView>,
}

#[async_trait]
impl TableProvider for ProjectionTable {
    fn schema(&self) -> SchemaRef {
        self.def.arrow_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let name = self.def.qualified_name();
        let view = self.view.as_ref().ok_or_else(|| {
            DataFusionError::Execution(format!(
                "projection {name} is still being created; retry in a moment"
            ))
        })?;
        if let Some(e) = &view.failure {
            return Err(DataFusionError::Execution(format!(
                "projection {name} stopped at epoch {}: {e}; drop and recreate it",
                view.last_epoch.0
            )));
        }
        let schema = self.schema();
        let batches = view
            .result
            .batches()
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .iter()
            .map(|b| b.clone().with_schema(schema.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MemorySourceConfig::try_new_exec(
            &[batches],
            schema,
            projection.cloned(),
        )?)
    }
}

/// Feeds the tables datafusion-pg-catalog still computes (`pg_tables`, ...)
/// from the view.
#[derive(Debug, Clone)]
pub struct ViewCatalogInfo {
    view: Arc<SessionView>,
}

#[async_trait]
impl CatalogInfo for ViewCatalogInfo {
    async fn catalog_names(&self) -> DfResult<Vec<String>> {
        Ok(vec![DATABASE_NAME.to_string()])
    }

    async fn schema_names(&self, catalog_name: &str) -> DfResult<Option<Vec<String>>> {
        if catalog_name != DATABASE_NAME {
            return Ok(None);
        }
        let mut names: Vec<String> = self
            .view
            .snapshot()
            .catalog
            .schemas
            .iter()
            .cloned()
            .collect();
        names.push(WEIR_CATALOG.to_string());
        Ok(Some(names))
    }

    async fn table_names(
        &self,
        catalog_name: &str,
        schema_name: &str,
    ) -> DfResult<Option<Vec<String>>> {
        if catalog_name != DATABASE_NAME {
            return Ok(None);
        }
        if schema_name == WEIR_CATALOG {
            return Ok(Some(self.view.system.table_names()));
        }
        let snapshot = self.view.snapshot();
        if !snapshot.catalog.schemas.contains(schema_name) {
            return Ok(None);
        }
        Ok(Some(
            snapshot
                .catalog
                .tables
                .values()
                .filter(|t| t.schema == schema_name)
                .map(|t| t.name.clone())
                .chain(
                    snapshot
                        .catalog
                        .projections
                        .values()
                        .filter(|p| p.schema == schema_name)
                        .map(|p| p.name.clone()),
                )
                .collect(),
        ))
    }

    async fn table_schema(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> DfResult<Option<SchemaRef>> {
        if catalog_name != DATABASE_NAME {
            return Ok(None);
        }
        if schema_name == WEIR_CATALOG {
            return Ok(self.view.system.table_schema(table_name));
        }
        let snapshot = self.view.snapshot();
        let catalog = &snapshot.catalog;
        Ok(catalog
            .table(schema_name, table_name)
            .map(|t| t.user_schema())
            .or_else(|| {
                catalog
                    .projection(schema_name, table_name)
                    .map(|p| p.arrow_schema())
            }))
    }

    async fn table_type(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> DfResult<Option<TableType>> {
        Ok(self
            .table_schema(catalog_name, schema_name, table_name)
            .await?
            .map(|_| {
                let is_projection = || {
                    self.view
                        .snapshot()
                        .catalog
                        .projection(schema_name, table_name)
                        .is_some()
                };
                if schema_name == WEIR_CATALOG || is_projection() {
                    TableType::View
                } else {
                    TableType::Base
                }
            }))
    }
}

/// The DFSchema of a table's user columns, for planning expressions over it.
pub fn df_schema_of(def: &TableDef) -> DfResult<DFSchema> {
    DFSchema::try_from_qualified_schema(def.name.as_str(), &def.user_schema())
}
