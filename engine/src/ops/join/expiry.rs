//! Window joins: an equi-join one of whose keys carries a watermark on
//! both sides (two windowed aggregates joined on their window, as in
//! Nexmark q5 and q8) keeps a key's rows only while they can still change
//! the output. Rows of a side behind that side's watermark are late:
//! dropped and counted. Then a key's rows go ([`Closing`]):
//! - over inputs that only insert, a side's rows once the *other* side's
//!   watermark passes their key (nothing new can match them; an inner
//!   join keeps no output state, so nothing is retracted);
//! - over inputs that retract (updating aggregates), once *both*
//!   watermarks pass the key: neither side can change it again, so the
//!   output under it is final, outer joins' padded rows included. Going
//!   happens after the epoch's output is computed, so a row that arrived
//!   in the epoch that closes its key is joined first.
//!
//! State: the watermark in effect of each side (`WATERMARK_LEFT`,
//! `WATERMARK_RIGHT`, empty distribution key, kept alike by every worker).

use std::collections::BTreeMap;

use bytes::Bytes;
use weir_common::ChangeBatch;

use super::JoinSpec;
use super::delta::{DeltaJoin, LEFT, RIGHT};
use super::side_rows::SideRows;
use crate::EngineError;
use crate::operator::{StateEntry, mark_changed_to, state_key};
use crate::rows::RowBytes;
use crate::watermark::{NONE_YET, Watermarks, as_i64, drop_late, monotone_column, of_expression};

pub(super) const WATERMARK_LEFT: u8 = 2;
pub(super) const WATERMARK_RIGHT: u8 = 3;

/// One side's watermark on the closing key.
#[derive(Debug, Clone, Copy)]
struct Clock {
    /// Rows of this side behind it are late.
    in_effect: i64,
    /// What this epoch brought ([`crate::Operator::watermarks`]).
    next: i64,
}

impl Default for Clock {
    fn default() -> Self {
        Self {
            in_effect: NONE_YET,
            next: NONE_YET,
        }
    }
}

/// When a key's rows go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// Each side's rows go once the *other* side's watermark passes their
    /// key: no new match can come. Only for inputs that never retract (a
    /// retraction of a row already gone would find nothing to pair with).
    ByOtherSide,
    /// A key's rows of both sides go once *both* watermarks pass it:
    /// neither side can change it again, so its output is final. Sound
    /// over inputs that retract (updating window aggregates, Nexmark q5
    /// and q8), at the cost of holding a key until the slower side passes.
    ByBothSides,
}

/// What a join closes by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closer {
    /// Key `key` of `JoinSpec::on`, which carries a watermark on both
    /// sides: a bucket's side goes at once.
    Key { key: usize, closing: Closing },
    /// A band between a time column of each side (an interval join).
    Band(Band),
}

/// An interval join's condition on times: `left - right` within
/// `[lo, hi]`, in the columns' unit (`None`: unbounded on that side), as
/// the residual requires of every pair (it may require more). A left row
/// at `l` can only pair with right rows at `r` in `[l - hi, l - lo]`, so
/// once the right watermark passes `l - lo` no new partner can come; once
/// its own watermark passes `l` it cannot change either, and it goes. The
/// same for right rows, by `r + hi` and the left watermark. Holding both
/// conditions keeps it sound over inputs that retract and for every kind
/// (what a row contributed can no longer change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Band {
    /// The time column of the left input, and of the right.
    pub left: usize,
    pub right: usize,
    pub lo: Option<i64>,
    pub hi: Option<i64>,
}

/// One open entry: a bucket, and (interval joins) the row in it.
type Filed = (RowBytes, Option<RowBytes>);

/// The closing state of a window or interval join.
pub(super) struct Expiry {
    closer: Closer,
    left: Clock,
    right: Clock,
    /// Rows of each side by the value that closes them: whole bucket sides
    /// by their key's value ([`Closer::Key`]), rows by their time
    /// ([`Closer::Band`]).
    open: [BTreeMap<i64, Vec<Filed>>; 2],
    late: u64,
    /// A watermark in effect moved since the last `take_state_changes`.
    moved: bool,
}

/// The key of `spec` (an index in `on`) that closes a window join: the
/// first whose left expression carries a watermark of `left` (columns of
/// the left input) and right one of `right`, of one type. Closing by the
/// other side is kept to inner joins (the only kind it is tested for);
/// closing by both sides serves every kind but `NOT IN`, whose output
/// depends on NULLs under every key.
pub fn window_key(
    spec: &JoinSpec,
    left: &[usize],
    right: &[usize],
    closing: Closing,
) -> Option<usize> {
    let closes = match closing {
        Closing::ByOtherSide => spec.kind == super::JoinKind::Inner,
        Closing::ByBothSides => spec.kind != super::JoinKind::NullAwareAnti,
    };
    if !closes {
        return None;
    }
    spec.on.iter().position(|(l, r)| {
        monotone_column(l).is_some_and(|c| left.contains(&c))
            && monotone_column(r).is_some_and(|c| right.contains(&c))
            && l.data_type(&spec.left_schema).ok() == r.data_type(&spec.right_schema).ok()
    })
}

impl Expiry {
    pub(super) fn new(closer: Closer) -> Self {
        Self {
            closer,
            left: Clock::default(),
            right: Clock::default(),
            open: [BTreeMap::new(), BTreeMap::new()],
            late: 0,
            moved: false,
        }
    }

    pub(super) fn closer(&self) -> Closer {
        self.closer
    }

    fn clock(&mut self, left: bool) -> &mut Clock {
        if left {
            &mut self.left
        } else {
            &mut self.right
        }
    }

    pub(super) fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.late)
    }
}

/// A watermark moved by `by` (column units); unknown and final stay so.
fn shift(watermark: i64, by: i64) -> i64 {
    if watermark == NONE_YET || watermark == crate::watermark::FINAL {
        watermark
    } else {
        watermark.saturating_add(by)
    }
}

impl DeltaJoin {
    /// Learns both sides' watermarks on what closes.
    pub(super) fn advance_expiry(&mut self, inputs: &[Watermarks]) -> Result<(), EngineError> {
        let Some(closer) = self.expiry.as_ref().map(Expiry::closer) else {
            return Ok(());
        };
        let (left, right) = match closer {
            Closer::Key { key, .. } => {
                let (l, r) = &self.spec.on[key];
                (
                    of_expression(l, &self.spec.left_schema, &inputs[0])?,
                    of_expression(r, &self.spec.right_schema, &inputs[1])?,
                )
            }
            Closer::Band(band) => (inputs[0].get(band.left), inputs[1].get(band.right)),
        };
        let Some(expiry) = self.expiry.as_mut() else {
            return Ok(());
        };
        for (side, value) in [(true, left), (false, right)] {
            if let Some(value) = value {
                let clock = expiry.clock(side);
                clock.next = clock.next.max(value);
            }
        }
        Ok(())
    }

    /// The closing key's value of every row of one side's change.
    fn key_values(
        &self,
        change: &ChangeBatch,
        left: bool,
    ) -> Result<Vec<Option<i64>>, EngineError> {
        let rows = change.rows();
        match self.expiry.as_ref().map(Expiry::closer) {
            Some(Closer::Band(band)) => {
                as_i64(rows.column(if left { band.left } else { band.right }))
            }
            closer => {
                let key = match closer {
                    Some(Closer::Key { key, .. }) => key,
                    _ => 0,
                };
                let (l, r) = &self.spec.on[key];
                let expr = if left { l } else { r };
                as_i64(&expr.evaluate(rows)?.into_array(rows.num_rows())?)
            }
        }
    }

    /// `change` of one side without its late rows, counted, and the
    /// closing key's value of each row kept.
    pub(super) fn on_time(
        &mut self,
        change: &ChangeBatch,
        left: bool,
    ) -> Result<(ChangeBatch, Vec<Option<i64>>), EngineError> {
        if change.is_empty() {
            return Ok((change.clone(), Vec::new()));
        }
        let values = self.key_values(change, left)?;
        let Some(expiry) = self.expiry.as_mut() else {
            return Ok((change.clone(), values));
        };
        let watermark = expiry.clock(left).in_effect;
        let (kept, values, late) = drop_late(change, values, watermark)?;
        expiry.late += late;
        Ok((kept, values))
    }

    /// Files rows of one side just applied (`keys[i]`, `rows[i]`, with
    /// `weights[i]`) under their closing value: the bucket's side once for
    /// a window join, each inserted row for an interval join.
    pub(super) fn index_open(
        &mut self,
        left: bool,
        keys: &[Option<RowBytes>],
        rows: &[RowBytes],
        weights: &[i64],
        values: &[Option<i64>],
    ) {
        let Some(expiry) = self.expiry.as_mut() else {
            return;
        };
        let open = &mut expiry.open[usize::from(!left)];
        if let Closer::Band(_) = expiry.closer {
            for (((key, row), weight), value) in keys.iter().zip(rows).zip(weights).zip(values) {
                // A retraction leaves its earlier filing in place: closing
                // then finds the row gone, which costs nothing.
                if let (Some(key), Some(value), true) = (key, value, *weight > 0) {
                    open.entry(*value)
                        .or_default()
                        .push((key.clone(), Some(row.clone())));
                }
            }
            return;
        }
        for (key, value) in keys.iter().zip(values) {
            let (Some(key), Some(value)) = (key, value) else {
                continue;
            };
            let Some(bucket) = self.buckets.get_mut(key) else {
                continue;
            };
            let indexed = if left {
                &mut bucket.indexed_left
            } else {
                &mut bucket.indexed_right
            };
            if !*indexed {
                *indexed = true;
                open.entry(*value).or_default().push((key.clone(), None));
            }
        }
    }

    /// Moves both watermarks in effect to this epoch's, and drops the rows
    /// of each side that the other side can no longer match.
    pub(super) fn expire(&mut self) {
        let Some(expiry) = self.expiry.as_mut() else {
            return;
        };
        let mut moved = false;
        for side in [&mut expiry.left, &mut expiry.right] {
            if side.next > side.in_effect {
                side.in_effect = side.next;
                moved = true;
            }
        }
        expiry.moved |= moved;
        let (l, r) = (expiry.left.in_effect, expiry.right.in_effect);
        let limits = match expiry.closer {
            // Left rows close by the right side's watermark, and back.
            Closer::Key {
                closing: Closing::ByOtherSide,
                ..
            } => [r, l],
            Closer::Key {
                closing: Closing::ByBothSides,
                ..
            } => [l.min(r), l.min(r)],
            Closer::Band(band) => [
                band.lo.map_or(NONE_YET, |lo| l.min(shift(r, lo))),
                band.hi
                    .map_or(NONE_YET, |hi| r.min(shift(l, hi.saturating_neg()))),
            ],
        };
        let mut closed: [Vec<Filed>; 2] = [Vec::new(), Vec::new()];
        for (s, limit) in limits.into_iter().enumerate() {
            let later = expiry.open[s].split_off(&limit);
            closed[s] = std::mem::replace(&mut expiry.open[s], later)
                .into_values()
                .flatten()
                .collect();
        }
        let mut scratch = Vec::new();
        for (s, keys) in closed.into_iter().enumerate() {
            let left = s == 0;
            let tag = if left { LEFT } else { RIGHT };
            for (key, row) in keys {
                let Some(bucket) = self.buckets.get_mut(&key) else {
                    continue;
                };
                let (side, indexed) = if left {
                    (&mut bucket.left, &mut bucket.indexed_left)
                } else {
                    (&mut bucket.right, &mut bucket.indexed_right)
                };
                let rows: Vec<RowBytes> = match row {
                    Some(row) if side.get(&row).is_some() => {
                        side.remove(&row);
                        vec![row]
                    }
                    Some(_) => Vec::new(),
                    None => {
                        *indexed = false;
                        let rows = side.iter().map(|(r, _)| r.clone()).collect();
                        *side = SideRows::default();
                        rows
                    }
                };
                for row in rows {
                    mark_changed_to(
                        &mut self.changed,
                        &mut scratch,
                        tag,
                        &key,
                        &[row.as_ref()],
                        true,
                        None,
                    );
                }
                if bucket.left.is_empty() && bucket.right.is_empty() {
                    self.buckets.remove(&key);
                }
            }
        }
    }

    /// Whether a watermark in effect moved since the last call.
    pub(super) fn take_watermarks_moved(&mut self) -> bool {
        self.expiry
            .as_mut()
            .is_some_and(|e| std::mem::take(&mut e.moved))
    }

    /// The watermark entries (those known).
    pub(super) fn watermark_entries(&self) -> Vec<StateEntry> {
        let Some(expiry) = self.expiry.as_ref() else {
            return Vec::new();
        };
        [
            (WATERMARK_LEFT, expiry.left),
            (WATERMARK_RIGHT, expiry.right),
        ]
        .into_iter()
        .filter(|(_, c)| c.in_effect != NONE_YET)
        .map(|(tag, c)| StateEntry {
            key: state_key(tag, &[], &[]).into(),
            value: Some(Bytes::from(crate::watermark::state_value(c.in_effect))),
        })
        .collect()
    }

    /// Applies a watermark entry (restore).
    pub(super) fn apply_watermark(
        &mut self,
        left: bool,
        value: Option<&[u8]>,
    ) -> Result<(), EngineError> {
        let value = crate::watermark::from_state_value("join", value)?;
        if let Some(expiry) = self.expiry.as_mut() {
            let clock = expiry.clock(left);
            clock.in_effect = value;
            clock.next = clock.next.max(value);
        }
        Ok(())
    }

    /// After a restore: files every bucket read back under its value.
    pub(super) fn index_restored(&mut self) -> Result<(), EngineError> {
        let key = match self.expiry.as_ref().map(Expiry::closer) {
            None => return Ok(()),
            Some(Closer::Band(band)) => return self.index_restored_rows(band),
            Some(Closer::Key { key, .. }) => key,
        };
        let Some(codec) = self.sides.key.as_ref() else {
            return Ok(());
        };
        let keys: Vec<RowBytes> = self.buckets.keys().cloned().collect();
        if keys.is_empty() {
            return Ok(());
        }
        let decoded = codec.decode(keys.iter())?;
        let values = as_i64(decoded.column(key))?;
        for (bucket_key, value) in keys.iter().zip(values) {
            let Some(value) = value else { continue };
            let Some(bucket) = self.buckets.get(bucket_key) else {
                continue;
            };
            let (has_left, has_right) = (!bucket.left.is_empty(), !bucket.right.is_empty());
            for (left, has) in [(true, has_left), (false, has_right)] {
                if has {
                    let keys = [Some(bucket_key.clone())];
                    self.index_open(left, &keys, &[], &[], &[Some(value)]);
                }
            }
        }
        Ok(())
    }

    /// [`Self::index_restored`] of an interval join: every row by its time.
    fn index_restored_rows(&mut self, band: Band) -> Result<(), EngineError> {
        for left in [true, false] {
            let mut keys = Vec::new();
            let mut rows = Vec::new();
            for (key, bucket) in &self.buckets {
                let side = if left { &bucket.left } else { &bucket.right };
                for (row, _) in side.iter() {
                    keys.push(Some(key.clone()));
                    rows.push(row.clone());
                }
            }
            if rows.is_empty() {
                continue;
            }
            let codec = if left {
                &self.sides.left
            } else {
                &self.sides.right
            };
            let decoded = codec.decode(rows.iter())?;
            let times = as_i64(decoded.column(if left { band.left } else { band.right }))?;
            let weights = vec![1; rows.len()];
            self.index_open(left, &keys, &rows, &weights, &times);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "expiry_tests.rs"]
mod tests;
