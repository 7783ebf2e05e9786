//! [`ChangedKeys`]: the state keys an operator changed since its last
//! checkpoint, each with what the operator records beside it.
//!
//! Every row an operator's state changes by records its state key, and a
//! checkpoint drains them all each epoch. Kept as a hash set of `Vec<u8>`,
//! that was an allocation per key when recorded and a free per key when
//! the checkpoint was written (a tenth of a window query's time went to the
//! allocator). Here the keys are appended to one buffer, a hash table holds
//! where each starts, and the checkpoint gets them as slices of one shared
//! [`Bytes`]: recording a key costs a hash, a probe and a copy of its bytes.
//!
//! A key removed before the drain leaves its bytes in the buffer until
//! then; the buffer lives one checkpoint period.

use std::hash::BuildHasher;

use bytes::Bytes;
use hashbrown::hash_table::{Entry, HashTable};

/// Where a key's bytes are, its hash, and the value recorded with it.
struct Slot<V> {
    start: usize,
    len: u32,
    hash: u64,
    value: V,
}

/// What [`ChangedKeys::upsert`] does with a key.
pub(crate) enum Upsert<V> {
    /// Leave it as it is (recorded or not).
    Keep,
    /// Forget it if it is recorded.
    Forget,
    /// Record it with this value if it is not recorded.
    Record(V),
}

/// A set of byte-string keys, each with a `V`, that owns one buffer for
/// all the keys' bytes.
pub(crate) struct ChangedKeys<V = ()> {
    bytes: Vec<u8>,
    index: HashTable<Slot<V>>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl<V> Default for ChangedKeys<V> {
    fn default() -> Self {
        Self {
            bytes: Vec::new(),
            index: HashTable::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
        }
    }
}

impl<V> ChangedKeys<V> {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn key_of<'a>(bytes: &'a [u8], slot: &Slot<V>) -> &'a [u8] {
        &bytes[slot.start..slot.start + slot.len as usize]
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        let hash = self.hasher.hash_one(key);
        let bytes = &self.bytes;
        self.index
            .find(hash, |s| s.hash == hash && Self::key_of(bytes, s) == key)
            .map(|s| &s.value)
    }

    /// `decide` is given the value recorded with `key` (`None`: not
    /// recorded), may change it, and says what to do with the key. One
    /// hash and one probe.
    pub fn upsert(&mut self, key: &[u8], decide: impl FnOnce(Option<&mut V>) -> Upsert<V>) {
        let hash = self.hasher.hash_one(key);
        let bytes = &self.bytes;
        let entry = self.index.entry(
            hash,
            |s| s.hash == hash && Self::key_of(bytes, s) == key,
            |s| s.hash,
        );
        match entry {
            Entry::Occupied(mut slot) => {
                if let Upsert::Forget = decide(Some(&mut slot.get_mut().value)) {
                    slot.remove();
                }
            }
            Entry::Vacant(vacant) => {
                if let Upsert::Record(value) = decide(None) {
                    let start = self.bytes.len();
                    vacant.insert(Slot {
                        start,
                        len: key.len() as u32,
                        hash,
                        value,
                    });
                    self.bytes.extend_from_slice(key);
                }
            }
        }
    }

    /// Records `key` with `value` unless it is recorded already (its value
    /// then stays).
    pub fn insert(&mut self, key: &[u8], value: V) {
        self.upsert(key, |recorded| match recorded {
            Some(_) => Upsert::Keep,
            None => Upsert::Record(value),
        });
    }

    /// Forgets `key`; its value, if it was recorded.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let hash = self.hasher.hash_one(key);
        let bytes = &self.bytes;
        let slot = self
            .index
            .find_entry(hash, |s| s.hash == hash && Self::key_of(bytes, s) == key)
            .ok()?;
        Some(slot.remove().0.value)
    }

    pub fn clear(&mut self) {
        self.index.clear();
        self.bytes.clear();
    }

    /// Every recorded key with its value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.index
            .iter()
            .map(|s| (Self::key_of(&self.bytes, s), &s.value))
    }

    /// Takes every recorded key, each a slice of one shared buffer, with
    /// its value, in the order of [`Self::iter`]; leaves the set empty,
    /// with room for as many key bytes as it had.
    pub fn drain(&mut self) -> impl Iterator<Item = (Bytes, V)> + use<V> {
        let capacity = self.bytes.len();
        let bytes = Bytes::from(std::mem::replace(
            &mut self.bytes,
            Vec::with_capacity(capacity),
        ));
        std::mem::take(&mut self.index)
            .into_iter()
            .map(move |s| (bytes.slice(s.start..s.start + s.len as usize), s.value))
    }
}

impl ChangedKeys<()> {
    /// Records `key`; a key recorded already costs a lookup.
    pub fn mark(&mut self, key: &[u8]) {
        self.insert(key, ());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Random marks, updates and removals of keys of many lengths, against
    /// a map doing the same; drains and clears part way.
    #[test]
    fn keys_and_values_follow_a_map() {
        let mut rng = crate::testing::Rng::new(7);
        let mut changed: ChangedKeys<u32> = ChangedKeys::default();
        let mut model: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
        for step in 0..20_000u32 {
            let key: Vec<u8> = (0..rng.below(40))
                .map(|i| (i as u8) ^ rng.below(3) as u8)
                .collect();
            match rng.below(10) {
                0..=4 => {
                    changed.insert(&key, step);
                    model.entry(key.clone()).or_insert(step);
                }
                5..=6 => {
                    changed.upsert(&key, |recorded| match recorded {
                        Some(v) => {
                            *v += 1;
                            if *v % 3 == 0 {
                                Upsert::Forget
                            } else {
                                Upsert::Keep
                            }
                        }
                        None => Upsert::Keep,
                    });
                    if let Some(v) = model.get_mut(&key) {
                        *v += 1;
                        if *v % 3 == 0 {
                            model.remove(&key);
                        }
                    }
                }
                7..=8 => assert_eq!(changed.remove(&key), model.remove(&key)),
                _ if step % 97 == 0 => {
                    let drained: BTreeMap<Vec<u8>, u32> =
                        changed.drain().map(|(k, v)| (k.to_vec(), v)).collect();
                    assert_eq!(drained, std::mem::take(&mut model));
                }
                _ if step % 89 == 0 => {
                    changed.clear();
                    model.clear();
                }
                _ => {}
            }
            assert_eq!(changed.len(), model.len());
            assert_eq!(changed.get(&key), model.get(&key));
        }
        let all: BTreeMap<Vec<u8>, u32> = changed.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
        assert_eq!(all, model);
    }
}
