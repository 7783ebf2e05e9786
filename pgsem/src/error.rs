//! [`PgsemError`]: what reading, evaluating and encoding values can fail
//! with. Each variant keeps what the server needs to choose the SQLSTATE
//! the client sees (`weir-server`'s `error.rs` maps them, in one place).

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
}

impl From<crate::datetime_in::DateTimeError> for PgsemError {
    fn from(e: crate::datetime_in::DateTimeError) -> Self {
        Self::Value {
            sqlstate: e.sqlstate,
            message: e.message,
        }
    }
}
