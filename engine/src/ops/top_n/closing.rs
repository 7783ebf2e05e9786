//! Top-N per window: a PARTITION BY column carrying a watermark
//! (`ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY ...)`) closes
//! partitions. Once the watermark passes a partition's value, no row can
//! enter or leave it: its rows' state goes (its output rows stay), and a
//! row arriving for it is late, dropped and counted. With `EMIT ON WINDOW
//! CLOSE` nothing is output while a partition is open, and its final
//! numbered rows once, when it closes.
//!
//! State: the watermark in effect (`WATERMARK`, empty distribution key,
//! kept alike by every worker).

use std::collections::BTreeMap;

use bytes::Bytes;
use weir_common::ChangeBatch;

use super::partition::Numbered;
use super::{NAME, TopN, mark_row};
use crate::EngineError;
use crate::operator::{StateEntry, state_key};
use crate::rows::RowBytes;
use crate::watermark::{
    NONE_YET, Watermarks, as_i64, drop_late, from_state_value, of_expression, state_value,
};

/// Tag 1 was the output rows of an older layout (refused on restore).
pub(super) const WATERMARK: u8 = 2;

pub(super) struct Closing {
    /// The index in `partition_by` of the column that closes.
    key: usize,
    /// Output a partition's rows only when it closes.
    emit_on_close: bool,
    /// Rows behind it are late.
    in_effect: i64,
    /// What this epoch brought.
    next: i64,
    /// Partition keys by their value in the closing column.
    open: BTreeMap<i64, Vec<RowBytes>>,
    filed: hashbrown::HashSet<RowBytes>,
    late: u64,
    /// The watermark in effect moved since the last state change taken.
    moved: bool,
}

impl TopN {
    /// The PARTITION BY column (its index) whose expression keeps the order
    /// of an input column in `watermarked`, which can close partitions.
    pub fn window_key(&self, watermarked: &[usize]) -> Option<usize> {
        crate::watermark::closing_key(&self.spec.partition_by, watermarked)
    }

    /// Closes partitions by PARTITION BY column `key` ([`Self::window_key`]);
    /// with `emit_on_close`, outputs each partition's rows once, then.
    pub fn closing_by(mut self, key: usize, emit_on_close: bool) -> Self {
        self.closing = Some(Closing {
            key,
            emit_on_close,
            in_effect: NONE_YET,
            next: NONE_YET,
            open: BTreeMap::new(),
            filed: hashbrown::HashSet::new(),
            late: 0,
            moved: false,
        });
        self
    }

    pub(super) fn closing_key(&self) -> Option<usize> {
        self.closing.as_ref().map(|c| c.key)
    }

    /// Whether rows are output only when their partition closes.
    pub(super) fn emits_on_close(&self) -> bool {
        self.closing.as_ref().is_some_and(|c| c.emit_on_close)
    }

    /// Learns the closing column's watermark from the input's.
    pub(super) fn advance_closing(&mut self, input: &Watermarks) -> Result<(), EngineError> {
        let Some(key) = self.closing.as_ref().map(|c| c.key) else {
            return Ok(());
        };
        let expr = &self.spec.partition_by[key];
        let Some(value) = of_expression(expr, &self.spec.input_schema, input)? else {
            return Ok(());
        };
        if let Some(closing) = self.closing.as_mut() {
            closing.next = closing.next.max(value);
        }
        Ok(())
    }

    /// `change` without its rows for closed partitions (counted), and the
    /// closing column's value of each row kept.
    pub(super) fn on_time(
        &mut self,
        change: &ChangeBatch,
    ) -> Result<(ChangeBatch, Vec<Option<i64>>), EngineError> {
        let Some(key) = self.closing.as_ref().map(|c| c.key) else {
            return Ok((change.clone(), Vec::new()));
        };
        let rows = change.rows();
        let values = as_i64(
            &self.spec.partition_by[key]
                .evaluate(rows)?
                .into_array(rows.num_rows())?,
        )?;
        let Some(closing) = self.closing.as_mut() else {
            return Ok((change.clone(), values));
        };
        let (kept, values, late) = drop_late(change, values, closing.in_effect)?;
        closing.late += late;
        Ok((kept, values))
    }

    /// Files the partitions of rows just inserted under their value.
    pub(super) fn file_open(&mut self, keys: &[&[u8]], values: &[Option<i64>]) {
        let Some(closing) = self.closing.as_mut() else {
            return;
        };
        for (key, value) in keys.iter().zip(values) {
            let Some(value) = value else { continue };
            if !closing.filed.contains(*key) {
                let key = RowBytes::from(*key);
                closing.filed.insert(key.clone());
                closing.open.entry(*value).or_default().push(key);
            }
        }
    }

    /// Moves the watermark in effect to this epoch's and drops the state
    /// of every partition it passed; returns their numbered rows when they
    /// are output on close (else nothing).
    pub(super) fn close_partitions(&mut self) -> Vec<Numbered> {
        let mut out = Vec::new();
        let cut = self.cut;
        let Some(closing) = self.closing.as_mut() else {
            return out;
        };
        let emit = closing.emit_on_close;
        if closing.next > closing.in_effect {
            closing.in_effect = closing.next;
            closing.moved = true;
        }
        let later = closing.open.split_off(&closing.in_effect);
        let passed = std::mem::replace(&mut closing.open, later);
        for key in passed.into_values().flatten() {
            closing.filed.remove(&key);
            let Some(slot) = self.index.remove(&key) else {
                continue;
            };
            if let Some(partition) = self.partitions[slot as usize].take() {
                if let (true, Some((first, _))) = (emit, partition.elements().next()) {
                    partition.numbered_from(cut, first, 1, &mut out);
                }
                for (element, _) in partition.elements() {
                    mark_row(&mut self.changed, &mut self.scratch, &key, element);
                }
                self.free.push(slot);
            }
        }
        out
    }

    pub(super) fn take_late(&mut self) -> u64 {
        self.closing
            .as_mut()
            .map_or(0, |c| std::mem::take(&mut c.late))
    }

    /// The watermark's entry, if it moved since the last call.
    pub(super) fn watermark_change(&mut self) -> Option<StateEntry> {
        let closing = self.closing.as_mut()?;
        std::mem::take(&mut closing.moved).then(|| watermark_entry(closing.in_effect))
    }

    /// The watermark's entry, if one is in effect.
    pub(super) fn watermark_state(&self) -> Option<StateEntry> {
        let closing = self.closing.as_ref()?;
        (closing.in_effect != NONE_YET).then(|| watermark_entry(closing.in_effect))
    }

    /// Applies a watermark entry (restore).
    pub(super) fn apply_watermark(&mut self, value: Option<&[u8]>) -> Result<(), EngineError> {
        let value = from_state_value(NAME, value)?;
        let Some(closing) = self.closing.as_mut() else {
            return Err(crate::operator::unreadable(
                NAME,
                "a watermark, for a top-N that does not close",
            ));
        };
        closing.in_effect = value;
        closing.next = closing.next.max(value);
        Ok(())
    }

    /// After a restore: files every partition under its value (read from
    /// one of its rows).
    pub(super) fn file_restored(&mut self) -> Result<(), EngineError> {
        let Some(key) = self.closing.as_ref().map(|c| c.key) else {
            return Ok(());
        };
        let mut keys = Vec::new();
        let mut rows = Vec::new();
        for partition in self.partitions.iter().flatten() {
            if let Some(((_, row), _)) = partition.elements().next() {
                keys.push(partition.key.clone());
                rows.push(row.clone());
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let decoded = self.input.decode(rows.iter())?;
        let values = as_i64(
            &self.spec.partition_by[key]
                .evaluate(&decoded)?
                .into_array(decoded.num_rows())?,
        )?;
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
        self.file_open(&keys, &values);
        Ok(())
    }
}

fn watermark_entry(value: i64) -> StateEntry {
    StateEntry {
        key: state_key(WATERMARK, &[], &[]).into(),
        value: Some(Bytes::from(state_value(value))),
    }
}

#[cfg(test)]
mod tests {
    use arrow::compute::SortOptions;
    use datafusion::physical_expr::expressions::col;

    use super::super::{Numbering, TopN, TopNSpec};
    use crate::Operator;
    use crate::testing::{change, render, schema};
    use crate::watermark::{NONE_YET, Watermarks};

    const INPUT: &str = "w int, x int";

    /// `ROW_NUMBER() OVER (PARTITION BY w ORDER BY x DESC) <= 1`, `w`
    /// carrying a watermark.
    fn per_window(emit_on_close: bool) -> TopN {
        let input = schema(INPUT);
        let desc = SortOptions {
            descending: true,
            nulls_first: true,
        };
        let top = TopN::new(TopNSpec {
            partition_by: vec![col("w", &input).unwrap()],
            order_by: vec![(col("x", &input).unwrap(), desc)],
            input_schema: input,
            offset: 0,
            limit: 1,
            numbering: Numbering::RowNumber,
            output_schema: schema("w int, x int, n int"),
        })
        .unwrap();
        assert_eq!(top.window_key(&[1]), None);
        let key = top.window_key(&[0]).unwrap();
        top.closing_by(key, emit_on_close)
    }

    fn epoch(t: &mut TopN, at: i64, rows: &str) -> Vec<String> {
        t.watermarks(&[Watermarks::of([(0, at)])]).unwrap();
        render(&t.step(&[change(INPUT, rows)]).unwrap())
    }

    #[test]
    fn a_window_top_n_drops_closed_partitions_and_late_rows() {
        let mut t = per_window(false);
        assert_eq!(
            epoch(&mut t, NONE_YET, "1 5 +1; 1 7 +1; 2 3 +1"),
            vec!["1 7 1 +1", "2 3 1 +1"]
        );
        // Window 1 closes: its state goes, its output stays (nothing out).
        assert_eq!(epoch(&mut t, 2, "2 4 +1"), vec!["2 3 1 -1", "2 4 1 +1"]);
        t.take_state_changes().unwrap();
        let entries = t.state_entries().unwrap();
        assert_eq!(
            entries.len(),
            3,
            "window 2's two rows and the watermark: {entries:?}"
        );
        // A row for window 1 is late: dropped, counted, nothing out.
        assert_eq!(epoch(&mut t, 2, "1 9 +1"), Vec::<String>::new());
        assert_eq!(t.take_late_rows(), 1);
        // Restored, it keeps the watermark and closes window 2 later.
        let mut restored = per_window(false);
        restored.apply_state_entries(&entries).unwrap();
        for t in [&mut t, &mut restored] {
            assert_eq!(epoch(t, 2, "1 9 +1; 2 8 +1"), vec!["2 4 1 -1", "2 8 1 +1"]);
            assert_eq!(t.take_late_rows(), 1);
            assert_eq!(epoch(t, 3, ""), Vec::<String>::new());
            assert_eq!(t.state_entries().unwrap().len(), 1, "the watermark");
        }
    }

    #[test]
    fn a_window_top_n_keeps_flat_state_however_many_windows_pass() {
        let mut t = per_window(false);
        let mut largest = 0;
        for w in 0..1_000i64 {
            let rows: Vec<String> = (0..5).map(|x| format!("{w} {x} +1")).collect();
            assert_eq!(epoch(&mut t, w, &rows.join("; ")).len(), 1);
            t.take_state_changes().unwrap();
            largest = largest.max(t.state_entries().unwrap().len());
        }
        assert!(largest <= 12, "{largest} entries");
    }

    #[test]
    fn emit_on_window_close_outputs_each_window_s_final_ranks_once() {
        let mut t = per_window(true);
        assert_eq!(
            epoch(&mut t, NONE_YET, "1 5 +1; 1 7 +1; 2 3 +1"),
            Vec::<String>::new()
        );
        // Window 1 closes in the epoch that moves the watermark past it,
        // with what that epoch brought; window 2's leader changes unseen.
        assert_eq!(epoch(&mut t, 2, "2 4 +1; 1 9 +1"), vec!["1 9 1 +1"]);
        assert_eq!(t.take_late_rows(), 0);
        assert_eq!(epoch(&mut t, 3, "1 10 +1"), vec!["2 4 1 +1"]);
        assert_eq!(t.take_late_rows(), 1);
    }
}
