//! [`ConnectorError`]: what a connector can fail with, classified so the
//! runtime knows whether to retry and the server which SQLSTATE to answer.

/// Errors of connector specs (at CREATE) and of running sources and sinks.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// No connector of this name is registered.
    #[error("connector \"{name}\" does not exist (known: {known})")]
    UnknownConnector { name: String, known: String },
    /// The connector exists but is not of the kind asked for.
    #[error("connector \"{name}\" cannot be used as a {wanted} (it is a {kind} connector)")]
    WrongKind {
        name: String,
        wanted: &'static str,
        kind: &'static str,
    },
    /// An option the connector does not declare.
    #[error(
        "option \"{option}\" is not valid for connector \"{connector}\" (valid options: {valid})"
    )]
    UnknownOption {
        connector: String,
        option: String,
        valid: String,
    },
    /// A required option was not given.
    #[error("connector \"{connector}\" needs option \"{option}\": {help}")]
    MissingOption {
        connector: String,
        option: String,
        help: String,
    },
    /// An option's value does not parse or is out of range.
    #[error("option \"{option}\" of connector \"{connector}\": {message}")]
    BadOption {
        connector: String,
        option: String,
        message: String,
    },
    /// A declared column does not fit what the connector produces.
    #[error("column \"{column}\" does not fit connector \"{connector}\": {message}")]
    ColumnMismatch {
        connector: String,
        column: String,
        message: String,
    },
    /// A declared column the connector does not produce.
    #[error("connector \"{connector}\" produces no column \"{column}\" (it produces: {produced})")]
    UnknownColumn {
        connector: String,
        column: String,
        produced: String,
    },
    /// A sink descriptor or source offset that this connector did not write.
    #[error("connector \"{connector}\" cannot read its saved position \"{value}\": {message}")]
    BadPosition {
        connector: String,
        value: String,
        message: String,
    },
    /// Building or converting Arrow data failed (a bug or a bad cast).
    #[error("connector \"{connector}\": {source}")]
    Arrow {
        connector: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    /// The source's input closed for good (the process is shutting down).
    #[error("connector \"{connector}\" stopped: its input closed")]
    Stopped { connector: String },
    /// Talking to the outside failed; worth retrying with backoff.
    #[error("connector \"{connector}\": {message}")]
    Transient { connector: String, message: String },
    /// The system outside refused what the connector asked (a missing
    /// table, a constraint, a newer writer holding the target): retrying
    /// the same call will not help.
    #[error("connector \"{connector}\": {message}")]
    Rejected { connector: String, message: String },
    /// The target refused the data of one unit (an epoch): a constraint,
    /// a value it cannot hold, a key that is not unique. Retrying the same
    /// data may only help if the target changes meanwhile; skipping the
    /// unit (`on_error = 'skip'`) lets the rest through.
    #[error("connector \"{connector}\": {message}")]
    Refused { connector: String, message: String },
    /// The upstream lost changes the source had not read yet (a dropped
    /// replication slot, a truncated topic): a retention gap. The source
    /// stops until someone decides (`ALTER DESTINATION ... ACCEPT GAP`).
    #[error("connector \"{connector}\": {message}")]
    Gap { connector: String, message: String },
    /// The connector's code panicked (a bug): its object fails, alone.
    #[error("connector \"{connector}\" panicked: {message}")]
    Panicked { connector: String, message: String },
}

impl ConnectorError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Transient { .. })
    }

    /// Whether the target refused one unit's data ([`Self::Refused`]).
    pub fn is_refused_data(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }

    /// The SQLSTATE a client sees for this error at CREATE time.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Self::UnknownConnector { .. }
            | Self::UnknownOption { .. }
            | Self::MissingOption { .. }
            | Self::BadOption { .. }
            | Self::WrongKind { .. } => "22023",
            Self::ColumnMismatch { .. } => "42804",
            Self::UnknownColumn { .. } => "42703",
            Self::BadPosition { .. } | Self::Arrow { .. } | Self::Panicked { .. } => "XX000",
            Self::Transient { .. } | Self::Rejected { .. } | Self::Refused { .. } => "58000",
            Self::Gap { .. } => "55000",
            Self::Stopped { .. } => "57P01",
        }
    }

    /// The error for a panic caught in `connector`'s code.
    pub fn panicked(connector: &str, panic: &(dyn std::any::Any + Send)) -> Self {
        Self::Panicked {
            connector: connector.to_string(),
            message: weir_common::panic_message(panic).to_string(),
        }
    }

    pub(crate) fn arrow(connector: &str, source: arrow::error::ArrowError) -> Self {
        Self::Arrow {
            connector: connector.to_string(),
            source,
        }
    }
}
