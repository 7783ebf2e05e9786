//! SELECT and EXPLAIN: ad-hoc queries planned and run by DataFusion over the
//! statement's snapshot.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use super::{Session, StatementResult};
use crate::catalog::compat;
use crate::error::ServerError;

impl Session {
    /// Binds a statement with DataFusion (no parameters substituted yet).
    pub(super) async fn plan_statement(
        &self,
        mut statement: Statement,
    ) -> Result<LogicalPlan, ServerError> {
        weir_planner::rewrite_window_tvfs(&mut statement)?;
        crate::pgsem::name_columns(&mut statement);
        crate::pgsem::name_function_columns(&mut statement);
        crate::pgsem::at_time_zone_as_function(&mut statement);
        if compat::has_unrewritable_array(&statement) {
            return Err(ServerError::feature_not_supported(
                "ARRAY(subquery) over a grouped, DISTINCT, LIMITed or UNION query with ORDER BY",
            ));
        }
        let original = (compat::reads_only_catalog(&statement)
            && compat::select_subquery_count(&statement) > 0)
            .then(|| statement.clone());
        let planned = self.plan_sql(compat::rewrite(statement)).await;
        let plan = match (planned, original) {
            (Ok(plan), Some(original)) if !self.runnable(&plan) => {
                self.plan_without_lookups(original).await?
            }
            (Err(_), Some(original)) => self.plan_without_lookups(original).await?,
            (planned, _) => planned?,
        };
        Ok(crate::pgsem::pg_result_types(plan)?)
    }

    async fn plan_sql(&self, statement: Statement) -> Result<LogicalPlan, ServerError> {
        Ok(self
            .ctx
            .state()
            .statement_to_plan(DfStatement::Statement(Box::new(statement)))
            .await?)
    }

    /// Whether DataFusion can execute `plan`: it decorrelates every subquery.
    fn runnable(&self, plan: &LogicalPlan) -> bool {
        self.ctx
            .state()
            .optimize(plan)
            .is_ok_and(|p| !compat::keeps_subqueries(&p))
    }

    /// A catalog query with select-list lookups DataFusion cannot
    /// decorrelate: each lookup that runs when it is the only one left is
    /// kept, the others answer NULL (see [`compat::null_select_subqueries`]).
    async fn plan_without_lookups(&self, original: Statement) -> Result<LogicalPlan, ServerError> {
        let count = compat::select_subquery_count(&original);
        let mut runs_alone = Vec::with_capacity(count);
        for keep in 0..count {
            let mut alone = original.clone();
            compat::null_select_subqueries(&mut alone, |i| i != keep);
            let plan = self.plan_sql(compat::rewrite(alone)).await;
            runs_alone.push(plan.is_ok_and(|p| self.runnable(&p)));
        }
        let mut kept = original.clone();
        compat::null_select_subqueries(&mut kept, |i| !runs_alone[i]);
        let plan = self.plan_sql(compat::rewrite(kept)).await?;
        if self.runnable(&plan) {
            return Ok(plan);
        }
        let mut none = original;
        compat::null_select_subqueries(&mut none, |_| true);
        self.plan_sql(compat::rewrite(none)).await
    }

    /// Substitutes bound parameters, if any.
    pub(super) fn bind(
        plan: LogicalPlan,
        params: Option<&ParamValues>,
    ) -> Result<LogicalPlan, ServerError> {
        match params {
            Some(p) => Ok(plan.with_param_values(p.clone())?),
            None => Ok(plan),
        }
    }

    /// Runs a query plan to completion.
    pub(super) async fn run_plan(
        &self,
        plan: LogicalPlan,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), ServerError> {
        let df = self.ctx.execute_logical_plan(plan).await?;
        let planned: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let presented = crate::pgsem::presented_schema(&planned);
        // On the query threads, so the session's select! sees a cancel while
        // the plan computes. Dropping the handle (cancel, disconnect) aborts it.
        let task = self.db.query_runtime().spawn(df.collect());
        let _abort_on_drop = AbortOnDrop(task.abort_handle());
        let batches = task
            .await
            .map_err(|e| ServerError::internal(format!("query task failed: {e}")))??;
        match presented {
            None => Ok((planned, batches)),
            Some(schema) => {
                // Each batch keeps its own field types, which constant
                // folding may have made narrower than the plan's.
                let batches = batches
                    .into_iter()
                    .map(|b| match crate::pgsem::presented_schema(&b.schema()) {
                        Some(own) => RecordBatch::try_new(own, b.columns().to_vec()),
                        None => Ok(b),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((schema, batches))
            }
        }
    }

    /// PostgreSQL prints timestamptz values in the session's TimeZone; the
    /// text encoder prints them in their array's zone, so results carry the
    /// session zone (a metadata-only cast).
    pub(super) fn in_session_time_zone(
        &self,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), ServerError> {
        let tz = self.vars.get("TimeZone").unwrap_or_else(|| "UTC".into());
        let tz: Arc<str> = if tz.eq_ignore_ascii_case("UTC") {
            "+00:00".into()
        } else {
            tz.into()
        };
        let retarget = |t: &DataType| match t {
            DataType::Timestamp(unit, Some(zone)) if *zone != tz => {
                Some(DataType::Timestamp(*unit, Some(tz.clone())))
            }
            _ => None,
        };
        if !schema
            .fields()
            .iter()
            .any(|f| retarget(f.data_type()).is_some())
        {
            return Ok((schema, batches));
        }
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| match retarget(f.data_type()) {
                Some(t) => f.as_ref().clone().with_data_type(t),
                None => f.as_ref().clone(),
            })
            .collect();
        let new_schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        let batches = batches
            .into_iter()
            .map(|b| {
                let columns = b
                    .columns()
                    .iter()
                    .zip(new_schema.fields())
                    .map(|(c, f)| {
                        if c.data_type() == f.data_type() {
                            Ok(c.clone())
                        } else {
                            arrow::compute::cast(c, f.data_type())
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                RecordBatch::try_new_with_options(
                    new_schema.clone(),
                    columns,
                    &arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((new_schema, batches))
    }

    /// A non-default `extra_float_digits` rides on the result schema's
    /// metadata to the text encoder, which otherwise prints shortest floats.
    fn with_float_digits(
        &self,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), ServerError> {
        let digits = self
            .vars
            .get("extra_float_digits")
            .and_then(|v| v.trim().parse::<i32>().ok())
            .unwrap_or(1);
        let has_floats = schema.fields().iter().any(|f| {
            matches!(
                f.data_type(),
                DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::List(_)
            )
        });
        if digits >= 1 || !has_floats {
            return Ok((schema, batches));
        }
        let mut metadata = schema.metadata().clone();
        metadata.insert(
            crate::text_output::EXTRA_FLOAT_DIGITS_KEY.to_string(),
            digits.to_string(),
        );
        let schema = Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
        let batches = batches
            .into_iter()
            .map(|b| b.with_schema(schema.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((schema, batches))
    }

    pub(super) async fn query(
        &mut self,
        statement: Statement,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        let plan = Self::bind(self.plan_statement(statement).await?, params)?;
        if !matches!(
            plan,
            LogicalPlan::Dml(_) | LogicalPlan::Ddl(_) | LogicalPlan::Copy(_)
        ) {
            let (schema, batches) = self.run_plan(plan).await?;
            let (schema, batches) = self.in_session_time_zone(schema, batches)?;
            let (schema, batches) = self.with_float_digits(schema, batches)?;
            return Ok(StatementResult::Rows { schema, batches });
        }
        Err(ServerError::feature_not_supported("this statement form"))
    }

    pub(super) async fn explain(
        &mut self,
        statement: Statement,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        let Statement::Explain {
            statement: inner,
            analyze,
            ..
        } = &statement
        else {
            unreachable!("dispatch sends only EXPLAIN here");
        };
        if !matches!(inner.as_ref(), Statement::Query(_)) {
            return Err(ServerError::feature_not_supported(
                "EXPLAIN of statements other than queries",
            ));
        }
        if *analyze {
            return Err(ServerError::feature_not_supported("EXPLAIN ANALYZE"));
        }
        self.query(statement, params).await
    }
}

/// Aborts a spawned task when dropped (a no-op once it has finished).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
