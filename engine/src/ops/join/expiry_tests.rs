//! Window joins: rows the other side can no longer match go, late rows
//! are dropped and counted, and both watermarks survive a restore.

use datafusion::physical_expr::expressions::col;

use super::super::*;
use super::{Band, Closing, window_key};
use crate::Operator;
use crate::testing::{change, render, schema};
use crate::watermark::{NONE_YET, Watermarks};

const L: &str = "w int, a int";
const R: &str = "rw int, b int";

/// `SELECT * FROM l JOIN r ON w = rw`, closing by `w = rw`.
fn window_join() -> Join {
    let (left, right) = (schema(L), schema(R));
    let spec = JoinSpec {
        kind: JoinKind::Inner,
        on: vec![(col("w", &left).unwrap(), col("rw", &right).unwrap())],
        left_schema: left,
        right_schema: right,
        residual: None,
        output_schema: schema("w int, a int, rw int, b int"),
    };
    assert_eq!(window_key(&spec, &[0], &[0], Closing::ByOtherSide), Some(0));
    assert_eq!(
        window_key(&spec, &[0], &[], Closing::ByBothSides),
        None,
        "both sides need one"
    );
    let outer = JoinSpec {
        kind: JoinKind::Left,
        ..spec.clone()
    };
    assert_eq!(
        window_key(&outer, &[0], &[0], Closing::ByOtherSide),
        None,
        "only inner joins close by the other side"
    );
    assert_eq!(
        window_key(&outer, &[0], &[0], Closing::ByBothSides),
        Some(0)
    );
    let not_in = JoinSpec {
        kind: JoinKind::NullAwareAnti,
        ..spec.clone()
    };
    assert_eq!(window_key(&not_in, &[0], &[0], Closing::ByBothSides), None);
    Join::window_join(spec, 0, Closing::ByOtherSide).unwrap()
}

/// `SELECT * FROM l {kind} JOIN r ON w = rw`, closing once both sides'
/// watermarks pass a key.
fn closing_by_both(kind: JoinKind, output: &str) -> Join {
    let (left, right) = (schema(L), schema(R));
    let spec = JoinSpec {
        kind,
        on: vec![(col("w", &left).unwrap(), col("rw", &right).unwrap())],
        left_schema: left,
        right_schema: right,
        residual: None,
        output_schema: schema(output),
    };
    Join::window_join(spec, 0, Closing::ByBothSides).unwrap()
}

/// One epoch with each side's own watermark.
fn epoch_apart(j: &mut Join, left_at: i64, right_at: i64, left: &str, right: &str) -> Vec<String> {
    j.watermarks(&[
        Watermarks::of([(0, left_at)]),
        Watermarks::of([(0, right_at)]),
    ])
    .unwrap();
    render(&j.step(&[change(L, left), change(R, right)]).unwrap())
}

#[test]
fn over_updating_inputs_a_key_closes_once_both_watermarks_pass_it() {
    let mut j = closing_by_both(JoinKind::Inner, "w int, a int, rw int, b int");
    assert_eq!(
        epoch_apart(&mut j, NONE_YET, NONE_YET, "1 10 +1", "1 100 +1"),
        vec!["1 10 1 100 +1"]
    );
    // The right side passed window 1, the left did not: the left may
    // still update its row (an aggregate's -old/+new), and the pair moves.
    for (old, new) in [(10, 11), (11, 12)] {
        assert_eq!(
            epoch_apart(&mut j, 1, 5, &format!("1 {old} -1; 1 {new} +1"), ""),
            vec![format!("1 {old} 1 100 -1"), format!("1 {new} 1 100 +1")]
        );
    }
    // A right row for window 1 is late now; the left's are not.
    assert_eq!(
        epoch_apart(&mut j, 1, 5, "", "1 101 +1"),
        Vec::<String>::new()
    );
    assert_eq!(j.take_late_rows(), 1);
    j.take_state_changes().unwrap();
    assert_eq!(
        j.state_entries().unwrap().len(),
        4,
        "two rows, two watermarks"
    );
    // Both passed: window 1's rows go, and nothing is retracted.
    assert_eq!(epoch_apart(&mut j, 5, 5, "", ""), Vec::<String>::new());
    assert_eq!(j.state_entries().unwrap().len(), 2, "the two watermarks");
}

#[test]
fn an_outer_join_closing_by_both_sides_keeps_its_padded_rows() {
    let mut j = closing_by_both(JoinKind::Left, "w int, a int, rw int, b int");
    // Rows that arrive in the epoch that closes their key are joined
    // first: the unmatched left row is output padded, and stays.
    assert_eq!(
        epoch_apart(&mut j, 5, 5, "1 10 +1; 2 20 +1", "2 200 +1"),
        vec!["1 10 null null +1", "2 20 2 200 +1"]
    );
    assert_eq!(epoch_apart(&mut j, 5, 5, "", ""), Vec::<String>::new());
    assert_eq!(j.state_entries().unwrap().len(), 2, "the two watermarks");
}

/// One epoch: both sides' watermarks of the key, then their rows.
fn epoch(j: &mut Join, at: i64, left: &str, right: &str) -> Vec<String> {
    let marks = Watermarks::of([(0, at)]);
    j.watermarks(&[marks.clone(), marks]).unwrap();
    render(&j.step(&[change(L, left), change(R, right)]).unwrap())
}

#[test]
fn rows_that_can_match_nothing_more_go_and_late_rows_are_dropped() {
    let mut j = window_join();
    assert_eq!(
        epoch(&mut j, NONE_YET, "1 10 +1; 2 20 +1", "1 100 +1"),
        vec!["1 10 1 100 +1"]
    );
    // On time (behind the new watermark, not the one before): they match.
    assert_eq!(
        epoch(&mut j, 2, "1 11 +1", "2 200 +1"),
        vec!["1 11 1 100 +1", "2 20 2 200 +1"]
    );
    assert_eq!(j.take_late_rows(), 0);
    // Window 1 is behind both watermarks now: its rows are gone, a row
    // for it is late.
    assert_eq!(
        epoch(&mut j, 2, "1 12 +1", "2 201 +1"),
        vec!["2 20 2 201 +1"]
    );
    assert_eq!(j.take_late_rows(), 1);
    let entries = j.state_entries().unwrap();
    // Window 2's three rows and the two watermarks.
    assert_eq!(entries.len(), 5, "{entries:?}");

    let mut restored = window_join();
    restored.apply_state_entries(&entries).unwrap();
    for j in [&mut j, &mut restored] {
        assert_eq!(epoch(j, 2, "1 13 +1", "2 202 +1"), vec!["2 20 2 202 +1"]);
        assert_eq!(j.take_late_rows(), 1);
    }
}

#[test]
fn a_window_join_keeps_flat_state_however_many_windows_pass() {
    let mut j = window_join();
    let mut largest = 0;
    let mut out = 0;
    for w in 0..1_000i64 {
        let left: Vec<String> = (0..5).map(|a| format!("{w} {a} +1")).collect();
        let right: Vec<String> = (0..3).map(|b| format!("{w} {b} +1")).collect();
        out += epoch(&mut j, w, &left.join("; "), &right.join("; ")).len();
        j.take_state_changes().unwrap();
        largest = largest.max(j.state_entries().unwrap().len());
    }
    assert_eq!(out, 15_000, "every window's 5 x 3 pairs");
    assert!(
        largest <= 10,
        "{largest} entries: one window's rows and two watermarks"
    );
}

/// `SELECT * FROM l JOIN r ON a = b WHERE w BETWEEN rw - 10 AND rw`,
/// closing by that band (`w - rw` in [-10, 0]).
fn interval_join() -> Join {
    use datafusion::logical_expr::Operator as BinaryOp;
    use datafusion::physical_expr::expressions::{binary, lit};
    let (left, right) = (schema(L), schema(R));
    let joined = schema("w int, a int, rw int, b int");
    let w = || col("w", &joined).unwrap();
    let rw = || col("rw", &joined).unwrap();
    let low = binary(rw(), BinaryOp::Minus, lit(10i64), &joined).unwrap();
    let residual = binary(
        binary(w(), BinaryOp::GtEq, low, &joined).unwrap(),
        BinaryOp::And,
        binary(w(), BinaryOp::LtEq, rw(), &joined).unwrap(),
        &joined,
    )
    .unwrap();
    let spec = JoinSpec {
        kind: JoinKind::Inner,
        on: vec![(col("a", &left).unwrap(), col("b", &right).unwrap())],
        left_schema: left,
        right_schema: right,
        residual: Some(residual),
        output_schema: joined,
    };
    let band = Band {
        left: 0,
        right: 0,
        lo: Some(-10),
        hi: Some(0),
    };
    Join::interval_join(spec, band).unwrap()
}

#[test]
fn an_interval_join_drops_rows_no_partner_within_the_band_can_reach() {
    let mut j = interval_join();
    assert_eq!(
        epoch_apart(
            &mut j,
            NONE_YET,
            NONE_YET,
            "5 1 +1; 25 3 +1; 100 2 +1",
            "10 1 +1"
        ),
        vec!["5 1 10 1 +1"]
    );
    // Left rows before 30 - 10 can meet no right row to come; right rows
    // before 30 (their own watermark) and 50 - 0 can meet no left row.
    assert_eq!(epoch_apart(&mut j, 50, 30, "", ""), Vec::<String>::new());
    j.take_state_changes().unwrap();
    assert_eq!(
        j.state_entries().unwrap().len(),
        4,
        "left rows 25 and 100 and two watermarks"
    );
    // Right rows still to come meet them within the band; a left row
    // behind 50 is late.
    assert_eq!(
        epoch_apart(&mut j, 50, 30, "20 1 +1", "32 3 +1; 105 2 +1"),
        vec!["100 2 105 2 +1", "25 3 32 3 +1"]
    );
    assert_eq!(j.take_late_rows(), 1);
    // The right side updates its row (an aggregate's -old/+new): the pair
    // follows, since the left row is still within reach.
    assert_eq!(
        epoch_apart(&mut j, 50, 30, "", "105 2 -1; 106 2 +1"),
        vec!["100 2 105 2 -1", "100 2 106 2 +1"]
    );
    // A restore files the rows again by their time.
    let mut restored = interval_join();
    restored
        .apply_state_entries(&j.state_entries().unwrap())
        .unwrap();
    for j in [&mut j, &mut restored] {
        assert_eq!(epoch_apart(j, 200, 200, "", ""), Vec::<String>::new());
        assert_eq!(j.state_entries().unwrap().len(), 2, "the two watermarks");
    }
}

#[test]
fn an_interval_join_keeps_flat_state_however_long_it_runs() {
    let mut j = interval_join();
    let mut largest = 0;
    let mut out = 0;
    for t in 0..2_000i64 {
        // One left row per tick, and every 10 ticks a right row that
        // reaches back over the last 10.
        let left = format!("{t} {} +1", t % 3);
        let right = if t % 10 == 9 {
            format!("{t} {} +1", t % 3)
        } else {
            String::new()
        };
        out += epoch_apart(&mut j, t - 1, t - 1, &left, &right).len();
        j.take_state_changes().unwrap();
        largest = largest.max(j.state_entries().unwrap().len());
    }
    assert!(out > 0);
    assert!(
        largest <= 16,
        "{largest} entries: about a band's worth of rows"
    );
}
