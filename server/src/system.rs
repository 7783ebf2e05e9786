//! `weir_catalog`: Weir's own system tables.
//!
//! Each table is computed from the database when a query reads it:
//! - `tables`: every table with its key, column count and row count.
//! - `backends`: each backend with resource, generation, capabilities and
//!   readiness (ARCHITECTURE.md §7, "Readiness").
//! - `sessions`: the open connections.
//! - `projections`: every projection with its query, status, the last epoch
//!   it applied and its row count at the latest epoch.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;

use crate::db::Database;

const TABLES: &[&str] = &["backends", "projections", "sessions", "tables"];

#[derive(Debug)]
pub struct SystemSchema {
    db: Arc<Database>,
}

impl SystemSchema {
    pub fn new(db: Arc<Database>) -> Self {
        Self { db }
    }

    pub fn table_names_sorted(&self) -> Vec<String> {
        TABLES.iter().map(|s| s.to_string()).collect()
    }

    pub fn table_schema(&self, name: &str) -> Option<SchemaRef> {
        let utf8 = |n: &str| Field::new(n, DataType::Utf8, false);
        let int8 = |n: &str| Field::new(n, DataType::Int64, false);
        let fields = match name {
            "tables" => vec![
                utf8("schema"),
                utf8("name"),
                int8("id"),
                utf8("primary_key"),
                int8("columns"),
                int8("rows"),
                utf8("definition"),
            ],
            "backends" => vec![
                utf8("resource"),
                int8("generation"),
                utf8("capabilities"),
                utf8("readiness"),
            ],
            "sessions" => vec![int8("backends")],
            "projections" => vec![
                utf8("schema"),
                utf8("name"),
                int8("id"),
                utf8("definition"),
                utf8("status"),
                int8("last_epoch"),
                int8("rows"),
                int8("rows_in"),
                int8("rows_out"),
            ],
            _ => return None,
        };
        Some(Arc::new(Schema::new(fields)))
    }

    fn build(&self, name: &str) -> Option<RecordBatch> {
        let schema = self.table_schema(name)?;
        let text = |v: Vec<String>| Arc::new(StringArray::from(v)) as ArrayRef;
        let int = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let columns: Vec<ArrayRef> = match name {
            "tables" => {
                let snapshot = self.db.snapshot();
                let defs: Vec<_> = snapshot.catalog.tables.values().collect();
                vec![
                    text(defs.iter().map(|d| d.schema.clone()).collect()),
                    text(defs.iter().map(|d| d.name.clone()).collect()),
                    int(defs.iter().map(|d| d.id.0 as i64).collect()),
                    text(defs.iter().map(|d| d.primary_key.join(", ")).collect()),
                    int(defs.iter().map(|d| d.columns.len() as i64).collect()),
                    int(defs
                        .iter()
                        .map(|d| snapshot.tables.get(&d.id).map_or(0, |s| s.len() as i64))
                        .collect()),
                    text(defs.iter().map(|d| d.create_statement()).collect()),
                ]
            }
            "backends" => {
                let readiness = if self.db.is_ready() {
                    "ready"
                } else {
                    "replaying"
                };
                let data_dir = self.db.config().data_dir.display().to_string();
                vec![
                    text(vec![
                        format!("catalog:file://{data_dir}/catalog"),
                        format!("table-log:file://{data_dir}/tablelog"),
                        format!("state:{}", self.db.config().state_url()),
                    ]),
                    int(vec![1, 1, self.db.state().generation() as i64]),
                    text(vec![
                        "create-only-append,expected-revision".into(),
                        "group-commit,fsync".into(),
                        "per-vnode-partials,create-only-seals,generation-fence".into(),
                    ]),
                    text(vec![readiness.into(), readiness.into(), readiness.into()]),
                ]
            }
            "sessions" => vec![int(vec![self.db.backend_count() as i64])],
            "projections" => {
                let snapshot = self.db.snapshot();
                let defs: Vec<_> = snapshot.catalog.projections.values().collect();
                let view = |id| snapshot.projections.projections.get(id);
                let stat = |f: &dyn Fn(&weir_engine::ProjectionView) -> u64| {
                    int(defs
                        .iter()
                        .map(|d| view(&d.id).map_or(0, |v| f(v) as i64))
                        .collect())
                };
                vec![
                    text(defs.iter().map(|d| d.schema.clone()).collect()),
                    text(defs.iter().map(|d| d.name.clone()).collect()),
                    int(defs.iter().map(|d| d.id.0 as i64).collect()),
                    text(defs.iter().map(|d| d.create_statement()).collect()),
                    text(
                        defs.iter()
                            .map(|d| crate::session::projection_status(&snapshot, d.id))
                            .collect(),
                    ),
                    stat(&|v| v.last_epoch.0),
                    stat(&|v| v.result.row_count()),
                    stat(&|v| v.rows_in),
                    stat(&|v| v.rows_out),
                ]
            }
            _ => return None,
        };
        RecordBatch::try_new(schema, columns).ok()
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        TABLES.iter().map(|s| s.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(batch) = self.build(name) else {
            return Ok(None);
        };
        Ok(Some(Arc::new(MemTable::try_new(
            batch.schema(),
            vec![vec![batch]],
        )?)))
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.contains(&name)
    }
}
