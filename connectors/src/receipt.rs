//! Receipts: what a sink says it handed its target, checked against what
//! the runtime handed the sink.
//!
//! The runtime tallies every change it gives a sink; the sink tallies
//! again, independently, where it turns changes into what its target
//! receives (the `postgres` sink row by row as it encodes COPY lines, the
//! `files` and `kafka` sinks over the rows they encode, after weights
//! became repeated rows and ops). At each pre-commit the sink returns its
//! [`Receipt`] and the runtime compares: a change dropped, repeated or
//! altered on the way (a bug in a sink's encoding, in weight expansion, in
//! skip bookkeeping) fails the sink instead of reaching the target
//! silently wrong. Where the target reports what it took (PostgreSQL's
//! COPY row count), the sink also checks that against what it sent.
//!
//! A tally is order-free, since sinks may reorder: a row change counts
//! `|weight|` rows, and adds `weight x hash(row)` (wrapping) to a
//! checksum. The row hash is DataFusion's vectorized one
//! (`create_hashes`) under a fixed seed: the same for equal values within
//! a process, which is all a receipt needs (it never leaves the process),
//! and a few nanoseconds a value where encoding whole rows cost far more.
//! A row written twice with weight 1 tallies as the row once with weight 2.

use arrow::array::ArrayRef;
use arrow::error::ArrowError;
use datafusion_common::hash_utils::{RandomState, create_hashes};
use weir_common::ChangeBatch;

/// The row hash's seed.
const SEED: RandomState = RandomState::with_seed(0x5eed_2026_1206);

/// What a sink handed its target since its previous receipt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Receipt {
    /// Row changes, each counted by its weight's magnitude.
    pub rows: u64,
    /// Sum of `weight x hash(row)`, wrapping.
    pub checksum: u64,
}

/// Accumulates a [`Receipt`].
#[derive(Debug, Clone, Default)]
pub struct Tally(Receipt);

impl Tally {
    /// Every change of `changes`, each with its weight.
    pub fn add_changes(&mut self, changes: &ChangeBatch) -> Result<(), ArrowError> {
        let hashes = row_hashes(changes.rows().columns())?;
        for (&hash, &weight) in hashes.iter().zip(changes.weights().values().iter()) {
            self.add(hash, weight);
        }
        Ok(())
    }

    /// Rows as written out, each with the weight `weight(i)` it stands for.
    pub fn add_written(
        &mut self,
        columns: &[ArrayRef],
        weight: impl Fn(usize) -> i64,
    ) -> Result<(), ArrowError> {
        for (i, hash) in row_hashes(columns)?.into_iter().enumerate() {
            self.add(hash, weight(i));
        }
        Ok(())
    }

    /// One row change: the row's [`row_hashes`] value, with `weight`.
    pub fn add(&mut self, hash: u64, weight: i64) {
        if weight == 0 {
            return;
        }
        self.0.rows += weight.unsigned_abs();
        self.0.checksum = self
            .0
            .checksum
            .wrapping_add(hash.wrapping_mul(weight as u64));
    }

    /// The receipt so far; the tally starts again.
    pub fn take(&mut self) -> Receipt {
        std::mem::take(&mut self.0)
    }
}

/// The hash of each row of `columns` (all of one length), as tallies
/// take them.
pub fn row_hashes(columns: &[ArrayRef]) -> Result<Vec<u64>, ArrowError> {
    let mut hashes = vec![0; columns.first().map_or(0, |c| c.len())];
    create_hashes(columns, &SEED, &mut hashes)
        .map_err(|e| ArrowError::ComputeError(e.to_string()))?;
    Ok(hashes)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn changes(keys: &[&str], values: &[i64], weights: &[i64]) -> ChangeBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(keys.to_vec())) as ArrayRef,
                Arc::new(Int64Array::from(values.to_vec())),
            ],
        )
        .unwrap();
        ChangeBatch::new(rows, Int64Array::from(weights.to_vec())).unwrap()
    }

    fn receipt(c: &ChangeBatch) -> Receipt {
        let mut tally = Tally::default();
        tally.add_changes(c).unwrap();
        tally.take()
    }

    #[test]
    fn a_receipt_ignores_order_and_splitting_and_sees_every_difference() {
        let whole = receipt(&changes(&["a", "b", "c"], &[1, 2, 3], &[2, -1, 1]));
        assert_eq!(whole.rows, 4);
        // Reordered, and the weight-2 row written as two rows of weight 1.
        let written = changes(&["c", "a", "b", "a"], &[3, 1, 2, 1], &[1, 1, -1, 1]);
        assert_eq!(receipt(&written), whole);
        // Written as output rows with their signs.
        let mut tally = Tally::default();
        let columns = written.rows().columns().to_vec();
        let weights = written.weights().clone();
        tally.add_written(&columns, |i| weights.value(i)).unwrap();
        assert_eq!(tally.take(), whole);
        // A row lost, a value changed, a sign flipped: all differ.
        for wrong in [
            changes(&["a", "b", "c"], &[1, 2, 3], &[1, -1, 1]),
            changes(&["a", "b", "c"], &[1, 2, 4], &[2, -1, 1]),
            changes(&["a", "b", "c"], &[1, 2, 3], &[2, 1, 1]),
            changes(&["a", "b", "b"], &[1, 2, 3], &[2, -1, 1]),
        ] {
            assert_ne!(receipt(&wrong), whole);
        }
        // Nothing written: the empty receipt.
        assert_eq!(Tally::default().take(), Receipt::default());
    }
}
