//! Yield points in ad-hoc query plans, so one heavy query cannot freeze the
//! server.
//!
//! Tokio does not preempt: a task that keeps getting `Ready` from its input
//! never gives its worker thread back. DataFusion's own `EnsureCooperative`
//! rule spends scheduling budget only at leaves and exchanges, which is not
//! enough when an operator turns one input batch into millions of output
//! batches: a cross join under an aggregate then loops inside a single poll,
//! so (with as many busy partitions as worker threads) no other session, no
//! cancel request and no HTTP probe is served until it ends.
//!
//! [`YieldAfterExpanders`] wraps the output of every operator that can emit
//! many batches per input batch (joins, unions, unnest) in a
//! [`CooperativeExec`], which spends one unit of the task's budget per batch.
//! When the budget runs out the query's task yields; an aborted task (cancel,
//! disconnect) is then dropped at that point.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::unnest::UnnestExec;

#[derive(Debug, Default)]
pub struct YieldAfterExpanders;

/// An operator whose output can be far larger than its input, in batches.
fn expands(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.children().len() > 1 || plan.is::<UnnestExec>()
}

impl PhysicalOptimizerRule for YieldAfterExpanders {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let wrapped = plan.transform_up(|node| {
            if !expands(&node) {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(
                Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>
            ))
        })?;
        Ok(wrapped.data)
    }

    fn name(&self) -> &str {
        "yield_after_expanders"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn joins_get_a_yield_point_and_scans_do_not() {
        let ctx = SessionContext::new();
        let plan = ctx
            .sql("SELECT count(*) FROM (VALUES (1), (2)) a(x), (VALUES (3)) b(y) WHERE a.x + b.y > 0")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let plan = YieldAfterExpanders
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        let text = displayable(plan.as_ref()).indent(false).to_string();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let join = lines
            .iter()
            .position(|l| l.contains("JoinExec"))
            .unwrap_or_else(|| panic!("a join in\n{text}"));
        assert!(
            lines[join - 1].starts_with("CooperativeExec"),
            "the join's output spends budget:\n{text}"
        );
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("CooperativeExec"))
                .count(),
            1,
            "only the join is wrapped:\n{text}"
        );
    }
}
