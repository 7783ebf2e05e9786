//! The files sink's exactly-once protocol.
//!
//! Names, under the sink's root prefix:
//! - committed files: `part-<epoch>-<seq>-<token>.<ext>`, the epoch
//!   zero-padded to 20 digits so names sort in epoch order; `token` is
//!   drawn once per sink (when it first opens with no seal) and carried in
//!   every descriptor, so two sinks, or two Weir clusters, writing one
//!   directory never pick the same name;
//! - staged files: `_weir_staging/<sink>-<token>/g<generation>-<epoch>-<seq>.<ext>`
//!   (readers that follow the Hive convention skip `_` prefixes).
//!
//! Per epoch E: each `write` encodes its changes into one staged file (put
//! whole, durable before `pre_commit` returns); `pre_commit(E)` describes
//! every staged file not yet committed; after the seal, `commit(E)`
//! renames each described file of an epoch up to E to its final name. A
//! file whose staged copy is gone must already be at its final name with
//! the described size, so committing again after a crash is a no-op, and
//! a final name is only ever written with the bytes its descriptor names.
//!
//! Restart: the first call re-commits the sealed descriptor and deletes
//! everything else in the staging directory (epochs after the seal, made
//! again by the runtime). A deposed process can stage, under its own
//! generation's names, but never commit an epoch it did not seal, and the
//! epochs it sealed are the ones its successor re-commits: the same
//! renames. Staged files of a process that died before its first seal
//! stay behind under a token no descriptor names (docs/ops.md).

use std::path::PathBuf;

use async_trait::async_trait;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};
use weir_common::ChangeBatch;

use super::encode::encode;
use super::{NAME, Target};
use crate::changelog::{output_rows, output_schema};
use crate::{ConnectorError, Sink, SinkOpen};

/// The staging directory of every files sink, under its root.
const STAGING: &str = "_weir_staging";

/// One file staged and not yet known committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StagedFile {
    epoch: u64,
    /// The staged name and the final one, relative to the root.
    staged: String,
    name: String,
    rows: u64,
    /// Its size and CRC-32 when it was put: the receipt a commit checks
    /// (the size) and a reader can check (the CRC).
    bytes: u64,
    crc: u32,
}

/// What a seal stores for this sink.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Descriptor {
    token: String,
    generation: u64,
    /// Every file staged up to the descriptor's epoch and not committed
    /// when it was made.
    files: Vec<StagedFile>,
}

pub(crate) struct FilesSink {
    name: String,
    target: Target,
    file_schema: arrow::datatypes::SchemaRef,
    generation: u64,
    token: String,
    /// The latest seal's epoch and descriptor, until the first call
    /// re-commits it.
    sealed: Option<(u64, Descriptor)>,
    /// Files staged and not committed, in epoch order.
    pending: Vec<StagedFile>,
    /// The next file's sequence number within `seq_epoch`.
    seq: u32,
    seq_epoch: u64,
    /// What it encoded since its last receipt.
    tally: crate::Tally,
}

impl FilesSink {
    pub(crate) fn new(open: SinkOpen<'_>, target: Target) -> Result<Self, ConnectorError> {
        let sealed = open
            .sealed
            .map(|(epoch, text)| {
                serde_json::from_str::<Descriptor>(text)
                    .map(|d| (epoch, d))
                    .map_err(|e| ConnectorError::BadPosition {
                        connector: NAME.into(),
                        value: text.to_string(),
                        message: e.to_string(),
                    })
            })
            .transpose()?;
        let token = match &sealed {
            Some((_, d)) => d.token.clone(),
            None => uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
        };
        Ok(Self {
            name: open.name.to_string(),
            file_schema: output_schema(&open.schema, target.changelog),
            target,
            generation: open.generation,
            token,
            sealed,
            pending: Vec::new(),
            seq: 0,
            seq_epoch: 0,
            tally: Default::default(),
        })
    }

    fn staging_dir(&self) -> object_store::path::Path {
        self.target
            .location
            .root
            .clone()
            .join(STAGING)
            .join(format!("{}-{}", self.name, self.token))
    }

    fn path(&self, relative: &str) -> object_store::path::Path {
        self.target.location.path(relative)
    }

    /// The local file behind `relative`, for a local target.
    fn local_path(&self, relative: &str) -> Option<PathBuf> {
        let root = self.target.location.local.as_ref()?;
        Some(root.join(relative))
    }

    /// Re-commits the sealed descriptor and clears the staging directory,
    /// once, before anything else.
    async fn recover(&mut self) -> Result<(), ConnectorError> {
        let Some((epoch, descriptor)) = self.sealed.take() else {
            return Ok(());
        };
        self.commit_files(epoch, &descriptor.files).await?;
        let staging = self.staging_dir();
        let mut listed = self.target.location.store.list(Some(&staging));
        let mut stale = Vec::new();
        while let Some(meta) = futures::StreamExt::next(&mut listed).await {
            stale.push(
                meta.map_err(|e| io("listing the staging directory", e))?
                    .location,
            );
        }
        drop(listed);
        for location in stale {
            self.delete(&location).await?;
        }
        // A local store writes each file as `<name>#<n>` and renames it
        // when whole, and does not list such names: a write cut short by
        // a crash leaves one behind, which only the file system shows.
        if let Some(dir) = self.local_path(&format!("{STAGING}/{}-{}", self.name, self.token)) {
            match tokio::fs::remove_dir_all(&dir).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(ConnectorError::Transient {
                        connector: NAME.into(),
                        message: format!("clearing {}: {e}", dir.display()),
                    });
                }
            }
        }
        Ok(())
    }

    async fn delete(&self, location: &object_store::path::Path) -> Result<(), ConnectorError> {
        match self.target.location.store.delete(location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io(&format!("deleting {location}"), e)),
        }
    }

    /// Renames each of `files` of an epoch up to `epoch` to its final name.
    async fn commit_files(&self, epoch: u64, files: &[StagedFile]) -> Result<(), ConnectorError> {
        let mut renamed = false;
        for file in files.iter().filter(|f| f.epoch <= epoch) {
            let staged = self.path(&file.staged);
            let name = self.path(&file.name);
            match self.target.location.store.rename(&staged, &name).await {
                Ok(()) => renamed = true,
                // Renamed before a crash (or by the process this one
                // deposed): the final file must be there, whole.
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io(&format!("renaming {staged} to {name}"), e)),
            }
            let meta = match self.target.location.store.head(&name).await {
                Ok(meta) => meta,
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(ConnectorError::Rejected {
                        connector: NAME.into(),
                        message: format!(
                            "epoch {} of sink {}: neither the staged file {staged} nor the committed file {name} exists; \
                             something outside Weir removed it",
                            file.epoch, self.name
                        ),
                    });
                }
                Err(e) => return Err(io(&format!("checking {name}"), e)),
            };
            if meta.size != file.bytes {
                return Err(ConnectorError::Rejected {
                    connector: NAME.into(),
                    message: format!(
                        "{name} holds {} bytes where sink {} wrote {}; something outside Weir changed it",
                        meta.size, self.name, file.bytes
                    ),
                });
            }
        }
        if renamed && let Some(root) = &self.target.location.local {
            sync_local(root.clone()).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for FilesSink {
    fn receipt(&mut self) -> crate::Receipt {
        self.tally.take()
    }

    async fn write(&mut self, epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        self.recover().await?;
        if changes.is_empty() {
            return Ok(());
        }
        let rows = output_rows(
            NAME,
            changes,
            epoch,
            &self.file_schema,
            self.target.changelog,
        )?;
        if rows.num_rows() == 0 {
            return Ok(());
        }
        crate::changelog::tally_output(NAME, &mut self.tally, &rows, self.target.changelog)?;
        let mut bytes = encode(self.target.format, &rows)?;
        if self.target.gzip {
            bytes = gzip(&bytes)?;
        }
        if self.seq_epoch != epoch {
            self.seq_epoch = epoch;
            self.seq = 0;
        }
        let ext = match self.target.gzip {
            true => format!("{}.gz", self.target.format.extension()),
            false => self.target.format.extension().to_string(),
        };
        let file = StagedFile {
            epoch,
            staged: format!(
                "{STAGING}/{}-{}/g{}-{epoch:020}-{:04}.{ext}",
                self.name, self.token, self.generation, self.seq
            ),
            name: format!("part-{epoch:020}-{:04}-{}.{ext}", self.seq, self.token),
            rows: rows.num_rows() as u64,
            bytes: bytes.len() as u64,
            crc: crc32fast::hash(&bytes),
        };
        self.seq += 1;
        let location = self.path(&file.staged);
        self.target
            .location
            .store
            .put(&location, bytes::Bytes::from(bytes).into())
            .await
            .map_err(|e| io(&format!("writing {location}"), e))?;
        if let Some(local) = self.local_path(&file.staged) {
            let dir = local.parent().map(PathBuf::from);
            sync_local(local).await?;
            if let Some(dir) = dir {
                sync_local(dir).await?;
            }
        }
        self.pending.push(file);
        Ok(())
    }

    async fn pre_commit(&mut self, _epoch: u64) -> Result<String, ConnectorError> {
        self.recover().await?;
        let descriptor = Descriptor {
            token: self.token.clone(),
            generation: self.generation,
            files: self.pending.clone(),
        };
        Ok(serde_json::to_string(&descriptor).expect("descriptors serialize"))
    }

    async fn commit(&mut self, epoch: u64, descriptor: &str) -> Result<(), ConnectorError> {
        self.recover().await?;
        let descriptor: Descriptor =
            serde_json::from_str(descriptor).map_err(|e| ConnectorError::BadPosition {
                connector: NAME.into(),
                value: descriptor.to_string(),
                message: e.to_string(),
            })?;
        self.commit_files(epoch, &descriptor.files).await?;
        self.pending.retain(|f| f.epoch > epoch);
        Ok(())
    }

    async fn abort(&mut self, epoch: u64) -> Result<(), ConnectorError> {
        self.recover().await?;
        let dropped: Vec<StagedFile> = self
            .pending
            .iter()
            .filter(|f| f.epoch > epoch)
            .cloned()
            .collect();
        for file in &dropped {
            self.delete(&self.path(&file.staged)).await?;
        }
        self.pending.retain(|f| f.epoch <= epoch);
        Ok(())
    }
}

/// `bytes` gzip-compressed.
fn gzip(bytes: &[u8]) -> Result<Vec<u8>, ConnectorError> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish())
        .map_err(|e| ConnectorError::Rejected {
            connector: NAME.into(),
            message: format!("compressing a file: {e}"),
        })
}

fn io(what: &str, e: object_store::Error) -> ConnectorError {
    ConnectorError::Transient {
        connector: NAME.into(),
        message: format!("{what}: {e}"),
    }
}

/// `fsync` of a local file or directory: a staged file and its directory
/// entry must survive a crash of the machine once the seal naming it is
/// durable, and so must a commit's renames.
async fn sync_local(path: PathBuf) -> Result<(), ConnectorError> {
    let shown = path.display().to_string();
    tokio::task::spawn_blocking(move || std::fs::File::open(&path)?.sync_all())
        .await
        .map_err(|e| e.to_string())
        .and_then(|synced| synced.map_err(|e| e.to_string()))
        .map_err(|e| ConnectorError::Transient {
            connector: NAME.into(),
            message: format!("syncing {shown}: {e}"),
        })
}

#[cfg(test)]
mod tests;
