//! Temporal filters: `now()` in a projection's WHERE, compared with a time
//! (`WHERE ts > now() - INTERVAL '1 hour'`, `ts <= now()`).
//!
//! DataFusion folds `now()` into a constant when it optimizes a plan, which
//! would freeze the filter at CREATE time. So before optimizing, every
//! `now()` inside a WHERE (a `Filter` node) becomes [`EpochTime`], a
//! volatile function nothing folds; once optimized, the lowering of a
//! `Filter` splits off the conjuncts that read it and turns each into a
//! [`TimeBound`] of a [`TemporalFilter`], which evaluates it at every
//! epoch's time ([`filter`]). `now()` anywhere else (a SELECT list, a join condition,
//! inside another function) is still refused.

use std::sync::Arc;

use arrow::datatypes::DataType;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, Filter, LogicalPlan, Operator as BinaryOp,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use weir_engine::Input;
use weir_engine::ops::map::Map;
use weir_engine::ops::temporal_filter::{TemporalFilter, TimeBound, TimeComparison};

use super::{Lowering, identity};

use crate::PlanError;

/// `now()` as each epoch's time: never evaluated as an expression (the
/// temporal filter reads the epoch's time itself).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct EpochTime {
    signature: Signature,
    /// `now()`'s type where it was written (a timestamp in the session's
    /// time zone).
    data_type: DataType,
}

impl ScalarUDFImpl for EpochTime {
    fn name(&self) -> &str {
        "now"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(self.data_type.clone())
    }

    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> datafusion::common::Result<ColumnarValue> {
        datafusion::common::plan_err!(
            "now() in a projection is only maintained in a WHERE comparison with a time"
        )
    }
}

/// Whether `expr` reads the epoch's time.
pub(crate) fn reads_epoch_time(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|e| {
        if matches!(e, Expr::ScalarFunction(f) if f.func.inner().is::<EpochTime>()) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The bound plan with every `now()` inside a WHERE made [`EpochTime`].
pub(super) fn mark_epoch_time(plan: &LogicalPlan) -> Result<LogicalPlan, PlanError> {
    Ok(plan
        .clone()
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::Filter(filter) = &node else {
                return Ok(Transformed::no(node));
            };
            let schema = filter.input.schema().clone();
            let predicate = filter.predicate.clone().transform_up(|e| match &e {
                Expr::ScalarFunction(f)
                    if f.func.name() == "now" && !f.func.inner().is::<EpochTime>() =>
                {
                    let data_type = e.get_type(&schema)?;
                    let udf = ScalarUDF::new_from_impl(EpochTime {
                        signature: Signature::nullary(Volatility::Volatile),
                        data_type,
                    });
                    Ok(Transformed::yes(Expr::ScalarFunction(
                        ScalarFunction::new_udf(Arc::new(udf), Vec::new()),
                    )))
                }
                _ => Ok(Transformed::no(e)),
            })?;
            if !predicate.transformed {
                return Ok(Transformed::no(node));
            }
            let filter = Filter::try_new(predicate.data, filter.input.clone())?;
            Ok(Transformed::yes(LogicalPlan::Filter(filter)))
        })?
        .data)
}

/// Lowers a WHERE: its plain conjuncts as one filter, then those reading
/// `now()` as a [`TemporalFilter`].
pub(super) fn filter(
    lowering: &mut Lowering,
    f: &Filter,
    schema: SchemaRef,
) -> Result<Input, PlanError> {
    let mut input = lowering.node(&f.input)?;
    let (timed, plain): (Vec<Expr>, Vec<Expr>) = split_conjunction(&f.predicate)
        .into_iter()
        .cloned()
        .partition(reads_epoch_time);
    if let Some(predicate) = conjunction(plain) {
        let physical = lowering.physical(&predicate, f.input.schema())?;
        input = lowering.add(
            Box::new(Map::new(
                schema.clone(),
                Some(physical),
                identity(&schema),
                schema.clone(),
            )),
            vec![input],
            format!("filter: {}", predicate.human_display()),
        )?;
    }
    if timed.is_empty() {
        return Ok(input);
    }
    let mut bounds = Vec::new();
    let mut described = Vec::new();
    for e in &timed {
        let (bound, row) = time_bound(
            e,
            |row| lowering.physical(row, f.input.schema()),
            f.input.schema(),
        )?;
        described.push(describe(&row, &bound));
        bounds.push(bound);
    }
    lowering.add(
        Box::new(TemporalFilter::new(schema, bounds)?),
        vec![input],
        format!(
            "temporal filter: {} [now() is each epoch's time; a row is kept \
             until it enters, and until it leaves]",
            described.join(" AND ")
        ),
    )
}

fn refused(expr: &Expr, why: &str) -> PlanError {
    PlanError::unsupported(format!(
        "the temporal filter {} ({why}; write `time_column > now() - INTERVAL '...'` or \
         `time_column <= now()`, with <, <=, > or >= and an optional interval in days, \
         hours, minutes or seconds)",
        expr.human_display()
    ))
}

/// `bound` for EXPLAIN: `ts > now() - INTERVAL '3600 seconds'`.
pub(super) fn describe(row: &Expr, bound: &TimeBound) -> String {
    let op = match bound.comparison {
        TimeComparison::After => ">",
        TimeComparison::AtOrAfter => ">=",
        TimeComparison::Before => "<",
        TimeComparison::AtOrBefore => "<=",
    };
    let offset = match bound.offset_micros {
        0 => String::new(),
        d => {
            let sign = if d < 0 { '-' } else { '+' };
            let d = d.unsigned_abs();
            let (n, unit) = [
                (86_400_000_000, "days"),
                (1_000_000, "seconds"),
                (1, "microseconds"),
            ]
            .into_iter()
            .find(|(unit, _)| d % unit == 0)
            .map_or((d, "microseconds"), |(u, name)| (d / u, name));
            format!(" {sign} INTERVAL '{n} {unit}'")
        }
    };
    format!("{} {op} now(){offset}", row.human_display())
}

/// `expr` (a conjunct reading the epoch's time) as `row OP now() + offset`,
/// and its row side. `physical` plans the row side over the filter's input.
pub(super) fn time_bound(
    expr: &Expr,
    physical: impl Fn(&Expr) -> Result<Arc<dyn datafusion::physical_expr::PhysicalExpr>, PlanError>,
    schema: &DFSchema,
) -> Result<(TimeBound, Expr), PlanError> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return Err(refused(expr, "not a comparison"));
    };
    let comparison = match op {
        BinaryOp::Gt => TimeComparison::After,
        BinaryOp::GtEq => TimeComparison::AtOrAfter,
        BinaryOp::Lt => TimeComparison::Before,
        BinaryOp::LtEq => TimeComparison::AtOrBefore,
        _ => return Err(refused(expr, "not <, <=, > or >=")),
    };
    let (row, now, comparison) = match (reads_epoch_time(left), reads_epoch_time(right)) {
        (false, true) => (left, right, comparison),
        // `now() < ts` is `ts > now()`.
        (true, false) => (
            right,
            left,
            match comparison {
                TimeComparison::After => TimeComparison::Before,
                TimeComparison::AtOrAfter => TimeComparison::AtOrBefore,
                TimeComparison::Before => TimeComparison::After,
                TimeComparison::AtOrBefore => TimeComparison::AtOrAfter,
            },
        ),
        _ => return Err(refused(expr, "now() on both sides")),
    };
    let offset_micros = offset_of(now).ok_or_else(|| {
        refused(
            expr,
            "its now() side is not now() plus or minus a fixed interval",
        )
    })?;
    match row.get_type(schema)? {
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {}
        other => return Err(refused(expr, &format!("it compares a {other}, not a time"))),
    }
    let bound = TimeBound {
        row: physical(row)?,
        comparison,
        offset_micros,
    };
    Ok((bound, row.as_ref().clone()))
}

/// `now()`, `now() ± interval`, `interval + now()` (casts to another
/// timestamp type allowed): the interval in microseconds.
fn offset_of(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::ScalarFunction(f) if f.func.inner().is::<EpochTime>() => Some(0),
        Expr::Cast(c) if matches!(c.field.data_type(), DataType::Timestamp(..)) => {
            offset_of(&c.expr)
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            match (op, reads_epoch_time(left), reads_epoch_time(right)) {
                (BinaryOp::Plus, true, false) => {
                    offset_of(left)?.checked_add(interval_micros(right)?)
                }
                (BinaryOp::Plus, false, true) => {
                    offset_of(right)?.checked_add(interval_micros(left)?)
                }
                (BinaryOp::Minus, true, false) => {
                    offset_of(left)?.checked_sub(interval_micros(right)?)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// A literal interval of fixed length, in microseconds (months vary: none).
pub(super) fn interval_micros(expr: &Expr) -> Option<i64> {
    let Expr::Literal(value, _) = expr else {
        return None;
    };
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => (v.days as i64)
            .checked_mul(86_400_000_000)?
            .checked_add(v.nanoseconds / 1_000),
        ScalarValue::IntervalDayTime(Some(v)) => (v.days as i64)
            .checked_mul(86_400_000_000)?
            .checked_add(v.milliseconds as i64 * 1_000),
        _ => None,
    }
}
