//! Differential tests of [`Parallel`]: random inserts, updates and deletes
//! through each keyed operator wrapped with 2 and 3 workers must give, step
//! by step, the same consolidated output and the same state entries as one
//! instance; state taken with one worker count and applied to another goes
//! on exactly as the original.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, ObjectId};

use super::*;
use crate::checkpoint::vnode_of;
use crate::graph::{Graph, Input};
use crate::ops::aggregate::tests::differential as aggregate;
use crate::ops::join::tests::differential as join;
use crate::ops::join::tests::{L, R};
use crate::ops::join::{Join, JoinKind};
use crate::ops::top_n::tests::differential as top_n;
use crate::rows::RowCodec;
use crate::testing::{RandomInput, Rng, change, render, schema};

/// Where the wrapped operators are placed, as a coordinator would.
const OBJECT: ObjectId = ObjectId(7);
const NODE: u32 = 2;

fn parallel(make: &dyn Fn() -> Box<dyn Keyed>, workers: usize) -> Parallel {
    let mut p = Parallel::new((0..workers).map(|_| make()).collect())
        .unwrap()
        // Every step on threads, however small.
        .with_parallel_rows(0);
    p.place(OBJECT, NODE).unwrap();
    p
}

fn fresh(make: &dyn Fn() -> Box<dyn Keyed>, workers: usize) -> Box<dyn Operator> {
    if workers == 1 {
        make()
    } else {
        Box::new(parallel(make, workers))
    }
}

/// Whether `out` is settled ([`crate::Operator`]): every row with a
/// negative weight occurs once.
fn settled(out: &ChangeBatch) -> bool {
    let lines = render(out);
    let row = |line: &str| {
        line.rsplit_once(' ')
            .map_or(String::new(), |(r, _)| r.to_string())
    };
    lines
        .iter()
        .filter(|l| l.ends_with(|c: char| c.is_ascii_digit()) && l.contains(" -"))
        .all(|l| lines.iter().filter(|m| row(m) == row(l)).count() == 1)
}

/// Steps one instance of `make` and wrappers of 2 and 3 workers through
/// `steps` random changes from `next`; each step's output and changed
/// state entries must be equal. At a random step, the state of each is
/// applied to fresh operators of every other worker count, which must go
/// on exactly as the one instance does.
/// A change as the bag it stands for: settled changes may split inserts
/// differently and still be equal.
fn bag(change: &ChangeBatch) -> Vec<String> {
    render(&crate::rows::consolidate(change).unwrap())
}

fn differential(
    context: &str,
    seed: u64,
    make: &dyn Fn() -> Box<dyn Keyed>,
    next: &mut dyn FnMut(&mut Rng, usize) -> Vec<ChangeBatch>,
    steps: usize,
) {
    let mut rng = Rng::new(seed);
    let counts = [1, 2, 3];
    let mut runs: Vec<Box<dyn Operator>> = counts.iter().map(|&w| fresh(make, w)).collect();
    // (worker count taken from, restored into, operator), made at `restore_at`.
    let mut restored: Vec<(usize, usize, Box<dyn Operator>)> = Vec::new();
    let restore_at = rng.below(steps);
    for step in 0..steps {
        let inputs = next(&mut rng, step);
        let expected = runs[0].step(&inputs).unwrap();
        assert!(settled(&expected), "{context} seed {seed} step {step}");
        let sorted = |mut entries: Vec<StateEntry>| {
            entries.sort();
            entries
        };
        let expected_changes = sorted(runs[0].take_state_changes().unwrap());
        for (run, &w) in runs.iter_mut().zip(&counts).skip(1) {
            let out = run.step(&inputs).unwrap();
            let at = format!("{context} seed {seed} step {step} with {w} workers");
            assert!(settled(&out), "{at}: settled");
            assert_eq!(bag(&out), bag(&expected), "{at}: output");
            assert_eq!(
                sorted(run.take_state_changes().unwrap()),
                expected_changes,
                "{at}: state changes"
            );
        }
        for (from, to, target) in &mut restored {
            let out = target.step(&inputs).unwrap();
            assert_eq!(
                bag(&out),
                bag(&expected),
                "{context} seed {seed} step {step}: state of {from} workers restored into {to}"
            );
            target.take_state_changes().unwrap();
        }
        if step == restore_at {
            let entries = runs[0].state_entries().unwrap();
            for (from, run) in runs.iter().enumerate() {
                assert_eq!(
                    run.state_entries().unwrap(),
                    entries,
                    "{context} seed {seed}"
                );
                for &w in &counts {
                    if w == counts[from] {
                        continue;
                    }
                    let mut target = fresh(make, w);
                    target
                        .apply_state_entries(&run.state_entries().unwrap())
                        .unwrap();
                    assert_eq!(target.state_entries().unwrap(), entries);
                    restored.push((counts[from], w, target));
                }
            }
        }
    }
}

/// `next` for one input from `RandomInput`.
fn one_input(mut input: RandomInput) -> impl FnMut(&mut Rng, usize) -> Vec<ChangeBatch> {
    move |rng, _| vec![input.next(rng)]
}

#[test]
fn aggregates_equal_one_instance() {
    // Groups include NULL; few rows per group, so groups empty out and
    // come back and their min and max are retracted.
    let make = || Box::new(aggregate::aggregate(true)) as Box<dyn Keyed>;
    for seed in 0..12 {
        let input = RandomInput::new(
            aggregate::SPEC,
            &[
                &["a", "b", "c", "d", "e", "null"],
                &["null", "0", "1", "2", "3", "5", "-4"],
                &["null", "-1.5", "0", "0.25", "2.5"],
            ],
        );
        differential("aggregate", seed, &make, &mut one_input(input), 40);
    }
}

#[test]
fn distinct_equals_one_instance() {
    let make = || {
        let input = schema("k text, x int");
        let keys = vec![
            datafusion::physical_expr::expressions::col("k", &input).unwrap(),
            datafusion::physical_expr::expressions::col("x", &input).unwrap(),
        ];
        let agg = crate::ops::aggregate::Aggregate::new(input.clone(), keys, vec![], input);
        Box::new(agg.unwrap()) as Box<dyn Keyed>
    };
    for seed in 0..10 {
        let input = RandomInput::new("k text, x int", &[&["a", "b", "null"], &["1", "2", "null"]]);
        differential("distinct", seed, &make, &mut one_input(input), 30);
    }
}

#[test]
fn joins_equal_one_instance() {
    for kind in JoinKind::KEYED {
        for residual in [false, true] {
            let make =
                || Box::new(Join::new(join::spec(kind, residual)).unwrap()) as Box<dyn Keyed>;
            for seed in 0..6 {
                let cells: &[&[&str]] = &[&["null", "1", "2", "3", "4"], &["x", "y", "z"]];
                let mut left = RandomInput::new(L, cells);
                let mut right = RandomInput::new(R, cells);
                let mut next = |rng: &mut Rng, _: usize| {
                    let l = if rng.below(3) == 0 {
                        change(L, "")
                    } else {
                        left.next(rng)
                    };
                    let r = if rng.below(3) == 0 {
                        change(R, "")
                    } else {
                        right.next(rng)
                    };
                    vec![l, r]
                };
                let context = format!("join {kind:?} residual={residual}");
                differential(&context, seed, &make, &mut next, 30);
            }
        }
    }
}

#[test]
fn partitioned_top_n_equals_one_instance() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let mut case = top_n::Case::random(&mut rng);
        case.partitioned = true;
        let append_only = seed % 4 == 0;
        let make = || Box::new(case.top_n(append_only)) as Box<dyn Keyed>;
        let mut input = top_n::Input {
            contents: Default::default(),
            append_only,
        };
        let mut next = |rng: &mut Rng, step: usize| vec![input.next(rng, step)];
        differential("top-n", seed, &make, &mut next, 45);
    }
}

#[test]
fn a_full_join_of_all_null_rows_stays_settled() {
    // Keys computed from all-NULL rows differ by side (coalesce(k, 1) and
    // coalesce(rk, 2)), so the padded all-NULL rows of the two sides land
    // in different workers and are equal: the wrapper settles them.
    let (l, r) = (schema(L), schema(R));
    let coalesce = |name: &str, schema: &SchemaRef, fallback: i64| {
        let column = datafusion::physical_expr::expressions::col(name, schema).unwrap();
        Arc::new(
            datafusion::physical_expr::expressions::CaseExpr::try_new(
                None,
                vec![(
                    datafusion::physical_expr::expressions::is_not_null(column.clone()).unwrap(),
                    column,
                )],
                Some(datafusion::physical_expr::expressions::lit(fallback)),
            )
            .unwrap(),
        ) as Arc<dyn datafusion::physical_expr::PhysicalExpr>
    };
    let make = || {
        let mut spec = join::spec(JoinKind::Full, false);
        spec.on = vec![(coalesce("k", &l, 1), coalesce("rk", &r, 2))];
        Box::new(Join::new(spec).unwrap()) as Box<dyn Keyed>
    };
    let mut split = None;
    for workers in 2..6 {
        let mut p = parallel(&make, workers);
        let inputs = [change(L, "null null +1"), change(R, "null null +1")];
        let out = p.step(&inputs).unwrap();
        // Inserts may stay apart; a retraction must come out once.
        assert!(settled(&out));
        assert_eq!(
            render(&crate::rows::consolidate(&out).unwrap()),
            vec!["null null null null +2"]
        );
        let inputs = [change(L, "null null -1"), change(R, "null null -1")];
        assert_eq!(
            render(&p.step(&inputs).unwrap()),
            vec!["null null null null -2"]
        );
        let owner = |key: i64| {
            let codec = RowCodec::new(schema("k int")).unwrap();
            let rows = codec
                .encode_rows(&change("k int", &format!("{key} +1")).rows().clone())
                .unwrap();
            vnode_of(OBJECT, NODE, &crate::operator::state_key(0, &rows[0], &[])) as usize % workers
        };
        if owner(1) != owner(2) {
            split = Some(workers);
        }
    }
    assert!(split.is_some(), "some worker count splits the two keys");
}

#[test]
fn state_is_owned_by_the_worker_of_its_vnode() {
    let make = || Box::new(aggregate::aggregate(true)) as Box<dyn Keyed>;
    let mut p = parallel(&make, 3);
    let rows: Vec<String> = (0..50).map(|g| format!("g{g} 1 0.5 +1")).collect();
    p.step(&[change(aggregate::SPEC, &rows.join("; "))])
        .unwrap();
    for (w, worker) in p.workers.iter().enumerate() {
        let entries = worker.state_entries().unwrap();
        assert!(entries.len() > 3, "every worker has groups");
        for entry in entries {
            let key = crate::operator::split_state_key(&entry.key).unwrap();
            if !key.distribution.is_empty() {
                assert_eq!(vnode_of(OBJECT, NODE, &entry.key) as usize % 3, w);
            }
        }
    }
    // Placed once it holds state, it cannot move.
    assert!(p.place(OBJECT, NODE).is_ok());
    assert!(p.place(ObjectId(8), NODE).is_err());
}

#[test]
fn only_keyed_operators_are_wrapped() {
    let global = || Box::new(aggregate::aggregate(false)) as Box<dyn Keyed>;
    assert!(Parallel::new(vec![global(), global()]).is_err());
    let not_in = || {
        Box::new(Join::new(join::spec(JoinKind::NullAwareAnti, false)).unwrap()) as Box<dyn Keyed>
    };
    assert!(Parallel::new(vec![not_in(), not_in()]).is_err());
    assert!(Parallel::new(Vec::new()).is_err());
}

/// Keyed by its only column; panics on a row `boom`.
struct Boom(RowCodec);

impl Operator for Boom {
    fn name(&self) -> &'static str {
        "boom"
    }
    fn output_schema(&self) -> SchemaRef {
        self.0.schema().clone()
    }
    fn structure(&self) -> String {
        "boom".into()
    }
    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        assert!(
            !render(&inputs[0]).iter().any(|l| l.starts_with("boom")),
            "boom"
        );
        Ok(inputs[0].clone())
    }
}

impl Keyed for Boom {
    fn shardable(&self) -> bool {
        true
    }
    fn distribution_keys(
        &self,
        _: usize,
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        self.0.encode_buffer(rows.columns(), true)
    }
}

#[test]
fn a_panicking_worker_fails_the_step_and_poisons_the_graph() {
    let make = || Box::new(Boom(RowCodec::new(schema("k text")).unwrap())) as Box<dyn Keyed>;
    let mut graph = Graph::new(1);
    graph
        .add(Box::new(parallel(&make, 2)), vec![Input::Source(0)])
        .unwrap();
    graph.place(OBJECT).unwrap();
    let rows = "a +1; b +1; c +1; d +1";
    assert_eq!(
        render(&graph.step(&[change("k text", rows)]).unwrap()).len(),
        4
    );
    let error = graph
        .step(&[change("k text", "a -1; boom +1")])
        .unwrap_err()
        .to_string();
    assert!(error.contains("panicked: boom"), "{error}");
    assert!(graph.is_poisoned());
}
