//! An epoch's partials packed into a few objects ([`batch_name`]): each
//! partial keeps its own frame (header, CRC, payload), the frames of many
//! vnodes follow one another in an object, and the chain entry a seal keeps
//! names the object and the frame's offset in it. Readers fetch just that
//! range, so restoring one vnode never reads another's state.
//!
//! Why: every object is a file to create on a local disk (and to delete when
//! pruned) and a request to an object store. One object per vnode and epoch
//! meant up to 256 files per checkpoint, and on a filesystem that has freed
//! many inodes recently, finding a free one was the largest single cost of
//! a stateful query. Batches stay bounded ([`BATCH_BYTES`]) so a full
//! snapshot still goes out as several concurrent puts.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::PutPayload;

use super::super::manifest::{ChainEntry, HEADER_LEN, PartialKind, batch_name, blob_header};
use super::{ObjectStateBackend, Result};
use crate::state::StateBackendError;

/// An epoch's partials share an object up to this many bytes.
pub(super) const BATCH_BYTES: u64 = 64 << 20;
/// Batch objects written at once.
pub(super) const BATCH_CONCURRENCY: usize = 8;

/// One object to write: each partial's frame header and payload as separate
/// chunks (no payload is copied), and the chain entry of each vnode in it.
#[derive(Debug)]
pub(super) struct Batch {
    pub name: String,
    chunks: Vec<Bytes>,
    pub entries: Vec<(u32, ChainEntry)>,
    bytes: u64,
}

/// Consecutive partials share an object until adding the next would take it
/// past `cap` bytes; a partial larger than `cap` gets an object to itself.
/// `name(index)` names the `index`th object.
pub(super) fn plan_batches(
    epoch: u64,
    partials: &[(u32, PartialKind, Bytes)],
    cap: u64,
    name: impl Fn(u32) -> String,
) -> Vec<Batch> {
    let mut batches: Vec<Batch> = Vec::new();
    for (vnode, kind, bytes) in partials {
        let header = blob_header(*kind, bytes);
        let frame_len = (HEADER_LEN + bytes.len()) as u64;
        let batch = match batches.last_mut() {
            Some(b) if b.bytes + frame_len <= cap => b,
            _ => {
                batches.push(Batch {
                    name: name(batches.len() as u32),
                    chunks: Vec::new(),
                    entries: Vec::new(),
                    bytes: 0,
                });
                batches.last_mut().expect("just pushed")
            }
        };
        batch.entries.push((
            *vnode,
            ChainEntry {
                epoch,
                kind: *kind,
                path: batch.name.clone(),
                len: bytes.len() as u64,
                crc32: u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")),
                offset: batch.bytes,
            },
        ));
        batch.chunks.push(Bytes::copy_from_slice(&header));
        batch.chunks.push(bytes.clone());
        batch.bytes += frame_len;
    }
    batches
}

impl ObjectStateBackend {
    /// Persist the partials of many vnodes at `epoch` in a few objects,
    /// written concurrently; each vnode's entry is then ready for
    /// [`Self::seal_epoch`]. Fenced like [`Self::write_partial_kind`], and
    /// idempotent for the same partials in the same order (a retry after a
    /// partial failure re-creates only what is missing; different bytes
    /// are a `Serialization` error). A vnode appears at most once.
    pub async fn write_partials(
        &self,
        epoch: u64,
        assignment_version: u64,
        partials: &[(u32, PartialKind, Bytes)],
    ) -> Result<()> {
        self.check_partial_write(assignment_version)?;
        let batches = plan_batches(epoch, partials, BATCH_BYTES, |index| {
            batch_name(epoch, index, self.generation, &self.instance_path)
        });
        // By index: a closure over `&Batch` would not be `Send` for every
        // lifetime, which the runtime's spawned seal needs.
        futures::stream::iter(0..batches.len())
            .map(|i| self.put_batch(&batches[i]))
            .buffer_unordered(BATCH_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        let mut written = self.written.lock().unwrap();
        for (vnode, entry) in batches.into_iter().flat_map(|b| b.entries) {
            written.insert((vnode, epoch), entry);
        }
        Ok(())
    }

    /// Create one batch object; if it exists (a retry), it must hold the
    /// same bytes.
    pub(super) async fn put_batch(&self, batch: &Batch) -> Result<()> {
        let payload: PutPayload = batch.chunks.iter().cloned().collect();
        if self.put_create_payload(&batch.name, payload).await? {
            return Ok(());
        }
        let existing = self.get(&batch.name).await?;
        let same = existing.is_some_and(|existing| {
            let mut rest = &existing[..];
            batch
                .chunks
                .iter()
                .all(|chunk| match rest.split_at_checked(chunk.len()) {
                    Some((head, tail)) if head == &chunk[..] => {
                        rest = tail;
                        true
                    }
                    _ => false,
                })
                && rest.is_empty()
        });
        if same {
            return Ok(());
        }
        Err(StateBackendError::Serialization(format!(
            "conflicting rewrite of {}: the partials of epoch {} it holds have different bytes",
            batch.name, batch.entries[0].1.epoch
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::manifest::decode_blob;

    fn concat(batch: &Batch) -> Bytes {
        batch
            .chunks
            .iter()
            .flat_map(|c| c.iter().copied())
            .collect()
    }

    #[test]
    fn partials_share_objects_up_to_the_cap_and_each_frame_reads_back_alone() {
        let partials: Vec<(u32, PartialKind, Bytes)> = [
            (3, PartialKind::Delta, vec![1u8; 30]),
            (5, PartialKind::Snapshot, vec![2; 40]),
            (9, PartialKind::Delta, vec![]),
            (11, PartialKind::Delta, vec![4; 200]),
            (12, PartialKind::Delta, vec![5; 10]),
        ]
        .into_iter()
        .map(|(v, k, b)| (v, k, Bytes::from(b)))
        .collect();
        // Frames are 20 + payload bytes: 50, 60 and 20 fit in 130; the
        // 220-byte frame is over the cap and stands alone.
        let batches = plan_batches(7, &partials, 130, |i| format!("b{i}"));
        let shape: Vec<(String, Vec<u32>)> = batches
            .iter()
            .map(|b| (b.name.clone(), b.entries.iter().map(|(v, _)| *v).collect()))
            .collect();
        assert_eq!(
            shape,
            vec![
                ("b0".into(), vec![3, 5, 9]),
                ("b1".into(), vec![11]),
                ("b2".into(), vec![12]),
            ]
        );
        let mut seen = 0;
        for batch in &batches {
            let object = concat(batch);
            assert_eq!(object.len() as u64, batch.bytes);
            for (vnode, entry) in &batch.entries {
                let range = entry.frame_range();
                let frame = object.slice(range.start as usize..range.end as usize);
                let (kind, payload) = decode_blob(&entry.path, &frame).unwrap();
                let (_, want_kind, want) = partials.iter().find(|p| p.0 == *vnode).unwrap();
                assert_eq!((kind, &payload), (*want_kind, want));
                assert_eq!(entry.crc32, crc32fast::hash(want));
                assert_eq!(entry.epoch, 7);
                seen += 1;
            }
        }
        assert_eq!(seen, partials.len());
    }
}
