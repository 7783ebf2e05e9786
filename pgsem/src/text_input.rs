//! PostgreSQL text input of values (COPY text/CSV fields, text inserted
//! into typed columns, `'...'::type`): each column arrives as strings and
//! is converted to its Arrow type the way PostgreSQL reads it (`t`/`f`
//! booleans, `\x` hex bytea, `{a,b}` arrays, dates in the session's
//! DateStyle order).

use std::sync::Arc;

use crate::SqlType;
use arrow::array::{
    Array, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Array, ListArray, StringArray,
    Time64MicrosecondArray, TimestampMicrosecondArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::compute::cast_with_options;

use crate::datetime_in::{self, DateTimeContext, DateTimeError};

/// Text that is not a value of its type, with the SQLSTATE to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub sqlstate: &'static str,
    pub message: String,
}

impl From<String> for InputError {
    fn from(message: String) -> Self {
        Self {
            sqlstate: "22P02",
            message,
        }
    }
}

impl From<DateTimeError> for InputError {
    fn from(e: DateTimeError) -> Self {
        Self {
            sqlstate: e.sqlstate,
            message: e.message,
        }
    }
}

impl InputError {
    /// As an error whose message starts with `context` (the column).
    pub fn in_context(self, context: impl std::fmt::Display) -> crate::PgsemError {
        crate::PgsemError::Value {
            sqlstate: self.sqlstate,
            message: format!("{context}: {}", self.message),
        }
    }
}

/// Whether text for `sql_type` must go through [`parse_column`] rather
/// than Arrow's cast, which reads it differently from PostgreSQL.
pub fn needs_text_input(sql_type: &SqlType) -> bool {
    use SqlType as S;
    matches!(
        sql_type,
        S::Bytea
            | S::Array(_)
            | S::Uuid
            | S::Json
            | S::Jsonb
            | S::Interval
            | S::Date
            | S::Time
            | S::Timestamp
            | S::Timestamptz
    )
}

/// Converts text values (NULL stays NULL) to the Arrow type of `sql_type`;
/// dates and times are read with the session's `datetime` settings.
pub fn parse_column(
    text: &StringArray,
    sql_type: &SqlType,
    datetime: &DateTimeContext,
) -> Result<ArrayRef, InputError> {
    let read_each = |read: fn(&str, &DateTimeContext) -> Result<i64, DateTimeError>| {
        text.iter()
            .map(|v| v.map(|v| read(v.trim(), datetime)).transpose())
            .collect::<Result<Vec<_>, _>>()
    };
    match sql_type {
        SqlType::Date => {
            let days = text
                .iter()
                .map(|v| {
                    v.map(|v| {
                        datetime_in::read_date(v.trim(), datetime)
                            .map(|d| (d - chrono::NaiveDate::default()).num_days() as i32)
                    })
                    .transpose()
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(Date32Array::from(days)))
        }
        SqlType::Time => Ok(Arc::new(Time64MicrosecondArray::from(read_each(
            datetime_in::read_time,
        )?))),
        SqlType::Timestamp => Ok(Arc::new(TimestampMicrosecondArray::from(read_each(
            datetime_in::read_timestamp,
        )?))),
        SqlType::Timestamptz => Ok(Arc::new(
            TimestampMicrosecondArray::from(read_each(datetime_in::read_timestamptz)?)
                .with_timezone("+00:00"),
        )),
        SqlType::Bool => {
            let mut out = BooleanBuilder::with_capacity(text.len());
            for value in text.iter() {
                out.append_option(value.map(parse_bool).transpose()?);
            }
            Ok(Arc::new(out.finish()))
        }
        SqlType::Bytea => {
            let mut out = BinaryBuilder::with_capacity(text.len(), 0);
            for value in text.iter() {
                match value {
                    Some(v) => out.append_value(parse_bytea(v)?),
                    None => out.append_null(),
                }
            }
            Ok(Arc::new(out.finish()))
        }
        SqlType::Array(element) => {
            let mut offsets = vec![0i32];
            let mut items: Vec<Option<String>> = Vec::new();
            let mut validity = Vec::with_capacity(text.len());
            for value in text.iter() {
                match value {
                    Some(v) => {
                        items.extend(parse_array_literal(v)?);
                        validity.push(true);
                    }
                    None => validity.push(false),
                }
                offsets.push(items.len() as i32);
            }
            let values = parse_column(&StringArray::from(items), element, datetime)?;
            let field = Arc::new(element.field("item", true));
            Ok(Arc::new(
                ListArray::try_new(
                    field,
                    OffsetBuffer::new(offsets.into()),
                    values,
                    Some(validity.into()),
                )
                .map_err(|e| e.to_string())?,
            ))
        }
        SqlType::Uuid => {
            // Stored in PostgreSQL's output form: lower case, hyphenated.
            let normalized = text
                .iter()
                .map(|v| {
                    v.map(|v| {
                        uuid::Uuid::parse_str(v.trim())
                            .map(|u| u.hyphenated().to_string())
                            .map_err(|_| format!("invalid input syntax for type uuid: \"{v}\""))
                    })
                    .transpose()
                })
                .collect::<Result<StringArray, String>>()?;
            Ok(Arc::new(normalized))
        }
        SqlType::Interval => {
            let values = text
                .iter()
                .map(|v| {
                    v.map(|v| {
                        crate::parse_interval(v).map(|i| {
                            arrow::datatypes::IntervalMonthDayNano::new(
                                i.months,
                                i.days,
                                i.micros.saturating_mul(1000),
                            )
                        })
                    })
                    .transpose()
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Arc::new(arrow::array::IntervalMonthDayNanoArray::from(
                values,
            )))
        }
        SqlType::Json => {
            for value in text.iter().flatten() {
                crate::json::validate_json(value)?;
            }
            Ok(Arc::new(text.clone()))
        }
        SqlType::Jsonb => {
            let normalized = text
                .iter()
                .map(|v| v.map(crate::json::normalize_jsonb).transpose())
                .collect::<Result<StringArray, String>>()?;
            Ok(Arc::new(normalized))
        }
        other => {
            let options = arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            };
            cast_with_options(text, &other.arrow_type(), &options)
                .map_err(|e| format!("invalid input for type {}: {e}", other.display_name()).into())
        }
    }
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "on" | "1" => Ok(true),
        "f" | "false" | "n" | "no" | "off" | "0" => Ok(false),
        _ => Err(format!("invalid input syntax for type boolean: \"{v}\"")),
    }
}

fn parse_bytea(v: &str) -> Result<Vec<u8>, String> {
    match v.strip_prefix("\\x") {
        Some(hex) => (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("invalid hexadecimal data in bytea: \"{v}\""))
            })
            .collect(),
        // The escape format: bytes as-is except backslash escapes.
        None => {
            let bytes = v.as_bytes();
            let mut out = Vec::with_capacity(bytes.len());
            let mut i = 0;
            while i < bytes.len() {
                if bytes[i] == b'\\' {
                    if bytes.get(i + 1) == Some(&b'\\') {
                        out.push(b'\\');
                        i += 2;
                    } else {
                        let octal = v
                            .get(i + 1..i + 4)
                            .and_then(|o| u8::from_str_radix(o, 8).ok());
                        out.push(octal.ok_or_else(|| {
                            format!("invalid input syntax for type bytea: \"{v}\"")
                        })?);
                        i += 4;
                    }
                } else {
                    out.push(bytes[i]);
                    i += 1;
                }
            }
            Ok(out)
        }
    }
}

pub use crate::array_literal::parse_array_literal;

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BinaryArray, Int32Array};

    #[test]
    fn arrays_bytea_and_booleans() {
        let ctx = DateTimeContext::default();
        assert_eq!(
            parse_array_literal("{1, \"a,b\" ,NULL}").unwrap(),
            vec![Some("1".into()), Some("a,b".into()), None]
        );
        let list = parse_column(
            &StringArray::from(vec![Some("{1,2}"), None]),
            &SqlType::Array(Box::new(SqlType::Int4)),
            &ctx,
        )
        .unwrap();
        let list = list.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!(
            list.value(0)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap()
                .values(),
            &[1, 2]
        );
        assert!(list.is_null(1));
        let bytes =
            parse_column(&StringArray::from(vec!["\\x00ff"]), &SqlType::Bytea, &ctx).unwrap();
        assert_eq!(
            bytes
                .as_any()
                .downcast_ref::<BinaryArray>()
                .unwrap()
                .value(0),
            &[0, 255]
        );
        assert!(parse_column(&StringArray::from(vec!["maybe"]), &SqlType::Bool, &ctx).is_err());
        assert!(parse_column(&StringArray::from(vec!["12x"]), &SqlType::Int4, &ctx).is_err());
    }
}
