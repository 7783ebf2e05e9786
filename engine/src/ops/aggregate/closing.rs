//! Groups that close by event time (the module doc of [`super`]): late
//! rows dropped, closed groups' state dropped, and under `EMIT ON WINDOW
//! CLOSE` their rows emitted once at close.

use weir_common::ChangeBatch;

use super::calls::Strategy;
use super::{Aggregate, GROUP, OUTPUT, ROW, VALUE, WATERMARK};
use crate::EngineError;
use crate::operator::{StateEntry, mark_changed, state_key, state_key_into};
use crate::rows::{RowBytes, empty_change};
use crate::watermark::{NONE_YET, as_i64, drop_late};

impl Aggregate {
    fn closing_key(&self) -> usize {
        self.closing.as_ref().map_or(0, |c| c.key)
    }

    /// `input` without its late rows (those of groups closed by the
    /// watermark in effect), counted; and each kept row's value in the
    /// closing column.
    pub(super) fn on_time(
        &mut self,
        input: &ChangeBatch,
    ) -> Result<(ChangeBatch, Vec<Option<i64>>), EngineError> {
        if input.is_empty() {
            return Ok((input.clone(), Vec::new()));
        }
        let key = self.closing_key();
        let rows = input.rows();
        let values = as_i64(
            &self.group_by[key]
                .evaluate(rows)?
                .into_array(rows.num_rows())?,
        )?;
        let watermark = self.closing.as_ref().map_or(NONE_YET, |c| c.watermark);
        let (kept, values, late) = drop_late(input, values, watermark)?;
        if let Some(closing) = &mut self.closing {
            closing.late += late;
        }
        Ok((kept, values))
    }

    /// Files each group a row of this step started under its value in the
    /// closing column (`slots[i]` is row `i`'s group).
    pub(super) fn index_windows(&mut self, slots: &[u32], values: &[Option<i64>]) {
        for (&slot, &value) in slots.iter().zip(values) {
            let Some(group) = self.groups[slot as usize].as_mut() else {
                continue;
            };
            if group.window.is_some() {
                continue;
            }
            group.window = Some(value);
            if let (Some(value), Some(closing)) = (value, self.closing.as_mut()) {
                closing
                    .open
                    .entry(value)
                    .or_default()
                    .push(group.key.clone());
            }
        }
    }

    /// After a restore: files every group read back under its value in
    /// the closing column, decoded from its key.
    pub(super) fn index_restored(&mut self, mut slots: Vec<u32>) -> Result<(), EngineError> {
        if self.closing.is_none() {
            return Ok(());
        }
        slots.sort_unstable();
        slots.dedup();
        slots.retain(|&s| {
            self.groups[s as usize]
                .as_ref()
                .is_some_and(|g| g.window.is_none())
        });
        let Some(codec) = &self.key else {
            return Ok(());
        };
        if slots.is_empty() {
            return Ok(());
        }
        let keys = codec.decode(slots.iter().map(|&s| &self.group(s).key))?;
        let values = as_i64(keys.column(self.closing_key()))?;
        self.index_windows(&slots, &values);
        Ok(())
    }

    /// `EMIT ON WINDOW CLOSE`: the touched groups emit nothing now; those
    /// left without rows go.
    pub(super) fn settle_quietly(&mut self, touched: Vec<u32>) {
        for slot in touched {
            let unseen = self.unseen(slot);
            let group = self.groups[slot as usize].as_mut().expect("a live slot");
            group.touched = false;
            if !unseen {
                mark_changed(&mut self.changed, &mut self.scratch, GROUP, &group.key, &[]);
            }
            // Its entry among the open groups stays until its window
            // closes, and then finds no group (or the same key's new one).
            if self.group(slot).is_empty() {
                self.remove(slot);
            }
        }
    }

    /// Moves the watermark in effect to the one this epoch brought: every
    /// group behind it closes (its final row emitted under `EMIT ON
    /// WINDOW CLOSE`) and its state goes.
    pub(super) fn close(&mut self) -> Result<ChangeBatch, EngineError> {
        let Some(closing) = &mut self.closing else {
            return Ok(empty_change(self.output.schema()));
        };
        if closing.next <= closing.watermark {
            return Ok(empty_change(self.output.schema()));
        }
        closing.watermark = closing.next;
        let emit = closing.emit_on_close;
        let later = closing.open.split_off(&closing.watermark);
        let closed: Vec<RowBytes> = std::mem::replace(&mut closing.open, later)
            .into_values()
            .flatten()
            .collect();
        self.changed.insert(state_key(WATERMARK, &[], &[]));
        // A key filed twice (a group that emptied and started again).
        let mut slots: Vec<u32> = closed
            .iter()
            .filter_map(|key| self.index.get(key).copied())
            .collect();
        slots.sort_unstable();
        slots.dedup();
        let out = if emit {
            let live: Vec<u32> = slots
                .iter()
                .copied()
                .filter(|&s| self.group(s).rows > 0)
                .collect();
            let rows = self.output_rows(&live)?;
            let change: Vec<(RowBytes, i64)> = rows.into_iter().map(|r| (r, 1)).collect();
            self.output.consolidated_change(&change)?
        } else {
            empty_change(self.output.schema())
        };
        for slot in slots {
            self.drop_state(slot);
        }
        Ok(out)
    }

    /// Whether the group in `slot` started this checkpoint period with no
    /// state of its key checkpointed: none of its keys is recorded as
    /// changed, and the take writes the whole group if it is still there.
    pub(super) fn unseen(&self, slot: u32) -> bool {
        self.group(slot).fresh_in == Some(self.period)
    }

    /// Appends to a take's entries every entry of the groups still there
    /// that no checkpoint has seen; their keys were never recorded.
    pub(super) fn take_unseen_groups(&mut self, entries: &mut Vec<StateEntry>) {
        let mut fresh = std::mem::take(&mut self.fresh);
        // A slot freed and reused within the period is listed twice.
        fresh.sort_unstable();
        fresh.dedup();
        for &slot in &fresh {
            if let Some(group) = &self.groups[slot as usize]
                && group.fresh_in == Some(self.period)
            {
                self.group_entries(group, entries);
            }
        }
        fresh.clear();
        self.fresh = fresh;
    }

    /// Removes a closed group and records every state key it had as gone.
    /// A group no checkpoint has seen recorded none and leaves nothing to
    /// write: windows that open and close between two checkpoints were
    /// most of what a window aggregate wrote.
    fn drop_state(&mut self, slot: u32) {
        if self.groups[slot as usize].is_none() {
            return;
        }
        if self.unseen(slot) {
            self.remove(slot);
            return;
        }
        let group = self.groups[slot as usize].as_ref().expect("a live slot");
        let changed = &mut self.changed;
        let mut scratch = std::mem::take(&mut self.scratch);
        // `added`: the key changes only when it is added (a DISTINCT set
        // over an input that never retracts), so one among the changes was
        // added since the last checkpoint, which does not hold it.
        let mut gone = |tag: u8, rest: &[&[u8]], added: bool| {
            state_key_into(&mut scratch, tag, &group.key, rest);
            if added && changed.contains(scratch.as_slice()) {
                changed.remove(scratch.as_slice());
            } else if !changed.contains(scratch.as_slice()) {
                changed.insert(scratch.clone());
            }
        };
        gone(GROUP, &[], false);
        // No output (`EMIT ON WINDOW CLOSE` keeps none): none to remove; an
        // earlier output's removal is among the changes already.
        if group.output.is_some() {
            gone(OUTPUT, &[], false);
        }
        for (c, value, _) in super::shared::kept_values(&self.calls, &self.families, group) {
            let call = &self.calls[c];
            let added = call.append_only && matches!(call.strategy, Strategy::Distinct(_));
            gone(VALUE, &[&(c as u16).to_be_bytes(), value], added);
        }
        for (row, _) in group.input.iter() {
            gone(ROW, &[row], false);
        }
        self.scratch = scratch;
        self.remove(slot);
    }

    /// The `WATERMARK` entry's value, when groups close and one is known.
    pub(super) fn watermark_value(&self) -> Option<Vec<u8>> {
        self.closing
            .as_ref()
            .filter(|c| c.watermark != NONE_YET)
            .map(|c| crate::watermark::state_value(c.watermark))
    }
}

#[cfg(test)]
#[path = "closing_tests.rs"]
mod tests;
