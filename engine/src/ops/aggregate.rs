//! [`Aggregate`]: GROUP BY with any DataFusion aggregate function, correct
//! under retractions.
//!
//! Each group keeps the multiset of its input rows. When an epoch changes a
//! group, its aggregates are recomputed from that multiset with DataFusion's
//! own accumulators (so a projection computes exactly what the same query
//! computes ad hoc, DISTINCT and FILTER included, and min/max survive the
//! retraction of the current extreme), and the output row is replaced:
//! `-old/+new`. An epoch therefore costs O(rows of the changed groups).
//!
//! Without GROUP BY there is one group with the empty key, and its row exists
//! even over empty input (`count(*)` is 0), as in SQL.
//!
//! State entries (distribution key = the group key): one per input row of a
//! group (`ROW`, value its count), one per group for the output row last
//! emitted (`OUTPUT`), and the `started` flag (`STARTED`, empty group). An
//! epoch so changes the entries of its input rows and of its groups' outputs.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::{SortColumn, cast, filter, lexsort_to_indices, take_record_batch};
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::multiset::Multiset;
use crate::operator::{
    Operator, StateEntry, changed_entries, count_value, expect_inputs, parse_state_key, read_count,
    state_key, unreadable,
};
use crate::rows::{RowBytes, RowCodec, batch_of, empty_change, where_true};

const NAME: &str = "aggregate";

/// State key tags.
const STARTED: u8 = 0;
const ROW: u8 = 1;
const OUTPUT: u8 = 2;

/// One aggregate call, with its `FILTER (WHERE ...)` if any.
pub struct AggregateCall {
    pub function: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
}

#[derive(Clone, Default)]
struct Group {
    rows: Multiset,
    /// The output row last emitted for this group.
    output: Option<RowBytes>,
}

pub struct Aggregate {
    group_by: Vec<Arc<dyn PhysicalExpr>>,
    calls: Vec<AggregateCall>,
    input: RowCodec,
    /// Codec of the group-by columns (the first columns of the output).
    key: Option<RowCodec>,
    output: RowCodec,
    groups: imbl::OrdMap<RowBytes, Group>,
    /// Whether the global group's first row has been emitted.
    started: bool,
    /// State keys changed since the last `take_state_changes`.
    changed: BTreeSet<Vec<u8>>,
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
        Ok(Self {
            group_by,
            calls,
            input: RowCodec::new(input_schema)?,
            key,
            output: RowCodec::new(output_schema)?,
            groups: imbl::OrdMap::new(),
            started: false,
            changed: BTreeSet::new(),
        })
    }

    fn is_global(&self) -> bool {
        self.key.is_none()
    }

    /// The encoded group key of every input row.
    fn keys_of(&self, rows: &RecordBatch) -> Result<Vec<RowBytes>, EngineError> {
        match &self.key {
            None => Ok(vec![RowBytes::from(&[][..]); rows.num_rows()]),
            Some(codec) => {
                let columns = self
                    .group_by
                    .iter()
                    .zip(codec.schema().fields())
                    .map(|(e, field)| {
                        let array = e.evaluate(rows)?.into_array(rows.num_rows())?;
                        Ok(cast(&array, field.data_type())?)
                    })
                    .collect::<Result<Vec<ArrayRef>, EngineError>>()?;
                codec.encode_keys(&columns)
            }
        }
    }

    /// The aggregate values of one group's rows, one per call.
    fn evaluate(&self, rows: &Multiset) -> Result<Vec<ScalarValue>, EngineError> {
        let batch = self.input.decode(rows.expanded())?;
        self.calls
            .iter()
            .map(|call| {
                // An ordered aggregate (`string_agg(x, ',' ORDER BY x)`) sees
                // its rows sorted, and its ordering values after its
                // arguments, as DataFusion's order-sensitive accumulators expect.
                let order_bys = call.function.order_bys();
                let sorted;
                let batch = if order_bys.is_empty() {
                    &batch
                } else {
                    let keys = order_bys
                        .iter()
                        .map(|s| {
                            Ok(SortColumn {
                                values: s.expr.evaluate(&batch)?.into_array(batch.num_rows())?,
                                options: Some(s.options),
                            })
                        })
                        .collect::<Result<Vec<_>, EngineError>>()?;
                    let indices = lexsort_to_indices(&keys, None)?;
                    sorted = take_record_batch(&batch, &indices)?;
                    &sorted
                };
                let mut args = call
                    .function
                    .expressions()
                    .iter()
                    .chain(order_bys.iter().map(|s| &s.expr))
                    .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
                    .collect::<Result<Vec<_>, _>>()?;
                if let Some(predicate) = &call.filter {
                    let mask = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
                    let mask = where_true(&mask)?;
                    args = args
                        .iter()
                        .map(|a| filter(a.as_ref(), &mask))
                        .collect::<Result<Vec<_>, _>>()?;
                }
                let mut accumulator = call.function.create_accumulator()?;
                accumulator.update_batch(&args)?;
                Ok(accumulator.evaluate()?)
            })
            .collect()
    }

    /// Output rows for `keys` (groups that have rows), encoded.
    fn output_rows(
        &self,
        groups: &imbl::OrdMap<RowBytes, Group>,
        keys: &[&RowBytes],
    ) -> Result<Vec<RowBytes>, EngineError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut columns: Vec<ArrayRef> = match &self.key {
            None => Vec::new(),
            Some(codec) => codec.decode(keys.iter().copied())?.columns().to_vec(),
        };
        let empty = Multiset::default();
        let mut values: Vec<Vec<ScalarValue>> =
            vec![Vec::with_capacity(keys.len()); self.calls.len()];
        for key in keys {
            let rows = groups.get(*key).map(|g| &g.rows).unwrap_or(&empty);
            for (column, value) in values.iter_mut().zip(self.evaluate(rows)?) {
                column.push(value);
            }
        }
        let fields = self.output.schema().fields().clone();
        let first_value_column = columns.len();
        for (i, column) in values.into_iter().enumerate() {
            let field = &fields[first_value_column + i];
            let array = ScalarValue::iter_to_array(column)?;
            let array = if array.data_type() == field.data_type() {
                array
            } else {
                cast(&array, field.data_type())?
            };
            columns.push(array);
        }
        let batch = batch_of(self.output.schema(), columns, keys.len())?;
        self.output.encode_rows(&batch)
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
                let order: Vec<String> = c
                    .function
                    .order_bys()
                    .iter()
                    .map(|o| o.to_string())
                    .collect();
                format!(
                    "{}(distinct={} ignore_nulls={} reversed={}; {}; order {}; filter {})",
                    c.function.fun().name(),
                    c.function.is_distinct(),
                    c.function.ignore_nulls(),
                    c.function.is_reversed(),
                    exprs_text(&c.function.expressions()),
                    order.join(", "),
                    exprs_text(&c.filter),
                )
            })
            .collect();
        format!(
            "{NAME}(group {}; calls {}; in {}; out {})",
            exprs_text(&self.group_by),
            calls.join(" | "),
            schema_text(self.input.schema()),
            schema_text(self.output.schema())
        )
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 1)?;
        let input = &inputs[0];
        let mut groups = self.groups.clone();
        let mut touched: BTreeSet<RowBytes> = BTreeSet::new();
        let mut changed: Vec<Vec<u8>> = Vec::new();
        if !self.started {
            changed.push(state_key(STARTED, &[], &[]));
            if self.is_global() {
                touched.insert(RowBytes::from(&[][..]));
            }
        }
        if !input.is_empty() {
            let keys = self.keys_of(input.rows())?;
            let rows = self.input.encode_rows(input.rows())?;
            for ((key, row), &weight) in keys.iter().zip(&rows).zip(input.weights().values()) {
                groups
                    .entry(key.clone())
                    .or_default()
                    .rows
                    .add(row, weight, NAME)?;
                changed.push(state_key(ROW, key, row));
                touched.insert(key.clone());
            }
        }
        if touched.is_empty() {
            self.started = true;
            self.changed.extend(changed);
            return Ok(empty_change(self.output.schema()));
        }
        // A group with no rows left has no output row, except the global one.
        let live: Vec<&RowBytes> = touched
            .iter()
            .filter(|k| self.is_global() || groups.get(*k).is_some_and(|g| !g.rows.is_empty()))
            .collect();
        let new_rows = self.output_rows(&groups, &live)?;
        let mut change: Vec<(RowBytes, i64)> = Vec::new();
        let mut next_output = live.iter().zip(new_rows).peekable();
        for key in &touched {
            let old = groups.get(key).and_then(|g| g.output.clone());
            let new = match next_output.peek() {
                Some((k, _)) if **k == key => next_output.next().map(|(_, row)| row),
                _ => None,
            };
            if old != new {
                changed.push(state_key(OUTPUT, key, &[]));
                if let Some(old) = old {
                    change.push((old, -1));
                }
                if let Some(new) = &new {
                    change.push((new.clone(), 1));
                }
            }
            if new.is_none() && groups.get(key).is_some_and(|g| g.rows.is_empty()) {
                groups.remove(key);
            } else if let Some(group) = groups.get_mut(key) {
                group.output = new;
            } else {
                groups.insert(
                    key.clone(),
                    Group {
                        rows: Multiset::default(),
                        output: new,
                    },
                );
            }
        }
        let out = self.output.consolidated_change(&change)?;
        self.groups = groups;
        self.started = true;
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
        if self.started {
            entries.push(StateEntry::set(state_key(STARTED, &[], &[]), vec![1]));
        }
        for (key, group) in &self.groups {
            for (row, count) in group.rows.iter() {
                entries.push(StateEntry::set(
                    state_key(ROW, key, row),
                    count_value(count),
                ));
            }
            if let Some(output) = &group.output {
                entries.push(StateEntry::set(
                    state_key(OUTPUT, key, &[]),
                    output.to_vec(),
                ));
            }
        }
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        let mut groups = self.groups.clone();
        let mut started = self.started;
        let mut touched: BTreeSet<&[u8]> = BTreeSet::new();
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            let value = e.value.as_deref();
            match key.tag {
                STARTED => started = value.is_some(),
                ROW => {
                    let count = read_count(NAME, value)?;
                    let group = groups.entry(key.distribution.into()).or_default();
                    group.rows.set(key.rest, count);
                }
                OUTPUT => {
                    let group = groups.entry(key.distribution.into()).or_default();
                    group.output = value.map(RowBytes::from);
                }
                _ => return Err(unreadable(NAME, "an unknown tag")),
            }
            touched.insert(key.distribution);
        }
        // A group exists while it has rows or an output, as after a step.
        for key in touched {
            if groups
                .get(key)
                .is_some_and(|g| g.rows.is_empty() && g.output.is_none())
            {
                groups.remove(key);
            }
        }
        self.groups = groups;
        self.started = started;
        self.changed.clear();
        Ok(())
    }
}

impl Aggregate {
    /// The current value of a state key (`None` when it has none).
    fn value_of(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let key = parse_state_key(NAME, key)?;
        let group = self.groups.get(key.distribution);
        Ok(match key.tag {
            STARTED => self.started.then(|| vec![1]),
            ROW => group
                .map(|g| g.rows.count_of(key.rest))
                .filter(|&c| c > 0)
                .map(count_value),
            OUTPUT => group.and_then(|g| g.output.as_ref()).map(|r| r.to_vec()),
            _ => return Err(unreadable(NAME, "an unknown tag")),
        })
    }
}

#[cfg(test)]
mod tests {
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::max_udaf;
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::{col, lit};

    use super::*;
    use crate::testing::{change, render, schema};

    const INPUT: &str = "g text, x int";

    fn call(
        udaf: Arc<datafusion::logical_expr::AggregateUDF>,
        name: &str,
        distinct: bool,
    ) -> AggregateCall {
        let input = schema(INPUT);
        let mut builder = AggregateExprBuilder::new(udaf, vec![col("x", &input).unwrap()])
            .schema(input)
            .alias(name);
        if distinct {
            builder = builder.distinct();
        }
        AggregateCall {
            function: Arc::new(builder.build().unwrap()),
            filter: None,
        }
    }

    /// `SELECT g, sum(x), count(DISTINCT x), max(x) FROM t GROUP BY g`
    fn by_group() -> Aggregate {
        let input = schema(INPUT);
        Aggregate::new(
            input.clone(),
            vec![col("g", &input).unwrap()],
            vec![
                call(sum_udaf(), "s", false),
                call(count_udaf(), "c", true),
                call(max_udaf(), "m", false),
            ],
            schema("g text, s int, c int, m int"),
        )
        .unwrap()
    }

    #[test]
    fn groups_follow_inserts_and_retractions() {
        let mut agg = by_group();
        let first = agg
            .step(&[change(INPUT, "a 1 +1; a 5 +1; a 5 +1; b 2 +1")])
            .unwrap();
        assert_eq!(render(&first), vec!["a 11 2 5 +1", "b 2 1 2 +1"]);
        // Retracting one 5 keeps the max; retracting b's only row removes b.
        let second = agg.step(&[change(INPUT, "a 5 -1; b 2 -1")]).unwrap();
        assert_eq!(
            render(&second),
            vec!["a 11 2 5 -1", "a 6 2 5 +1", "b 2 1 2 -1"]
        );
        // Retracting the current max finds the next one.
        let third = agg.step(&[change(INPUT, "a 5 -1")]).unwrap();
        assert_eq!(render(&third), vec!["a 1 1 1 +1", "a 6 2 5 -1"]);
    }

    #[test]
    fn a_change_undone_in_the_same_epoch_emits_nothing() {
        let mut agg = by_group();
        agg.step(&[change(INPUT, "a 1 +1")]).unwrap();
        // The input is consolidated by contract, so an undone change is empty.
        assert!(agg.step(&[change(INPUT, "")]).unwrap().is_empty());
        // A change that leaves the aggregates as they were emits nothing.
        let same = agg.step(&[change(INPUT, "a 1 -1; a 1 +1")]).unwrap();
        assert!(same.is_empty(), "{:?}", render(&same));
    }

    #[test]
    fn a_global_aggregate_has_a_row_over_empty_input() {
        let input = schema(INPUT);
        let mut agg = Aggregate::new(
            input,
            vec![],
            vec![call(count_udaf(), "c", false), call(sum_udaf(), "s", false)],
            schema("c int, s int"),
        )
        .unwrap();
        assert_eq!(
            render(&agg.step(&[change(INPUT, "")]).unwrap()),
            vec!["0 null +1"]
        );
        assert_eq!(
            render(&agg.step(&[change(INPUT, "a 4 +1")]).unwrap()),
            vec!["0 null -1", "1 4 +1"]
        );
        assert_eq!(
            render(&agg.step(&[change(INPUT, "a 4 -1")]).unwrap()),
            vec!["0 null +1", "1 4 -1"]
        );
    }

    #[test]
    fn count_star_counts_rows_without_columns() {
        // SELECT count(*) FROM t: the input needs no column.
        let input = schema("");
        let count = AggregateExprBuilder::new(count_udaf(), vec![lit(1i64)])
            .schema(input.clone())
            .alias("c")
            .build()
            .unwrap();
        let call = AggregateCall {
            function: Arc::new(count),
            filter: None,
        };
        let mut agg = Aggregate::new(input, vec![], vec![call], schema("c int")).unwrap();
        let first = agg.step(&[change("", "+1; +1")]).unwrap();
        assert_eq!(render(&first), vec!["2 +1"]);
        let second = agg.step(&[change("", "-1")]).unwrap();
        assert_eq!(render(&second), vec!["1 +1", "2 -1"]);
    }

    #[test]
    fn float_groups_compare_by_value() {
        // SELECT g, count(x) FROM t GROUP BY g, with g a float
        const FLOATS: &str = "g float, x int";
        let input = schema(FLOATS);
        let count = AggregateExprBuilder::new(count_udaf(), vec![col("x", &input).unwrap()])
            .schema(input.clone())
            .alias("c")
            .build()
            .unwrap();
        let mut agg = Aggregate::new(
            input.clone(),
            vec![col("g", &input).unwrap()],
            vec![AggregateCall {
                function: Arc::new(count),
                filter: None,
            }],
            schema("g float, c int"),
        )
        .unwrap();
        // -0 is in 0's group and -NaN in NaN's, as in SQL.
        let out = agg
            .step(&[change(FLOATS, "0 1 +1; -0 2 +1; NaN 3 +1; -NaN 4 +1")])
            .unwrap();
        assert_eq!(render(&out), vec!["0.0 2 +1", "NaN 2 +1"]);
    }

    #[test]
    fn snapshot_and_restore_continue_where_they_left_off() {
        let mut agg = by_group();
        agg.step(&[change(INPUT, "a 1 +1; a 3 +1; b 2 +1")])
            .unwrap();
        let mut restored = by_group();
        restored.restore(&agg.snapshot().unwrap()).unwrap();
        let next = change(INPUT, "a 3 -1; c 7 +1");
        assert_eq!(
            render(&restored.step(std::slice::from_ref(&next)).unwrap()),
            render(&agg.step(&[next]).unwrap())
        );
        assert!(restored.restore(&[1, 2, 3]).is_err());
    }

    #[test]
    fn retracting_what_was_never_inserted_is_an_error_that_changes_nothing() {
        let mut agg = by_group();
        agg.step(&[change(INPUT, "a 1 +1")]).unwrap();
        let before = agg.snapshot().unwrap();
        assert!(agg.step(&[change(INPUT, "a 2 +1; a 9 -1")]).is_err());
        assert_eq!(agg.snapshot().unwrap(), before);
    }
}
