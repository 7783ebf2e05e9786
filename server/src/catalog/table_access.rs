//! [`TableAccessExec`]: how a table scan reached its rows, for EXPLAIN.
//!
//! A table's scan reads the rows its filters allow through the primary key
//! or a secondary index (see `key_access`) and hands them on in memory;
//! this node sits on top and says which path it took (`EXPLAIN` shows
//! `TableAccessExec: t via index t_email_key (points)`), changing nothing.

use std::fmt;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

#[derive(Debug)]
pub struct TableAccessExec {
    table: String,
    /// `primary key (points)`, `index t_a_idx (range)`, `full scan`.
    access: String,
    input: Arc<dyn ExecutionPlan>,
}

impl TableAccessExec {
    pub fn new(table: String, access: String, input: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            table,
            access,
            input,
        }
    }
}

impl DisplayAs for TableAccessExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "TableAccessExec: {} via {}", self.table, self.access)
    }
}

impl ExecutionPlan for TableAccessExec {
    fn name(&self) -> &str {
        "TableAccessExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children.pop().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("TableAccessExec takes one input".into())
        })?;
        Ok(Arc::new(Self::new(
            self.table.clone(),
            self.access.clone(),
            input,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}
