//! Groups closing by a watermark: late rows, expiry, `EMIT ON WINDOW
//! CLOSE`, and the watermark in effect surviving a restore.

use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{BinaryExpr, col, lit};

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

/// `SELECT w, sum(x), count(DISTINCT x) FILTER (WHERE x > 1),
/// count(DISTINCT x) FROM t GROUP BY w` over an input that only inserts,
/// groups closing by `w`: the two DISTINCT calls share one set per group,
/// kept by the first, which does not see every value.
fn distinct_windows(emit_on_close: bool) -> Aggregate {
    let input = schema(INPUT);
    let x = col("x", &input).unwrap();
    let call = |udaf, distinct: bool, filter: Option<Arc<dyn PhysicalExpr>>| {
        let mut builder = AggregateExprBuilder::new(udaf, vec![x.clone()])
            .schema(input.clone())
            .alias("c");
        if distinct {
            builder = builder.distinct();
        }
        AggregateCall {
            function: Arc::new(builder.build().unwrap()),
            filter,
        }
    };
    let above_one: Arc<dyn PhysicalExpr> =
        Arc::new(BinaryExpr::new(x.clone(), BinaryOp::Gt, lit(1i64)));
    let agg = Aggregate::new(
        input.clone(),
        vec![col("w", &input).unwrap()],
        vec![
            call(sum_udaf(), false, None),
            call(count_udaf(), true, Some(above_one)),
            call(count_udaf(), true, None),
        ],
        schema("w int, s int, d int, e int"),
    )
    .unwrap()
    .over_append_only();
    assert_eq!(
        agg.strategies(),
        ["running", "shared distinct set", "shared distinct set"]
    );
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
    // Checkpointed: its removal at close must be written.
    agg.take_state_changes().unwrap();
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

/// Changes taken at random epochs, applied to a mirror, always equal the
/// state, while windows open and close between two takes (whose keys no
/// take ever reports: nothing checkpointed them), and while groups empty
/// and start again under the same key before a take. A restore from the first snapshot
/// and the changes after it equals the original and continues alike.
#[test]
fn changes_follow_the_state_and_windows_no_checkpoint_saw_write_nothing() {
    use std::collections::BTreeMap;

    use bytes::Bytes;

    use crate::operator::StateEntry;
    use crate::testing::Rng;

    fn as_map(entries: Vec<StateEntry>) -> BTreeMap<Bytes, Bytes> {
        entries
            .into_iter()
            .map(|e| (e.key, e.value.expect("a value")))
            .collect()
    }
    // Without retractions the input may be declared append-only, and
    // the groups keep shared DISTINCT sets.
    let make = |emit_on_close, retract| match retract {
        true => windows(emit_on_close),
        false => distinct_windows(emit_on_close),
    };
    for (emit_on_close, retract) in [(false, false), (true, false), (false, true), (true, true)] {
        for seed in 0..20 {
            let mut rng = Rng::new(seed);
            let mut agg = make(emit_on_close, retract);
            agg.take_state_changes().unwrap();
            let snapshot = agg.state_entries().unwrap();
            let mut mirror = as_map(snapshot.clone());
            let mut deltas = Vec::new();
            let mut watermark = NONE_YET;
            let mut unseen_windows = 0;
            // Rows inserted and not retracted: (window, x).
            let mut live: Vec<(i64, usize)> = Vec::new();
            for step in 0..60i64 {
                // Rows of the four windows from the watermark on; the
                // watermark moves on by 0-2 windows (and sometimes back to
                // a window that closed, whose key then opens again: the
                // aggregate keeps its closed watermark, so those rows are
                // late, but the key comes back when the watermark passes
                // it by none).
                let base = watermark.max(0);
                let mut rows: Vec<String> = Vec::new();
                for _ in 0..1 + rng.below(6) {
                    let row = (base + rng.below(4) as i64, rng.below(5));
                    rows.push(format!("{} {} +1", row.0, row.1));
                    live.push(row);
                }
                // Retract some rows of open windows: a group may empty
                // (and go) and start again under its key before a take.
                for _ in 0..if retract { rng.below(4) } else { 0 } {
                    let open: Vec<usize> = (0..live.len()).filter(|&i| live[i].0 >= base).collect();
                    if open.is_empty() {
                        break;
                    }
                    let (w, x) = live.swap_remove(open[rng.below(open.len())]);
                    rows.push(format!("{w} {x} -1"));
                }
                live.retain(|&(w, _)| w >= base);
                watermark = base + rng.below(3) as i64;
                epoch(&mut agg, watermark, &rows.join("; "));
                if step % 7 == 6 || rng.below(3) == 0 {
                    let changes = agg.take_state_changes().unwrap();
                    for e in &changes {
                        // Without retractions, a group that opened and
                        // closed since the last take is not reported (a live
                        // group always has its GROUP entry, so one absent
                        // from the mirror was never reported). A group that
                        // empties and goes before closing still reports its
                        // removal, which changes nothing.
                        assert!(
                            retract || e.value.is_some() || mirror.contains_key(&e.key),
                            "seed {seed} step {step}: removal of the unseen key {:?}",
                            e.key
                        );
                        match &e.value {
                            Some(v) => mirror.insert(e.key.clone(), v.clone()),
                            None => mirror.remove(&e.key),
                        };
                    }
                    assert_eq!(
                        mirror,
                        as_map(agg.state_entries().unwrap()),
                        "seed {seed} step {step} (emit_on_close {emit_on_close})"
                    );
                    deltas.push(changes);
                } else {
                    unseen_windows += 1;
                }
            }
            assert!(unseen_windows > 0);
            let mut restored = make(emit_on_close, retract);
            restored.apply_state_entries(&snapshot).unwrap();
            for delta in &deltas {
                restored.apply_state_entries(delta).unwrap();
            }
            // Changes after the last take are not in the deltas: compare
            // only when the original has none pending.
            let pending = agg.take_state_changes().unwrap();
            for e in &pending {
                match &e.value {
                    Some(v) => mirror.insert(e.key.clone(), v.clone()),
                    None => mirror.remove(&e.key),
                };
            }
            restored.apply_state_entries(&pending).unwrap();
            assert_eq!(
                as_map(restored.state_entries().unwrap()),
                as_map(agg.state_entries().unwrap()),
                "seed {seed}"
            );
            let rows = format!("{} 1 +1; {} 2 +1", watermark + 1, watermark + 3);
            assert_eq!(
                epoch(&mut restored, watermark + 2, &rows),
                epoch(&mut agg, watermark + 2, &rows),
                "seed {seed}"
            );
        }
    }
}
