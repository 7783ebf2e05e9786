//! Array parameter values (`int4[]`, `uuid[]`, `bytea[]`, ...), in either
//! format: each element is decoded by [`super::params::decode_value`] with
//! the array's element type, so arrays read exactly the element forms their
//! scalars do.
//!
//! Binary layout (PostgreSQL's `array_recv`): `ndim i32`, `has_nulls i32`,
//! `element oid u32`, then `length i32, lower bound i32` per dimension, then
//! per element a `length i32` (-1 for NULL) and its bytes. Weir's arrays are
//! one-dimensional lists, so `ndim` must be 0 (the empty array) or 1. The
//! element OID in the header is not checked against the parameter's: drivers
//! send `int4` elements for `oid[]` and PostgreSQL accepts them.

use std::sync::Arc;

use arrow::array::{ArrayRef, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::FieldRef;
use bytes::Bytes;
use datafusion::scalar::ScalarValue;
use pgwire::api::Type;
use pgwire::error::PgWireResult;

use super::errors;
use super::params::decode_value;

/// Decodes parameter `idx`, an array of `element` on the wire, into a one-row
/// list of `item` (the parameter's Arrow list field).
pub(crate) fn decode_array(
    idx: usize,
    element: &Type,
    item: &FieldRef,
    binary: bool,
    bytes: &Bytes,
    datetime: &weir_pgsem::datetime_in::DateTimeContext,
) -> PgWireResult<ScalarValue> {
    let values = if binary {
        binary_elements(idx, bytes)?
    } else {
        text_elements(idx, bytes)?
    };
    let scalars = values
        .into_iter()
        .map(|value| match value {
            None => ScalarValue::try_from(item.data_type())
                .map_err(|e| errors::error("22P02", e.to_string())),
            Some(raw) => decode_value(idx, element, item.data_type(), binary, &raw, datetime)?
                .cast_to(item.data_type())
                .map_err(|e| errors::error("22P02", e.to_string())),
        })
        .collect::<PgWireResult<Vec<_>>>()?;
    let array = list_of(item, scalars).map_err(|e| {
        errors::error(
            "22P02",
            format!("invalid value for parameter ${}: {e}", idx + 1),
        )
    })?;
    Ok(ScalarValue::List(Arc::new(array)))
}

fn list_of(item: &FieldRef, scalars: Vec<ScalarValue>) -> datafusion::common::Result<ListArray> {
    let values: ArrayRef = if scalars.is_empty() {
        arrow::array::new_empty_array(item.data_type())
    } else {
        ScalarValue::iter_to_array(scalars)?
    };
    let offsets = OffsetBuffer::from_lengths([values.len()]);
    Ok(ListArray::try_new(item.clone(), offsets, values, None)?)
}

fn malformed(idx: usize, what: &str) -> pgwire::error::PgWireError {
    errors::error(
        "22P03",
        format!(
            "incorrect binary data format in bind parameter {}: {what}",
            idx + 1
        ),
    )
}

/// A cursor over a binary array value; every read names what it expected.
struct Cursor<'a> {
    idx: usize,
    bytes: &'a Bytes,
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, what: &str) -> PgWireResult<Bytes> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len());
        let end = end.ok_or_else(|| malformed(self.idx, &format!("truncated {what}")))?;
        let taken = self.bytes.slice(self.pos..end);
        self.pos = end;
        Ok(taken)
    }

    fn i32(&mut self, what: &str) -> PgWireResult<i32> {
        let word = self.take(4, what)?;
        Ok(i32::from_be_bytes([word[0], word[1], word[2], word[3]]))
    }
}

/// The elements of a binary array, NULLs as `None`.
fn binary_elements(idx: usize, bytes: &Bytes) -> PgWireResult<Vec<Option<Bytes>>> {
    let mut r = Cursor { idx, bytes, pos: 0 };
    let ndim = r.i32("array header")?;
    let _has_nulls = r.i32("array header")?;
    let _element_oid = r.i32("array header")?;
    let len = match ndim {
        0 => 0,
        1 => {
            let len = r.i32("dimension")?;
            let _lower_bound = r.i32("dimension")?;
            usize::try_from(len).map_err(|_| malformed(idx, "negative array length"))?
        }
        n if n < 0 => return Err(malformed(idx, "invalid number of dimensions")),
        n => {
            return Err(errors::error(
                "0A000",
                format!(
                    "parameter ${} is a {n}-dimensional array; Weir supports one-dimensional arrays",
                    idx + 1
                ),
            ));
        }
    };
    let mut elements = Vec::with_capacity(len.min(bytes.len() / 4));
    for _ in 0..len {
        let element_len = r.i32("element length")?;
        if element_len == -1 {
            elements.push(None);
            continue;
        }
        let n =
            usize::try_from(element_len).map_err(|_| malformed(idx, "invalid element length"))?;
        elements.push(Some(r.take(n, "element")?));
    }
    if r.pos != bytes.len() {
        return Err(malformed(idx, "trailing bytes after the last element"));
    }
    Ok(elements)
}

/// The elements of a text array literal `{a,"b c",NULL}`.
fn text_elements(idx: usize, bytes: &Bytes) -> PgWireResult<Vec<Option<Bytes>>> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| errors::error("22021", "invalid byte sequence for encoding \"UTF8\""))?;
    let elements = weir_pgsem::parse_array_literal(text).map_err(|e| {
        errors::error(
            "22P02",
            format!("invalid value for parameter ${}: {e}", idx + 1),
        )
    })?;
    Ok(elements.into_iter().map(|e| e.map(Bytes::from)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Date32Type, Field};

    fn binary_array(elements: &[Option<&[u8]>], oid: u32) -> Bytes {
        let mut out = Vec::new();
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&i32::from(elements.iter().any(Option::is_none)).to_be_bytes());
        out.extend_from_slice(&oid.to_be_bytes());
        out.extend_from_slice(&(elements.len() as i32).to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for e in elements {
            match e {
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(b) => {
                    out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                    out.extend_from_slice(b);
                }
            }
        }
        Bytes::from(out)
    }

    fn list_values(value: ScalarValue) -> ArrayRef {
        let ScalarValue::List(list) = value else {
            panic!("not a list: {value:?}")
        };
        list.value(0)
    }

    #[test]
    fn binary_date_array_with_a_null() {
        let item: FieldRef = Arc::new(Field::new("item", DataType::Date32, true));
        // 2000-01-02 is day 1 of PostgreSQL's epoch.
        let bytes = binary_array(&[Some(&1i32.to_be_bytes()), None], 1082);
        let values = list_values(
            decode_array(0, &Type::DATE, &item, true, &bytes, &Default::default())
                .expect("decodes"),
        );
        let dates = values.as_primitive::<Date32Type>();
        assert_eq!(dates.value(0), 10_958);
        assert!(dates.is_null(1));
    }

    #[test]
    fn text_and_empty_arrays() {
        let item: FieldRef = Arc::new(Field::new("item", DataType::Utf8, true));
        let values = list_values(
            decode_array(
                0,
                &Type::TEXT,
                &item,
                false,
                &Bytes::from_static(b"{a,\"b c\",NULL}"),
                &Default::default(),
            )
            .expect("decodes"),
        );
        assert_eq!(values.len(), 3);
        assert_eq!(values.as_string::<i32>().value(1), "b c");
        assert!(values.is_null(2));
        let empty = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25]);
        assert_eq!(
            list_values(
                decode_array(0, &Type::TEXT, &item, true, &empty, &Default::default())
                    .expect("empty")
            )
            .len(),
            0
        );
    }

    #[test]
    fn malformed_binary_arrays_are_22p03() {
        let item: FieldRef = Arc::new(Field::new("item", DataType::Int32, true));
        let mut truncated = binary_array(&[Some(&7i32.to_be_bytes())], 23).to_vec();
        truncated.pop();
        for bad in [Bytes::from(truncated), Bytes::from_static(&[0, 0, 0, 1])] {
            let err = decode_array(0, &Type::INT4, &item, true, &bad, &Default::default())
                .expect_err("rejected");
            assert_eq!(errors::normalize(err).code, "22P03");
        }
    }
}
