//! [`Values`]: the values a call keeps per group, each with its count.
//!
//! min and max need their values in order (the extreme is the first or
//! the last, and retracting it finds the next), so they keep an ordered
//! map; over an input that never retracts only the extreme is kept,
//! inline, so a new extreme allocates nothing. DISTINCT never reads an
//! order, only whether a value is there, so it keeps a hash map whose
//! short keys (an integer's row bytes are 9) live inline, without an
//! allocation or a chain of byte comparisons per lookup.

use std::collections::BTreeMap;

use smallvec::SmallVec;

/// A value's `arrow_row` bytes, inline up to 16 bytes.
pub(super) type InlineKey = SmallVec<[u8; 16]>;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Values {
    Ordered(BTreeMap<Box<[u8]>, i64>),
    Hashed(hashbrown::HashMap<InlineKey, i64>),
    /// min/max over an input that never retracts: the extreme value, with
    /// its count.
    Extreme(Option<(InlineKey, i64)>),
}

impl Default for Values {
    fn default() -> Self {
        Self::Ordered(BTreeMap::new())
    }
}

impl Values {
    pub fn hashed() -> Self {
        Self::Hashed(hashbrown::HashMap::new())
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Self::Ordered(map) => map.is_empty(),
            Self::Hashed(map) => map.is_empty(),
            Self::Extreme(extreme) => extreme.is_none(),
        }
    }

    /// The count of `value` (`None`: not kept).
    pub fn get(&self, value: &[u8]) -> Option<i64> {
        match self {
            Self::Ordered(map) => map.get(value).copied(),
            Self::Hashed(map) => map.get(value).copied(),
            Self::Extreme(extreme) => extreme
                .as_ref()
                .filter(|(kept, _)| kept.as_slice() == value)
                .map(|(_, count)| *count),
        }
    }

    /// Sets the count of `value`; 0 removes it. The extreme of a call
    /// over an input that never retracts is replaced by any value set.
    pub fn set(&mut self, value: &[u8], count: i64) {
        match self {
            Self::Extreme(extreme) if count == 0 => {
                if extreme
                    .as_ref()
                    .is_some_and(|(kept, _)| kept.as_slice() == value)
                {
                    *extreme = None;
                }
            }
            Self::Extreme(extreme) => *extreme = Some((InlineKey::from_slice(value), count)),
            Self::Ordered(map) if count == 0 => {
                map.remove(value);
            }
            Self::Ordered(map) => match map.get_mut(value) {
                Some(c) => *c = count,
                None => {
                    map.insert(value.into(), count);
                }
            },
            Self::Hashed(map) if count == 0 => {
                map.remove(value);
            }
            Self::Hashed(map) => match map.get_mut(value) {
                Some(c) => *c = count,
                None => {
                    map.insert(InlineKey::from_slice(value), count);
                }
            },
        }
    }

    /// For a set over an input that never retracts, whose counts are
    /// masks of the calls that saw each value ([`super::calls::Shared`];
    /// a call alone is bit 0): marks `value` seen by the calls in `mask`,
    /// with one lookup, and returns those that had not seen it.
    pub fn add_seen(&mut self, value: &[u8], mask: u64) -> u64 {
        let seen = match self {
            Self::Ordered(map) => map.get_mut(value),
            Self::Hashed(map) => map.get_mut(value),
            Self::Extreme(extreme) => extreme
                .as_mut()
                .filter(|(kept, _)| kept.as_slice() == value)
                .map(|(_, count)| count),
        };
        if let Some(seen) = seen {
            let new = mask & !(*seen as u64);
            *seen |= new as i64;
            return new;
        }
        match self {
            Self::Ordered(map) => {
                map.insert(value.into(), mask as i64);
            }
            Self::Hashed(map) => {
                map.insert(InlineKey::from_slice(value), mask as i64);
            }
            Self::Extreme(extreme) => *extreme = Some((InlineKey::from_slice(value), mask as i64)),
        }
        mask
    }

    /// Every kept value with its count, in no particular order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], i64)> + '_> {
        match self {
            Self::Ordered(map) => Box::new(map.iter().map(|(v, &c)| (v.as_ref(), c))),
            Self::Hashed(map) => Box::new(map.iter().map(|(v, &c)| (v.as_slice(), c))),
            Self::Extreme(extreme) => Box::new(extreme.iter().map(|(v, c)| (v.as_slice(), *c))),
        }
    }

    /// min's or max's value (`None`: no value; `Err`: the values are
    /// DISTINCT's, unordered).
    pub fn extreme(&self, max: bool) -> Result<Option<&[u8]>, ()> {
        match self {
            Self::Ordered(map) if max => Ok(map.last_key_value().map(|(v, _)| v.as_ref())),
            Self::Ordered(map) => Ok(map.first_key_value().map(|(v, _)| v.as_ref())),
            Self::Extreme(extreme) => Ok(extreme.as_ref().map(|(v, _)| v.as_slice())),
            Self::Hashed(_) => Err(()),
        }
    }
}
