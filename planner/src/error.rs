//! [`PlanError`]: why a statement could not be planned.

use datafusion::error::DataFusionError;
use weir_engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A construct Weir cannot run (SQLSTATE 0A000); names the construct.
    #[error("{0}")]
    Unsupported(String),
    /// A well-formed statement with a bad argument (SQLSTATE 22023).
    #[error("{0}")]
    InvalidArgument(String),
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl PlanError {
    pub fn unsupported(what: impl Into<String>) -> Self {
        Self::Unsupported(what.into())
    }
}
