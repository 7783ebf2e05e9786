//! The extended protocol: prepare once (parse, bind types, describe), then
//! execute many times with parameters.

use std::sync::Arc;

use std::collections::HashMap;

use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::{Cast, Placeholder, TryCast};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::{SelectItem, Statement, TableFactor, TableObject};

use super::{PreparedStatement, Session, StatementResult};
use crate::error::ServerError;

#[derive(Debug)]
pub(crate) struct PreparedInner {
    /// `None` for an empty query string.
    statement: Option<Statement>,
    /// Whether it is a point query, once an execution has found out.
    point: super::point_query::PointMemo,
}

impl Session {
    pub async fn prepare(
        &mut self,
        sql: &str,
        param_hints: &[Option<DataType>],
    ) -> Result<PreparedStatement, ServerError> {
        let mut statements = weir_planner::parse_sql(sql).map_err(|e| ServerError::Syntax {
            message: e.message,
            position: e.position,
        })?;
        if statements.len() > 1 {
            return Err(ServerError::Syntax {
                message: "cannot insert multiple commands into a prepared statement".into(),
                position: None,
            });
        }
        let statement = statements.pop();
        let (inferred, result_schema) = match &statement {
            Some(s) => {
                self.refresh_view();
                self.describe_statement(s.clone()).await?
            }
            None => (vec![], None),
        };
        let count = inferred.len().max(param_hints.len());
        let inferred_field = |i: usize| inferred.get(i).cloned().flatten();
        let param_types = (0..count)
            .map(|i| {
                param_hints
                    .get(i)
                    .cloned()
                    .flatten()
                    .or_else(|| inferred_field(i).map(|f| f.data_type().clone()))
                    .unwrap_or(DataType::Utf8)
            })
            .collect();
        // Unknown parameters are text, as in PostgreSQL.
        let param_oids = (0..count)
            .map(|i| {
                let field = match (param_hints.get(i).cloned().flatten(), inferred_field(i)) {
                    (Some(hint), _) => Field::new("", hint, true),
                    (None, Some(field)) => field.as_ref().clone(),
                    (None, None) => Field::new("", DataType::Utf8, true),
                };
                weir_pgsem::pg_types::pg_type_of_field(&field).oid()
            })
            .collect();
        Ok(PreparedStatement {
            sql: sql.to_string(),
            param_types,
            param_oids,
            result_schema,
            inner: Arc::new(PreparedInner {
                statement,
                point: Default::default(),
            }),
        })
    }

    pub async fn execute_prepared(
        &mut self,
        stmt: &PreparedStatement,
        params: Vec<ScalarValue>,
    ) -> Result<StatementResult, ServerError> {
        self.notices.clear();
        let Some(statement) = &stmt.inner.statement else {
            return Ok(StatementResult::Empty);
        };
        if params.len() != stmt.param_types.len() {
            return Err(ServerError::protocol(format!(
                "bind message supplies {} parameters, but prepared statement requires {}",
                params.len(),
                stmt.param_types.len()
            )));
        }
        let params = params
            .into_iter()
            .zip(&stmt.param_types)
            .enumerate()
            .map(|(i, (value, ty))| {
                if value.data_type() == *ty || value.is_null() && matches!(ty, DataType::Null) {
                    Ok(value)
                } else {
                    value.cast_to(ty).map_err(|e| {
                        ServerError::InvalidText(format!(
                            "parameter ${}: cannot convert to {ty}: {e}",
                            i + 1
                        ))
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let params = ParamValues::from(params);
        if params_empty(&params) {
            return Box::pin(self.execute(statement.clone(), None)).await;
        }
        if let Some(answer) = self.answer_point_query(&stmt.inner.point, statement, &params) {
            return answer;
        }
        // Boxed: the statement machinery's future is large, and a future
        // held inline is copied whole each time it moves (into the boxes
        // the protocol layer makes), on the point path too.
        Box::pin(self.execute(statement.clone(), Some(&params))).await
    }

    /// Parameter types (index i is `$i+1`) and the row schema, if any.
    async fn describe_statement(
        &mut self,
        statement: Statement,
    ) -> Result<(Vec<Option<FieldRef>>, Option<SchemaRef>), ServerError> {
        match statement {
            Statement::Query(_) | Statement::Explain { .. } => {
                let plan = self.plan_statement(statement).await?;
                let planned = plan.schema().as_arrow();
                let schema = weir_pgsem::presented_schema(planned)
                    .unwrap_or_else(|| Arc::new(planned.clone()));
                Ok((parameter_types(&plan)?, Some(schema)))
            }
            Statement::Insert(mut insert) => {
                let returning = insert.returning.take();
                insert.on = None;
                let table = match &insert.table {
                    TableObject::TableName(n) => Some(n.clone()),
                    _ => None,
                };
                let alias = insert.table_alias.take().map(|a| a.alias);
                if let Some(name) = &table {
                    let def = self.resolve_table(name)?;
                    self.ensure_defaults(&def)?;
                }
                let plan = self.plan_statement(Statement::Insert(insert)).await?;
                let schema = match (returning, table) {
                    (Some(items), Some(name)) => {
                        Some(self.returning_schema(&name, alias.as_ref(), items)?)
                    }
                    _ => None,
                };
                Ok((parameter_types(&plan)?, schema))
            }
            Statement::Update(mut update) => {
                let returning = update.returning.take();
                let target = match &update.table.relation {
                    TableFactor::Table { name, alias, .. } => {
                        Some((name.clone(), alias.as_ref().map(|a| a.name.clone())))
                    }
                    _ => None,
                };
                let plan = self.plan_update_rows(update).await?;
                let schema = match (returning, target) {
                    (Some(items), Some((name, alias))) => {
                        Some(self.returning_schema(&name, alias.as_ref(), items)?)
                    }
                    _ => None,
                };
                Ok((parameter_types(&plan)?, schema))
            }
            Statement::Delete(mut delete) => {
                let returning = delete.returning.take();
                let plan = self.plan_delete_rows(&mut delete).await?;
                let schema = match (returning, super::modify::delete_target(&delete)) {
                    (Some(items), Ok(name)) => {
                        let alias = super::modify::delete_alias(&delete);
                        Some(self.returning_schema(&name, alias, items)?)
                    }
                    _ => None,
                };
                Ok((parameter_types(&plan)?, schema))
            }
            Statement::Declare { stmts } => match stmts.first().and_then(|d| d.for_query.clone()) {
                // PostgreSQL describes DECLARE as returning no rows.
                Some(query) => {
                    let plan = self.plan_statement(Statement::Query(query)).await?;
                    Ok((parameter_types(&plan)?, None))
                }
                None => Ok((vec![], None)),
            },
            Statement::Fetch {
                name, into: None, ..
            } => Ok((vec![], Some(self.fetch_description(&name)?))),
            Statement::Call(_)
                if matches!(
                    weir_planner::streaming_ddl::from_statement(&statement),
                    Some(
                        weir_planner::streaming_ddl::StreamingDdl::Show { .. }
                            | weir_planner::streaming_ddl::StreamingDdl::ShowCreate { .. }
                    )
                ) =>
            {
                match self.execute(statement, None).await? {
                    StatementResult::Rows { schema, .. } => Ok((vec![], Some(schema))),
                    _ => Ok((vec![], None)),
                }
            }
            Statement::ShowVariable { .. }
            | Statement::ShowTables { .. }
            | Statement::ShowCreate { .. }
            | Statement::ExplainTable { .. } => match self.execute(statement, None).await? {
                StatementResult::Rows { schema, .. } => Ok((vec![], Some(schema))),
                _ => Ok((vec![], None)),
            },
            _ => Ok((vec![], None)),
        }
    }

    /// The row a RETURNING clause gives, for the target `table`, named
    /// `alias` in the statement if it has one.
    fn returning_schema(
        &self,
        table: &datafusion::sql::sqlparser::ast::ObjectName,
        alias: Option<&datafusion::sql::sqlparser::ast::Ident>,
        items: Vec<SelectItem>,
    ) -> Result<SchemaRef, ServerError> {
        let def = self.resolve_table(table)?;
        let empty = RecordBatch::new_empty(def.user_schema());
        let qualifier = alias.map_or_else(|| def.name.clone(), super::dml::normalize_ident);
        Ok(self.returning(&qualifier, &empty, items, None)?.0)
    }
}

fn params_empty(params: &ParamValues) -> bool {
    matches!(params, ParamValues::List(l) if l.is_empty())
}

/// The field (type and PostgreSQL type tag) of each `$n`, as PostgreSQL
/// infers it: from the column or expression it meets (DataFusion's own
/// inference, which keeps the field metadata) and, failing that, from an
/// explicit cast around it (`$1::int8` is an `int8` parameter).
pub(super) fn parameter_types(plan: &LogicalPlan) -> Result<Vec<Option<FieldRef>>, ServerError> {
    let mut fields = plan.get_parameter_fields()?;
    let mut cast_to: HashMap<String, FieldRef> = HashMap::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) = e
                    && let Expr::Placeholder(Placeholder { id, field: None }) = expr.as_ref()
                {
                    cast_to.entry(id.clone()).or_insert_with(|| field.clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    for (id, field) in cast_to {
        let slot = fields.entry(id).or_insert(None);
        if slot.is_none() {
            *slot = Some(Arc::new(field.as_ref().clone().with_nullable(true)));
        }
    }
    let count = fields
        .keys()
        .filter_map(|k| k.trim_start_matches('$').parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    Ok((1..=count)
        .map(|i| fields.get(&format!("${i}")).cloned().flatten())
        .collect())
}
