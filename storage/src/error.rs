use std::path::PathBuf;

/// Every way storage can fail. Callers classify: `RevisionConflict` is
/// retryable by re-reading, `Locked` and `LogPoisoned` are fatal for the process, `Io` and
/// `ObjectStore` may be transient.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("object store error: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error(
        "catalog revision conflict: expected revision {expected}, but it was already taken by another writer"
    )]
    RevisionConflict { expected: u64 },
    #[error("corrupt control-log entry {path}: {reason}")]
    CorruptEntry { path: String, reason: String },
    #[error("data directory {path} is in use by another weir process (lock held on {path}/LOCK)")]
    Locked { path: PathBuf },
    #[error("the table log writer has stopped; the server must restart")]
    LogClosed,
    /// A write or `fsync` of the table log failed. Fatal for the process: a
    /// later `fsync` could report success over lost pages, so the log takes
    /// no more writes and none after the failure was acknowledged.
    #[error(
        "the table log {path} failed to write or fsync ({source}) and accepts no more writes; no write after the failure was acknowledged. Restart Weir: it recovers every acknowledged write from the log"
    )]
    LogPoisoned {
        path: PathBuf,
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
}

impl StorageError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
