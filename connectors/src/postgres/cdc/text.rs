//! PostgreSQL column types as Arrow fields, and PostgreSQL's text format
//! (what a snapshot's simple query and the pgoutput stream both carry) as
//! Arrow columns.
//!
//! Both sessions are opened with `TimeZone=UTC`, `DateStyle=ISO` and
//! `bytea_output=hex`, so one parser serves both.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, StringArray, TimestampMicrosecondBuilder,
};
use arrow::compute::CastOptions;
use arrow::datatypes::{DataType, Field, TimeUnit};
use arrow::util::display::FormatOptions;

/// The field metadata key that keeps a PostgreSQL type Arrow's `Utf8`
/// alone would lose (the server's `weir_pgsem::PG_TYPE_METADATA_KEY`).
const PG_TYPE_KEY: &str = "weir.pg_type";
/// The precision and scale Weir gives a `numeric` without a modifier.
const DEFAULT_NUMERIC: (u8, i8) = (38, 10);

/// The Arrow field Weir uses for a PostgreSQL column of type `oid` with
/// modifier `typmod`, or None when Weir cannot carry that type yet.
pub(crate) fn field_of(name: &str, oid: u32, typmod: i32, nullable: bool) -> Option<Field> {
    let tagged = |tag: &str| {
        Field::new(name, DataType::Utf8, nullable)
            .with_metadata(HashMap::from([(PG_TYPE_KEY.to_string(), tag.to_string())]))
    };
    let plain = |data_type: DataType| Field::new(name, data_type, nullable);
    Some(match oid {
        16 => plain(DataType::Boolean),
        21 => plain(DataType::Int16),
        23 => plain(DataType::Int32),
        20 => plain(DataType::Int64),
        700 => plain(DataType::Float32),
        701 => plain(DataType::Float64),
        1700 => {
            let (p, s) = if typmod < 4 {
                DEFAULT_NUMERIC
            } else {
                let m = typmod - 4;
                (((m >> 16) & 0xffff) as u8, (m & 0xffff) as i8)
            };
            if p == 0 || p > 38 {
                return None;
            }
            plain(DataType::Decimal128(p, s))
        }
        25 | 1042 | 19 => plain(DataType::Utf8),
        1043 => tagged("varchar"),
        2950 => tagged("uuid"),
        114 => tagged("json"),
        3802 => tagged("jsonb"),
        17 => plain(DataType::Binary),
        1082 => plain(DataType::Date32),
        1083 => plain(DataType::Time64(TimeUnit::Microsecond)),
        1114 => plain(DataType::Timestamp(TimeUnit::Microsecond, None)),
        1184 => plain(DataType::Timestamp(
            TimeUnit::Microsecond,
            Some("+00:00".into()),
        )),
        _ => return None,
    })
}

/// Why a value did not parse: the value's text and what it should be.
#[derive(Debug)]
pub(crate) struct ParseError(pub String);

fn bad(text: &[u8], data_type: &DataType) -> ParseError {
    ParseError(format!(
        "\"{}\" is not a valid {data_type}",
        String::from_utf8_lossy(text)
    ))
}

fn utf8<'a>(text: &'a [u8], data_type: &DataType) -> Result<&'a str, ParseError> {
    std::str::from_utf8(text).map_err(|_| bad(text, data_type))
}

/// One column of `values` (PostgreSQL text, None for NULL) as `data_type`.
pub(crate) fn column(
    values: &[Option<&[u8]>],
    data_type: &DataType,
) -> Result<ArrayRef, ParseError> {
    macro_rules! parsed {
        ($builder:ty, $parse:expr) => {{
            let mut b = <$builder>::with_capacity(values.len());
            for v in values {
                match v {
                    None => b.append_null(),
                    Some(text) => b.append_value($parse(*text)?),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    fn number<T: std::str::FromStr>(text: &[u8], data_type: &DataType) -> Result<T, ParseError> {
        utf8(text, data_type)?
            .parse::<T>()
            .map_err(|_| bad(text, data_type))
    }
    Ok(match data_type {
        DataType::Boolean => parsed!(BooleanBuilder, |t: &[u8]| match t {
            b"t" => Ok(true),
            b"f" => Ok(false),
            _ => Err(bad(t, data_type)),
        }),
        DataType::Int16 => parsed!(Int16Builder, |t| number::<i16>(t, data_type)),
        DataType::Int32 => parsed!(Int32Builder, |t| number::<i32>(t, data_type)),
        DataType::Int64 => parsed!(Int64Builder, |t| number::<i64>(t, data_type)),
        DataType::Float32 => parsed!(Float32Builder, |t| number::<f32>(t, data_type)),
        DataType::Float64 => parsed!(Float64Builder, |t| number::<f64>(t, data_type)),
        DataType::Binary => {
            let mut b = BinaryBuilder::with_capacity(values.len(), 0);
            for v in values {
                match v {
                    None => b.append_null(),
                    Some(text) => {
                        b.append_value(hex_bytea(text).ok_or_else(|| bad(text, data_type))?)
                    }
                }
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) => {
            let mut b = TimestampMicrosecondBuilder::with_capacity(values.len());
            for v in values {
                match v {
                    None => b.append_null(),
                    Some(text) => {
                        let s = utf8(text, data_type)?;
                        let at = chrono::DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%#z")
                            .map_err(|_| bad(text, data_type))?;
                        b.append_value(at.timestamp_micros());
                    }
                }
            }
            Arc::new(b.finish().with_timezone(tz.clone()))
        }
        // Text as is; the rest through Arrow's own parsers, which read
        // PostgreSQL's ISO dates, times, timestamps and numerics.
        _ => {
            let strings = values
                .iter()
                .map(|v| v.map(|t| utf8(t, data_type)).transpose())
                .collect::<Result<StringArray, _>>()?;
            if data_type == &DataType::Utf8 {
                return Ok(Arc::new(strings));
            }
            let options = CastOptions {
                safe: false,
                format_options: FormatOptions::default(),
            };
            arrow::compute::cast_with_options(&strings, data_type, &options)
                .map_err(|e| ParseError(format!("a value is not a valid {data_type}: {e}")))?
        }
    })
}

/// `\x0a1b...` (bytea_output = hex) as bytes.
fn hex_bytea(text: &[u8]) -> Option<Vec<u8>> {
    let digits = text.strip_prefix(b"\\x")?;
    if digits.len() % 2 != 0 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    digits
        .chunks(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Decimal128Type, Int64Type, TimestampMicrosecondType};

    #[test]
    fn postgres_text_parses_as_the_mapped_types() {
        let ints = column(&[Some(b"42"), None, Some(b"-7")], &DataType::Int64).unwrap();
        let ints = ints.as_primitive::<Int64Type>();
        assert_eq!(
            (ints.value(0), ints.is_null(1), ints.value(2)),
            (42, true, -7)
        );

        let field = field_of("amount", 1700, (10 << 16 | 2) + 4, true).unwrap();
        assert_eq!(field.data_type(), &DataType::Decimal128(10, 2));
        let amounts = column(&[Some(b"12.34")], field.data_type()).unwrap();
        assert_eq!(amounts.as_primitive::<Decimal128Type>().value(0), 1234);

        let field = field_of("at", 1184, -1, true).unwrap();
        let at = column(&[Some(b"2024-01-02 03:04:05.5+00")], field.data_type()).unwrap();
        assert_eq!(
            at.as_primitive::<TimestampMicrosecondType>().value(0),
            1_704_164_645_500_000
        );
        let local = column(
            &[Some(b"2024-01-02 03:04:05")],
            field_of("t", 1114, -1, true).unwrap().data_type(),
        )
        .unwrap();
        assert_eq!(
            local.as_primitive::<TimestampMicrosecondType>().value(0),
            1_704_164_645_000_000
        );

        let flags = column(&[Some(b"t"), Some(b"f")], &DataType::Boolean).unwrap();
        assert!(flags.as_boolean().value(0) && !flags.as_boolean().value(1));
        let blob = column(&[Some(b"\\x00ff")], &DataType::Binary).unwrap();
        assert_eq!(blob.as_binary::<i32>().value(0), &[0u8, 255]);
        assert_eq!(
            field_of("u", 2950, -1, false).unwrap().data_type(),
            &DataType::Utf8
        );
        assert!(
            field_of("i", 1186, -1, true).is_none(),
            "interval is not carried yet"
        );
    }

    #[test]
    fn a_bad_value_names_itself() {
        let err = column(&[Some(b"12x")], &DataType::Int32).unwrap_err();
        assert!(err.0.contains("\"12x\""), "{}", err.0);
        assert!(column(&[Some(b"yes")], &DataType::Boolean).is_err());
    }
}
