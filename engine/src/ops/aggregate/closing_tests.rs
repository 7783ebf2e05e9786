//! Groups closing by a watermark: late rows, expiry, `EMIT ON WINDOW
//! CLOSE`, and the watermark in effect surviving a restore.

use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::col;

use super::super::*;
use crate::testing::{change, render, schema};
use crate::watermark::FINAL;

const INPUT: &str = "w int, x int";

/// `SELECT w, sum(x) FROM t GROUP BY w`, groups closing by `w`.
fn windows(emit_on_close: bool) -> Aggregate {
    let input = schema(INPUT);
    let sum = AggregateExprBuilder::new(sum_udaf(), vec![col("x", &input).unwrap()])
        .schema(input.clone())
        .alias("s")
        .build()
        .unwrap();
    let agg = Aggregate::new(
        input.clone(),
        vec![col("w", &input).unwrap()],
        vec![AggregateCall {
            function: Arc::new(sum),
            filter: None,
        }],
        schema("w int, s int"),
    )
    .unwrap();
    assert_eq!(agg.window_key(&[0]), Some(0));
    assert_eq!(agg.window_key(&[1]), None);
    agg.closing_by(0, emit_on_close)
}

/// One epoch: the watermark of `w` is `at`, then the rows.
fn epoch(agg: &mut Aggregate, at: i64, rows: &str) -> Vec<String> {
    let out = agg.watermarks(&[Watermarks::of([(0, at)])]).unwrap();
    assert_eq!(
        out,
        Watermarks::of([(0, at)]),
        "the group column carries it"
    );
    render(&agg.step(&[change(INPUT, rows)]).unwrap())
}

#[test]
fn emit_on_window_close_emits_each_window_once_and_drops_late_rows() {
    let mut agg = windows(true);
    assert!(agg.emits_on_close());
    assert!(epoch(&mut agg, NONE_YET, "1 5 +1; 1 6 +1; 2 7 +1").is_empty());
    // Rows of window 1 in the epoch that moves the watermark past it are
    // on time: only the watermark before counts.
    assert_eq!(epoch(&mut agg, 2, "1 4 +1; 2 1 +1"), vec!["1 15 +1"]);
    assert_eq!(agg.take_late_rows(), 0);
    // Window 1 is closed now: its row is late, counted, never folded in.
    assert!(epoch(&mut agg, 2, "1 100 +1; 3 1 +1; 2 1 -1").is_empty());
    assert_eq!(agg.take_late_rows(), 1);
    assert_eq!(agg.take_late_rows(), 0, "taken once");
    // The input's end closes every window.
    assert_eq!(epoch(&mut agg, FINAL, ""), vec!["2 7 +1", "3 1 +1"]);
    let entries = agg.state_entries().unwrap();
    assert_eq!(
        entries.len(),
        2,
        "only the started flag and the watermark: {entries:?}"
    );
}

#[test]
fn without_emit_on_close_groups_update_and_their_state_goes_at_close() {
    let mut agg = windows(false);
    assert_eq!(
        epoch(&mut agg, NONE_YET, "1 5 +1; 2 7 +1"),
        vec!["1 5 +1", "2 7 +1"]
    );
    assert_eq!(epoch(&mut agg, 2, "1 1 +1"), vec!["1 5 -1", "1 6 +1"]);
    // Window 1 closed: its row stays where it was emitted (no retraction),
    // its state is gone, a late row changes nothing.
    assert!(epoch(&mut agg, 2, "1 9 +1").is_empty());
    assert_eq!(agg.take_late_rows(), 1);
    let changes = agg.take_state_changes().unwrap();
    assert!(
        changes.iter().any(|e| e.value.is_none()),
        "the closed group's entries are removed: {changes:?}"
    );
    assert_eq!(epoch(&mut agg, 2, "2 1 +1"), vec!["2 7 -1", "2 8 +1"]);
}

#[test]
fn a_restored_aggregate_keeps_the_watermark_and_the_open_windows() {
    let mut agg = windows(true);
    epoch(&mut agg, NONE_YET, "1 5 +1; 2 7 +1; 3 1 +1");
    epoch(&mut agg, 2, "");
    let mut restored = windows(true);
    restored
        .apply_state_entries(&agg.state_entries().unwrap())
        .unwrap();
    for agg in [&mut agg, &mut restored] {
        // Window 1 stays closed (its row is late), windows 2 and 3 close.
        assert_eq!(epoch(agg, 4, "1 1 +1; 2 1 +1"), vec!["2 8 +1", "3 1 +1"]);
        assert_eq!(agg.take_late_rows(), 1);
    }
}

#[test]
fn state_stays_flat_however_many_windows_pass() {
    for emit_on_close in [false, true] {
        let mut agg = windows(emit_on_close);
        let mut largest = 0;
        let mut emitted = 0;
        for w in 0..2_000i64 {
            // 20 rows of window w, one row of the window before (on time:
            // the watermark lets it in), the watermark one window behind.
            let mut rows: Vec<String> = (0..20).map(|x| format!("{w} {x} +1")).collect();
            rows.push(format!("{} 1 +1", w - 1));
            emitted += epoch(&mut agg, w - 1, &rows.join("; ")).len();
            agg.take_state_changes().unwrap();
            largest = largest.max(agg.state_entries().unwrap().len());
        }
        // Two windows open at most: their group and output entries, the
        // started flag and the watermark.
        assert!(
            largest <= 6,
            "{largest} entries (emit_on_close {emit_on_close})"
        );
        assert!(emitted >= 1_998, "{emitted} rows out");
    }
}
