//! How each aggregate call is maintained: its [`Strategy`], its per-group
//! [`CallState`], and how that state follows one input row and is read out.
//!
//! - `running`: count, sum, avg, bool_and and bool_or keep a running
//!   accumulator per group (a count, an exact sum), O(1) per input row.
//!   Integer and decimal sums are kept in `i128` and read wrapping, as
//!   DataFusion's own sum wraps, so the order of arrival never matters;
//!   float sums are exact ([`ExactSum`]).
//! - `ordered values`: min and max keep each group's values with their
//!   counts, ordered, so retracting the current extreme finds the next one
//!   in O(log n); over an input that never retracts, only the extreme,
//!   inline (`extreme value`).
//! - `distinct`: count, sum and avg over DISTINCT keep each group's values
//!   with their counts, hashed, and feed the running accumulator a value
//!   when its count leaves or returns to zero; over an input that never
//!   retracts, only the values (a set: a value seen again costs a lookup),
//!   one set for all the calls with equal arguments ([`Shared`]).
//! - `recompute`: every other call (string_agg, array_agg, stddev, ordered
//!   aggregates, ...) is recomputed from the group's rows with DataFusion's
//!   own accumulator whenever the group changes.
//!
//! Values are compared as DataFusion compares them: min/max and DISTINCT
//! keys are `arrow_row` bytes, whose order is the values' order (floats by
//! total order, as arrow's own min/max kernels).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array, Int64Array, UInt64Array,
};
use arrow::compute::{cast, filter};
use arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type, Schema, UInt64Type};
use arrow::row::Rows;
use datafusion_functions_aggregate_common::utils::DecimalAverager;
use weir_common::ChangeBatch;

use super::exact_sum::{ExactSum, take};
use super::values::{InlineKey, Values};
use super::{AggregateCall, NAME};
use crate::EngineError;
use crate::rows::{RowCodec, where_true};

/// The running accumulators.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Running {
    Count,
    SumSigned,
    SumUnsigned,
    SumFloat,
    SumDecimal,
    AvgInteger,
    AvgFloat,
    /// The input's scale.
    AvgDecimal(i8),
    BoolAnd,
    BoolOr,
}

/// How one call is maintained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Strategy {
    Running(Running),
    /// Over the distinct values of its arguments.
    Distinct(Running),
    Min,
    Max,
    Recompute,
}

impl Strategy {
    /// The strategy for `call` over rows of `input`.
    pub fn of(call: &AggregateCall, input: &Schema) -> Self {
        let function = &call.function;
        if !function.order_bys().is_empty() {
            return Self::Recompute;
        }
        let Ok(args) = function
            .expressions()
            .iter()
            .map(|e| e.data_type(input))
            .collect::<Result<Vec<DataType>, _>>()
        else {
            return Self::Recompute;
        };
        use DataType::*;
        let numeric = |running_of: fn(&DataType) -> Option<Running>| match args.as_slice() {
            [t] => running_of(t),
            _ => None,
        };
        let running = match function.fun().name() {
            "count" if !function.is_distinct() || args.len() == 1 => Some(Running::Count),
            "sum" => numeric(|t| match t {
                Int8 | Int16 | Int32 | Int64 => Some(Running::SumSigned),
                UInt8 | UInt16 | UInt32 | UInt64 => Some(Running::SumUnsigned),
                Float32 | Float64 => Some(Running::SumFloat),
                Decimal128(..) => Some(Running::SumDecimal),
                _ => None,
            }),
            "avg" => numeric(|t| match t {
                Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => {
                    Some(Running::AvgInteger)
                }
                Float32 | Float64 => Some(Running::AvgFloat),
                Decimal128(_, scale) => Some(Running::AvgDecimal(*scale)),
                _ => None,
            }),
            "bool_and" if args == [Boolean] => return Self::Running(Running::BoolAnd),
            "bool_or" if args == [Boolean] => return Self::Running(Running::BoolOr),
            name @ ("min" | "max") => {
                return match args.as_slice() {
                    [t] if ordered_by_row_bytes(t) => {
                        if name == "min" {
                            Self::Min
                        } else {
                            Self::Max
                        }
                    }
                    _ => Self::Recompute,
                };
            }
            _ => None,
        };
        match running {
            Some(r) if function.is_distinct() => Self::Distinct(r),
            Some(r) => Self::Running(r),
            None => Self::Recompute,
        }
    }

    /// For EXPLAIN.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Running(_) => "running",
            Self::Distinct(_) => "distinct values",
            Self::Min | Self::Max => "ordered values",
            Self::Recompute => "recompute",
        }
    }

    /// Whether the call keeps values with counts per group.
    pub fn keeps_values(&self) -> bool {
        matches!(self, Self::Distinct(_) | Self::Min | Self::Max)
    }

    fn running(&self) -> Option<Running> {
        match self {
            Self::Running(r) | Self::Distinct(r) => Some(*r),
            _ => None,
        }
    }
}

/// Types whose `arrow_row` byte order is the order DataFusion's min/max use.
fn ordered_by_row_bytes(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Boolean
            | Int8
            | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Float32
            | Float64
            | Decimal128(..)
            | Utf8
            | LargeUtf8
            | Utf8View
            | Binary
            | LargeBinary
            | Date32
            | Date64
            | Time32(_)
            | Time64(_)
            | Timestamp(..)
    )
}

/// One group's state for one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct CallState {
    /// Rows counted: non-null inputs (true ones for bool_and/bool_or).
    count: i64,
    /// Integer and decimal sums; false inputs for bool_and/bool_or.
    sum: i128,
    float_sum: Option<Box<ExactSum>>,
    /// Min/max: the values, ordered; DISTINCT: the distinct values,
    /// hashed. With counts (over an append-only input, DISTINCT's are 1).
    pub values: Values,
}

/// One call's view of an input batch: what each row contributes.
pub(super) struct Prepared {
    /// Whether a row counts: its FILTER holds and no argument is NULL.
    counts: Vec<bool>,
    numbers: Numbers,
    /// Min/max values or DISTINCT keys, one row per input row.
    pub keys: Option<Rows>,
}

impl Prepared {
    /// Whether row `i` counts for the call.
    pub fn counts(&self, i: usize) -> bool {
        self.counts[i]
    }
}

enum Numbers {
    None,
    Signed(Int64Array),
    Unsigned(UInt64Array),
    Float(Float64Array),
    Decimal(Decimal128Array),
    Bool(BooleanArray),
}

/// Everything a call needs that does not change with the input.
pub(super) struct Call {
    pub call: AggregateCall,
    pub strategy: Strategy,
    /// Encodes the argument for min/max values and DISTINCT keys.
    pub values: Option<RowCodec>,
    /// The input never retracts: min/max keep only the extreme value,
    /// DISTINCT only whether a value was seen.
    pub append_only: bool,
    /// Set when its values live in another call's set ([`Shared`]).
    pub shared: Option<Shared>,
}

/// DISTINCT calls over an input that never retracts, with equal arguments
/// (`count(DISTINCT bidder)`, the same `FILTER (WHERE price < 10000)`, ...)
/// keep one set per group, in the first of them (the leader): each value
/// maps to a mask of the calls that have seen it, one bit per call. A row
/// is one lookup for all of them, and a value is kept once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Shared {
    /// The call whose state keeps the set.
    pub leader: usize,
    /// This call's bit in each value's mask; the leader's is 0.
    pub bit: u32,
}

/// What applying a row did to a call's kept values.
pub(super) enum ValuesChanged {
    No,
    /// The row's value changed (its key is `keys.row(i)`).
    Row,
    /// The row's value replaced this one (min/max over append-only input).
    Replaced(InlineKey),
}

impl Call {
    pub fn new(call: AggregateCall, input: &Schema) -> Result<Self, EngineError> {
        let strategy = Strategy::of(&call, input);
        let values = if strategy.keeps_values() {
            Some(RowCodec::of_exprs(&call.function.expressions(), input)?)
        } else {
            None
        };
        Ok(Self {
            call,
            strategy,
            values,
            append_only: false,
            shared: None,
        })
    }

    /// For EXPLAIN.
    pub fn describe(&self) -> &'static str {
        match self.strategy {
            Strategy::Min | Strategy::Max if self.append_only => "extreme value",
            Strategy::Distinct(_) if self.shared.is_some() => "shared distinct set",
            Strategy::Distinct(_) if self.append_only => "distinct set",
            strategy => strategy.describe(),
        }
    }

    pub fn new_state(&self) -> CallState {
        CallState {
            float_sum: matches!(
                self.strategy.running(),
                Some(Running::SumFloat | Running::AvgFloat)
            )
            .then(Box::default),
            values: match self.strategy {
                Strategy::Distinct(_) => Values::hashed(),
                Strategy::Min | Strategy::Max if self.append_only => Values::Extreme(None),
                _ => Values::default(),
            },
            ..CallState::default()
        }
    }

    /// What each row of `change` contributes to this call.
    pub fn prepare(&self, change: &ChangeBatch) -> Result<Prepared, EngineError> {
        let rows = change.rows();
        let n = rows.num_rows();
        let args = self
            .call
            .function
            .expressions()
            .iter()
            .map(|e| Ok(e.evaluate(rows)?.into_array(n)?))
            .collect::<Result<Vec<ArrayRef>, EngineError>>()?;
        let mut counts = vec![true; n];
        if let Some(predicate) = &self.call.filter {
            let mask = where_true(&predicate.evaluate(rows)?.into_array(n)?)?;
            for (i, c) in counts.iter_mut().enumerate() {
                *c = mask.value(i);
            }
        }
        for arg in &args {
            if arg.null_count() > 0 {
                for (i, c) in counts.iter_mut().enumerate() {
                    *c &= arg.is_valid(i);
                }
            }
        }
        let numbers = match (self.strategy.running(), args.first()) {
            (Some(Running::SumSigned), Some(a)) => Numbers::Signed(
                cast(a, &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
            ),
            (Some(Running::SumUnsigned), Some(a)) => Numbers::Unsigned(
                cast(a, &DataType::UInt64)?
                    .as_primitive::<UInt64Type>()
                    .clone(),
            ),
            (Some(Running::AvgInteger), Some(a)) => {
                if a.data_type().is_unsigned_integer() {
                    Numbers::Unsigned(
                        cast(a, &DataType::UInt64)?
                            .as_primitive::<UInt64Type>()
                            .clone(),
                    )
                } else {
                    Numbers::Signed(
                        cast(a, &DataType::Int64)?
                            .as_primitive::<Int64Type>()
                            .clone(),
                    )
                }
            }
            (Some(Running::SumFloat | Running::AvgFloat), Some(a)) => Numbers::Float(
                cast(a, &DataType::Float64)?
                    .as_primitive::<Float64Type>()
                    .clone(),
            ),
            (Some(Running::SumDecimal | Running::AvgDecimal(_)), Some(a)) => {
                Numbers::Decimal(a.as_primitive::<Decimal128Type>().clone())
            }
            (Some(Running::BoolAnd | Running::BoolOr), Some(a)) => {
                Numbers::Bool(a.as_boolean().clone())
            }
            _ => Numbers::None,
        };
        // A call that shares its leader's set reads the leader's keys.
        let keys = match &self.values {
            Some(codec) if self.shared.is_none_or(|s| s.bit == 0) => {
                Some(codec.encode_buffer(&args, false)?)
            }
            _ => None,
        };
        Ok(Prepared {
            counts,
            numbers,
            keys,
        })
    }

    /// Applies row `i` with `weight` to `state`; says what it did to the
    /// kept values.
    pub fn apply(
        &self,
        state: &mut CallState,
        prepared: &Prepared,
        i: usize,
        mut weight: i64,
    ) -> Result<ValuesChanged, EngineError> {
        if !prepared.counts[i] {
            return Ok(ValuesChanged::No);
        }
        let mut changed = ValuesChanged::No;
        if let Some(keys) = &prepared.keys {
            let key = keys.row(i);
            let key = key.as_ref();
            match self.strategy {
                Strategy::Min | Strategy::Max if self.append_only => {
                    return self.apply_extreme(state, key, weight);
                }
                // Over an input that never retracts, a value is kept or
                // not: seeing it again changes nothing, not even a count,
                // so a checkpoint carries only the values that are new.
                Strategy::Distinct(_) if self.append_only => {
                    if weight < 0 {
                        return Err(retraction_over_append_only("count/sum/avg DISTINCT"));
                    }
                    if weight == 0 || state.values.add_seen(key, 1) == 0 {
                        return Ok(ValuesChanged::No);
                    }
                    changed = ValuesChanged::Row;
                    weight = 1;
                }
                _ => {
                    let before = state.values.get(key).unwrap_or(0);
                    let after = before + weight;
                    if after < 0 {
                        return Err(retracted_too_often());
                    }
                    state.values.set(key, after);
                    changed = ValuesChanged::Row;
                    match self.strategy {
                        // The running accumulator sees a distinct value once.
                        Strategy::Distinct(_) => weight = (after > 0) as i64 - (before > 0) as i64,
                        _ => return Ok(changed),
                    }
                    if weight == 0 {
                        return Ok(changed);
                    }
                }
            }
        }
        self.accumulate(state, prepared, i, weight)?;
        Ok(changed)
    }

    /// Adds row `i` with `weight` to the running accumulators of `state`
    /// (none for min/max), its values already kept.
    pub fn accumulate(
        &self,
        state: &mut CallState,
        prepared: &Prepared,
        i: usize,
        weight: i64,
    ) -> Result<(), EngineError> {
        let Some(running) = self.strategy.running() else {
            return Ok(());
        };
        state.count += weight;
        match (&prepared.numbers, running) {
            (Numbers::Bool(values), Running::BoolAnd | Running::BoolOr) => {
                // `count` counts trues, `sum` falses.
                if !values.value(i) {
                    state.count -= weight;
                    state.sum += weight as i128;
                }
            }
            (Numbers::Signed(values), _) => {
                let term = (values.value(i) as i128).wrapping_mul(weight as i128);
                state.sum = state.sum.wrapping_add(term);
            }
            (Numbers::Unsigned(values), _) => {
                let term = (values.value(i) as i128).wrapping_mul(weight as i128);
                state.sum = state.sum.wrapping_add(term);
            }
            (Numbers::Decimal(values), _) => {
                let term = values.value(i).wrapping_mul(weight as i128);
                state.sum = state.sum.wrapping_add(term);
            }
            (Numbers::Float(values), _) => {
                let sum = state.float_sum.get_or_insert_with(Box::default);
                sum.add(values.value(i), weight);
            }
            _ => {}
        }
        if state.count < 0 || state.sum < 0 && matches!(running, Running::BoolAnd | Running::BoolOr)
        {
            return Err(retracted_too_often());
        }
        Ok(())
    }

    /// Min/max over an input that never retracts: only the extreme value
    /// is kept.
    fn apply_extreme(
        &self,
        state: &mut CallState,
        key: &[u8],
        weight: i64,
    ) -> Result<ValuesChanged, EngineError> {
        if weight < 0 {
            return Err(retraction_over_append_only("min/max"));
        }
        let max = self.strategy == Strategy::Max;
        let Values::Extreme(extreme) = &mut state.values else {
            return Err(min_max_unordered());
        };
        match extreme {
            Some((kept, count)) if kept.as_slice() == key => {
                *count += weight;
                Ok(ValuesChanged::Row)
            }
            Some((kept, _)) if (key > kept.as_slice()) != max => Ok(ValuesChanged::No),
            _ => {
                let replaced = extreme.replace((InlineKey::from_slice(key), weight));
                Ok(replaced.map_or(ValuesChanged::Row, |(old, _)| ValuesChanged::Replaced(old)))
            }
        }
    }

    /// This call's value for each of `states`, as an array of `output` type.
    /// `None` for a call that recomputes.
    pub fn evaluate(
        &self,
        states: &[&CallState],
        output: &DataType,
    ) -> Result<Option<ArrayRef>, EngineError> {
        let array: ArrayRef = match self.strategy {
            Strategy::Recompute => return Ok(None),
            Strategy::Min | Strategy::Max => {
                let codec = self.values.as_ref().expect("min/max keep values");
                let extremes = states
                    .iter()
                    .map(|s| {
                        (s.values.extreme(self.strategy == Strategy::Max))
                            .map_err(|()| min_max_unordered())
                    })
                    .collect::<Result<Vec<Option<&[u8]>>, EngineError>>()?;
                let present: Vec<&[u8]> = extremes.iter().flatten().copied().collect();
                let decoded = codec.decode_bytes(present)?.column(0).clone();
                // Put the NULLs of empty groups back in place.
                let mut next = 0u32;
                let indices: arrow::array::UInt32Array = extremes
                    .iter()
                    .map(|e| {
                        e.map(|_| {
                            next += 1;
                            next - 1
                        })
                    })
                    .collect();
                arrow::compute::take(&decoded, &indices, None)?
            }
            Strategy::Running(r) | Strategy::Distinct(r) => running_values(r, states, output)?,
        };
        Ok(Some(if array.data_type() == output {
            array
        } else {
            cast(&array, output)?
        }))
    }

    /// Appends the call's scalar state (not its values) to `out`.
    pub fn encode(&self, state: &CallState, out: &mut Vec<u8>) {
        if self.strategy.running().is_none() {
            return;
        }
        out.extend_from_slice(&state.count.to_le_bytes());
        out.extend_from_slice(&state.sum.to_le_bytes());
        if let Some(sum) = &state.float_sum {
            sum.encode(out);
        }
    }

    /// Reads what [`Call::encode`] wrote into `state` (values untouched).
    pub fn decode(&self, state: &mut CallState, bytes: &mut &[u8]) -> Option<()> {
        if self.strategy.running().is_none() {
            return Some(());
        }
        state.count = i64::from_le_bytes(take(bytes)?);
        state.sum = i128::from_le_bytes(take(bytes)?);
        if state.float_sum.is_some() {
            state.float_sum = Some(Box::new(ExactSum::decode(bytes)?));
        }
        Some(())
    }

    /// Drops the filter rows of a batch (for `recompute`'s arguments).
    pub fn filter_args(
        &self,
        batch: &arrow::array::RecordBatch,
        args: Vec<ArrayRef>,
    ) -> Result<Vec<ArrayRef>, EngineError> {
        let Some(predicate) = &self.call.filter else {
            return Ok(args);
        };
        let mask = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
        let mask = where_true(&mask)?;
        Ok(args
            .iter()
            .map(|a| filter(a.as_ref(), &mask))
            .collect::<Result<Vec<_>, _>>()?)
    }
}

fn running_values(
    running: Running,
    states: &[&CallState],
    output: &DataType,
) -> Result<ArrayRef, EngineError> {
    let some = |s: &&CallState| s.count > 0;
    Ok(match running {
        Running::Count => Arc::new(Int64Array::from_iter_values(states.iter().map(|s| s.count))),
        Running::SumSigned => Arc::new(Int64Array::from_iter(
            states.iter().map(|s| some(s).then_some(s.sum as i64)),
        )),
        Running::SumUnsigned => Arc::new(UInt64Array::from_iter(
            states.iter().map(|s| some(s).then_some(s.sum as u64)),
        )),
        Running::SumFloat => Arc::new(Float64Array::from_iter(
            states.iter().map(|s| some(s).then(|| float_sum(s))),
        )),
        Running::AvgInteger => Arc::new(Float64Array::from_iter(
            states
                .iter()
                .map(|s| some(s).then(|| s.sum as f64 / s.count as f64)),
        )),
        Running::AvgFloat => Arc::new(Float64Array::from_iter(
            states
                .iter()
                .map(|s| some(s).then(|| float_sum(s) / s.count as f64)),
        )),
        Running::SumDecimal => {
            let DataType::Decimal128(precision, scale) = output else {
                return Err(unexpected_output(output));
            };
            Arc::new(
                Decimal128Array::from_iter(states.iter().map(|s| some(s).then_some(s.sum)))
                    .with_precision_and_scale(*precision, *scale)?,
            )
        }
        Running::AvgDecimal(input_scale) => {
            let DataType::Decimal128(precision, scale) = output else {
                return Err(unexpected_output(output));
            };
            let averager =
                DecimalAverager::<Decimal128Type>::try_new(input_scale, *precision, *scale)?;
            let values = states
                .iter()
                .map(|s| {
                    some(s)
                        .then(|| averager.avg(s.sum, s.count as i128))
                        .transpose()
                })
                .collect::<Result<Vec<Option<i128>>, _>>()?;
            Arc::new(
                Decimal128Array::from_iter(values).with_precision_and_scale(*precision, *scale)?,
            )
        }
        // `count` trues, `sum` falses; NULL when neither.
        Running::BoolAnd | Running::BoolOr => {
            Arc::new(BooleanArray::from_iter(states.iter().map(|s| {
                match (s.count > 0, s.sum > 0) {
                    (false, false) => None,
                    (trues, falses) => Some(if running == Running::BoolAnd {
                        !falses
                    } else {
                        trues
                    }),
                }
            })))
        }
    })
}

fn float_sum(state: &CallState) -> f64 {
    state.float_sum.as_ref().map_or(0.0, |s| s.value())
}

fn retracted_too_often() -> EngineError {
    EngineError::Invariant {
        operator: NAME,
        message: "a row was retracted more often than it was inserted".into(),
    }
}

pub(super) fn retraction_over_append_only(function: &str) -> EngineError {
    EngineError::Invariant {
        operator: NAME,
        message: format!("a retraction reached a {function} over an append-only input"),
    }
}

fn min_max_unordered() -> EngineError {
    EngineError::Invariant {
        operator: NAME,
        message: "a min/max call kept its values unordered".into(),
    }
}

fn unexpected_output(output: &DataType) -> EngineError {
    EngineError::Invariant {
        operator: NAME,
        message: format!("a decimal sum or average typed {output}"),
    }
}
