//! Arrow values as lines of PostgreSQL's `COPY ... FROM STDIN` text format:
//! columns separated by tabs, `\N` for NULL, backslash escapes for the
//! characters the format reserves. PostgreSQL parses each value with the
//! target column's own input function, so the text only has to be what
//! that type accepts: Arrow's display of numbers, dates and timestamps
//! (ISO 8601) is, and bytes are written as `\x` hex.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::ConnectorError;

/// Whether values of `ty` can be written (nested types cannot yet).
pub(crate) fn supported(ty: &DataType) -> bool {
    use DataType::*;
    match ty {
        Null | Boolean | Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64
        | Float16 | Float32 | Float64 | Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary
        | BinaryView | FixedSizeBinary(_) | Date32 | Date64 | Time32(_) | Time64(_)
        | Timestamp(..) | Duration(_) | Interval(_) | Decimal128(..) | Decimal256(..) => true,
        Dictionary(_, values) => supported(values),
        _ => false,
    }
}

/// Writes one column's values, row by row, as COPY text fields.
pub(crate) struct ColumnText<'a> {
    array: &'a ArrayRef,
    kind: Kind<'a>,
}

enum Kind<'a> {
    Bytes,
    Formatted(ArrayFormatter<'a>),
}

impl<'a> ColumnText<'a> {
    pub(crate) fn new(
        connector: &str,
        array: &'a ArrayRef,
        options: &'a FormatOptions<'a>,
    ) -> Result<Self, ConnectorError> {
        let kind = match array.data_type() {
            DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_) => Kind::Bytes,
            _ => Kind::Formatted(
                ArrayFormatter::try_new(array.as_ref(), options)
                    .map_err(|e| ConnectorError::arrow(connector, e))?,
            ),
        };
        Ok(Self { array, kind })
    }

    /// Appends row `row`'s value to `out`, escaped.
    pub(crate) fn write(&self, row: usize, out: &mut Vec<u8>, scratch: &mut String) {
        if self.array.is_null(row) {
            out.extend_from_slice(b"\\N");
            return;
        }
        match &self.kind {
            Kind::Bytes => {
                let bytes: &[u8] = match self.array.data_type() {
                    DataType::Binary => self.array.as_binary::<i32>().value(row),
                    DataType::LargeBinary => self.array.as_binary::<i64>().value(row),
                    DataType::BinaryView => self.array.as_binary_view().value(row),
                    _ => self.array.as_fixed_size_binary().value(row),
                };
                // `\x` in bytea's hex format; the backslash escaped for COPY.
                out.extend_from_slice(b"\\\\x");
                const HEX: &[u8; 16] = b"0123456789abcdef";
                for &b in bytes {
                    out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
                }
            }
            Kind::Formatted(formatter) => {
                use std::fmt::Write;
                scratch.clear();
                // Writing into a String cannot fail.
                let _ = write!(scratch, "{}", formatter.value(row));
                escape(scratch.as_bytes(), out);
            }
        }
    }
}

/// The display options COPY text needs: Arrow's defaults, which print
/// timestamps and dates in ISO 8601.
pub(crate) fn format_options() -> FormatOptions<'static> {
    FormatOptions::default().with_display_error(false)
}

/// Escapes the characters COPY's text format reserves.
fn escape(text: &[u8], out: &mut Vec<u8>) {
    for &b in text {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{BinaryArray, Float64Array, Int64Array, StringArray};

    use super::*;

    fn line(array: ArrayRef) -> Vec<String> {
        let options = format_options();
        let column = ColumnText::new("postgres", &array, &options).unwrap();
        let mut scratch = String::new();
        (0..array.len())
            .map(|row| {
                let mut out = Vec::new();
                column.write(row, &mut out, &mut scratch);
                String::from_utf8(out).unwrap()
            })
            .collect()
    }

    #[test]
    fn text_is_escaped_and_null_is_backslash_n() {
        let array: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a\tb"),
            None,
            Some("back\\slash\nline\r"),
            Some("\\N"),
        ]));
        assert_eq!(
            line(array),
            ["a\\tb", "\\N", "back\\\\slash\\nline\\r", "\\\\N"]
        );
    }

    #[test]
    fn bytes_are_hex_and_numbers_round_trip() {
        let bytes: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&[0u8, 255, 16][..])]));
        assert_eq!(line(bytes), ["\\\\x00ff10"]);
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![0.1, f64::NAN, -1e300]));
        let text = line(floats);
        assert_eq!(text[0].parse::<f64>().unwrap(), 0.1);
        assert_eq!(text[1], "NaN");
        assert_eq!(text[2].parse::<f64>().unwrap(), -1e300);
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![i64::MIN]));
        assert_eq!(line(ints), [i64::MIN.to_string()]);
    }
}
