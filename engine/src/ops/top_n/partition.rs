//! One partition of [`super::TopN`]: its rows in order, split into three
//! consecutive regions so that the output is one of them.
//!
//! - `SKIP`: the first `offset` rows (`OFFSET`), never output;
//! - `WINDOW`: the rows output: the next `limit` rows, or for `RANK` every
//!   row ranked `<= limit` (whole groups of equal sort keys);
//! - `REST`: every later row, kept so that a retraction in the first two can
//!   pull the next row in; empty over an input that only inserts.
//!
//! A row is an *element* `(sort key, row)` with a count; elements are
//! ordered by sort key, then row, so ties are broken the same way every time.
//! Every element of a region sorts at or before every element of the next
//! one; an element whose copies straddle a boundary is in both regions with
//! part of its count. After each insert or removal [`Partition::normalize`]
//! moves elements across the two boundaries until each region holds what
//! its definition says, so the regions are a function of the rows alone: a
//! unit change moves at most one element per boundary (a whole group for
//! `RANK`), each move O(log rows).

use std::collections::BTreeMap;

use crate::rows::RowBytes;

/// `(sort key, row)`: the order of a partition's rows.
pub(super) type Element = (RowBytes, RowBytes);

/// Where the window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// `LIMIT`/`OFFSET` and `ROW_NUMBER()`: by position.
    Positions { skip: i64, window: i64 },
    /// `RANK()`: rows ranked `<= limit`, with all their ties.
    Rank { limit: i64 },
}

const SKIP: usize = 0;
const WINDOW: usize = 1;
const REST: usize = 2;

#[derive(Default)]
struct Region {
    rows: BTreeMap<Element, i64>,
    /// The sum of the counts.
    count: i64,
}

impl Region {
    fn count_of(&self, element: &Element) -> i64 {
        self.rows.get(element).copied().unwrap_or(0)
    }

    fn last(&self) -> Option<&Element> {
        self.rows.last_key_value().map(|(e, _)| e)
    }
}

/// The window's changes as `(row, weight)`, for an output without numbers.
pub(super) type WindowChange = Vec<(RowBytes, i64)>;

/// One output row as `(row, number, weight)`.
pub(super) type Numbered = (RowBytes, i64, i64);

pub(super) struct Partition {
    /// The encoded partition key.
    pub key: RowBytes,
    regions: [Region; 3],
    /// For [`Cut::Rank`]: how many rows of the window have each sort key.
    groups: BTreeMap<RowBytes, i64>,
    /// The least element the current step changes (an index into its rows).
    pub first_change: Option<usize>,
}

impl Partition {
    pub fn new(key: RowBytes) -> Self {
        Self {
            key,
            regions: Default::default(),
            groups: BTreeMap::new(),
            first_change: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.regions.iter().all(|r| r.rows.is_empty())
    }

    /// How many copies of `element` the partition keeps.
    pub fn count_of(&self, element: &Element) -> i64 {
        self.regions.iter().map(|r| r.count_of(element)).sum()
    }

    /// Every kept element with its count, in order (a straddling element
    /// once).
    pub fn elements(&self) -> impl Iterator<Item = (&Element, i64)> {
        let mut merged: Vec<(&Element, i64)> = Vec::new();
        for region in &self.regions {
            for (element, &count) in &region.rows {
                match merged.last_mut() {
                    Some((last, total)) if *last == element => *total += count,
                    _ => merged.push((element, count)),
                }
            }
        }
        merged.into_iter()
    }

    /// Over an input that only inserts: whether `element` would be kept,
    /// i.e. enter the skip region or the window (a row that would not can
    /// never enter, since nothing before it leaves).
    pub fn would_keep(&self, cut: Cut, element: &Element) -> bool {
        match cut {
            Cut::Positions { skip, window } => {
                let kept = self.regions[SKIP].count + self.regions[WINDOW].count;
                if kept < skip.saturating_add(window) {
                    return true;
                }
                let last = self.regions[WINDOW]
                    .last()
                    .or_else(|| self.regions[SKIP].last());
                last.is_some_and(|last| element < last)
            }
            Cut::Rank { limit } => {
                self.regions[WINDOW].count < limit
                    || self
                        .groups
                        .last_key_value()
                        .is_some_and(|(last, _)| element.0 <= *last)
            }
        }
    }

    /// Adds `n` copies of `element`; the window's changes go to `change`.
    pub fn insert(&mut self, cut: Cut, element: &Element, n: i64, change: &mut WindowChange) {
        // The first region that has an element at or after it keeps the
        // regions ordered; `normalize` then moves the boundaries.
        let region = (SKIP..REST)
            .find(|&r| self.regions[r].last().is_some_and(|last| element <= last))
            .unwrap_or(REST);
        self.adjust(cut, region, element, n, change);
        self.normalize(cut, change);
    }

    /// Removes `n` copies of `element`, which the caller checked are kept
    /// ([`Partition::count_of`]), the last ones first.
    pub fn remove(&mut self, cut: Cut, element: &Element, n: i64, change: &mut WindowChange) {
        let mut left = n;
        for region in [REST, WINDOW, SKIP] {
            let here = left.min(self.regions[region].count_of(element));
            if here > 0 {
                self.adjust(cut, region, element, -here, change);
                left -= here;
            }
        }
        debug_assert_eq!(left, 0, "removed more copies than kept");
        self.normalize(cut, change);
    }

    /// Empties the rest region (over an input that only inserts, rows pushed
    /// out of the window can never come back); returns what it held.
    pub fn drain_rest(&mut self) -> Vec<Element> {
        let rest = std::mem::take(&mut self.regions[REST]);
        rest.rows.into_keys().collect()
    }

    /// Pushes the window's elements from `from` on (every element at or
    /// after it), each with its number and `weight` (+1 or -1) per copy.
    /// Costs O(those elements), which are exactly the rows a change at
    /// `from` can renumber.
    pub fn numbered_from(&self, cut: Cut, from: &Element, weight: i64, out: &mut Vec<Numbered>) {
        let window = &self.regions[WINDOW];
        let suffix = window.rows.range::<Element, _>(from..).rev();
        match cut {
            Cut::Positions { .. } => {
                // The window follows the skip region: positions from 1.
                let mut position = self.regions[SKIP].count + window.count;
                for ((_, row), &count) in suffix {
                    for copy in 0..count {
                        out.push((row.clone(), position - copy, weight));
                    }
                    position -= count;
                }
            }
            Cut::Rank { .. } => {
                // A group's rank is 1 + the rows before it: the window's
                // count minus the rows of this group and every later one.
                let mut after = 0;
                let mut group: Option<(&RowBytes, i64)> = None;
                for ((sort_key, row), &count) in suffix {
                    let rank = match group {
                        Some((key, rank)) if key == sort_key => rank,
                        _ => {
                            if let Some((key, _)) = group {
                                after += self.groups[key];
                            }
                            let rank = window.count - after - self.groups[sort_key] + 1;
                            group = Some((sort_key, rank));
                            rank
                        }
                    };
                    out.push((row.clone(), rank, weight * count));
                }
            }
        }
    }

    /// Adds `n` copies (removes `-n`) of `element` to one region.
    fn adjust(
        &mut self,
        cut: Cut,
        region: usize,
        element: &Element,
        n: i64,
        change: &mut WindowChange,
    ) {
        let rows = &mut self.regions[region];
        rows.count += n;
        match rows.rows.get_mut(element) {
            Some(count) => {
                *count += n;
                if *count == 0 {
                    rows.rows.remove(element);
                }
            }
            None => {
                rows.rows.insert(element.clone(), n);
            }
        }
        if region == WINDOW {
            change.push((element.1.clone(), n));
            if let Cut::Rank { .. } = cut {
                let group = self.groups.entry(element.0.clone()).or_default();
                *group += n;
                if *group == 0 {
                    self.groups.remove(&element.0);
                }
            }
        }
    }

    fn shift(
        &mut self,
        cut: Cut,
        element: &Element,
        n: i64,
        from: usize,
        to: usize,
        change: &mut WindowChange,
    ) {
        self.adjust(cut, from, element, -n, change);
        self.adjust(cut, to, element, n, change);
    }

    /// Moves elements across the boundaries until every region holds what
    /// its definition says (the regions being ordered).
    fn normalize(&mut self, cut: Cut, change: &mut WindowChange) {
        match cut {
            Cut::Positions { skip, window } => {
                for (region, capacity) in [(SKIP, skip), (WINDOW, window)] {
                    // Too many: the last copies go to the next region.
                    while self.regions[region].count > capacity {
                        let (element, &count) =
                            self.regions[region].rows.last_key_value().expect("rows");
                        let n = count.min(self.regions[region].count - capacity);
                        let element = element.clone();
                        self.shift(cut, &element, n, region, region + 1, change);
                    }
                    // Too few: pull the first copies of a later region.
                    while self.regions[region].count < capacity {
                        let Some(from) =
                            (region + 1..=REST).find(|&r| !self.regions[r].rows.is_empty())
                        else {
                            break;
                        };
                        let (element, &count) =
                            self.regions[from].rows.first_key_value().expect("rows");
                        let n = count.min(capacity - self.regions[region].count);
                        let element = element.clone();
                        self.shift(cut, &element, n, from, region, change);
                    }
                }
            }
            Cut::Rank { limit } => {
                // The last group leaves while the rows before it reach the limit.
                while let Some((sort_key, &count)) = self.groups.last_key_value()
                    && self.regions[WINDOW].count - count >= limit
                {
                    let first = (sort_key.clone(), RowBytes::from(&[][..]));
                    let group: Vec<(Element, i64)> = self.regions[WINDOW]
                        .rows
                        .range(first..)
                        .map(|(e, &c)| (e.clone(), c))
                        .collect();
                    for (element, count) in group {
                        self.shift(cut, &element, count, WINDOW, REST, change);
                    }
                }
                // The next rows enter while the window is short of the limit,
                // and so do ties of its last group.
                while let Some((element, &count)) = self.regions[REST].rows.first_key_value() {
                    let tie = self
                        .groups
                        .last_key_value()
                        .is_some_and(|(last, _)| *last == element.0);
                    if self.regions[WINDOW].count >= limit && !tie {
                        break;
                    }
                    let element = element.clone();
                    self.shift(cut, &element, count, REST, WINDOW, change);
                }
            }
        }
    }
}
