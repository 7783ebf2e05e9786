//! The functions the PostgreSQL-semantics rewrites call: text input of the
//! types Arrow's string cast reads differently from PostgreSQL, integer
//! arithmetic that fails on overflow instead of wrapping, and `pg_typeof`.

use std::sync::Arc;

use crate::SqlType;
use arrow::array::{Array, ArrayRef, IntervalMonthDayNanoArray, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, IntervalMonthDayNano};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::PgsemError;
use crate::datetime_in::DateTimeContext;
use crate::interval::parse_interval;

/// A PostgreSQL error raised while evaluating an expression; the SQLSTATE
/// survives DataFusion's error wrapping (the server finds it in
/// `DataFusionError::External`).
pub fn value_error(sqlstate: &'static str, message: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(PgsemError::Value {
        sqlstate,
        message: message.into(),
    }))
}

/// Runs `f` over the argument as one array and returns a scalar when the
/// argument was one (so constant folding keeps a literal).
fn map_arg(
    arg: &ColumnarValue,
    rows: usize,
    f: impl FnOnce(&ArrayRef) -> Result<ArrayRef>,
) -> Result<ColumnarValue> {
    match arg {
        ColumnarValue::Scalar(s) => {
            let out = f(&s.to_array_of_size(1)?)?;
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        }
        ColumnarValue::Array(a) => {
            let _ = rows;
            Ok(ColumnarValue::Array(f(a)?))
        }
    }
}

/// The values of a text column (of any string type) as `Utf8`.
pub(super) fn strings(array: &ArrayRef) -> Result<StringArray> {
    let cast = arrow::compute::cast(array, &DataType::Utf8)?;
    cast.as_any()
        .downcast_ref::<StringArray>()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal("cast to Utf8".into()))
}

/// `'<text>'::type` read the way PostgreSQL reads a literal of the type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TextIn {
    name: String,
    target: SqlType,
    /// The session's DateStyle order and TimeZone when the cast was
    /// planned, as PostgreSQL reads a literal once, with the settings of
    /// the moment.
    datetime: DateTimeContext,
    signature: Signature,
}

impl TextIn {
    pub fn udf(target: SqlType, datetime: DateTimeContext) -> ScalarUDF {
        ScalarUDF::new_from_impl(TextIn {
            name: format!("{}_in", target.pg_type_name()),
            target,
            datetime,
            signature: Signature::any(1, Volatility::Immutable),
        })
    }

    fn convert(&self, array: &ArrayRef) -> Result<ArrayRef> {
        let text = strings(array)?;
        match &self.target {
            SqlType::Interval => {
                let values = text
                    .iter()
                    .map(|v| {
                        v.map(|v| {
                            parse_interval(v)
                                .map(|i| {
                                    IntervalMonthDayNano::new(
                                        i.months,
                                        i.days,
                                        i.micros.saturating_mul(1000),
                                    )
                                })
                                .map_err(|e| value_error("22007", e))
                        })
                        .transpose()
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Arc::new(IntervalMonthDayNanoArray::from(values)))
            }
            // An explicit cast to varchar(n) truncates, as in PostgreSQL.
            SqlType::Varchar(Some(n)) => {
                let n = usize::try_from(*n).unwrap_or(usize::MAX);
                let out: StringArray = text
                    .iter()
                    .map(|v| {
                        v.map(|v| match v.char_indices().nth(n) {
                            Some((i, _)) => &v[..i],
                            None => v,
                        })
                    })
                    .collect();
                Ok(Arc::new(out))
            }
            target => crate::text_input::parse_column(&text, target, &self.datetime)
                .map_err(|e| value_error(e.sqlstate, e.message)),
        }
    }
}

impl ScalarUDFImpl for TextIn {
    fn name(&self) -> &str {
        &self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.target.arrow_type())
    }
    fn return_field_from_args(&self, _: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(self.target.field(&self.name, true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        map_arg(&args.args[0], args.number_rows, |a| self.convert(a))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
}

/// `out` as a UDF's result: a scalar when every argument was one (so
/// constant folding keeps working), else the array.
pub fn shaped_like(args: &[ColumnarValue], out: ArrayRef) -> Result<ColumnarValue> {
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
    } else {
        Ok(ColumnarValue::Array(out))
    }
}

/// Integer `+`, `-`, `*` that raise 22003 on overflow (Arrow's checked
/// kernels), where DataFusion's operators wrap around.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedArith {
    op: ArithOp,
    signature: Signature,
}

impl CheckedArith {
    pub fn udf(op: ArithOp) -> ScalarUDF {
        ScalarUDF::new_from_impl(CheckedArith {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

fn out_of_range(data_type: &DataType) -> DataFusionError {
    let name = match data_type {
        DataType::Int16 => "smallint",
        DataType::Int32 => "integer",
        _ => "bigint",
    };
    value_error("22003", format!("{name} out of range"))
}

impl ScalarUDFImpl for CheckedArith {
    fn name(&self) -> &str {
        match self.op {
            ArithOp::Add => "int_add",
            ArithOp::Sub => "int_sub",
            ArithOp::Mul => "int_mul",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow::compute::kernels::numeric::{add, mul, sub};
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (l, r) = (&arrays[0], &arrays[1]);
        let out = match self.op {
            ArithOp::Add => add(l, r),
            ArithOp::Sub => sub(l, r),
            ArithOp::Mul => mul(l, r),
        }
        .map_err(|e| match e {
            arrow::error::ArrowError::ArithmeticOverflow(_) => out_of_range(l.data_type()),
            e => e.into(),
        })?;
        shaped_like(&args.args, out)
    }
}

/// `pg_typeof(x)`: the PostgreSQL name of the argument's type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgTypeof {
    signature: Signature,
}

impl PgTypeof {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(PgTypeof {
            signature: Signature::any(1, Volatility::Immutable),
        })
    }
}

/// `regtype` output: the type's name without its modifiers.
pub fn regtype_name(field: &Field) -> String {
    fn name(t: &SqlType) -> String {
        match t {
            SqlType::Numeric(_) => "numeric".into(),
            SqlType::Varchar(_) => "character varying".into(),
            SqlType::Array(inner) => format!("{}[]", name(inner)),
            other => other.display_name(),
        }
    }
    match SqlType::from_field(field) {
        Some(t) => name(&t),
        None if field.data_type() == &DataType::Null => "unknown".into(),
        None => field.data_type().to_string(),
    }
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = args
            .arg_fields
            .first()
            .map(|f| regtype_name(f))
            .unwrap_or_else(|| "unknown".into());
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// numeric to float through the decimal text, so the float is the one
/// nearest the exact value (`1e100::float8` is 1e+100, not 1.0000000000000002e+100).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericToFloat {
    to: DataType,
    signature: Signature,
}

impl NumericToFloat {
    pub fn udf(to: DataType) -> ScalarUDF {
        ScalarUDF::new_from_impl(NumericToFloat {
            to,
            signature: Signature::any(1, Volatility::Immutable),
        })
    }

    fn convert(&self, array: &ArrayRef) -> Result<ArrayRef> {
        use arrow::array::{AsArray, Float32Array, Float64Array};
        use arrow::datatypes::Decimal128Type;
        let DataType::Decimal128(_, scale) = array.data_type() else {
            return Ok(arrow::compute::cast(array, &self.to)?);
        };
        let scale = *scale;
        let decimals = array.as_primitive::<Decimal128Type>();
        let text = |v: i128| crate::text_output::decimal_text(&v.to_string(), scale);
        Ok(match self.to {
            DataType::Float32 => Arc::new(
                decimals
                    .iter()
                    .map(|v| v.and_then(|v| text(v).parse::<f32>().ok()))
                    .collect::<Float32Array>(),
            ),
            _ => Arc::new(
                decimals
                    .iter()
                    .map(|v| v.and_then(|v| text(v).parse::<f64>().ok()))
                    .collect::<Float64Array>(),
            ),
        })
    }
}

impl ScalarUDFImpl for NumericToFloat {
    fn name(&self) -> &str {
        "numeric_to_float"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.to.clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        map_arg(&args.args[0], args.number_rows, |a| self.convert(a))
    }
}

/// PostgreSQL's `timezone(zone, ts)`, which `AT TIME ZONE` means.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TimeZoneFn {
    signature: Signature,
}

impl TimeZoneFn {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(TimeZoneFn {
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

fn has_zone(t: &DataType) -> bool {
    matches!(t, DataType::Timestamp(_, Some(_)))
}

impl ScalarUDFImpl for TimeZoneFn {
    fn name(&self) -> &str {
        "timezone"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        use arrow::datatypes::TimeUnit;
        Ok(if has_zone(&args[1]) {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        } else {
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow::array::{AsArray, TimestampMicrosecondArray};
        use arrow::datatypes::{TimeUnit, TimestampMicrosecondType};
        use chrono::{Offset, TimeZone};
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let zones = strings(&arrays[0])?;
        let input = &arrays[1];
        let to_local = has_zone(input.data_type());
        let micros = arrow::compute::cast(
            input,
            &DataType::Timestamp(TimeUnit::Microsecond, to_local.then(|| "+00:00".into())),
        )?;
        let micros = micros.as_primitive::<TimestampMicrosecondType>();
        let mut out = Vec::with_capacity(micros.len());
        for (zone, value) in zones.iter().zip(micros.iter()) {
            let (Some(zone), Some(value)) = (zone, value) else {
                out.push(None);
                continue;
            };
            let tz: arrow::array::timezone::Tz = zone.parse().map_err(|_| {
                value_error("22023", format!("time zone \"{zone}\" not recognized"))
            })?;
            let naive = chrono::DateTime::from_timestamp_micros(value)
                .ok_or_else(|| value_error("22008", "timestamp out of range"))?
                .naive_utc();
            let shifted = if to_local {
                let offset = tz.offset_from_utc_datetime(&naive).fix().local_minus_utc();
                value + i64::from(offset) * 1_000_000
            } else {
                let offset = tz
                    .offset_from_local_datetime(&naive)
                    .earliest()
                    .map_or(0, |o| o.fix().local_minus_utc());
                value - i64::from(offset) * 1_000_000
            };
            out.push(Some(shifted));
        }
        let array = TimestampMicrosecondArray::from(out);
        let array: ArrayRef = if to_local {
            Arc::new(array)
        } else {
            Arc::new(array.with_timezone("+00:00"))
        };
        shaped_like(&args.args, array)
    }
}

/// `length(bytea)`: the number of bytes.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ByteaLength {
    signature: Signature,
}

impl ByteaLength {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(ByteaLength {
            signature: Signature::any(1, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for ByteaLength {
    fn name(&self) -> &str {
        "bytea_length"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        map_arg(&args.args[0], args.number_rows, |a| {
            Ok(arrow::compute::kernels::length::length(a)?)
        })
    }
}
