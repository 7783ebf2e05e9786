//! The table write-ahead log: group commit with `fsync` before acknowledgement.
//!
//! On disk: one append-only file `table.log` of records
//! `[len: u32 LE][crc32 of payload: u32 LE][payload]`. A record is
//! acknowledged only after the `fsync` that covers it returns, so after a
//! crash every acknowledged record is complete; an incomplete or corrupt tail
//! can only be an unacknowledged record and is cut off at recovery.
//!
//! A record's LSN is the log position just past it. [`TableLog::truncate_before`]
//! drops the records up to an LSN once their effect is durable elsewhere (a
//! table snapshot): it rewrites the file as a header `WEIRLOG1` + the base
//! LSN (u64 LE) followed by the remaining records, and renames it over the
//! old one, so LSNs never change and a crash leaves either file whole. The
//! header cannot be mistaken for a record: `WEIR` read as a length is over
//! the 1 GiB record limit.
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
/// Starts a truncated log, followed by its base LSN.
const FILE_MAGIC: &[u8; 8] = b"WEIRLOG1";
const FILE_HEADER_LEN: usize = 16;
/// A single record larger than this is refused rather than risk a huge
/// allocation when reading a corrupt length back.
const MAX_RECORD_LEN: usize = 1 << 30;
/// Upper bound of records folded into one `fsync`.
const MAX_GROUP: usize = 1024;

enum Request {
    Append {
        payload: Bytes,
        done: oneshot::Sender<Result<Lsn, String>>,
    },
    Truncate {
        before: Lsn,
        done: oneshot::Sender<Result<u64, String>>,
    },
}

/// Handle to the log; cheap to clone, all clones feed the same writer thread.
#[derive(Clone)]
pub struct TableLog {
    requests: mpsc::Sender<Request>,
    path: PathBuf,
}

/// Where the records of the file start and which LSN that position has.
#[derive(Debug, Clone, Copy)]
struct Layout {
    header: u64,
    base: Lsn,
}

impl Layout {
    fn read(data: &[u8]) -> Self {
        if data.len() >= FILE_HEADER_LEN && &data[..8] == FILE_MAGIC {
            Self {
                header: FILE_HEADER_LEN as u64,
                base: u64::from_le_bytes(data[8..16].try_into().expect("8 bytes")),
            }
        } else {
            Self { header: 0, base: 0 }
        }
    }

    /// The file position of `lsn`.
    fn position(&self, lsn: Lsn) -> u64 {
        lsn - self.base + self.header
    }
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
        let layout = Layout::read(&contents);
        let (mut records, valid_len) = decode_records(&contents[layout.header as usize..]);
        for (lsn, _) in &mut records {
            *lsn += layout.base;
        }
        let valid_len = valid_len + layout.header as usize;
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
            .spawn(move || {
                let end = layout.base + valid_len as u64 - layout.header;
                Writer {
                    file,
                    end,
                    layout,
                    path: writer_path,
                }
                .run(rx)
            })
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
        self.call(|done| Request::Append { payload, done }).await
    }

    /// Drops every record with an LSN up to `before`, which must be an LSN
    /// [`Self::append`] returned (or earlier than the first kept record).
    /// Returns the bytes dropped. Costs a rewrite of the records after it,
    /// so call it when few records follow (right after a table snapshot).
    pub async fn truncate_before(&self, before: Lsn) -> Result<u64, StorageError> {
        self.call(|done| Request::Truncate { before, done }).await
    }

    /// Sends a request to the writer thread and waits for its answer.
    async fn call(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<u64, String>>) -> Request,
    ) -> Result<u64, StorageError> {
        let (done, wait) = oneshot::channel();
        self.requests
            .send(request(done))
            .await
            .map_err(|_| StorageError::LogClosed)?;
        match wait.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(message)) => Err(StorageError::io(&self.path, std::io::Error::other(message))),
            Err(_) => Err(StorageError::LogClosed),
        }
    }
}

/// The one thread that writes the file.
struct Writer {
    file: File,
    /// The LSN of the end of the file.
    end: Lsn,
    layout: Layout,
    path: PathBuf,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        while let Some(first) = rx.blocking_recv() {
            let mut group = Vec::new();
            let mut next = Some(first);
            while let Some(request) = next.take() {
                match request {
                    Request::Append { payload, done } => group.push((payload, done)),
                    Request::Truncate { before, done } => {
                        // Appends queued before it are written first.
                        self.append_group(std::mem::take(&mut group));
                        let _ = done.send(self.truncate(before).map_err(|e| e.to_string()));
                    }
                }
                if group.len() < MAX_GROUP {
                    next = rx.try_recv().ok();
                }
            }
            self.append_group(group);
        }
    }

    fn append_group(&mut self, group: Vec<(Bytes, oneshot::Sender<Result<Lsn, String>>)>) {
        if group.is_empty() {
            return;
        }
        let mut buf = Vec::new();
        let mut lsns = Vec::with_capacity(group.len());
        for (payload, _) in &group {
            encode_record(payload, &mut buf);
            lsns.push(self.end + buf.len() as u64);
        }
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.end += buf.len() as u64;
                for ((_, done), lsn) in group.into_iter().zip(lsns) {
                    let _ = done.send(Ok(lsn));
                }
            }
            Err(e) => {
                // The file may now hold part of this group. Cut it back so a
                // later successful group does not follow garbage, and fail
                // every waiter: none of them is acknowledged.
                tracing::error!(path = %self.path.display(), error = %e, "table log write failed");
                let position = self.layout.position(self.end);
                let _ = self.file.set_len(position);
                let _ = self.file.seek(SeekFrom::Start(position));
                for (_, done) in group {
                    let _ = done.send(Err(e.to_string()));
                }
            }
        }
    }

    /// Rewrites the file without the records up to `before`: the new file
    /// is complete and synced before it replaces the old one.
    fn truncate(&mut self, before: Lsn) -> std::io::Result<u64> {
        if before <= self.layout.base {
            return Ok(0);
        }
        if before > self.end {
            return Err(std::io::Error::other(format!(
                "cannot truncate the table log before LSN {before}: it ends at {}",
                self.end
            )));
        }
        let mut tail = Vec::new();
        self.file
            .seek(SeekFrom::Start(self.layout.position(before)))?;
        self.file.read_to_end(&mut tail)?;
        // `before` must be a record boundary: the rest must decode whole.
        let (_, valid) = decode_records(&tail);
        if valid != tail.len() {
            self.file.seek(SeekFrom::End(0))?;
            return Err(std::io::Error::other(format!(
                "LSN {before} is not a record boundary of the table log"
            )));
        }
        let tmp = self.path.with_extension("log.tmp");
        let mut next = File::create(&tmp)?;
        next.write_all(FILE_MAGIC)?;
        next.write_all(&before.to_le_bytes())?;
        next.write_all(&tail)?;
        next.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        let dropped = before - self.layout.base;
        self.file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        self.file.seek(SeekFrom::End(0))?;
        self.layout = Layout {
            header: FILE_HEADER_LEN as u64,
            base: before,
        };
        Ok(dropped)
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

    #[tokio::test]
    async fn truncation_keeps_lsns_and_the_records_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = TableLog::open(dir.path()).unwrap();
        let mut lsns = Vec::new();
        for i in 0..10 {
            lsns.push(log.append(Bytes::from(format!("r{i}"))).await.unwrap());
        }
        let dropped = log.truncate_before(lsns[5]).await.unwrap();
        assert_eq!(dropped, lsns[5]);
        assert_eq!(
            log.truncate_before(lsns[2]).await.unwrap(),
            0,
            "already gone"
        );
        assert!(
            log.truncate_before(lsns[9] + 100).await.is_err(),
            "past the end"
        );
        assert!(
            log.truncate_before(lsns[6] + 1).await.is_err(),
            "not a record boundary"
        );
        let after = log.append(Bytes::from_static(b"after")).await.unwrap();
        assert!(after > lsns[9]);
        drop(log);
        let (log, records) = TableLog::open(dir.path()).unwrap();
        let kept: Vec<(Lsn, String)> = records
            .iter()
            .map(|(l, r)| (*l, String::from_utf8(r.to_vec()).unwrap()))
            .collect();
        let mut expected: Vec<(Lsn, String)> =
            (6..10).map(|i| (lsns[i], format!("r{i}"))).collect();
        expected.push((after, "after".into()));
        assert_eq!(kept, expected, "LSNs survive truncation and reopening");
        // A truncated log truncates again and still appends after reopening.
        log.truncate_before(lsns[8]).await.unwrap();
        let last = log.append(Bytes::from_static(b"last")).await.unwrap();
        drop(log);
        let (_, records) = TableLog::open(dir.path()).unwrap();
        let lsns_now: Vec<Lsn> = records.iter().map(|(l, _)| *l).collect();
        assert_eq!(lsns_now, vec![lsns[9], after, last]);
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
