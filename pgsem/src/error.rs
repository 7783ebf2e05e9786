//! [`PgsemError`]: what reading, evaluating and encoding values can fail
//! with. Each variant keeps what the server needs to choose the SQLSTATE
//! the client sees (`weir-server`'s `error.rs` maps them, in one place).

use datafusion::error::DataFusionError;

#[derive(Debug, thiserror::Error)]
pub enum PgsemError {
    /// A data exception with its own SQLSTATE (22003 out of range, 22001
    /// too long, 22P02/22007 bad input), raised while reading or
    /// evaluating values.
    #[error("{message}")]
    Value {
        sqlstate: &'static str,
        message: String,
    },
    /// COPY text or CSV data that does not parse (a data exception, 22000).
    #[error("COPY line {line}: {message}")]
    CopyData { line: usize, message: String },
    /// An option value the operation cannot use (22023), such as a COPY
    /// delimiter that is not one byte.
    #[error("{0}")]
    InvalidParameterValue(String),
    /// A caller broke this crate's contract (XX000).
    #[error("{0}")]
    Internal(String),
    /// datafusion-pg-catalog could not set up `pg_catalog` in the session
    /// template (XX000).
    #[error("pg_catalog setup: {0}")]
    PgCatalogSetup(#[source] Box<DataFusionError>),
    /// DataFusion refused part of the session template.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
}

impl From<crate::datetime_in::DateTimeError> for PgsemError {
    fn from(e: crate::datetime_in::DateTimeError) -> Self {
        Self::Value {
            sqlstate: e.sqlstate,
            message: e.message,
        }
    }
}
