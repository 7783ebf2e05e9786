//! Session windows: the output always equals the sessions computed from
//! scratch over the rows so far (random inserts and retractions, out of
//! order); with a watermark, late rows are dropped and counted, closed
//! sessions leave the state, and a restore behaves as the original.

use std::collections::BTreeMap;

use arrow::datatypes::{Field, Schema};
use datafusion::physical_expr::expressions::col;

use super::*;
use crate::testing::{Rng, accumulate, change, render, schema};

const S: &str = "t int, k int, v int";

fn operator(gap: i64, closing: bool) -> SessionWindow {
    let input = schema(S);
    let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(
        "window_start",
        arrow::datatypes::DataType::Int64,
        true,
    ));
    fields.push(Field::new(
        "window_end",
        arrow::datatypes::DataType::Int64,
        true,
    ));
    let spec = SessionSpec {
        partition_by: vec![col("k", &input).unwrap()],
        input_schema: input,
        time: 0,
        gap,
        bounds: vec![Bound::Start, Bound::End],
        output_schema: Arc::new(Schema::new(fields)),
    };
    let operator = SessionWindow::new(spec).unwrap();
    if closing {
        operator.closing()
    } else {
        operator
    }
}

fn step(op: &mut SessionWindow, rows: &str) -> Vec<String> {
    render(&op.step(&[change(S, rows)]).unwrap())
}

/// `watermark` for the time column, then a step.
fn step_at(op: &mut SessionWindow, watermark: i64, rows: &str) -> (Vec<String>, Watermarks) {
    let out = op.watermarks(&[Watermarks::of([(0, watermark)])]).unwrap();
    (step(op, rows), out)
}

/// Every row of `rows` ("t k v" -> count) with its session's bounds.
fn from_scratch(rows: &BTreeMap<(i64, i64, i64), i64>, gap: i64) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let keys: std::collections::BTreeSet<i64> = rows.keys().map(|r| r.1).collect();
    for k in keys {
        let mut mine: Vec<(i64, i64, i64)> = rows
            .iter()
            .filter(|(r, _)| r.1 == k)
            .map(|(&(t, _, v), &n)| (t, v, n))
            .collect();
        mine.sort();
        let times: Vec<i64> = mine.iter().map(|r| r.0).collect();
        for ((t, v, n), (start, end)) in mine.iter().zip(sessions(&times, gap)) {
            out.insert(format!("{t} {k} {v} {start} {end}"), *n);
        }
    }
    out
}

#[test]
fn the_rule_starts_a_session_at_a_gap_of_at_least_gap() {
    assert_eq!(
        sessions(&[1, 2, 5, 20, 21, 26], 5),
        vec![(1, 10), (1, 10), (1, 10), (20, 26), (20, 26), (26, 31)]
    );
    assert_eq!(sessions(&[], 5), vec![]);
    assert_eq!(sessions(&[7, 7], 1), vec![(7, 8), (7, 8)]);
}

#[test]
fn a_row_between_two_sessions_merges_them_and_its_retraction_splits_them() {
    let mut op = operator(15, false);
    assert_eq!(
        step(&mut op, "30 1 2 +1; 10 1 1 +1; 10 2 9 +1"),
        vec!["10 1 1 10 25 +1", "10 2 9 10 25 +1", "30 1 2 30 45 +1"]
    );
    // 20 is within 15 of both: one session of key 1; key 2 untouched.
    assert_eq!(
        step(&mut op, "20 1 3 +1"),
        vec![
            "10 1 1 10 25 -1",
            "10 1 1 10 45 +1",
            "20 1 3 10 45 +1",
            "30 1 2 10 45 +1",
            "30 1 2 30 45 -1",
        ]
    );
    assert_eq!(
        step(&mut op, "20 1 3 -1"),
        vec![
            "10 1 1 10 25 +1",
            "10 1 1 10 45 -1",
            "20 1 3 10 45 -1",
            "30 1 2 10 45 -1",
            "30 1 2 30 45 +1",
        ]
    );
    // A row at an existing time, and a retraction never inserted.
    assert_eq!(step(&mut op, "30 1 4 +1"), vec!["30 1 4 30 45 +1"]);
    assert!(op.step(&[change(S, "31 1 4 -1")]).is_err());
}

#[test]
fn the_output_always_equals_sessions_from_scratch() {
    for seed in 0..20 {
        let gap = 5 + (seed as i64 % 3) * 4;
        let mut op = operator(gap, false);
        let mut rng = Rng::new(seed);
        let mut rows: BTreeMap<(i64, i64, i64), i64> = BTreeMap::new();
        let mut shown = BTreeMap::new();
        for _ in 0..60 {
            let mut delta: BTreeMap<(i64, i64, i64), i64> = BTreeMap::new();
            for _ in 0..rng.below(6) {
                let live: Vec<(i64, i64, i64)> = rows
                    .iter()
                    .filter(|(r, n)| **n + delta.get(r).copied().unwrap_or(0) > 0)
                    .map(|(r, _)| *r)
                    .collect();
                if !live.is_empty() && rng.below(3) == 0 {
                    *delta.entry(live[rng.below(live.len())]).or_default() -= 1;
                } else {
                    let row = (
                        rng.below(120) as i64,
                        rng.below(3) as i64,
                        rng.below(4) as i64,
                    );
                    *delta.entry(row).or_default() += 1;
                }
            }
            delta.retain(|_, w| *w != 0);
            for (r, w) in &delta {
                *rows.entry(*r).or_default() += w;
            }
            rows.retain(|_, n| *n != 0);
            let text: Vec<String> = delta
                .iter()
                .map(|((t, k, v), w)| format!("{t} {k} {v} {w:+}"))
                .collect();
            accumulate(
                &mut shown,
                &op.step(&[change(S, &text.join("; "))]).unwrap(),
            );
            assert_eq!(shown, from_scratch(&rows, gap), "seed {seed}");
        }
    }
}

#[test]
fn a_watermark_drops_late_rows_and_the_sessions_it_closes() {
    let mut op = operator(10, true);
    // Nothing known yet: window_end carries the time's watermark.
    let (out, watermarks) = step_at(&mut op, NONE_YET, "5 1 1 +1; 12 1 2 +1; 40 2 3 +1");
    assert_eq!(
        out,
        vec!["12 1 2 5 22 +1", "40 2 3 40 50 +1", "5 1 1 5 22 +1"]
    );
    assert_eq!(watermarks, Watermarks::of([(4, NONE_YET)]));
    // The watermark reaches 22: key 1's session [5, 22) closes, its state
    // goes; its output stays.
    let (out, watermarks) = step_at(&mut op, 22, "");
    assert!(out.is_empty());
    assert_eq!(watermarks, Watermarks::of([(4, 22)]));
    let rows: Vec<StateEntry> = op
        .state_entries()
        .unwrap()
        .into_iter()
        .filter(|e| e.key[0] == ROW)
        .collect();
    assert_eq!(rows.len(), 1, "only key 2's row is kept");
    // 21 is behind the watermark in effect: late, even though it would have
    // joined the closed session. 22 starts a new one.
    let (out, _) = step_at(&mut op, 22, "21 1 4 +1; 22 1 5 +1");
    assert_eq!(out, vec!["22 1 5 22 32 +1"]);
    assert_eq!(op.take_late_rows(), 1);
    assert_eq!(op.take_late_rows(), 0);
    // The end of the input closes everything.
    step_at(&mut op, crate::watermark::FINAL, "");
    assert_eq!(op.state_entries().unwrap().len(), 1, "the watermark alone");
}

#[test]
fn state_stays_flat_while_sessions_close_behind_the_watermark() {
    let mut op = operator(10, true);
    let mut most = 0;
    for epoch in 0..2_000i64 {
        // Two keys, each a burst of three rows every 30 time units.
        let t = epoch * 10;
        let rows = format!("{t} {} {epoch} +1; {} 9 {epoch} +1", epoch % 3, t + 1);
        step_at(&mut op, t - 5, &rows);
        most = most.max(op.state_entries().unwrap().len());
    }
    assert!(most <= 16, "{most} entries");
}

#[test]
fn a_restored_operator_behaves_as_the_original() {
    let epochs = [
        (NONE_YET, "5 1 1 +1; 30 1 2 +1; 7 2 3 +1"),
        (10, "12 1 4 +1; 20 1 5 +1"),
        (20, "25 2 6 +1; 5 1 1 -1; 23 1 1 +1"),
        (26, "35 1 7 +1; 29 2 8 +1"),
        (40, "41 1 9 +1; 36 1 2 +1"),
        (45, "46 1 10 +1; 50 2 11 +1"),
    ];
    for i in 0..epochs.len() {
        let mut original = operator(10, true);
        for (watermark, rows) in &epochs[..=i] {
            step_at(&mut original, *watermark, rows);
        }
        let mut restored = operator(10, true);
        restored.restore(&original.snapshot().unwrap()).unwrap();
        assert_eq!(
            restored.state_entries().unwrap(),
            original.state_entries().unwrap()
        );
        for (watermark, rows) in &epochs[i + 1..] {
            assert_eq!(
                step_at(&mut restored, *watermark, rows),
                step_at(&mut original, *watermark, rows),
                "restored after epoch {i}"
            );
        }
    }
}

#[test]
fn state_changes_replay_to_the_same_state() {
    let mut op = operator(10, true);
    let mut replica = operator(10, true);
    let mut rng = Rng::new(7);
    for epoch in 0..200i64 {
        let t = epoch * 3;
        let rows: Vec<String> = (0..rng.below(4))
            .map(|i| format!("{} {} {i} +1", t + rng.below(12) as i64, rng.below(3)))
            .collect();
        step_at(&mut op, t - 6, &rows.join("; "));
        replica
            .apply_state_entries(&op.take_state_changes().unwrap())
            .unwrap();
        assert_eq!(
            replica.state_entries().unwrap(),
            op.state_entries().unwrap()
        );
    }
}
