//! `timestamp ± INTERVAL '...'` as `timestamp ± duration` where the two mean
//! the same, in a projection's expressions.
//!
//! TUMBLE and HOP compute their bounds as `date_bin(...) ± INTERVAL`, once
//! per row and window. Arrow adds an interval to a timestamp through a
//! calendar (to a date and time, months, days, nanoseconds, and back), which
//! was about 5 % of q5's time; a duration is one integer addition. They are
//! equal when the interval has no months, and its days are whole 24-hour
//! days: always for a timestamp without a time zone, never assumed for one
//! with a zone (a day there may be 23 or 25 hours). The interval must also
//! be a whole number of the timestamp's unit, so nothing is rounded.

use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Operator};

const NANOS_PER_DAY: i128 = 86_400 * 1_000_000_000;

/// `expr` with every `timestamp ± interval literal` that equals a
/// `timestamp ± duration` written so; `expr` itself when none does (or its
/// types cannot be read, which planning it will then report).
pub(super) fn as_durations(expr: &Expr, schema: &DFSchema) -> Expr {
    expr.clone()
        .transform_up(|e| {
            let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
                return Ok(Transformed::no(e));
            };
            let (Operator::Plus | Operator::Minus, Expr::Literal(interval, _)) =
                (op, right.as_ref())
            else {
                return Ok(Transformed::no(e));
            };
            let ScalarValue::IntervalMonthDayNano(Some(interval)) = interval else {
                return Ok(Transformed::no(e));
            };
            let Ok(DataType::Timestamp(unit, zone)) = left.get_type(schema) else {
                return Ok(Transformed::no(e));
            };
            match duration(*interval, unit, zone.is_some()) {
                Some(duration) => Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr {
                    left: left.clone(),
                    op: *op,
                    right: Box::new(Expr::Literal(duration, None)),
                }))),
                None => Ok(Transformed::no(e)),
            }
        })
        .map_or_else(|_| expr.clone(), |t| t.data)
}

/// The duration literal in `unit` equal to adding `interval` to a timestamp
/// of that unit, if there is one.
fn duration(interval: IntervalMonthDayNano, unit: TimeUnit, zoned: bool) -> Option<ScalarValue> {
    if interval.months != 0 || (zoned && interval.days != 0) {
        return None;
    }
    let nanos = i128::from(interval.days) * NANOS_PER_DAY + i128::from(interval.nanoseconds);
    let per_unit: i128 = match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    };
    if nanos % per_unit != 0 {
        return None;
    }
    let value = Some(i64::try_from(nanos / per_unit).ok()?);
    Some(match unit {
        TimeUnit::Second => ScalarValue::DurationSecond(value),
        TimeUnit::Millisecond => ScalarValue::DurationMillisecond(value),
        TimeUnit::Microsecond => ScalarValue::DurationMicrosecond(value),
        TimeUnit::Nanosecond => ScalarValue::DurationNanosecond(value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mdn(months: i32, days: i32, nanoseconds: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano {
            months,
            days,
            nanoseconds,
        }
    }

    #[test]
    fn fixed_intervals_become_durations_in_the_timestamps_unit() {
        assert_eq!(
            duration(mdn(0, 0, 2_000_000_000), TimeUnit::Microsecond, false),
            Some(ScalarValue::DurationMicrosecond(Some(2_000_000)))
        );
        assert_eq!(
            duration(mdn(0, 1, 5_000_000), TimeUnit::Millisecond, false),
            Some(ScalarValue::DurationMillisecond(Some(86_400_005)))
        );
        assert_eq!(
            duration(mdn(0, -1, 0), TimeUnit::Second, false),
            Some(ScalarValue::DurationSecond(Some(-86_400)))
        );
    }

    /// The rewritten expression computes what the interval did, for
    /// timestamps before and after 1970, adding and subtracting.
    #[test]
    fn durations_compute_what_the_interval_did() {
        use std::sync::Arc;

        use datafusion::arrow::array::{RecordBatch, TimestampMicrosecondArray};
        use datafusion::arrow::datatypes::{Field, Schema};
        use datafusion::execution::context::ExecutionProps;
        use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
        use datafusion::logical_expr::{col, lit};
        use datafusion::physical_expr::create_physical_expr;

        let arrow = Schema::new(vec![Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]);
        let schema = DFSchema::try_from(arrow.clone()).unwrap();
        let times = TimestampMicrosecondArray::from(vec![
            Some(1_700_000_000_123_456),
            Some(-86_400_000_001),
            None,
            Some(0),
        ]);
        let batch = RecordBatch::try_new(Arc::new(arrow), vec![Arc::new(times)]).unwrap();
        let props = ExecutionProps::new();
        for interval in [mdn(0, 0, 2_000_000_000), mdn(0, 3, 7_000), mdn(0, -2, 0)] {
            for minus in [false, true] {
                let value = lit(ScalarValue::IntervalMonthDayNano(Some(interval)));
                let expr = if minus {
                    col("t") - value
                } else {
                    col("t") + value
                };
                let rewritten = as_durations(&expr, &schema);
                assert_ne!(rewritten, expr, "{expr} was not rewritten");
                let eval = |e: &Expr| {
                    create_physical_expr(e, &schema, &props, &PhysicalPlanningContext::default())
                        .unwrap()
                        .evaluate(&batch)
                        .unwrap()
                        .into_array(batch.num_rows())
                        .unwrap()
                };
                assert_eq!(eval(&rewritten).as_ref(), eval(&expr).as_ref(), "{expr}");
            }
        }
    }

    #[test]
    fn calendar_intervals_stay_intervals() {
        // A month has no fixed length.
        assert_eq!(duration(mdn(1, 0, 0), TimeUnit::Microsecond, false), None);
        // A day in a time zone may be 23 or 25 hours.
        assert_eq!(duration(mdn(0, 1, 0), TimeUnit::Microsecond, true), None);
        assert!(duration(mdn(0, 0, 1_000), TimeUnit::Microsecond, true).is_some());
        // Part of a unit would be rounded.
        assert_eq!(
            duration(mdn(0, 0, 1_500), TimeUnit::Microsecond, false),
            None
        );
    }
}
