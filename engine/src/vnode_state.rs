//! The stored form of one vnode's checkpoint ([`VnodeState`]), read in
//! place ([`raw_entries`]) or owned ([`VnodeState::decode`]), and the merge
//! of a vnode's chain (a snapshot, then deltas) into the one snapshot that
//! rebuilds the same state ([`merge_chain`]): what keeps chains short
//! without the checkpointer reading all operator state again.

use std::collections::BTreeMap;

use bytes::Bytes;
use weir_common::ObjectId;

use crate::EngineError;
use crate::operator::StateEntry;

/// The entries of one vnode in one checkpoint: (projection, node, entry),
/// each (projection, node, key) at most once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VnodeState {
    pub entries: Vec<(ObjectId, u32, StateEntry)>,
}

/// `W`, `V`, `S`, then the format version.
pub(crate) const MAGIC: [u8; 4] = *b"WVS\x01";
/// The smallest encoded entry: object, node, key length, presence byte.
const MIN_ENTRY: usize = 8 + 4 + 4 + 1;

/// One entry of an encoded [`VnodeState`], borrowed from its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEntry<'a> {
    pub object: ObjectId,
    pub node: u32,
    pub key: &'a [u8],
    /// `None` for a removal.
    pub value: Option<&'a [u8]>,
}

impl RawEntry<'_> {
    fn encoded_len(&self) -> usize {
        MIN_ENTRY + self.key.len() + self.value.map_or(0, |v| 4 + v.len())
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.object.0.to_le_bytes());
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key);
        match self.value {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
        }
    }
}

/// Encodes `entries` (their count known up front) in [`VnodeState`]'s format.
fn encode<'a>(entries: impl ExactSizeIterator<Item = RawEntry<'a>> + Clone) -> Bytes {
    let size: usize = entries.clone().map(|e| e.encoded_len()).sum();
    let mut out = Vec::with_capacity(8 + size);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for entry in entries {
        entry.encode_into(&mut out);
    }
    Bytes::from(out)
}

impl VnodeState {
    /// Version 1: [`MAGIC`], the entry count (u32 LE), then per entry the
    /// object (u64 LE), the node (u32 LE), the key (u32 LE length, bytes), and
    /// `0` for a removal or `1` and the value (u32 LE length, bytes).
    pub fn encode(&self) -> Bytes {
        encode(self.entries.iter().map(|(object, node, entry)| RawEntry {
            object: *object,
            node: *node,
            key: &entry.key,
            value: entry.value.as_deref(),
        }))
    }

    /// The inverse of [`Self::encode`]; any malformed input (wrong magic or
    /// version, truncation, trailing bytes) is [`EngineError::CorruptState`].
    /// Keys and values share `bytes` (no copy per entry).
    pub fn decode(bytes: &Bytes) -> Result<Self, EngineError> {
        let raw = raw_entries(bytes)?;
        // The count is untrusted: never reserve more than the bytes can hold.
        let mut entries = Vec::with_capacity(raw.left.min(bytes.len() / MIN_ENTRY));
        for entry in raw {
            let entry = entry?;
            entries.push((
                entry.object,
                entry.node,
                StateEntry {
                    key: bytes.slice_ref(entry.key),
                    value: entry.value.map(|value| bytes.slice_ref(value)),
                },
            ));
        }
        Ok(Self { entries })
    }
}

/// The entries of an encoded [`VnodeState`], read in place. The header is
/// checked here; each entry as it is reached, and trailing bytes after the
/// last one are an error item.
pub fn raw_entries(bytes: &[u8]) -> Result<RawEntries<'_>, EngineError> {
    let mut cursor = Cursor(bytes);
    let magic = cursor.take(4)?;
    if magic[..3] != MAGIC[..3] {
        return Err(corrupt("not a vnode state"));
    }
    if magic[3] != MAGIC[3] {
        return Err(corrupt(&format!("unknown version {}", magic[3])));
    }
    let left = cursor.u32()? as usize;
    Ok(RawEntries {
        cursor,
        left,
        failed: false,
    })
}

/// See [`raw_entries`].
pub struct RawEntries<'a> {
    cursor: Cursor<'a>,
    left: usize,
    failed: bool,
}

impl<'a> RawEntries<'a> {
    fn read(&mut self) -> Result<RawEntry<'a>, EngineError> {
        let c = &mut self.cursor;
        let object = ObjectId(c.u64()?);
        let node = c.u32()?;
        let key = c.bytes()?;
        let value = match c.take(1)?[0] {
            0 => None,
            1 => Some(c.bytes()?),
            other => return Err(corrupt(&format!("presence byte {other}"))),
        };
        Ok(RawEntry {
            object,
            node,
            key,
            value,
        })
    }
}

impl<'a> Iterator for RawEntries<'a> {
    type Item = Result<RawEntry<'a>, EngineError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = if self.left == 0 {
            if self.cursor.0.is_empty() {
                return None;
            }
            Err(corrupt("trailing bytes"))
        } else {
            self.left -= 1;
            self.read()
        };
        self.failed = item.is_err();
        Some(item)
    }
}

/// A vnode's chain merged by [`merge_chain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedChain {
    /// The merged snapshot, in [`VnodeState`]'s format.
    pub bytes: Bytes,
    pub entries: usize,
    /// Per object: its key and value bytes in the snapshot (as checkpoints
    /// count them for `weir_catalog.checkpoints`).
    pub object_bytes: BTreeMap<ObjectId, u64>,
}

/// Merges a vnode's chain (encoded [`VnodeState`]s: a snapshot, then deltas
/// in epoch order) into the one snapshot that rebuilds the same state: per
/// (object, node, key) its last value, removed keys left out, and entries
/// of objects `keep` refuses (dropped or failed projections) left out.
/// Entries come out sorted by (object, node, key), so a chain always
/// merges to the same bytes and a restore applies each (object, node) in
/// one run. Costs O(chain bytes) and no allocation per entry.
pub fn merge_chain(
    chain: &[impl AsRef<[u8]>],
    keep: impl Fn(ObjectId) -> bool,
) -> Result<MergedChain, EngineError> {
    // Per (object, node, key): its last value, `None` once removed.
    type Latest<'a> = hashbrown::HashMap<(ObjectId, u32, &'a [u8]), Option<&'a [u8]>>;
    let mut latest = Latest::new();
    for blob in chain {
        let entries = raw_entries(blob.as_ref())?;
        latest.reserve(entries.left.min(blob.as_ref().len() / MIN_ENTRY));
        for entry in entries {
            let entry = entry?;
            latest.insert((entry.object, entry.node, entry.key), entry.value);
        }
    }
    let mut live: Vec<RawEntry<'_>> = latest
        .into_iter()
        .filter(|((object, _, _), _)| keep(*object))
        .filter_map(|((object, node, key), value)| {
            Some(RawEntry {
                object,
                node,
                key,
                value: Some(value?),
            })
        })
        .collect();
    live.sort_unstable_by(|a, b| (a.object, a.node, a.key).cmp(&(b.object, b.node, b.key)));
    let mut object_bytes = BTreeMap::new();
    for entry in &live {
        *object_bytes.entry(entry.object).or_default() +=
            (entry.key.len() + entry.value.map_or(0, <[u8]>::len)) as u64;
    }
    Ok(MergedChain {
        bytes: encode(live.iter().copied()),
        entries: live.len(),
        object_bytes,
    })
}

fn corrupt(what: &str) -> EngineError {
    EngineError::CorruptState(what.to_string())
}

/// Reads the little-endian fields of [`VnodeState::encode`], checking every length.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EngineError> {
        if self.0.len() < n {
            return Err(corrupt("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, EngineError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, EngineError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<&'a [u8], EngineError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::checkpoint::RESULT_NODE;

    fn sample() -> VnodeState {
        VnodeState {
            entries: vec![
                (
                    ObjectId(1),
                    0,
                    StateEntry::set(b"k".to_vec(), b"v".to_vec()),
                ),
                (ObjectId(1), RESULT_NODE, StateEntry::remove(vec![])),
                (ObjectId(u64::MAX), 3, StateEntry::set(vec![0; 300], vec![])),
            ],
        }
    }

    #[test]
    fn vnode_state_round_trips_and_rejects_damage() {
        let bytes = sample().encode();
        assert_eq!(VnodeState::decode(&bytes).unwrap(), sample());
        assert_eq!(
            VnodeState::decode(&VnodeState::default().encode())
                .unwrap()
                .entries,
            vec![]
        );
        let error = |bytes: &[u8]| {
            VnodeState::decode(&Bytes::copy_from_slice(bytes))
                .unwrap_err()
                .to_string()
        };
        assert!(error(&bytes[..bytes.len() - 1]).contains("truncated"));
        assert!(error(&[&bytes[..], &[0]].concat()).contains("trailing"));
        let mut newer = bytes.to_vec();
        newer[3] = 2;
        assert!(error(&newer).contains("unknown version 2"));
        assert!(error(b"PK\x03\x04").contains("not a vnode state"));
    }

    #[test]
    fn decoded_entries_share_the_blob() {
        let bytes = sample().encode();
        let blob = bytes.as_ptr_range();
        let decoded = VnodeState::decode(&bytes).unwrap();
        for (_, _, entry) in &decoded.entries {
            for part in [Some(&entry.key), entry.value.as_ref()]
                .into_iter()
                .flatten()
            {
                if !part.is_empty() {
                    assert!(blob.contains(&part.as_ptr()), "an entry was copied");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn decoding_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = VnodeState::decode(&Bytes::from(bytes.clone()));
            // Past the magic too, where the lengths are read.
            let _ = VnodeState::decode(&Bytes::from([&MAGIC[..], &bytes].concat()));
        }

        #[test]
        fn any_state_round_trips(entries in proptest::collection::vec(
            (any::<u64>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..20),
             proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20))),
            0..20,
        )) {
            let state = VnodeState {
                entries: entries
                    .into_iter()
                    .map(|(o, n, key, value)| {
                        (ObjectId(o), n, StateEntry { key: key.into(), value: value.map(Bytes::from) })
                    })
                    .collect(),
            };
            prop_assert_eq!(VnodeState::decode(&state.encode()).unwrap(), state);
        }
    }

    /// A chain as restore applies it: each entry in order, upserting or
    /// removing its key.
    fn applied(chain: &[VnodeState]) -> BTreeMap<(ObjectId, u32, Bytes), Bytes> {
        let mut state = BTreeMap::new();
        for delta in chain {
            for (object, node, entry) in &delta.entries {
                let key = (*object, *node, entry.key.clone());
                match &entry.value {
                    Some(value) => state.insert(key, value.clone()),
                    None => state.remove(&key),
                };
            }
        }
        state
    }

    #[test]
    fn a_merged_chain_keeps_last_values_drops_removals_and_refused_objects() {
        let set = |o, n, k: &str, v: &str| {
            (
                ObjectId(o),
                n,
                StateEntry::set(k.to_string(), v.to_string()),
            )
        };
        let remove = |o, n, k: &str| (ObjectId(o), n, StateEntry::remove(k.to_string()));
        let chain = [
            VnodeState {
                entries: vec![
                    set(2, 0, "b", "1"),
                    set(1, 5, "a", "1"),
                    set(9, 0, "z", "1"),
                ],
            },
            VnodeState {
                entries: vec![set(1, 5, "a", "2"), remove(2, 0, "b"), set(2, 0, "c", "1")],
            },
            VnodeState {
                entries: vec![set(1, RESULT_NODE, "r", "x"), remove(2, 0, "never")],
            },
        ];
        let encoded: Vec<Bytes> = chain.iter().map(VnodeState::encode).collect();
        let merged = merge_chain(&encoded, |o| o != ObjectId(9)).unwrap();
        assert_eq!(
            VnodeState::decode(&merged.bytes).unwrap().entries,
            vec![
                set(1, 5, "a", "2"),
                set(1, RESULT_NODE, "r", "x"),
                set(2, 0, "c", "1")
            ]
        );
        assert_eq!(merged.entries, 3);
        assert_eq!(
            merged.object_bytes,
            BTreeMap::from([(ObjectId(1), 4), (ObjectId(2), 2)])
        );
        // A damaged blob anywhere in the chain fails the merge.
        let mut damaged = encoded.clone();
        damaged[1] = damaged[1].slice(..damaged[1].len() - 1);
        assert!(merge_chain(&damaged, |_| true).is_err());
    }

    proptest! {
        #[test]
        fn a_merged_chain_rebuilds_what_the_chain_does(chain in proptest::collection::vec(
            proptest::collection::vec(
                (0u64..3, 0u32..2, proptest::collection::vec(0u8..4, 0..3),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..4))),
                0..12,
            ),
            1..6,
        )) {
            // Each blob holds a key at most once, as checkpoints write them.
            let chain: Vec<VnodeState> = chain
                .into_iter()
                .map(|entries| {
                    let mut seen = std::collections::HashSet::new();
                    VnodeState {
                        entries: entries
                            .into_iter()
                            .filter(|(o, n, k, _)| seen.insert((*o, *n, k.clone())))
                            .map(|(o, n, key, value)| {
                        (ObjectId(o), n, StateEntry { key: key.into(), value: value.map(Bytes::from) })
                    })
                            .collect(),
                    }
                })
                .collect();
            let encoded: Vec<Bytes> = chain.iter().map(VnodeState::encode).collect();
            let merged = merge_chain(&encoded, |_| true).unwrap();
            let snapshot = VnodeState::decode(&merged.bytes).unwrap();
            prop_assert!(snapshot.entries.iter().all(|(_, _, e)| e.value.is_some()));
            prop_assert_eq!(applied(&[snapshot]), applied(&chain));
            // Merging again changes nothing.
            prop_assert_eq!(merge_chain(std::slice::from_ref(&merged.bytes), |_| true).unwrap(), merged);
        }
    }
}
