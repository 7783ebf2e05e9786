//! Temporal filters against an injected clock: rows enter and leave as the
//! epoch's time moves, with no input, and the output always equals the
//! predicate evaluated at that time; the state survives a restore.

use std::collections::BTreeMap;

use datafusion::physical_expr::expressions::col;

use super::*;
use crate::testing::{change, render, schema};

const S: &str = "t int, v int";

/// `t` is a time in microseconds (an Int64 column is read as one unit:
/// `micros_of` is tested on real timestamp types below).
fn filter(bounds: &[(TimeComparison, i64)]) -> TemporalFilter {
    let s = schema(S);
    let bounds = bounds
        .iter()
        .map(|&(comparison, offset_micros)| TimeBound {
            row: col("t", &s).unwrap(),
            comparison,
            offset_micros,
        })
        .collect();
    TemporalFilter::new(s, bounds).unwrap()
}

fn at(f: &mut TemporalFilter, now: i64, rows: &str) -> Vec<String> {
    f.advance_time(now);
    render(&f.step(&[change(S, rows)]).unwrap())
}

#[test]
fn rows_enter_and_leave_a_sliding_window_as_time_passes() {
    // t > now() - 10 AND t <= now(): the last 10 time units.
    let mut f = filter(&[
        (TimeComparison::After, -10),
        (TimeComparison::AtOrBefore, 0),
    ]);
    // At 100: 95 is in, 80 expired already, 105 is in the future.
    assert_eq!(
        at(&mut f, 100, "95 1 +1; 80 2 +1; 105 3 +1"),
        vec!["95 1 +1"]
    );
    assert_eq!(f.next_due(), Some(105));
    // 105 appears at 105; 95 leaves at 105 (95 > 105 - 10 is false).
    assert_eq!(at(&mut f, 105, ""), vec!["105 3 +1", "95 1 -1"]);
    // A retraction of a visible row is output, and it will not expire twice.
    assert_eq!(at(&mut f, 106, "105 3 -1"), vec!["105 3 -1"]);
    assert_eq!(f.next_due(), None);
    assert_eq!(at(&mut f, 200, ""), Vec::<String>::new());
    // A row that appears and expires between two epochs is never output.
    assert_eq!(at(&mut f, 200, "250 4 +1"), Vec::<String>::new());
    assert_eq!(at(&mut f, 300, ""), Vec::<String>::new());
    // A NULL time never satisfies the predicate.
    assert_eq!(at(&mut f, 300, "null 5 +1"), Vec::<String>::new());
    assert_eq!(f.state_entries().unwrap(), Vec::new());
}

#[test]
fn the_output_always_equals_the_predicate_at_the_epoch_time() {
    let mut f = filter(&[(TimeComparison::AtOrAfter, -7), (TimeComparison::Before, 3)]);
    let holds = |t: i64, now: i64| t >= now - 7 && t < now + 3;
    let mut shown: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let mut all: Vec<(i64, i64)> = Vec::new();
    for now in 0..60i64 {
        // Rows from the past and the future, one retracted later.
        let mut rows = vec![format!("{} {now} +1", (now * 7) % 50)];
        if now % 5 == 4 {
            let (t, v) = all[(now as usize) / 2];
            if all.contains(&(t, v)) {
                rows.push(format!("{t} {v} -1"));
                all.retain(|r| *r != (t, v));
            }
        }
        all.push(((now * 7) % 50, now));
        for line in at(&mut f, now, &rows.join("; ")) {
            let parts: Vec<i64> = line
                .split_whitespace()
                .map(|p| p.parse().unwrap())
                .collect();
            *shown.entry((parts[0], parts[1])).or_default() += parts[2];
        }
        shown.retain(|_, w| *w != 0);
        let expected: BTreeMap<(i64, i64), i64> = all
            .iter()
            .filter(|(t, _)| holds(*t, now))
            .map(|r| (*r, 1))
            .collect();
        assert_eq!(shown, expected, "at {now}");
    }
}

#[test]
fn waiting_and_visible_rows_survive_a_restore() {
    let bounds = [
        (TimeComparison::After, -10),
        (TimeComparison::AtOrBefore, 0),
    ];
    let mut f = filter(&bounds);
    assert_eq!(at(&mut f, 100, "95 1 +1; 105 3 +1"), vec!["95 1 +1"]);
    let snapshot = f.state_entries().unwrap();
    let mut restored = filter(&bounds);
    restored.apply_state_entries(&snapshot).unwrap();
    // And the change record replayed on top of an empty operator.
    let mut replayed = filter(&bounds);
    replayed
        .apply_state_entries(&f.take_state_changes().unwrap())
        .unwrap();
    for f in [&mut f, &mut restored, &mut replayed] {
        assert_eq!(at(f, 105, ""), vec!["105 3 +1", "95 1 -1"]);
        assert_eq!(at(f, 115, ""), vec!["105 3 -1"]);
    }
}

#[test]
fn times_of_every_unit_are_read_as_microseconds() {
    use arrow::array::{Date32Array, TimestampMillisecondArray, TimestampNanosecondArray};
    let ms: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![Some(1_500), None]));
    assert_eq!(micros_of(&ms).unwrap(), vec![Some(1_500_000), None]);
    let ns: ArrayRef =
        Arc::new(TimestampNanosecondArray::from(vec![-1_500]).with_timezone("+00:00"));
    assert_eq!(micros_of(&ns).unwrap(), vec![Some(-2)]);
    let day: ArrayRef = Arc::new(Date32Array::from(vec![1]));
    assert_eq!(micros_of(&day).unwrap(), vec![Some(86_400_000_000)]);
}

#[test]
fn a_coordinator_steps_a_temporal_filter_when_rows_are_due_without_input() {
    use crate::{Coordinator, Graph, Input, SourceBinding};
    use weir_common::ObjectId;
    let s = schema(S);
    let mut graph = Graph::new(1);
    let f = filter(&[
        (TimeComparison::After, -10),
        (TimeComparison::AtOrBefore, 0),
    ]);
    graph.add(Box::new(f), vec![Input::Source(0)]).unwrap();
    let mut coordinator = Coordinator::new();
    coordinator.set_time(100);
    let source = SourceBinding {
        object: ObjectId(1),
        schema: s.clone(),
    };
    coordinator
        .deploy(ObjectId(2), graph, vec![source], s, &|_| {
            Ok(Some(change(S, "95 1 +1; 105 2 +1")))
        })
        .unwrap();
    let shown = |c: &Coordinator| {
        render(
            &c.view().projections[&ObjectId(2)]
                .result
                .as_inserts()
                .unwrap(),
        )
    };
    assert_eq!(shown(&coordinator), vec!["95 1 +1"]);
    assert_eq!(coordinator.next_due(), Some(105));
    coordinator.set_time(104);
    coordinator.run_epoch().unwrap();
    assert_eq!(shown(&coordinator), vec!["95 1 +1"]);
    // Due: stepped with no input, one row in and one out.
    coordinator.set_time(105);
    coordinator.run_epoch().unwrap();
    assert_eq!(coordinator.view().time, 105);
    assert_eq!(shown(&coordinator), vec!["105 2 +1"]);
    // Time never moves back.
    coordinator.set_time(50);
    coordinator.run_epoch().unwrap();
    assert_eq!(coordinator.view().time, 105);
    coordinator.set_time(115);
    coordinator.run_epoch().unwrap();
    assert_eq!(shown(&coordinator), Vec::<String>::new());
    assert_eq!(coordinator.next_due(), None);
}
