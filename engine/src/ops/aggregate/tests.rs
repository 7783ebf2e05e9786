//! The aggregate's unit tests, and a differential test of every
//! incremental strategy against recomputing from the rows.

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
fn retracting_what_was_never_inserted_is_an_error() {
    let mut agg = by_group();
    agg.step(&[change(INPUT, "a 1 +1")]).unwrap();
    assert!(agg.step(&[change(INPUT, "a 2 +1; a 9 -1")]).is_err());
    // A value never inserted into a group that exists.
    let mut agg = by_group();
    agg.step(&[change(INPUT, "a 1 +1; a 2 +1")]).unwrap();
    assert!(agg.step(&[change(INPUT, "a 7 -1")]).is_err());
}

pub(crate) mod differential {
    //! Random inserts and retractions (NULLs, groups that empty out and come
    //! back, retraction of the current min and max) through every
    //! incremental strategy, against the same calls recomputed from the
    //! rows by DataFusion's accumulators; and the state a replica rebuilds
    //! from the changed entries, against the full state.

    use std::collections::BTreeMap;

    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::bool_and_or::{bool_and_udaf, bool_or_udaf};
    use datafusion::functions_aggregate::min_max::min_udaf;
    use datafusion::logical_expr::Operator as BinaryOp;
    use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr};

    use super::*;
    use crate::testing::{RandomInput, Rng, accumulate};

    pub(crate) const SPEC: &str = "g text, x int, f float";

    fn expr(name: &str) -> Arc<dyn PhysicalExpr> {
        col(name, &schema(SPEC)).unwrap()
    }

    fn x_above(n: i64) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(expr("x"), BinaryOp::Gt, lit(n)))
    }

    fn calls() -> Vec<AggregateCall> {
        let input = schema(SPEC);
        let x_float: Arc<dyn PhysicalExpr> = Arc::new(CastExpr::new(
            expr("x"),
            arrow::datatypes::DataType::Float64,
            None,
        ));
        type Udaf = Arc<datafusion::logical_expr::AggregateUDF>;
        let spec: Vec<(
            Udaf,
            Arc<dyn PhysicalExpr>,
            bool,
            Option<Arc<dyn PhysicalExpr>>,
        )> = vec![
            (count_udaf(), lit(1i64), false, None),
            (count_udaf(), expr("x"), false, None),
            (sum_udaf(), expr("x"), false, None),
            (avg_udaf(), x_float.clone(), false, None),
            (min_udaf(), expr("x"), false, None),
            (max_udaf(), expr("x"), false, None),
            (count_udaf(), expr("x"), true, None),
            (sum_udaf(), expr("x"), true, None),
            (avg_udaf(), x_float, true, None),
            (sum_udaf(), expr("f"), false, None),
            (avg_udaf(), expr("f"), false, None),
            (min_udaf(), expr("f"), false, None),
            (max_udaf(), expr("f"), false, None),
            (count_udaf(), expr("f"), true, None),
            (min_udaf(), expr("g"), false, None),
            (max_udaf(), expr("g"), false, None),
            (bool_and_udaf(), x_above(2), false, None),
            (bool_or_udaf(), x_above(2), false, None),
            (count_udaf(), lit(1i64), false, Some(x_above(2))),
            (max_udaf(), expr("x"), false, Some(x_above(2))),
            (count_udaf(), expr("g"), true, Some(x_above(2))),
            // With count(DISTINCT x) and sum(DISTINCT x), over an
            // append-only input: one set for the three.
            (count_udaf(), expr("x"), true, Some(x_above(2))),
        ];
        spec.into_iter()
            .enumerate()
            .map(|(i, (udaf, arg, distinct, filter))| {
                let mut builder = AggregateExprBuilder::new(udaf, vec![arg])
                    .schema(input.clone())
                    .alias(format!("c{i}"));
                if distinct {
                    builder = builder.distinct();
                }
                AggregateCall {
                    function: Arc::new(builder.build().unwrap()),
                    filter,
                }
            })
            .collect()
    }

    pub(crate) fn aggregate(grouped: bool) -> Aggregate {
        let input = schema(SPEC);
        let calls = calls();
        let mut fields = Vec::new();
        if grouped {
            fields.push(arrow::datatypes::Field::new(
                "g",
                arrow::datatypes::DataType::Utf8,
                true,
            ));
        }
        fields.extend(calls.iter().map(|c| c.function.field().as_ref().clone()));
        let group_by = if grouped { vec![expr("g")] } else { vec![] };
        let output = Arc::new(arrow::datatypes::Schema::new(fields));
        Aggregate::new(input, group_by, calls, output).unwrap()
    }

    /// The same calls, every one recomputed from its group's rows.
    fn oracle(grouped: bool) -> Aggregate {
        let mut agg = aggregate(grouped);
        let input = agg.input.schema().clone();
        agg.calls = std::mem::take(&mut agg.calls)
            .into_iter()
            .map(|c| {
                let mut call = Call::new(c.call, &input).unwrap();
                call.strategy = Strategy::Recompute;
                call.values = None;
                call
            })
            .collect();
        agg.recomputes = true;
        agg
    }

    fn sorted(mut entries: Vec<StateEntry>) -> Vec<StateEntry> {
        entries.sort();
        entries
    }

    fn run(seed: u64, grouped: bool, append_only: bool) {
        let mut rng = Rng::new(seed);
        let input = RandomInput::new(
            SPEC,
            &[
                &["a", "b", "c"],
                &["null", "0", "1", "2", "3", "5", "-4"],
                &["null", "-1.5", "0", "0.25", "2.5", "1e10"],
            ],
        );
        let (mut input, mut incremental, mut replica) = if append_only {
            let strategies = aggregate(grouped).over_append_only();
            assert!(strategies.strategies().contains(&"distinct set"));
            let shared = strategies.strategies();
            let shared = shared.iter().filter(|s| **s == "shared distinct set");
            assert_eq!(shared.count(), 3);
            (
                input.inserts_only(),
                strategies,
                aggregate(grouped).over_append_only(),
            )
        } else {
            (input, aggregate(grouped), aggregate(grouped))
        };
        let mut recomputed = oracle(grouped);
        let mut result = BTreeMap::new();
        let mut expected = BTreeMap::new();
        let mut mirror: BTreeMap<bytes::Bytes, bytes::Bytes> = BTreeMap::new();
        assert!(incremental.strategies().iter().all(|s| *s != "recompute"));
        for step in 0..60 {
            let change = input.next(&mut rng);
            let out = incremental.step(std::slice::from_ref(&change)).unwrap();
            accumulate(&mut result, &out);
            accumulate(
                &mut expected,
                &recomputed.step(std::slice::from_ref(&change)).unwrap(),
            );
            assert_eq!(
                result,
                expected,
                "seed {seed} step {step} after {:?}",
                render(&change)
            );
            let changes = incremental.take_state_changes().unwrap();
            // The changes applied by key, as a checkpoint's chain is
            // merged: a key left stale (an old extreme never removed)
            // stays here, whatever an operator restoring them makes of it.
            for e in &changes {
                match &e.value {
                    Some(v) => mirror.insert(e.key.clone(), v.clone()),
                    None => mirror.remove(&e.key),
                };
            }
            let now: BTreeMap<_, _> = (incremental.state_entries().unwrap().into_iter())
                .map(|e| (e.key, e.value))
                .collect();
            assert!(
                mirror
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .eq(now),
                "seed {seed} step {step}: the changes applied by key equal the state"
            );
            replica.apply_state_entries(&changes).unwrap();
            assert_eq!(
                sorted(replica.state_entries().unwrap()),
                sorted(incremental.state_entries().unwrap()),
                "seed {seed} step {step}: changed entries rebuild the state"
            );
        }
        // The replica continues exactly as the original.
        let change = input.next(&mut rng);
        assert_eq!(
            render(&replica.step(std::slice::from_ref(&change)).unwrap()),
            render(&incremental.step(&[change]).unwrap())
        );
    }

    #[test]
    fn incremental_strategies_equal_recomputing() {
        for seed in 0..40 {
            run(seed, true, false);
            run(seed, false, false);
        }
    }

    /// Over an input that only inserts: min/max keep the extreme value and
    /// DISTINCT a set of values.
    #[test]
    fn append_only_strategies_equal_recomputing() {
        for seed in 0..40 {
            run(seed, true, true);
            run(seed, false, true);
        }
    }
}
