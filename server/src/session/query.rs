//! SELECT and EXPLAIN: ad-hoc queries planned and run by DataFusion over the
//! statement's snapshot.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use super::{Session, StatementResult};
use crate::error::ServerError;

impl Session {
    /// Binds a statement with DataFusion (no parameters substituted yet).
    pub(super) async fn plan_statement(
        &self,
        statement: Statement,
    ) -> Result<LogicalPlan, ServerError> {
        let state = self.ctx.state();
        let statement = crate::catalog::compat::rewrite(statement);
        Ok(state
            .statement_to_plan(DfStatement::Statement(Box::new(statement)))
            .await?)
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
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await?;
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
