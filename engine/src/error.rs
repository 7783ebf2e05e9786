/// Errors of the engine. `DuplicateKey` is a user error (the server maps it to
/// SQLSTATE 23505); `Evaluation` carries a DataFusion error from an
/// expression or aggregate, whose SQLSTATE the server derives; the rest are
/// internal.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("duplicate key value violates unique constraint: key ({key}) already exists")]
    DuplicateKey { key: String },
    /// A unique secondary index already has the key (SQLSTATE 23505).
    #[error(
        "duplicate key value violates unique constraint \"{index}\": Key ({columns})=({values}) already exists."
    )]
    UniqueViolation {
        index: String,
        columns: String,
        values: String,
    },
    #[error("change batch schema does not match the table: {0}")]
    SchemaMismatch(String),
    /// A checkpoint's bytes could not be read (corrupt or of another version).
    #[error("unreadable checkpoint state: {0}")]
    CorruptState(String),
    #[error("{operator}: {message}")]
    Invariant {
        operator: &'static str,
        message: String,
    },
    #[error(transparent)]
    Evaluation(#[from] datafusion::error::DataFusionError),
    #[error(transparent)]
    Change(#[from] weir_common::ChangeBatchError),
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
    /// The state backend refused or failed a checkpoint or restore.
    #[error(transparent)]
    State(#[from] weir_storage::StateBackendError),
    /// A source or sink connector failed.
    #[error(transparent)]
    Connector(#[from] weir_connectors::ConnectorError),
    /// The runtime's task is gone (the process is shutting down).
    #[error("the streaming runtime stopped")]
    Stopped,
}
