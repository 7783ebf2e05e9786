//! The join's unit tests: every kind through [`Join`], and a differential
//! test of the delta join against recomputing each bucket.

use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::{binary, col};

use super::*;
use crate::testing::{change, render, schema};

pub(crate) const L: &str = "k int, a text";
pub(crate) const R: &str = "rk int, b text";

fn join(kind: JoinKind, residual: bool) -> Join {
    let (left, right) = (schema(L), schema(R));
    let joined = schema("k int, a text, rk int, b text");
    let output = if kind.outputs_left_only() {
        left.clone()
    } else {
        joined.clone()
    };
    // `a <> b` as the residual.
    let residual = residual.then(|| {
        binary(
            col("a", &joined).unwrap(),
            BinaryOp::NotEq,
            col("b", &joined).unwrap(),
            &joined,
        )
        .unwrap()
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

fn step(j: &mut Join, left: &str, right: &str) -> Vec<String> {
    render(&j.step(&[change(L, left), change(R, right)]).unwrap())
}

#[test]
fn inner_join_with_a_residual() {
    let mut j = join(JoinKind::Inner, true);
    assert_eq!(
        step(&mut j, "1 x +1; 1 y +1; 2 x +1", "1 x +1; 3 z +1"),
        vec!["1 y 1 x +1"]
    );
    // A new right row matches both left rows of key 1 except the equal one.
    assert_eq!(step(&mut j, "", "1 y +1"), vec!["1 x 1 y +1"]);
    assert_eq!(step(&mut j, "1 y -1", ""), vec!["1 y 1 x -1"]);
}

#[test]
fn left_join_pads_until_a_match_arrives_and_after_it_goes() {
    let mut j = join(JoinKind::Left, false);
    assert_eq!(
        step(&mut j, "1 x +1; null n +1", ""),
        vec!["1 x null null +1", "null n null null +1"]
    );
    assert_eq!(
        step(&mut j, "", "1 b +1; null b +1"),
        vec!["1 x 1 b +1", "1 x null null -1"]
    );
    assert_eq!(
        step(&mut j, "", "1 b -1"),
        vec!["1 x 1 b -1", "1 x null null +1"]
    );
}

#[test]
fn full_join_keeps_both_sides() {
    let mut j = join(JoinKind::Full, false);
    assert_eq!(
        step(&mut j, "1 x +1", "2 y +1"),
        vec!["1 x null null +1", "null null 2 y +1"]
    );
    assert_eq!(
        step(&mut j, "2 z +1", ""),
        vec!["2 z 2 y +1", "null null 2 y -1"]
    );
}

#[test]
fn semi_and_anti_joins_count_each_left_row_once() {
    let mut semi = join(JoinKind::Semi, false);
    let mut anti = join(JoinKind::Anti, false);
    for j in [&mut semi, &mut anti] {
        j.step(&[change(L, "1 x +1; 2 y +1"), change(R, "")])
            .unwrap();
    }
    assert_eq!(step(&mut semi, "", "1 a +1; 1 b +1"), vec!["1 x +1"]);
    assert_eq!(step(&mut anti, "", "1 a +1; 1 b +1"), vec!["1 x -1"]);
    assert_eq!(step(&mut semi, "", "1 a -1"), Vec::<String>::new());
    assert_eq!(step(&mut anti, "", "1 a -1; 1 b -1"), vec!["1 x +1"]);
}

#[test]
fn not_in_outputs_nothing_while_the_right_side_holds_a_null() {
    let mut j = join(JoinKind::NullAwareAnti, false);
    // Right side empty: every left row, even one with a NULL key.
    assert_eq!(
        step(&mut j, "1 x +1; 2 y +1; null n +1", ""),
        vec!["1 x +1", "2 y +1", "null n +1"]
    );
    // A non-NULL right key removes its match and the NULL-key left row.
    assert_eq!(step(&mut j, "", "1 a +1"), vec!["1 x -1", "null n -1"]);
    // A NULL right key makes every comparison unknown: nothing is left.
    assert_eq!(step(&mut j, "", "null b +1"), vec!["2 y -1"]);
    assert_eq!(step(&mut j, "3 z +1", ""), Vec::<String>::new());
    // Without the NULL, unmatched non-NULL left rows come back.
    assert_eq!(step(&mut j, "", "null b -1"), vec!["2 y +1", "3 z +1"]);
    let mut restored = join(JoinKind::NullAwareAnti, false);
    restored.restore(&j.snapshot().unwrap()).unwrap();
    for j in [&mut j, &mut restored] {
        // Emptying the right side brings back every left row.
        assert_eq!(step(j, "", "1 a -1"), vec!["1 x +1", "null n +1"]);
    }
}

#[test]
fn exists_over_a_right_side_without_columns() {
    // SELECT * FROM l WHERE EXISTS (SELECT 1 FROM r WHERE ...): the
    // right side has rows but no columns.
    let left = schema(L);
    let mut j = Join::new(JoinSpec {
        kind: JoinKind::Semi,
        on: vec![],
        left_schema: left.clone(),
        right_schema: schema(""),
        residual: None,
        output_schema: left,
    })
    .unwrap();
    let mut step = |l: &str, r: &str| render(&j.step(&[change(L, l), change("", r)]).unwrap());
    assert_eq!(step("1 x +1", ""), Vec::<String>::new());
    assert_eq!(step("", "+2"), vec!["1 x +1"]);
    assert_eq!(step("", "-1"), Vec::<String>::new());
    assert_eq!(step("", "-1"), vec!["1 x -1"]);
}

#[test]
fn float_keys_compare_by_value() {
    const FL: &str = "k float, a text";
    const FR: &str = "rk float, b text";
    let (left, right) = (schema(FL), schema(FR));
    let mut j = Join::new(JoinSpec {
        kind: JoinKind::Inner,
        on: vec![(col("k", &left).unwrap(), col("rk", &right).unwrap())],
        left_schema: left,
        right_schema: right,
        residual: None,
        output_schema: schema("k float, a text, rk float, b text"),
    })
    .unwrap();
    // -0 = 0 and NaN = NaN, as in SQL; the output keeps each side's value.
    let out = j
        .step(&[
            change(FL, "-0 x +1; NaN y +1"),
            change(FR, "0 p +1; -NaN q +1"),
        ])
        .unwrap();
    assert_eq!(render(&out), vec!["-0.0 x 0.0 p +1", "NaN y NaN q +1"]);
}

#[test]
fn snapshot_and_restore_continue_where_they_left_off() {
    let mut j = join(JoinKind::Full, true);
    j.step(&[change(L, "1 x +1; 2 y +1"), change(R, "1 q +1")])
        .unwrap();
    let mut restored = join(JoinKind::Full, true);
    restored.restore(&j.snapshot().unwrap()).unwrap();
    let (l, r) = (change(L, "1 x -1"), change(R, "2 w +1"));
    assert_eq!(
        render(&restored.step(&[l.clone(), r.clone()]).unwrap()),
        render(&j.step(&[l, r]).unwrap())
    );
}

pub(crate) mod differential {
    //! Random inserts and retractions on both sides (NULL keys, duplicate
    //! rows, buckets that empty out and come back) through the delta join
    //! of every kind, with and without a residual, against the same join
    //! recomputed per bucket; and a replica rebuilt from the changed state
    //! entries, against the full state.

    use std::collections::BTreeMap;

    use super::*;
    use crate::ops::join::buckets::BucketJoin;
    use crate::ops::join::delta::DeltaJoin;
    use crate::testing::{RandomInput, Rng, accumulate};

    pub(crate) fn spec(kind: JoinKind, residual: bool) -> JoinSpec {
        let (left, right) = (schema(L), schema(R));
        let joined = schema("k int, a text, rk int, b text");
        let output = if kind.outputs_left_only() {
            left.clone()
        } else {
            joined.clone()
        };
        let residual = residual.then(|| {
            binary(
                col("a", &joined).unwrap(),
                BinaryOp::NotEq,
                col("b", &joined).unwrap(),
                &joined,
            )
            .unwrap()
        });
        JoinSpec {
            kind,
            on: vec![(col("k", &left).unwrap(), col("rk", &right).unwrap())],
            left_schema: left,
            right_schema: right,
            residual,
            output_schema: output,
        }
    }

    fn run(seed: u64, kind: JoinKind, residual: bool) {
        let mut rng = Rng::new(seed);
        let cells: &[&[&str]] = &[&["null", "1", "2", "3"], &["x", "y", "z"]];
        let mut left = RandomInput::new(L, cells);
        let mut right = RandomInput::new(R, cells);
        let mut delta = DeltaJoin::new(spec(kind, residual)).unwrap();
        let mut oracle = BucketJoin::new(spec(kind, residual)).unwrap();
        let mut replica = DeltaJoin::new(spec(kind, residual)).unwrap();
        let (mut result, mut expected) = (BTreeMap::new(), BTreeMap::new());
        for step in 0..50 {
            let l = if rng.below(3) == 0 {
                change(L, "")
            } else {
                left.next(&mut rng)
            };
            let r = if rng.below(3) == 0 {
                change(R, "")
            } else {
                right.next(&mut rng)
            };
            let inputs = [l, r];
            let out = delta.step(&inputs).unwrap();
            let settled = crate::rows::settle(out.clone()).unwrap();
            assert_eq!(render(&out), render(&settled), "output is settled");
            accumulate(&mut result, &out);
            accumulate(&mut expected, &oracle.step(&inputs).unwrap());
            assert_eq!(
                result, expected,
                "{kind:?} residual={residual} seed {seed} step {step}"
            );
            replica
                .apply_state_entries(&delta.take_state_changes().unwrap())
                .unwrap();
            let mut full = delta.state_entries().unwrap();
            let mut rebuilt = replica.state_entries().unwrap();
            full.sort();
            rebuilt.sort();
            assert_eq!(full, rebuilt, "{kind:?} seed {seed} step {step}: replica");
        }
    }

    #[test]
    fn delta_joins_equal_recomputing_each_bucket() {
        for kind in JoinKind::KEYED {
            for seed in 0..25 {
                run(seed, kind, false);
                run(seed, kind, true);
            }
        }
    }
}

/// The same rows in one large step or in many small steps leave the same
/// result, for every kind, with rows retracted later in the same step.
#[test]
fn a_large_change_is_joined_like_the_same_rows_in_small_steps() {
    use std::collections::BTreeMap;

    use crate::testing::accumulate;

    const ROWS: usize = 3_100;
    let side = |seed: usize| -> Vec<String> {
        let mut lines = Vec::with_capacity(ROWS);
        for i in 0..ROWS {
            let k = (i * 7 + seed) % 53;
            let key = if k == 0 {
                "null".to_string()
            } else {
                k.to_string()
            };
            let text = ["x", "y", "z"][(i + seed) % 3];
            lines.push(format!("{key} {text}{} +1", i % 5));
            // Every 9th row goes again, a chunk or two later.
            if i >= 1500 && i % 9 == 0 {
                let j = i - 1500;
                let k = (j * 7 + seed) % 53;
                let key = if k == 0 {
                    "null".to_string()
                } else {
                    k.to_string()
                };
                lines.push(format!(
                    "{key} {}{} -1",
                    ["x", "y", "z"][(j + seed) % 3],
                    j % 5
                ));
            }
        }
        lines
    };
    let (left, right) = (side(1), side(4));
    assert_eq!(left.len(), right.len());
    for kind in JoinKind::KEYED {
        let mut whole = BTreeMap::new();
        let mut one = join(kind, true);
        let out = one
            .step(&[change(L, &left.join("; ")), change(R, &right.join("; "))])
            .unwrap();
        accumulate(&mut whole, &out);
        let mut pieces = BTreeMap::new();
        let mut many = join(kind, true);
        for (l, r) in left.chunks(97).zip(right.chunks(97)) {
            let out = many
                .step(&[change(L, &l.join("; ")), change(R, &r.join("; "))])
                .unwrap();
            accumulate(&mut pieces, &out);
        }
        assert!(!whole.is_empty(), "{kind:?}");
        assert_eq!(whole, pieces, "{kind:?}");
    }
}
