//! [`ServerError`]: every error a client can see, and the one place that maps
//! each to its SQLSTATE, hint and syntax-error position.

use datafusion::error::DataFusionError;
use weir_engine::EngineError;
use weir_pgsem::PgsemError;
use weir_storage::StorageError;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("syntax error: {message}")]
    Syntax {
        message: String,
        position: Option<usize>,
    },
    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),
    #[error("column \"{0}\" does not exist")]
    UndefinedColumn(String),
    #[error("schema \"{0}\" does not exist")]
    UndefinedSchema(String),
    #[error("relation \"{0}\" already exists")]
    DuplicateTable(String),
    #[error("schema \"{0}\" already exists")]
    DuplicateSchema(String),
    #[error("column \"{0}\" specified more than once; name the columns apart with AS")]
    DuplicateColumn(String),
    #[error("role \"{0}\" already exists")]
    DuplicateRole(String),
    /// Another object of the kind has this name (`sink "x"`).
    #[error("{0} already exists")]
    DuplicateObject(String),
    /// A connector refused a CREATE (unknown option, bad value, a column
    /// that does not fit); keeps its own SQLSTATE.
    #[error(transparent)]
    Connector(#[from] weir_connectors::ConnectorError),
    #[error("multiple assignments to same column \"{0}\"")]
    DuplicateAssignment(String),
    #[error("unrecognized configuration parameter \"{0}\"")]
    UndefinedParameter(String),
    #[error(
        "duplicate key value violates unique constraint \"{constraint}\": Key ({columns})=({values}) already exists."
    )]
    UniqueViolation {
        constraint: String,
        columns: String,
        values: String,
    },
    #[error(
        "null value in column \"{column}\" of relation \"{table}\" violates not-null constraint"
    )]
    NotNullViolation { table: String, column: String },
    #[error("{0} is not supported")]
    FeatureNotSupported(String),
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    InFailedTransaction,
    #[error("{0}")]
    InvalidColumnReference(String),
    #[error("{0} can only be used in transaction blocks")]
    NoActiveTransaction(String),
    #[error("savepoint \"{0}\" does not exist")]
    UndefinedSavepoint(String),
    #[error("could not serialize access due to concurrent update: {0}")]
    SerializationFailure(String),
    #[error("cannot drop {object} because other objects depend on it")]
    DependentObjects { object: String, dependents: String },
    #[error("{0}")]
    InvalidParameterValue(String),
    #[error("invalid input syntax: {0}")]
    InvalidText(String),
    #[error("{0}")]
    DataException(String),
    /// A data exception with its own SQLSTATE (22003 out of range, 22001
    /// too long, 22P02/22007 bad input), raised while evaluating values.
    #[error("{message}")]
    Value {
        sqlstate: &'static str,
        message: String,
    },
    #[error("{0}")]
    Protocol(String),
    #[error("canceling statement due to user request")]
    QueryCanceled,
    #[error("password authentication failed for user \"{0}\"")]
    InvalidPassword(String),
    #[error("the server is starting: {0}")]
    NotReady(String),
    /// Another process claimed the state backend: this one serves reads
    /// only, as a PostgreSQL standby does.
    #[error("cannot write: this server was fenced ({0})")]
    Fenced(String),
    #[error("{0}")]
    Planning(String),
    #[error("{0}")]
    DataFusion(#[source] DataFusionError),
    #[error("storage error: {0}")]
    Storage(#[from] StorageError),
    #[error("state backend: {0}")]
    State(#[from] weir_storage::StateBackendError),
    /// An error whose SQLSTATE is chosen where it is raised (cursor misuse,
    /// malformed binary COPY data, ...).
    #[error("{message}")]
    Sqlstate { code: &'static str, message: String },
    #[error("internal error: {0}")]
    Internal(String),
}

impl ServerError {
    pub fn protocol(msg: impl Into<String>) -> Self {
        Self::Protocol(msg.into())
    }
    pub fn invalid_param(msg: impl Into<String>) -> Self {
        Self::InvalidParameterValue(msg.into())
    }
    pub fn feature_not_supported(what: impl Into<String>) -> Self {
        Self::FeatureNotSupported(what.into())
    }
    pub fn undefined_table(name: impl Into<String>) -> Self {
        Self::UndefinedTable(name.into())
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::Internal(msg.into())
    }
    pub fn planning(msg: impl Into<String>) -> Self {
        Self::Planning(msg.into())
    }

    /// The SQLSTATE a client sees.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Self::Syntax { .. } => "42601",
            Self::UndefinedTable(_) => "42P01",
            Self::UndefinedColumn(_) => "42703",
            Self::UndefinedSchema(_) => "3F000",
            Self::DuplicateTable(_) => "42P07",
            Self::DuplicateSchema(_) => "42P06",
            Self::DuplicateColumn(_) => "42701",
            Self::DuplicateAssignment(_) => "42601",
            Self::DuplicateRole(_) => "42710",
            Self::DuplicateObject(_) => "42710",
            Self::Connector(e) => e.sqlstate(),
            Self::UndefinedParameter(_) => "42704",
            Self::UniqueViolation { .. } => "23505",
            Self::NotNullViolation { .. } => "23502",
            Self::FeatureNotSupported(_) => "0A000",
            Self::InFailedTransaction => "25P02",
            Self::InvalidColumnReference(_) => "42P10",
            Self::NoActiveTransaction(_) => "25P01",
            Self::UndefinedSavepoint(_) => "3B001",
            Self::SerializationFailure(_) => "40001",
            Self::DependentObjects { .. } => "2BP01",
            Self::InvalidParameterValue(_) => "22023",
            Self::InvalidText(_) => "22P02",
            Self::DataException(_) => "22000",
            Self::Value { sqlstate, .. } => sqlstate,
            Self::Protocol(_) => "08P01",
            Self::QueryCanceled => "57014",
            Self::InvalidPassword(_) => "28P01",
            Self::NotReady(_) => "57P03",
            Self::Fenced(_) => "25006",
            Self::Planning(_) => "42000",
            Self::DataFusion(e) => datafusion_sqlstate(e),
            Self::Storage(StorageError::RevisionConflict { .. }) => "40001",
            Self::Storage(_) => "58030",
            // Fenced: another process took over this state.
            Self::State(e) if e.is_fenced() => "57P04",
            Self::State(_) => "58030",
            Self::Sqlstate { code, .. } => code,
            Self::Internal(_) => "XX000",
        }
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            Self::InFailedTransaction => {
                Some("issue ROLLBACK to end the failed transaction".into())
            }
            Self::SerializationFailure(_)
            | Self::Storage(StorageError::RevisionConflict { .. }) => {
                Some("another session changed the catalog first; retry the statement".into())
            }
            Self::DependentObjects { dependents, .. } => Some(format!(
                "depending on it: {dependents}; use DROP ... CASCADE to drop them too"
            )),
            Self::UndefinedTable(_) => {
                Some("check the name and search_path; SHOW TABLES lists the tables".into())
            }
            Self::NotReady(_) => Some("retry shortly, or SELECT weir_wait_ready('10s')".into()),
            Self::Connector(_) => Some(
                "SHOW CONNECTORS (or SELECT * FROM weir_catalog.connectors) lists each connector's options".into(),
            ),
            Self::Fenced(_) => Some(
                "another weir process took over this state; write through it, or restart this one to take the state back".into(),
            ),
            _ => None,
        }
    }

    /// 1-based character position of a syntax error in the query string.
    pub fn position(&self) -> Option<usize> {
        match self {
            Self::Syntax { position, .. } => *position,
            _ => None,
        }
    }

    /// Whether the error is the client's (bad input) rather than the server's;
    /// used for logging levels.
    pub fn is_internal(&self) -> bool {
        matches!(self.sqlstate(), "XX000" | "58030")
    }
}

fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
    match e.find_root() {
        DataFusionError::SQL(..) => "42601",
        DataFusionError::Plan(msg)
            if msg.contains("not found") || msg.contains("No field named") =>
        {
            "42703"
        }
        DataFusionError::SchemaError(e, _) => match e.as_ref() {
            datafusion::common::SchemaError::FieldNotFound { .. } => "42703",
            datafusion::common::SchemaError::AmbiguousReference { .. } => "42702",
            datafusion::common::SchemaError::DuplicateQualifiedField { .. }
            | datafusion::common::SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        // A correlated subquery DataFusion cannot turn into a join.
        DataFusionError::Plan(msg) if msg.contains("Correlated") && msg.contains("subquery") => {
            "0A000"
        }
        DataFusionError::Plan(msg) if msg.starts_with("Invalid function") => "42883",
        DataFusionError::Plan(msg) if msg.contains("require unique expression names") => "42701",
        DataFusionError::Plan(_) => "42000",
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::External(e) => match e.downcast_ref::<ServerError>() {
            Some(inner) => inner.sqlstate(),
            None => match e.downcast_ref::<PgsemError>() {
                Some(PgsemError::Value { sqlstate, .. }) => sqlstate,
                // Only value errors are raised inside expressions.
                Some(_) | None => "XX000",
            },
        },
        DataFusionError::ArrowError(err, _) => match err.as_ref() {
            arrow::error::ArrowError::DivideByZero => "22012",
            arrow::error::ArrowError::ArithmeticOverflow(_) => "22003",
            arrow::error::ArrowError::CastError(msg) if msg.contains("Can't cast value") => "22003",
            arrow::error::ArrowError::InvalidArgumentError(msg)
                if msg.contains("too large to store") || msg.contains("too small to store") =>
            {
                "22003"
            }
            arrow::error::ArrowError::CastError(_) | arrow::error::ArrowError::ParseError(_) => {
                "22P02"
            }
            arrow::error::ArrowError::ComputeError(msg) if msg.contains("overflow") => "22003",
            arrow::error::ArrowError::InvalidArgumentError(msg) if msg.contains("non-nullable") => {
                "23502"
            }
            _ => "22000",
        },
        DataFusionError::Execution(msg) if msg.contains("Divide by zero") => "22012",
        DataFusionError::Execution(msg) if msg.contains("non-nullable") => "23502",
        // PostgreSQL's cardinality_violation.
        DataFusionError::Execution(msg) if msg.contains("subquery returned more than one row") => {
            "21000"
        }
        DataFusionError::Execution(_) => "22000",
        DataFusionError::ResourcesExhausted(_) => "53200",
        _ => "XX000",
    }
}

impl From<DataFusionError> for ServerError {
    fn from(e: DataFusionError) -> Self {
        match e.find_root() {
            // A PostgreSQL error raised inside an expression: report it as
            // itself, not wrapped in the optimizer rule that evaluated it.
            DataFusionError::External(inner) => match inner.downcast_ref::<ServerError>() {
                Some(Self::Value { sqlstate, message }) => Self::Value {
                    sqlstate,
                    message: message.clone(),
                },
                // Raised by a catalog provider (a relation that cannot be
                // read): its own words, not DataFusion's wrapping.
                Some(Self::Sqlstate { code, message }) => Self::Sqlstate {
                    code,
                    message: message.clone(),
                },
                // Any other of Weir's errors raised inside a plan: its
                // SQLSTATE and words, without DataFusion's "External error".
                Some(inner) => Self::Sqlstate {
                    code: inner.sqlstate(),
                    message: inner.to_string(),
                },
                None => match inner.downcast_ref::<PgsemError>() {
                    Some(PgsemError::Value { sqlstate, message }) => Self::Value {
                        sqlstate,
                        message: message.clone(),
                    },
                    _ => Self::DataFusion(e),
                },
            },
            DataFusionError::Plan(msg)
                if msg.starts_with("table '") && msg.ends_with("' not found") =>
            {
                let name = msg["table '".len()..msg.len() - "' not found".len()].to_string();
                let name = name.rsplit('.').next().unwrap_or(&name).to_string();
                Self::UndefinedTable(name)
            }
            _ => Self::DataFusion(e),
        }
    }
}

/// pgsem's errors keep the SQLSTATE they were raised with: a value error
/// is a [`ServerError::Value`] (22P02, 22003, 22007, ...), bad COPY data
/// 22000, a bad option 22023, a broken contract or a failed session
/// template XX000, DataFusion's errors as DataFusion's.
impl From<PgsemError> for ServerError {
    fn from(e: PgsemError) -> Self {
        match e {
            PgsemError::Value { sqlstate, message } => Self::Value { sqlstate, message },
            e @ PgsemError::CopyData { .. } => Self::DataException(e.to_string()),
            PgsemError::InvalidParameterValue(message) => Self::InvalidParameterValue(message),
            PgsemError::Internal(message) => Self::Internal(message),
            e @ PgsemError::PgCatalogSetup(_) => Self::Internal(e.to_string()),
            PgsemError::DataFusion(e) => e.into(),
        }
    }
}

impl From<weir_pgsem::datetime_in::DateTimeError> for ServerError {
    fn from(e: weir_pgsem::datetime_in::DateTimeError) -> Self {
        PgsemError::from(e).into()
    }
}

impl From<EngineError> for ServerError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::DuplicateKey { key } => Self::UniqueViolation {
                constraint: String::new(),
                columns: String::new(),
                values: key,
            },
            EngineError::UniqueViolation {
                index,
                columns,
                values,
            } => Self::UniqueViolation {
                constraint: index,
                columns,
                values,
            },
            EngineError::Evaluation(e) => Self::DataFusion(e),
            EngineError::Arrow(e) => e.into(),
            EngineError::State(e) => Self::State(e),
            EngineError::Connector(e) => Self::Connector(e),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<arrow::error::ArrowError> for ServerError {
    fn from(e: arrow::error::ArrowError) -> Self {
        Self::DataFusion(DataFusionError::from(e))
    }
}

impl From<weir_planner::PlanError> for ServerError {
    fn from(e: weir_planner::PlanError) -> Self {
        use weir_planner::PlanError;
        match e {
            PlanError::Unsupported(what) => Self::FeatureNotSupported(what),
            PlanError::InvalidArgument(what) => Self::InvalidParameterValue(what),
            PlanError::DataFusion(e) => e.into(),
            PlanError::Arrow(e) => e.into(),
            PlanError::Engine(e) => e.into(),
        }
    }
}

impl From<weir_common::ChangeBatchError> for ServerError {
    fn from(e: weir_common::ChangeBatchError) -> Self {
        Self::internal(e.to_string())
    }
}
