//! Plain views (`CREATE VIEW`): a named query, kept as text with the
//! settings it was planned under and planned again, inline, wherever it is
//! read (unlike a projection, nothing is kept up to date). What a view
//! reads is recorded so that dropping or changing it is refused while the
//! view depends on it.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};
use weir_common::ObjectId;

use super::model::{Catalog, ColumnDef, columns_schema, qualified};
use crate::error::ServerError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewDef {
    pub id: ObjectId,
    pub schema: String,
    pub name: String,
    /// The query, as sqlparser prints it.
    pub query: String,
    /// Its columns as planned at CREATE (names from the column list or
    /// the query).
    pub columns: Vec<ColumnDef>,
    /// Tables, projections, sources and views the query reads.
    pub reads: Vec<ObjectId>,
    /// The session settings the query is planned under (as projections).
    pub settings: BTreeMap<String, String>,
}

impl ViewDef {
    pub fn qualified_name(&self) -> String {
        qualified(&self.schema, &self.name)
    }

    pub fn arrow_schema(&self) -> SchemaRef {
        columns_schema(&self.columns)
    }
}

impl Catalog {
    pub fn view(&self, schema: &str, name: &str) -> Option<&Arc<ViewDef>> {
        self.views
            .values()
            .find(|v| v.schema == schema && v.name == name)
    }

    /// Views that read `id` directly.
    pub fn views_reading(&self, id: ObjectId) -> Vec<&Arc<ViewDef>> {
        self.views
            .values()
            .filter(|v| v.reads.contains(&id))
            .collect()
    }

    pub(super) fn create_view(&mut self, def: &ViewDef) -> Result<(), ServerError> {
        if !self.schemas.contains(&def.schema) {
            return Err(ServerError::UndefinedSchema(def.schema.clone()));
        }
        if self.relation_exists(&def.schema, &def.name) {
            return Err(ServerError::DuplicateTable(def.name.clone()));
        }
        self.check_reads(def)?;
        self.next_id = self.next_id.max(def.id.0 + 1);
        self.views.insert(def.id, Arc::new(def.clone()));
        Ok(())
    }

    /// `CREATE OR REPLACE VIEW`: PostgreSQL's rule, the columns it had stay
    /// first, with their names and types; new ones may follow.
    pub(super) fn replace_view(&mut self, def: &ViewDef) -> Result<(), ServerError> {
        let old = self
            .views
            .get(&def.id)
            .ok_or_else(|| ServerError::UndefinedTable(format!("object {}", def.id)))?;
        if def.columns.len() < old.columns.len() {
            return Err(ServerError::Sqlstate {
                code: "42P16",
                message: "cannot drop columns from view".into(),
            });
        }
        for (old, new) in old.columns.iter().zip(&def.columns) {
            if old.name != new.name {
                return Err(ServerError::Sqlstate {
                    code: "42P16",
                    message: format!(
                        "cannot change name of view column \"{}\" to \"{}\"",
                        old.name, new.name
                    ),
                });
            }
            if old.sql_type != new.sql_type {
                return Err(ServerError::Sqlstate {
                    code: "42P16",
                    message: format!(
                        "cannot change data type of view column \"{}\" from {} to {}",
                        old.name,
                        old.sql_type.display_name(),
                        new.sql_type.display_name()
                    ),
                });
            }
        }
        self.check_reads(def)?;
        self.views.insert(def.id, Arc::new(def.clone()));
        Ok(())
    }

    pub(super) fn drop_view(&mut self, id: ObjectId) -> Result<(), ServerError> {
        self.refuse_if_read(id)?;
        if self.views.remove(&id).is_none() {
            return Err(ServerError::UndefinedTable(format!("object {id}")));
        }
        Ok(())
    }

    fn check_reads(&self, def: &ViewDef) -> Result<(), ServerError> {
        if def.reads.contains(&def.id) {
            return Err(ServerError::Sqlstate {
                code: "42P17",
                message: format!("infinite recursion detected in view \"{}\"", def.name),
            });
        }
        Ok(())
    }
}

/// Plans a view's query where it is read. The server's planning implements
/// it (the catalog does not depend on planning); every [`super::provider::SessionView`]
/// that reads views is given one.
pub trait ViewPlanner: std::fmt::Debug + Send + Sync {
    /// The view's query as a plan over `session`'s snapshot, its columns
    /// named and typed as `def` says.
    fn plan<'a>(
        &'a self,
        session: Arc<super::provider::SessionView>,
        def: Arc<ViewDef>,
    ) -> futures::future::BoxFuture<
        'a,
        datafusion::error::Result<datafusion::logical_expr::LogicalPlan>,
    >;
}

/// How deep views may read views: deeper is taken for a cycle that `OR
/// REPLACE` made.
pub const MAX_VIEW_DEPTH: usize = 32;

impl Catalog {
    /// The relation a reader names in `schema`: table, projection,
    /// source or view.
    pub fn relation_id(&self, schema: &str, name: &str) -> Option<ObjectId> {
        self.table(schema, name)
            .map(|t| t.id)
            .or_else(|| self.projection(schema, name).map(|p| p.id))
            .or_else(|| self.source(schema, name).map(|s| s.id))
            .or_else(|| self.view(schema, name).map(|v| v.id))
    }
}
