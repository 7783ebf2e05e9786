//! [`BucketJoin`]: `NOT IN` ([`JoinKind::NullAwareAnti`]), recomputed per
//! bucket.
//!
//! A NULL in `NOT IN` is "unknown", so whether a left row survives depends
//! on the whole right side (is it empty? does it hold a NULL key?), not only
//! on its bucket. Both inputs are kept in state, bucketed by join key; when
//! an epoch changes a bucket, its output is recomputed from the bucket's two
//! multisets and the difference to the bucket's previous output is emitted.
//! The operator counts the right side's rows and NULL-key rows, and when
//! either fact flips it recomputes every bucket.
//!
//! Cost per epoch: O(left rows × right rows) of the changed buckets (of all
//! buckets when the right side becomes empty or gains or loses its NULLs).
//!
//! State entries (distribution key = the bucket: `0` for a NULL key, `1`
//! and the key otherwise): one per row of each side (`LEFT`, `RIGHT`) and
//! per output row of the bucket (`OUTPUT`), each valued by its count, so an
//! epoch changes the entries of its input rows and of its output change. The
//! right side's counts are derived, not stored.

use std::collections::BTreeSet;

use arrow::array::{BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use weir_common::ChangeBatch;

use super::{JoinKind, JoinSpec, Sides, rebind, take_rows};

use crate::EngineError;
use crate::multiset::Multiset;
use crate::operator::{
    Operator, StateEntry, changed_entries, count_value, expect_inputs, parse_state_key, read_count,
    state_key, unreadable,
};
use crate::ops::parallel::{Keyed, not_shardable};
use crate::rows::{RowBytes, where_true};

const NAME: &str = "join";

/// State key tags.
const LEFT: u8 = 0;
const RIGHT: u8 = 1;
const OUTPUT: u8 = 2;

/// A bucket's key as a distribution key: NULL and a key of no columns (a
/// join without equi keys) must differ.
fn bucket_bytes(key: &Option<RowBytes>) -> Vec<u8> {
    match key {
        None => vec![0],
        Some(key) => [&[1], key.as_ref()].concat(),
    }
}

fn bucket_of(bytes: &[u8]) -> Result<Option<RowBytes>, EngineError> {
    match bytes.split_first() {
        Some((0, [])) => Ok(None),
        Some((1, key)) => Ok(Some(RowBytes::from(key))),
        _ => Err(unreadable(NAME, "a malformed join key")),
    }
}

/// What a `NOT IN` needs to know about the whole right side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RightSide {
    rows: i64,
    null_key_rows: i64,
}

impl RightSide {
    /// Whether the left rows of `key`'s bucket may be output at all.
    fn admits(self, key_is_null: bool) -> bool {
        self.rows == 0 || (self.null_key_rows == 0 && !key_is_null)
    }
}

/// One key's rows on both sides and the output they produced. `None` keys
/// (a NULL in the key) never match.
#[derive(Clone, Default)]
struct Bucket {
    left: Multiset,
    right: Multiset,
    output: Multiset,
}

pub(super) struct BucketJoin {
    spec: JoinSpec,
    sides: Sides,
    buckets: imbl::OrdMap<Option<RowBytes>, Bucket>,
    /// Kept for [`JoinKind::NullAwareAnti`] only.
    right_side: RightSide,
    /// State keys changed since the last `take_state_changes`.
    changed: BTreeSet<Vec<u8>>,
}

impl BucketJoin {
    pub(super) fn new(spec: JoinSpec) -> Result<Self, EngineError> {
        Ok(Self {
            sides: Sides::new(&spec)?,
            buckets: imbl::OrdMap::new(),
            right_side: RightSide::default(),
            changed: BTreeSet::new(),
            spec,
        })
    }

    /// The output of one bucket.
    fn bucket_output(
        &self,
        bucket: &Bucket,
        matchable: bool,
        right_side: RightSide,
    ) -> Result<Multiset, EngineError> {
        if self.spec.kind == JoinKind::NullAwareAnti && !right_side.admits(!matchable) {
            return Ok(Multiset::default());
        }
        let left = self.sides.left.decode(bucket.left.expanded())?;
        let right = self.sides.right.decode(bucket.right.expanded())?;
        let (n, m) = (left.num_rows(), right.num_rows());
        let mut left_matched = vec![false; n];
        let mut right_matched = vec![false; m];
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        if matchable && n > 0 && m > 0 {
            let left_idx = UInt32Array::from_iter_values(
                (0..n as u32).flat_map(|i| std::iter::repeat_n(i, m)),
            );
            let right_idx = UInt32Array::from_iter_values((0..n).flat_map(|_| 0..m as u32));
            let crossed =
                self.sides
                    .combine(&left, Some(&left_idx), &right, Some(&right_idx), n * m)?;
            let keep: BooleanArray = match &self.spec.residual {
                None => BooleanArray::from(vec![true; n * m]),
                Some(predicate) => {
                    let mask = predicate.evaluate(&crossed)?.into_array(n * m)?;
                    where_true(&mask)?
                }
            };
            for p in 0..n * m {
                if keep.value(p) {
                    let (i, j) = (left_idx.value(p), right_idx.value(p));
                    left_matched[i as usize] = true;
                    right_matched[j as usize] = true;
                    pairs.push((i, j));
                }
            }
        }
        let kind = self.spec.kind;
        let mut parts: Vec<RecordBatch> = Vec::new();
        if kind.outputs_left_only() {
            let wanted = kind == JoinKind::Semi;
            let rows = UInt32Array::from_iter_values(
                (0..n as u32).filter(|&i| left_matched[i as usize] == wanted),
            );
            parts.push(take_rows(&left, &rows)?);
        } else {
            let (li, ri): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
            let (li, ri) = (UInt32Array::from(li), UInt32Array::from(ri));
            parts.push(
                self.sides
                    .combine(&left, Some(&li), &right, Some(&ri), li.len())?,
            );
            if kind.keeps_unmatched_left() {
                let rows = UInt32Array::from_iter_values(
                    (0..n as u32).filter(|&i| !left_matched[i as usize]),
                );
                parts.push(
                    self.sides
                        .combine(&left, Some(&rows), &right, None, rows.len())?,
                );
            }
            if kind.keeps_unmatched_right() {
                let rows = UInt32Array::from_iter_values(
                    (0..m as u32).filter(|&j| !right_matched[j as usize]),
                );
                parts.push(
                    self.sides
                        .combine(&left, None, &right, Some(&rows), rows.len())?,
                );
            }
        }
        let mut out = Multiset::default();
        for part in parts {
            let part = rebind(&part, self.sides.output.schema())?;
            for row in self.sides.output.encode_rows(&part)? {
                out.add(&row, 1, NAME)?;
            }
        }
        Ok(out)
    }
}

/// Not shardable: whether a left row survives depends on the whole right
/// side (is it empty? does it hold a NULL?), not on its bucket alone.
impl Keyed for BucketJoin {
    fn shardable(&self) -> bool {
        false
    }

    fn distribution_keys(
        &self,
        _input: usize,
        _rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        Err(not_shardable(NAME))
    }
}

impl Operator for BucketJoin {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.sides.output.schema().clone()
    }

    fn structure(&self) -> String {
        self.spec.structure(NAME)
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 2)?;
        let mut buckets = self.buckets.clone();
        let mut right_side = self.right_side;
        let mut touched: BTreeSet<Option<RowBytes>> = BTreeSet::new();
        let mut changed: Vec<Vec<u8>> = Vec::new();
        for (side, input) in inputs.iter().enumerate() {
            if input.is_empty() {
                continue;
            }
            let is_left = side == 0;
            let keys = self.sides.keys_of(&self.spec, input.rows(), is_left)?;
            let codec = if is_left {
                &self.sides.left
            } else {
                &self.sides.right
            };
            let rows = codec.encode_rows(input.rows())?;
            for ((key, row), &w) in keys.into_iter().zip(&rows).zip(input.weights().values()) {
                let bucket = buckets.entry(key.clone()).or_default();
                let set = if is_left {
                    &mut bucket.left
                } else {
                    &mut bucket.right
                };
                set.add(row, w, NAME)?;
                let tag = if is_left { LEFT } else { RIGHT };
                changed.push(state_key(tag, &bucket_bytes(&key), row));
                if !is_left {
                    right_side.rows += w;
                    if key.is_none() {
                        right_side.null_key_rows += w;
                    }
                }
                touched.insert(key);
            }
        }
        let flipped = self.spec.kind == JoinKind::NullAwareAnti
            && (right_side.admits(false) != self.right_side.admits(false)
                || right_side.admits(true) != self.right_side.admits(true));
        if flipped {
            touched.extend(buckets.keys().cloned());
        }
        let mut change: Vec<(RowBytes, i64)> = Vec::new();
        for key in touched {
            let bucket = buckets.get(&key).cloned().unwrap_or_default();
            let output = self.bucket_output(&bucket, key.is_some(), right_side)?;
            let first = change.len();
            bucket.output.diff_into(&output, &mut change);
            let bucket_key = bucket_bytes(&key);
            changed.extend(
                change[first..]
                    .iter()
                    .map(|(row, _)| state_key(OUTPUT, &bucket_key, row)),
            );
            if bucket.left.is_empty() && bucket.right.is_empty() {
                buckets.remove(&key);
            } else if let Some(b) = buckets.get_mut(&key) {
                b.output = output;
            }
        }
        let out = self.sides.output.consolidated_change(&change)?;
        self.buckets = buckets;
        self.right_side = right_side;
        self.changed.extend(changed);
        Ok(out)
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let entries = changed_entries(&self.changed, |key| self.value_of(key))?;
        self.changed.clear();
        Ok(entries)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let mut entries = Vec::new();
        for (key, bucket) in &self.buckets {
            let bucket_key = bucket_bytes(key);
            for (tag, set) in [
                (LEFT, &bucket.left),
                (RIGHT, &bucket.right),
                (OUTPUT, &bucket.output),
            ] {
                for (row, count) in set.iter() {
                    let key = state_key(tag, &bucket_key, row);
                    entries.push(StateEntry::set(key, count_value(count)));
                }
            }
        }
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        let mut buckets = self.buckets.clone();
        let mut right_side = self.right_side;
        let mut touched: BTreeSet<Option<RowBytes>> = BTreeSet::new();
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            let count = read_count(NAME, e.value.as_deref())?;
            let bucket_key = bucket_of(key.distribution)?;
            let bucket = buckets.entry(bucket_key.clone()).or_default();
            match key.tag {
                LEFT => {
                    bucket.left.set(key.rest, count);
                }
                RIGHT => {
                    let delta = count - bucket.right.set(key.rest, count);
                    right_side.rows += delta;
                    if bucket_key.is_none() {
                        right_side.null_key_rows += delta;
                    }
                }
                OUTPUT => {
                    bucket.output.set(key.rest, count);
                }
                _ => return Err(unreadable(NAME, "an unknown tag")),
            }
            touched.insert(bucket_key);
        }
        for key in touched {
            if buckets
                .get(&key)
                .is_some_and(|b| b.left.is_empty() && b.right.is_empty() && b.output.is_empty())
            {
                buckets.remove(&key);
            }
        }
        self.buckets = buckets;
        self.right_side = right_side;
        self.changed.clear();
        Ok(())
    }
}

impl BucketJoin {
    /// The current value of a state key (`None` when it has none).
    fn value_of(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let key = parse_state_key(NAME, key)?;
        let Some(bucket) = self.buckets.get(&bucket_of(key.distribution)?) else {
            return Ok(None);
        };
        let set = match key.tag {
            LEFT => &bucket.left,
            RIGHT => &bucket.right,
            OUTPUT => &bucket.output,
            _ => return Err(unreadable(NAME, "an unknown tag")),
        };
        let count = set.count_of(key.rest);
        Ok((count > 0).then(|| count_value(count)))
    }
}
