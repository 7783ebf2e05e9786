//! PostgreSQL's text output of values: what `psql` and every text-format
//! client sees. Arrow's own display differs in many small ways (`6.0` for a
//! float8 six, `inf`, padded microseconds, `+05` for `+05:30`), so every
//! type Weir stores is formatted here the way PostgreSQL's `*_out`
//! functions print it (ISO DateStyle, postgres IntervalStyle, hex bytea,
//! `extra_float_digits = 1`).

use std::fmt::Write;

use crate::PG_TYPE_METADATA_KEY;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Decimal256Type, DurationMicrosecondType,
    DurationMillisecondType, DurationNanosecondType, DurationSecondType, Field, Float16Type,
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, IntervalDayTimeType,
    IntervalMonthDayNanoType, IntervalUnit, IntervalYearMonthType, Time32MillisecondType,
    Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike};

/// Result-schema metadata key carrying a session's `extra_float_digits`
/// when it is not the default.
pub const EXTRA_FLOAT_DIGITS_KEY: &str = "weir.extra_float_digits";

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// The text of `array[row]`, or `None` for NULL. `field` supplies the
/// PostgreSQL type tag of string columns (uuid prints in lower case).
pub fn value_text(array: &dyn Array, row: usize, field: &Field) -> Result<Option<String>, String> {
    value_text_with(array, row, field, 1)
}

/// [`value_text`] under a session's `extra_float_digits` (1 is the default:
/// shortest exact floats; 0 and below round to 15 (float8) or 6 (float4)
/// significant digits plus the setting, as PostgreSQL's `%g` output does).
pub fn value_text_with(
    array: &dyn Array,
    row: usize,
    field: &Field,
    extra_float_digits: i32,
) -> Result<Option<String>, String> {
    if is_null_at(array, row) {
        return Ok(None);
    }
    let tag = field
        .metadata()
        .get(PG_TYPE_METADATA_KEY)
        .map(String::as_str);
    text_of(array, row, tag, extra_float_digits).map(Some)
}

/// Whether the value at `row` is NULL. An Arrow `NullArray` (the type of
/// an untyped `NULL`) has no validity buffer, so `is_null` calls its values
/// valid; every one of them is NULL.
pub fn is_null_at(array: &dyn Array, row: usize) -> bool {
    matches!(array.data_type(), DataType::Null) || array.is_null(row)
}

fn text_of(array: &dyn Array, row: usize, tag: Option<&str>, efd: i32) -> Result<String, String> {
    macro_rules! prim {
        ($t:ty) => {
            array.as_primitive::<$t>().value(row)
        };
    }
    Ok(match array.data_type() {
        DataType::Null => String::new(),
        DataType::Boolean => if array.as_boolean().value(row) {
            "t"
        } else {
            "f"
        }
        .into(),
        DataType::Int8 => prim!(Int8Type).to_string(),
        DataType::Int16 => prim!(Int16Type).to_string(),
        DataType::Int32 => prim!(Int32Type).to_string(),
        DataType::Int64 => prim!(Int64Type).to_string(),
        DataType::UInt8 => prim!(UInt8Type).to_string(),
        DataType::UInt16 => prim!(UInt16Type).to_string(),
        DataType::UInt32 => prim!(UInt32Type).to_string(),
        DataType::UInt64 => prim!(UInt64Type).to_string(),
        DataType::Float16 => float_text_with(f64::from(prim!(Float16Type)), true, efd),
        DataType::Float32 => float_text_with(f64::from(prim!(Float32Type)), true, efd),
        DataType::Float64 => float_text_with(prim!(Float64Type), false, efd),
        DataType::Decimal128(_, s) => decimal_text(&prim!(Decimal128Type).to_string(), *s),
        DataType::Decimal256(_, s) => decimal_text(&prim!(Decimal256Type).to_string(), *s),
        DataType::Utf8 => tagged_string(array.as_string::<i32>().value(row), tag),
        DataType::LargeUtf8 => tagged_string(array.as_string::<i64>().value(row), tag),
        DataType::Utf8View => tagged_string(array.as_string_view().value(row), tag),
        DataType::Binary => bytea_text(array.as_binary::<i32>().value(row)),
        DataType::LargeBinary => bytea_text(array.as_binary::<i64>().value(row)),
        DataType::BinaryView => bytea_text(array.as_binary_view().value(row)),
        DataType::FixedSizeBinary(_) => bytea_text(array.as_fixed_size_binary().value(row)),
        DataType::Date32 => date_text(i64::from(prim!(Date32Type))),
        DataType::Date64 => date_text(prim!(Date64Type).div_euclid(86_400_000)),
        DataType::Time32(TimeUnit::Second) => {
            time_text(i64::from(prim!(Time32SecondType)) * MICROS_PER_SECOND)
        }
        DataType::Time32(_) => time_text(i64::from(prim!(Time32MillisecondType)) * 1000),
        DataType::Time64(TimeUnit::Nanosecond) => {
            time_text(nanos_to_micros(prim!(Time64NanosecondType)))
        }
        DataType::Time64(_) => time_text(prim!(Time64MicrosecondType)),
        DataType::Timestamp(unit, tz) => {
            let micros = match unit {
                TimeUnit::Second => prim!(TimestampSecondType).saturating_mul(MICROS_PER_SECOND),
                TimeUnit::Millisecond => prim!(TimestampMillisecondType).saturating_mul(1000),
                TimeUnit::Microsecond => prim!(TimestampMicrosecondType),
                TimeUnit::Nanosecond => nanos_to_micros(prim!(TimestampNanosecondType)),
            };
            match tz {
                None => timestamp_text(micros, None)?,
                Some(tz) => {
                    let tz: arrow::array::timezone::Tz =
                        tz.parse().map_err(|e| format!("time zone {tz}: {e}"))?;
                    timestamp_text(micros, Some(&tz))?
                }
            }
        }
        DataType::Interval(IntervalUnit::YearMonth) => {
            interval_text(prim!(IntervalYearMonthType), 0, 0)
        }
        DataType::Interval(IntervalUnit::DayTime) => {
            let v = prim!(IntervalDayTimeType);
            interval_text(0, v.days, i64::from(v.milliseconds) * 1000)
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = prim!(IntervalMonthDayNanoType);
            interval_text(v.months, v.days, nanos_to_micros(v.nanoseconds))
        }
        DataType::Duration(unit) => {
            let micros = match unit {
                TimeUnit::Second => prim!(DurationSecondType).saturating_mul(MICROS_PER_SECOND),
                TimeUnit::Millisecond => prim!(DurationMillisecondType).saturating_mul(1000),
                TimeUnit::Microsecond => prim!(DurationMicrosecondType),
                TimeUnit::Nanosecond => nanos_to_micros(prim!(DurationNanosecondType)),
            };
            interval_text(0, 0, micros)
        }
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            array_text(list.value(row).as_ref(), list_tag(array.data_type()), efd)?
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            array_text(list.value(row).as_ref(), list_tag(array.data_type()), efd)?
        }
        DataType::FixedSizeList(_, _) => {
            let list = array.as_fixed_size_list();
            array_text(list.value(row).as_ref(), list_tag(array.data_type()), efd)?
        }
        _ => arrow::util::display::array_value_to_string(array, row).map_err(|e| e.to_string())?,
    })
}

fn list_tag(data_type: &DataType) -> Option<String> {
    match data_type {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            f.metadata().get(PG_TYPE_METADATA_KEY).cloned()
        }
        _ => None,
    }
}

fn tagged_string(s: &str, tag: Option<&str>) -> String {
    match tag {
        Some("uuid") => s.to_ascii_lowercase(),
        _ => s.to_string(),
    }
}

/// PostgreSQL rounds sub-microsecond input to the microsecond.
fn nanos_to_micros(nanos: i64) -> i64 {
    let micros = nanos.div_euclid(1000);
    if nanos.rem_euclid(1000) >= 500 {
        micros + 1
    } else {
        micros
    }
}

/// `float4out`/`float8out` with `extra_float_digits = 1`: the shortest text
/// that reads back as the same value, in `%g` style (exponent form outside
/// [1e-4, 1e15) for float8 and [1e-4, 1e6) for float4).
pub fn float_text(v: f64, is_float4: bool) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let shortest = if is_float4 {
        format!("{:e}", v as f32)
    } else {
        format!("{v:e}")
    };
    shortest_to_pg(&shortest, if is_float4 { 6 } else { 15 })
}

/// [`float_text`] under `extra_float_digits`.
pub fn float_text_with(v: f64, is_float4: bool, extra_float_digits: i32) -> String {
    if extra_float_digits > 0 || !v.is_finite() {
        return if is_float4 {
            float4_text(v as f32)
        } else {
            float_text(v, false)
        };
    }
    // `%.{P}g`: P significant digits, trailing zeros dropped.
    let precision = ((if is_float4 { 6 } else { 15 }) + extra_float_digits).max(1) as usize;
    let rounded = format!("{:.*e}", precision - 1, v);
    let (mantissa, exp) = rounded.split_once('e').unwrap_or((&rounded, "0"));
    let mantissa = if mantissa.contains('.') {
        mantissa.trim_end_matches('0').trim_end_matches('.')
    } else {
        mantissa
    };
    shortest_to_pg(&format!("{mantissa}e{exp}"), precision as i32)
}

fn float4_text(v: f32) -> String {
    if v.is_finite() {
        shortest_to_pg(&format!("{v:e}"), 6)
    } else {
        float_text(f64::from(v), true)
    }
}

/// Rewrites Rust's shortest `{:e}` form (`-2.5e-5`) the way PostgreSQL
/// prints it (`-2.5e-05`, or fixed point for moderate exponents).
fn shortest_to_pg(shortest: &str, fixed_below: i32) -> String {
    let (mantissa, exp) = shortest.split_once('e').unwrap_or((shortest, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let n = digits.len() as i32;
    let mut out = String::from(sign);
    if (-4..fixed_below).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        } else if exp >= n - 1 {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', (exp - (n - 1)) as usize));
        } else {
            out.push_str(&digits[..=exp as usize]);
            out.push('.');
            out.push_str(&digits[exp as usize + 1..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

/// A decimal's unscaled integer text printed with its scale.
pub fn decimal_text(unscaled: &str, scale: i8) -> String {
    let (sign, digits) = match unscaled.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", unscaled),
    };
    if scale <= 0 {
        if digits == "0" {
            return "0".into();
        }
        return format!(
            "{sign}{digits}{}",
            "0".repeat(scale.unsigned_abs() as usize)
        );
    }
    let scale = scale as usize;
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits.to_string()
    };
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

fn bytea_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    out.push_str("\\x");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `YYYY-MM-DD`, with ` BC` for years before 1 (year 0 is 1 BC).
fn ymd(date: NaiveDate) -> (String, bool) {
    let year = date.year();
    let (year, bc) = if year <= 0 {
        (1 - year, true)
    } else {
        (year, false)
    };
    (
        format!("{year:04}-{:02}-{:02}", date.month(), date.day()),
        bc,
    )
}

fn date_text(days: i64) -> String {
    let date = NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|epoch| epoch.checked_add_signed(chrono::Duration::days(days)));
    match date {
        Some(date) => match ymd(date) {
            (text, false) => text,
            (text, true) => format!("{text} BC"),
        },
        None => days.to_string(),
    }
}

/// `HH:MM:SS` plus the fraction without trailing zeros.
fn hms(hours: i64, minutes: i64, seconds: i64, micros: i64) -> String {
    let mut out = format!("{hours:02}:{minutes:02}:{seconds:02}");
    if micros != 0 {
        let frac = format!("{micros:06}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out
}

fn time_text(micros_of_day: i64) -> String {
    // `24:00:00` is a time of day in PostgreSQL, the end of the day.
    let t = if micros_of_day == MICROS_PER_DAY {
        micros_of_day
    } else {
        micros_of_day.rem_euclid(MICROS_PER_DAY)
    };
    let secs = t / MICROS_PER_SECOND;
    hms(
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        t % MICROS_PER_SECOND,
    )
}

/// A timestamp (micros since the epoch); with a zone, in that zone with its
/// UTC offset (`+00`, `-05`, `+05:30`).
fn timestamp_text(micros: i64, tz: Option<&arrow::array::timezone::Tz>) -> Result<String, String> {
    let utc: NaiveDateTime = DateTime::from_timestamp_micros(micros)
        .ok_or_else(|| format!("timestamp out of range: {micros}"))?
        .naive_utc();
    let (local, offset) = match tz {
        None => (utc, None),
        Some(tz) => {
            let offset = tz.offset_from_utc_datetime(&utc).fix().local_minus_utc();
            (
                utc + chrono::Duration::seconds(i64::from(offset)),
                Some(offset),
            )
        }
    };
    let (date, bc) = ymd(local.date());
    let mut out = format!(
        "{date} {}",
        hms(
            i64::from(local.hour()),
            i64::from(local.minute()),
            i64::from(local.second()),
            i64::from(local.nanosecond() / 1000),
        )
    );
    if let Some(offset) = offset {
        let sign = if offset < 0 { '-' } else { '+' };
        let abs = offset.abs();
        let _ = write!(out, "{sign}{:02}", abs / 3600);
        if abs % 3600 != 0 {
            let _ = write!(out, ":{:02}", abs / 60 % 60);
            if abs % 60 != 0 {
                let _ = write!(out, ":{:02}", abs % 60);
            }
        }
    }
    if bc {
        out.push_str(" BC");
    }
    Ok(out)
}

/// `interval_out` in the default `postgres` IntervalStyle:
/// `1 year 2 mons 3 days 04:05:06.5`, `-1 days`, `00:00:00`.
pub fn interval_text(months: i32, days: i32, micros: i64) -> String {
    let mut out = String::new();
    let mut is_zero = true;
    let mut is_before = false;
    let years = months / 12;
    let mons = months % 12;
    for (value, unit) in [
        (i64::from(years), "year"),
        (i64::from(mons), "mon"),
        (i64::from(days), "day"),
    ] {
        if value == 0 {
            continue;
        }
        let _ = write!(
            out,
            "{}{}{value} {unit}{}",
            if is_zero { "" } else { " " },
            if is_before && value > 0 { "+" } else { "" },
            if value != 1 { "s" } else { "" }
        );
        is_before = value < 0;
        is_zero = false;
    }
    if is_zero || micros != 0 {
        let minus = micros < 0;
        let abs = micros.unsigned_abs();
        let secs = abs / MICROS_PER_SECOND as u64;
        let _ = write!(
            out,
            "{}{}",
            if is_zero { "" } else { " " },
            if minus {
                "-"
            } else if is_before {
                "+"
            } else {
                ""
            }
        );
        out.push_str(&hms(
            (secs / 3600) as i64,
            (secs / 60 % 60) as i64,
            (secs % 60) as i64,
            (abs % MICROS_PER_SECOND as u64) as i64,
        ));
    }
    out
}

/// `array_out`: `{1,2,NULL}`, elements quoted when they are empty, spell
/// NULL, or contain braces, commas, quotes, backslashes or white space.
fn array_text(values: &dyn Array, tag: Option<String>, efd: i32) -> Result<String, String> {
    let mut out = String::from("{");
    let nested = matches!(
        values.data_type(),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _)
    );
    for i in 0..values.len() {
        if i > 0 {
            out.push(',');
        }
        if is_null_at(values, i) {
            out.push_str("NULL");
            continue;
        }
        let text = text_of(values, i, tag.as_deref(), efd)?;
        let quote = !nested
            && (text.is_empty()
                || text.eq_ignore_ascii_case("NULL")
                || text.chars().any(|c| {
                    matches!(c, '{' | '}' | ',' | '"' | '\\')
                        || matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
                }));
        if quote {
            out.push('"');
            for c in text.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        } else {
            out.push_str(&text);
        }
    }
    out.push('}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, ListArray, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::Int32Type;

    use super::*;

    #[test]
    fn floats_print_like_postgresql() {
        let cases = [
            (6.0, "6"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e100, "1e+100"),
            (-2.5e-5, "-2.5e-05"),
            (1e15, "1e+15"),
            (123456789012345.0, "123456789012345"),
            (0.0001, "0.0001"),
            (-0.0, "-0"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
        ];
        for (v, text) in cases {
            assert_eq!(float_text(v, false), text, "{v}");
        }
        assert_eq!(float_text_with(0.1 + 0.2, false, 0), "0.3");
        assert_eq!(float_text_with(1e100, false, 0), "1e+100");
        assert_eq!(float_text_with(123456.0, false, 0), "123456");
        assert_eq!(float_text_with(1234567.0, true, 0), "1.23457e+06");
        assert_eq!(float_text_with(2.5, false, -3), "2.5");
        assert_eq!(float4_text(1e10), "1e+10");
        assert_eq!(float4_text(0.1), "0.1");
        assert_eq!(float4_text(123456.0), "123456");
        assert_eq!(float4_text(1234567.0), "1.234567e+06");
    }

    #[test]
    fn decimals_keep_their_scale() {
        assert_eq!(decimal_text("150", 2), "1.50");
        assert_eq!(decimal_text("-5", 3), "-0.005");
        assert_eq!(decimal_text("0", 2), "0.00");
        assert_eq!(decimal_text("12", -2), "1200");
        assert_eq!(decimal_text("-3", 0), "-3");
    }

    #[test]
    fn intervals_use_the_postgres_style() {
        assert_eq!(
            interval_text(14, 3, 4 * 3_600_000_000 + 5 * 60_000_000 + 6_500_000),
            "1 year 2 mons 3 days 04:05:06.5"
        );
        assert_eq!(interval_text(0, -1, 0), "-1 days");
        assert_eq!(interval_text(0, 0, 0), "00:00:00");
        assert_eq!(interval_text(0, 1, 7_200_000_000), "1 day 02:00:00");
        assert_eq!(interval_text(0, 3, 1_000_000), "3 days 00:00:01");
        assert_eq!(interval_text(0, -1, 3_600_000_000), "-1 days +01:00:00");
        assert_eq!(interval_text(0, 0, -90_000_000), "-00:01:30");
    }

    #[test]
    fn timestamps_drop_zero_fractions_and_show_offsets() {
        assert_eq!(
            timestamp_text(1_709_208_000_000_000, None).unwrap(),
            "2024-02-29 12:00:00"
        );
        assert_eq!(
            timestamp_text(1_704_164_645_678_000, None).unwrap(),
            "2024-01-02 03:04:05.678"
        );
        let utc: arrow::array::timezone::Tz = "+00:00".parse().unwrap();
        let kolkata: arrow::array::timezone::Tz = "Asia/Kolkata".parse().unwrap();
        let ny: arrow::array::timezone::Tz = "America/New_York".parse().unwrap();
        let t = 1_704_164_645_000_000; // 2024-01-02 03:04:05 UTC
        assert_eq!(
            timestamp_text(t, Some(&utc)).unwrap(),
            "2024-01-02 03:04:05+00"
        );
        assert_eq!(
            timestamp_text(t, Some(&kolkata)).unwrap(),
            "2024-01-02 08:34:05+05:30"
        );
        assert_eq!(
            timestamp_text(t, Some(&ny)).unwrap(),
            "2024-01-01 22:04:05-05"
        );
        assert_eq!(time_text(7 * 3_600_000_000 + 5 * 60_000_000), "07:05:00");
        assert_eq!(date_text(-719_163), "0001-12-31 BC");
        let array = TimestampMicrosecondArray::from(vec![t]);
        assert_eq!(
            value_text(&array, 0, &Field::new("t", array.data_type().clone(), true)).unwrap(),
            Some("2024-01-02 03:04:05".into())
        );
    }

    #[test]
    fn arrays_quote_like_postgresql() {
        let strings: ArrayRef = Arc::new(StringArray::from(vec![
            Some("x y"),
            Some("z"),
            None,
            Some(""),
            Some("a\"b"),
            Some("null"),
        ]));
        let list = ListArray::new(
            Arc::new(Field::new("item", DataType::Utf8, true)),
            arrow::buffer::OffsetBuffer::from_lengths([6]),
            strings,
            None,
        );
        let field = Field::new("v", list.data_type().clone(), true);
        assert_eq!(
            value_text(&list, 0, &field).unwrap().unwrap(),
            r#"{"x y",z,NULL,"","a\"b","null"}"#
        );
        let ints = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![
            Some(1),
            None,
            Some(3),
        ])]);
        let field = Field::new("v", ints.data_type().clone(), true);
        assert_eq!(value_text(&ints, 0, &field).unwrap().unwrap(), "{1,NULL,3}");
    }
}
