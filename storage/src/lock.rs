//! An exclusive advisory lock on a data directory (`flock` on `LOCK`).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::StorageError;

/// Held for the life of the process; dropping it releases the lock. The
/// operating system releases it too when the process dies, so a `kill -9`
/// never leaves a stale lock behind.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    pub fn acquire(dir: &Path) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
        let path = dir.join("LOCK");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file }),
            Err(TryLockError::WouldBlock) => Err(StorageError::Locked {
                path: dir.to_owned(),
            }),
            Err(TryLockError::Error(e)) => Err(StorageError::io(&path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_the_same_dir_fails() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        assert!(matches!(
            DataDirLock::acquire(dir.path()),
            Err(StorageError::Locked { .. })
        ));
        drop(first);
        DataDirLock::acquire(dir.path()).unwrap();
    }
}
