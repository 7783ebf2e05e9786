//! `to_char(date/timestamp, text)` with PostgreSQL's template patterns.
//!
//! DataFusion's `to_char` reads chrono's `%Y-%m-%d` patterns, so
//! PostgreSQL's `'YYYY-MM-DD'` came back as the pattern itself. This one
//! reads PostgreSQL's: `YYYY YY MM DD DDD D HH24 HH12 HH MI SS MS US AM PM
//! am pm Month MONTH month Mon MON mon Day DAY day Dy DY dy Q`, the `FM`
//! prefix (no padding), `"quoted text"` and `\` escapes; anything else is
//! copied. A timestamptz is formatted in the session's TimeZone.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{Datelike, NaiveDateTime, Timelike};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToChar {
    signature: Signature,
    aliases: Vec<String>,
}

impl ToChar {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(ToChar {
            signature: Signature::any(2, Volatility::Immutable),
            // DataFusion's to_char also answers to `date_format`. Taking that
            // name too leaves no registry entry pointing at DataFusion's,
            // which a session state rebuilt from the registry's values
            // would otherwise register again, over this one.
            aliases: vec!["date_format".to_string()],
        })
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A name in the case its pattern is spelled in (`Month`, `MONTH`, `month`).
fn cased(name: &str, pattern: &str) -> String {
    if pattern.chars().all(|c| c.is_ascii_uppercase()) {
        name.to_ascii_uppercase()
    } else if pattern.chars().all(|c| c.is_ascii_lowercase()) {
        name.to_ascii_lowercase()
    } else {
        name.to_string()
    }
}

/// Renders `t` with the PostgreSQL template `format`.
pub fn render(t: &NaiveDateTime, format: &str) -> String {
    const PATTERNS: [&str; 30] = [
        "HH24", "HH12", "YYYY", "MONTH", "Month", "month", "HH", "MI", "SS", "MS", "US", "AM",
        "PM", "am", "pm", "YY", "MON", "Mon", "mon", "MM", "DAY", "Day", "day", "DDD", "DY", "Dy",
        "dy", "DD", "D", "Q",
    ];
    let mut out = String::with_capacity(format.len() + 8);
    let mut rest = format;
    while !rest.is_empty() {
        let fill = !rest.starts_with("FM");
        let body = if fill { rest } else { &rest[2..] };
        let Some(pattern) = PATTERNS.iter().find(|p| body.starts_with(**p)) else {
            let mut chars = rest.chars();
            match chars.next() {
                Some('"') => {
                    let quoted = chars.as_str();
                    let end = quoted.find('"').unwrap_or(quoted.len());
                    out.push_str(&quoted[..end]);
                    rest = quoted.get(end + 1..).unwrap_or("");
                }
                Some('\\') => {
                    if let Some(c) = chars.next() {
                        out.push(c);
                    }
                    rest = chars.as_str();
                }
                Some(c) => {
                    out.push(c);
                    rest = chars.as_str();
                }
                None => break,
            }
            continue;
        };
        let number = |n: u32, width: usize| {
            if fill {
                format!("{n:0width$}")
            } else {
                n.to_string()
            }
        };
        let name = |n: &str, width: usize| {
            let n = cased(n, pattern);
            if fill { format!("{n:width$}") } else { n }
        };
        let hour12 = match t.hour() % 12 {
            0 => 12,
            h => h,
        };
        let month = MONTHS[t.month0() as usize];
        let day = DAYS[t.weekday().num_days_from_sunday() as usize];
        let text = match *pattern {
            "HH24" => number(t.hour(), 2),
            "HH12" | "HH" => number(hour12, 2),
            "MI" => number(t.minute(), 2),
            "SS" => number(t.second(), 2),
            "MS" => number(t.nanosecond() / 1_000_000 % 1000, 3),
            "US" => number(t.nanosecond() / 1000 % 1_000_000, 6),
            "AM" | "PM" => (if t.hour() < 12 { "AM" } else { "PM" }).to_string(),
            "am" | "pm" => (if t.hour() < 12 { "am" } else { "pm" }).to_string(),
            "YYYY" => number(t.year().unsigned_abs(), 4),
            "YY" => number(t.year().unsigned_abs() % 100, 2),
            "MONTH" | "Month" | "month" => name(month, 9),
            "MON" | "Mon" | "mon" => name(&month[..3], 3),
            "MM" => number(t.month(), 2),
            "DAY" | "Day" | "day" => name(day, 9),
            "DY" | "Dy" | "dy" => name(&day[..3], 3),
            "DDD" => number(t.ordinal(), 3),
            "DD" => number(t.day(), 2),
            "D" => number(t.weekday().number_from_sunday(), 1),
            _ => number(t.month0() / 3 + 1, 1), // Q
        };
        out.push_str(&text);
        rest = &body[pattern.len()..];
    }
    out
}

/// The date-times of a date or timestamp array (`None` for NULLs); a
/// timestamptz is shown as local time in `session_zone`, as PostgreSQL
/// formats it in the session's TimeZone.
fn date_times(values: &ArrayRef, session_zone: &str) -> Result<Vec<Option<NaiveDateTime>>> {
    let zone = match values.data_type() {
        DataType::Timestamp(_, Some(_)) => Some(
            session_zone
                .parse::<arrow::array::timezone::Tz>()
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?,
        ),
        _ => None,
    };
    let micros = match values.data_type() {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => {
            arrow::compute::cast(values, &DataType::Timestamp(TimeUnit::Microsecond, None))?
        }
        other => return exec_err!("to_char takes a date or timestamp, got {other}"),
    };
    let micros = micros.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    Ok((0..micros.len())
        .map(|i| {
            micros
                .is_valid(i)
                .then(|| chrono::DateTime::from_timestamp_micros(micros.value(i)))
                .flatten()
                .map(|d| match &zone {
                    Some(tz) => d.with_timezone(tz).naive_local(),
                    None => d.naive_utc(),
                })
        })
        .collect())
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        "to_char"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let zone = args.config_options.execution.time_zone.as_deref();
        let values = date_times(&arrays[0], zone.unwrap_or("+00:00"))?;
        let formats = arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let formats = formats.as_string::<i32>();
        let out: StringArray = values
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                Some(t) if formats.is_valid(i) => Some(render(t, formats.value(i))),
                _ => None,
            })
            .collect();
        crate::udfs::shaped_like(&args.args, Arc::new(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgresql_patterns() {
        let t = chrono::NaiveDate::from_ymd_opt(2024, 3, 5)
            .unwrap()
            .and_hms_micro_opt(15, 4, 9, 123_456)
            .unwrap();
        assert_eq!(render(&t, "YYYY-MM-DD HH24:MI:SS"), "2024-03-05 15:04:09");
        assert_eq!(render(&t, "HH12:MI AM, MS US"), "03:04 PM, 123 123456");
        assert_eq!(
            render(&t, "Day, DD Month YYYY"),
            "Tuesday  , 05 March     2024"
        );
        assert_eq!(render(&t, "FMDay, FMDD FMMonth"), "Tuesday, 5 March");
        assert_eq!(render(&t, "DY mon \"Q\"Q DDD"), "TUE mar Q1 065");
    }
}
