//! [`Join`]: equi-joins (inner, left, right, full outer, left semi, left
//! anti) with an optional residual predicate, correct under retractions.
//!
//! Both inputs are kept in state, bucketed by join key. When an epoch changes
//! a bucket, its output is recomputed from the bucket's two multisets (the
//! pairs that satisfy the residual, plus the unmatched rows an outer, semi or
//! anti join keeps) and the difference to the bucket's previous output is
//! emitted. A row whose key has a NULL matches nothing, as in SQL. A join
//! without equi keys (a pure range or theta join) has one bucket.
//!
//! `NOT IN` ([`JoinKind::NullAwareAnti`]) is the exception: a NULL there is
//! "unknown", so whether a left row survives depends on the whole right
//! side (is it empty? does it hold a NULL key?), not only on its bucket.
//! The operator counts the right side's rows and NULL-key rows, and when
//! either fact flips it recomputes every bucket.
//!
//! Cost per epoch: O(left rows × right rows) of the changed buckets (of all
//! buckets when a NOT IN's right side becomes empty or gains or loses its
//! NULLs).
//!
//! State entries (distribution key = the bucket: `0` for a NULL key, `1`
//! and the key otherwise): one per row of each side (`LEFT`, `RIGHT`) and
//! per output row of the bucket (`OUTPUT`), each valued by its count, so an
//! epoch changes the entries of its input rows and of its output change. The
//! NOT IN counts of the right side are derived, not stored.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::{cast, take};
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use weir_common::ChangeBatch;

use crate::EngineError;
use crate::multiset::Multiset;
use crate::operator::{
    Operator, StateEntry, changed_entries, count_value, expect_inputs, parse_state_key, read_count,
    state_key, unreadable,
};
use crate::rows::{RowBytes, RowCodec, batch_of, where_true};

const NAME: &str = "join";

/// State key tags.
const LEFT: u8 = 0;
const RIGHT: u8 = 1;
const OUTPUT: u8 = 2;

/// A bucket's key as a distribution key: NULL and a key of no columns (a
/// join without equi keys) must differ.
fn bucket_bytes(key: &Option<RowBytes>) -> Vec<u8> {
    match key {
        None => vec![0],
        Some(key) => [&[1], key.as_ref()].concat(),
    }
}

fn bucket_of(bytes: &[u8]) -> Result<Option<RowBytes>, EngineError> {
    match bytes.split_first() {
        Some((0, [])) => Ok(None),
        Some((1, key)) => Ok(Some(RowBytes::from(key))),
        _ => Err(unreadable(NAME, "a malformed join key")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// Left rows with at least one match (`EXISTS`, `IN`).
    Semi,
    /// Left rows with no match (`NOT EXISTS`).
    Anti,
    /// `NOT IN`: left rows with no match, where NULL keys are unknown: all
    /// left rows if the right side is empty; none if it has a NULL key;
    /// else the left rows with a non-NULL key and no match.
    NullAwareAnti,
}

impl JoinKind {
    fn keeps_unmatched_left(self) -> bool {
        matches!(self, Self::Left | Self::Full)
    }
    fn keeps_unmatched_right(self) -> bool {
        matches!(self, Self::Right | Self::Full)
    }
    /// Semi and anti joins output left rows only.
    fn outputs_left_only(self) -> bool {
        matches!(self, Self::Semi | Self::Anti | Self::NullAwareAnti)
    }
}

/// What a `NOT IN` needs to know about the whole right side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RightSide {
    rows: i64,
    null_key_rows: i64,
}

impl RightSide {
    /// Whether the left rows of `key`'s bucket may be output at all.
    fn admits(self, key_is_null: bool) -> bool {
        self.rows == 0 || (self.null_key_rows == 0 && !key_is_null)
    }
}

/// One key's rows on both sides and the output they produced. `None` keys
/// (a NULL in the key) never match.
#[derive(Clone, Default)]
struct Bucket {
    left: Multiset,
    right: Multiset,
    output: Multiset,
}

pub struct JoinSpec {
    pub kind: JoinKind,
    pub left_schema: SchemaRef,
    pub right_schema: SchemaRef,
    /// Pairs of equal expressions, left over the left input, right over the right.
    pub on: Vec<(Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>)>,
    /// Over the left columns followed by the right columns.
    pub residual: Option<Arc<dyn PhysicalExpr>>,
    /// Left then right columns (left only for semi and anti joins).
    pub output_schema: SchemaRef,
}

pub struct Join {
    spec: JoinSpec,
    left: RowCodec,
    right: RowCodec,
    key: Option<RowCodec>,
    /// Left and right columns, all nullable: what the residual reads.
    joined: SchemaRef,
    output: RowCodec,
    buckets: imbl::OrdMap<Option<RowBytes>, Bucket>,
    /// Kept for [`JoinKind::NullAwareAnti`] only.
    right_side: RightSide,
    /// State keys changed since the last `take_state_changes`.
    changed: BTreeSet<Vec<u8>>,
}

impl Join {
    pub fn new(spec: JoinSpec) -> Result<Self, EngineError> {
        let key = if spec.on.is_empty() {
            None
        } else {
            let fields: Vec<Field> = spec
                .on
                .iter()
                .enumerate()
                .map(|(i, (l, _))| {
                    Ok(Field::new(
                        format!("k{i}"),
                        l.data_type(&spec.left_schema)?,
                        true,
                    ))
                })
                .collect::<Result<_, EngineError>>()?;
            Some(RowCodec::new(Arc::new(Schema::new(fields)))?)
        };
        let joined: Vec<Field> = spec
            .left_schema
            .fields()
            .iter()
            .chain(spec.right_schema.fields())
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        Ok(Self {
            left: RowCodec::new(spec.left_schema.clone())?,
            right: RowCodec::new(spec.right_schema.clone())?,
            output: RowCodec::new(spec.output_schema.clone())?,
            joined: Arc::new(Schema::new(joined)),
            key,
            buckets: imbl::OrdMap::new(),
            right_side: RightSide::default(),
            changed: BTreeSet::new(),
            spec,
        })
    }

    /// The bucket of every row of one side.
    fn keys_of(
        &self,
        rows: &RecordBatch,
        left: bool,
    ) -> Result<Vec<Option<RowBytes>>, EngineError> {
        let Some(codec) = &self.key else {
            return Ok(vec![Some(RowBytes::from(&[][..])); rows.num_rows()]);
        };
        let columns = self
            .spec
            .on
            .iter()
            .zip(codec.schema().fields())
            .map(|((l, r), field)| {
                let expr = if left { l } else { r };
                let array = expr.evaluate(rows)?.into_array(rows.num_rows())?;
                Ok(cast(&array, field.data_type())?)
            })
            .collect::<Result<Vec<ArrayRef>, EngineError>>()?;
        let encoded = codec.encode_keys(&columns)?;
        Ok(encoded
            .into_iter()
            .enumerate()
            .map(|(i, key)| columns.iter().all(|c| c.is_valid(i)).then_some(key))
            .collect())
    }

    /// The output of one bucket.
    fn bucket_output(
        &self,
        bucket: &Bucket,
        matchable: bool,
        right_side: RightSide,
    ) -> Result<Multiset, EngineError> {
        if self.spec.kind == JoinKind::NullAwareAnti && !right_side.admits(!matchable) {
            return Ok(Multiset::default());
        }
        let left = self.left.decode(bucket.left.expanded())?;
        let right = self.right.decode(bucket.right.expanded())?;
        let (n, m) = (left.num_rows(), right.num_rows());
        let mut left_matched = vec![false; n];
        let mut right_matched = vec![false; m];
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        if matchable && n > 0 && m > 0 {
            let left_idx = UInt32Array::from_iter_values(
                (0..n as u32).flat_map(|i| std::iter::repeat_n(i, m)),
            );
            let right_idx = UInt32Array::from_iter_values((0..n).flat_map(|_| 0..m as u32));
            let crossed = self.combine(&left, Some(&left_idx), &right, Some(&right_idx), n * m)?;
            let keep: BooleanArray = match &self.spec.residual {
                None => BooleanArray::from(vec![true; n * m]),
                Some(predicate) => {
                    let mask = predicate.evaluate(&crossed)?.into_array(n * m)?;
                    where_true(&mask)?
                }
            };
            for p in 0..n * m {
                if keep.value(p) {
                    let (i, j) = (left_idx.value(p), right_idx.value(p));
                    left_matched[i as usize] = true;
                    right_matched[j as usize] = true;
                    pairs.push((i, j));
                }
            }
        }
        let kind = self.spec.kind;
        let mut parts: Vec<RecordBatch> = Vec::new();
        if kind.outputs_left_only() {
            let wanted = kind == JoinKind::Semi;
            let rows = UInt32Array::from_iter_values(
                (0..n as u32).filter(|&i| left_matched[i as usize] == wanted),
            );
            parts.push(take_rows(&left, &rows)?);
        } else {
            let (li, ri): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
            let (li, ri) = (UInt32Array::from(li), UInt32Array::from(ri));
            parts.push(self.combine(&left, Some(&li), &right, Some(&ri), li.len())?);
            if kind.keeps_unmatched_left() {
                let rows = UInt32Array::from_iter_values(
                    (0..n as u32).filter(|&i| !left_matched[i as usize]),
                );
                parts.push(self.combine(&left, Some(&rows), &right, None, rows.len())?);
            }
            if kind.keeps_unmatched_right() {
                let rows = UInt32Array::from_iter_values(
                    (0..m as u32).filter(|&j| !right_matched[j as usize]),
                );
                parts.push(self.combine(&left, None, &right, Some(&rows), rows.len())?);
            }
        }
        let mut out = Multiset::default();
        for part in parts {
            let part = rebind(&part, self.output.schema())?;
            for row in self.output.encode_rows(&part)? {
                out.add(&row, 1, NAME)?;
            }
        }
        Ok(out)
    }

    /// Left rows `li` beside right rows `ri`; a missing side is all NULL.
    fn combine(
        &self,
        left: &RecordBatch,
        li: Option<&UInt32Array>,
        right: &RecordBatch,
        ri: Option<&UInt32Array>,
        len: usize,
    ) -> Result<RecordBatch, EngineError> {
        let side = |batch: &RecordBatch,
                    idx: Option<&UInt32Array>|
         -> Result<Vec<ArrayRef>, EngineError> {
            batch
                .columns()
                .iter()
                .map(|c| match idx {
                    Some(idx) => Ok(take(c.as_ref(), idx, None)?),
                    None => Ok(new_null_array(c.data_type(), len)),
                })
                .collect()
        };
        let mut columns = side(left, li)?;
        columns.extend(side(right, ri)?);
        batch_of(&self.joined, columns, len)
    }
}

fn take_rows(batch: &RecordBatch, rows: &UInt32Array) -> Result<RecordBatch, EngineError> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), rows, None))
        .collect::<Result<Vec<_>, _>>()?;
    batch_of(&batch.schema(), columns, rows.len())
}

/// The same columns under the output's names and nullability.
fn rebind(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, EngineError> {
    batch_of(schema, batch.columns().to_vec(), batch.num_rows())
}

impl Operator for Join {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.output.schema().clone()
    }

    fn structure(&self) -> String {
        use crate::operator::{exprs_text, schema_text};
        let on: Vec<String> = self
            .spec
            .on
            .iter()
            .map(|(l, r)| format!("{l} = {r}"))
            .collect();
        format!(
            "{NAME}({:?}; on {}; residual {}; left {}; right {}; out {})",
            self.spec.kind,
            on.join(" AND "),
            exprs_text(&self.spec.residual),
            schema_text(&self.spec.left_schema),
            schema_text(&self.spec.right_schema),
            schema_text(&self.spec.output_schema)
        )
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 2)?;
        let mut buckets = self.buckets.clone();
        let mut right_side = self.right_side;
        let mut touched: BTreeSet<Option<RowBytes>> = BTreeSet::new();
        let mut changed: Vec<Vec<u8>> = Vec::new();
        for (side, input) in inputs.iter().enumerate() {
            if input.is_empty() {
                continue;
            }
            let is_left = side == 0;
            let keys = self.keys_of(input.rows(), is_left)?;
            let codec = if is_left { &self.left } else { &self.right };
            let rows = codec.encode_rows(input.rows())?;
            for ((key, row), &w) in keys.into_iter().zip(&rows).zip(input.weights().values()) {
                let bucket = buckets.entry(key.clone()).or_default();
                let set = if is_left {
                    &mut bucket.left
                } else {
                    &mut bucket.right
                };
                set.add(row, w, NAME)?;
                let tag = if is_left { LEFT } else { RIGHT };
                changed.push(state_key(tag, &bucket_bytes(&key), row));
                if !is_left {
                    right_side.rows += w;
                    if key.is_none() {
                        right_side.null_key_rows += w;
                    }
                }
                touched.insert(key);
            }
        }
        let flipped = self.spec.kind == JoinKind::NullAwareAnti
            && (right_side.admits(false) != self.right_side.admits(false)
                || right_side.admits(true) != self.right_side.admits(true));
        if flipped {
            touched.extend(buckets.keys().cloned());
        }
        let mut change: Vec<(RowBytes, i64)> = Vec::new();
        for key in touched {
            let bucket = buckets.get(&key).cloned().unwrap_or_default();
            let output = self.bucket_output(&bucket, key.is_some(), right_side)?;
            let first = change.len();
            bucket.output.diff_into(&output, &mut change);
            let bucket_key = bucket_bytes(&key);
            changed.extend(
                change[first..]
                    .iter()
                    .map(|(row, _)| state_key(OUTPUT, &bucket_key, row)),
            );
            if bucket.left.is_empty() && bucket.right.is_empty() {
                buckets.remove(&key);
            } else if let Some(b) = buckets.get_mut(&key) {
                b.output = output;
            }
        }
        let out = self.output.consolidated_change(&change)?;
        self.buckets = buckets;
        self.right_side = right_side;
        self.changed.extend(changed);
        Ok(out)
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let entries = changed_entries(&self.changed, |key| self.value_of(key))?;
        self.changed.clear();
        Ok(entries)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let mut entries = Vec::new();
        for (key, bucket) in &self.buckets {
            let bucket_key = bucket_bytes(key);
            for (tag, set) in [
                (LEFT, &bucket.left),
                (RIGHT, &bucket.right),
                (OUTPUT, &bucket.output),
            ] {
                for (row, count) in set.iter() {
                    let key = state_key(tag, &bucket_key, row);
                    entries.push(StateEntry::set(key, count_value(count)));
                }
            }
        }
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        let mut buckets = self.buckets.clone();
        let mut right_side = self.right_side;
        let mut touched: BTreeSet<Option<RowBytes>> = BTreeSet::new();
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            let count = read_count(NAME, e.value.as_deref())?;
            let bucket_key = bucket_of(key.distribution)?;
            let bucket = buckets.entry(bucket_key.clone()).or_default();
            match key.tag {
                LEFT => {
                    bucket.left.set(key.rest, count);
                }
                RIGHT => {
                    let delta = count - bucket.right.set(key.rest, count);
                    right_side.rows += delta;
                    if bucket_key.is_none() {
                        right_side.null_key_rows += delta;
                    }
                }
                OUTPUT => {
                    bucket.output.set(key.rest, count);
                }
                _ => return Err(unreadable(NAME, "an unknown tag")),
            }
            touched.insert(bucket_key);
        }
        for key in touched {
            if buckets
                .get(&key)
                .is_some_and(|b| b.left.is_empty() && b.right.is_empty() && b.output.is_empty())
            {
                buckets.remove(&key);
            }
        }
        self.buckets = buckets;
        self.right_side = right_side;
        self.changed.clear();
        Ok(())
    }
}

impl Join {
    /// The current value of a state key (`None` when it has none).
    fn value_of(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let key = parse_state_key(NAME, key)?;
        let Some(bucket) = self.buckets.get(&bucket_of(key.distribution)?) else {
            return Ok(None);
        };
        let set = match key.tag {
            LEFT => &bucket.left,
            RIGHT => &bucket.right,
            OUTPUT => &bucket.output,
            _ => return Err(unreadable(NAME, "an unknown tag")),
        };
        let count = set.count_of(key.rest);
        Ok((count > 0).then(|| count_value(count)))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::logical_expr::Operator as BinaryOp;
    use datafusion::physical_expr::expressions::{binary, col};

    use super::*;
    use crate::testing::{change, render, schema};

    const L: &str = "k int, a text";
    const R: &str = "rk int, b text";

    fn join(kind: JoinKind, residual: bool) -> Join {
        let (left, right) = (schema(L), schema(R));
        let joined = schema("k int, a text, rk int, b text");
        let output = if kind.outputs_left_only() {
            left.clone()
        } else {
            joined.clone()
        };
        // `a <> b` as the residual.
        let residual = residual.then(|| {
            binary(
                col("a", &joined).unwrap(),
                BinaryOp::NotEq,
                col("b", &joined).unwrap(),
                &joined,
            )
            .unwrap()
        });
        Join::new(JoinSpec {
            kind,
            on: vec![(col("k", &left).unwrap(), col("rk", &right).unwrap())],
            left_schema: left,
            right_schema: right,
            residual,
            output_schema: output,
        })
        .unwrap()
    }

    fn step(j: &mut Join, left: &str, right: &str) -> Vec<String> {
        render(&j.step(&[change(L, left), change(R, right)]).unwrap())
    }

    #[test]
    fn inner_join_with_a_residual() {
        let mut j = join(JoinKind::Inner, true);
        assert_eq!(
            step(&mut j, "1 x +1; 1 y +1; 2 x +1", "1 x +1; 3 z +1"),
            vec!["1 y 1 x +1"]
        );
        // A new right row matches both left rows of key 1 except the equal one.
        assert_eq!(step(&mut j, "", "1 y +1"), vec!["1 x 1 y +1"]);
        assert_eq!(step(&mut j, "1 y -1", ""), vec!["1 y 1 x -1"]);
    }

    #[test]
    fn left_join_pads_until_a_match_arrives_and_after_it_goes() {
        let mut j = join(JoinKind::Left, false);
        assert_eq!(
            step(&mut j, "1 x +1; null n +1", ""),
            vec!["1 x null null +1", "null n null null +1"]
        );
        assert_eq!(
            step(&mut j, "", "1 b +1; null b +1"),
            vec!["1 x 1 b +1", "1 x null null -1"]
        );
        assert_eq!(
            step(&mut j, "", "1 b -1"),
            vec!["1 x 1 b -1", "1 x null null +1"]
        );
    }

    #[test]
    fn full_join_keeps_both_sides() {
        let mut j = join(JoinKind::Full, false);
        assert_eq!(
            step(&mut j, "1 x +1", "2 y +1"),
            vec!["1 x null null +1", "null null 2 y +1"]
        );
        assert_eq!(
            step(&mut j, "2 z +1", ""),
            vec!["2 z 2 y +1", "null null 2 y -1"]
        );
    }

    #[test]
    fn semi_and_anti_joins_count_each_left_row_once() {
        let mut semi = join(JoinKind::Semi, false);
        let mut anti = join(JoinKind::Anti, false);
        for j in [&mut semi, &mut anti] {
            j.step(&[change(L, "1 x +1; 2 y +1"), change(R, "")])
                .unwrap();
        }
        assert_eq!(step(&mut semi, "", "1 a +1; 1 b +1"), vec!["1 x +1"]);
        assert_eq!(step(&mut anti, "", "1 a +1; 1 b +1"), vec!["1 x -1"]);
        assert_eq!(step(&mut semi, "", "1 a -1"), Vec::<String>::new());
        assert_eq!(step(&mut anti, "", "1 a -1; 1 b -1"), vec!["1 x +1"]);
    }

    #[test]
    fn not_in_outputs_nothing_while_the_right_side_holds_a_null() {
        let mut j = join(JoinKind::NullAwareAnti, false);
        // Right side empty: every left row, even one with a NULL key.
        assert_eq!(
            step(&mut j, "1 x +1; 2 y +1; null n +1", ""),
            vec!["1 x +1", "2 y +1", "null n +1"]
        );
        // A non-NULL right key removes its match and the NULL-key left row.
        assert_eq!(step(&mut j, "", "1 a +1"), vec!["1 x -1", "null n -1"]);
        // A NULL right key makes every comparison unknown: nothing is left.
        assert_eq!(step(&mut j, "", "null b +1"), vec!["2 y -1"]);
        assert_eq!(step(&mut j, "3 z +1", ""), Vec::<String>::new());
        // Without the NULL, unmatched non-NULL left rows come back.
        assert_eq!(step(&mut j, "", "null b -1"), vec!["2 y +1", "3 z +1"]);
        let mut restored = join(JoinKind::NullAwareAnti, false);
        restored.restore(&j.snapshot().unwrap()).unwrap();
        for j in [&mut j, &mut restored] {
            // Emptying the right side brings back every left row.
            assert_eq!(step(j, "", "1 a -1"), vec!["1 x +1", "null n +1"]);
        }
    }

    #[test]
    fn exists_over_a_right_side_without_columns() {
        // SELECT * FROM l WHERE EXISTS (SELECT 1 FROM r WHERE ...): the
        // right side has rows but no columns.
        let left = schema(L);
        let mut j = Join::new(JoinSpec {
            kind: JoinKind::Semi,
            on: vec![],
            left_schema: left.clone(),
            right_schema: schema(""),
            residual: None,
            output_schema: left,
        })
        .unwrap();
        let mut step = |l: &str, r: &str| render(&j.step(&[change(L, l), change("", r)]).unwrap());
        assert_eq!(step("1 x +1", ""), Vec::<String>::new());
        assert_eq!(step("", "+2"), vec!["1 x +1"]);
        assert_eq!(step("", "-1"), Vec::<String>::new());
        assert_eq!(step("", "-1"), vec!["1 x -1"]);
    }

    #[test]
    fn float_keys_compare_by_value() {
        const FL: &str = "k float, a text";
        const FR: &str = "rk float, b text";
        let (left, right) = (schema(FL), schema(FR));
        let mut j = Join::new(JoinSpec {
            kind: JoinKind::Inner,
            on: vec![(col("k", &left).unwrap(), col("rk", &right).unwrap())],
            left_schema: left,
            right_schema: right,
            residual: None,
            output_schema: schema("k float, a text, rk float, b text"),
        })
        .unwrap();
        // -0 = 0 and NaN = NaN, as in SQL; the output keeps each side's value.
        let out = j
            .step(&[
                change(FL, "-0 x +1; NaN y +1"),
                change(FR, "0 p +1; -NaN q +1"),
            ])
            .unwrap();
        assert_eq!(render(&out), vec!["-0.0 x 0.0 p +1", "NaN y NaN q +1"]);
    }

    #[test]
    fn snapshot_and_restore_continue_where_they_left_off() {
        let mut j = join(JoinKind::Full, true);
        j.step(&[change(L, "1 x +1; 2 y +1"), change(R, "1 q +1")])
            .unwrap();
        let mut restored = join(JoinKind::Full, true);
        restored.restore(&j.snapshot().unwrap()).unwrap();
        let (l, r) = (change(L, "1 x -1"), change(R, "2 w +1"));
        assert_eq!(
            render(&restored.step(&[l.clone(), r.clone()]).unwrap()),
            render(&j.step(&[l, r]).unwrap())
        );
    }
}
