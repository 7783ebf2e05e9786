//! [`DeltaJoin`]: inner, outer, semi and anti equi-joins in O(change).
//!
//! Both inputs are kept, each distinct row with its count, in hash buckets
//! by join key. An epoch's output is `ΔL ⋈ R + L' ⋈ ΔR`, where `L'` is the
//! left side after `ΔL`: it costs the matches of the changed rows, never a
//! bucket's whole product, and an inner join keeps no output state.
//!
//! Kinds that output unmatched rows (left, right and full outer, semi,
//! anti) keep per row of the side concerned how many rows of the other side
//! it matches (counted with their multiplicity, through the residual). A
//! row's padded (outer), kept (semi) or dropped (anti) output changes only
//! when that number leaves or reaches zero, or when the row's own count
//! changes, so that is all an epoch looks at.
//!
//! A row whose key has a NULL matches nothing and is kept nowhere: its
//! output (padded, or kept by an anti join) follows its own change.
//!
//! State entries (distribution key = the join key): one per distinct row
//! of each side (`LEFT`, `RIGHT`), valued by its count, followed by its
//! match count on a side that keeps one.

use arrow::array::{Int64Array, RecordBatch, UInt32Array};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use hashbrown::HashMap;
use weir_common::ChangeBatch;

use super::expiry::{Closer, Expiry, WATERMARK_LEFT, WATERMARK_RIGHT};
use super::side_rows::SideRows;
use super::{JoinKind, JoinSpec, Sides, rebind, take_rows};
use crate::EngineError;
use crate::operator::{
    Operator, Pending, StateEntry, expect_inputs, expect_watermarks, mark_changed_to,
    parse_state_key, state_key, unreadable,
};
use crate::ops::parallel::Keyed;
use crate::rows::{RowBytes, RowCodec, concat_changes, empty_change, settle, where_true};
use crate::watermark::Watermarks;

const NAME: &str = "join";

/// State key tags (and the window join's watermarks, [`super::expiry`]).
pub(super) const LEFT: u8 = 0;
pub(super) const RIGHT: u8 = 1;

/// A distinct row of one side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    count: i64,
    /// Rows of the other side it matches (kept only where the kind needs it).
    matches: i64,
}

#[derive(Default)]
pub(super) struct Bucket {
    pub(super) left: SideRows<Counts>,
    pub(super) right: SideRows<Counts>,
    /// Filed among a window join's open buckets, per side ([`super::expiry`]).
    pub(super) indexed_left: bool,
    pub(super) indexed_right: bool,
}

impl Bucket {
    fn side(&mut self, left: bool) -> &mut SideRows<Counts> {
        if left {
            &mut self.left
        } else {
            &mut self.right
        }
    }
}

/// Rows of one side whose output may change this epoch: their counts
/// before the first change, by (key, row).
type Before = HashMap<(RowBytes, RowBytes), Counts>;

pub(super) struct DeltaJoin {
    pub(super) spec: JoinSpec,
    pub(super) sides: Sides,
    pub(super) buckets: HashMap<RowBytes, Bucket>,
    /// State keys changed since the last `take_state_changes`, each with
    /// its counts now (`None`: the row is gone).
    pub(super) changed: hashbrown::HashMap<Vec<u8>, Pending<Counts>>,
    /// Set for a window join ([`super::expiry`]).
    pub(super) expiry: Option<Expiry>,
}

/// One side of a step, as the matching half of the algorithm sees it.
struct Delta<'a> {
    left: bool,
    change: &'a ChangeBatch,
    keys: Vec<Option<RowBytes>>,
    rows: Vec<RowBytes>,
}

impl DeltaJoin {
    pub(super) fn new(spec: JoinSpec) -> Result<Self, EngineError> {
        debug_assert!(spec.kind != JoinKind::NullAwareAnti);
        Ok(Self {
            sides: Sides::new(&spec)?,
            buckets: HashMap::new(),
            changed: hashbrown::HashMap::new(),
            expiry: None,
            spec,
        })
    }

    /// Closes by `closer` ([`super::expiry`]).
    pub(super) fn closing_by(mut self, closer: Closer) -> Self {
        self.expiry = Some(Expiry::new(closer));
        self
    }

    /// Whether rows of the left (or right) side keep a match count.
    fn tracks(&self, left: bool) -> bool {
        let kind = self.spec.kind;
        if left {
            kind.keeps_unmatched_left() || kind.outputs_left_only()
        } else {
            kind.keeps_unmatched_right()
        }
    }

    /// How many copies of a row of the left (or right) side the output
    /// holds on its own (padded, or as a semi/anti join's output).
    fn visible(&self, left: bool, counts: Counts) -> i64 {
        let shown = match self.spec.kind {
            JoinKind::Semi => left && counts.matches > 0,
            JoinKind::Anti => left && counts.matches == 0,
            kind if left => kind.keeps_unmatched_left() && counts.matches == 0,
            kind => kind.keeps_unmatched_right() && counts.matches == 0,
        };
        if shown { counts.count } else { 0 }
    }

    fn codec(&self, left: bool) -> &RowCodec {
        if left {
            &self.sides.left
        } else {
            &self.sides.right
        }
    }

    /// Matches the rows of `delta` against the other side as it is now:
    /// returns the matched pairs (in the joined schema, with weights) when
    /// the kind outputs pairs, and updates the match counts of the other
    /// side's rows; `own_matches[i]` gets what row `i` matches.
    fn match_delta(
        &mut self,
        delta: &Delta,
        own_matches: &mut [i64],
        before: &mut Before,
    ) -> Result<Option<ChangeBatch>, EngineError> {
        // Candidates: (delta row, other side's row, its count).
        let mut candidates: Vec<(u32, RowBytes, i64)> = Vec::new();
        for (i, key) in delta.keys.iter().enumerate() {
            let Some(bucket) = key.as_ref().and_then(|k| self.buckets.get(k)) else {
                continue;
            };
            let other = if delta.left {
                &bucket.right
            } else {
                &bucket.left
            };
            candidates.extend(
                other
                    .iter()
                    .map(|(row, c)| (i as u32, row.clone(), c.count)),
            );
        }
        if candidates.is_empty() {
            return Ok(None);
        }
        let own_idx = UInt32Array::from_iter_values(candidates.iter().map(|c| c.0));
        let own = take_rows(delta.change.rows(), &own_idx)?;
        let other = self
            .codec(!delta.left)
            .decode(candidates.iter().map(|c| &c.1))?;
        let n = candidates.len();
        let all = UInt32Array::from_iter_values(0..n as u32);
        let pairs = if delta.left {
            self.sides
                .combine(&own, Some(&all), &other, Some(&all), n)?
        } else {
            self.sides
                .combine(&other, Some(&all), &own, Some(&all), n)?
        };
        let keep = match &self.spec.residual {
            None => None,
            Some(predicate) => Some(where_true(&predicate.evaluate(&pairs)?.into_array(n)?)?),
        };
        let passes = |p: usize| keep.as_ref().is_none_or(|k| k.value(p));
        let weights = delta.change.weights().values();
        let track_other = self.tracks(!delta.left);
        let track_own = self.tracks(delta.left);
        let mut pair_weights = Vec::with_capacity(n);
        let mut scratch = Vec::new();
        for (p, (i, other_row, other_count)) in candidates.iter().enumerate() {
            if !passes(p) {
                continue;
            }
            let i = *i as usize;
            let weight = weights[i];
            pair_weights.push(weight * other_count);
            if track_own {
                own_matches[i] += other_count;
            }
            if track_other {
                let key = delta.keys[i].clone().expect("matched rows have keys");
                let bucket = self.buckets.get_mut(&key).expect("a matched bucket");
                let counts = bucket
                    .side(!delta.left)
                    .get_mut(other_row)
                    .expect("a matched row");
                before
                    .entry((key.clone(), other_row.clone()))
                    .or_insert(*counts);
                counts.matches += weight;
                let now = Some(*counts);
                let tag = if delta.left { RIGHT } else { LEFT };
                mark_changed_to(
                    &mut self.changed,
                    &mut scratch,
                    tag,
                    &key,
                    &[other_row],
                    true,
                    now,
                );
            }
        }
        if self.spec.kind.outputs_left_only() || pair_weights.is_empty() {
            return Ok(None);
        }
        let pairs = match keep {
            Some(keep) => filter_record_batch(&pairs, &keep)?,
            None => pairs,
        };
        let pairs = rebind(&pairs, self.sides.output.schema())?;
        Ok(Some(ChangeBatch::new(
            pairs,
            Int64Array::from(pair_weights),
        )?))
    }

    /// Applies `delta` to its side (after matching it).
    fn apply_delta(
        &mut self,
        delta: &Delta,
        own_matches: &[i64],
        before: &mut Before,
        unkeyed: &mut Vec<(RowBytes, i64)>,
    ) -> Result<(), EngineError> {
        let weights = delta.change.weights().values();
        let tag = if delta.left { LEFT } else { RIGHT };
        let tracked = self.tracks(delta.left);
        let mut scratch = Vec::new();
        for (i, (key, row)) in delta.keys.iter().zip(&delta.rows).enumerate() {
            let Some(key) = key else {
                // Matches nothing, ever: its own output is its change.
                let shown = self.visible(
                    delta.left,
                    Counts {
                        count: weights[i],
                        matches: 0,
                    },
                );
                if shown != 0 {
                    unkeyed.push((row.clone(), shown));
                }
                continue;
            };
            let bucket = self.buckets.entry(key.clone()).or_default();
            let side = bucket.side(delta.left);
            let old = side.get(row).copied().unwrap_or_default();
            if tracked {
                before.entry((key.clone(), row.clone())).or_insert(old);
            }
            let new = Counts {
                count: old.count + weights[i],
                // A row new to the state matches what it just matched.
                matches: if old.count == 0 {
                    own_matches[i]
                } else {
                    old.matches
                },
            };
            let now = match new.count {
                0 => {
                    side.remove(row);
                    if bucket.left.is_empty() && bucket.right.is_empty() {
                        self.buckets.remove(key.as_ref());
                    }
                    None
                }
                c if c > 0 => {
                    side.insert(row.clone(), new);
                    Some(new)
                }
                _ => {
                    return Err(EngineError::Invariant {
                        operator: NAME,
                        message: "a row was retracted more often than it was inserted".into(),
                    });
                }
            };
            let existed = old.count > 0;
            mark_changed_to(
                &mut self.changed,
                &mut scratch,
                tag,
                key,
                &[row],
                existed,
                now,
            );
        }
        Ok(())
    }

    /// The change of the rows that the output shows on their own (padded,
    /// or a semi/anti join's left rows), from their counts before and now.
    fn visible_change(
        &self,
        left: bool,
        before: &Before,
        unkeyed: Vec<(RowBytes, i64)>,
    ) -> Result<Option<ChangeBatch>, EngineError> {
        let mut rows = unkeyed;
        for ((key, row), old) in before {
            let new = self
                .buckets
                .get(key)
                .and_then(|b| {
                    if left {
                        b.left.get(row)
                    } else {
                        b.right.get(row)
                    }
                })
                .copied()
                .unwrap_or_default();
            let delta = self.visible(left, new) - self.visible(left, *old);
            if delta != 0 {
                rows.push((row.clone(), delta));
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let decoded = self.codec(left).decode(rows.iter().map(|(r, _)| r))?;
        let n = decoded.num_rows();
        let batch = if self.spec.kind.outputs_left_only() {
            decoded
        } else {
            // The other side is all NULL: `combine` reads only its types.
            let all = UInt32Array::from_iter_values(0..n as u32);
            let other = RecordBatch::new_empty(self.codec(!left).schema().clone());
            if left {
                self.sides.combine(&decoded, Some(&all), &other, None, n)?
            } else {
                self.sides.combine(&other, None, &decoded, Some(&all), n)?
            }
        };
        let batch = rebind(&batch, self.sides.output.schema())?;
        Ok(Some(ChangeBatch::new(
            batch,
            Int64Array::from_iter_values(rows.iter().map(|(_, w)| *w)),
        )?))
    }

    fn delta<'a>(&self, change: &'a ChangeBatch, left: bool) -> Result<Delta<'a>, EngineError> {
        Ok(Delta {
            left,
            change,
            keys: self.sides.keys_of(&self.spec, change.rows(), left)?,
            rows: self.codec(left).encode_rows(change.rows())?,
        })
    }
}

impl Operator for DeltaJoin {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.sides.output.schema().clone()
    }

    fn structure(&self) -> String {
        // `/2`: the delta join's state layout (rows with match counts).
        let structure = self.spec.structure("join/2");
        match &self.expiry {
            Some(e) => match e.closer() {
                Closer::Key { key, .. } => format!("{structure}; closes by {key}"),
                Closer::Band(b) => format!(
                    "{structure}; closes by band {}-{} in [{:?}, {:?}]",
                    b.left, b.right, b.lo, b.hi
                ),
            },
            None => structure,
        }
    }

    fn watermarks(&mut self, inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        expect_watermarks(NAME, inputs, 2)?;
        self.advance_expiry(inputs)?;
        Ok(Watermarks::none())
    }

    fn take_late_rows(&mut self) -> u64 {
        self.expiry.as_mut().map_or(0, Expiry::take_late)
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 2)?;
        let mut parts: Vec<ChangeBatch> = Vec::new();
        let mut before_left = Before::new();
        let mut before_right = Before::new();
        let mut unkeyed_left = Vec::new();
        let mut unkeyed_right = Vec::new();
        // ΔL ⋈ R, then L' ⋈ ΔR.
        for (input, left) in [(&inputs[0], true), (&inputs[1], false)] {
            if input.is_empty() {
                continue;
            }
            let (input, values) = if self.expiry.is_some() {
                self.on_time(input, left)?
            } else {
                (input.clone(), Vec::new())
            };
            let input = &input;
            let delta = self.delta(input, left)?;
            let mut own_matches = vec![0i64; input.num_rows()];
            let (own_before, other_before) = if left {
                (&mut before_left, &mut before_right)
            } else {
                (&mut before_right, &mut before_left)
            };
            if let Some(pairs) = self.match_delta(&delta, &mut own_matches, other_before)? {
                parts.push(pairs);
            }
            let unkeyed = if left {
                &mut unkeyed_left
            } else {
                &mut unkeyed_right
            };
            self.apply_delta(&delta, &own_matches, own_before, unkeyed)?;
            let weights = input.weights().values();
            self.index_open(left, &delta.keys, &delta.rows, weights, &values);
        }
        if self.tracks(true) {
            parts.extend(self.visible_change(true, &before_left, unkeyed_left)?);
        }
        if self.tracks(false) {
            parts.extend(self.visible_change(false, &before_right, unkeyed_right)?);
        }
        // After the output: a row closing now was seen by this epoch, and
        // its going retracts nothing (an outer join's padded row stays).
        self.expire();
        let schema = self.sides.output.schema();
        if parts.is_empty() {
            return Ok(empty_change(schema));
        }
        settle(concat_changes(schema, &parts)?)
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let changed = std::mem::take(&mut self.changed);
        let mut entries: Vec<StateEntry> = changed
            .into_iter()
            .filter(|(_, pending)| pending.checkpointed || pending.now.is_some())
            .map(|(key, pending)| {
                let left = key.first() == Some(&LEFT);
                StateEntry {
                    key: key.into(),
                    value: pending.now.map(|c| Bytes::from(self.encode(left, c))),
                }
            })
            .collect();
        if self.take_watermarks_moved() {
            entries.extend(self.watermark_entries());
        }
        Ok(entries)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let mut entries = Vec::new();
        for (key, bucket) in &self.buckets {
            for (tag, side, left) in [(LEFT, &bucket.left, true), (RIGHT, &bucket.right, false)] {
                for (row, counts) in side.iter() {
                    entries.push(StateEntry::set(
                        state_key(tag, key, row),
                        self.encode(left, *counts),
                    ));
                }
            }
        }
        entries.extend(self.watermark_entries());
        // In key order, so equal states snapshot to equal bytes.
        entries.sort_unstable();
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            let left = match key.tag {
                LEFT => true,
                RIGHT => false,
                WATERMARK_LEFT | WATERMARK_RIGHT => {
                    self.apply_watermark(key.tag == WATERMARK_LEFT, e.value.as_deref())?;
                    continue;
                }
                _ => return Err(unreadable(NAME, "an unknown tag")),
            };
            let counts = match e.value.as_deref() {
                None => None,
                Some(value) => Some(self.decode(left, value)?),
            };
            let bucket = self
                .buckets
                .entry(RowBytes::from(key.distribution))
                .or_default();
            match counts {
                Some(counts) => {
                    bucket.side(left).insert(RowBytes::from(key.rest), counts);
                }
                None => {
                    bucket.side(left).remove(key.rest);
                    if bucket.left.is_empty() && bucket.right.is_empty() {
                        self.buckets.remove(key.distribution);
                    }
                }
            }
        }
        self.index_restored()?;
        self.changed.clear();
        Ok(())
    }
}

/// Sharded by join key: both sides' rows of one key are in one worker,
/// so a pair's left and right row always meet there. Every output row
/// carries the key of the worker that made it (a pair and a left-padded
/// row in their left columns, a right-padded row in its right ones, a
/// NULL-key row in its own), so equal output rows come from one worker,
/// except in a full join: an all-NULL left row padded with NULLs equals an
/// all-NULL right row padded with NULLs, and their keys (expressions of
/// all-NULL rows) may differ.
impl Keyed for DeltaJoin {
    fn shardable(&self) -> bool {
        self.sides.key.is_some()
    }

    fn distribution_keys(
        &self,
        input: usize,
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        self.sides.distribution_keys(&self.spec, rows, input == 0)
    }

    fn keys_in_output(&self) -> bool {
        self.spec.kind != JoinKind::Full
    }
}

impl DeltaJoin {
    /// A row's state value: its count, then its match count where kept.
    fn encode(&self, left: bool, counts: Counts) -> Vec<u8> {
        let mut value = counts.count.to_le_bytes().to_vec();
        if self.tracks(left) {
            value.extend_from_slice(&counts.matches.to_le_bytes());
        }
        value
    }

    fn decode(&self, left: bool, value: &[u8]) -> Result<Counts, EngineError> {
        let malformed = || unreadable(NAME, "a malformed row count");
        let (count, rest) = value.split_first_chunk::<8>().ok_or_else(malformed)?;
        let count = i64::from_le_bytes(*count);
        let matches = if self.tracks(left) {
            let matches: [u8; 8] = rest.try_into().map_err(|_| malformed())?;
            i64::from_le_bytes(matches)
        } else if rest.is_empty() {
            0
        } else {
            return Err(malformed());
        };
        if count <= 0 || matches < 0 {
            return Err(malformed());
        }
        Ok(Counts { count, matches })
    }
}
