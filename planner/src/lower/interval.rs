//! Interval joins: a join whose filter bounds the distance between a time
//! of each side (`B.t BETWEEN B1.t - INTERVAL '10' SECOND AND B1.t`, as in
//! Nexmark q7), both carrying a watermark, closes rows by that band
//! ([`Band`]): a row goes once no row of the other side within the band
//! can still come and its own side cannot change it.

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::DFSchema;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator as BinaryOp};
use weir_engine::ops::join::Band;

use super::temporal::interval_micros;

/// A time column and a fixed offset: `column + offset` (column units).
struct Shifted {
    left: bool,
    column: usize,
    micros: i64,
}

/// `expr` as a column of one side plus an interval, if it is one.
fn shifted(expr: &Expr, left: &DFSchema, right: &DFSchema) -> Option<Shifted> {
    match expr {
        Expr::Column(c) => {
            let (is_left, column) = match (left.index_of_column(c), right.index_of_column(c)) {
                (Ok(i), Err(_)) => (true, i),
                (Err(_), Ok(i)) => (false, i),
                _ => return None,
            };
            Some(Shifted {
                left: is_left,
                column,
                micros: 0,
            })
        }
        Expr::BinaryExpr(BinaryExpr {
            left: l,
            op,
            right: r,
        }) => {
            let mut inner = shifted(l, left, right)?;
            let by = interval_micros(r)?;
            inner.micros = match op {
                BinaryOp::Plus => inner.micros.checked_add(by)?,
                BinaryOp::Minus => inner.micros.checked_sub(by)?,
                _ => return None,
            };
            Some(inner)
        }
        _ => None,
    }
}

/// How a time column counts microseconds: `micros * mul / div` of its
/// units; `None` for other types.
fn scale(data_type: &DataType) -> Option<(i64, i64)> {
    Some(match data_type {
        DataType::Timestamp(TimeUnit::Second, _) => (1, 1_000_000),
        DataType::Timestamp(TimeUnit::Millisecond, _) | DataType::Date64 => (1, 1_000),
        DataType::Timestamp(TimeUnit::Microsecond, _) => (1, 1),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => (1_000, 1),
        DataType::Date32 => (1, 86_400_000_000),
        _ => return None,
    })
}

/// Microseconds as column units, rounded away from the band's inside
/// (`down` for a lower bound): a wider band only keeps rows longer.
fn to_units(micros: i64, (mul, div): (i64, i64), down: bool) -> Option<i64> {
    let scaled = micros.checked_mul(mul)?;
    let whole = scaled.div_euclid(div);
    Some(if down || scaled.rem_euclid(div) == 0 {
        whole
    } else {
        whole + 1
    })
}

/// The band `filter` sets between a watermarked time of the left input
/// (`left_marked`: its columns with one) and one of the right, of one
/// type; `None` when it sets none.
pub(super) fn band(
    filter: Option<&Expr>,
    left: &DFSchema,
    right: &DFSchema,
    left_marked: &[usize],
    right_marked: &[usize],
) -> Option<Band> {
    let mut found: Option<(usize, usize, Option<i64>, Option<i64>)> = None;
    for conjunct in split_conjunction(filter?) {
        let Expr::BinaryExpr(BinaryExpr {
            left: a,
            op,
            right: b,
        }) = conjunct
        else {
            continue;
        };
        let (Some(a), Some(b)) = (shifted(a, left, right), shifted(b, left, right)) else {
            continue;
        };
        if a.left == b.left {
            continue;
        }
        // As `l + x OP r + y`, i.e. `l - r OP y - x`.
        let (l, r, op) = if a.left {
            (a, b, *op)
        } else {
            let flipped = match op {
                BinaryOp::Lt => BinaryOp::Gt,
                BinaryOp::LtEq => BinaryOp::GtEq,
                BinaryOp::Gt => BinaryOp::Lt,
                BinaryOp::GtEq => BinaryOp::LtEq,
                other => *other,
            };
            (b, a, flipped)
        };
        if !left_marked.contains(&l.column) || !right_marked.contains(&r.column) {
            continue;
        }
        let data_type = left.field(l.column).data_type();
        if data_type != right.field(r.column).data_type() {
            continue;
        }
        let Some(per_unit) = scale(data_type) else {
            continue;
        };
        let Some(distance) = r.micros.checked_sub(l.micros) else {
            continue;
        };
        let (lo, hi) = match op {
            BinaryOp::Gt | BinaryOp::GtEq => (to_units(distance, per_unit, true), None),
            BinaryOp::Lt | BinaryOp::LtEq => (None, to_units(distance, per_unit, false)),
            _ => continue,
        };
        let entry = found.get_or_insert((l.column, r.column, None, None));
        // One pair of columns: bounds on another pair are left to the
        // residual.
        if (entry.0, entry.1) != (l.column, r.column) {
            continue;
        }
        if let Some(lo) = lo {
            entry.2 = Some(entry.2.map_or(lo, |v| v.max(lo)));
        }
        if let Some(hi) = hi {
            entry.3 = Some(entry.3.map_or(hi, |v| v.min(hi)));
        }
    }
    let (left, right, lo, hi) = found?;
    Some(Band {
        left,
        right,
        lo,
        hi,
    })
}
