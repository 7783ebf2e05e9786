//! [`Aggregate`]: GROUP BY with any DataFusion aggregate function, correct
//! under retractions, in O(change) for the common ones.
//!
//! Each call gets a strategy ([`calls`]): count, sum, avg, bool_and and
//! bool_or keep running accumulators; min and max keep their group's values
//! ordered with counts, so retracting the current extreme finds the next
//! (over an input that only inserts, just the extreme value);
//! count/sum/avg over DISTINCT keep the distinct values with counts
//! (over an input that only inserts, just the set of values); any
//! other function is recomputed from its group's rows by DataFusion's own
//! accumulator ([`recompute`]), and only then are the rows kept. An epoch
//! costs O(input rows) plus O(changed groups) to emit, except for the
//! recomputed calls (O(rows of the changed groups)). EXPLAIN names each
//! call's strategy.
//!
//! When an epoch changes a group, its output row is replaced: `-old/+new`.
//! Without GROUP BY there is one group with the empty key, and its row
//! exists even over empty input (`count(*)` is 0), as in SQL.
//!
//! Groups live in an arena indexed by a hash map over their encoded keys, so
//! an input row costs one hash lookup and no allocation unless it starts a
//! group. A failed step may leave the state part-way: the graph is then
//! poisoned and rebuilt ([`crate::Graph::is_poisoned`]).
//!
//! Windows close ([`Aggregate::closing_by`]): when a group-by column
//! carries a watermark (a window's start or end over a source with a
//! `WATERMARK`), a group whose value in it is behind the watermark can get
//! no more rows. Its state is dropped (its output row stays where it was
//! emitted), a row that arrives for it later is dropped and counted as
//! late, and under `EMIT ON WINDOW CLOSE` its one final row is emitted
//! then instead of a row per change: the output only inserts.
//!
//! State entries (distribution key = the group key): the `started` flag
//! (`STARTED`, empty group); the watermark in effect (`WATERMARK`, empty
//! group, when windows close); per group its row count and running
//! accumulators (`GROUP`) and the output row last emitted (`OUTPUT`); per
//! kept value its count (`VALUE`, rest = call index and value); per input
//! row its count when a call recomputes (`ROW`); written and read in
//! [`state`]. A closing group that no checkpoint has seen records no
//! changed key: the take writes it whole if it is still open
//! ([`closing`]).

mod calls;
mod closing;
mod exact_sum;
mod recompute;
mod shared;
mod state;
#[cfg(test)]
pub(crate) mod tests;
mod values;

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use weir_common::ChangeBatch;

use self::calls::{Call, CallState, Strategy, ValuesChanged};
use crate::EngineError;
use crate::multiset::Multiset;
use crate::operator::{
    Operator, StateEntry, expect_inputs, expect_watermarks, mark_changed, parse_state_key,
    read_count, state_key, state_key_into, take_changed, unreadable,
};
use crate::ops::parallel::{Keyed, not_shardable};
use crate::rows::{RowBytes, RowCodec, batch_of, empty_change};
use crate::watermark::{NONE_YET, Watermarks, derive, monotone_column};
use datafusion::physical_expr::expressions::Column;

const NAME: &str = "aggregate";

/// State key tags.
const STARTED: u8 = 0;
const ROW: u8 = 1;
const OUTPUT: u8 = 2;
const GROUP: u8 = 3;
const VALUE: u8 = 4;
const WATERMARK: u8 = 5;

/// One aggregate call, with its `FILTER (WHERE ...)` if any.
#[derive(Clone)]
pub struct AggregateCall {
    pub function: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
}

struct Group {
    key: RowBytes,
    /// The net weight of the group's input rows.
    rows: i64,
    /// One per call.
    calls: Vec<CallState>,
    /// The group's input rows, kept only when a call recomputes.
    input: Multiset,
    /// The output row last emitted.
    output: Option<RowBytes>,
    /// Changed in the current step.
    touched: bool,
    /// Its value in the column windows close by, once known (`None`
    /// before; `Some(None)` for a NULL, which never closes).
    window: Option<Option<i64>>,
    /// The checkpoint period ([`Aggregate::period`]) it started in, if no
    /// state of its key was checkpointed or pending removal then: while
    /// that period lasts, no checkpoint holds any of its keys, so none is
    /// recorded as changed; the take writes the whole group if it is still
    /// there ([`Aggregate::unseen`]).
    fresh_in: Option<u64>,
}

impl Group {
    fn is_empty(&self) -> bool {
        self.rows == 0
            && self.output.is_none()
            && self.input.is_empty()
            && self.calls.iter().all(|c| c.values.is_empty())
    }
}

pub struct Aggregate {
    group_by: Vec<Arc<dyn PhysicalExpr>>,
    calls: Vec<Call>,
    input: RowCodec,
    /// Codec of the group-by columns (the first columns of the output).
    key: Option<RowCodec>,
    output: RowCodec,
    /// Whether a call recomputes, so groups keep their rows.
    recomputes: bool,
    /// Group key -> slot in `groups`.
    index: hashbrown::HashMap<RowBytes, u32>,
    groups: Vec<Option<Group>>,
    free: Vec<u32>,
    /// Whether the global group's first row has been emitted.
    started: bool,
    /// State keys changed since the last `take_state_changes`.
    changed: hashbrown::HashSet<Vec<u8>>,
    /// How many times `take_state_changes` drained `changed`.
    period: u64,
    /// Where a state key is built to be looked up.
    scratch: Vec<u8>,
    /// Slots of the groups started fresh this period (a slot may repeat).
    fresh: Vec<u32>,
    /// Set when groups close by a watermark.
    closing: Option<Closing>,
    /// DISTINCT calls sharing a set ([`calls::Shared`]), leader first.
    families: Vec<Vec<usize>>,
}

/// How groups close by event time ([`Aggregate::closing_by`]).
struct Closing {
    /// The group-by column (an output column) whose watermark closes them.
    key: usize,
    /// `EMIT ON WINDOW CLOSE`: a group's row is emitted once, at close.
    emit_on_close: bool,
    /// The watermark in effect: groups behind it are closed, rows for
    /// them late.
    watermark: i64,
    /// The watermark this epoch brings ([`Operator::watermarks`]).
    next: i64,
    /// Open groups by their value in `key`.
    open: std::collections::BTreeMap<i64, Vec<RowBytes>>,
    /// Rows dropped as late since the last `take_late_rows`.
    late: u64,
}

impl Aggregate {
    /// `output_schema` is the group-by columns followed by one column per call.
    pub fn new(
        input_schema: SchemaRef,
        group_by: Vec<Arc<dyn PhysicalExpr>>,
        calls: Vec<AggregateCall>,
        output_schema: SchemaRef,
    ) -> Result<Self, EngineError> {
        if output_schema.fields().len() != group_by.len() + calls.len() {
            return Err(EngineError::Invariant {
                operator: NAME,
                message: format!(
                    "{} output columns for {} keys and {} aggregates",
                    output_schema.fields().len(),
                    group_by.len(),
                    calls.len()
                ),
            });
        }
        let key = if group_by.is_empty() {
            None
        } else {
            let indices: Vec<usize> = (0..group_by.len()).collect();
            Some(RowCodec::new(Arc::new(output_schema.project(&indices)?))?)
        };
        let calls = calls
            .into_iter()
            .map(|c| Call::new(c, &input_schema))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            group_by,
            recomputes: calls.iter().any(|c| c.strategy == Strategy::Recompute),
            calls,
            input: RowCodec::new(input_schema)?,
            key,
            output: RowCodec::new(output_schema)?,
            index: hashbrown::HashMap::new(),
            groups: Vec::new(),
            free: Vec::new(),
            started: false,
            changed: hashbrown::HashSet::new(),
            period: 0,
            scratch: Vec::new(),
            fresh: Vec::new(),
            closing: None,
            families: Vec::new(),
        })
    }

    /// The first group-by column whose expression carries the watermark
    /// of one of `watermarked` (input columns), if any: the column groups
    /// can close by ([`Self::closing_by`]).
    pub fn window_key(&self, watermarked: &[usize]) -> Option<usize> {
        crate::watermark::closing_key(&self.group_by, watermarked)
    }

    /// Closes groups by the watermark of group-by column `key` (see the
    /// module doc); with `emit_on_close`, each group's row is emitted once,
    /// when it closes.
    pub fn closing_by(mut self, key: usize, emit_on_close: bool) -> Self {
        self.closing = Some(Closing {
            key,
            emit_on_close,
            watermark: NONE_YET,
            next: NONE_YET,
            open: std::collections::BTreeMap::new(),
            late: 0,
        });
        self
    }

    /// Whether the output only inserts (`EMIT ON WINDOW CLOSE`).
    pub fn emits_on_close(&self) -> bool {
        self.closing.as_ref().is_some_and(|c| c.emit_on_close)
    }

    /// Declares that the input only ever inserts (an append-only source
    /// through maps, unions and inner joins): min and max then keep one
    /// value per group instead of every value, and DISTINCT each value
    /// once without a count. A retraction is an error.
    pub fn over_append_only(mut self) -> Self {
        for call in &mut self.calls {
            call.append_only = true;
        }
        self.share_distinct_sets();
        self
    }

    /// How each call is maintained, in call order, for EXPLAIN: `running`,
    /// `ordered values`, `extreme value`, `distinct values`, `distinct set`,
    /// `shared distinct set` or `recompute`.
    pub fn strategies(&self) -> Vec<&'static str> {
        self.calls.iter().map(Call::describe).collect()
    }

    fn is_global(&self) -> bool {
        self.key.is_none()
    }

    fn group(&self, slot: u32) -> &Group {
        self.groups[slot as usize].as_ref().expect("a live slot")
    }

    fn group_mut(&mut self, slot: u32) -> &mut Group {
        self.groups[slot as usize].as_mut().expect("a live slot")
    }

    /// The slot of the group with `key`, created empty if there is none.
    fn slot_of(&mut self, key: &[u8]) -> u32 {
        if let Some(&slot) = self.index.get(key) {
            return slot;
        }
        let key = RowBytes::from(key);
        // A group of this key that went since the last checkpoint left its
        // GROUP key among the changes (every group's state has one). Only
        // closing reads it (`drop_state`).
        let fresh = self.closing.is_some() && {
            state_key_into(&mut self.scratch, GROUP, &key, &[]);
            !self.changed.contains(self.scratch.as_slice())
        };
        let group = Group {
            key: key.clone(),
            rows: 0,
            calls: self.calls.iter().map(Call::new_state).collect(),
            input: Multiset::default(),
            output: None,
            touched: false,
            window: None,
            fresh_in: fresh.then_some(self.period),
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.groups[slot as usize] = Some(group);
                slot
            }
            None => {
                self.groups.push(Some(group));
                (self.groups.len() - 1) as u32
            }
        };
        if fresh {
            self.fresh.push(slot);
        }
        self.index.insert(key, slot);
        slot
    }

    fn remove(&mut self, slot: u32) {
        if let Some(group) = self.groups[slot as usize].take() {
            self.index.remove(&group.key);
            self.free.push(slot);
        }
    }

    /// The group key of every input row (`None` without GROUP BY): the
    /// distribution key of the group's state.
    fn group_keys(&self, rows: &RecordBatch) -> Result<Option<arrow::row::Rows>, EngineError> {
        let Some(codec) = &self.key else {
            return Ok(None);
        };
        let columns = self
            .group_by
            .iter()
            .zip(codec.schema().fields())
            .map(|(e, field)| {
                let array = e.evaluate(rows)?.into_array(rows.num_rows())?;
                Ok(cast(&array, field.data_type())?)
            })
            .collect::<Result<Vec<ArrayRef>, EngineError>>()?;
        Ok(Some(codec.encode_buffer(&columns, true)?))
    }

    /// The group slot of every input row.
    fn slots_of(&mut self, rows: &RecordBatch) -> Result<Vec<u32>, EngineError> {
        let Some(keys) = self.group_keys(rows)? else {
            let slot = self.slot_of(&[]);
            return Ok(vec![slot; rows.num_rows()]);
        };
        Ok(keys.iter().map(|key| self.slot_of(key.as_ref())).collect())
    }

    /// Folds `input` into the groups; returns the slots it touched, and
    /// each row's slot.
    fn fold(&mut self, input: &ChangeBatch) -> Result<(Vec<u32>, Vec<u32>), EngineError> {
        let slots = self.slots_of(input.rows())?;
        let weights = input.weights().values();
        let mut touched = Vec::new();
        let mut scratch = Vec::new();
        for (&slot, &weight) in slots.iter().zip(weights) {
            let group = self.group_mut(slot);
            group.rows += weight;
            if group.rows < 0 {
                return Err(EngineError::Invariant {
                    operator: NAME,
                    message: "a row was retracted more often than it was inserted".into(),
                });
            }
            if !group.touched {
                group.touched = true;
                touched.push(slot);
            }
        }
        let period = self.period;
        for (c, call) in self.calls.iter().enumerate() {
            if call.strategy == Strategy::Recompute || call.shared.is_some() {
                continue;
            }
            let prepared = call.prepare(input)?;
            for (i, (&slot, &weight)) in slots.iter().zip(weights).enumerate() {
                let group = self.groups[slot as usize].as_mut().expect("a live slot");
                match call.apply(&mut group.calls[c], &prepared, i, weight)? {
                    ValuesChanged::No => {}
                    _ if group.fresh_in == Some(period) => {}
                    changed => {
                        let value = prepared.keys.as_ref().expect("kept values").row(i);
                        let parts: [&[u8]; 2] = [&(c as u16).to_be_bytes(), value.as_ref()];
                        mark_changed(&mut self.changed, &mut scratch, VALUE, &group.key, &parts);
                        if let ValuesChanged::Replaced(old) = changed {
                            let parts: [&[u8]; 2] = [&(c as u16).to_be_bytes(), &old];
                            mark_changed(
                                &mut self.changed,
                                &mut scratch,
                                VALUE,
                                &group.key,
                                &parts,
                            );
                        }
                    }
                }
            }
        }
        for f in 0..self.families.len() {
            self.fold_family(f, input, &slots, weights, &mut scratch)?;
        }
        if self.recomputes {
            let rows = self.input.encode_rows(input.rows())?;
            for ((&slot, &weight), row) in slots.iter().zip(weights).zip(&rows) {
                let group = self.groups[slot as usize].as_mut().expect("a live slot");
                group.input.add(row, weight, NAME)?;
                if group.fresh_in != Some(period) {
                    mark_changed(&mut self.changed, &mut scratch, ROW, &group.key, &[row]);
                }
            }
        }
        Ok((touched, slots))
    }

    /// Output rows for the groups in `slots`, encoded.
    fn output_rows(&self, slots: &[u32]) -> Result<Vec<RowBytes>, EngineError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let groups: Vec<&Group> = slots.iter().map(|&s| self.group(s)).collect();
        let mut columns: Vec<ArrayRef> = match &self.key {
            None => Vec::new(),
            Some(codec) => codec
                .decode(groups.iter().map(|g| &g.key))?
                .columns()
                .to_vec(),
        };
        let fields = self.output.schema().fields().clone();
        let first_value_column = columns.len();
        for (c, call) in self.calls.iter().enumerate() {
            let field = fields[first_value_column + c].data_type();
            let states: Vec<&CallState> = groups.iter().map(|g| &g.calls[c]).collect();
            let array = match call.evaluate(&states, field)? {
                Some(array) => array,
                None => {
                    let values = groups
                        .iter()
                        .map(|g| recompute::evaluate(call, &self.input.decode(g.input.expanded())?))
                        .collect::<Result<Vec<ScalarValue>, EngineError>>()?;
                    let array = ScalarValue::iter_to_array(values)?;
                    if array.data_type() == field {
                        array
                    } else {
                        cast(&array, field)?
                    }
                }
            };
            columns.push(array);
        }
        let batch = batch_of(self.output.schema(), columns, slots.len())?;
        self.output.encode_rows(&batch)
    }

    /// Replaces the output row of each touched group; drops groups left empty.
    fn emit(&mut self, touched: Vec<u32>) -> Result<ChangeBatch, EngineError> {
        // A group with no rows left has no output row, except the global one.
        let global = self.is_global();
        let live: Vec<u32> = touched
            .iter()
            .copied()
            .filter(|&s| global || self.group(s).rows > 0)
            .collect();
        let mut new_rows = live
            .iter()
            .copied()
            .zip(self.output_rows(&live)?)
            .peekable();
        let mut change: Vec<(RowBytes, i64)> = Vec::new();
        for slot in touched {
            let new = new_rows.next_if(|(s, _)| *s == slot).map(|(_, row)| row);
            let unseen = self.unseen(slot);
            let group = self.groups[slot as usize].as_mut().expect("a live slot");
            group.touched = false;
            let key = &group.key;
            if group.output != new {
                if let Some(old) = group.output.take() {
                    change.push((old, -1));
                }
                if let Some(new) = &new {
                    change.push((new.clone(), 1));
                }
                group.output = new;
                if !unseen {
                    mark_changed(&mut self.changed, &mut self.scratch, OUTPUT, key, &[]);
                }
            }
            if !unseen {
                mark_changed(&mut self.changed, &mut self.scratch, GROUP, key, &[]);
            }
            if self.group(slot).is_empty() {
                self.remove(slot);
            }
        }
        self.output.consolidated_change(&change)
    }
}

impl Operator for Aggregate {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.output.schema().clone()
    }

    fn structure(&self) -> String {
        use crate::operator::{exprs_text, schema_text};
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|c| {
                let f = &c.call.function;
                let order: Vec<String> = f.order_bys().iter().map(|o| o.to_string()).collect();
                format!(
                    "{}(distinct={} ignore_nulls={} reversed={}; {}; order {}; filter {}; {:?} append_only={})",
                    f.fun().name(),
                    f.is_distinct(),
                    f.ignore_nulls(),
                    f.is_reversed(),
                    exprs_text(&f.expressions()),
                    order.join(", "),
                    exprs_text(&c.call.filter),
                    c.strategy,
                    c.append_only,
                )
            })
            .collect();
        let closing = match &self.closing {
            None => String::new(),
            Some(c) => format!("; closes by {} emit_on_close={}", c.key, c.emit_on_close),
        };
        // `/2`: the state layout with running accumulators.
        format!(
            "{NAME}/2(group {}; calls {}; in {}; out {}{closing})",
            exprs_text(&self.group_by),
            calls.join(" | "),
            schema_text(self.input.schema()),
            schema_text(self.output.schema())
        )
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 1)?;
        let mut touched = Vec::new();
        if !self.started {
            self.changed.insert(state_key(STARTED, &[], &[]));
            if self.is_global() {
                let slot = self.slot_of(&[]);
                self.group_mut(slot).touched = true;
                touched.push(slot);
            }
        }
        self.started = true;
        if self.closing.is_none() {
            if !inputs[0].is_empty() {
                touched.extend(self.fold(&inputs[0])?.0);
            }
            if touched.is_empty() {
                return Ok(empty_change(self.output.schema()));
            }
            return self.emit(touched);
        }
        let (input, windows) = self.on_time(&inputs[0])?;
        if !input.is_empty() {
            let (more, slots) = self.fold(&input)?;
            touched.extend(more);
            self.index_windows(&slots, &windows);
        }
        let mut out = if self.emits_on_close() {
            self.settle_quietly(touched);
            Vec::new()
        } else {
            vec![self.emit(touched)?]
        };
        out.push(self.close()?);
        crate::rows::concat_changes(self.output.schema(), &out)
    }

    fn watermarks(&mut self, inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        expect_watermarks(NAME, inputs, 1)?;
        let mut out = Vec::new();
        for (j, expr) in self.group_by.iter().enumerate() {
            let Some(column) = monotone_column(expr) else {
                continue;
            };
            let Some(value) = inputs[0].get(column) else {
                continue;
            };
            let value = if expr.as_ref().is::<Column>() {
                value
            } else {
                derive(expr, self.input.schema(), column, value)?
            };
            out.push((j, value));
        }
        let out = Watermarks::of(out);
        if let Some(closing) = &mut self.closing
            && let Some(value) = out.get(closing.key)
        {
            closing.next = closing.next.max(value);
        }
        Ok(out)
    }

    fn take_late_rows(&mut self) -> u64 {
        self.closing
            .as_mut()
            .map_or(0, |c| std::mem::take(&mut c.late))
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let mut changed = std::mem::take(&mut self.changed);
        let taken = take_changed(&mut changed, |key| self.value_of(key));
        self.changed = changed;
        let mut taken = taken?;
        self.take_unseen_groups(&mut taken);
        self.period += 1;
        Ok(taken)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let mut entries = Vec::new();
        if self.started {
            entries.push(StateEntry::set(state_key(STARTED, &[], &[]), vec![1]));
        }
        if let Some(value) = self.watermark_value() {
            entries.push(StateEntry::set(state_key(WATERMARK, &[], &[]), value));
        }
        for group in self.groups.iter().flatten() {
            self.group_entries(group, &mut entries);
        }
        // In key order, so equal states snapshot to equal bytes.
        entries.sort_unstable();
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        let mut touched: Vec<u32> = Vec::new();
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            let value = e.value.as_deref();
            if key.tag == STARTED {
                self.started = value.is_some();
                continue;
            }
            if key.tag == WATERMARK {
                let watermark = crate::watermark::from_state_value(NAME, value)?;
                if let Some(closing) = &mut self.closing {
                    closing.watermark = watermark;
                    closing.next = closing.next.max(watermark);
                }
                continue;
            }
            let slot = self.slot_of(key.distribution);
            // Restored state is checkpointed state.
            self.group_mut(slot).fresh_in = None;
            touched.push(slot);
            match key.tag {
                GROUP => self.decode_group(slot, value)?,
                OUTPUT => self.group_mut(slot).output = value.map(RowBytes::from),
                VALUE => {
                    let count = read_count(NAME, value)?;
                    let (call, value) = key
                        .rest
                        .split_first_chunk::<2>()
                        .map(|(c, v)| (u16::from_be_bytes(*c) as usize, v))
                        .filter(|(c, _)| *c < self.calls.len())
                        .ok_or_else(|| unreadable(NAME, "a malformed value key"))?;
                    self.restore_value(slot, call, value, count)?;
                }
                ROW => {
                    let count = read_count(NAME, value)?;
                    self.group_mut(slot).input.set(key.rest, count);
                }
                _ => return Err(unreadable(NAME, "an unknown tag")),
            }
        }
        // A group exists while it has rows or an output, as after a step.
        for &slot in &touched {
            if self.groups[slot as usize]
                .as_ref()
                .is_some_and(Group::is_empty)
            {
                self.remove(slot);
            }
        }
        self.index_restored(touched)?;
        self.changed.clear();
        self.fresh.clear();
        Ok(())
    }
}

/// Sharded by group: every state entry of a group has the group key as
/// its distribution key, and so does its output row (the group-by columns
/// lead it, decoded from that key), so groups of different workers never
/// emit equal rows. The `started` flag (distribution key empty) is the one
/// entry every worker keeps alike.
impl Keyed for Aggregate {
    fn shardable(&self) -> bool {
        !self.is_global()
    }

    fn distribution_keys(
        &self,
        _input: usize,
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        self.group_keys(rows)?.ok_or_else(|| not_shardable(NAME))
    }
}
