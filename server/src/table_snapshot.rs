//! Table snapshots: the contents of every table as of one table-log LSN, so
//! the log before that LSN can be truncated (log compaction).
//!
//! A snapshot is one file `tables/snapshot-{lsn:020}` in the data
//! directory: `WTS1`, the CRC-32 of the payload (u32 LE), then the payload,
//! a [`WalRecord`] with, per table, a [`TableWrite::Rewrite`] (its layout
//! and first rows) and inserts of the rest (hidden row ids included). Opening replays it onto empty tables, then the log
//! records after its LSN. It is written to a temporary name, synced and
//! renamed, so a crash leaves a whole snapshot or none; older snapshots are
//! removed after a newer one lands.
//!
//! Snapshots are taken at the LSN a projection checkpoint covers (or at
//! any LSN when no projection exists), so the log kept after truncation
//! always holds what restoring projections from the latest seal replays.
//! They are taken when the log has grown by at least as much as the last
//! snapshot's size (and a configured floor) since it: amortized, a
//! snapshot costs O(bytes written to the log).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::RecordBatch;
use weir_common::{ChangeBatch, ObjectId};
use weir_engine::TableState;
use weir_storage::{Lsn, TableLog};

use crate::error::ServerError;
use crate::wal::{TableWrite, WalRecord};

const MAGIC: &[u8; 4] = b"WTS1";
const PREFIX: &str = "snapshot-";

fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("tables")
}

/// The LSN of the latest table snapshot in `data_dir` (read it with
/// [`load`]). Knowing it before reading the snapshot lets opening start on
/// what depends only on it (reading projection state) while the tables load.
pub fn latest_lsn(data_dir: &Path) -> Result<Option<Lsn>, ServerError> {
    Ok(list(data_dir)?.pop().map(|(lsn, _)| lsn))
}

/// The writes that rebuild the tables as of the snapshot at `lsn`. A
/// damaged snapshot is an error, not skipped: the log before it may be gone.
pub fn load(data_dir: &Path, lsn: Lsn) -> Result<WalRecord, ServerError> {
    let path = dir(data_dir).join(format!("{PREFIX}{lsn:020}"));
    let bytes = std::fs::read(&path)
        .map_err(|e| ServerError::internal(format!("reading {}: {e}", path.display())))?;
    let damaged = || ServerError::internal(format!("table snapshot {} is damaged", path.display()));
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(damaged());
    }
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if crc32fast::hash(&bytes[8..]) != crc {
        return Err(damaged());
    }
    WalRecord::decode(&bytes::Bytes::from(bytes).slice(8..))
}

/// The size of the snapshot at `lsn` (0 if it is gone).
pub fn size_of(data_dir: &Path, lsn: Lsn) -> u64 {
    std::fs::metadata(dir(data_dir).join(format!("{PREFIX}{lsn:020}"))).map_or(0, |m| m.len())
}

/// Snapshots, oldest first.
fn list(data_dir: &Path) -> Result<Vec<(Lsn, PathBuf)>, ServerError> {
    let dir = dir(data_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ServerError::internal(format!(
                "listing {}: {e}",
                dir.display()
            )));
        }
    };
    let mut out: Vec<(Lsn, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let lsn = e.file_name().to_str()?.strip_prefix(PREFIX)?.parse().ok()?;
            Some((lsn, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Writes the snapshot of `tables` at `lsn` and removes older ones.
/// Returns its size in bytes.
pub fn write(
    data_dir: &Path,
    lsn: Lsn,
    tables: &HashMap<ObjectId, TableState>,
) -> Result<u64, ServerError> {
    let mut ops = Vec::new();
    for (id, state) in tables {
        // The first write of each table sets its layout (columns and key)
        // as of the snapshot, which the control log's replay may not know
        // (it ends at the latest ALTER TABLE, not at this LSN).
        let batches = state.scan()?;
        let mut batches = batches.iter();
        let first = batches
            .next()
            .cloned()
            .unwrap_or_else(|| RecordBatch::new_empty(state.schema().clone()));
        ops.push((
            *id,
            TableWrite::Rewrite {
                key: state.key_columns().to_vec(),
                rows: first,
            },
        ));
        for batch in batches {
            ops.push((
                *id,
                TableWrite::Changes(ChangeBatch::inserts(batch.clone())),
            ));
        }
    }
    let record = WalRecord {
        txn: uuid::Uuid::nil(),
        has_ddl: false,
        ops,
    };
    let payload = record.encode()?;
    let dir = dir(data_dir);
    let io = |what: &str, e: std::io::Error| {
        ServerError::internal(format!("{what} {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(&dir).map_err(|e| io("creating", e))?;
    let path = dir.join(format!("{PREFIX}{lsn:020}"));
    let tmp = dir.join(format!("{PREFIX}{lsn:020}.tmp"));
    let mut file = std::fs::File::create(&tmp).map_err(|e| io("writing a snapshot in", e))?;
    file.write_all(MAGIC)
        .and_then(|()| file.write_all(&crc32fast::hash(&payload).to_le_bytes()))
        .and_then(|()| file.write_all(&payload))
        .and_then(|()| file.sync_all())
        .map_err(|e| io("writing a snapshot in", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming a snapshot in", e))?;
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing", e))?;
    for (older, old_path) in list(data_dir)? {
        if older < lsn {
            let _ = std::fs::remove_file(old_path);
        }
    }
    Ok(8 + payload.len() as u64)
}

/// Decides when to snapshot the tables and truncate the log behind them.
pub struct Compactor {
    data_dir: PathBuf,
    log: TableLog,
    /// Log growth below which no snapshot is taken.
    min_bytes: u64,
    /// LSN and size of the latest snapshot (or attempt: a failed one is
    /// retried after as much growth again).
    last: Arc<parking_lot::Mutex<(Lsn, u64)>>,
    running: Arc<AtomicBool>,
}

impl Compactor {
    pub fn new(data_dir: PathBuf, log: TableLog, min_bytes: u64, last: (Lsn, u64)) -> Self {
        Self {
            data_dir,
            log,
            min_bytes,
            last: Arc::new(parking_lot::Mutex::new(last)),
            running: Arc::default(),
        }
    }
}

/// The table log's "on sealed": a seal covering `lsn` lets the log before
/// it go, once the tables as of `lsn` are snapshotted.
impl weir_engine::runtime::TableLogCompaction for Compactor {
    /// Whether a snapshot at `lsn` is worth taking now.
    fn due(&self, lsn: Lsn) -> bool {
        let (last_lsn, last_size) = *self.last.lock();
        lsn > last_lsn
            && lsn - last_lsn >= self.min_bytes.max(last_size)
            && !self.running.load(Ordering::Acquire)
    }

    /// Snapshots `tables` (the tables as of `lsn`) and then truncates the
    /// log before `lsn`, in the background. A failure is logged; the log
    /// is then kept and the next attempt comes at the next due point.
    fn compact(&self, lsn: Lsn, tables: Arc<HashMap<ObjectId, TableState>>) {
        self.running.store(true, Ordering::Release);
        {
            let mut last = self.last.lock();
            last.0 = lsn;
        }
        let last = self.last.clone();
        let data_dir = self.data_dir.clone();
        let log = self.log.clone();
        let running = self.running.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let written = tokio::task::spawn_blocking(move || write(&data_dir, lsn, &tables)).await;
            let outcome = match written {
                Ok(Ok(bytes)) => log
                    .truncate_before(lsn)
                    .await
                    .map(|dropped| (bytes, dropped))
                    .map_err(ServerError::from),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(ServerError::internal(format!("table snapshot task: {e}"))),
            };
            match outcome {
                Ok((bytes, dropped)) => {
                    last.lock().1 = bytes;
                    tracing::info!(
                        lsn,
                        snapshot_bytes = bytes,
                        log_bytes_dropped = dropped,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "tables snapshotted; the table log before it is truncated"
                    )
                }
                Err(e) => {
                    tracing::error!(lsn, error = %e, "table snapshot failed; the table log is kept")
                }
            }
            running.store(false, Ordering::Release);
        });
    }
}
