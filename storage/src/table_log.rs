//! The table write-ahead log: group commit with `fsync` before acknowledgement.
//!
//! On disk: one append-only file `table.log` of records
//! `[len: u32 LE][crc32 of payload: u32 LE][payload]`. A record is
//! acknowledged only after the `fsync` that covers it returns, so after a
//! crash every acknowledged record is complete; an incomplete or corrupt tail
//! can only be an unacknowledged record and is cut off at recovery.
//!
//! Writes go through one dedicated thread: it takes every request waiting in
//! its queue, writes them all and syncs once (group commit), so N concurrent
//! committers pay for one `fsync`, not N.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::StorageError;

/// Byte offset just past a record: a later record always has a larger one.
pub type Lsn = u64;

const HEADER_LEN: usize = 8;
/// A single record larger than this is refused rather than risk a huge
/// allocation when reading a corrupt length back.
const MAX_RECORD_LEN: usize = 1 << 30;
/// Upper bound of records folded into one `fsync`.
const MAX_GROUP: usize = 1024;

struct AppendRequest {
    payload: Bytes,
    done: oneshot::Sender<Result<Lsn, String>>,
}

/// Handle to the log; cheap to clone, all clones feed the same writer thread.
#[derive(Clone)]
pub struct TableLog {
    requests: mpsc::Sender<AppendRequest>,
    path: PathBuf,
}

impl std::fmt::Debug for TableLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableLog")
            .field("path", &self.path)
            .finish()
    }
}

impl TableLog {
    /// Opens (creating if needed) the log in `dir`, returns every complete
    /// record in order with its LSN (what `append` returned for it) and a
    /// handle positioned after them.
    pub fn open(dir: &Path) -> Result<(Self, Vec<(Lsn, Bytes)>), StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
        let path = dir.join("table.log");
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        let mut contents = Vec::new();
        file.read_to_end(&mut contents)
            .map_err(|e| StorageError::io(&path, e))?;
        let (records, valid_len) = decode_records(&contents);
        if valid_len < contents.len() {
            tracing::warn!(
                path = %path.display(),
                dropped_bytes = contents.len() - valid_len,
                "cutting an incomplete tail off the table log (an unacknowledged write)"
            );
            file.set_len(valid_len as u64)
                .map_err(|e| StorageError::io(&path, e))?;
            file.sync_all().map_err(|e| StorageError::io(&path, e))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(|e| StorageError::io(&path, e))?;
        let (tx, rx) = mpsc::channel(4 * MAX_GROUP);
        let writer_path = path.clone();
        std::thread::Builder::new()
            .name("weir-table-log".into())
            .spawn(move || writer_loop(file, valid_len as u64, rx, writer_path))
            .map_err(|e| StorageError::io(&path, e))?;
        Ok((Self { requests: tx, path }, records))
    }

    /// Appends one record; returns once it is on disk (after `fsync`).
    pub async fn append(&self, payload: Bytes) -> Result<Lsn, StorageError> {
        if payload.len() > MAX_RECORD_LEN {
            return Err(StorageError::io(
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "a single commit of {} bytes exceeds the 1 GiB limit",
                        payload.len()
                    ),
                ),
            ));
        }
        let (done, wait) = oneshot::channel();
        self.requests
            .send(AppendRequest { payload, done })
            .await
            .map_err(|_| StorageError::LogClosed)?;
        match wait.await {
            Ok(Ok(lsn)) => Ok(lsn),
            Ok(Err(message)) => Err(StorageError::io(&self.path, std::io::Error::other(message))),
            Err(_) => Err(StorageError::LogClosed),
        }
    }
}

fn writer_loop(
    mut file: File,
    mut offset: u64,
    mut rx: mpsc::Receiver<AppendRequest>,
    path: PathBuf,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let mut buf = Vec::new();
        let mut lsns = Vec::with_capacity(group.len());
        for request in &group {
            encode_record(&request.payload, &mut buf);
            lsns.push(offset + buf.len() as u64);
        }
        let written = file.write_all(&buf).and_then(|()| file.sync_data());
        match written {
            Ok(()) => {
                offset += buf.len() as u64;
                for (request, lsn) in group.into_iter().zip(lsns) {
                    let _ = request.done.send(Ok(lsn));
                }
            }
            Err(e) => {
                // The file may now hold part of this group. Cut it back so a
                // later successful group does not follow garbage, and fail
                // every waiter: none of them is acknowledged.
                tracing::error!(path = %path.display(), error = %e, "table log write failed");
                let _ = file.set_len(offset);
                let _ = file.seek(SeekFrom::Start(offset));
                for request in group {
                    let _ = request.done.send(Err(e.to_string()));
                }
            }
        }
    }
}

fn encode_record(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Splits `data` into complete, checksummed records; returns them and the
/// length of the valid prefix.
fn decode_records(data: &[u8]) -> (Vec<(Lsn, Bytes)>, usize) {
    let mut records = Vec::new();
    let mut pos = 0;
    while data.len() - pos >= HEADER_LEN {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(data[pos + 4..pos + 8].try_into().expect("4 bytes"));
        let start = pos + HEADER_LEN;
        if len > MAX_RECORD_LEN || data.len() - start < len {
            break;
        }
        let payload = &data[start..start + len];
        if crc32fast::hash(payload) != crc {
            break;
        }
        pos = start + len;
        records.push((pos as Lsn, Bytes::copy_from_slice(payload)));
    }
    (records, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn acknowledged_records_survive_reopen_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut lsns = {
            let (log, existing) = TableLog::open(dir.path()).unwrap();
            assert!(existing.is_empty());
            let appends = (0..50).map(|i| {
                let log = log.clone();
                async move {
                    log.append(Bytes::from(format!("record {i}")))
                        .await
                        .unwrap()
                }
            });
            futures::future::join_all(appends).await
        };
        lsns.sort();
        // Simulate a crash in the middle of writing a record.
        let path = dir.path().join("table.log");
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[200, 0, 0, 0, 1, 2]).unwrap();
        drop(file);

        let (log, records) = TableLog::open(dir.path()).unwrap();
        assert_eq!(records.len(), 50);
        let reopened: Vec<Lsn> = records.iter().map(|(lsn, _)| *lsn).collect();
        assert_eq!(reopened, lsns, "open reports the LSNs append returned");
        let mut texts: Vec<String> = records
            .iter()
            .map(|(_, r)| String::from_utf8(r.to_vec()).unwrap())
            .collect();
        texts.sort();
        assert!(texts.contains(&"record 0".to_string()));
        assert!(texts.contains(&"record 49".to_string()));
        log.append(Bytes::from_static(b"after")).await.unwrap();
        drop(log);
        let (_, records) = TableLog::open(dir.path()).unwrap();
        assert_eq!(records.last().unwrap().1.as_ref(), b"after");
    }

    #[test]
    fn a_flipped_bit_ends_the_valid_prefix() {
        let mut data = Vec::new();
        encode_record(b"one", &mut data);
        let first_len = data.len();
        encode_record(b"two", &mut data);
        let last = data.len() - 1;
        data[last] ^= 1;
        let (records, valid) = decode_records(&data);
        assert_eq!(records.len(), 1);
        assert_eq!(valid, first_len);
    }
}
