//! [`TemporalFilter`]: the `now()` conjuncts of a projection's WHERE
//! (`ts > now() - INTERVAL '1 hour'`, `ts <= now()`), evaluated against
//! each epoch's time instead of a constant folded at planning.
//!
//! Every bound is `row_time OP now() + offset`, so each row's visibility
//! is an interval of epoch times `[from, until)` computed once, when the
//! row arrives: `row > now() + d` holds while `now < row - d`, `row <=
//! now() + d` from `now >= row - d` on, and so on. A row arriving is
//! output if the epoch's time is inside its interval; a row whose interval
//! starts later waits (`waiting`, by `from`), and a visible row whose
//! interval ends is kept by `until` (`visible`) to be retracted then. So
//! an epoch costs O(rows arriving + rows appearing or expiring), and the
//! output at every epoch equals the filter evaluated with `now()` = that
//! epoch's time.
//!
//! State: a waiting row is (`WAITING`, row, `from`) -> weight, a visible
//! row that will expire (`VISIBLE`, row, `until`) -> weight; the row is
//! the distribution key, so rows spread over vnodes. Rows visible forever
//! (no upper bound) are not kept at all.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use bytes::Bytes;
use datafusion::physical_expr::PhysicalExpr;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::operator::{
    Operator, StateEntry, expect_inputs, parse_state_key, state_key, unreadable,
};
use crate::rows::{RowBytes, RowCodec, empty_change, settle};

const NAME: &str = "temporal filter";
const WAITING: u8 = 1;
const VISIBLE: u8 = 2;

/// How a row's time compares with the epoch's time plus an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeComparison {
    /// `row > now() + offset`
    After,
    /// `row >= now() + offset`
    AtOrAfter,
    /// `row < now() + offset`
    Before,
    /// `row <= now() + offset`
    AtOrBefore,
}

/// One conjunct `row OP now() + offset_micros`.
#[derive(Debug, Clone)]
pub struct TimeBound {
    /// A time (timestamp of any unit, or date) over the input's columns.
    pub row: Arc<dyn PhysicalExpr>,
    pub comparison: TimeComparison,
    pub offset_micros: i64,
}

/// The epoch times a row is visible at: `from <= now < until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Visibility {
    from: i64,
    until: i64,
}

impl Visibility {
    const ALWAYS: Self = Self {
        from: i64::MIN,
        until: i64::MAX,
    };

    fn narrow(&mut self, bound: TimeComparison, x: i64) {
        use TimeComparison::*;
        match bound {
            // row - d > now
            After => self.until = self.until.min(x),
            AtOrAfter => self.until = self.until.min(x.saturating_add(1)),
            // row - d < now
            Before => self.from = self.from.max(x.saturating_add(1)),
            AtOrBefore => self.from = self.from.max(x),
        }
    }
}

pub struct TemporalFilter {
    schema: SchemaRef,
    codec: RowCodec,
    bounds: Vec<TimeBound>,
    /// The epoch's time, microseconds since the Unix epoch (UTC); `None`
    /// before the first [`Operator::advance_time`].
    now: Option<i64>,
    /// Rows whose interval has not begun, by `from`, with their `until`.
    waiting: BTreeMap<(i64, RowBytes), (i64, i64)>,
    /// Rows output that will expire, by `until`.
    visible: BTreeMap<(i64, RowBytes), i64>,
    /// Keys changed since the last `take_state_changes`, with their value.
    changed: BTreeMap<Vec<u8>, Option<i64>>,
}

impl TemporalFilter {
    pub fn new(schema: SchemaRef, bounds: Vec<TimeBound>) -> Result<Self, EngineError> {
        Ok(Self {
            codec: RowCodec::new(schema.clone())?,
            schema,
            bounds,
            now: None,
            waiting: BTreeMap::new(),
            visible: BTreeMap::new(),
            changed: BTreeMap::new(),
        })
    }

    /// Each row's visibility; `None` for a row a NULL time keeps out.
    fn visibility(&self, change: &ChangeBatch) -> Result<Vec<Option<Visibility>>, EngineError> {
        let rows = change.rows();
        let mut out = vec![Some(Visibility::ALWAYS); rows.num_rows()];
        for bound in &self.bounds {
            let times = micros_of(&bound.row.evaluate(rows)?.into_array(rows.num_rows())?)?;
            for (slot, time) in out.iter_mut().zip(times) {
                match (slot.as_mut(), time) {
                    (Some(v), Some(t)) => {
                        v.narrow(bound.comparison, t.saturating_sub(bound.offset_micros))
                    }
                    _ => *slot = None,
                }
            }
        }
        Ok(out)
    }

    fn add_waiting(&mut self, from: i64, row: &RowBytes, until: i64, weight: i64) {
        let entry = self
            .waiting
            .entry((from, row.clone()))
            .or_insert((until, 0));
        entry.1 += weight;
        let total = entry.1;
        if total == 0 {
            self.waiting.remove(&(from, row.clone()));
        }
        self.changed.insert(
            key(WAITING, row, from, Some(until)),
            (total != 0).then_some(total),
        );
    }

    fn add_visible(&mut self, until: i64, row: &RowBytes, weight: i64) {
        if until == i64::MAX {
            return;
        }
        let entry = self.visible.entry((until, row.clone())).or_insert(0);
        *entry += weight;
        let total = *entry;
        if total == 0 {
            self.visible.remove(&(until, row.clone()));
        }
        self.changed.insert(
            key(VISIBLE, row, until, None),
            (total != 0).then_some(total),
        );
    }
}

/// A state key: the row, then the time (big-endian, so keys of one row
/// sort by it), and for a waiting row its `until` too.
fn key(tag: u8, row: &[u8], at: i64, until: Option<i64>) -> Vec<u8> {
    let mut rest = at.to_be_bytes().to_vec();
    if let Some(until) = until {
        rest.extend_from_slice(&until.to_be_bytes());
    }
    state_key(tag, row, &rest)
}

/// A time column as microseconds since the Unix epoch (UTC).
pub fn micros_of(array: &ArrayRef) -> Result<Vec<Option<i64>>, EngineError> {
    let per_unit: i64 = match array.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => 1_000_000,
        DataType::Timestamp(TimeUnit::Millisecond, _) | DataType::Date64 => 1_000,
        // An integer is taken as microseconds (the planner only builds
        // bounds over times; operator tests use integers).
        DataType::Timestamp(TimeUnit::Microsecond, _) | DataType::Int64 => 1,
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            let ints = cast(array, &DataType::Int64)?;
            return Ok(ints
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.map(|v| v.div_euclid(1_000)))
                .collect());
        }
        DataType::Date32 => 86_400_000_000,
        other => {
            return Err(EngineError::Invariant {
                operator: NAME,
                message: format!("a bound compares a {other} with now()"),
            });
        }
    };
    let ints = cast(array, &DataType::Int64)?;
    Ok(ints
        .as_primitive::<Int64Type>()
        .iter()
        .map(|v| v.map(|v| v.saturating_mul(per_unit)))
        .collect())
}

impl Operator for TemporalFilter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn structure(&self) -> String {
        let bounds: Vec<String> = self
            .bounds
            .iter()
            .map(|b| format!("{} {:?} now()+{}us", b.row, b.comparison, b.offset_micros))
            .collect();
        format!(
            "temporal_filter([{}]; {})",
            bounds.join(", "),
            crate::operator::schema_text(&self.schema)
        )
    }

    fn advance_time(&mut self, now: i64) {
        self.now = Some(self.now.map_or(now, |t| t.max(now)));
    }

    fn next_due(&self) -> Option<i64> {
        let appear = self.waiting.keys().next().map(|(from, _)| *from);
        let expire = self.visible.keys().next().map(|(until, _)| *until);
        appear.into_iter().chain(expire).min()
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 1)?;
        let now = self.now.ok_or_else(|| EngineError::Invariant {
            operator: NAME,
            message: "stepped before the epoch's time was given".into(),
        })?;
        let mut out: Vec<(RowBytes, i64)> = Vec::new();
        // What time alone changed since the last epoch.
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((from, row), (until, weight)) = entry.remove_entry();
            self.changed
                .insert(key(WAITING, &row, from, Some(until)), None);
            if now < until {
                out.push((row.clone(), weight));
                self.add_visible(until, &row, weight);
            }
        }
        while let Some(entry) = self.visible.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((until, row), weight) = entry.remove_entry();
            self.changed.insert(key(VISIBLE, &row, until, None), None);
            out.push((row, -weight));
        }
        // Then the rows of this epoch, at its time.
        let change = &inputs[0];
        if !change.is_empty() {
            let visibility = self.visibility(change)?;
            let rows = self.codec.encode_rows(change.rows())?;
            for ((row, weight), v) in rows
                .into_iter()
                .zip(change.weights().values())
                .zip(visibility)
            {
                let Some(v) = v.filter(|v| v.from < v.until) else {
                    continue;
                };
                if now < v.from {
                    self.add_waiting(v.from, &row, v.until, *weight);
                } else if now < v.until {
                    out.push((row.clone(), *weight));
                    self.add_visible(v.until, &row, *weight);
                }
            }
        }
        if out.is_empty() {
            return Ok(empty_change(&self.schema));
        }
        settle(self.codec.decode_change(out.iter().map(|(r, w)| (r, *w)))?)
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        Ok(std::mem::take(&mut self.changed)
            .into_iter()
            .map(|(key, weight)| StateEntry {
                key: key.into(),
                value: weight.map(|w| Bytes::copy_from_slice(&w.to_le_bytes())),
            })
            .collect())
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let waiting = self.waiting.iter().map(|((from, row), (until, weight))| {
            StateEntry::set(
                key(WAITING, row, *from, Some(*until)),
                weight.to_le_bytes().to_vec(),
            )
        });
        let visible = self.visible.iter().map(|((until, row), weight)| {
            StateEntry::set(
                key(VISIBLE, row, *until, None),
                weight.to_le_bytes().to_vec(),
            )
        });
        Ok(waiting.chain(visible).collect())
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        for entry in entries {
            let key = parse_state_key(NAME, &entry.key)?;
            let row: RowBytes = key.distribution.into();
            let time = |at: usize| -> Result<i64, EngineError> {
                key.rest
                    .get(at..at + 8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(i64::from_be_bytes)
                    .ok_or_else(|| unreadable(NAME, "a malformed time"))
            };
            let weight = match entry.value.as_deref() {
                None => None,
                Some(v) => Some(
                    <[u8; 8]>::try_from(v)
                        .map(i64::from_le_bytes)
                        .map_err(|_| unreadable(NAME, "a malformed weight"))?,
                ),
            };
            match (key.tag, weight) {
                (WAITING, Some(w)) => {
                    self.waiting.insert((time(0)?, row), (time(8)?, w));
                }
                (WAITING, None) => {
                    self.waiting.remove(&(time(0)?, row));
                }
                (VISIBLE, Some(w)) => {
                    self.visible.insert((time(0)?, row), w);
                }
                (VISIBLE, None) => {
                    self.visible.remove(&(time(0)?, row));
                }
                _ => return Err(unreadable(NAME, "an unknown tag")),
            }
        }
        self.changed.clear();
        Ok(())
    }
}

#[cfg(test)]
#[path = "temporal_filter_tests.rs"]
mod tests;
