//! The stored formats of the state backend: object names, the partial blob
//! frame (kind + CRC), the seal manifest and the fence entry.
//!
//! Names are zero-padded so that a lexical listing is numeric order, and every
//! name can be parsed back: pruning works from listings alone.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use super::StateBackendError;

/// What a partial blob holds: the whole state of a vnode, or its change in
/// one epoch. Decides how a seal extends the vnode's chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartialKind {
    Snapshot,
    Delta,
}

impl PartialKind {
    fn code(self) -> u8 {
        match self {
            Self::Snapshot => 1,
            Self::Delta => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Snapshot),
            2 => Some(Self::Delta),
            _ => None,
        }
    }
}

/// One blob of a vnode's chain as the seal names it. Kind, length and CRC are
/// copied into the manifest so planning (chain stats, pruning) needs no reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainEntry {
    /// The epoch the blob was written at.
    pub epoch: u64,
    pub kind: PartialKind,
    /// Object path relative to the backend root.
    pub path: String,
    /// Payload length (without the frame header).
    pub len: u64,
    /// CRC-32 of the payload.
    pub crc32: u32,
    /// Where the blob's frame starts in the object: 0 for an object of its
    /// own, the frame's position for one of an epoch's batch objects
    /// ([`batch_name`]). Absent from manifests written before batches.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ChainEntry {
    /// The byte range of the entry's frame (header and payload) in its object.
    pub fn frame_range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + HEADER_LEN as u64 + self.len
    }
}

/// Why a seal exists. Only `Epoch` seals carry an epoch's data; `Takeover`
/// and `Gap` seals carry the previous chains forward and exist to occupy
/// their slot (see the fence protocol in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SealKind {
    Epoch,
    Takeover,
    Gap,
}

/// The commit marker of one epoch, stored as JSON at `seals/e{epoch:020}.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealManifest {
    pub epoch: u64,
    pub kind: SealKind,
    /// Instance id of the sealer.
    pub committer: String,
    /// Fence generation of the sealer.
    pub generation: u64,
    /// Authoritative assignment version of the sealer at seal time.
    pub assignment_version: u64,
    pub sealed_at_ms: u64,
    /// The seal this one was built on (`None` for the first seal of a store).
    pub prev_epoch: Option<u64>,
    /// Per vnode: latest snapshot first, then deltas in epoch order.
    pub vnodes: BTreeMap<u32, Vec<ChainEntry>>,
    /// Payload bytes of the blobs this seal added.
    pub bytes_written: u64,
    /// Opaque to storage: source positions the epoch covers.
    pub source_offsets: BTreeMap<String, String>,
    /// Opaque to storage: what sinks need to commit (or re-commit) the epoch.
    pub sink_descriptors: BTreeMap<String, String>,
}

impl SealManifest {
    pub(crate) fn to_json(&self) -> Bytes {
        Bytes::from(serde_json::to_vec_pretty(self).expect("a manifest always serializes"))
    }

    pub(crate) fn from_json(path: &str, bytes: &[u8]) -> Result<Self, StateBackendError> {
        serde_json::from_slice(bytes)
            .map_err(|e| StateBackendError::Serialization(format!("seal {path}: {e}")))
    }
}

/// A generation claim, stored as JSON at `fence/g{generation:020}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceEntry {
    pub generation: u64,
    pub instance: String,
    pub claimed_at_ms: u64,
}

// ---- blob frame -----------------------------------------------------------------

const MAGIC: &[u8; 4] = b"WSP1";
/// magic (4) | kind (1) | reserved (3) | crc32 LE (4) | payload len LE (8)
pub(crate) const HEADER_LEN: usize = 20;

/// Frame a payload: the header makes a blob self-describing (kind) and lets a
/// reader detect a torn or corrupted object (length, CRC).
pub(crate) fn encode_blob(kind: PartialKind, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_LEN + payload.len());
    out.put_slice(&blob_header(kind, payload));
    out.put_slice(payload);
    out.freeze()
}

/// The frame header of `payload` alone, for writers that send the payload
/// as a chunk of its own instead of copying it behind the header.
pub(crate) fn blob_header(kind: PartialKind, payload: &[u8]) -> [u8; HEADER_LEN] {
    let mut out = [0; HEADER_LEN];
    out[..4].copy_from_slice(MAGIC);
    out[4] = kind.code();
    out[8..12].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out[12..20].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    out
}

/// Check and strip the frame. Every failure is `Serialization`.
pub(crate) fn decode_blob(
    path: &str,
    blob: &Bytes,
) -> Result<(PartialKind, Bytes), StateBackendError> {
    let bad = |why: String| StateBackendError::Serialization(format!("partial {path}: {why}"));
    if blob.len() < HEADER_LEN || &blob[..4] != MAGIC {
        return Err(bad("missing frame header".into()));
    }
    let kind = PartialKind::from_code(blob[4]).ok_or_else(|| bad(format!("kind {}", blob[4])))?;
    let crc = u32::from_le_bytes(blob[8..12].try_into().expect("4 bytes"));
    let len = u64::from_le_bytes(blob[12..20].try_into().expect("8 bytes"));
    let payload = blob.slice(HEADER_LEN..);
    if payload.len() as u64 != len {
        return Err(bad(format!("length {} != header {len}", payload.len())));
    }
    let actual = crc32fast::hash(&payload);
    if actual != crc {
        return Err(bad(format!("CRC mismatch: {actual:08x} != {crc:08x}")));
    }
    Ok((kind, payload))
}

// ---- names ----------------------------------------------------------------------

/// Object names relative to the root. `instance` must already be sanitized
/// (see [`path_safe`]).
///
/// One directory per epoch, not per (epoch, vnode): on a local disk every
/// directory is an inode to allocate and later free, and an epoch writes
/// a partial for each vnode it changed (up to 256), so a directory per vnode
/// doubled the inodes a seal costs (and the filesystem's search for a free
/// one, slow while many were freed recently, was a tenth of a stateful
/// Nexmark query's time). Data written under the older
/// `e{epoch}/v{vnode}/g...` layout stays readable: seals name each blob by
/// its path, and pruning reads only the epoch.
pub(crate) fn partial_name(epoch: u64, vnode: u32, generation: u64, instance: &str) -> String {
    format!("partials/e{epoch:020}/v{vnode:05}-g{generation:020}-{instance}.bin")
}

/// The `index`th object holding the partials of many vnodes written at
/// `epoch`, one frame after another ([`ChainEntry::offset`] says where each
/// starts). An epoch's partials go to a few such objects rather than one
/// object per vnode: every object is a file to create on a local disk and a
/// request to an object store, and creating up to 256 files per epoch was
/// the largest single cost of a stateful query (the filesystem searching
/// for a free inode among recently freed ones).
pub(crate) fn batch_name(epoch: u64, index: u32, generation: u64, instance: &str) -> String {
    format!("partials/e{epoch:020}/b{index:05}-g{generation:020}-{instance}.bin")
}

/// The `index`th object of merged chains written together, all through
/// the seal of `through`, `vnode` the lowest of them (a compaction job runs
/// once per seal and compacts a vnode once, so the name is unique for its
/// generation).
pub(crate) fn compaction_batch_name(
    through: u64,
    vnode: u32,
    index: u32,
    generation: u64,
    instance: &str,
) -> String {
    format!("partials/e{through:020}/c{vnode:05}-{index:03}-g{generation:020}-{instance}.bin")
}

/// The blob merging a vnode's chain from the blob of epoch `first` up to
/// the seal of epoch `through` (kept with the partials of `through`, so
/// pruning and listings treat it like one; the `-from` tail keeps it apart
/// from the delta of that epoch).
pub(crate) fn compaction_name(
    through: u64,
    vnode: u32,
    first: u64,
    generation: u64,
    instance: &str,
) -> String {
    format!("partials/e{through:020}/v{vnode:05}-g{generation:020}-{instance}-from{first:020}.bin")
}

pub(crate) fn seal_name(epoch: u64) -> String {
    format!("seals/e{epoch:020}.json")
}

pub(crate) fn fence_name(generation: u64) -> String {
    format!("fence/g{generation:020}")
}

/// The epoch of a partial blob from its root-relative name
/// (`partials/e{epoch}/...`); `None` for anything else (e.g. a temp file).
pub(crate) fn parse_partial_epoch(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("partials/e")?;
    let (epoch, tail) = rest.split_once('/')?;
    if !tail.ends_with(".bin") {
        return None;
    }
    epoch.parse().ok()
}

/// The epoch of a seal from its root-relative name.
pub(crate) fn parse_seal_epoch(name: &str) -> Option<u64> {
    name.strip_prefix("seals/e")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// The generation of a fence entry from its root-relative name.
pub(crate) fn parse_fence_generation(name: &str) -> Option<u64> {
    name.strip_prefix("fence/g")?.parse().ok()
}

/// An instance id as a path segment: ids like `host:pid:uuid` may hold
/// characters some stores escape or reject; the generation in the name keeps
/// blob names unique even if two ids sanitize to the same string.
pub(crate) fn path_safe(instance: &str) -> String {
    instance
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trips_and_detects_corruption() {
        let blob = encode_blob(PartialKind::Snapshot, b"state");
        let (kind, payload) = decode_blob("p", &blob).unwrap();
        assert_eq!((kind, &payload[..]), (PartialKind::Snapshot, &b"state"[..]));
        let mut bad = blob.to_vec();
        *bad.last_mut().unwrap() ^= 1;
        assert!(matches!(
            decode_blob("p", &Bytes::from(bad)),
            Err(StateBackendError::Serialization(m)) if m.contains("CRC")
        ));
        assert!(decode_blob("p", &blob.slice(..HEADER_LEN + 2)).is_err());
    }

    #[test]
    fn names_parse_back() {
        let name = partial_name(42, 7, 3, &path_safe("host:1:abc"));
        assert_eq!(
            name,
            "partials/e00000000000000000042/v00007-g00000000000000000003-host_1_abc.bin"
        );
        assert_eq!(parse_partial_epoch(&name), Some(42));
        // The layout before one directory per epoch still prunes by epoch.
        let older = "partials/e00000000000000000042/v00007/g00000000000000000003-host_1_abc.bin";
        assert_eq!(parse_partial_epoch(older), Some(42));
        let batch = batch_name(42, 1, 3, "i");
        assert_eq!(
            batch,
            "partials/e00000000000000000042/b00001-g00000000000000000003-i.bin"
        );
        assert_eq!(parse_partial_epoch(&batch), Some(42));
        assert_eq!(parse_seal_epoch(&seal_name(9)), Some(9));
        assert_eq!(parse_fence_generation(&fence_name(5)), Some(5));
        assert_eq!(parse_seal_epoch("seals/e1.json.tmp"), None);
    }
}
