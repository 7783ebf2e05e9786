//! [`SessionWindow`]: `SESSION(rel, time, gap [, key ...])`, each input row
//! with the bounds of its session: per partition key, rows ordered by time,
//! a session runs from a row to the next row at least `gap` later
//! ([`sessions`]); it starts at its first row's time and ends `gap` after
//! its last (`[start, end)`, so two sessions never overlap).
//!
//! A row's bounds depend on its neighbours, so a change re-emits the
//! sessions it touches: per partition, the rows from the first to the last
//! changed time, widened to whole sessions before the change and again
//! after it (a row within `gap` of the region joins it). The region's rows
//! are retracted with their old bounds and inserted with their new ones;
//! consolidation cancels the rows whose session did not move. Rows outside
//! the region keep their sessions: the region ends where the next row is
//! at least `gap` away, before and after the change. So an epoch costs the
//! rows of the sessions it touches (a session that grows is re-emitted at
//! each epoch it grows in), as ad hoc it costs every row.
//!
//! With a watermark on the time column ([`SessionWindow::closing`]) a row
//! behind it is late (dropped and counted), and a session whose end the
//! watermark passed can take no row any more (a row on time is at or after
//! the watermark, so its window `[t, t + gap)` starts at or after the
//! session's end): its rows' state goes. The output's `window_end` then
//! carries the input's watermark (a session that changes ends after the
//! row that changed it). `window_start` carries none: a session that
//! started long ago can still grow.
//!
//! State entries (distribution key = the partition key): one per row
//! (`ROW`, keyed by its time and row, valued by its count); the watermark
//! in effect (`WATERMARK`, empty distribution key, alike in every worker).

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::physical_expr::PhysicalExpr;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::operator::{
    Operator, StateEntry, count_value, expect_inputs, expect_watermarks, mark_changed, pair_bytes,
    parse_state_key, read_count, split_pair, state_key, take_changed, unreadable,
};
use crate::ops::parallel::{Keyed, not_shardable};
use crate::rows::{RowBytes, RowCodec, batch_of, consolidate, empty_change};
use crate::watermark::{NONE_YET, Watermarks, as_i64, drop_late, from_state_value, state_value};

const NAME: &str = "session_window";

/// State key tags.
const ROW: u8 = 0;
const WATERMARK: u8 = 1;

/// Which bound of its session an output column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The time of the session's first row.
    Start,
    /// `gap` after the time of its last row.
    End,
}

#[derive(Clone)]
pub struct SessionSpec {
    pub input_schema: SchemaRef,
    pub partition_by: Vec<Arc<dyn PhysicalExpr>>,
    /// The input's time column (a TIMESTAMP, never NULL: the plan filters
    /// NULLs out, as such a row is in no session).
    pub time: usize,
    /// In the time column's unit ([`gap_in_unit`]).
    pub gap: i64,
    /// The output's columns after the input's, in order.
    pub bounds: Vec<Bound>,
    pub output_schema: SchemaRef,
}

/// `micros` in the unit of a TIMESTAMP `data_type`; `None` for another type
/// or when the unit cannot hold it exactly.
pub fn gap_in_unit(micros: i64, data_type: &DataType) -> Option<i64> {
    match data_type {
        DataType::Timestamp(TimeUnit::Second, _) => {
            (micros % 1_000_000 == 0).then_some(micros / 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            (micros % 1_000 == 0).then_some(micros / 1_000)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => Some(micros),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => micros.checked_mul(1_000),
        _ => None,
    }
}

/// The session rule, shared with the ad-hoc plan: over `times` in
/// ascending order, the `(start, end)` of each one's session.
pub fn sessions(times: &[i64], gap: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::with_capacity(times.len());
    let mut first = 0;
    for i in 1..=times.len() {
        if i == times.len() || times[i].saturating_sub(times[i - 1]) >= gap {
            let bounds = (times[first], times[i - 1].saturating_add(gap));
            out.extend(std::iter::repeat_n(bounds, i - first));
            first = i;
        }
    }
    out
}

/// One partition's rows: time -> (row, count).
type Rows = BTreeMap<i64, Vec<(RowBytes, i64)>>;

/// A row of output: the row, its session's bounds, its weight.
type Bounded = (RowBytes, i64, i64, i64);

struct Closing {
    /// Rows behind it are late.
    in_effect: i64,
    /// What this epoch brought.
    next: i64,
    /// Partition keys by the end of their first session (stale entries
    /// are skipped: `filed` has each key's current one).
    due: BTreeMap<i64, Vec<RowBytes>>,
    filed: hashbrown::HashMap<RowBytes, i64>,
    late: u64,
    moved: bool,
}

pub struct SessionWindow {
    spec: SessionSpec,
    input: RowCodec,
    partition: Option<RowCodec>,
    partitions: hashbrown::HashMap<RowBytes, Rows>,
    changed: hashbrown::HashSet<Vec<u8>>,
    scratch: Vec<u8>,
    closing: Option<Closing>,
}

impl SessionWindow {
    pub fn new(spec: SessionSpec) -> Result<Self, EngineError> {
        let partition = RowCodec::of_key(&spec.partition_by, &spec.input_schema)?;
        if spec.gap <= 0 {
            return Err(EngineError::Invariant {
                operator: NAME,
                message: format!("a gap of {} (must be positive)", spec.gap),
            });
        }
        Ok(Self {
            input: RowCodec::new(spec.input_schema.clone())?,
            partition,
            partitions: hashbrown::HashMap::new(),
            changed: hashbrown::HashSet::new(),
            scratch: Vec::new(),
            closing: None,
            spec,
        })
    }

    /// Closes sessions by the time column's watermark (which it must carry).
    pub fn closing(mut self) -> Self {
        self.closing = Some(Closing {
            in_effect: NONE_YET,
            next: NONE_YET,
            due: BTreeMap::new(),
            filed: hashbrown::HashMap::new(),
            late: 0,
            moved: false,
        });
        self
    }

    fn partition_keys(&self, rows: &RecordBatch) -> Result<Option<arrow::row::Rows>, EngineError> {
        self.partition
            .as_ref()
            .map(|codec| codec.keys_of(&self.spec.partition_by, rows))
            .transpose()
    }

    /// Records the `ROW` state key of (`time`, `row`) in `partition`.
    fn mark(&mut self, partition: &[u8], time: i64, row: &[u8]) {
        let len = 8u32.to_le_bytes();
        mark_changed(
            &mut self.changed,
            &mut self.scratch,
            ROW,
            partition,
            &[&len, &time.to_be_bytes(), row],
        );
    }

    /// Applies one partition's changes and returns its output change.
    fn step_partition(
        &mut self,
        key: &RowBytes,
        changes: &[(i64, RowBytes, i64)],
        out: &mut Vec<Bounded>,
    ) -> Result<(), EngineError> {
        let gap = self.spec.gap;
        let (Some(lo), Some(hi)) = (
            changes.iter().map(|c| c.0).min(),
            changes.iter().map(|c| c.0).max(),
        ) else {
            return Ok(());
        };
        let mut rows = self.partitions.remove(key).unwrap_or_default();
        let (old_lo, old_hi) = widen(&rows, lo, hi, gap);
        bounded(&rows, old_lo, old_hi, gap, -1, out);
        for (time, row, weight) in changes {
            let bucket = rows.entry(*time).or_default();
            match bucket.iter().position(|(r, _)| r == row) {
                Some(i) => {
                    bucket[i].1 += weight;
                    if bucket[i].1 < 0 {
                        return Err(retracted_too_often());
                    }
                    if bucket[i].1 == 0 {
                        bucket.swap_remove(i);
                    }
                }
                None if *weight > 0 => bucket.push((row.clone(), *weight)),
                None => return Err(retracted_too_often()),
            }
            if bucket.is_empty() {
                rows.remove(time);
            }
            self.mark(key, *time, row);
        }
        let (new_lo, new_hi) = widen(&rows, old_lo, old_hi, gap);
        bounded(&rows, new_lo, new_hi, gap, 1, out);
        if !rows.is_empty() {
            self.file(key, &rows);
            self.partitions.insert(key.clone(), rows);
        }
        Ok(())
    }

    /// Files `key` under the end of its first session, when closing.
    fn file(&mut self, key: &RowBytes, rows: &Rows) {
        let Some(closing) = self.closing.as_mut() else {
            return;
        };
        let Some(end) = first_session_end(rows, self.spec.gap) else {
            return;
        };
        if closing.filed.get(key) != Some(&end) {
            closing.filed.insert(key.clone(), end);
            closing.due.entry(end).or_default().push(key.clone());
        }
    }

    /// Moves the watermark in effect to this epoch's and drops every
    /// session it passed.
    fn close_sessions(&mut self) {
        let Some(closing) = self.closing.as_mut() else {
            return;
        };
        if closing.next > closing.in_effect {
            closing.in_effect = closing.next;
            closing.moved = true;
        }
        let watermark = closing.in_effect;
        // `split_off` keeps ends > watermark: a session ending at the
        // watermark is closed (a row on time starts at or after its end).
        let later = closing.due.split_off(&watermark.saturating_add(1));
        let passed = std::mem::replace(&mut closing.due, later);
        for (end, keys) in passed {
            for key in keys {
                let Some(closing) = self.closing.as_mut() else {
                    return;
                };
                if closing.filed.get(&key) != Some(&end) {
                    continue;
                }
                closing.filed.remove(&key);
                let Some(mut rows) = self.partitions.remove(&key) else {
                    continue;
                };
                // Every row of the sessions that closed, from the first.
                let cut = closed_until(&rows, watermark, self.spec.gap);
                let kept = rows.split_off(&cut);
                for (time, bucket) in &rows {
                    for (row, _) in bucket {
                        self.mark(&key, *time, row);
                    }
                }
                if !kept.is_empty() {
                    self.file(&key, &kept);
                    self.partitions.insert(key, kept);
                }
            }
        }
    }

    fn emit(&self, out: &[Bounded]) -> Result<ChangeBatch, EngineError> {
        if out.is_empty() {
            return Ok(empty_change(&self.spec.output_schema));
        }
        let batch = self.input.decode(out.iter().map(|(row, ..)| row))?;
        let mut columns = batch.columns().to_vec();
        let time_type = self.spec.input_schema.field(self.spec.time).data_type();
        for bound in &self.spec.bounds {
            let values: ArrayRef = Arc::new(Int64Array::from_iter_values(out.iter().map(
                |&(_, start, end, _)| match bound {
                    Bound::Start => start,
                    Bound::End => end,
                },
            )));
            columns.push(cast(&values, time_type)?);
        }
        let batch = batch_of(&self.spec.output_schema, columns, out.len())?;
        let weights = Int64Array::from_iter_values(out.iter().map(|o| o.3));
        consolidate(&ChangeBatch::new(batch, weights)?)
    }

    /// The current value of a `ROW` state key.
    fn value_of(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let key = parse_state_key(NAME, key)?;
        if key.tag != ROW {
            return Err(unreadable(NAME, "an unknown tag"));
        }
        let (time, row) = time_and_row(key.rest)?;
        let count = self
            .partitions
            .get(key.distribution)
            .and_then(|rows| rows.get(&time))
            .and_then(|bucket| bucket.iter().find(|(r, _)| r.as_ref() == row))
            .map_or(0, |(_, count)| *count);
        Ok((count > 0).then(|| count_value(count)))
    }

    fn watermark_entry(&self) -> Option<StateEntry> {
        let closing = self.closing.as_ref()?;
        (closing.in_effect != NONE_YET).then(|| {
            StateEntry::set(
                state_key(WATERMARK, &[], &[]),
                state_value(closing.in_effect),
            )
        })
    }
}

/// `[lo, hi]` widened to whole sessions of `rows`: while a row lies within
/// `gap` before `lo` or after `hi`, the bound moves to it.
fn widen(rows: &Rows, mut lo: i64, mut hi: i64, gap: i64) -> (i64, i64) {
    while let Some((&t, _)) = rows.range(..lo).next_back() {
        if lo.saturating_sub(t) >= gap {
            break;
        }
        lo = t;
    }
    while let Some((&t, _)) = rows.range((Excluded(hi), Unbounded)).next() {
        if t.saturating_sub(hi) >= gap {
            break;
        }
        hi = t;
    }
    (lo, hi)
}

/// The rows of `rows` in `[lo, hi]` (whole sessions, from [`widen`]) with
/// their sessions' bounds and `sign` times their counts.
fn bounded(rows: &Rows, lo: i64, hi: i64, gap: i64, sign: i64, out: &mut Vec<Bounded>) {
    let region: Vec<(&i64, &Vec<(RowBytes, i64)>)> = rows.range(lo..=hi).collect();
    let times: Vec<i64> = region.iter().map(|(t, _)| **t).collect();
    for ((_, bucket), (start, end)) in region.iter().zip(sessions(&times, gap)) {
        for (row, count) in bucket.iter() {
            out.push((row.clone(), start, end, sign * count));
        }
    }
}

/// The end of the first session of `rows`.
fn first_session_end(rows: &Rows, gap: i64) -> Option<i64> {
    let mut times = rows.keys();
    let mut last = *times.next()?;
    for &t in times {
        if t.saturating_sub(last) >= gap {
            break;
        }
        last = t;
    }
    Some(last.saturating_add(gap))
}

/// The time before which every row of `rows` is in a session ending at or
/// before `watermark` (so closed).
fn closed_until(rows: &Rows, watermark: i64, gap: i64) -> i64 {
    let mut until = i64::MIN;
    let mut times = rows.keys().peekable();
    while let Some(&first) = times.next() {
        let mut last = first;
        while let Some(&&t) = times.peek() {
            if t.saturating_sub(last) >= gap {
                break;
            }
            last = t;
            times.next();
        }
        let end = last.saturating_add(gap);
        if end > watermark {
            break;
        }
        until = end;
    }
    until
}

fn time_and_row(bytes: &[u8]) -> Result<(i64, &[u8]), EngineError> {
    let (time, row) = split_pair(bytes).ok_or_else(|| unreadable(NAME, "a malformed row"))?;
    let time = <[u8; 8]>::try_from(time)
        .map(i64::from_be_bytes)
        .map_err(|_| unreadable(NAME, "a malformed time"))?;
    Ok((time, row))
}

fn retracted_too_often() -> EngineError {
    EngineError::Invariant {
        operator: NAME,
        message: "a row was retracted more often than it was inserted".into(),
    }
}

impl Operator for SessionWindow {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.spec.output_schema.clone()
    }

    fn structure(&self) -> String {
        use crate::operator::{exprs_text, schema_text};
        format!(
            "{NAME}/1(partition {}; time #{}; gap {}; bounds {:?}; closes={}; in {}; out {})",
            exprs_text(&self.spec.partition_by),
            self.spec.time,
            self.spec.gap,
            self.spec.bounds,
            self.closing.is_some(),
            schema_text(&self.spec.input_schema),
            schema_text(&self.spec.output_schema)
        )
    }

    fn watermarks(&mut self, inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        expect_watermarks(NAME, inputs, 1)?;
        let (Some(closing), Some(value)) = (self.closing.as_mut(), inputs[0].get(self.spec.time))
        else {
            return Ok(Watermarks::none());
        };
        closing.next = closing.next.max(value);
        let width = self.spec.input_schema.fields().len();
        Ok(Watermarks::of(
            self.spec
                .bounds
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == Bound::End)
                .map(|(i, _)| (width + i, value)),
        ))
    }

    fn take_late_rows(&mut self) -> u64 {
        self.closing
            .as_mut()
            .map_or(0, |c| std::mem::take(&mut c.late))
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 1)?;
        let change = &inputs[0];
        let rows = change.rows();
        let times = as_i64(rows.column(self.spec.time))?;
        let (change, times) = match self.closing.as_mut() {
            Some(closing) => {
                let (kept, times, late) = drop_late(change, times, closing.in_effect)?;
                closing.late += late;
                (kept, times)
            }
            None => (change.clone(), times),
        };
        let mut out = Vec::new();
        if !change.is_empty() {
            let rows = change.rows();
            let encoded = self.input.encode_rows(rows)?;
            let keys = self.partition_keys(rows)?;
            let mut by_partition: hashbrown::HashMap<RowBytes, Vec<(i64, RowBytes, i64)>> =
                hashbrown::HashMap::new();
            for (i, (row, &weight)) in encoded
                .into_iter()
                .zip(change.weights().values())
                .enumerate()
            {
                let time = times[i].ok_or_else(|| EngineError::Invariant {
                    operator: NAME,
                    message: "a row with a NULL time (the plan filters them out)".into(),
                })?;
                let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
                match by_partition.get_mut(key) {
                    Some(changes) => changes.push((time, row, weight)),
                    None => {
                        by_partition.insert(RowBytes::from(key), vec![(time, row, weight)]);
                    }
                }
            }
            for (key, changes) in &by_partition {
                self.step_partition(key, changes, &mut out)?;
            }
        }
        self.close_sessions();
        self.emit(&out)
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let mut changed = std::mem::take(&mut self.changed);
        let taken = take_changed(&mut changed, |key| self.value_of(key));
        self.changed = changed;
        let mut taken = taken?;
        if let Some(closing) = self.closing.as_mut()
            && std::mem::take(&mut closing.moved)
        {
            taken.extend(self.watermark_entry());
        }
        Ok(taken)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let mut entries = Vec::new();
        for (key, rows) in &self.partitions {
            for (time, bucket) in rows {
                for (row, count) in bucket {
                    let rest = pair_bytes(&time.to_be_bytes(), row);
                    entries.push(StateEntry::set(
                        state_key(ROW, key, &rest),
                        count_value(*count),
                    ));
                }
            }
        }
        entries.extend(self.watermark_entry());
        entries.sort_unstable();
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        let mut parsed = Vec::with_capacity(entries.len());
        let mut watermark = None;
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            if key.tag == WATERMARK {
                watermark = Some(from_state_value(NAME, e.value.as_deref())?);
                continue;
            }
            if key.tag != ROW {
                return Err(unreadable(NAME, "an unknown tag"));
            }
            let (time, row) = time_and_row(key.rest)?;
            let count = read_count(NAME, e.value.as_deref())?;
            parsed.push((
                RowBytes::from(key.distribution),
                time,
                RowBytes::from(row),
                count,
            ));
        }
        if watermark.is_some() && self.closing.is_none() {
            return Err(unreadable(
                NAME,
                "a watermark, for sessions that do not close",
            ));
        }
        for (key, time, row, count) in parsed {
            let rows = self.partitions.entry(key.clone()).or_default();
            let bucket = rows.entry(time).or_default();
            bucket.retain(|(r, _)| *r != row);
            if count > 0 {
                bucket.push((row, count));
            }
            if bucket.is_empty() {
                rows.remove(&time);
            }
            if rows.is_empty() {
                self.partitions.remove(&key);
            }
        }
        if let (Some(value), Some(closing)) = (watermark, self.closing.as_mut()) {
            closing.in_effect = value;
            closing.next = closing.next.max(value);
        }
        if let Some(closing) = self.closing.as_mut() {
            closing.due.clear();
            closing.filed.clear();
            let partitions = std::mem::take(&mut self.partitions);
            for (key, rows) in &partitions {
                self.file(key, rows);
            }
            self.partitions = partitions;
        }
        self.changed.clear();
        Ok(())
    }
}

/// Sharded by partition key: a row's sessions are its partition's.
impl Keyed for SessionWindow {
    fn shardable(&self) -> bool {
        self.partition.is_some()
    }

    fn distribution_keys(
        &self,
        _input: usize,
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        self.partition_keys(rows)?
            .ok_or_else(|| not_shardable(NAME))
    }
}

#[cfg(test)]
#[path = "session_window_tests.rs"]
mod tests;
