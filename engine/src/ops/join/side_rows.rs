//! One side's distinct rows under one join key, with a value per row.
//!
//! A join over a wide key (a price, an id) holds one or two rows per key on
//! most keys. A hash map per key and side cost a table allocation for each
//! (and the operator's memory grew by those tables: zeroing fresh pages for
//! them was a fifth of a join's time on Nexmark q7), so a side starts as a
//! short list searched linearly, held inline while it has one row, and
//! becomes a hash map only past [`LIST_MAX`] rows.

use hashbrown::HashMap;
use smallvec::SmallVec;

use crate::rows::RowBytes;

/// The longest list; one more row turns the side into a hash map.
const LIST_MAX: usize = 8;

pub(super) enum SideRows<V> {
    List(SmallVec<[(RowBytes, V); 1]>),
    Map(HashMap<RowBytes, V>),
}

impl<V> Default for SideRows<V> {
    fn default() -> Self {
        SideRows::List(SmallVec::new())
    }
}

impl<V> SideRows<V> {
    pub(super) fn get(&self, row: &[u8]) -> Option<&V> {
        match self {
            SideRows::List(list) => list.iter().find(|(r, _)| r.as_ref() == row).map(|(_, v)| v),
            SideRows::Map(map) => map.get(row),
        }
    }

    pub(super) fn get_mut(&mut self, row: &[u8]) -> Option<&mut V> {
        match self {
            SideRows::List(list) => list
                .iter_mut()
                .find(|(r, _)| r.as_ref() == row)
                .map(|(_, v)| v),
            SideRows::Map(map) => map.get_mut(row),
        }
    }

    /// Sets `row`'s value, adding the row if it is absent.
    pub(super) fn insert(&mut self, row: RowBytes, value: V) {
        match self {
            SideRows::List(list) => {
                if let Some(slot) = list.iter_mut().find(|(r, _)| *r == row) {
                    slot.1 = value;
                } else if list.len() < LIST_MAX {
                    list.push((row, value));
                } else {
                    let mut map: HashMap<RowBytes, V> = list.drain(..).collect();
                    map.insert(row, value);
                    *self = SideRows::Map(map);
                }
            }
            SideRows::Map(map) => {
                map.insert(row, value);
            }
        }
    }

    pub(super) fn remove(&mut self, row: &[u8]) {
        match self {
            SideRows::List(list) => {
                if let Some(i) = list.iter().position(|(r, _)| r.as_ref() == row) {
                    list.swap_remove(i);
                }
            }
            SideRows::Map(map) => {
                map.remove(row);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            SideRows::List(list) => list.is_empty(),
            SideRows::Map(map) => map.is_empty(),
        }
    }

    /// Every row with its value, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&RowBytes, &V)> {
        let (list, map) = match self {
            SideRows::List(list) => (Some(list.iter().map(|(r, v)| (r, v))), None),
            SideRows::Map(map) => (None, Some(map.iter())),
        };
        list.into_iter().flatten().chain(map.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: u8) -> RowBytes {
        RowBytes::from(vec![i, i])
    }

    #[test]
    fn a_side_keeps_its_rows_across_the_change_to_a_map_and_back_down() {
        let mut side = SideRows::default();
        for i in 0..(LIST_MAX as u8 + 4) {
            side.insert(row(i), i64::from(i));
            // Setting a present row replaces its value, in either form.
            side.insert(row(0), 100);
        }
        assert!(matches!(side, SideRows::Map(_)));
        assert_eq!(side.get(&row(0)), Some(&100));
        assert_eq!(side.get(&row(5)), Some(&5));
        *side.get_mut(&row(5)).unwrap() += 1;
        assert_eq!(side.get(&row(5)), Some(&6));
        for i in 0..(LIST_MAX as u8 + 4) {
            side.remove(&row(i));
        }
        assert!(side.is_empty());
        assert_eq!(side.iter().count(), 0);

        let mut side = SideRows::default();
        side.insert(row(1), 1);
        side.insert(row(2), 2);
        side.remove(&row(1));
        side.remove(&row(9));
        assert!(matches!(side, SideRows::List(_)));
        let rows: Vec<_> = side.iter().map(|(r, v)| (r.clone(), *v)).collect();
        assert_eq!(rows, [(row(2), 2)]);
        assert_eq!(side.get(&row(1)), None);
    }
}
