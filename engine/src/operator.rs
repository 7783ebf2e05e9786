//! The [`Operator`] trait: one incremental step of a dataflow graph per epoch,
//! and its keyed state ([`StateEntry`]) for incremental checkpoints.

use std::collections::BTreeSet;

use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use weir_common::{ChangeBatch, ObjectId};

use crate::EngineError;
use crate::multiset::{Reader, Writer};
use crate::watermark::Watermarks;

/// One key of an operator's state and its value; `None` says the key was
/// removed. Keys follow the layout of [`state_key`]; values are whatever
/// encodes that key's state (most often a row's count, see [`count_value`]).
///
/// Keys and values are shared bytes: entries decoded from a checkpoint
/// point into the blob they were read from instead of each being copied
/// out of it, so a restore touches one copy of the state, not two.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StateEntry {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

impl StateEntry {
    /// An entry that sets `key` to `value`.
    pub fn set(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: Some(value.into()),
        }
    }

    /// An entry that removes `key`.
    pub fn remove(key: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: None,
        }
    }
}

/// An incremental operator: it turns the change of its inputs during one
/// epoch into the change of its output during that epoch.
///
/// The runtime ([`crate::graph::Graph`]) guarantees, and operators rely on:
/// - `step` is called once per epoch, in epoch order, with exactly one
///   change per input (empty when that input did not change), with the
///   schema the input declared and no zero weight; *settled*
///   ([`crate::rows::settle`]): a row with a negative weight occurs once
///   (no equal row elsewhere in the change), while inserted rows may
///   repeat (`r +1, r +1` is the bag `r +2`). So a retraction is never
///   undone or repeated within the change, and an operator that keys state
///   by whole rows checks each retracted row once; one that must see every
///   row once regardless consolidates its input itself. Subsets of a
///   settled change, and concatenations of settled changes that share no
///   row, are settled.
///
/// Operators guarantee:
/// - the returned change has [`Operator::output_schema`] and is settled,
///   so an update undone within the epoch produces nothing. Consolidation
///   happens at state boundaries (ARCHITECTURE.md §2), not on every edge:
///   a stateless operator over inserts passes its rows on unmerged;
/// - the sum of all returned changes equals the operator's query over the sum
///   of all input changes (the Z-set semantics of ARCHITECTURE.md §2);
/// - nothing after an error: a `step` that fails may leave its state part
///   way, because a failed step poisons its graph ([`crate::Graph`]) and the
///   owner rebuilds it from its inputs or a checkpoint; never retried, so
///   operators need not copy their state to undo a failed step;
/// - [`Operator::state_entries`] applied to a fresh operator of the same plan
///   (or [`Operator::snapshot`] then [`Operator::restore`]) gives an operator
///   that behaves identically, and so do a snapshot's entries followed by
///   every later [`Operator::take_state_changes`] in order.
///
/// The three state methods have defaults for stateless operators: no
/// entries, and applying any entry is an error (so a stateful operator that
/// forgot them fails loudly on restore instead of silently losing state).
pub trait Operator: Send {
    /// What the operator is, for EXPLAIN, metrics and errors.
    fn name(&self) -> &'static str;

    fn output_schema(&self) -> SchemaRef;

    /// What identifies this operator's state layout and behaviour: its kind
    /// and every parameter that shapes its state or output (canonical
    /// expressions, keys, limits, constant rows). Two operators with equal
    /// structure on equal inputs keep interchangeable state, so checkpoints
    /// are matched to graphs by it ([`crate::state_fingerprint`]).
    /// Unlike EXPLAIN text it changes only when the operator does.
    fn structure(&self) -> String;

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError>;

    /// Event-time progress: `inputs[i]` are input `i`'s watermarks as of
    /// the end of this epoch; returns the output's. The graph calls it
    /// once per epoch before [`Operator::step`] (so a step can drop rows
    /// behind the watermark it had and expire what the new one closes),
    /// and once when it is built with every value [`NONE_YET`], to learn
    /// which output columns carry one: the set of columns must depend on
    /// the inputs' columns only, never on their values. The default
    /// carries none (an operator that does not know how its output
    /// relates to its inputs' times must not claim one).
    ///
    /// [`NONE_YET`]: crate::watermark::NONE_YET
    fn watermarks(&mut self, _inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        Ok(Watermarks::none())
    }

    /// Input rows dropped as late (behind the watermark of the epoch
    /// before) since the last call.
    fn take_late_rows(&mut self) -> u64 {
        0
    }

    /// The epoch's time (microseconds since the Unix epoch, UTC): what
    /// `now()` is in this epoch. The graph calls it once per epoch before
    /// [`Operator::step`], never with a time earlier than before. Only an
    /// operator whose output depends on it (a temporal filter) uses it.
    fn advance_time(&mut self, _now: i64) {}

    /// The earliest epoch time at which the output changes with no input
    /// (a temporal filter's next row to appear or expire); `None`: never.
    /// The owner steps the graph in an epoch at or after it even when no
    /// input moved.
    fn next_due(&self) -> Option<i64> {
        None
    }

    /// Tells the operator where its state lives: node `node` of the graph
    /// of projection `object`, the pair [`crate::checkpoint::vnode_of`]
    /// hashes with each key. The coordinator calls it when it deploys the
    /// graph ([`crate::Graph::place`]), before the first step or restore.
    /// Most operators have no use for it (the default ignores it); one that
    /// assigns state to workers by vnode ([`crate::ops::parallel::Parallel`])
    /// does, and refuses to move once it holds state.
    fn place(&mut self, _object: ObjectId, _node: u32) -> Result<(), EngineError> {
        Ok(())
    }

    /// The entries whose value changed since the previous call (or since
    /// creation or [`Operator::apply_state_entries`]), each key at most once
    /// and with its current value, and clears that record. A key changed and
    /// changed back in between may be reported or not (its current value is
    /// always a correct report). Called by the checkpointing owner once per
    /// epoch; costs O(changed keys), not O(state). On an error the record is
    /// kept.
    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        Ok(Vec::new())
    }

    /// Every entry of the state (all values `Some`), for a full snapshot.
    /// Does not touch the change record.
    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        Ok(Vec::new())
    }

    /// Upserts (value `Some`) or removes (`None`) entries, in order. Used on
    /// a fresh operator: a snapshot's entries, then each later change set.
    /// Afterwards the change record is empty. On an error nothing changed.
    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        if entries.is_empty() {
            Ok(())
        } else {
            Err(EngineError::Invariant {
                operator: self.name(),
                message: format!("a stateless operator got {} state entries", entries.len()),
            })
        }
    }

    /// The whole state as bytes (its [`Operator::state_entries`], encoded).
    fn snapshot(&self) -> Result<Vec<u8>, EngineError> {
        let entries = self.state_entries()?;
        let mut w = Writer::default();
        w.u64(entries.len() as u64);
        for entry in &entries {
            w.blob(&entry.key);
            w.blob(entry.value.as_deref().unwrap_or_default());
        }
        Ok(w.bytes)
    }

    /// Replaces the state with one taken by [`Operator::snapshot`]: every
    /// current key is removed, then the snapshot's entries are applied.
    fn restore(&mut self, state: &[u8]) -> Result<(), EngineError> {
        let mut r = Reader::new(state, self.name());
        let mut snapshot = Vec::new();
        for _ in 0..r.u64()? {
            let key = Bytes::copy_from_slice(&r.blob()?);
            let value = Some(Bytes::copy_from_slice(&r.blob()?));
            snapshot.push(StateEntry { key, value });
        }
        r.finish()?;
        let mut entries: Vec<StateEntry> = self
            .state_entries()?
            .into_iter()
            .map(|e| StateEntry {
                key: e.key,
                value: None,
            })
            .collect();
        entries.extend(snapshot);
        self.apply_state_entries(&entries)
    }
}

const _: Option<&dyn Operator> = None;

/// The layout of every state key: a tag byte (which kind of state: a left
/// row, an output row, a flag), the length (u32 LE) and bytes of the
/// *distribution key* (the group, join key or partition the state belongs
/// to), then the rest (a row, for state kept per row). Checkpoints hash only
/// the distribution key into a vnode ([`crate::checkpoint::vnode_of`]), so
/// all state of one group stays in one vnode, the unit a node will own.
pub fn state_key(tag: u8, distribution: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(5 + distribution.len() + rest.len());
    key.push(tag);
    key.extend_from_slice(&pair_bytes(distribution, rest));
    key
}

/// A key of [`state_key`]'s layout, taken apart.
pub struct StateKey<'a> {
    pub tag: u8,
    pub distribution: &'a [u8],
    pub rest: &'a [u8],
}

/// The inverse of [`state_key`]; `None` when `key` is not of that layout.
pub fn split_state_key(key: &[u8]) -> Option<StateKey<'_>> {
    let (&tag, key) = key.split_first()?;
    let (distribution, rest) = split_pair(key)?;
    Some(StateKey {
        tag,
        distribution,
        rest,
    })
}

/// [`split_state_key`], or the error `operator` reports for a foreign key.
pub(crate) fn parse_state_key<'a>(
    operator: &'static str,
    key: &'a [u8],
) -> Result<StateKey<'a>, EngineError> {
    split_state_key(key).ok_or_else(|| unreadable(operator, "a malformed state key"))
}

/// Two byte strings as one: the first's length (u32 LE), the first, the
/// second (a sort key and a row; a distribution key and the rest).
pub(crate) fn pair_bytes(first: &[u8], second: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + first.len() + second.len());
    bytes.extend_from_slice(&(first.len() as u32).to_le_bytes());
    bytes.extend_from_slice(first);
    bytes.extend_from_slice(second);
    bytes
}

/// The inverse of [`pair_bytes`]; `None` when `bytes` is too short.
pub(crate) fn split_pair(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let first = bytes.get(4..4usize.checked_add(len)?)?;
    Some((first, &bytes[4 + len..]))
}

/// The value of a row's count in state.
pub fn count_value(count: i64) -> Vec<u8> {
    count.to_le_bytes().to_vec()
}

/// The inverse of [`count_value`]: a positive count, or 0 for a removal (`None`).
pub(crate) fn read_count(operator: &'static str, value: Option<&[u8]>) -> Result<i64, EngineError> {
    let Some(value) = value else { return Ok(0) };
    match <[u8; 8]>::try_from(value).map(i64::from_le_bytes) {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(unreadable(operator, "a malformed count")),
    }
}

pub(crate) fn unreadable(operator: &'static str, what: &str) -> EngineError {
    EngineError::Invariant {
        operator,
        message: format!("state entry with {what}"),
    }
}

/// Keys changed since the last [`Operator::take_state_changes`], with their
/// current values from `value_of`. The caller clears its record only after
/// this succeeded.
pub(crate) fn changed_entries(
    changed: &BTreeSet<Vec<u8>>,
    value_of: impl Fn(&[u8]) -> Result<Option<Vec<u8>>, EngineError>,
) -> Result<Vec<StateEntry>, EngineError> {
    changed
        .iter()
        .map(|key| {
            Ok(StateEntry {
                key: Bytes::copy_from_slice(key),
                value: value_of(key)?.map(Bytes::from),
            })
        })
        .collect()
}

/// Builds in `scratch` the [`state_key`] of (`tag`, `distribution`, `rest`
/// parts in order).
pub(crate) fn state_key_into(scratch: &mut Vec<u8>, tag: u8, distribution: &[u8], rest: &[&[u8]]) {
    scratch.clear();
    scratch.push(tag);
    scratch.extend_from_slice(&(distribution.len() as u32).to_le_bytes());
    scratch.extend_from_slice(distribution);
    for part in rest {
        scratch.extend_from_slice(part);
    }
}

/// Records the [`state_key`] of (`tag`, `distribution`, `rest` parts in
/// order) in `changed`, building it in `scratch` so that a key already
/// recorded (a hot group, a repeated value) costs a lookup, not an
/// allocation.
pub(crate) fn mark_changed(
    changed: &mut hashbrown::HashSet<Vec<u8>>,
    scratch: &mut Vec<u8>,
    tag: u8,
    distribution: &[u8],
    rest: &[&[u8]],
) {
    state_key_into(scratch, tag, distribution, rest);
    if !changed.contains(scratch.as_slice()) {
        changed.insert(scratch.clone());
    }
}

/// A state key changed since the last checkpoint ([`mark_changed_to`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pending<V> {
    /// The last checkpoint holds the key.
    pub(crate) checkpointed: bool,
    /// Its value now (`None`: removed).
    pub(crate) now: Option<V>,
}

/// [`mark_changed`] for operators that record each changed key with its
/// new value as they change it (`now`, `None`: removed), so taking the
/// changes costs no second lookup of every key in the operator's own maps.
///
/// `existed`: the key held a value just before this change. For the first
/// change since the last checkpoint that is whether the checkpoint holds
/// it; a key that was not checkpointed and is removed again is forgotten,
/// since writing its removal would change nothing (a window join's rows
/// that come and go between two checkpoints were about half of what it
/// wrote).
pub(crate) fn mark_changed_to<V>(
    changed: &mut hashbrown::HashMap<Vec<u8>, Pending<V>>,
    scratch: &mut Vec<u8>,
    tag: u8,
    distribution: &[u8],
    rest: &[&[u8]],
    existed: bool,
    now: Option<V>,
) {
    use hashbrown::hash_map::EntryRef;
    state_key_into(scratch, tag, distribution, rest);
    match changed.entry_ref(scratch.as_slice()) {
        EntryRef::Occupied(pending) if !pending.get().checkpointed && now.is_none() => {
            pending.remove();
        }
        EntryRef::Occupied(mut pending) => pending.get_mut().now = now,
        EntryRef::Vacant(_) if !existed && now.is_none() => {}
        EntryRef::Vacant(slot) => {
            slot.insert(Pending {
                checkpointed: existed,
                now,
            });
        }
    }
}

/// [`Operator::take_state_changes`] for operators that record changed
/// keys in a hash set: the entries, in no particular order, with their
/// current values from `value_of`; the record is cleared only when that
/// succeeded.
///
/// The keys move out of the set into the entries (a checkpoint drains every
/// changed key each epoch, so a copy of each would be a copy of the
/// epoch's changed state); on an error they go back. They are not sorted:
/// nothing reads a delta in order (each key occurs once, and a vnode's
/// chain is merged by key), and sorting every changed key of every epoch
/// was a tenth of a join's time.
pub(crate) fn take_changed(
    changed: &mut hashbrown::HashSet<Vec<u8>>,
    value_of: impl Fn(&[u8]) -> Result<Option<Vec<u8>>, EngineError>,
) -> Result<Vec<StateEntry>, EngineError> {
    let keys: Vec<Vec<u8>> = changed.drain().collect();
    let values = match keys
        .iter()
        .map(|key| value_of(key))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(values) => values,
        Err(e) => {
            changed.extend(keys);
            return Err(e);
        }
    };
    Ok(keys
        .into_iter()
        .zip(values)
        .map(|(key, value)| StateEntry {
            key: key.into(),
            value: value.map(Bytes::from),
        })
        .collect())
}

/// Checks the one-change-per-input contract.
pub(crate) fn expect_inputs(
    operator: &'static str,
    inputs: &[ChangeBatch],
    expected: usize,
) -> Result<(), EngineError> {
    expect_per_input(operator, "input changes", inputs.len(), expected)
}

/// Checks that an operator got one set of watermarks per input.
pub(crate) fn expect_watermarks(
    operator: &'static str,
    inputs: &[Watermarks],
    expected: usize,
) -> Result<(), EngineError> {
    expect_per_input(operator, "inputs' watermarks", inputs.len(), expected)
}

fn expect_per_input(
    operator: &'static str,
    what: &str,
    got: usize,
    expected: usize,
) -> Result<(), EngineError> {
    if got == expected {
        Ok(())
    } else {
        Err(EngineError::Invariant {
            operator,
            message: format!("expected {expected} {what}, got {got}"),
        })
    }
}

/// A schema as text for [`Operator::structure`]: names, types, nullability.
pub fn schema_text(schema: &arrow::datatypes::Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}:{}:{}", f.name(), f.data_type(), f.is_nullable()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Expressions as text for [`Operator::structure`]: DataFusion's
/// canonical display (columns by name and index, `a@0 + 1`).
pub fn exprs_text<'a>(
    exprs: impl IntoIterator<Item = &'a std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
) -> String {
    exprs
        .into_iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_come_out_once_each_and_stay_on_an_error() {
        let mut changed: hashbrown::HashSet<Vec<u8>> =
            [vec![3], vec![1], vec![2]].into_iter().collect();
        let failed = take_changed(&mut changed, |key| {
            if key == [2] {
                Err(unreadable("test", "a bad value"))
            } else {
                Ok(Some(key.to_vec()))
            }
        });
        assert!(failed.is_err());
        assert_eq!(changed.len(), 3, "an error keeps every changed key");
        let mut taken = take_changed(&mut changed, |key| {
            Ok((key != [3]).then(|| vec![key[0] * 10]))
        })
        .unwrap();
        taken.sort();
        assert_eq!(
            taken,
            [
                StateEntry::set(vec![1], vec![10]),
                StateEntry::set(vec![2], vec![20]),
                StateEntry::remove(vec![3]),
            ]
        );
        assert!(changed.is_empty());
    }
}
