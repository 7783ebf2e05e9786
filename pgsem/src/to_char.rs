//! `to_char(date/timestamp, text)` with PostgreSQL's template patterns.
//!
//! DataFusion's `to_char` reads chrono's `%Y-%m-%d` patterns, so
//! PostgreSQL's `'YYYY-MM-DD'` came back as the pattern itself. This one
//! reads PostgreSQL's: `YYYY YYY YY Y MM DD DDD D HH24 HH12 HH MI SS MS US
//! AM PM Month MONTH Mon MON Day DAY Dy DY Q`, each also in lower case
//! (`yyyy-mm-dd` is `YYYY-MM-DD`, and `month` is the lower-case name), the
//! `FM`/`fm` prefix (no padding), `"quoted text"` and `\` escapes; anything
//! else is copied. As in PostgreSQL a keyword matches only spelled in one
//! case (or capitalised, for names): `Mm` is copied, and `HH:mm` is the
//! hour and the month. A timestamptz is formatted in the session's
//! TimeZone.
//!
//! A template is read once per call ([`Template`]), and a row whose value
//! falls in the same day (hour, minute, ...) as the row before it, at the
//! finest unit the template shows, reuses that row's text: a stream's
//! timestamps arrive close together, and `to_char(t, 'YYYY-MM-DD')` over
//! a batch is then one rendering per day.

use std::fmt::Write;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{Datelike, NaiveDateTime, Timelike};
use datafusion::common::{Result, ScalarValue, exec_err};
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

/// What a keyword shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Hour24,
    Hour12,
    Minute,
    Second,
    Milli,
    Micro,
    Meridiem,
    Year4,
    Year3,
    Year2,
    Year1,
    MonthName,
    MonthAbbrev,
    Month,
    DayName,
    DayAbbrev,
    DayOfYear,
    DayOfMonth,
    DayOfWeek,
    Quarter,
}

/// How a keyword was spelled, which is how its names are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Upper,
    Lower,
    Title,
}

/// The keywords in the order they are tried: each before any shorter one
/// it starts with (`DDD` before `DD` before `D`).
const KEYWORDS: &[(&str, Field, Case)] = {
    use Case::*;
    use Field::*;
    &[
        ("HH24", Hour24, Upper),
        ("hh24", Hour24, Lower),
        ("HH12", Hour12, Upper),
        ("hh12", Hour12, Lower),
        ("HH", Hour12, Upper),
        ("hh", Hour12, Lower),
        ("MI", Minute, Upper),
        ("mi", Minute, Lower),
        ("SS", Second, Upper),
        ("ss", Second, Lower),
        ("MS", Milli, Upper),
        ("ms", Milli, Lower),
        ("US", Micro, Upper),
        ("us", Micro, Lower),
        ("AM", Meridiem, Upper),
        ("PM", Meridiem, Upper),
        ("am", Meridiem, Lower),
        ("pm", Meridiem, Lower),
        ("YYYY", Year4, Upper),
        ("yyyy", Year4, Lower),
        ("YYY", Year3, Upper),
        ("yyy", Year3, Lower),
        ("YY", Year2, Upper),
        ("yy", Year2, Lower),
        ("Y", Year1, Upper),
        ("y", Year1, Lower),
        ("MONTH", MonthName, Upper),
        ("Month", MonthName, Title),
        ("month", MonthName, Lower),
        ("MON", MonthAbbrev, Upper),
        ("Mon", MonthAbbrev, Title),
        ("mon", MonthAbbrev, Lower),
        ("MM", Month, Upper),
        ("mm", Month, Lower),
        ("DAY", DayName, Upper),
        ("Day", DayName, Title),
        ("day", DayName, Lower),
        ("DDD", DayOfYear, Upper),
        ("ddd", DayOfYear, Lower),
        ("DD", DayOfMonth, Upper),
        ("dd", DayOfMonth, Lower),
        ("DY", DayAbbrev, Upper),
        ("Dy", DayAbbrev, Title),
        ("dy", DayAbbrev, Lower),
        ("D", DayOfWeek, Upper),
        ("d", DayOfWeek, Lower),
        ("Q", Quarter, Upper),
        ("q", Quarter, Lower),
    ]
};

const MICROS_PER_DAY: i64 = 86_400_000_000;

impl Field {
    /// The span of time within which the field's text does not change, in
    /// microseconds (each divides a day, so spans start at midnight).
    fn unit_micros(self) -> i64 {
        match self {
            Self::Micro => 1,
            Self::Milli => 1_000,
            Self::Second => 1_000_000,
            Self::Minute => 60_000_000,
            Self::Hour24 | Self::Hour12 | Self::Meridiem => 3_600_000_000,
            _ => MICROS_PER_DAY,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field {
        field: Field,
        case: Case,
        fill: bool,
    },
}

/// A PostgreSQL template read once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Template {
    pieces: Vec<Piece>,
    /// Two date-times in the same span of this many microseconds (from
    /// midnight) show the same text: the finest field's unit.
    unit_micros: i64,
}

impl Template {
    fn parse(format: &str) -> Self {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = format;
        while !rest.is_empty() {
            let fill = !(rest.starts_with("FM") || rest.starts_with("fm"));
            let body = if fill { rest } else { &rest[2..] };
            if let Some(&(keyword, field, case)) = KEYWORDS.iter().find(|k| body.starts_with(k.0)) {
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Field { field, case, fill });
                rest = &body[keyword.len()..];
                continue;
            }
            // A backslash escapes only a double quote, in quoted text or
            // out of it; otherwise it is copied.
            let mut chars = rest.chars();
            match chars.next() {
                Some('"') => loop {
                    match chars.next() {
                        None | Some('"') => break,
                        Some('\\') if chars.as_str().starts_with('"') => {
                            chars.next();
                            text.push('"');
                        }
                        Some(c) => text.push(c),
                    }
                },
                Some('\\') if chars.as_str().starts_with('"') => {
                    chars.next();
                    text.push('"');
                }
                Some(c) => text.push(c),
                None => break,
            }
            rest = chars.as_str();
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        let unit_micros = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Field { field, .. } => Some(field.unit_micros()),
                Piece::Text(_) => None,
            })
            .min()
            .unwrap_or(MICROS_PER_DAY);
        Self {
            pieces,
            unit_micros,
        }
    }

    /// Appends `t` shown with this template to `out`.
    fn render_into(&self, t: &NaiveDateTime, out: &mut String) {
        for piece in &self.pieces {
            let (field, case, fill) = match piece {
                Piece::Text(text) => {
                    out.push_str(text);
                    continue;
                }
                Piece::Field { field, case, fill } => (*field, *case, *fill),
            };
            let year = t.year().unsigned_abs();
            let number = match field {
                Field::Hour24 => Some((t.hour(), 2)),
                Field::Hour12 => Some(((t.hour() + 11) % 12 + 1, 2)),
                Field::Minute => Some((t.minute(), 2)),
                Field::Second => Some((t.second(), 2)),
                Field::Milli => Some((t.nanosecond() / 1_000_000 % 1000, 3)),
                Field::Micro => Some((t.nanosecond() / 1000 % 1_000_000, 6)),
                Field::Year4 => Some((year, 4)),
                Field::Year3 => Some((year % 1000, 3)),
                Field::Year2 => Some((year % 100, 2)),
                Field::Year1 => Some((year % 10, 1)),
                Field::Month => Some((t.month(), 2)),
                Field::DayOfYear => Some((t.ordinal(), 3)),
                Field::DayOfMonth => Some((t.day(), 2)),
                Field::DayOfWeek => Some((t.weekday().number_from_sunday(), 1)),
                Field::Quarter => Some((t.month0() / 3 + 1, 1)),
                _ => None,
            };
            if let Some((n, width)) = number {
                // Writing to a String cannot fail.
                let _ = if fill {
                    write!(out, "{n:0width$}")
                } else {
                    write!(out, "{n}")
                };
                continue;
            }
            let (name, width): (&str, usize) = match field {
                Field::Meridiem => (if t.hour() < 12 { "AM" } else { "PM" }, 2),
                Field::MonthName => (MONTHS[t.month0() as usize], 9),
                Field::MonthAbbrev => (&MONTHS[t.month0() as usize][..3], 3),
                Field::DayName => (DAYS[t.weekday().num_days_from_sunday() as usize], 9),
                _ => (&DAYS[t.weekday().num_days_from_sunday() as usize][..3], 3),
            };
            let start = out.len();
            match case {
                Case::Upper => out.extend(name.chars().map(|c| c.to_ascii_uppercase())),
                Case::Lower => out.extend(name.chars().map(|c| c.to_ascii_lowercase())),
                Case::Title => out.push_str(name),
            }
            if fill {
                let shown = out.len() - start;
                out.extend(std::iter::repeat_n(' ', width.saturating_sub(shown)));
            }
        }
    }
}

/// Renders `t` with the PostgreSQL template `format`.
#[cfg(test)]
fn render(t: &NaiveDateTime, format: &str) -> String {
    let mut out = String::new();
    Template::parse(format).render_into(t, &mut out);
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

/// The template argument: one for every row (a constant, the usual case),
/// or one per row.
enum Templates {
    One(Option<Template>),
    PerRow(arrow::array::StringArray),
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
        let rows = args
            .args
            .iter()
            .find_map(|a| match a {
                ColumnarValue::Array(a) => Some(a.len()),
                ColumnarValue::Scalar(_) => None,
            })
            .unwrap_or(1);
        let zone = args.config_options.execution.time_zone.as_deref();
        let values = date_times(&args.args[0].to_array(rows)?, zone.unwrap_or("+00:00"))?;
        let templates = match &args.args[1] {
            ColumnarValue::Scalar(format) => {
                let format = format.cast_to(&DataType::Utf8)?;
                Templates::One(match format {
                    ScalarValue::Utf8(Some(f)) => Some(Template::parse(&f)),
                    _ => None,
                })
            }
            ColumnarValue::Array(formats) => Templates::PerRow(
                arrow::compute::cast(formats, &DataType::Utf8)?
                    .as_string::<i32>()
                    .clone(),
            ),
        };
        let mut out = StringBuilder::with_capacity(values.len(), values.len() * 10);
        let mut text = String::new();
        // The span (in the template's unit) `text` shows, when it came from
        // the one template.
        let mut shown: Option<i64> = None;
        for (i, t) in values.iter().enumerate() {
            let Some(t) = t else {
                out.append_null();
                continue;
            };
            match &templates {
                Templates::One(None) => out.append_null(),
                Templates::One(Some(template)) => {
                    let span = t
                        .and_utc()
                        .timestamp_micros()
                        .div_euclid(template.unit_micros);
                    if shown != Some(span) {
                        text.clear();
                        template.render_into(t, &mut text);
                        shown = Some(span);
                    }
                    out.append_value(&text);
                }
                Templates::PerRow(formats) if formats.is_valid(i) => {
                    text.clear();
                    Template::parse(formats.value(i)).render_into(t, &mut text);
                    out.append_value(&text);
                }
                Templates::PerRow(..) => out.append_null(),
            }
        }
        crate::udfs::shaped_like(&args.args, Arc::new(out.finish()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, TimestampMicrosecondArray};
    use datafusion::config::ConfigOptions;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap()
    }

    #[test]
    fn postgresql_patterns() {
        let t = at("2024-03-05 15:04:09.123456");
        assert_eq!(render(&t, "YYYY-MM-DD HH24:MI:SS"), "2024-03-05 15:04:09");
        assert_eq!(render(&t, "HH12:MI AM, MS US"), "03:04 PM, 123 123456");
        assert_eq!(
            render(&t, "Day, DD Month YYYY"),
            "Tuesday  , 05 March     2024"
        );
        assert_eq!(render(&t, "FMDay, FMDD FMMonth"), "Tuesday, 5 March");
        assert_eq!(render(&t, "DY mon \"Q\"Q DDD"), "TUE mar Q1 065");
    }

    /// Each expected text is what PostgreSQL 15 printed for the same
    /// timestamp and template.
    #[test]
    fn lower_case_keywords_and_escapes_read_as_postgresql_reads_them() {
        let cases = [
            ("2024-03-05 15:04:09.123456", "HH:mm", "03:03"),
            ("1969-12-31 23:59:59.5", "HH:mm", "11:12"),
            ("2024-12-29 00:00:00", "HH:mm", "12:12"),
            (
                "1969-12-31 23:59:59.5",
                "yyyy-mm-dd hh24:mi:ss.us",
                "1969-12-31 23:59:59.500000",
            ),
            ("2024-03-05 15:04:09", "Yyyy-Mm-Dd", "4024-Mm-33"),
            ("1969-12-31 23:59:59.5", "Yyyy-Mm-Dd", "9969-Mm-44"),
            ("2024-03-05 15:04:09", "FMyyyy fmmm fmdd", "2024 3 5"),
            (
                "1969-12-31 23:59:59",
                "mon Mon MON month Dy dy Day",
                "dec Dec DEC december  Wed wed Wednesday",
            ),
            (
                "2024-12-29 00:00:00",
                "am pm AM q ddd d Ss",
                "am am AM 4 364 1 Ss",
            ),
            (
                "1969-12-31 23:59:59",
                "HH12 hh y yy yyy \"mm\" \\\\HH",
                "11 11 9 69 969 mm \\\\11",
            ),
            ("2024-03-05 15:04:09", "FMMonth-FMDay|", "March-Tuesday|"),
            ("2024-03-05 15:04:09", "a\\\"b", "a\"b"),
            ("2024-03-05 15:04:09", "\\HH", "\\03"),
            ("2024-03-05 15:04:09", "\"a\\\"b\"YY", "a\"b24"),
            ("2024-03-05 15:04:09", "\"abc", "abc"),
        ];
        for (t, format, expected) in cases {
            assert_eq!(render(&at(t), format), expected, "{t} with {format:?}");
        }
    }

    fn call(times: Vec<Option<i64>>, format: ColumnarValue) -> Vec<Option<String>> {
        let times = TimestampMicrosecondArray::from(times);
        let rows = times.len();
        let args = ScalarFunctionArgs {
            args: vec![ColumnarValue::Array(Arc::new(times)), format],
            arg_fields: vec![],
            number_rows: rows,
            return_field: Arc::new(arrow::datatypes::Field::new("t", DataType::Utf8, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        let out = ToChar::udf().invoke_with_args(args).unwrap();
        let ColumnarValue::Array(out) = out else {
            panic!("an array")
        };
        out.as_string::<i32>()
            .iter()
            .map(|s| s.map(str::to_string))
            .collect()
    }

    /// Rows in one span of the template's finest unit share a rendering:
    /// every row of a batch crossing days, hours, seconds and 1970 (where
    /// spans of negative times must still start at midnight) equals its
    /// own rendering.
    #[test]
    fn a_batch_equals_each_row_rendered_alone() {
        let start = at("1969-12-30 22:58:58.999").and_utc().timestamp_micros();
        let times: Vec<Option<i64>> = (0..4000)
            .map(|i: i64| (i % 97 != 0).then_some(start + i * i * 7_919_113))
            .collect();
        for format in [
            "YYYY-MM-DD",
            "HH:mm",
            "HH24:MI",
            "DD HH24:MI:SS",
            "SS.MS",
            "US",
            "Q",
        ] {
            let out = call(
                times.clone(),
                ColumnarValue::Scalar(ScalarValue::from(format)),
            );
            for (t, text) in times.iter().zip(&out) {
                let alone = t.map(|t| {
                    render(
                        &chrono::DateTime::from_timestamp_micros(t)
                            .unwrap()
                            .naive_utc(),
                        format,
                    )
                });
                assert_eq!(text, &alone, "{format}");
            }
        }
        let formats = StringArray::from_iter((0..4000).map(|i| match i % 3 {
            0 => Some("YYYY"),
            1 => Some("MI"),
            _ => None,
        }));
        let out = call(
            times.clone(),
            ColumnarValue::Array(Arc::new(formats.clone())),
        );
        for ((t, format), text) in times.iter().zip(&formats).zip(&out) {
            let alone = t.zip(format).map(|(t, format)| {
                render(
                    &chrono::DateTime::from_timestamp_micros(t)
                        .unwrap()
                        .naive_utc(),
                    format,
                )
            });
            assert_eq!(text, &alone);
        }
        let null_format = call(times, ColumnarValue::Scalar(ScalarValue::Utf8(None)));
        assert!(null_format.iter().all(Option::is_none));
    }
}
