//! [`Multiset`]: rows with positive multiplicities, in a persistent map, and
//! its byte encoding for snapshots.

use crate::EngineError;
use crate::rows::RowBytes;

/// A bag of encoded rows. Cloning is O(1) (a persistent map), which lets an
/// operator keep the previous version while it builds the next one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Multiset {
    counts: imbl::OrdMap<RowBytes, i64>,
}

impl Multiset {
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Distinct rows.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Adds `weight` copies of `row` (removes them when negative). A count
    /// that would go below zero is an invariant violation: a retraction of a
    /// row that was never inserted.
    pub fn add(
        &mut self,
        row: &RowBytes,
        weight: i64,
        operator: &'static str,
    ) -> Result<(), EngineError> {
        let count = self.counts.get(row).copied().unwrap_or(0) + weight;
        match count {
            0 => {
                self.counts.remove(row);
            }
            c if c > 0 => {
                self.counts.insert(row.clone(), c);
            }
            _ => {
                return Err(EngineError::Invariant {
                    operator,
                    message: "a row was retracted more often than it was inserted".into(),
                });
            }
        }
        Ok(())
    }

    pub fn count(&self, row: &RowBytes) -> i64 {
        self.counts.get(row).copied().unwrap_or(0)
    }

    /// [`Multiset::count`] of a row given as a slice (a state key's part).
    pub fn count_of(&self, row: &[u8]) -> i64 {
        self.counts.get(row).copied().unwrap_or(0)
    }

    /// Sets a row's count (0 removes it), as restoring state does; returns
    /// the previous count. `count` is never negative ([`crate::operator::read_count`]).
    pub fn set(&mut self, row: &[u8], count: i64) -> i64 {
        let previous = if count == 0 {
            self.counts.remove(row)
        } else {
            self.counts.insert(RowBytes::from(row), count)
        };
        previous.unwrap_or(0)
    }

    /// Rows in byte order (the order of their values) with their counts.
    pub fn iter(&self) -> impl Iterator<Item = (&RowBytes, i64)> {
        self.counts.iter().map(|(r, &c)| (r, c))
    }

    /// Appends the change that turns `self` into `new`.
    pub fn diff_into(&self, new: &Multiset, change: &mut Vec<(RowBytes, i64)>) {
        for (row, count) in self.iter() {
            let delta = new.count(row) - count;
            if delta != 0 {
                change.push((row.clone(), delta));
            }
        }
        for (row, count) in new.iter() {
            if self.count(row) == 0 {
                change.push((row.clone(), count));
            }
        }
    }

    /// Every row repeated as often as it occurs.
    pub fn expanded(&self) -> impl Iterator<Item = &RowBytes> {
        self.counts
            .iter()
            .flat_map(|(r, &c)| std::iter::repeat_n(r, c as usize))
    }
}

/// Appends length-prefixed byte strings and integers; the inverse is
/// [`Reader`]. Snapshots of operator state are built from these.
#[derive(Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn blob(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.bytes.extend_from_slice(b);
    }
    pub fn multiset(&mut self, set: &Multiset) {
        self.u64(set.len() as u64);
        for (row, count) in set.iter() {
            self.blob(row);
            self.i64(count);
        }
    }
}

pub struct Reader<'a> {
    bytes: &'a [u8],
    operator: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], operator: &'static str) -> Self {
        Self { bytes, operator }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], EngineError> {
        if self.bytes.len() < n {
            return Err(EngineError::Invariant {
                operator: self.operator,
                message: "snapshot is truncated".into(),
            });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    pub fn u64(&mut self) -> Result<u64, EngineError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn i64(&mut self) -> Result<i64, EngineError> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn blob(&mut self) -> Result<RowBytes, EngineError> {
        let n = self.u64()? as usize;
        Ok(self.take(n)?.into())
    }
    pub fn multiset(&mut self) -> Result<Multiset, EngineError> {
        let mut set = Multiset::default();
        for _ in 0..self.u64()? {
            let row = self.blob()?;
            let count = self.i64()?;
            set.add(&row, count, self.operator)?;
        }
        Ok(set)
    }
    pub fn finish(self) -> Result<(), EngineError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(EngineError::Invariant {
                operator: self.operator,
                message: "snapshot has trailing bytes".into(),
            })
        }
    }
}
