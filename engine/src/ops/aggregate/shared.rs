//! DISTINCT calls that share one set of values per group
//! ([`Shared`]): finding them, folding rows into their set, and reading
//! the set back as the per-call `VALUE` entries a checkpoint holds. The
//! entries are the same as when each call kept its own set, so a
//! checkpoint reads back either way.

use weir_common::ChangeBatch;

use super::calls::{Call, Shared, Strategy, retraction_over_append_only};
use super::{Aggregate, Group, NAME, VALUE};
use crate::EngineError;
use crate::operator::{mark_changed, unreadable};

/// The most calls one set serves: a value's mask is an `i64`, kept
/// positive.
const MAX_SHARING: usize = 63;

impl Aggregate {
    /// Puts the DISTINCT calls with equal arguments in families that share
    /// a set; for an input that never retracts, whose sets keep no counts.
    pub(super) fn share_distinct_sets(&mut self) {
        let mut families: Vec<Vec<usize>> = Vec::new();
        for (c, call) in self.calls.iter().enumerate() {
            if !matches!(call.strategy, Strategy::Distinct(_)) {
                continue;
            }
            let args = call.call.function.expressions();
            let family = families.iter_mut().find(|f| {
                f.len() < MAX_SHARING && self.calls[f[0]].call.function.expressions() == args
            });
            match family {
                Some(family) => family.push(c),
                None => families.push(vec![c]),
            }
        }
        families.retain(|f| f.len() > 1);
        for family in &families {
            for (bit, &c) in family.iter().enumerate() {
                self.calls[c].shared = Some(Shared {
                    leader: family[0],
                    bit: bit as u32,
                });
            }
        }
        self.families = families;
    }

    /// Folds `input` (rows in `slots` with `weights`) into the set of
    /// family `f`: one lookup per row for all its calls; each call that had
    /// not seen the row's value adds it to its accumulators and records its
    /// `VALUE` key as changed.
    pub(super) fn fold_family(
        &mut self,
        f: usize,
        input: &ChangeBatch,
        slots: &[u32],
        weights: &[i64],
        scratch: &mut Vec<u8>,
    ) -> Result<(), EngineError> {
        let members = &self.families[f];
        let prepared = members
            .iter()
            .map(|&c| self.calls[c].prepare(input))
            .collect::<Result<Vec<_>, _>>()?;
        let keys = prepared[0]
            .keys
            .as_ref()
            .ok_or_else(|| unreadable(NAME, "a shared set without keys"))?;
        let leader = members[0];
        for (i, (&slot, &weight)) in slots.iter().zip(weights).enumerate() {
            let mask = (prepared.iter().enumerate())
                .fold(0u64, |mask, (bit, p)| mask | (p.counts(i) as u64) << bit);
            if mask == 0 || weight == 0 {
                continue;
            }
            if weight < 0 {
                return Err(retraction_over_append_only("count/sum/avg DISTINCT"));
            }
            let value = keys.row(i);
            let group = self.groups[slot as usize].as_mut().expect("a live slot");
            let new = group.calls[leader].values.add_seen(value.as_ref(), mask);
            let unseen = group.fresh_in == Some(self.period);
            for (bit, &c) in members.iter().enumerate() {
                if new & (1 << bit) == 0 {
                    continue;
                }
                self.calls[c].accumulate(&mut group.calls[c], &prepared[bit], i, 1)?;
                if !unseen {
                    let parts: [&[u8]; 2] = [&(c as u16).to_be_bytes(), value.as_ref()];
                    mark_changed(&mut self.changed, scratch, VALUE, &group.key, &parts);
                }
            }
        }
        Ok(())
    }

    /// Sets call `c`'s count of `value` in the group in `slot` from a
    /// checkpoint's `VALUE` entry (0: removed).
    pub(super) fn restore_value(
        &mut self,
        slot: u32,
        c: usize,
        value: &[u8],
        count: i64,
    ) -> Result<(), EngineError> {
        let group = self.groups[slot as usize].as_mut().expect("a live slot");
        let Some(shared) = self.calls[c].shared else {
            group.calls[c].values.set(value, count);
            return Ok(());
        };
        let set = &mut group.calls[shared.leader].values;
        match count {
            0 => {
                let mask = set.get(value).unwrap_or(0) & !(1 << shared.bit);
                set.set(value, mask);
            }
            1 => {
                set.add_seen(value, 1 << shared.bit);
            }
            _ => return Err(unreadable(NAME, "a distinct set's value counted twice")),
        }
        Ok(())
    }
}

/// Call `c`'s count of `value` in `group` (`None`: not kept).
pub(super) fn value_count(calls: &[Call], group: &Group, c: usize, value: &[u8]) -> Option<i64> {
    match calls.get(c)?.shared {
        None => group.calls[c].values.get(value),
        Some(shared) => group.calls[shared.leader]
            .values
            .get(value)
            .filter(|mask| mask & (1 << shared.bit) != 0)
            .map(|_| 1),
    }
}

/// Every value `group` keeps, as (call, value, count): a shared set's
/// value once for each call that saw it.
pub(super) fn kept_values<'a>(
    calls: &'a [Call],
    families: &'a [Vec<usize>],
    group: &'a Group,
) -> impl Iterator<Item = (usize, &'a [u8], i64)> + 'a {
    type Values<'a> = Box<dyn Iterator<Item = (usize, &'a [u8], i64)> + 'a>;
    group
        .calls
        .iter()
        .enumerate()
        .flat_map(move |(c, state)| -> Values<'a> {
            match calls[c].shared {
                None => Box::new(state.values.iter().map(move |(v, n)| (c, v, n))),
                Some(shared) if shared.bit != 0 => Box::new(std::iter::empty()),
                Some(_) => {
                    let members = families
                        .iter()
                        .find(|f| f[0] == c)
                        .map_or(&[][..], Vec::as_slice);
                    Box::new(state.values.iter().flat_map(move |(v, mask)| {
                        (members.iter().enumerate())
                            .filter(move |(bit, _)| mask & (1 << bit) != 0)
                            .map(move |(_, &m)| (m, v, 1))
                    }))
                }
            }
        })
}
