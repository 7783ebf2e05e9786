//! [`ExactSum`]: a float sum that is exact under inserts and retractions.
//!
//! A running `f64` total drifts: `(x + y) - y` need not be `x`, so a
//! projection that adds and later retracts rows would end up with a sum no
//! recompute gives. Instead the sum is kept exactly, as a list of
//! non-overlapping partials (Shewchuk's algorithm, the one behind Python's
//! `math.fsum`): adding `-x` exactly undoes adding `x`, whatever came in
//! between, and the value read is the exact sum rounded once. So the result
//! depends only on the multiset of values, never on arrival order. It can
//! differ in the last bit from a left-to-right `f64` sum (which is not exact),
//! never for values whose sums are exact in `f64` (integers below 2^53,
//! dyadic fractions).
//!
//! Infinities and NaN are counted apart, so a retracted infinity leaves the
//! finite part intact: any NaN, or both infinities, give NaN.

/// The exact sum of a multiset of `f64` values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExactSum {
    /// Non-overlapping, increasing in magnitude; their exact sum is the
    /// sum of every finite value added.
    partials: Vec<f64>,
    nans: i64,
    positive_infinities: i64,
    negative_infinities: i64,
}

impl ExactSum {
    /// Adds `weight` copies of `value` (retracts them when negative).
    pub fn add(&mut self, value: f64, weight: i64) {
        if value.is_nan() {
            self.nans += weight;
        } else if value == f64::INFINITY {
            self.positive_infinities += weight;
        } else if value == f64::NEG_INFINITY {
            self.negative_infinities += weight;
        } else if weight == 1 {
            self.add_finite(value);
        } else if weight == -1 {
            self.add_finite(-value);
        } else {
            // `value * weight` may round; adding `value` |weight| times
            // stays exact. Consolidated inputs make |weight| > 1 rare.
            let term = if weight < 0 { -value } else { value };
            for _ in 0..weight.unsigned_abs() {
                self.add_finite(term);
            }
        }
    }

    fn add_finite(&mut self, mut x: f64) {
        let mut kept = 0;
        for i in 0..self.partials.len() {
            let mut y = self.partials[i];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let high = x + y;
            let low = y - (high - x);
            if low != 0.0 {
                self.partials[kept] = low;
                kept += 1;
            }
            x = high;
        }
        self.partials.truncate(kept);
        // A zero top adds nothing; dropping it keeps cancelled sums empty.
        if x != 0.0 {
            self.partials.push(x);
        }
    }

    /// The sum, rounded once to the nearest `f64` (ties to even).
    pub fn value(&self) -> f64 {
        if self.nans > 0 || (self.positive_infinities > 0 && self.negative_infinities > 0) {
            return f64::NAN;
        }
        if self.positive_infinities > 0 {
            return f64::INFINITY;
        }
        if self.negative_infinities > 0 {
            return f64::NEG_INFINITY;
        }
        // The correctly rounded sum of the partials, as `math.fsum` ends.
        let mut partials = self.partials.clone();
        let Some(mut high) = partials.pop() else {
            return 0.0;
        };
        let mut low = 0.0;
        while let Some(y) = partials.pop() {
            let x = high;
            high = x + y;
            let rounded = high - x;
            low = y - rounded;
            if low != 0.0 {
                break;
            }
        }
        if let Some(&next) = partials.last()
            && ((low < 0.0 && next < 0.0) || (low > 0.0 && next > 0.0))
        {
            let y = low * 2.0;
            let x = high + y;
            if y == x - high {
                high = x;
            }
        }
        high
    }

    /// Appends the state to `out` (the inverse is [`ExactSum::decode`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.partials.len() as u32).to_le_bytes());
        for p in &self.partials {
            out.extend_from_slice(&p.to_le_bytes());
        }
        for count in [
            self.nans,
            self.positive_infinities,
            self.negative_infinities,
        ] {
            out.extend_from_slice(&count.to_le_bytes());
        }
    }

    /// Reads a state written by [`ExactSum::encode`] from the front of
    /// `bytes`; `None` when it is malformed.
    pub fn decode(bytes: &mut &[u8]) -> Option<Self> {
        let n = u32::from_le_bytes(take(bytes)?) as usize;
        let mut partials = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            partials.push(f64::from_le_bytes(take(bytes)?));
        }
        Some(Self {
            partials,
            nans: i64::from_le_bytes(take(bytes)?),
            positive_infinities: i64::from_le_bytes(take(bytes)?),
            negative_infinities: i64::from_le_bytes(take(bytes)?),
        })
    }
}

/// The first `N` bytes of `bytes`, consumed.
pub(super) fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = bytes.split_first_chunk::<N>()?;
    *bytes = rest;
    Some(*head)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn retracting_restores_the_exact_sum() {
        let mut sum = ExactSum::default();
        sum.add(1e16, 1);
        sum.add(1.0, 1);
        sum.add(-1e16, 1);
        // A running f64 total gives 0 here.
        assert_eq!(sum.value(), 1.0);
        sum.add(0.1, 1);
        sum.add(0.2, 1);
        sum.add(0.1, -1);
        sum.add(0.2, -1);
        assert_eq!(sum.value(), 1.0);
    }

    #[test]
    fn infinities_and_nan_are_counted_apart() {
        let mut sum = ExactSum::default();
        sum.add(2.5, 1);
        sum.add(f64::INFINITY, 1);
        assert_eq!(sum.value(), f64::INFINITY);
        sum.add(f64::NEG_INFINITY, 1);
        assert!(sum.value().is_nan());
        sum.add(f64::INFINITY, -1);
        sum.add(f64::NEG_INFINITY, -1);
        assert_eq!(sum.value(), 2.5);
        sum.add(f64::NAN, 2);
        assert!(sum.value().is_nan());
        sum.add(f64::NAN, -2);
        assert_eq!(sum.value(), 2.5);
    }

    proptest! {
        /// The sum depends only on the multiset: any order, any
        /// interleaving of retractions, equals summing the survivors.
        #[test]
        fn the_sum_is_the_sum_of_the_survivors(
            values in prop::collection::vec(-1e12f64..1e12, 0..40),
            keep in prop::collection::vec(any::<bool>(), 40),
            weights in prop::collection::vec(1i64..4, 40),
        ) {
            let mut all = ExactSum::default();
            let mut survivors = ExactSum::default();
            for (i, &v) in values.iter().enumerate() {
                all.add(v, weights[i]);
            }
            for (i, &v) in values.iter().enumerate().rev() {
                if keep[i] {
                    survivors.add(v, weights[i]);
                } else {
                    all.add(v, -weights[i]);
                }
            }
            prop_assert_eq!(all.value().to_bits(), survivors.value().to_bits());
            let mut bytes = Vec::new();
            all.encode(&mut bytes);
            let mut slice = &bytes[..];
            let decoded = ExactSum::decode(&mut slice).unwrap();
            prop_assert!(slice.is_empty());
            prop_assert_eq!(decoded.value().to_bits(), all.value().to_bits());
        }
    }
}
