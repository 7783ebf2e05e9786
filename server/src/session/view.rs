//! `CREATE [OR REPLACE] VIEW` and `DROP VIEW`: a named query, planned
//! again, inline, wherever it is read (see [`crate::catalog::view`]).

use datafusion::sql::sqlparser::ast::{CreateView, ObjectName, Statement};

use super::projection::{column_def_of, declared_columns};
use super::{Session, StatementResult, command};
use crate::catalog::CatalogChange;
use crate::catalog::view::ViewDef;
use crate::db::TxnWrites;
use crate::error::ServerError;

impl Session {
    pub(super) async fn create_view(
        &mut self,
        create: CreateView,
    ) -> Result<StatementResult, ServerError> {
        if create.temporary || create.or_alter || create.to.is_some() {
            return Err(ServerError::feature_not_supported(
                "TEMPORARY views and CREATE OR ALTER / TO",
            ));
        }
        let (schema, name) = self.split_name(&create.name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        let existing = catalog.view(&schema, &name).cloned();
        if (existing.is_none() && catalog.relation_exists(&schema, &name))
            || (existing.is_some() && !create.or_replace)
        {
            if create.if_not_exists {
                self.notice(format!("relation \"{name}\" already exists, skipping"));
                return Ok(command("CREATE VIEW"));
            }
            return Err(ServerError::DuplicateTable(name));
        }
        let names = declared_columns(&create);
        self.view.start_noting();
        let planned = self
            .plan_statement(Statement::Query(create.query.clone()))
            .await;
        let reads = self.view.take_noted();
        let plan = planned?;
        let fields = plan.schema().fields();
        if names.len() > fields.len() {
            return Err(ServerError::Syntax {
                message: "CREATE VIEW specifies more column names than columns".into(),
                position: None,
            });
        }
        let mut columns = Vec::with_capacity(fields.len());
        for (i, field) in fields.iter().enumerate() {
            let mut column = column_def_of(field, "view column")?;
            // As in PostgreSQL, a view's columns carry no NOT NULL.
            column.nullable = true;
            column.name = match names.get(i) {
                Some(n) => n.clone(),
                None => weir_pgsem::presented_name(field.name()).to_string(),
            };
            if columns
                .iter()
                .any(|c: &crate::catalog::ColumnDef| c.name == column.name)
            {
                return Err(ServerError::DuplicateColumn(column.name));
            }
            columns.push(column);
        }
        let id = match &existing {
            Some(v) => v.id,
            None => (*catalog).clone().allocate_id(),
        };
        let settings = self.object_settings();
        let query = self.stored_query(&create.query).await;
        let def = ViewDef {
            id,
            schema,
            name,
            query: query.to_string(),
            columns,
            reads,
            settings,
        };
        let change = match existing {
            Some(_) => CatalogChange::ReplaceView(def),
            None => CatalogChange::CreateView(def),
        };
        self.write(TxnWrites {
            ddl: vec![change],
            tables: vec![],
        })?;
        Ok(command("CREATE VIEW"))
    }

    /// The DROP changes for `DROP VIEW names`: with CASCADE, the views,
    /// projections and sinks that read them go first.
    pub(super) fn drop_views(
        &self,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
        changes: &mut Vec<CatalogChange>,
    ) -> Result<(), ServerError> {
        let catalog = self.snapshot().catalog.clone();
        for name in names {
            let (schema, view) = self.split_name(name)?;
            let Some(def) = catalog.view(&schema, &view) else {
                if catalog.relation_exists(&schema, &view) {
                    return Err(ServerError::Sqlstate {
                        code: "42809",
                        message: format!("\"{view}\" is not a view"),
                    });
                }
                if if_exists {
                    continue;
                }
                return Err(ServerError::Sqlstate {
                    code: "42P01",
                    message: format!("view \"{view}\" does not exist"),
                });
            };
            let what = format!("view {}", def.qualified_name());
            super::projection::drop_readers(&catalog, def.id, &what, cascade, changes)?;
            let change = CatalogChange::DropView { id: def.id };
            if !changes.contains(&change) {
                changes.push(change);
            }
        }
        Ok(())
    }
}
