//! How a group becomes state entries and back: the `GROUP` entry's
//! encoding, every entry of a group, and the current value of one key.

use super::calls::{Call, CallState};
use super::{Aggregate, GROUP, Group, NAME, OUTPUT, ROW, STARTED, VALUE, WATERMARK};
use super::{exact_sum, shared};
use crate::EngineError;
use crate::operator::{StateEntry, count_value, parse_state_key, state_key, unreadable};

/// The rest of a `VALUE` key: the call's index, then the value.
fn value_rest(call: usize, value: &[u8]) -> Vec<u8> {
    let mut rest = Vec::with_capacity(2 + value.len());
    rest.extend_from_slice(&(call as u16).to_be_bytes());
    rest.extend_from_slice(value);
    rest
}

impl Aggregate {
    /// A `GROUP` entry's value: the row count, then each call's accumulators.
    pub(super) fn encode_group(&self, group: &Group) -> Vec<u8> {
        let mut value = group.rows.to_le_bytes().to_vec();
        for (call, state) in self.calls.iter().zip(&group.calls) {
            call.encode(state, &mut value);
        }
        value
    }

    /// Sets a group's row count and accumulators from a `GROUP` entry
    /// (`None`: none left), keeping its values.
    pub(super) fn decode_group(
        &mut self,
        slot: u32,
        value: Option<&[u8]>,
    ) -> Result<(), EngineError> {
        let fresh: Vec<CallState> = self.calls.iter().map(Call::new_state).collect();
        let calls = std::mem::take(&mut self.calls);
        let group = self.groups[slot as usize].as_mut().expect("a live slot");
        let decoded = (|| {
            for (state, fresh) in group.calls.iter_mut().zip(fresh) {
                let values = std::mem::take(&mut state.values);
                *state = fresh;
                state.values = values;
            }
            let Some(mut bytes) = value else {
                group.rows = 0;
                return Some(());
            };
            group.rows = i64::from_le_bytes(exact_sum::take(&mut bytes)?);
            for (call, state) in calls.iter().zip(group.calls.iter_mut()) {
                call.decode(state, &mut bytes)?;
            }
            bytes.is_empty().then_some(())
        })();
        self.calls = calls;
        decoded.ok_or_else(|| unreadable(NAME, "a malformed group"))
    }

    /// Appends every state entry of `group`.
    pub(super) fn group_entries(&self, group: &Group, entries: &mut Vec<StateEntry>) {
        let key = &group.key;
        entries.push(StateEntry::set(
            state_key(GROUP, key, &[]),
            self.encode_group(group),
        ));
        if let Some(output) = &group.output {
            entries.push(StateEntry::set(
                state_key(OUTPUT, key, &[]),
                output.to_vec(),
            ));
        }
        for (c, value, count) in shared::kept_values(&self.calls, &self.families, group) {
            entries.push(StateEntry::set(
                state_key(VALUE, key, &value_rest(c, value)),
                count_value(count),
            ));
        }
        for (row, count) in group.input.iter() {
            entries.push(StateEntry::set(
                state_key(ROW, key, row),
                count_value(count),
            ));
        }
    }

    /// The current value of a state key (`None` when it has none).
    pub(super) fn value_of(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let key = parse_state_key(NAME, key)?;
        let group = self.index.get(key.distribution).map(|&s| self.group(s));
        Ok(match key.tag {
            STARTED => self.started.then(|| vec![1]),
            WATERMARK => self.watermark_value(),
            GROUP => group.map(|g| self.encode_group(g)),
            OUTPUT => group.and_then(|g| g.output.as_ref()).map(|r| r.to_vec()),
            VALUE => {
                let (call, value) = key
                    .rest
                    .split_first_chunk::<2>()
                    .ok_or_else(|| unreadable(NAME, "a malformed value key"))?;
                let call = u16::from_be_bytes(*call) as usize;
                group
                    .and_then(|g| shared::value_count(&self.calls, g, call, value))
                    .map(count_value)
            }
            ROW => group
                .map(|g| g.input.count_of(key.rest))
                .filter(|&c| c > 0)
                .map(count_value),
            _ => return Err(unreadable(NAME, "an unknown tag")),
        })
    }
}
