/// Errors of the engine. `DuplicateKey` is a user error (the server maps it to
/// SQLSTATE 23505); the rest are internal.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("duplicate key value violates unique constraint: key ({key}) already exists")]
    DuplicateKey { key: String },
    #[error("change batch schema does not match the table: {0}")]
    SchemaMismatch(String),
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
}
