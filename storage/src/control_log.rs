//! The catalog control log: create-only entries in an object store.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::StorageError;

/// Position in the control log; revision `n` is the state after `n` entries.
pub type Revision = u64;

/// Entries live at `{prefix}/{revision:020}`; the zero-padded name makes the
/// lexical listing order the revision order.
#[derive(Debug, Clone)]
pub struct ControlLog {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl ControlLog {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self {
            store,
            prefix: Path::from(prefix),
        }
    }

    fn entry_path(&self, revision: Revision) -> Path {
        self.prefix.clone().join(format!("{revision:020}"))
    }

    /// Every entry, in revision order, as `(revision, payload)`. Revisions are
    /// dense from 1; a gap means the log was tampered with and is an error.
    pub async fn read_all(&self) -> Result<Vec<(Revision, Bytes)>, StorageError> {
        let mut metas: Vec<_> = self.store.list(Some(&self.prefix)).try_collect().await?;
        metas.sort_by(|a, b| a.location.cmp(&b.location));
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            let name = meta.location.filename().unwrap_or_default();
            let Ok(revision) = name.parse::<Revision>() else {
                // Temporary files of an interrupted local put; never an entry.
                continue;
            };
            let expected = out.len() as Revision + 1;
            if revision != expected {
                return Err(StorageError::CorruptEntry {
                    path: meta.location.to_string(),
                    reason: format!("expected revision {expected}"),
                });
            }
            let bytes = self.store.get(&meta.location).await?.bytes().await?;
            out.push((revision, bytes));
        }
        Ok(out)
    }

    /// Append an entry on top of `expected` (the revision the caller's catalog
    /// reflects). Returns the new revision. Create-only: if another writer
    /// already took `expected + 1`, nothing is written and the caller gets
    /// [`StorageError::RevisionConflict`].
    pub async fn append(&self, expected: Revision, entry: Bytes) -> Result<Revision, StorageError> {
        let revision = expected + 1;
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&self.entry_path(revision), PutPayload::from(entry), options)
            .await
        {
            Ok(_) => Ok(revision),
            Err(object_store::Error::AlreadyExists { .. }) => {
                Err(StorageError::RevisionConflict { expected })
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn appends_in_order_and_rejects_a_stale_revision() {
        let log = ControlLog::new(Arc::new(InMemory::new()), "catalog");
        assert_eq!(log.append(0, Bytes::from_static(b"a")).await.unwrap(), 1);
        assert_eq!(log.append(1, Bytes::from_static(b"b")).await.unwrap(), 2);
        assert!(matches!(
            log.append(1, Bytes::from_static(b"stale")).await,
            Err(StorageError::RevisionConflict { expected: 1 })
        ));
        let all = log.read_all().await.unwrap();
        assert_eq!(
            all,
            vec![(1, Bytes::from_static(b"a")), (2, Bytes::from_static(b"b"))]
        );
    }

    #[tokio::test]
    async fn local_filesystem_honours_create_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        let log = ControlLog::new(Arc::new(store), "catalog");
        log.append(0, Bytes::from_static(b"a")).await.unwrap();
        assert!(matches!(
            log.append(0, Bytes::from_static(b"b")).await,
            Err(StorageError::RevisionConflict { .. })
        ));
        assert_eq!(log.read_all().await.unwrap().len(), 1);
    }
}
