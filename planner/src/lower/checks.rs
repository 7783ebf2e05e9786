//! What a projection may not contain: anything whose answer would differ
//! between an ad-hoc read and incremental maintenance.

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};

use crate::PlanError;

/// Rejects non-deterministic functions, parameters and (once the optimizer
/// has run) subqueries it could not turn into joins.
pub(super) fn maintainable(plan: &LogicalPlan) -> Result<(), PlanError> {
    let mut problem: Option<PlanError> = None;
    plan.apply_with_subqueries(|node| {
        for expr in node.expressions() {
            expr.apply(|e| {
                if let Some(p) = expression_problem(e) {
                    problem = Some(p);
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
            if problem.is_some() {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    problem.map_or(Ok(()), Err)
}

fn expression_problem(expr: &Expr) -> Option<PlanError> {
    match expr {
        // A temporal filter's now(): checked when its filter is lowered.
        Expr::ScalarFunction(f) if f.func.inner().is::<super::temporal::EpochTime>() => None,
        Expr::ScalarFunction(f) if f.func.name() == "now" => Some(PlanError::unsupported(
            "now() in a projection outside a WHERE comparison with a time (a temporal filter \
             such as `WHERE ts > now() - INTERVAL '1 hour'` is maintained; now() elsewhere \
             would be frozen at CREATE)",
        )),
        Expr::ScalarFunction(f) if f.func.signature().volatility != Volatility::Immutable => {
            Some(PlanError::unsupported(format!(
                "{}() in a projection (its result changes from one evaluation to the next, so the projection could not stay equal to its query)",
                f.func.name()
            )))
        }
        Expr::Placeholder(p) => Some(PlanError::unsupported(format!(
            "parameter {} in a projection",
            p.id
        ))),
        _ => None,
    }
}

/// After optimization: subqueries left in expressions could not be
/// decorrelated into joins.
pub(super) fn no_subqueries(plan: &LogicalPlan) -> Result<(), PlanError> {
    let mut found = None;
    plan.apply(|node| {
        for expr in node.expressions() {
            expr.apply(|e| {
                let what = match e {
                    Expr::ScalarSubquery(_) => "a scalar subquery",
                    Expr::Exists(_) => "EXISTS",
                    Expr::InSubquery(_) => "IN (subquery)",
                    Expr::OuterReferenceColumn(..) => "a correlated column reference",
                    _ => return Ok(TreeNodeRecursion::Continue),
                };
                found = Some(what);
                Ok(TreeNodeRecursion::Stop)
            })?;
        }
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    match found {
        Some(what) => Err(PlanError::unsupported(format!(
            "{what} in a projection where it cannot be rewritten as a join"
        ))),
        None => Ok(()),
    }
}

/// A user-facing name for a plan node Weir cannot maintain.
pub(super) fn node_name(plan: &LogicalPlan) -> &'static str {
    match plan {
        LogicalPlan::RecursiveQuery(_) => "WITH RECURSIVE",
        LogicalPlan::Unnest(_) => "UNNEST",
        LogicalPlan::Subquery(_) => "a subquery that cannot be rewritten as a join",
        LogicalPlan::Window(_) => "a window function",
        LogicalPlan::Extension(_) => "an extension node",
        LogicalPlan::Repartition(_) => "a repartition",
        LogicalPlan::DescribeTable(_) => "DESCRIBE",
        LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => "EXPLAIN",
        LogicalPlan::Dml(_) => "a data-modifying statement",
        LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) | LogicalPlan::Copy(_) => {
            "a statement that is not a query"
        }
        _ => "this plan node",
    }
}
