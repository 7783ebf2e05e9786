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
//! # Appending: a ticket now, durability later
//!
//! [`TableLog::enqueue`] is synchronous: under one small lock it assigns the
//! record its LSN (the end of the previous enqueued record plus its own
//! length) and queues it for the writer, so LSNs follow enqueue order and the
//! caller knows its LSN before anything is written. It returns an
//! [`Appended`] ticket; [`Appended::durable`] resolves once the `fsync`
//! covering the record returned. A committer can thus validate and enqueue
//! under its own lock, release it, and wait for durability outside it, which
//! is what lets concurrent commits share an `fsync`. [`TableLog::append`] is
//! both steps in one.
//!
//! Writes go through one dedicated thread: it takes every request waiting in
//! its queue (up to [`MAX_GROUP`]), writes them all and syncs once (group
//! commit), so N concurrent committers pay for one `fsync`, not N.
//! [`TableLog::syncs`] counts those `fsync`s.
//!
//! # A failed write or `fsync` poisons the log
//!
//! After a failed `fsync` the kernel may have dropped the dirty pages and
//! report success on the next one, so a retry proves nothing (PostgreSQL's
//! "fsyncgate"; it PANICs). Here the writer fails the group, every record
//! queued behind it, and every later enqueue, with
//! [`StorageError::LogPoisoned`]: no record after the failure is ever
//! acknowledged. The operator restarts the server, which recovers from what
//! is complete on disk. Acknowledged records are unaffected: their `fsync`
//! had returned.
//!
//! Tests inject failures with a hook the writer calls before each group's
//! `fsync` (`open_with_sync_hook`, under the `testing` feature).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::StorageError;

/// Byte offset just past a record: a later record always has a larger one.
pub type Lsn = u64;

/// A fault hook the writer calls after writing a group and before its
/// `fsync`; an error stands for the `fsync` failing. It may block, which
/// holds the group (and lets records queue up behind it).
pub type SyncHook = Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// Why the log stopped: the first failed write or `fsync`, shared by every
/// request failed because of it.
type Poison = Arc<std::io::Error>;

const HEADER_LEN: usize = 8;
/// Starts a truncated log, followed by its base LSN.
const FILE_MAGIC: &[u8; 8] = b"WEIRLOG1";
const FILE_HEADER_LEN: usize = 16;
/// A single record larger than this is refused rather than risk a huge
/// allocation when reading a corrupt length back.
const MAX_RECORD_LEN: usize = 1 << 30;
/// Upper bound of records folded into one `fsync`.
pub const MAX_GROUP: usize = 1024;

enum Request {
    Append {
        /// The LSN [`TableLog::enqueue`] promised; the writer checks it.
        lsn: Lsn,
        payload: Bytes,
        done: oneshot::Sender<Result<(), Poison>>,
    },
    Truncate {
        before: Lsn,
        done: oneshot::Sender<Result<u64, String>>,
    },
}

/// The enqueue side: the LSN the next record ends before, and the queue,
/// under one lock so that LSN order is queue order. The queue is unbounded
/// because every committer waits for its record's durability: it holds at
/// most one record per concurrent committer.
struct Tail {
    end: Lsn,
    requests: mpsc::UnboundedSender<Request>,
}

/// Handle to the log; cheap to clone, all clones feed the same writer thread.
#[derive(Clone)]
pub struct TableLog {
    tail: Arc<Mutex<Tail>>,
    /// Set once, by the writer, at the first failed write or `fsync`.
    poison: Arc<OnceLock<Poison>>,
    syncs: Arc<AtomicU64>,
    path: PathBuf,
}

/// A record's place in the log, handed out at enqueue: its LSN, and the
/// wait for the `fsync` that covers it.
#[must_use = "a record is not durable until `durable` returns"]
#[derive(Debug)]
pub struct Appended {
    lsn: Lsn,
    wait: oneshot::Receiver<Result<(), Poison>>,
    path: PathBuf,
}

impl Appended {
    /// The record's LSN, final from enqueue on.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Waits for the `fsync` covering the record; returns its LSN. An error
    /// means the record is not acknowledged (and the log is poisoned).
    pub async fn durable(self) -> Result<Lsn, StorageError> {
        match self.wait.await {
            Ok(Ok(())) => Ok(self.lsn),
            Ok(Err(source)) => Err(StorageError::LogPoisoned {
                path: self.path,
                source,
            }),
            Err(_) => Err(StorageError::LogClosed),
        }
    }
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
    /// record in order with its LSN (what `enqueue` returned for it) and a
    /// handle positioned after them.
    pub fn open(dir: &Path) -> Result<(Self, Vec<(Lsn, Bytes)>), StorageError> {
        Self::open_inner(dir, None)
    }

    /// [`Self::open`] with `hook` called before every group `fsync`, to
    /// inject failures and hold groups open in tests.
    #[cfg(any(test, feature = "testing"))]
    pub fn open_with_sync_hook(
        dir: &Path,
        hook: SyncHook,
    ) -> Result<(Self, Vec<(Lsn, Bytes)>), StorageError> {
        Self::open_inner(dir, Some(hook))
    }

    fn open_inner(
        dir: &Path,
        hook: Option<SyncHook>,
    ) -> Result<(Self, Vec<(Lsn, Bytes)>), StorageError> {
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
        let contents = Bytes::from(contents);
        let (mut records, valid_len) = decode_records(&contents.slice(layout.header as usize..));
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
        let end = layout.base + valid_len as u64 - layout.header;
        let (tx, rx) = mpsc::unbounded_channel();
        let log = Self {
            tail: Arc::new(Mutex::new(Tail { end, requests: tx })),
            poison: Arc::default(),
            syncs: Arc::default(),
            path: path.clone(),
        };
        let writer = Writer {
            file,
            end,
            layout,
            path: path.clone(),
            poison: log.poison.clone(),
            syncs: log.syncs.clone(),
            hook,
        };
        std::thread::Builder::new()
            .name("weir-table-log".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StorageError::io(&path, e))?;
        Ok((log, records))
    }

    /// Queues one record and returns its ticket: the LSN, assigned now in
    /// enqueue order, and the wait for its `fsync`. Fails at once if the
    /// log is poisoned or the record is too large.
    pub fn enqueue(&self, payload: Bytes) -> Result<Appended, StorageError> {
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
        self.check_poison()?;
        let (done, wait) = oneshot::channel();
        let mut tail = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
        let lsn = tail.end + (HEADER_LEN + payload.len()) as u64;
        tail.requests
            .send(Request::Append { lsn, payload, done })
            .map_err(|_| StorageError::LogClosed)?;
        tail.end = lsn;
        Ok(Appended {
            lsn,
            wait,
            path: self.path.clone(),
        })
    }

    /// Appends one record; returns its LSN once it is on disk (after `fsync`).
    pub async fn append(&self, payload: Bytes) -> Result<Lsn, StorageError> {
        self.enqueue(payload)?.durable().await
    }

    /// The error every write gets once a write or `fsync` failed.
    pub fn check_poison(&self) -> Result<(), StorageError> {
        match self.poison.get() {
            Some(source) => Err(StorageError::LogPoisoned {
                path: self.path.clone(),
                source: source.clone(),
            }),
            None => Ok(()),
        }
    }

    /// How many group `fsync`s of appended records have returned: with
    /// concurrent committers, fewer than the records appended.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Drops every record with an LSN up to `before`, which must be an LSN
    /// [`Self::enqueue`] returned (or earlier than the first kept record)
    /// and durable. Returns the bytes dropped. Costs a rewrite of the
    /// records after it, so call it when few records follow (right after a
    /// table snapshot).
    pub async fn truncate_before(&self, before: Lsn) -> Result<u64, StorageError> {
        self.check_poison()?;
        let (done, wait) = oneshot::channel();
        self.tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            .send(Request::Truncate { before, done })
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
    poison: Arc<OnceLock<Poison>>,
    syncs: Arc<AtomicU64>,
    hook: Option<SyncHook>,
}

type Group = Vec<(Lsn, Bytes, oneshot::Sender<Result<(), Poison>>)>;

impl Writer {
    fn run(mut self, mut rx: mpsc::UnboundedReceiver<Request>) {
        while let Some(first) = rx.blocking_recv() {
            let mut group = Vec::new();
            let mut next = Some(first);
            while let Some(request) = next.take() {
                match request {
                    Request::Append { lsn, payload, done } => group.push((lsn, payload, done)),
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

    fn append_group(&mut self, group: Group) {
        if group.is_empty() {
            return;
        }
        if let Some(poison) = self.poison.get() {
            // Queued behind a failure: validated on top of a record that
            // never became durable, so none may be acknowledged.
            for (_, _, done) in group {
                let _ = done.send(Err(poison.clone()));
            }
            return;
        }
        let mut buf = Vec::new();
        for (lsn, payload, _) in &group {
            encode_record(payload, &mut buf);
            debug_assert_eq!(
                *lsn,
                self.end + buf.len() as u64,
                "LSNs follow enqueue order"
            );
        }
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| self.hook.as_ref().map_or(Ok(()), |hook| hook()))
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.end += buf.len() as u64;
                self.syncs.fetch_add(1, Ordering::Relaxed);
                for (_, _, done) in group {
                    let _ = done.send(Ok(()));
                }
            }
            Err(e) => {
                tracing::error!(
                    path = %self.path.display(),
                    error = %e,
                    "table log write or fsync failed: the log accepts no more writes until Weir restarts"
                );
                let poison = self.poison.get_or_init(|| Arc::new(e)).clone();
                // Best effort: cut the group off so a restart does not find
                // records nobody was told about. If this fails too, recovery
                // may replay them, which is allowed (never acknowledged is
                // not the same as never happened).
                let position = self.layout.position(self.end);
                let _ = self.file.set_len(position);
                let _ = self.file.seek(SeekFrom::Start(position));
                for (_, _, done) in group {
                    let _ = done.send(Err(poison.clone()));
                }
            }
        }
    }

    /// Rewrites the file without the records up to `before`: the new file
    /// is complete and synced before it replaces the old one.
    fn truncate(&mut self, before: Lsn) -> std::io::Result<u64> {
        if let Some(poison) = self.poison.get() {
            return Err(std::io::Error::other(format!(
                "the table log is poisoned by an earlier failure: {poison}"
            )));
        }
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
        let tail = Bytes::from(tail);
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
///
/// The records are slices of `data`: a log read at open is not copied
/// again record by record.
fn decode_records(data: &Bytes) -> (Vec<(Lsn, Bytes)>, usize) {
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
        records.push((pos as Lsn, data.slice(start..start + len)));
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
        let (records, valid) = decode_records(&Bytes::from(data));
        assert_eq!(records.len(), 1);
        assert_eq!(valid, first_len);
    }
}
