//! PostgreSQL's binary `COPY` format (`FORMAT BINARY`).
//!
//! A stream is the 11-byte signature `PGCOPY\n\xff\r\n\0`, a 32-bit flags
//! word, a 32-bit header-extension length and that many bytes; then one tuple
//! per row: a 16-bit field count and, per field, a 32-bit length (-1 for
//! NULL) followed by the value in its binary wire format; then a field count
//! of -1. Values are encoded and decoded with the same binary codecs as the
//! extended protocol's parameters and results.

use arrow::array::ArrayRef;
use arrow::datatypes::Field;
use bytes::Bytes;
use datafusion::scalar::ScalarValue;
use pgwire::messages::data::DataRow;

use super::params::decode_value;
use crate::error::ServerError;

pub(crate) const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Bit 16 of the flags word: OIDs are included (never, since PostgreSQL 12).
const FLAG_WITH_OIDS: u32 = 1 << 16;

/// The header: signature, no flags, no extension.
pub(crate) fn header() -> Vec<u8> {
    let mut out = SIGNATURE.to_vec();
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    out
}

/// One tuple from a binary-format `DataRow` (whose body is already the
/// length-prefixed values).
pub(crate) fn tuple(row: &DataRow) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + row.data.len());
    out.extend_from_slice(&row.field_count.to_be_bytes());
    out.extend_from_slice(&row.data);
    out
}

pub(crate) fn trailer() -> Vec<u8> {
    (-1i16).to_be_bytes().to_vec()
}

fn bad(message: impl Into<String>) -> ServerError {
    ServerError::Sqlstate {
        code: "22P04",
        message: format!("COPY binary data: {}", message.into()),
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ServerError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.data.len())
            .ok_or_else(|| bad(format!("unexpected end of data reading {what}")))?;
        let slice = &self.data[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn i16(&mut self, what: &str) -> Result<i16, ServerError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, what: &str) -> Result<i32, ServerError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Decodes a whole binary COPY stream into one array per field of `fields`.
pub fn decode_binary_copy(data: &[u8], fields: &[Field]) -> Result<Vec<ArrayRef>, ServerError> {
    let mut r = Reader { data, pos: 0 };
    if r.take(SIGNATURE.len(), "the signature").ok() != Some(&SIGNATURE[..]) {
        return Err(bad("COPY file signature not recognized"));
    }
    let flags = r.i32("the flags")? as u32;
    if flags & FLAG_WITH_OIDS != 0 {
        return Err(bad("OIDs in the data are not supported"));
    }
    // Bits 0-15 are reserved and must be zero; 17-31 may be ignored.
    if flags & 0xffff != 0 {
        return Err(bad("unrecognized critical flags in COPY file header"));
    }
    let extension = r.i32("the header extension length")?;
    let extension =
        usize::try_from(extension).map_err(|_| bad("invalid header extension length"))?;
    r.take(extension, "the header extension")?;

    let wire: Vec<_> = fields
        .iter()
        .map(weir_pgsem::pg_types::pg_type_of_field)
        .collect();
    let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::new(); fields.len()];
    let mut row = 0usize;
    loop {
        if r.pos == data.len() {
            // PostgreSQL accepts a stream whose trailer is missing.
            break;
        }
        let count = r.i16("a tuple's field count")?;
        if count == -1 {
            if r.pos != data.len() {
                return Err(bad("data after the end-of-data marker"));
            }
            break;
        }
        row += 1;
        if count as usize != fields.len() || count < 0 {
            return Err(bad(format!(
                "row {row} has {count} fields, expected {}",
                fields.len()
            )));
        }
        for (i, field) in fields.iter().enumerate() {
            let len = r.i32("a field length")?;
            let value = if len == -1 {
                ScalarValue::try_from(field.data_type())?
            } else {
                let len = usize::try_from(len)
                    .map_err(|_| bad(format!("row {row}: invalid field length {len}")))?;
                let bytes = Bytes::copy_from_slice(r.take(len, "a field value")?);
                // Binary values do not depend on the session's date/time settings.
                let datetime = Default::default();
                decode_value(i, &wire[i], field.data_type(), true, &bytes, &datetime).map_err(
                    |e| {
                        bad(format!(
                            "row {row}, column {}: {}",
                            field.name(),
                            super::errors::normalize(e).message
                        ))
                    },
                )?
            };
            columns[i].push(value);
        }
    }
    fields
        .iter()
        .zip(columns)
        .map(|(field, values)| {
            if values.is_empty() {
                Ok(arrow::array::new_empty_array(field.data_type()))
            } else {
                let array = ScalarValue::iter_to_array(values)?;
                if array.data_type() == field.data_type() {
                    Ok(array)
                } else {
                    Ok(arrow::compute::cast(&array, field.data_type())?)
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int32Array, StringArray};
    use arrow::datatypes::DataType;

    fn stream(tuples: &[&[Option<&[u8]>]]) -> Vec<u8> {
        let mut out = header();
        for t in tuples {
            out.extend_from_slice(&(t.len() as i16).to_be_bytes());
            for v in *t {
                match v {
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(b) => {
                        out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                        out.extend_from_slice(b);
                    }
                }
            }
        }
        out.extend_from_slice(&trailer());
        out
    }

    #[test]
    fn decodes_rows_and_nulls() {
        let fields = [
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
        ];
        let data = stream(&[
            &[Some(&7i32.to_be_bytes()), Some(b"seven")],
            &[Some(&8i32.to_be_bytes()), None],
        ]);
        let columns = decode_binary_copy(&data, &fields).expect("decode");
        let ids = columns[0]
            .as_any()
            .downcast_ref::<Int32Array>()
            .expect("int");
        assert_eq!(ids.values(), &[7, 8]);
        let names = columns[1]
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("str");
        assert_eq!(names.value(0), "seven");
        assert!(names.is_null(1));
    }

    #[test]
    fn rejects_bad_streams_with_22p04() {
        let fields = [Field::new("id", DataType::Int32, false)];
        for data in [
            b"PGCOPY\n".to_vec(),
            b"NOTCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0".to_vec(),
            stream(&[&[Some(&7i32.to_be_bytes()), Some(b"x")]]),
            stream(&[&[Some(b"abc")]]),
            {
                let mut d = stream(&[&[Some(&7i32.to_be_bytes())]]);
                d.truncate(d.len() - 4);
                d
            },
        ] {
            let err = decode_binary_copy(&data, &fields).expect_err("bad data");
            assert_eq!(err.sqlstate(), "22P04", "{err}");
        }
    }
}
