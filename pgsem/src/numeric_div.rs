//! `numeric / numeric` with PostgreSQL's result scale.
//!
//! DataFusion divides decimals at the dividend's scale plus 4 (`10::numeric
//! / 3` is `3.3333`); PostgreSQL keeps at least 16 significant digits
//! (`3.3333333333333333`). PostgreSQL picks the scale per value from the
//! quotient's magnitude; an Arrow column has one scale, so the quotient gets
//! `max(16, dividend scale, divisor scale)` decimals, PostgreSQL's choice for
//! quotients between 1 and 10000 (the smaller ones get more digits there).
//! The quotient is rounded half away from zero, as PostgreSQL rounds.

use arrow::array::{Array, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Decimal128Type, i256};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::udfs::value_error;

/// Fewest decimals a quotient gets (PostgreSQL's `NUMERIC_MIN_SIG_DIGITS`).
const MIN_QUOTIENT_SCALE: i8 = 16;

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericDiv {
    signature: Signature,
}

impl NumericDiv {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(NumericDiv {
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

/// The quotient's scale for operands of scales `s1` and `s2`.
pub fn quotient_scale(s1: i8, s2: i8) -> i8 {
    MIN_QUOTIENT_SCALE.max(s1).max(s2).min(38)
}

fn scales(args: &[DataType]) -> Result<(i8, i8)> {
    match args {
        [DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)] => Ok((*s1, *s2)),
        other => exec_err!("numeric_div takes two decimals, got {other:?}"),
    }
}

/// `a / b` for `a` at scale `s1`, `b` at scale `s2`, as an integer at scale
/// `scale`, rounded half away from zero.
fn divide(a: i128, b: i128, s1: i8, s2: i8, scale: i8) -> Result<i128> {
    if b == 0 {
        return Err(value_error("22012", "division by zero"));
    }
    let overflow = || value_error("22003", "value overflows numeric format");
    // a/10^s1 / (b/10^s2) * 10^scale = a * 10^(scale - s1 + s2) / b
    let shift = i32::from(scale) - i32::from(s1) + i32::from(s2);
    let ten = i256::from_i128(10);
    let (mut n, mut d) = (i256::from_i128(a), i256::from_i128(b));
    let factor = ten.checked_pow(shift.unsigned_abs()).ok_or_else(overflow)?;
    if shift >= 0 {
        n = n.checked_mul(factor).ok_or_else(overflow)?;
    } else {
        d = d.checked_mul(factor).ok_or_else(overflow)?;
    }
    let q = n.checked_div(d).ok_or_else(overflow)?;
    let r = n.checked_rem(d).ok_or_else(overflow)?;
    let twice = r
        .wrapping_abs()
        .checked_mul(i256::from_i128(2))
        .ok_or_else(overflow)?;
    let q = if twice >= d.wrapping_abs() {
        q.checked_add(n.signum().wrapping_mul(d.signum()))
            .ok_or_else(overflow)?
    } else {
        q
    };
    let q = q.to_i128().ok_or_else(overflow)?;
    if q.unsigned_abs() >= 10u128.pow(38) {
        return Err(overflow());
    }
    Ok(q)
}

impl ScalarUDFImpl for NumericDiv {
    fn name(&self) -> &str {
        "numeric_div"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let (s1, s2) = scales(args)?;
        Ok(DataType::Decimal128(38, quotient_scale(s1, s2)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let types: Vec<DataType> = args.args.iter().map(ColumnarValue::data_type).collect();
        let (s1, s2) = scales(&types)?;
        let scale = quotient_scale(s1, s2);
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (l, r) = (
            arrays[0].as_primitive::<Decimal128Type>(),
            arrays[1].as_primitive::<Decimal128Type>(),
        );
        let quotients = (0..l.len())
            .map(|i| {
                if l.is_null(i) || r.is_null(i) {
                    Ok(None)
                } else {
                    divide(l.value(i), r.value(i), s1, s2, scale).map(Some)
                }
            })
            .collect::<Result<Decimal128Array>>()?
            .with_precision_and_scale(38, scale)?;
        crate::udfs::shaped_like(&args.args, std::sync::Arc::new(quotients))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotients_keep_sixteen_decimals_and_round_half_away_from_zero() {
        let scale = quotient_scale(0, 0);
        assert_eq!(divide(10, 3, 0, 0, scale).unwrap(), 33_333_333_333_333_333);
        assert_eq!(divide(-2, 3, 0, 0, scale).unwrap(), -6_666_666_666_666_667);
        // 2.50 / 2 = 1.25
        assert_eq!(divide(250, 2, 2, 0, scale).unwrap(), 12_500_000_000_000_000);
        // 1 / 0.5 = 2, a divisor with decimals
        assert_eq!(divide(1, 5, 0, 1, scale).unwrap(), 20_000_000_000_000_000);
    }

    #[test]
    fn zero_divisors_and_overflow_are_errors() {
        let err = divide(1, 0, 0, 0, 16).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{err}");
        let err = divide(10i128.pow(37), 1, 0, 0, 16).unwrap_err();
        assert!(err.to_string().contains("overflows numeric"), "{err}");
    }
}
