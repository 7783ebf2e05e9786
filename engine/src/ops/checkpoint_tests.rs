//! The keyed-state contract of [`Operator`], checked against every stateful
//! operator with random steps: a snapshot's entries at a random step plus
//! every later change set rebuild the same state, and the rebuilt operator
//! goes on exactly like the original.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;

use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
use datafusion::functions_aggregate::string_agg::string_agg_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::PhysicalSortExpr;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{binary, col, lit};
use weir_common::ChangeBatch;

use super::aggregate::{Aggregate, AggregateCall};
use super::constant::Constant;
use super::join::{Join, JoinKind, JoinSpec};
use super::top_n::{Numbering, TopN, TopNSpec};
use crate::operator::{Operator, StateEntry};
use crate::testing::{RandomInput, Rng, change, render, schema};

const STEPS: usize = 14;
const SEEDS: u64 = 12;

type Make = dyn Fn() -> Box<dyn Operator>;
/// The next epoch's change of every input.
type Inputs = Box<dyn FnMut(&mut Rng) -> Vec<ChangeBatch>>;

fn as_map(entries: Vec<StateEntry>) -> BTreeMap<Bytes, Bytes> {
    entries
        .into_iter()
        .map(|e| (e.key, e.value.expect("state_entries values are Some")))
        .collect()
}

/// Applies a change set to a mirror of the state, checking each key occurs once.
fn mirror_apply(mirror: &mut BTreeMap<Bytes, Bytes>, changes: &[StateEntry]) {
    let keys: BTreeSet<&Bytes> = changes.iter().map(|e| &e.key).collect();
    assert_eq!(keys.len(), changes.len(), "a key reported twice");
    for e in changes {
        match &e.value {
            Some(v) => mirror.insert(e.key.clone(), v.clone()),
            None => mirror.remove(&e.key),
        };
    }
}

/// Steps `make()` with `inputs` for [`STEPS`] epochs, takes a full snapshot
/// at a random one and change sets at random ones after it; a fresh
/// operator restored from them must equal the original and behave alike.
fn check(seed: u64, make: &Make, inputs: &mut dyn FnMut(&mut Rng) -> Vec<ChangeBatch>) {
    let mut rng = Rng::new(seed);
    let mut op = make();
    let snapshot_at = rng.below(STEPS);
    let mut snapshot = Vec::new();
    let mut deltas: Vec<Vec<StateEntry>> = Vec::new();
    let mut mirror = BTreeMap::new();
    for i in 0..STEPS {
        op.step(&inputs(&mut rng)).unwrap();
        if i == snapshot_at {
            op.take_state_changes().unwrap();
            snapshot = op.state_entries().unwrap();
            mirror = as_map(snapshot.clone());
        } else if i > snapshot_at && (i == STEPS - 1 || rng.below(2) == 0) {
            let changes = op.take_state_changes().unwrap();
            mirror_apply(&mut mirror, &changes);
            // Every change is reported: the mirror follows the state exactly.
            assert_eq!(
                mirror,
                as_map(op.state_entries().unwrap()),
                "seed {seed} step {i}"
            );
            deltas.push(changes);
        } else if i < snapshot_at && rng.below(2) == 0 {
            // Drained before the snapshot, which includes them.
            op.take_state_changes().unwrap();
        }
    }
    let mut restored = make();
    restored.apply_state_entries(&snapshot).unwrap();
    for delta in &deltas {
        restored.apply_state_entries(delta).unwrap();
    }
    assert!(restored.take_state_changes().unwrap().is_empty());
    assert_eq!(
        as_map(restored.state_entries().unwrap()),
        as_map(op.state_entries().unwrap()),
        "seed {seed}"
    );
    let mut from_bytes = make();
    from_bytes.restore(&op.snapshot().unwrap()).unwrap();
    for i in 0..STEPS / 2 {
        let step = inputs(&mut rng);
        let expected = render(&op.step(&step).unwrap());
        assert_eq!(
            render(&restored.step(&step).unwrap()),
            expected,
            "seed {seed} after {i}"
        );
        assert_eq!(render(&from_bytes.step(&step).unwrap()), expected);
    }
    assert_eq!(
        as_map(restored.state_entries().unwrap()),
        as_map(op.state_entries().unwrap())
    );
}

/// Checks every seed with a fresh random input per seed.
fn check_seeds(make: &Make, mut new_inputs: impl FnMut() -> Inputs) {
    for seed in 0..SEEDS {
        check(seed, make, &mut new_inputs());
    }
}

const INPUT: &str = "g text, x int";
const G: &[&str] = &["a", "b", "c", "null"];
const X: &[&str] = &["0", "1", "2", "3", "null"];

fn one_input() -> Inputs {
    let mut input = RandomInput::new(INPUT, &[G, X]);
    Box::new(move |rng| vec![input.next(rng)])
}

fn call(builder: AggregateExprBuilder) -> AggregateCall {
    AggregateCall {
        function: Arc::new(builder.schema(schema(INPUT)).build().unwrap()),
        filter: None,
    }
}

fn x() -> Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    vec![col("x", &schema(INPUT)).unwrap()]
}

/// An aggregate with its output schema taken from the calls' own types.
fn aggregate(grouped: bool, calls: Vec<AggregateCall>) -> Aggregate {
    let input = schema(INPUT);
    let mut fields = Vec::new();
    if grouped {
        fields.push(Field::new("g", DataType::Utf8, true));
    }
    fields.extend(calls.iter().map(|c| c.function.field().as_ref().clone()));
    let group_by = if grouped {
        vec![col("g", &input).unwrap()]
    } else {
        vec![]
    };
    Aggregate::new(input, group_by, calls, Arc::new(Schema::new(fields))).unwrap()
}

fn min_max_sum_count() -> Vec<AggregateCall> {
    vec![
        call(AggregateExprBuilder::new(min_udaf(), x()).alias("mn")),
        call(AggregateExprBuilder::new(max_udaf(), x()).alias("mx")),
        call(AggregateExprBuilder::new(sum_udaf(), x()).alias("s")),
        call(
            AggregateExprBuilder::new(count_udaf(), x())
                .alias("c")
                .distinct(),
        ),
    ]
}

/// `string_agg(g, ',' ORDER BY x DESC)`.
fn ordered() -> AggregateCall {
    let input = schema(INPUT);
    let args = vec![col("g", &input).unwrap(), lit(",")];
    let order = PhysicalSortExpr {
        expr: col("x", &input).unwrap(),
        options: SortOptions {
            descending: true,
            nulls_first: false,
        },
    };
    call(
        AggregateExprBuilder::new(string_agg_udaf(), args)
            .order_by(vec![order])
            .alias("sa"),
    )
}

#[test]
fn grouped_aggregates_restore_from_snapshot_and_changes() {
    check_seeds(
        &|| Box::new(aggregate(true, min_max_sum_count())),
        one_input,
    );
}

#[test]
fn global_and_ordered_aggregates_restore_from_snapshot_and_changes() {
    check_seeds(
        &|| {
            let mut calls = min_max_sum_count();
            calls.push(ordered());
            Box::new(aggregate(false, calls))
        },
        one_input,
    );
    check_seeds(&|| Box::new(aggregate(true, vec![ordered()])), one_input);
}

const L: &str = "k int, a text";
const R: &str = "rk int, b text";
const K: &[&str] = &["1", "2", "3", "null"];
const AB: &[&str] = &["x", "y"];

fn join(kind: JoinKind) -> Join {
    let (left, right) = (schema(L), schema(R));
    let joined = schema("k int, a text, rk int, b text");
    let output = match kind {
        JoinKind::Semi | JoinKind::Anti | JoinKind::NullAwareAnti => left.clone(),
        _ => joined.clone(),
    };
    // `a <> b` as the residual, except for NOT IN, which has none.
    let residual = (kind != JoinKind::NullAwareAnti).then(|| {
        let (a, b) = (col("a", &joined).unwrap(), col("b", &joined).unwrap());
        binary(a, BinaryOp::NotEq, b, &joined).unwrap()
    });
    Join::new(JoinSpec {
        kind,
        on: vec![(col("k", &left).unwrap(), col("rk", &right).unwrap())],
        left_schema: left,
        right_schema: right,
        residual,
        output_schema: output,
    })
    .unwrap()
}

fn two_inputs() -> Inputs {
    let mut left = RandomInput::new(L, &[K, AB]);
    let mut right = RandomInput::new(R, &[K, AB]);
    Box::new(move |rng| vec![left.next(rng), right.next(rng)])
}

#[test]
fn joins_of_every_kind_restore_from_snapshot_and_changes() {
    for kind in JoinKind::KEYED.into_iter().chain([JoinKind::NullAwareAnti]) {
        check_seeds(&move || Box::new(join(kind)), two_inputs);
    }
}

fn top(numbering: Numbering, partitioned: bool) -> TopN {
    let input = schema(INPUT);
    let output = match numbering {
        Numbering::None => input.clone(),
        _ => schema("g text, x int, n int"),
    };
    TopN::new(TopNSpec {
        partition_by: if partitioned {
            vec![col("g", &input).unwrap()]
        } else {
            vec![]
        },
        order_by: vec![(col("x", &input).unwrap(), SortOptions::default())],
        input_schema: input,
        offset: usize::from(!partitioned),
        limit: 2,
        numbering,
        output_schema: output,
    })
    .unwrap()
}

/// Random inserts only (consolidated), as from an append-only source.
fn inserts_only() -> Inputs {
    Box::new(|rng| {
        let mut rows: BTreeMap<String, i64> = BTreeMap::new();
        for _ in 0..rng.below(5) {
            let row = format!("{} {}", G[rng.below(G.len())], X[rng.below(X.len())]);
            *rows.entry(row).or_default() += 1;
        }
        let text: Vec<String> = rows.iter().map(|(r, w)| format!("{r} {w:+}")).collect();
        vec![change(INPUT, &text.join("; "))]
    })
}

#[test]
fn top_n_restores_from_snapshot_and_changes() {
    for numbering in [Numbering::None, Numbering::RowNumber, Numbering::Rank] {
        for partitioned in [false, true] {
            check_seeds(&move || Box::new(top(numbering, partitioned)), one_input);
            // Keeping only the window over inserts.
            check_seeds(
                &move || Box::new(top(numbering, partitioned).over_append_only()),
                inserts_only,
            );
        }
    }
}

#[test]
fn a_constant_remembers_it_emitted() {
    let make = || Constant::new(change("v int", "1 +1")).unwrap();
    let mut constant = make();
    constant.step(&[]).unwrap();
    let changes = constant.take_state_changes().unwrap();
    assert_eq!(changes.len(), 1);
    assert!(constant.take_state_changes().unwrap().is_empty());
    let mut restored = make();
    restored.apply_state_entries(&changes).unwrap();
    assert!(restored.step(&[]).unwrap().is_empty());
}

#[test]
fn a_failed_step_is_an_error_and_top_n_records_no_change() {
    // A failed step poisons its graph, which is rebuilt: the aggregate and
    // the join need not undo it, only report it.
    let mut agg: Box<dyn Operator> = Box::new(aggregate(true, min_max_sum_count()));
    agg.step(&[change(INPUT, "a 1 +1")]).unwrap();
    assert!(agg.step(&[change(INPUT, "b 2 +1; a 9 -1")]).is_err());

    let mut j: Box<dyn Operator> = Box::new(join(JoinKind::Inner));
    j.step(&[change(L, "1 x +1"), change(R, "")]).unwrap();
    j.take_state_changes().unwrap();
    assert!(j.step(&[change(L, "2 y +1"), change(R, "1 x -1")]).is_err());

    let mut t: Box<dyn Operator> = Box::new(top(Numbering::RowNumber, true));
    t.take_state_changes().unwrap();
    assert!(t.step(&[change(INPUT, "a 1 +1; b 2 -1")]).is_err());
    assert!(t.take_state_changes().unwrap().is_empty());
}

#[test]
fn state_entries_of_stateless_operators_are_empty_and_refused() {
    let mut union: Box<dyn Operator> = Box::new(super::union::Union::new(1, schema(INPUT)));
    union.step(&[change(INPUT, "a 1 +1")]).unwrap();
    assert!(union.take_state_changes().unwrap().is_empty());
    assert!(union.state_entries().unwrap().is_empty());
    let entry = StateEntry::set(vec![1], vec![2]);
    assert!(union.apply_state_entries(&[entry]).is_err());
}
