//! UPDATE (with FROM) and DELETE (with USING), both with RETURNING.
//!
//! Each statement is run as a query over the statement's snapshot that
//! yields the target rows it changes, hidden row ids included; the session
//! turns them into a change batch (`-old/+new` for UPDATE, `-old` for
//! DELETE).
//!
//! With FROM/USING the target is joined to other tables, and one target row
//! may meet several of their rows. PostgreSQL changes such a row once (for
//! UPDATE, with the values of one of the matches, which one unspecified);
//! so does Weir, keeping the first match of each target row
//! ([`first_per_target_row`]). A target row is identified by its whole
//! physical row, which holds its primary key or hidden row id.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, Schema};
use arrow::row::{RowConverter, SortField};
use datafusion::common::{Column, ParamValues};
use datafusion::logical_expr::{Expr, LogicalPlan, Projection};
use datafusion::sql::sqlparser::ast::{self, Delete, Statement, TableFactor, Update};
use weir_common::ChangeBatch;

use super::dml::{assigned_column, conform, normalize_ident, rebind, take_batch};
use super::{Session, StatementResult};
use weir_pgsem::SqlType;

use crate::catalog::TableDef;
use crate::db::TxnWrites;
use crate::error::ServerError;
use crate::wal::TableWrite;

impl Session {
    pub(super) async fn update(
        &mut self,
        mut update: Update,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        if !update.table.joins.is_empty() {
            return Err(ServerError::feature_not_supported("UPDATE of a join"));
        }
        let TableFactor::Table { name, alias, .. } = &update.table.relation else {
            return Err(ServerError::feature_not_supported(
                "UPDATE of a derived table",
            ));
        };
        let def = self.resolve_table(name)?;
        super::sequence::refuse_identity_updates(&def, &update)?;
        super::sequence::defaults_for_default_keyword(&def, &mut update.assignments)?;
        let qualifier = alias
            .as_ref()
            .map(|a| normalize_ident(&a.name))
            .unwrap_or_else(|| def.name.clone());
        let returning = update.returning.take();
        // Boxed: planning futures are large, and two inline would make
        // this one's frame larger still.
        let (old, new_user) = if update.from.is_some() {
            Box::pin(self.joined_update_rows(&def, &update, params)).await?
        } else {
            Box::pin(self.update_rows(&def, update, params)).await?
        };
        // Row ids never change; a table without a key keeps its row's.
        let mut new_columns = new_user.columns().to_vec();
        if def.has_row_id() {
            new_columns.push(old.column(old.num_columns() - 1).clone());
        }
        let new = RecordBatch::try_new(def.physical_schema(), new_columns)?;
        let count = old.num_rows();
        let weights: Vec<i64> = std::iter::repeat_n(-1, count)
            .chain(std::iter::repeat_n(1, count))
            .collect();
        let change = ChangeBatch::new(
            concat_batches(&def.physical_schema(), &[old, new])?,
            Int64Array::from(weights),
        )
        .map_err(|e| ServerError::internal(e.to_string()))?;
        self.write(TxnWrites {
            ddl: vec![],
            tables: vec![(def.id, TableWrite::Changes(change))],
        })?;
        self.db.metrics().rows_written(count as u64);
        self.answer_dml(
            &qualifier,
            &new_user,
            returning,
            params,
            &format!("UPDATE {count}"),
        )
    }

    /// The rows a plain UPDATE changes, as (old physical rows, new user
    /// columns conformed to the table), planned by DataFusion's UPDATE.
    async fn update_rows(
        &self,
        def: &TableDef,
        update: Update,
        params: Option<&ParamValues>,
    ) -> Result<(RecordBatch, RecordBatch), ServerError> {
        let plan = self.plan_with_hidden(Statement::Update(update)).await?;
        let LogicalPlan::Dml(dml) = plan else {
            return Err(ServerError::internal(
                "UPDATE did not plan to a DML statement",
            ));
        };
        let LogicalPlan::Projection(projection) = Arc::unwrap_or_clone(dml.input) else {
            return Err(ServerError::internal("UPDATE input is not a projection"));
        };
        // Keep the old row next to the new one: the change is -old/+new.
        let width = def.physical_schema().fields().len();
        let mut exprs: Vec<Expr> = (0..width)
            .map(|i| {
                let (qualifier, field) = projection.input.schema().qualified_field(i);
                Expr::Column(Column::new(qualifier.cloned(), field.name()))
                    .alias(format!("__weir_old_{i}"))
            })
            .collect();
        exprs.extend(projection.expr.iter().cloned());
        let plan = LogicalPlan::Projection(Projection::try_new(exprs, projection.input.clone())?);
        let (schema, batches) = self.run_plan(Self::bind(plan, params)?).await?;
        let both = concat_batches(&schema, &batches)?;
        let old = rebind(
            both.project(&(0..width).collect::<Vec<_>>())?,
            def.physical_schema(),
        )?;
        let new_user = conform(
            def,
            &both.project(&(width..width + def.columns.len()).collect::<Vec<_>>())?,
            &self.datetime_context(),
        )?;
        Ok((old, new_user))
    }

    /// The rows an `UPDATE ... FROM` changes, as [`Self::update_rows`]
    /// returns them: DataFusion cannot plan UPDATE with FROM, so the join
    /// is a query, [`joined_update_query`].
    async fn joined_update_rows(
        &self,
        def: &TableDef,
        update: &Update,
        params: Option<&ParamValues>,
    ) -> Result<(RecordBatch, RecordBatch), ServerError> {
        let (query, assigned) = joined_update_query(def, update)?;
        let plan = self.plan_with_hidden(query).await?;
        let (schema, batches) = self.run_plan(Self::bind(plan, params)?).await?;
        let width = def.physical_schema().fields().len();
        let rows = first_per_target_row(&concat_batches(&schema, &batches)?, width)?;
        let old = rebind(
            rows.project(&(0..width).collect::<Vec<_>>())?,
            def.physical_schema(),
        )?;
        let mut new_columns: Vec<ArrayRef> = old.columns()[..def.columns.len()].to_vec();
        for (k, column) in assigned.iter().enumerate() {
            new_columns[*column] = rows.column(width + k).clone();
        }
        let fields: Vec<Field> = new_columns
            .iter()
            .zip(def.user_schema().fields())
            .map(|(c, f)| Field::new(f.name(), c.data_type().clone(), true))
            .collect();
        let new = RecordBatch::try_new(Arc::new(Schema::new(fields)), new_columns)?;
        Ok((old, conform(def, &new, &self.datetime_context())?))
    }

    pub(super) async fn delete(
        &mut self,
        mut delete: Delete,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        let returning = delete.returning.take();
        let def = self.resolve_table(&delete_target(&delete)?)?;
        let qualifier = match delete_alias(&delete) {
            Some(alias) => normalize_ident(alias),
            None => def.name.clone(),
        };
        let plan = self.plan_delete_rows(&delete).await?;
        let (schema, batches) = self.run_plan(Self::bind(plan, params)?).await?;
        let mut old = concat_batches(&schema, &batches)?;
        if delete.using.is_some() {
            old = first_per_target_row(&old, old.num_columns())?;
        }
        let old = rebind(old, def.physical_schema())?;
        let count = old.num_rows();
        let old_user = rebind(
            old.project(&(0..def.columns.len()).collect::<Vec<_>>())?,
            def.user_schema(),
        )?;
        self.write(TxnWrites {
            ddl: vec![],
            tables: vec![(def.id, TableWrite::Changes(ChangeBatch::retractions(old)))],
        })?;
        self.db.metrics().rows_written(count as u64);
        self.answer_dml(
            &qualifier,
            &old_user,
            returning,
            params,
            &format!("DELETE {count}"),
        )
    }

    /// The plan of the rows a DELETE removes (see [`doomed_rows_query`]).
    pub(super) async fn plan_delete_rows(
        &self,
        delete: &Delete,
    ) -> Result<LogicalPlan, ServerError> {
        if delete.limit.is_some() || !delete.order_by.is_empty() {
            return Err(ServerError::feature_not_supported(
                "DELETE ... ORDER BY / LIMIT",
            ));
        }
        delete_target(delete)?;
        self.plan_with_hidden(doomed_rows_query(delete)?).await
    }

    /// The plan an UPDATE's rows come from, for describing its parameters.
    pub(super) async fn plan_update_rows(
        &self,
        update: Update,
    ) -> Result<LogicalPlan, ServerError> {
        let TableFactor::Table { name, .. } = &update.table.relation else {
            return Err(ServerError::feature_not_supported(
                "UPDATE of a derived table",
            ));
        };
        if update.from.is_none() {
            return self.plan_with_hidden(Statement::Update(update)).await;
        }
        let def = self.resolve_table(name)?;
        let (query, _) = joined_update_query(&def, &update)?;
        self.plan_with_hidden(query).await
    }

    /// Plans a statement with hidden row-id columns visible, so DML can
    /// address rows of tables without a primary key.
    async fn plan_with_hidden(&self, statement: Statement) -> Result<LogicalPlan, ServerError> {
        self.view.set_expose_hidden(true);
        let plan = self.plan_statement(statement).await;
        self.view.set_expose_hidden(false);
        plan
    }
}

fn delete_table(delete: &Delete) -> Result<&ast::TableWithJoins, ServerError> {
    let (ast::FromTable::WithFromKeyword(tables) | ast::FromTable::WithoutKeyword(tables)) =
        &delete.from;
    let [table] = tables.as_slice() else {
        return Err(ServerError::feature_not_supported(
            "DELETE from several tables",
        ));
    };
    if !table.joins.is_empty() {
        return Err(ServerError::feature_not_supported("DELETE from a join"));
    }
    Ok(table)
}

/// The table a DELETE removes rows from.
pub(super) fn delete_target(delete: &Delete) -> Result<ast::ObjectName, ServerError> {
    match &delete_table(delete)?.relation {
        TableFactor::Table { name, .. } => Ok(name.clone()),
        _ => Err(ServerError::feature_not_supported(
            "DELETE from a derived table",
        )),
    }
}

pub(super) fn delete_alias(delete: &Delete) -> Option<&ast::Ident> {
    match &delete_table(delete).ok()?.relation {
        TableFactor::Table { alias, .. } => alias.as_ref().map(|a| &a.name),
        _ => None,
    }
}

/// The query that finds the rows a DELETE removes: `SELECT target.* FROM
/// target [AS alias] [, using...] [WHERE ...]`, the target's physical
/// columns first and only. DataFusion's own DELETE planning takes neither
/// USING nor an alias for the target.
fn doomed_rows_query(delete: &Delete) -> Result<Statement, ServerError> {
    let target = delete_table(delete)?;
    let wildcard = match delete_alias(delete) {
        Some(alias) => alias.to_string(),
        None => delete_target(delete)?.to_string(),
    };
    let mut from = vec![target.to_string()];
    from.extend(delete.using.iter().flatten().map(ToString::to_string));
    let mut sql = format!("SELECT {wildcard}.* FROM {}", from.join(", "));
    if let Some(selection) = &delete.selection {
        sql.push_str(&format!(" WHERE {selection}"));
    }
    reparse(&sql)
}

/// Parses a row query built from a statement's own (printed) parts.
fn reparse(sql: &str) -> Result<Statement, ServerError> {
    let unparsable = || {
        ServerError::internal(format!(
            "a DML row query did not parse back to one statement: {sql}"
        ))
    };
    let mut statements = weir_planner::parse_sql(sql).map_err(|_| unparsable())?;
    match (statements.pop(), statements.is_empty()) {
        (Some(statement), true) => Ok(statement),
        _ => Err(unparsable()),
    }
}

/// `UPDATE t [AS a] SET c = e, ... FROM f WHERE p` as the query `SELECT
/// a.*, e AS __weir_set_0, ... FROM t [AS a], f WHERE p`, and the column
/// index each SET value is for. A bare parameter is cast to its column's
/// type, which is how DataFusion's UPDATE types it too.
fn joined_update_query(
    def: &TableDef,
    update: &Update,
) -> Result<(Statement, Vec<usize>), ServerError> {
    let TableFactor::Table { name, alias, .. } = &update.table.relation else {
        return Err(ServerError::internal("UPDATE target is not a table"));
    };
    let wildcard = match alias {
        Some(alias) => alias.name.to_string(),
        None => name.to_string(),
    };
    let mut items = vec![format!("{wildcard}.*")];
    let mut assigned = Vec::with_capacity(update.assignments.len());
    for assignment in &update.assignments {
        let (index, column) = assigned_column(def, assignment, "UPDATE ... SET (a, b) = ...")?;
        if assigned.contains(&index) {
            return Err(ServerError::DuplicateAssignment(column));
        }
        let value = match &assignment.value {
            ast::Expr::Value(v) if matches!(v.value, ast::Value::Placeholder(_)) => {
                let sql_type = match &def.columns[index].sql_type {
                    SqlType::Varchar(Some(_)) => SqlType::Varchar(None),
                    other => other.clone(),
                };
                format!("CAST({} AS {})", assignment.value, sql_type.display_name())
            }
            other => format!("({other})"),
        };
        items.push(format!("{value} AS \"__weir_set_{}\"", assigned.len()));
        assigned.push(index);
    }
    let from = match &update.from {
        Some(ast::UpdateTableFromKind::BeforeSet(f) | ast::UpdateTableFromKind::AfterSet(f)) => {
            f.iter().map(ToString::to_string).collect::<Vec<_>>()
        }
        None => vec![],
    };
    let mut sql = format!(
        "SELECT {} FROM {}",
        items.join(", "),
        std::iter::once(update.table.to_string())
            .chain(from)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(selection) = &update.selection {
        sql.push_str(&format!(" WHERE {selection}"));
    }
    Ok((reparse(&sql)?, assigned))
}

/// The rows of `batch` whose first `width` columns/// The rows of `batch` whose first `width` columns (a target row) have not
/// been seen in an earlier row: each target row's first match.
fn first_per_target_row(batch: &RecordBatch, width: usize) -> Result<RecordBatch, ServerError> {
    let fields = batch.schema().fields()[..width]
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let rows = converter.convert_columns(&batch.columns()[..width])?;
    let mut seen = HashSet::with_capacity(rows.num_rows());
    let keep: UInt32Array = (0..rows.num_rows())
        .filter(|&i| seen.insert(rows.row(i)))
        .map(|i| i as u32)
        .collect();
    if keep.len() == batch.num_rows() {
        return Ok(batch.clone());
    }
    take_batch(batch, &keep)
}
