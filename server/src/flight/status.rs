//! Mapping errors to `tonic::Status`: the one place Flight decides gRPC codes.
//!
//! The message always starts with the SQLSTATE (`42P01: relation "x" does not
//! exist`), and the state is also sent as the `x-sqlstate` metadata entry so
//! clients can branch on it without parsing text.

use arrow::error::ArrowError;
use tonic::{Code, Status};

use crate::error::ServerError;

/// The gRPC code for a SQLSTATE.
pub(crate) fn code_for_sqlstate(state: &str) -> Code {
    match state {
        "42P01" | "3F000" => Code::NotFound,
        "23505" | "42P07" | "42P06" => Code::AlreadyExists,
        "0A000" => Code::Unimplemented,
        "57P03" => Code::Unavailable,
        "40001" | "25P02" => Code::Aborted,
        "57014" => Code::Cancelled,
        "28P01" | "28000" => Code::Unauthenticated,
        s if s.starts_with("22") || s.starts_with("23") || s.starts_with("42") => {
            Code::InvalidArgument
        }
        s if s.starts_with("53") => Code::ResourceExhausted,
        _ => Code::Internal,
    }
}

/// A status carrying `state` with `message` prefixed by it.
pub(crate) fn with_sqlstate(state: &str, message: impl std::fmt::Display) -> Status {
    let message = message.to_string();
    let text = if message.starts_with(state) {
        message
    } else {
        format!("{state}: {message}")
    };
    let mut status = Status::new(code_for_sqlstate(state), text);
    if let Ok(value) = state.parse() {
        status.metadata_mut().insert("x-sqlstate", value);
    }
    status
}

/// Converts a core error into a status with its SQLSTATE.
pub(crate) fn to_status(err: ServerError) -> Status {
    with_sqlstate(err.sqlstate(), &err)
}

/// A Flight SQL feature Weir does not offer (`0A000`, `Unimplemented`).
pub(crate) fn unsupported(what: impl std::fmt::Display) -> Status {
    with_sqlstate(
        "0A000",
        format!("{what} is not supported by Weir's Flight SQL server"),
    )
}

/// A malformed request (`08P01` protocol violation, `InvalidArgument`).
pub(crate) fn bad_request(what: impl std::fmt::Display) -> Status {
    let mut status = Status::invalid_argument(format!("08P01: {what}"));
    status.metadata_mut().insert(
        "x-sqlstate",
        tonic::metadata::MetadataValue::from_static("08P01"),
    );
    status
}

/// An Arrow encoding or decoding failure on the server side.
pub(crate) fn arrow_status(context: &str, err: ArrowError) -> Status {
    with_sqlstate("XX000", format!("{context}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_grpc_codes() {
        let cases = [
            ("42P01", Code::NotFound),
            ("42601", Code::InvalidArgument),
            ("42703", Code::InvalidArgument),
            ("22012", Code::InvalidArgument),
            ("23505", Code::AlreadyExists),
            ("42P07", Code::AlreadyExists),
            ("0A000", Code::Unimplemented),
            ("57P03", Code::Unavailable),
            ("40001", Code::Aborted),
            ("25P02", Code::Aborted),
            ("3F000", Code::NotFound),
            ("23502", Code::InvalidArgument),
            ("57014", Code::Cancelled),
            ("53200", Code::ResourceExhausted),
            ("XX000", Code::Internal),
            ("58030", Code::Internal),
            ("08P01", Code::Internal),
        ];
        for (state, code) in cases {
            assert_eq!(code_for_sqlstate(state), code, "{state}");
        }
    }

    #[test]
    fn message_is_prefixed_once() {
        let s = with_sqlstate("42P01", "relation \"x\" does not exist");
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "42P01: relation \"x\" does not exist");
        assert_eq!(
            s.metadata().get("x-sqlstate").and_then(|v| v.to_str().ok()),
            Some("42P01")
        );
        let s = with_sqlstate("42P01", "42P01: already prefixed");
        assert_eq!(s.message(), "42P01: already prefixed");
    }

    #[test]
    fn unsupported_names_the_feature() {
        let s = unsupported("Flight SQL command CommandGetXdbcTypeInfo");
        assert_eq!(s.code(), Code::Unimplemented);
        assert!(s.message().starts_with("0A000: "));
        assert!(s.message().contains("CommandGetXdbcTypeInfo"));
    }
}
