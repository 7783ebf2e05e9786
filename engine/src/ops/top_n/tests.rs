//! The top-N operator's unit tests, and a differential test of it against
//! the recompute implementation ([`super::recompute::Recompute`]).

use datafusion::physical_expr::expressions::col;

use super::*;
use crate::testing::{change, render, schema};

const INPUT: &str = "g text, x int";

fn top(numbering: Numbering, partitioned: bool, offset: usize, limit: usize) -> TopN {
    let input = schema(INPUT);
    let output = match numbering {
        Numbering::None => input.clone(),
        _ => schema("g text, x int, n int"),
    };
    let desc = SortOptions {
        descending: true,
        nulls_first: true,
    };
    TopN::new(TopNSpec {
        partition_by: if partitioned {
            vec![col("g", &input).unwrap()]
        } else {
            vec![]
        },
        order_by: vec![(col("x", &input).unwrap(), desc)],
        input_schema: input,
        offset,
        limit,
        numbering,
        output_schema: output,
    })
    .unwrap()
}

fn step(t: &mut TopN, rows: &str) -> Vec<String> {
    render(&t.step(&[change(INPUT, rows)]).unwrap())
}

#[test]
fn order_by_limit_offset_follows_deletes_of_the_leaders() {
    // ORDER BY x DESC LIMIT 2 OFFSET 1
    let mut t = top(Numbering::None, false, 1, 2);
    assert_eq!(
        step(&mut t, "a 1 +1; a 5 +1; b 3 +1; b 4 +1"),
        vec!["b 3 +1", "b 4 +1"]
    );
    assert_eq!(step(&mut t, "a 5 -1"), vec!["a 1 +1", "b 4 -1"]);
}

#[test]
fn row_number_per_partition() {
    let mut t = top(Numbering::RowNumber, true, 0, 2);
    assert_eq!(
        step(&mut t, "a 1 +1; a 2 +1; a 3 +1; b 7 +1"),
        vec!["a 2 2 +1", "a 3 1 +1", "b 7 1 +1"]
    );
    // A new leader in a renumbers a; b is untouched.
    assert_eq!(
        step(&mut t, "a 9 +1"),
        vec!["a 2 2 -1", "a 3 1 -1", "a 3 2 +1", "a 9 1 +1"]
    );
}

#[test]
fn rank_keeps_ties() {
    let mut t = top(Numbering::Rank, false, 0, 1);
    assert_eq!(
        step(&mut t, "a 5 +1; b 5 +1; c 4 +1"),
        vec!["a 5 1 +1", "b 5 1 +1"]
    );
    assert_eq!(step(&mut t, "b 5 -1"), vec!["b 5 1 -1"]);
}

#[test]
fn float_partitions_compare_by_value() {
    // ROW_NUMBER() OVER (PARTITION BY p ORDER BY x DESC) <= 1
    const FLOATS: &str = "p float, x int";
    let input = schema(FLOATS);
    let mut t = TopN::new(TopNSpec {
        partition_by: vec![col("p", &input).unwrap()],
        order_by: vec![(col("x", &input).unwrap(), SortOptions::default())],
        input_schema: input,
        offset: 0,
        limit: 1,
        numbering: Numbering::RowNumber,
        output_schema: schema("p float, x int, n int"),
    })
    .unwrap();
    // -0 and 0 are one partition, and so are NaN and -NaN.
    let out = t
        .step(&[change(FLOATS, "0 1 +1; -0 2 +1; NaN 3 +1; -NaN 4 +1")])
        .unwrap();
    assert_eq!(render(&out), vec!["0.0 1 1 +1", "NaN 3 1 +1"]);
}

#[test]
fn snapshot_and_restore_continue_where_they_left_off() {
    let mut t = top(Numbering::RowNumber, true, 0, 2);
    t.step(&[change(INPUT, "a 1 +1; a 2 +1; b 3 +1")]).unwrap();
    let mut restored = top(Numbering::RowNumber, true, 0, 2);
    restored.restore(&t.snapshot().unwrap()).unwrap();
    let next = change(INPUT, "a 0 +1; a 2 -1");
    assert_eq!(
        render(&restored.step(std::slice::from_ref(&next)).unwrap()),
        render(&t.step(&[next]).unwrap())
    );
}

#[test]
fn limit_changes_only_at_the_boundary() {
    // ORDER BY x DESC LIMIT 2
    let mut t = top(Numbering::None, false, 0, 2);
    assert_eq!(
        step(&mut t, "a 5 +1; a 4 +1; a 3 +1"),
        vec!["a 4 +1", "a 5 +1"]
    );
    // After the second row: nothing.
    assert!(step(&mut t, "b 1 +1").is_empty());
    // Inside: itself, and the row it pushes out.
    assert_eq!(step(&mut t, "b 6 +1"), vec!["a 4 -1", "b 6 +1"]);
    // A retraction inside pulls the next row in.
    assert_eq!(step(&mut t, "a 5 -1"), vec!["a 4 +1", "a 5 -1"]);
    // Copies count as rows: two copies of a new leader fill the window.
    assert_eq!(step(&mut t, "c 9 +2"), vec!["a 4 -1", "b 6 -1", "c 9 +2"]);
    assert_eq!(step(&mut t, "c 9 -1"), vec!["b 6 +1", "c 9 -1"]);
}

#[test]
fn row_number_renumbers_only_the_rows_after_a_change() {
    let mut t = top(Numbering::RowNumber, false, 0, 4);
    assert_eq!(
        step(&mut t, "a 9 +1; a 7 +1; a 5 +1; a 3 +1; a 1 +1"),
        vec!["a 3 4 +1", "a 5 3 +1", "a 7 2 +1", "a 9 1 +1"]
    );
    // 6 lands third: 9 and 7 keep their numbers, 5 moves, 3 falls out.
    assert_eq!(
        step(&mut t, "a 6 +1"),
        vec!["a 3 4 -1", "a 5 3 -1", "a 5 4 +1", "a 6 3 +1"]
    );
    // Retracting the leader renumbers every row and pulls 3 back in.
    assert_eq!(
        step(&mut t, "a 9 -1"),
        vec![
            "a 3 4 +1", "a 5 3 +1", "a 5 4 -1", "a 6 2 +1", "a 6 3 -1", "a 7 1 +1", "a 7 2 -1",
            "a 9 1 -1"
        ]
    );
    // A row after the window changes nothing.
    assert!(step(&mut t, "a 1 -1; a 0 +1").is_empty());
}

#[test]
fn rank_pulls_in_ties_and_drops_whole_groups() {
    // RANK() OVER (ORDER BY x DESC) <= 2
    let mut t = top(Numbering::Rank, false, 0, 2);
    assert_eq!(
        step(&mut t, "a 5 +1; b 4 +1; c 4 +1; d 3 +1"),
        vec!["a 5 1 +1", "b 4 2 +1", "c 4 2 +1"]
    );
    // A tie of the last group joins it.
    assert_eq!(step(&mut t, "e 4 +1"), vec!["e 4 2 +1"]);
    // A new leader pushes the whole group of 4s to rank 3.
    assert_eq!(
        step(&mut t, "f 6 +1"),
        vec![
            "a 5 1 -1", "a 5 2 +1", "b 4 2 -1", "c 4 2 -1", "e 4 2 -1", "f 6 1 +1"
        ]
    );
    // Without 5, the 4s are second again.
    assert_eq!(
        step(&mut t, "a 5 -1"),
        vec!["a 5 2 -1", "b 4 2 +1", "c 4 2 +1", "e 4 2 +1"]
    );
}

#[test]
fn over_append_only_keeps_the_window_and_refuses_retractions() {
    let mut t = top(Numbering::RowNumber, true, 0, 2).over_append_only();
    assert_eq!(t.retention(), "first 2 rows");
    assert_eq!(top(Numbering::None, false, 1, 2).retention(), "all rows");
    let rows: Vec<String> = (0..50).map(|x| format!("a {x} +1; b {x} +1")).collect();
    t.step(&[change(INPUT, &rows.join("; "))]).unwrap();
    t.take_state_changes().unwrap();
    // Two rows per partition are kept.
    assert_eq!(t.state_entries().unwrap().len(), 4);
    // A row after the window is dropped without a state change.
    assert!(step(&mut t, "a 3 +1").is_empty());
    assert!(t.take_state_changes().unwrap().is_empty());
    // One inside pushes a row out of the state.
    assert_eq!(
        step(&mut t, "a 60 +1"),
        vec!["a 48 2 -1", "a 49 1 -1", "a 49 2 +1", "a 60 1 +1"]
    );
    let changes = t.take_state_changes().unwrap();
    assert_eq!(changes.len(), 2);
    assert_eq!(changes.iter().filter(|e| e.value.is_none()).count(), 1);
    assert!(t.step(&[change(INPUT, "a 60 -1")]).is_err());

    let mut ranked = top(Numbering::Rank, false, 0, 1).over_append_only();
    assert_eq!(ranked.retention(), "rows ranked <= 1");
    step(&mut ranked, "a 1 +1; b 2 +1; c 2 +1");
    assert_eq!(ranked.state_entries().unwrap().len(), 2);
}

#[test]
fn structure_names_the_layout_and_append_only() {
    let t = top(Numbering::None, false, 0, 1);
    assert!(t.structure().starts_with("top_n/2("));
    assert_ne!(
        t.structure(),
        top(Numbering::None, false, 0, 1)
            .over_append_only()
            .structure()
    );
}

#[test]
fn old_output_entries_are_refused() {
    let mut t = top(Numbering::None, false, 0, 1);
    let output = StateEntry::set(state_key(1, &[], b"row"), count_value(1));
    assert!(t.apply_state_entries(&[output]).is_err());
}

pub(crate) mod differential {
    //! Random inserts, updates and deletes (ties on the sort key, NULLs in
    //! it, copies of a row, partitions that empty out and come back) through
    //! `LIMIT`/`OFFSET`, `ROW_NUMBER()` and `RANK()` with every NULLS/DESC
    //! combination, against recomputing the changed partitions; and the
    //! state a replica rebuilds from the changed entries, against the full
    //! state. The same over inserts only, with the window-only state.

    use std::collections::BTreeMap;

    use super::super::recompute::Recompute;
    use super::*;
    use crate::operator::split_state_key;
    use crate::testing::{Rng, accumulate};

    const SPEC: &str = "g text, x int, y int";
    const G: &[&str] = &["a", "b", "null"];
    const X: &[&str] = &["null", "0", "1", "2", "3"];
    const Y: &[&str] = &["null", "1", "2"];

    pub(crate) struct Case {
        numbering: Numbering,
        pub(crate) partitioned: bool,
        offset: usize,
        limit: usize,
        /// Sort by x, then by y if there are options for it.
        x: SortOptions,
        y: Option<SortOptions>,
    }

    impl Case {
        pub(crate) fn random(rng: &mut Rng) -> Self {
            let options = |rng: &mut Rng| SortOptions {
                descending: rng.below(2) == 0,
                nulls_first: rng.below(2) == 0,
            };
            Self {
                numbering: [Numbering::None, Numbering::RowNumber, Numbering::Rank][rng.below(3)],
                partitioned: rng.below(2) == 0,
                offset: [0, 0, 1, 2][rng.below(4)],
                limit: [0, 1, 2, 3, 5][rng.below(5)],
                x: options(rng),
                y: (rng.below(2) == 0).then(|| options(rng)),
            }
        }

        fn spec(&self) -> TopNSpec {
            let input = schema(SPEC);
            let output = match self.numbering {
                Numbering::None => input.clone(),
                _ => schema("g text, x int, y int, n int"),
            };
            let mut order_by = vec![(col("x", &input).unwrap(), self.x)];
            if let Some(y) = self.y {
                order_by.push((col("y", &input).unwrap(), y));
            }
            TopNSpec {
                partition_by: if self.partitioned {
                    vec![col("g", &input).unwrap()]
                } else {
                    vec![]
                },
                order_by,
                input_schema: input,
                offset: self.offset,
                limit: self.limit,
                numbering: self.numbering,
                output_schema: output,
            }
        }

        pub(crate) fn top_n(&self, append_only: bool) -> TopN {
            let t = TopN::new(self.spec()).unwrap();
            if append_only { t.over_append_only() } else { t }
        }
    }

    /// Random changes that retract more often in some phases than in others,
    /// so partitions empty out and fill again; only inserts when
    /// `append_only`.
    pub(crate) struct Input {
        pub(crate) contents: BTreeMap<String, i64>,
        pub(crate) append_only: bool,
    }

    impl Input {
        pub(crate) fn next(&mut self, rng: &mut Rng, step: usize) -> ChangeBatch {
            let retract_in_10 = if self.append_only {
                0
            } else {
                [2, 5, 8][(step / 15) % 3]
            };
            let mut delta: BTreeMap<String, i64> = BTreeMap::new();
            for _ in 0..rng.below(6) {
                let live: Vec<(&String, i64)> = self
                    .contents
                    .iter()
                    .map(|(row, &count)| (row, count + delta.get(row).copied().unwrap_or(0)))
                    .filter(|&(_, count)| count > 0)
                    .collect();
                if !live.is_empty() && rng.below(10) < retract_in_10 {
                    let (row, count) = live[rng.below(live.len())];
                    // One copy, or all of them.
                    let n = if rng.below(3) == 0 { count } else { 1 };
                    *delta.entry(row.clone()).or_default() -= n;
                } else {
                    let row = [G, X, Y].map(|cells| cells[rng.below(cells.len())]);
                    *delta.entry(row.join(" ")).or_default() += 1 + (rng.below(4) == 0) as i64;
                }
            }
            delta.retain(|_, w| *w != 0);
            for (row, w) in &delta {
                *self.contents.entry(row.clone()).or_default() += w;
            }
            self.contents.retain(|_, c| *c != 0);
            let text: Vec<String> = delta.iter().map(|(r, w)| format!("{r} {w:+}")).collect();
            change(SPEC, &text.join("; "))
        }
    }

    fn sorted(mut entries: Vec<StateEntry>) -> Vec<StateEntry> {
        entries.sort();
        entries
    }

    /// Rows kept per partition, from the state entries.
    fn kept(t: &TopN) -> BTreeMap<Vec<u8>, i64> {
        let mut kept = BTreeMap::new();
        for e in t.state_entries().unwrap() {
            let key = split_state_key(&e.key).unwrap();
            let count = i64::from_le_bytes(e.value.unwrap()[..].try_into().unwrap());
            *kept.entry(key.distribution.to_vec()).or_default() += count;
        }
        kept
    }

    fn run(seed: u64, append_only: bool) {
        let mut rng = Rng::new(seed);
        let case = Case::random(&mut rng);
        let mut input = Input {
            contents: BTreeMap::new(),
            append_only,
        };
        let mut incremental = case.top_n(append_only);
        let mut recomputed = Recompute::new(case.spec()).unwrap();
        let mut replica = case.top_n(append_only);
        let mut result = BTreeMap::new();
        let mut expected = BTreeMap::new();
        let context = format!(
            "seed {seed} {:?} partitioned={} offset {} limit {} x {:?} y {:?}",
            case.numbering, case.partitioned, case.offset, case.limit, case.x, case.y
        );
        for step in 0..60 {
            let change = input.next(&mut rng, step);
            accumulate(
                &mut result,
                &incremental.step(std::slice::from_ref(&change)).unwrap(),
            );
            accumulate(
                &mut expected,
                &recomputed.step(std::slice::from_ref(&change)).unwrap(),
            );
            assert_eq!(
                result,
                expected,
                "{context} step {step} after {:?}",
                render(&change)
            );
            replica
                .apply_state_entries(&incremental.take_state_changes().unwrap())
                .unwrap();
            assert_eq!(
                sorted(replica.state_entries().unwrap()),
                sorted(incremental.state_entries().unwrap()),
                "{context} step {step}: changed entries rebuild the state"
            );
            if append_only {
                let kept = kept(&incremental);
                match case.numbering {
                    // The window and its ties: exactly the output.
                    Numbering::Rank => {
                        assert_eq!(kept.values().sum::<i64>(), result.values().sum::<i64>())
                    }
                    _ => assert!(
                        kept.values()
                            .all(|&n| n <= (case.offset + case.limit) as i64),
                        "{context} step {step}: {kept:?}"
                    ),
                }
            }
        }
        // The replica continues exactly as the original.
        let change = input.next(&mut rng, 60);
        assert_eq!(
            render(&replica.step(std::slice::from_ref(&change)).unwrap()),
            render(&incremental.step(&[change]).unwrap()),
            "{context}"
        );
    }

    #[test]
    fn top_n_equals_recomputing_the_partitions() {
        for seed in 0..400 {
            run(seed, false);
        }
    }

    #[test]
    fn over_inserts_only_the_window_is_enough() {
        for seed in 0..200 {
            run(seed, true);
        }
    }
}
