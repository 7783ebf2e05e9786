//! Evaluating SQL expressions over in-memory rows: ON CONFLICT DO UPDATE
//! assignments and RETURNING lists.
//!
//! The rows are presented as one batch with qualified columns (`t.x`,
//! `excluded.x`); expressions are bound with DataFusion against that schema
//! and evaluated as physical expressions.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ParamValues, TableReference};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::{
    self, Expr as SqlExpr, ExprWithAlias, SelectItem, VisitMut, VisitorMut,
};

use super::Session;
use crate::error::ServerError;

/// Rows under one or more qualifiers, ready for expression evaluation.
pub(super) struct Frame {
    pub schema: DFSchema,
    pub batch: RecordBatch,
}

impl Frame {
    /// `parts`: (qualifier, batch) pairs with equal row counts, laid side by side.
    pub fn new(parts: Vec<(&str, &RecordBatch)>) -> Result<Self, ServerError> {
        let mut qualified = Vec::new();
        let mut fields: Vec<Arc<Field>> = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for (qualifier, batch) in parts {
            for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
                qualified.push((Some(TableReference::bare(qualifier)), field.clone()));
                fields.push(field.clone());
                columns.push(column.clone());
            }
        }
        let schema = DFSchema::new_with_metadata(qualified, Default::default())?;
        let num_rows = columns.first().map_or(0, |c| c.len());
        let arrow_schema: SchemaRef = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new_with_options(
            arrow_schema,
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(num_rows)),
        )?;
        Ok(Self { schema, batch })
    }
}

/// Qualifies bare column names with `qualifier`, as PostgreSQL resolves them
/// to the target table in ON CONFLICT DO UPDATE.
struct QualifyBareColumns<'a>(&'a str);

impl VisitorMut for QualifyBareColumns<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, expr: &mut SqlExpr) -> std::ops::ControlFlow<()> {
        if let SqlExpr::Identifier(ident) = expr {
            *expr = SqlExpr::CompoundIdentifier(vec![ast::Ident::new(self.0), ident.clone()]);
        }
        std::ops::ControlFlow::Continue(())
    }
}

pub(super) fn qualify_bare_columns(expr: &mut SqlExpr, qualifier: &str) {
    let _ = expr.visit(&mut QualifyBareColumns(qualifier));
}

/// Replaces `$n` placeholders with bound values.
fn bind_params(expr: Expr, params: Option<&ParamValues>) -> Result<Expr, ServerError> {
    let Some(params) = params else {
        return Ok(expr);
    };
    Ok(expr
        .transform(|e| {
            if let Expr::Placeholder(p) = &e {
                let value = params.get_placeholders_with_values(&p.id)?;
                return Ok(Transformed::yes(Expr::Literal(value.value, value.metadata)));
            }
            Ok(Transformed::no(e))
        })?
        .data)
}

impl Session {
    /// Binds `expr` against `frame` and evaluates it for every row.
    pub(super) fn evaluate(
        &self,
        frame: &Frame,
        expr: SqlExpr,
        params: Option<&ParamValues>,
    ) -> Result<(Expr, ArrayRef), ServerError> {
        let state = self.ctx.state();
        let logical = state.create_logical_expr_from_sql_expr(
            ExprWithAlias { expr, alias: None },
            &frame.schema,
        )?;
        let logical = bind_params(logical, params)?;
        let physical = state.create_physical_expr(logical.clone(), &frame.schema)?;
        let array = physical
            .evaluate(&frame.batch)?
            .into_array(frame.batch.num_rows())?;
        Ok((logical, array))
    }

    /// Evaluates a RETURNING list over the written rows.
    pub(super) fn returning(
        &self,
        table: &str,
        rows: &RecordBatch,
        items: Vec<SelectItem>,
        params: Option<&ParamValues>,
    ) -> Result<(SchemaRef, RecordBatch), ServerError> {
        let frame = Frame::new(vec![(table, rows)])?;
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for item in items {
            match item {
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                    for (field, column) in rows.schema().fields().iter().zip(rows.columns()) {
                        fields.push(field.as_ref().clone());
                        columns.push(column.clone());
                    }
                }
                SelectItem::UnnamedExpr(expr) => {
                    let name = match &expr {
                        SqlExpr::Identifier(i) => i.value.clone(),
                        SqlExpr::CompoundIdentifier(parts) => {
                            parts.last().map(|i| i.value.clone()).unwrap_or_default()
                        }
                        _ => "?column?".to_string(),
                    };
                    let (logical, array) = self.evaluate(&frame, expr, params)?;
                    fields.push(field_for(&logical, &frame, &name)?);
                    columns.push(array);
                }
                SelectItem::ExprWithAlias { expr, alias } => {
                    let (logical, array) = self.evaluate(&frame, expr, params)?;
                    fields.push(field_for(&logical, &frame, &alias.value)?);
                    columns.push(array);
                }
                other => {
                    return Err(ServerError::feature_not_supported(format!(
                        "RETURNING item {other}"
                    )));
                }
            }
        }
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new_with_options(
            schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.num_rows())),
        )?;
        Ok((schema, batch))
    }
}

fn field_for(expr: &Expr, frame: &Frame, name: &str) -> Result<Field, ServerError> {
    let data_type = expr.to_field(&frame.schema)?.1.data_type().clone();
    let metadata = match expr {
        Expr::Column(c) => frame
            .schema
            .field_with_name(c.relation.as_ref(), &c.name)
            .map(|f| f.metadata().clone())
            .unwrap_or_default(),
        _ => Default::default(),
    };
    Ok(Field::new(name, data_type, true).with_metadata(metadata))
}
