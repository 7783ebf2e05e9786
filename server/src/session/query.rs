//! SELECT and EXPLAIN: ad-hoc queries planned and run by DataFusion over the
//! statement's snapshot.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{Query, Statement};

use super::{Session, StatementResult};
use crate::error::ServerError;

impl Session {
    /// Binds a statement with DataFusion (no parameters substituted yet).
    pub(super) async fn plan_statement(
        &self,
        statement: Statement,
    ) -> Result<LogicalPlan, ServerError> {
        // Boxed: binding's future is large, and every statement's future
        // would otherwise carry it inline (debug builds overflow a 2 MiB
        // test thread's stack).
        Ok(Box::pin(weir_planner::bind(&self.ctx.state(), statement)).await?)
    }

    /// `query` as a view, projection or sink stores it: each `*` of its
    /// outermost SELECT expanded to the columns it stands for now
    /// ([`weir_planner::wildcard`]), so a column added to a table later is
    /// not read by it; as written when the expansion cannot be made or does
    /// not plan to the same columns.
    pub(super) async fn stored_query(&self, query: &Query) -> Query {
        // A query over a source does not plan as an ad-hoc query (a source
        // keeps no rows): kept as written.
        let Ok(plan) = self
            .plan_statement(Statement::Query(Box::new(query.clone())))
            .await
        else {
            return query.clone();
        };
        let Some(expanded) = weir_planner::wildcard::expand_wildcards(query, plan.schema()) else {
            return query.clone();
        };
        let same = match self
            .plan_statement(Statement::Query(Box::new(expanded.clone())))
            .await
        {
            Ok(again) => {
                let columns = |p: &LogicalPlan| -> Vec<(String, DataType)> {
                    p.schema()
                        .fields()
                        .iter()
                        .map(|f| (f.name().clone(), f.data_type().clone()))
                        .collect()
                };
                columns(&plan) == columns(&again)
            }
            Err(_) => false,
        };
        if same { expanded } else { query.clone() }
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
        // On the query threads, so the session's select! sees a cancel while
        // the plan computes. Dropping the handle (cancel, disconnect) aborts it.
        let task = self.db.query_runtime().spawn(df.collect());
        let _abort_on_drop = AbortOnDrop(task.abort_handle());
        let batches = task
            .await
            .map_err(|e| ServerError::internal(format!("query task failed: {e}")))??;
        self.present(planned, batches)
    }

    /// A planned result as clients see it: PostgreSQL's column names and
    /// type tags.
    pub(super) fn present(
        &self,
        planned: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), ServerError> {
        match weir_pgsem::presented_schema(&planned) {
            None => Ok((planned, batches)),
            Some(schema) => {
                // Each batch keeps its own field types, which constant
                // folding may have made narrower than the plan's.
                let batches = batches
                    .into_iter()
                    .map(|b| match weir_pgsem::presented_schema(&b.schema()) {
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
    pub(super) fn with_float_digits(
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
            weir_pgsem::text_output::EXTRA_FLOAT_DIGITS_KEY.to_string(),
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
        let (schema, batches) = match params {
            Some(params) => {
                // A prepared point query is a key lookup; a statement seen
                // before and found not to be one is planned as usual.
                let catalog = self.snapshot().catalog.clone();
                let search_path = self.vars.default_schema();
                let known = self.point_queries.get(&statement, &catalog, &search_path);
                let seen = known.is_some();
                let answer = match known {
                    Some(Some(point)) => point.run(&self.snapshot(), params)?,
                    _ => None,
                };
                match answer {
                    Some(answer) => {
                        self.db.metrics().point_lookup();
                        self.present(answer.0, answer.1)
                    }
                    None => {
                        let plan = if !seen {
                            let plan = self.plan_statement(statement.clone()).await?;
                            self.point_queries
                                .remember(statement, catalog, search_path, &plan);
                            plan
                        } else {
                            self.plan_statement(statement).await?
                        };
                        return self.run_query_plan(Self::bind(plan, Some(params))?).await;
                    }
                }
            }
            None => {
                return self
                    .run_query_plan(self.plan_statement(statement).await?)
                    .await;
            }
        }?;
        let (schema, batches) = self.in_session_time_zone(schema, batches)?;
        let (schema, batches) = self.with_float_digits(schema, batches)?;
        Ok(StatementResult::Rows { schema, batches })
    }

    async fn run_query_plan(&mut self, plan: LogicalPlan) -> Result<StatementResult, ServerError> {
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
