//! Binding: a parsed statement to DataFusion's `LogicalPlan`, with the
//! rewrites Weir applies first. Sessions (ad-hoc queries, CREATE) and
//! recovery (planning every projection again at a start) bind through
//! here, in whatever DataFusion state they hold (catalog, settings).
//!
//! The rewrites, in order: window table functions ([`crate::window_tvf`]);
//! PostgreSQL's output column names and `AT TIME ZONE`
//! ([`weir_pgsem`]); the catalog-query rewrites drivers need
//! ([`crate::compat`]), with select-list lookups DataFusion cannot
//! decorrelate answered NULL one by one; then PostgreSQL's result types.

use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use crate::PlanError;
use crate::compat;

/// Binds `statement` in `state` (parameters stay placeholders).
pub async fn bind(
    state: &SessionState,
    mut statement: Statement,
) -> Result<LogicalPlan, PlanError> {
    crate::rewrite_window_tvfs(&mut statement)?;
    compat::name_regclass_outputs(&mut statement);
    weir_pgsem::name_columns(&mut statement);
    weir_pgsem::name_function_columns(&mut statement);
    weir_pgsem::at_time_zone_as_function(&mut statement);
    if compat::has_unrewritable_array(&statement) {
        return Err(PlanError::unsupported(
            "ARRAY(subquery) over a grouped, DISTINCT, LIMITed or UNION query with ORDER BY",
        ));
    }
    let original = (compat::reads_only_catalog(&statement)
        && compat::select_subquery_count(&statement) > 0)
        .then(|| statement.clone());
    let planned = plan_sql(state, compat::rewrite(statement)).await;
    let plan = match (planned, original) {
        (Ok(plan), Some(original)) if !runnable(state, &plan) => {
            plan_without_lookups(state, original).await?
        }
        (Err(_), Some(original)) => plan_without_lookups(state, original).await?,
        (planned, _) => planned?,
    };
    Ok(weir_pgsem::pg_result_types(plan)?)
}

async fn plan_sql(state: &SessionState, statement: Statement) -> Result<LogicalPlan, PlanError> {
    Ok(state
        .statement_to_plan(DfStatement::Statement(Box::new(statement)))
        .await?)
}

/// Whether DataFusion can execute `plan`: it decorrelates every subquery.
fn runnable(state: &SessionState, plan: &LogicalPlan) -> bool {
    state
        .optimize(plan)
        .is_ok_and(|p| !compat::keeps_subqueries(&p))
}

/// A catalog query with select-list lookups DataFusion cannot
/// decorrelate: each lookup that runs when it is the only one left is
/// kept, the others answer NULL (see [`compat::null_select_subqueries`]).
async fn plan_without_lookups(
    state: &SessionState,
    original: Statement,
) -> Result<LogicalPlan, PlanError> {
    let count = compat::select_subquery_count(&original);
    let mut runs_alone = Vec::with_capacity(count);
    for keep in 0..count {
        let mut alone = original.clone();
        compat::null_select_subqueries(&mut alone, |i| i != keep);
        let plan = plan_sql(state, compat::rewrite(alone)).await;
        runs_alone.push(plan.is_ok_and(|p| runnable(state, &p)));
    }
    let mut kept = original.clone();
    compat::null_select_subqueries(&mut kept, |i| !runs_alone[i]);
    let plan = plan_sql(state, compat::rewrite(kept)).await?;
    if runnable(state, &plan) {
        return Ok(plan);
    }
    let mut none = original;
    compat::null_select_subqueries(&mut none, |_| true);
    plan_sql(state, compat::rewrite(none)).await
}
