//! Extended-protocol parameters: the client's Parse type OIDs as planning
//! hints, Bind validation, and decoding bound values into `ScalarValue`s.
//!
//! Values are decoded with the PostgreSQL type the client encoded them with:
//! the OID it named in Parse, else the type we reported in
//! ParameterDescription. Both are stored per statement at Parse time (see
//! `StoredStatement::parameter_types`). uuid, json and jsonb are decoded here
//! into Utf8 strings, arrays element by element (`array_params`), dates and
//! times in text format as PostgreSQL reads them (the session's DateStyle
//! and TimeZone, `weir_pgsem::datetime_in`); every other type goes through
//! `arrow_pg::datatypes::df::deserialize_parameters`.

use std::sync::Arc;

use arrow::datatypes::DataType;
use arrow_pg::datatypes::df::deserialize_parameters;
use bytes::Bytes;
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;
use pgwire::api::Type;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::stmt::StoredStatement;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::FORMAT_CODE_BINARY;
use pgwire::messages::extendedquery::Bind;
use postgres_types::Kind;

use super::encode::pg_type_of;
use super::errors;
use crate::session::api::PreparedStatement;
use weir_pgsem::datetime_in::DateTimeContext;

/// The planning hint for one Parse parameter type OID.
///
/// 0 and `unknown` leave the type to inference; so does a real PostgreSQL
/// type Weir has no Arrow mapping for. An OID that names no type at all is an
/// error, as in PostgreSQL.
pub(crate) fn hint_for_oid(oid: u32) -> PgWireResult<Option<DataType>> {
    if oid == 0 || oid == Type::UNKNOWN.oid() {
        return Ok(None);
    }
    if let Some(data_type) = weir_pgsem::pg_types::arrow_type_of_pg_oid(oid) {
        return Ok(Some(data_type));
    }
    if Type::from_oid(oid).is_some() {
        return Ok(None);
    }
    Err(errors::error(
        "42704",
        format!("type with OID {oid} does not exist"),
    ))
}

/// The wire type of each parameter: what the client named, else what we
/// describe for the inferred type.
pub(crate) fn wire_types(client_oids: &[u32], statement: &PreparedStatement) -> Vec<Option<Type>> {
    statement
        .param_types
        .iter()
        .enumerate()
        .map(|(i, data_type)| {
            let named = client_oids
                .get(i)
                .filter(|oid| **oid != 0 && **oid != Type::UNKNOWN.oid())
                .and_then(|oid| Type::from_oid(*oid));
            let inferred = statement
                .param_oids
                .get(i)
                .and_then(|oid| Type::from_oid(*oid));
            Some(named.or(inferred).unwrap_or_else(|| pg_type_of(data_type)))
        })
        .collect()
}

/// Bind checks PostgreSQL makes before any value is looked at.
pub(crate) fn validate_bind(
    bind: &Bind,
    statement: &StoredStatement<PreparedStatement>,
) -> PgWireResult<()> {
    let expected = statement.statement.param_types.len();
    if bind.parameters.len() != expected {
        return Err(errors::error(
            "08P01",
            format!(
                "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                bind.parameters.len(),
                errors::display_name(&statement.id),
                expected
            ),
        ));
    }
    let formats = bind.parameter_format_codes.len();
    if formats > 1 && formats != expected {
        return Err(errors::error(
            "08P01",
            format!("bind message has {formats} parameter formats but {expected} parameters"),
        ));
    }
    let columns = statement
        .statement
        .result_schema
        .as_ref()
        .map_or(0, |s| s.fields().len());
    let results = bind.result_column_format_codes.len();
    if results > 1 && results != columns {
        return Err(errors::error(
            "08P01",
            format!("bind message has {results} result formats but query has {columns} columns"),
        ));
    }
    let codes = bind
        .parameter_format_codes
        .iter()
        .chain(&bind.result_column_format_codes);
    if let Some(code) = codes.into_iter().find(|c| **c != 0 && **c != 1) {
        return Err(errors::error(
            "22023",
            format!("unsupported format code: {code}"),
        ));
    }
    Ok(())
}

fn is_binary(format: &Format, idx: usize) -> bool {
    match format {
        Format::UnifiedText => false,
        Format::UnifiedBinary => true,
        Format::Individual(codes) => codes.get(idx) == Some(&FORMAT_CODE_BINARY),
    }
}

/// Decodes a portal's parameters, one `ScalarValue` per `$n`.
pub(crate) fn decode_params(
    portal: &Portal<PreparedStatement>,
    datetime: &DateTimeContext,
) -> PgWireResult<Vec<ScalarValue>> {
    let stored = &portal.statement;
    let arrow_types = &stored.statement.param_types;
    if portal.parameters.len() != arrow_types.len() {
        return Err(errors::error(
            "08P01",
            format!(
                "bind message supplies {} parameters, but prepared statement requires {}",
                portal.parameters.len(),
                arrow_types.len()
            ),
        ));
    }
    portal
        .parameters
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let wire = stored
                .parameter_types
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| pg_type_of(&arrow_types[i]));
            let binary = is_binary(&portal.parameter_format, i);
            match raw {
                None => {
                    Ok(ScalarValue::try_from(&arrow_types[i]).unwrap_or(ScalarValue::Utf8(None)))
                }
                Some(bytes) => decode_value(i, &wire, &arrow_types[i], binary, bytes, datetime),
            }
        })
        .collect()
}

/// Decodes one non-NULL value the client encoded as `wire` (in binary or
/// text format) into `arrow`'s type; `idx` names it in errors (`$idx+1`).
/// Date and time text is read with `datetime`.
pub(crate) fn decode_value(
    idx: usize,
    wire: &Type,
    arrow: &DataType,
    binary: bool,
    bytes: &Bytes,
    datetime: &DateTimeContext,
) -> PgWireResult<ScalarValue> {
    if *wire == Type::UUID {
        decode_uuid(idx, bytes, binary)
    } else if *wire == Type::JSON || *wire == Type::JSONB {
        decode_json(idx, bytes, binary, *wire == Type::JSONB)
    } else if let (Kind::Array(element), DataType::List(item)) = (wire.kind(), arrow) {
        super::array_params::decode_array(idx, element, item, binary, bytes, datetime)
    } else if !binary && let Some(sql_type) = datetime_type(arrow) {
        decode_datetime_text(idx, arrow, &sql_type, bytes, datetime)
    } else {
        decode_with_arrow_pg(idx, wire.clone(), arrow, binary, bytes)
    }
}

/// Decodes parameter `idx` through arrow-pg, using a one-parameter portal so
/// that arrow-pg's per-index format lookups always stay in bounds and an
/// error can name the parameter.
fn decode_with_arrow_pg(
    idx: usize,
    wire: Type,
    arrow: &DataType,
    binary: bool,
    bytes: &Bytes,
) -> PgWireResult<ScalarValue> {
    let single = Arc::new(StoredStatement::new(String::new(), (), vec![Some(wire)]));
    let bind = Bind::new(
        None,
        None,
        vec![i16::from(binary)],
        vec![Some(bytes.clone())],
        Vec::new(),
    );
    let portal = Portal::try_new(&bind, single)?;
    let inferred = [Some(arrow)];
    let decoded = deserialize_parameters(&portal, &inferred).map_err(|e| match e {
        PgWireError::UserError(_) => e,
        other => errors::error(
            if binary { "22P03" } else { "22P02" },
            format!("invalid value for parameter ${}: {other}", idx + 1),
        ),
    })?;
    match decoded {
        ParamValues::List(mut list) if list.len() == 1 => Ok(list.remove(0).value),
        _ => Err(errors::error(
            "22023",
            format!("could not decode parameter ${}", idx + 1),
        )),
    }
}

/// The date/time type whose text PostgreSQL reads its own way.
fn datetime_type(arrow: &DataType) -> Option<weir_pgsem::SqlType> {
    use weir_pgsem::SqlType as S;
    match arrow {
        DataType::Date32 => Some(S::Date),
        DataType::Time64(_) => Some(S::Time),
        DataType::Timestamp(_, None) => Some(S::Timestamp),
        DataType::Timestamp(_, Some(_)) => Some(S::Timestamptz),
        _ => None,
    }
}

fn decode_datetime_text(
    idx: usize,
    arrow: &DataType,
    sql_type: &weir_pgsem::SqlType,
    bytes: &[u8],
    datetime: &DateTimeContext,
) -> PgWireResult<ScalarValue> {
    let invalid = |sqlstate: &str, e: String| {
        errors::error(
            sqlstate,
            format!("invalid value for parameter ${}: {e}", idx + 1),
        )
    };
    let text = std::str::from_utf8(bytes).map_err(|e| invalid("22021", e.to_string()))?;
    let read = weir_pgsem::text_input::parse_column(
        &arrow::array::StringArray::from(vec![text]),
        sql_type,
        datetime,
    )
    .map_err(|e| invalid(e.sqlstate, e.message))?;
    ScalarValue::try_from_array(&read, 0)
        .and_then(|v| v.cast_to(arrow))
        .map_err(|e| invalid("22P02", e.to_string()))
}

fn decode_uuid(idx: usize, bytes: &[u8], binary: bool) -> PgWireResult<ScalarValue> {
    let parsed = if binary {
        uuid::Uuid::from_slice(bytes).map_err(|_| {
            errors::error(
                "22P03",
                format!("incorrect binary data format in bind parameter {}", idx + 1),
            )
        })?
    } else {
        let text = std::str::from_utf8(bytes).unwrap_or_default();
        uuid::Uuid::parse_str(text.trim()).map_err(|_| {
            errors::error(
                "22P02",
                format!("invalid input syntax for type uuid: \"{text}\""),
            )
        })?
    };
    Ok(ScalarValue::Utf8(Some(parsed.hyphenated().to_string())))
}

fn decode_json(idx: usize, bytes: &[u8], binary: bool, jsonb: bool) -> PgWireResult<ScalarValue> {
    let body = match (binary && jsonb, bytes.split_first()) {
        (true, Some((1, rest))) => rest,
        (true, _) => {
            return Err(errors::error(
                "22P03",
                format!(
                    "unsupported jsonb version number in bind parameter {}",
                    idx + 1
                ),
            ));
        }
        (false, _) => bytes,
    };
    let text = std::str::from_utf8(body)
        .map_err(|_| errors::error("22021", "invalid byte sequence for encoding \"UTF8\""))?;
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        let kind = if jsonb { "jsonb" } else { "json" };
        return Err(errors::error(
            "22P02",
            format!("invalid input syntax for type {kind}"),
        ));
    }
    Ok(ScalarValue::Utf8(Some(text.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oid_hints() {
        assert_eq!(hint_for_oid(0).expect("ok"), None);
        assert_eq!(hint_for_oid(705).expect("ok"), None);
        assert!(hint_for_oid(999_999).is_err());
    }

    #[test]
    fn uuid_from_text_and_binary() {
        let text = "67E55044-10B1-426F-9247-BB680E5FE0C8";
        let expected = ScalarValue::Utf8(Some(text.to_lowercase()));
        assert_eq!(
            decode_uuid(0, text.as_bytes(), false).expect("text"),
            expected
        );
        let raw = uuid::Uuid::parse_str(text).expect("uuid");
        assert_eq!(
            decode_uuid(0, raw.as_bytes(), true).expect("binary"),
            expected
        );
        assert!(decode_uuid(0, b"nope", false).is_err());
        assert!(decode_uuid(0, b"short", true).is_err());
    }

    #[test]
    fn json_and_jsonb() {
        let doc = ScalarValue::Utf8(Some("{\"a\":1}".to_owned()));
        assert_eq!(
            decode_json(0, b"{\"a\":1}", false, false).expect("json"),
            doc
        );
        assert_eq!(
            decode_json(0, b"\x01{\"a\":1}", true, true).expect("jsonb"),
            doc
        );
        assert!(decode_json(0, b"\x02{}", true, true).is_err());
        assert!(decode_json(0, b"{", false, false).is_err());
        assert!(decode_json(0, b"\xff", true, false).is_err());
    }
}
