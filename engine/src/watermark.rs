//! Event time in the engine: [`Watermarks`] ("no row with a smaller value
//! in this column follows"), how they pass through expressions
//! ([`monotone_column`], [`derive`]) and how a source's are generated from
//! the rows it reads ([`SourceClock`]).
//!
//! A watermark is a bound on one column's values, in that column's own
//! unit (a `TIMESTAMP` column's microseconds, a `DATE`'s days), so it
//! passes through any expression that never decreases when that column
//! grows (`col - INTERVAL '4' SECOND`, `date_bin(INTERVAL '10' SECOND,
//! col)`) by evaluating the expression at the watermark. Watermarks move
//! at epoch boundaries: an epoch's rows are behind the watermark only if
//! they are behind the one of the epoch before (what an operator that
//! drops late rows compares with), so a row is never late because of a
//! row that arrived after it in the same epoch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, new_null_array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal, TryCastExpr};

use weir_common::ChangeBatch;

use crate::EngineError;

/// The value of a column that carries a watermark when nothing is known
/// yet (no row read): every row is on time.
pub const NONE_YET: i64 = i64::MIN;

/// The value after the input ended: every window closes.
pub const FINAL: i64 = i64::MAX;

/// The watermarks of one relation or operator output: for each column
/// that carries one, its value ([`NONE_YET`] before the first). A column
/// not listed has none, so nothing can be expired by it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watermarks(Vec<(usize, i64)>);

impl Watermarks {
    /// No column carries a watermark.
    pub fn none() -> Self {
        Self::default()
    }

    /// From (column, value) pairs; a column listed twice keeps the smaller.
    pub fn of(pairs: impl IntoIterator<Item = (usize, i64)>) -> Self {
        let mut out = Self::default();
        for (column, value) in pairs {
            out.set_min(column, value);
        }
        out
    }

    fn set_min(&mut self, column: usize, value: i64) {
        match self.0.binary_search_by_key(&column, |&(c, _)| c) {
            Ok(i) => self.0[i].1 = self.0[i].1.min(value),
            Err(i) => self.0.insert(i, (column, value)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `column`'s watermark, if it carries one.
    pub fn get(&self, column: usize) -> Option<i64> {
        self.0
            .binary_search_by_key(&column, |&(c, _)| c)
            .ok()
            .map(|i| self.0[i].1)
    }

    /// (column, value) in column order.
    pub fn pairs(&self) -> &[(usize, i64)] {
        &self.0
    }

    /// The same columns with nothing known yet: what an operator is asked
    /// when the graph is built, to learn which of its columns carry one.
    pub fn unknown(&self) -> Self {
        Self(self.0.iter().map(|&(c, _)| (c, NONE_YET)).collect())
    }

    /// Rows from every one of `inputs` (a union): a column carries a
    /// watermark only if it does in each, at the smallest value.
    pub fn min_of(inputs: &[Watermarks]) -> Self {
        let Some((first, rest)) = inputs.split_first() else {
            return Self::none();
        };
        Self(
            first
                .0
                .iter()
                .filter_map(|&(column, value)| {
                    rest.iter()
                        .map(|w| w.get(column))
                        .try_fold(value, |low, v| v.map(|v| low.min(v)))
                        .map(|value| (column, value))
                })
                .collect(),
        )
    }

    /// These watermarks with every column shifted by `offset` (the right
    /// side of a join whose output puts the left side's columns first).
    pub fn shifted(&self, offset: usize) -> Self {
        Self(self.0.iter().map(|&(c, v)| (c + offset, v)).collect())
    }

    /// Both sets of columns (disjoint, as a join's two sides are).
    pub fn merged(mut self, other: &Watermarks) -> Self {
        for &(column, value) in &other.0 {
            self.set_min(column, value);
        }
        self
    }

    /// Whether any column's value moved past `before`'s.
    pub fn advanced_from(&self, before: &Watermarks) -> bool {
        self.0
            .iter()
            .any(|&(c, v)| before.get(c).is_none_or(|b| v > b))
    }
}

/// The input column `expr` never decreases with, when it reads exactly
/// one column and is built only of steps that keep order: the column
/// itself, casts, `+` or `-` of a constant, `date_bin` and `date_trunc`
/// with a constant unit. Such an expression carries that column's
/// watermark ([`derive`]).
pub fn monotone_column(expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    let any = expr.as_ref();
    if let Some(column) = any.downcast_ref::<Column>() {
        return Some(column.index());
    }
    if let Some(c) = any.downcast_ref::<CastExpr>() {
        return order_keeping_cast(c.cast_type())
            .then(|| monotone_column(c.expr()))
            .flatten();
    }
    if let Some(c) = any.downcast_ref::<TryCastExpr>() {
        return order_keeping_cast(c.cast_type())
            .then(|| monotone_column(c.expr()))
            .flatten();
    }
    if let Some(b) = any.downcast_ref::<BinaryExpr>() {
        let constant = |e: &Arc<dyn PhysicalExpr>| e.as_ref().is::<Literal>();
        return match b.op() {
            BinaryOp::Plus if constant(b.left()) => monotone_column(b.right()),
            BinaryOp::Plus | BinaryOp::Minus if constant(b.right()) => monotone_column(b.left()),
            _ => None,
        };
    }
    if let Some(f) = any.downcast_ref::<ScalarFunctionExpr>() {
        let args = f.args();
        let constant = |i: usize| args.get(i).is_some_and(|a| a.as_ref().is::<Literal>());
        return match f.name() {
            "date_bin" if constant(0) && (args.len() == 2 || constant(2)) => {
                monotone_column(&args[1])
            }
            "date_trunc" if constant(0) && args.len() == 2 => monotone_column(&args[1]),
            _ => None,
        };
    }
    None
}

/// Casts between time and integer types keep order (a timestamp's unit
/// or zone, a date from a timestamp); to text they would not.
fn order_keeping_cast(to: &DataType) -> bool {
    to.is_temporal() || to.is_integer()
}

/// The watermark of `expr`'s output when `column` of its input (whose
/// columns are `input`) has watermark `value`: the expression at that
/// value ([`monotone_column`] must have found `column`). [`NONE_YET`] and
/// [`FINAL`] stay as they are; a value the expression cannot take (an
/// overflow) gives [`NONE_YET`], which holds nothing back wrongly.
pub fn derive(
    expr: &Arc<dyn PhysicalExpr>,
    input: &Schema,
    column: usize,
    value: i64,
) -> Result<i64, EngineError> {
    if value == NONE_YET || value == FINAL {
        return Ok(value);
    }
    let fields: Vec<Field> = input
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let columns = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i == column {
                Ok(cast(
                    &(Arc::new(Int64Array::from(vec![value])) as ArrayRef),
                    f.data_type(),
                )?)
            } else {
                Ok(new_null_array(f.data_type(), 1))
            }
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
    let Ok(out) = expr.evaluate(&batch).and_then(|v| v.into_array(1)) else {
        return Ok(NONE_YET);
    };
    Ok(as_i64(&out)?
        .into_iter()
        .next()
        .flatten()
        .unwrap_or(NONE_YET))
}

/// A watermark of a column of `data_type` in microseconds since the Unix
/// epoch (for display), when the column is a timestamp or date.
pub fn to_micros(value: i64, data_type: &DataType) -> Option<i64> {
    let array: ArrayRef = Arc::new(Int64Array::from(vec![value]));
    let typed = cast(&array, data_type).ok()?;
    let micros = cast(
        &typed,
        &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
    )
    .ok()?;
    as_i64(&micros).ok()?.into_iter().next().flatten()
}

/// The first of `exprs` that keeps the order of a column in `watermarked`
/// ([`monotone_column`]): the key a keyed operator (a window aggregate,
/// a top-N per window) can close its state by.
pub fn closing_key(exprs: &[Arc<dyn PhysicalExpr>], watermarked: &[usize]) -> Option<usize> {
    exprs
        .iter()
        .position(|e| monotone_column(e).is_some_and(|c| watermarked.contains(&c)))
}

/// The watermark of `expr` (over a relation of `schema`) given the
/// relation's `input` watermarks: when `expr` keeps the order of a column
/// that carries one ([`monotone_column`]), the expression evaluated at it
/// ([`derive`]); `None` otherwise.
pub fn of_expression(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
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

/// `change` without its rows behind `watermark` (`values[i]` is row
/// `i`'s value in the column the watermark bounds; a NULL is never late):
/// the rows kept, their values, and how many were dropped.
pub fn drop_late(
    change: &ChangeBatch,
    values: Vec<Option<i64>>,
    watermark: i64,
) -> Result<(ChangeBatch, Vec<Option<i64>>, u64), EngineError> {
    let on_time = |v: &Option<i64>| v.is_none_or(|v| v >= watermark);
    let late = values.iter().filter(|v| !on_time(v)).count() as u64;
    if late == 0 {
        return Ok((change.clone(), values, 0));
    }
    let mask: arrow::array::BooleanArray = values.iter().map(|v| Some(on_time(v))).collect();
    let kept = ChangeBatch::new(
        arrow::compute::filter_record_batch(change.rows(), &mask)?,
        arrow::compute::filter(change.weights(), &mask)?
            .as_primitive::<Int64Type>()
            .clone(),
    )?;
    Ok((kept, values.into_iter().filter(on_time).collect(), late))
}

/// A watermark in effect as an operator's state value.
pub(crate) fn state_value(watermark: i64) -> Vec<u8> {
    watermark.to_le_bytes().to_vec()
}

/// The inverse of [`state_value`]; a removed entry is [`NONE_YET`].
pub(crate) fn from_state_value(
    operator: &'static str,
    value: Option<&[u8]>,
) -> Result<i64, EngineError> {
    match value {
        None => Ok(NONE_YET),
        Some(v) => <[u8; 8]>::try_from(v)
            .map(i64::from_le_bytes)
            .map_err(|_| crate::operator::unreadable(operator, "a malformed watermark")),
    }
}

/// A time or integer column as i64 values in its own unit.
pub fn as_i64(array: &ArrayRef) -> Result<Vec<Option<i64>>, EngineError> {
    let ints = cast(array, &DataType::Int64)?;
    Ok(ints.as_primitive::<Int64Type>().iter().collect())
}

/// The largest non-null value of a time or integer column, in its unit.
fn max_of(array: &ArrayRef) -> Result<Option<i64>, EngineError> {
    let ints = cast(array, &DataType::Int64)?;
    Ok(arrow::compute::max(ints.as_primitive::<Int64Type>()))
}

/// Rows of `array` (a time or integer column) below `watermark`.
fn count_below(array: &ArrayRef, watermark: i64) -> Result<u64, EngineError> {
    if watermark == NONE_YET {
        return Ok(0);
    }
    let ints = cast(array, &DataType::Int64)?;
    Ok(ints
        .as_primitive::<Int64Type>()
        .iter()
        .filter(|v| v.is_some_and(|v| v < watermark))
        .count() as u64)
}

/// How a source's watermark is generated: `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone)]
pub struct WatermarkSpec {
    /// The column the watermark bounds, in the relation's columns.
    pub column: usize,
    /// The declared expression over the relation's columns, reading only
    /// `column` and never decreasing with it (checked at CREATE).
    pub expr: Arc<dyn PhysicalExpr>,
    /// A split that delivered nothing for this long stops holding the
    /// watermark back until it delivers again.
    pub idle_timeout: Duration,
    /// How far (in event time) the source's rows may run ahead of another
    /// source read along with it before it waits (watermark alignment);
    /// `None`: never waits.
    pub max_drift: Option<Duration>,
}

/// [`WatermarkSpec::max_drift`]'s default. A join of two sources holds
/// rows until both watermarks pass them, so unbounded skew between them
/// would be unbounded state; a minute of event time is a few windows.
pub const DEFAULT_MAX_DRIFT: Duration = Duration::from_secs(60);

/// One split's progress in event time.
#[derive(Debug, Clone)]
struct SplitTime {
    /// The largest value of the column read from it.
    max: i64,
    last_read: Instant,
    ended: bool,
}

/// The watermark of one relation a source feeds: per split, the
/// declared expression at the largest value read; the relation's is the
/// smallest over its splits that are neither ended nor idle, never moving
/// back (a restart resumes at the sealed one). Every split ended: [`FINAL`].
#[derive(Debug, Clone)]
pub struct SourceClock {
    spec: WatermarkSpec,
    schema: SchemaRef,
    splits: HashMap<String, SplitTime>,
    current: i64,
    /// Rows that arrived behind the watermark, since this clock started.
    pub late_rows: u64,
    started: Instant,
}

impl SourceClock {
    /// Whether rows are still coming: some split that has not ended was
    /// read within `idle_timeout`, or nothing was read yet and the clock
    /// started within it. A source that ended is not live.
    pub fn live(&self, now: Instant) -> bool {
        let recent = |at: Instant| now.duration_since(at) < self.spec.idle_timeout;
        self.current != FINAL
            && if self.splits.is_empty() {
                recent(self.started)
            } else {
                self.splits
                    .values()
                    .any(|s| !s.ended && recent(s.last_read))
            }
    }

    /// See [`WatermarkSpec::max_drift`].
    pub fn max_drift(&self) -> Option<Duration> {
        self.spec.max_drift
    }

    /// Takes `spec`'s tunable options (`idle_timeout`, `max_drift`: an
    /// ALTER SOURCE ... SET), keeping what was read.
    pub fn retune(&mut self, spec: &WatermarkSpec) {
        self.spec.idle_timeout = spec.idle_timeout;
        self.spec.max_drift = spec.max_drift;
    }

    /// How far the rows read so far reach: the largest value of the
    /// column over every split (in its unit), before the watermark's
    /// delay and before the next [`Self::advance`]; `None` before any.
    pub fn progress(&self) -> Option<i64> {
        self.splits
            .values()
            .map(|s| s.max)
            .filter(|&m| m != NONE_YET)
            .max()
    }
}

impl SourceClock {
    /// A clock starting at `sealed` (the watermark the latest seal holds;
    /// [`NONE_YET`] for none).
    pub fn new(spec: WatermarkSpec, schema: SchemaRef, sealed: i64) -> Self {
        Self {
            spec,
            schema,
            splits: HashMap::new(),
            current: sealed,
            late_rows: 0,
            started: Instant::now(),
        }
    }

    /// The watermark as of the rows read so far (see [`Self::advance`]).
    pub fn current(&self) -> i64 {
        self.current
    }

    /// Rows of `split` arrived: counts those behind the current
    /// watermark and records the split's largest value.
    pub fn read(&mut self, split: &str, rows: &RecordBatch) -> Result<(), EngineError> {
        let Some(array) = rows.columns().get(self.spec.column) else {
            return Ok(());
        };
        self.late_rows += count_below(array, self.current)?;
        let entry = self.splits.entry(split.to_string()).or_insert(SplitTime {
            max: NONE_YET,
            last_read: Instant::now(),
            ended: false,
        });
        entry.last_read = Instant::now();
        if let Some(max) = max_of(array)? {
            entry.max = entry.max.max(max);
        }
        Ok(())
    }

    /// `split` has no more rows: it holds nothing back any more.
    pub fn ended(&mut self, split: &str) {
        let entry = self.splits.entry(split.to_string()).or_insert(SplitTime {
            max: NONE_YET,
            last_read: Instant::now(),
            ended: true,
        });
        entry.ended = true;
    }

    /// Every split ended (the source is complete).
    pub fn finish(&mut self) {
        self.current = FINAL;
    }

    /// Moves the watermark to what the splits read so far allow at
    /// `now`, never back; returns it.
    pub fn advance(&mut self, now: Instant) -> Result<i64, EngineError> {
        if self.current == FINAL {
            return Ok(FINAL);
        }
        let mut low: Option<i64> = None;
        let mut any_ended = false;
        for split in self.splits.values() {
            if split.ended {
                any_ended = true;
                continue;
            }
            if now.duration_since(split.last_read) >= self.spec.idle_timeout {
                continue;
            }
            low = Some(low.map_or(split.max, |l| l.min(split.max)));
        }
        let computed = match low {
            Some(max) => derive(&self.spec.expr, &self.schema, self.spec.column, max)?,
            None if any_ended && self.splits.values().all(|s| s.ended) => FINAL,
            None => NONE_YET,
        };
        self.current = self.current.max(computed);
        Ok(self.current)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::{binary, col, lit};

    use super::*;

    fn ts_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new(
                "t",
                DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
                false,
            ),
        ]))
    }

    fn minus_4s(schema: &Schema) -> Arc<dyn PhysicalExpr> {
        let four = lit(ScalarValue::IntervalMonthDayNano(Some(
            arrow::datatypes::IntervalMonthDayNano::new(0, 0, 4_000_000_000),
        )));
        binary(col("t", schema).unwrap(), BinaryOp::Minus, four, schema).unwrap()
    }

    #[test]
    fn union_keeps_the_columns_all_inputs_carry_at_their_minimum() {
        let a = Watermarks::of([(0, 10), (2, 5)]);
        let b = Watermarks::of([(0, 7), (1, 3)]);
        assert_eq!(
            Watermarks::min_of(&[a.clone(), b]),
            Watermarks::of([(0, 7)])
        );
        assert_eq!(Watermarks::min_of(&[a.clone()]), a);
        assert!(Watermarks::of([(0, 8)]).advanced_from(&Watermarks::of([(0, 7)])));
        assert!(!Watermarks::of([(0, 7)]).advanced_from(&Watermarks::of([(0, 7)])));
    }

    #[test]
    fn an_expression_that_keeps_order_carries_the_watermark() {
        let schema = ts_schema();
        let e = minus_4s(&schema);
        assert_eq!(monotone_column(&e), Some(1));
        assert_eq!(derive(&e, &schema, 1, 10_000_000).unwrap(), 6_000_000);
        assert_eq!(derive(&e, &schema, 1, NONE_YET).unwrap(), NONE_YET);
        assert_eq!(derive(&e, &schema, 1, FINAL).unwrap(), FINAL);
        // A constant minus the column decreases as it grows.
        let flipped = binary(
            lit(5i64),
            BinaryOp::Minus,
            col("k", &schema).unwrap(),
            &schema,
        )
        .unwrap();
        assert_eq!(monotone_column(&flipped), None);
        let both = binary(
            col("k", &schema).unwrap(),
            BinaryOp::Plus,
            col("k", &schema).unwrap(),
            &schema,
        )
        .unwrap();
        assert_eq!(monotone_column(&both), None);
    }

    #[test]
    fn a_source_clock_is_the_slowest_live_split_and_never_moves_back() {
        let schema = ts_schema();
        let spec = WatermarkSpec {
            column: 1,
            expr: minus_4s(&schema),
            idle_timeout: Duration::from_secs(3600),
            max_drift: Some(DEFAULT_MAX_DRIFT),
        };
        let rows = |times: &[i64]| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(vec![0; times.len()])),
                    Arc::new(arrow::array::TimestampMicrosecondArray::from(
                        times.to_vec(),
                    )),
                ],
            )
            .unwrap()
        };
        let mut clock = SourceClock::new(spec, schema.clone(), NONE_YET);
        let now = Instant::now();
        assert_eq!(clock.advance(now).unwrap(), NONE_YET);
        clock.read("a", &rows(&[20_000_000, 30_000_000])).unwrap();
        clock.read("b", &rows(&[12_000_000])).unwrap();
        assert_eq!(clock.advance(now).unwrap(), 8_000_000, "b is slower");
        clock.read("b", &rows(&[5_000_000, 40_000_000])).unwrap();
        assert_eq!(clock.late_rows, 1, "5 s is behind 8 s");
        assert_eq!(clock.advance(now).unwrap(), 26_000_000);
        clock.ended("a");
        assert_eq!(clock.advance(now).unwrap(), 36_000_000);
        clock.ended("b");
        assert_eq!(clock.advance(now).unwrap(), FINAL);
        // A restart resumes at the sealed watermark, never behind it.
        let spec = WatermarkSpec {
            column: 1,
            expr: minus_4s(&schema),
            idle_timeout: Duration::ZERO,
            max_drift: Some(DEFAULT_MAX_DRIFT),
        };
        let mut clock = SourceClock::new(spec, schema.clone(), 26_000_000);
        clock.read("a", &rows(&[1_000_000])).unwrap();
        assert_eq!(clock.late_rows, 1);
        assert_eq!(
            clock.advance(now).unwrap(),
            26_000_000,
            "idle splits hold nothing"
        );
    }
}
