//! Turning Weir's [`ServerError`] and pgwire's own failures into the
//! `ErrorResponse` fields a PostgreSQL client expects (severity, SQLSTATE,
//! message, hint, position).

use pgwire::error::{ErrorInfo, PgWireError};

use crate::error::ServerError;

/// The `ErrorResponse` fields of a statement error.
pub(crate) fn error_info(err: &ServerError) -> ErrorInfo {
    if err.is_internal() {
        tracing::warn!(error = %err, "internal error returned to client");
    } else {
        tracing::debug!(error = %err, sqlstate = err.sqlstate(), "statement failed");
    }
    let mut info = ErrorInfo::new(
        "ERROR".to_owned(),
        err.sqlstate().to_owned(),
        err.to_string(),
    );
    info.hint = err.hint();
    info.position = err.position().map(|p| p.to_string());
    info
}

pub(crate) fn to_pgwire(err: ServerError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(&err)))
}

/// An `ERROR` that aborts the current statement only.
pub(crate) fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// A `FATAL` error: pgwire sends it and then closes the connection.
pub(crate) fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// Rewrites pgwire's messages where PostgreSQL words them differently, so
/// drivers that match on text (few do, but some test suites) see the usual
/// wording.
pub(crate) fn normalize(err: PgWireError) -> ErrorInfo {
    match err {
        PgWireError::InvalidPassword(user) => ErrorInfo::new(
            "FATAL".to_owned(),
            "28P01".to_owned(),
            format!("password authentication failed for user \"{user}\""),
        ),
        PgWireError::StatementNotFound(name) => ErrorInfo::new(
            "ERROR".to_owned(),
            "26000".to_owned(),
            format!(
                "prepared statement \"{}\" does not exist",
                display_name(&name)
            ),
        ),
        PgWireError::PortalNotFound(name) => ErrorInfo::new(
            "ERROR".to_owned(),
            "34000".to_owned(),
            format!("portal \"{}\" does not exist", display_name(&name)),
        ),
        other => other.into(),
    }
}

/// pgwire stores the unnamed statement/portal under a sentinel name;
/// PostgreSQL shows it as the empty string.
pub(crate) fn display_name(name: &str) -> &str {
    if name == pgwire::api::DEFAULT_NAME {
        ""
    } else {
        name
    }
}
