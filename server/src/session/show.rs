//! SHOW TABLES, SHOW CREATE TABLE and DESCRIBE.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::sqlparser::ast::{ObjectName, ShowCreateObject};

use super::{Session, StatementResult};
use crate::error::ServerError;

pub(super) fn text_rows(
    names: &[&str],
    rows: Vec<Vec<String>>,
) -> Result<StatementResult, ServerError> {
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, false))
            .collect::<Vec<_>>(),
    ));
    let columns: Vec<ArrayRef> = (0..names.len())
        .map(|i| {
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r[i].as_str()),
            )) as ArrayRef
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(StatementResult::Rows {
        schema,
        batches: vec![batch],
    })
}

impl Session {
    pub(super) async fn show_tables(&mut self) -> Result<StatementResult, ServerError> {
        let mut rows: Vec<Vec<String>> = self
            .snapshot()
            .catalog
            .tables
            .values()
            .map(|t| vec![t.schema.clone(), t.name.clone()])
            .collect();
        rows.sort();
        text_rows(&["schema", "name"], rows)
    }

    /// SHOW PROJECTIONS / SHOW MATERIALIZED VIEWS.
    pub(super) fn show_projections(&mut self) -> Result<StatementResult, ServerError> {
        let snapshot = self.snapshot();
        let mut rows: Vec<Vec<String>> = snapshot
            .catalog
            .projections
            .values()
            .map(|p| {
                let status = snapshot.projection_status(p.id);
                vec![p.schema.clone(), p.name.clone(), status]
            })
            .collect();
        rows.sort();
        text_rows(&["schema", "name", "status"], rows)
    }

    pub(super) fn show_create(
        &mut self,
        kind: ShowCreateObject,
        name: &ObjectName,
    ) -> Result<StatementResult, ServerError> {
        match kind {
            ShowCreateObject::Table => {
                let def = self.resolve_table(name)?;
                let catalog = self.snapshot().catalog.clone();
                text_rows(
                    &["name", "create_sql"],
                    vec![vec![def.qualified_name(), def.create_statement(&catalog)]],
                )
            }
            ShowCreateObject::View => {
                let def = self.resolve_projection(name)?;
                text_rows(
                    &["name", "create_sql"],
                    vec![vec![def.qualified_name(), def.create_statement()]],
                )
            }
            other => Err(ServerError::feature_not_supported(format!(
                "SHOW CREATE {other}"
            ))),
        }
    }

    pub(super) async fn describe(
        &mut self,
        name: &ObjectName,
    ) -> Result<StatementResult, ServerError> {
        if let Ok(projection) = self.resolve_projection(name) {
            let rows = projection
                .columns
                .iter()
                .map(|c| {
                    vec![
                        c.name.clone(),
                        c.sql_type.display_name(),
                        c.nullable.to_string(),
                    ]
                })
                .collect();
            return text_rows(&["name", "type", "nullable"], rows);
        }
        let def = self.resolve_table(name)?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("type", DataType::Utf8, false),
            Field::new("nullable", DataType::Boolean, false),
            Field::new("default", DataType::Utf8, true),
            Field::new("primary_key", DataType::Boolean, false),
        ]));
        let c = &def.columns;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    c.iter().map(|c| c.name.as_str()),
                )),
                Arc::new(StringArray::from_iter_values(
                    c.iter().map(|c| c.sql_type.display_name()),
                )),
                Arc::new(BooleanArray::from(
                    c.iter().map(|c| c.nullable).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    c.iter().map(|c| c.default.clone()).collect::<Vec<_>>(),
                )),
                Arc::new(BooleanArray::from(
                    c.iter()
                        .map(|c| def.primary_key.contains(&c.name))
                        .collect::<Vec<_>>(),
                )),
            ],
        )?;
        Ok(StatementResult::Rows {
            schema,
            batches: vec![batch],
        })
    }
}
