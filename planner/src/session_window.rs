//! `SESSION(rel, col, gap [, key ...])`: each row of `rel` with the bounds
//! of its session, per partition key (rows ordered by `col`; a session
//! ends where the next row is at least `gap` later; it spans
//! `[first row's col, last row's col + gap)`).
//!
//! The call becomes a derived table with two window functions, planned by
//! DataFusion like any other:
//!
//! ```sql
//! (SELECT *,
//!   session_window_start(col, <gap µs>) OVER (PARTITION BY key ORDER BY col) AS window_start,
//!   session_window_end(col, <gap µs>)   OVER (PARTITION BY key ORDER BY col) AS window_end
//!  FROM rel WHERE col IS NOT NULL)
//! ```
//!
//! Ad hoc, [`SessionBound`] evaluates them over each sorted partition; in a
//! projection the lowering turns that window node into the incremental
//! [`weir_engine::ops::session_window::SessionWindow`]. Both use the one
//! rule, [`weir_engine::ops::session_window::sessions`].

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result as DfResult, plan_err};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl,
};
use datafusion::sql::sqlparser::ast::{Query, Statement};
use weir_engine::ops::session_window::{Bound, gap_in_unit, sessions};
use weir_engine::watermark::as_i64;

use crate::error::PlanError;
use crate::window_tvf::WindowCall;

/// The window functions the rewrite calls, to register on a context.
pub fn functions() -> Vec<WindowUDF> {
    vec![
        WindowUDF::from(SessionBound::new(Bound::Start)),
        WindowUDF::from(SessionBound::new(Bound::End)),
    ]
}

/// The derived table's query for a checked `SESSION` call.
pub(crate) fn query(call: &WindowCall) -> Result<Query, PlanError> {
    let column = &call.column;
    let partition = if call.partition.is_empty() {
        String::new()
    } else {
        let keys: Vec<String> = call.partition.iter().map(|k| k.to_string()).collect();
        format!("PARTITION BY {} ", keys.join(", "))
    };
    let over = format!("OVER ({partition}ORDER BY {column})");
    let gap = call.gap();
    let sql = format!(
        "SELECT *, {START}({column}, {gap}) {over} AS window_start, \
         {END}({column}, {gap}) {over} AS window_end \
         FROM {relation} WHERE {column} IS NOT NULL",
        relation = call.relation,
    );
    let mut statements = crate::parse_sql(&sql)
        .map_err(|e| PlanError::InvalidArgument(format!("SESSION over {}: {e}", call.relation)))?;
    match statements.pop() {
        Some(Statement::Query(query)) if statements.is_empty() => Ok(*query),
        _ => Err(PlanError::InvalidArgument(format!(
            "SESSION over {}: the rewrite is not one query",
            call.relation
        ))),
    }
}

const START: &str = "session_window_start";
const END: &str = "session_window_end";

/// `session_window_start(time, gap_micros)` or `session_window_end(...)`
/// over a partition ordered by `time`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SessionBound {
    bound: BoundKind,
    signature: Signature,
}

/// [`Bound`], hashable for DataFusion's function registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum BoundKind {
    Start,
    End,
}

impl SessionBound {
    fn new(bound: Bound) -> Self {
        Self {
            bound: match bound {
                Bound::Start => BoundKind::Start,
                Bound::End => BoundKind::End,
            },
            signature: Signature::any(2, Volatility::Immutable),
        }
    }

    /// Which bound this function computes.
    pub fn bound(&self) -> Bound {
        match self.bound {
            BoundKind::Start => Bound::Start,
            BoundKind::End => Bound::End,
        }
    }
}

impl WindowUDFImpl for SessionBound {
    fn name(&self) -> &str {
        match self.bound {
            BoundKind::Start => START,
            BoundKind::End => END,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        _args: PartitionEvaluatorArgs,
    ) -> DfResult<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(Evaluator {
            bound: self.bound(),
        }))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> DfResult<FieldRef> {
        let time = args.get_input_field(0).map(|f| f.data_type().clone());
        match time {
            Some(t @ DataType::Timestamp(..)) => Ok(Arc::new(Field::new(args.name(), t, true))),
            other => plan_err!(
                "SESSION needs a TIMESTAMP time column, got {}",
                other.map_or("nothing".into(), |t| t.to_string())
            ),
        }
    }
}

#[derive(Debug)]
struct Evaluator {
    bound: Bound,
}

impl PartitionEvaluator for Evaluator {
    /// `values` are the time (sorted: the window orders by it) and the
    /// gap in microseconds (the same on every row).
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> DfResult<ArrayRef> {
        let [time, gap] = values else {
            return plan_err!("SESSION bounds take (time, gap)");
        };
        let time_type = time.data_type().clone();
        let gap = as_i64(gap)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?
            .first()
            .copied()
            .flatten();
        let Some(gap) = gap.and_then(|g| gap_in_unit(g, &time_type)) else {
            return plan_err!("SESSION gap does not fit the unit of {time_type}");
        };
        let times =
            as_i64(time).map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        // NULL times (none after the rewrite's filter) are in no session.
        let known: Vec<i64> = times.iter().flatten().copied().collect();
        let mut bounds = sessions(&known, gap).into_iter();
        let out: Int64Array = times
            .iter()
            .map(|t| {
                t.and_then(|_| bounds.next())
                    .map(|(start, end)| match self.bound {
                        Bound::Start => start,
                        Bound::End => end,
                    })
            })
            .collect();
        debug_assert_eq!(out.len(), num_rows);
        Ok(cast(&out, &time_type)?)
    }
}
