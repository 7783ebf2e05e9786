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

use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use datafusion::physical_expr::expressions::Column;
use weir_common::ChangeBatch;

use super::JoinSpec;
use super::delta::{DeltaJoin, LEFT, RIGHT};
use super::side_rows::SideRows;
use crate::EngineError;
use crate::operator::{StateEntry, mark_changed_to, state_key};
use crate::rows::RowBytes;
use crate::watermark::{NONE_YET, Watermarks, as_i64, derive, drop_late, monotone_column};

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

/// The closing state of a window join.
pub(super) struct Expiry {
    /// The index in `JoinSpec::on` of the key that closes.
    key: usize,
    closing: Closing,
    left: Clock,
    right: Clock,
    /// Buckets holding rows of each side, by their value in the key.
    open: [BTreeMap<i64, Vec<RowBytes>>; 2],
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
    pub(super) fn new(key: usize, closing: Closing) -> Self {
        Self {
            key,
            closing,
            left: Clock::default(),
            right: Clock::default(),
            open: [BTreeMap::new(), BTreeMap::new()],
            late: 0,
            moved: false,
        }
    }

    pub(super) fn key(&self) -> usize {
        self.key
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

/// The value of the closing key of a side's input, from its watermarks.
fn key_watermark(
    expr: &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
    schema: &SchemaRef,
    input: &Watermarks,
) -> Result<Option<i64>, EngineError> {
    let Some(column) = monotone_column(expr) else {
        return Ok(None);
    };
    let Some(value) = input.get(column) else {
        return Ok(None);
    };
    if expr.as_ref().is::<Column>() {
        return Ok(Some(value));
    }
    derive(expr, schema, column, value).map(Some)
}

impl DeltaJoin {
    /// Learns both sides' watermarks on the closing key.
    pub(super) fn advance_expiry(&mut self, inputs: &[Watermarks]) -> Result<(), EngineError> {
        let Some(key) = self.expiry.as_ref().map(Expiry::key) else {
            return Ok(());
        };
        let (l, r) = &self.spec.on[key];
        let left = key_watermark(l, &self.spec.left_schema, &inputs[0])?;
        let right = key_watermark(r, &self.spec.right_schema, &inputs[1])?;
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
        let key = self.expiry.as_ref().map_or(0, Expiry::key);
        let (l, r) = &self.spec.on[key];
        let expr = if left { l } else { r };
        let rows = change.rows();
        as_i64(&expr.evaluate(rows)?.into_array(rows.num_rows())?)
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

    /// Files the buckets `keys` (rows of one side, just applied) under
    /// their closing key's value.
    pub(super) fn index_open(
        &mut self,
        left: bool,
        keys: &[Option<RowBytes>],
        values: &[Option<i64>],
    ) {
        let Some(expiry) = self.expiry.as_mut() else {
            return;
        };
        let open = &mut expiry.open[usize::from(!left)];
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
                open.entry(*value).or_default().push(key.clone());
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
        let limits = match expiry.closing {
            // Left rows close by the right side's watermark, and back.
            Closing::ByOtherSide => [expiry.right.in_effect, expiry.left.in_effect],
            Closing::ByBothSides => {
                let both = expiry.left.in_effect.min(expiry.right.in_effect);
                [both, both]
            }
        };
        let mut closed: [Vec<RowBytes>; 2] = [Vec::new(), Vec::new()];
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
            for key in keys {
                let Some(bucket) = self.buckets.get_mut(&key) else {
                    continue;
                };
                let (side, indexed) = if left {
                    (&mut bucket.left, &mut bucket.indexed_left)
                } else {
                    (&mut bucket.right, &mut bucket.indexed_right)
                };
                *indexed = false;
                let rows: Vec<RowBytes> = side.iter().map(|(r, _)| r.clone()).collect();
                *side = SideRows::default();
                for row in rows {
                    mark_changed_to(
                        &mut self.changed,
                        &mut scratch,
                        tag,
                        &key,
                        &[row.as_ref()],
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
        let (Some(expiry), Some(codec)) = (self.expiry.as_ref(), self.sides.key.as_ref()) else {
            return Ok(());
        };
        let key = expiry.key();
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
                    self.index_open(left, &[Some(bucket_key.clone())], &[Some(value)]);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "expiry_tests.rs"]
mod tests;
