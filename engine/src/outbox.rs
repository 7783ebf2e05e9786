//! Sink outboxes: the changes a sink has not delivered, kept in the
//! checkpointed state so that a restart does not lose them.
//!
//! A sink that cannot write (its target is down and it backs off) or must
//! not (`ALTER SINK ... PAUSE`) falls behind its own graph, whose state
//! moves on with every epoch. Its undelivered epochs are the one thing a
//! restore from a later seal could not rebuild, so each seal carries
//! them: the runtime says which epochs a sink keeps ([`Outboxes::keep`]),
//! and they are checkpointed as state entries of the sink's deployment
//! under [`OUTBOX_NODE`], keyed by epoch (big-endian) and valued by the
//! epoch's changes as one Arrow IPC stream (the rows and a `__weight`
//! column). An epoch's changes never change once kept, so keeping the
//! same epochs again writes nothing; an epoch dropped from the set is a
//! removal. A restore hands them back ([`Outboxes::kept`]) and the sink
//! delivers them before anything newer.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use bytes::Bytes;
use weir_common::{ChangeBatch, ObjectId};

use crate::EngineError;
use crate::operator::StateEntry;

/// The node number of a sink's outbox in checkpoints: next to
/// [`crate::checkpoint::RESULT_NODE`], beyond any graph's nodes.
pub const OUTBOX_NODE: u32 = u32::MAX - 1;

/// Every sink's kept epochs, and which of them changed since the last
/// checkpoint drained them.
#[derive(Default)]
pub(crate) struct Outboxes {
    kept: HashMap<ObjectId, BTreeMap<u64, ChangeBatch>>,
    changed: BTreeSet<(ObjectId, u64)>,
}

impl Outboxes {
    /// Sink `sink` keeps exactly `epochs` from now on: epochs not kept
    /// before are added, kept ones missing from `epochs` removed.
    pub fn keep(&mut self, sink: ObjectId, epochs: &[(u64, ChangeBatch)]) {
        let kept = self.kept.entry(sink).or_default();
        let wanted: BTreeSet<u64> = epochs.iter().map(|(e, _)| *e).collect();
        let gone: Vec<u64> = kept
            .keys()
            .filter(|e| !wanted.contains(e))
            .copied()
            .collect();
        for epoch in gone {
            kept.remove(&epoch);
            self.changed.insert((sink, epoch));
        }
        for (epoch, changes) in epochs {
            if !kept.contains_key(epoch) {
                kept.insert(*epoch, changes.clone());
                self.changed.insert((sink, *epoch));
            }
        }
        if kept.is_empty() {
            self.kept.remove(&sink);
        }
    }

    /// The epochs sink `sink` keeps, oldest first.
    pub fn kept(&self, sink: ObjectId) -> Vec<(u64, ChangeBatch)> {
        self.kept
            .get(&sink)
            .map(|k| k.iter().map(|(e, c)| (*e, c.clone())).collect())
            .unwrap_or_default()
    }

    /// Sink `sink` is gone: its epochs are removed at the next checkpoint.
    pub fn forget(&mut self, sink: ObjectId) {
        self.keep(sink, &[]);
    }

    /// The entries that changed since the last call, per sink.
    pub fn take_changes(&mut self) -> Result<Vec<(ObjectId, StateEntry)>, EngineError> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|(sink, epoch)| {
                let value = match self.kept.get(&sink).and_then(|k| k.get(&epoch)) {
                    Some(changes) => Some(encode(changes)?),
                    None => None,
                };
                Ok((
                    sink,
                    StateEntry {
                        key: Bytes::copy_from_slice(&epoch.to_be_bytes()),
                        value,
                    },
                ))
            })
            .collect()
    }

    /// Every kept epoch's entry, per sink.
    pub fn entries(&self) -> Result<Vec<(ObjectId, StateEntry)>, EngineError> {
        let mut entries = Vec::new();
        for (sink, kept) in &self.kept {
            for (epoch, changes) in kept {
                entries.push((
                    *sink,
                    StateEntry::set(epoch.to_be_bytes().to_vec(), encode(changes)?),
                ));
            }
        }
        Ok(entries)
    }

    /// Applies checkpointed entries of sink `sink` (a restore); nothing is
    /// recorded as changed, since the store holds them already.
    pub fn apply(&mut self, sink: ObjectId, entries: &[StateEntry]) -> Result<(), EngineError> {
        let kept = self.kept.entry(sink).or_default();
        for entry in entries {
            let epoch = <[u8; 8]>::try_from(&entry.key[..])
                .map(u64::from_be_bytes)
                .map_err(|_| invalid(format!("a key of {} bytes", entry.key.len())))?;
            match &entry.value {
                Some(value) => {
                    kept.insert(epoch, decode(value)?);
                }
                None => {
                    kept.remove(&epoch);
                }
            }
        }
        if kept.is_empty() {
            self.kept.remove(&sink);
        }
        Ok(())
    }
}

fn invalid(message: String) -> EngineError {
    EngineError::Invariant {
        operator: "sink outbox",
        message,
    }
}

fn encode(changes: &ChangeBatch) -> Result<Bytes, EngineError> {
    let batch = changes
        .to_record_batch()
        .map_err(|e| invalid(e.to_string()))?;
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batch.schema())?;
    writer.write(&batch)?;
    writer.finish()?;
    drop(writer);
    Ok(Bytes::from(out))
}

fn decode(bytes: &Bytes) -> Result<ChangeBatch, EngineError> {
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes.as_ref()), None)?;
    let mut batches = Vec::new();
    for batch in reader {
        batches.push(batch?);
    }
    let [batch] = batches.as_slice() else {
        return Err(invalid(format!(
            "an epoch stored as {} batches",
            batches.len()
        )));
    };
    ChangeBatch::from_record_batch(batch).map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{change, render};

    #[test]
    fn kept_epochs_round_trip_and_only_changes_are_recorded() {
        let (a, b) = (ObjectId(7), ObjectId(8));
        let one = change("k text, x int", "a 1 +1; b 2 -1");
        let two = change("k text, x int", "c 3 +2");
        let mut outboxes = Outboxes::default();
        outboxes.keep(a, &[(4, one.clone()), (5, two.clone())]);
        outboxes.keep(b, &[(5, two.clone())]);
        let first = outboxes.take_changes().unwrap();
        assert_eq!(first.len(), 3);
        // The same epochs again: nothing to write.
        outboxes.keep(a, &[(4, one.clone()), (5, two.clone())]);
        assert!(outboxes.take_changes().unwrap().is_empty());
        // Epoch 4 delivered: one removal.
        outboxes.keep(a, &[(5, two.clone())]);
        let second = outboxes.take_changes().unwrap();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].1.value, None);

        // A restore from the entries written, in order, rebuilds the set.
        let mut restored = Outboxes::default();
        for (sink, entry) in first.into_iter().chain(second) {
            restored.apply(sink, &[entry]).unwrap();
        }
        let render_all = |o: &Outboxes, s| {
            o.kept(s)
                .iter()
                .map(|(e, c)| (*e, render(c)))
                .collect::<Vec<_>>()
        };
        assert_eq!(render_all(&restored, a), vec![(5, render(&two))]);
        assert_eq!(render_all(&restored, b), vec![(5, render(&two))]);
        assert!(restored.take_changes().unwrap().is_empty());
        assert_eq!(restored.entries().unwrap().len(), 2);

        restored.forget(a);
        assert_eq!(restored.take_changes().unwrap().len(), 1);
        assert!(restored.kept(a).is_empty());
    }

    #[test]
    fn a_damaged_entry_is_an_error() {
        let mut outboxes = Outboxes::default();
        let bad = StateEntry::set(vec![1u8, 2], vec![0u8]);
        assert!(outboxes.apply(ObjectId(1), &[bad]).is_err());
        let bad = StateEntry::set(4u64.to_be_bytes().to_vec(), vec![0u8, 1, 2]);
        assert!(outboxes.apply(ObjectId(1), &[bad]).is_err());
    }
}
