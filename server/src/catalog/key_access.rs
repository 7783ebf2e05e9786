//! Primary-key access for table scans: which stored rows a scan's filters
//! can reach by key instead of reading the whole table.
//!
//! DataFusion hands a scan the conjuncts of the query's WHERE clause that
//! the provider said it can use ([`usable`]). Each is used *inexactly*: the
//! plan keeps the filter above the scan, so a scan that returns a superset
//! of the matching rows is correct. That lets this module pick one access
//! path and ignore whatever it does not understand:
//!
//! - every key column pinned by `col = literal` or `col IN (literals)`: a
//!   lookup of each combination (bounded by [`MAX_POINTS`]);
//! - a single-column key bounded by `<`, `<=`, `>`, `>=`, `BETWEEN`: a
//!   range scan over the ordered key;
//! - anything else: the whole table.
//!
//! A literal is used only when it converts to the key column's type without
//! changing its value (`id = 2.5` on a BIGINT key is left to the filter).

use std::ops::Bound;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use datafusion::scalar::ScalarValue;

/// Key combinations above this fall back to a range or a full scan.
const MAX_POINTS: usize = 4096;

/// How a scan reaches its rows.
#[derive(Debug)]
pub enum KeyAccess {
    /// Only rows with these keys: one array per key column, in key order.
    Points(Vec<ArrayRef>),
    /// Rows whose (single-column) key lies in this range.
    Range(Bound<ArrayRef>, Bound<ArrayRef>),
    /// Every row.
    Full,
}

/// The key columns of a table: name and type, in key order.
pub struct KeyColumns<'a> {
    names: Vec<&'a str>,
    types: Vec<&'a DataType>,
}

impl<'a> KeyColumns<'a> {
    pub fn new(schema: &'a SchemaRef, key_columns: &[usize]) -> Self {
        let fields: Vec<_> = key_columns.iter().map(|&i| schema.field(i)).collect();
        Self {
            names: fields.iter().map(|f| f.name().as_str()).collect(),
            types: fields.iter().map(|f| f.data_type()).collect(),
        }
    }

    fn position(&self, expr: &Expr) -> Option<usize> {
        match expr {
            Expr::Column(c) => self.names.iter().position(|n| *n == c.name),
            _ => None,
        }
    }

    /// `value` as key column `k`'s type, if that keeps it exactly.
    fn literal(&self, k: usize, expr: &Expr) -> Option<ScalarValue> {
        let Expr::Literal(value, _) = expr else {
            return None;
        };
        if value.is_null() {
            return None;
        }
        let ty = self.types[k];
        if &value.data_type() == ty {
            return Some(value.clone());
        }
        let converted = value.cast_to(ty).ok()?;
        let back = converted.cast_to(&value.data_type()).ok()?;
        (back == *value && !converted.is_null()).then_some(converted)
    }
}

/// What one conjunct says about the key.
enum Restriction {
    /// Key column `k` is one of these values.
    OneOf(usize, Vec<ScalarValue>),
    /// Key column `k` is above (`lower`) or below a value.
    Bound {
        k: usize,
        lower: bool,
        value: ScalarValue,
        inclusive: bool,
    },
    /// Key column `k` lies between two values, both included.
    Between(usize, ScalarValue, ScalarValue),
}

fn restriction(keys: &KeyColumns, filter: &Expr) -> Option<Restriction> {
    match filter {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (k, literal, op) = match (keys.position(left), keys.position(right)) {
                (Some(k), None) => (k, right.as_ref(), *op),
                (None, Some(k)) => (k, left.as_ref(), op.swap()?),
                _ => return None,
            };
            let value = keys.literal(k, literal)?;
            let bound = |lower, inclusive| Restriction::Bound {
                k,
                lower,
                value: value.clone(),
                inclusive,
            };
            Some(match op {
                Operator::Eq => Restriction::OneOf(k, vec![value.clone()]),
                Operator::Gt => bound(true, false),
                Operator::GtEq => bound(true, true),
                Operator::Lt => bound(false, false),
                Operator::LtEq => bound(false, true),
                _ => return None,
            })
        }
        Expr::InList(in_list) if !in_list.negated => {
            let k = keys.position(&in_list.expr)?;
            let values = in_list
                .list
                .iter()
                .map(|e| keys.literal(k, e))
                .collect::<Option<Vec<_>>>()?;
            Some(Restriction::OneOf(k, values))
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let k = keys.position(expr)?;
            Some(Restriction::Between(
                k,
                keys.literal(k, low)?,
                keys.literal(k, high)?,
            ))
        }
        _ => None,
    }
}

/// Whether `filter` can narrow a scan of a table with these key columns.
pub fn usable(keys: &KeyColumns, filter: &Expr) -> bool {
    match restriction(keys, filter) {
        Some(Restriction::OneOf(..)) => true,
        Some(Restriction::Bound { .. } | Restriction::Between(..)) => keys.names.len() == 1,
        None => false,
    }
}

/// The narrowest access path the filters allow.
pub fn access(keys: &KeyColumns, filters: &[Expr]) -> KeyAccess {
    let width = keys.names.len();
    let mut pinned: Vec<Option<Vec<ScalarValue>>> = vec![None; width];
    let mut lower: Option<(ScalarValue, bool)> = None;
    let mut upper: Option<(ScalarValue, bool)> = None;
    let tighter = |current: &mut Option<(ScalarValue, bool)>,
                   value: ScalarValue,
                   inclusive: bool,
                   lower: bool| {
        let replace = match current {
            None => true,
            Some((v, inc)) => match value.partial_cmp(v) {
                Some(std::cmp::Ordering::Greater) => lower,
                Some(std::cmp::Ordering::Less) => !lower,
                Some(std::cmp::Ordering::Equal) => *inc && !inclusive,
                None => false,
            },
        };
        if replace {
            *current = Some((value, inclusive));
        }
    };
    for filter in filters {
        match restriction(keys, filter) {
            Some(Restriction::OneOf(k, values)) => {
                // Any one list per column is a superset of their conjunction;
                // keep the shortest.
                if pinned[k].as_ref().is_none_or(|p| values.len() < p.len()) {
                    pinned[k] = Some(values);
                }
            }
            Some(Restriction::Bound {
                k: 0,
                lower: is_lower,
                value,
                inclusive,
            }) if width == 1 => {
                let slot = if is_lower { &mut lower } else { &mut upper };
                tighter(slot, value, inclusive, is_lower);
            }
            Some(Restriction::Between(0, low, high)) if width == 1 => {
                tighter(&mut lower, low, true, true);
                tighter(&mut upper, high, true, false);
            }
            _ => {}
        }
    }
    if pinned.iter().all(Option::is_some) {
        let lists: Vec<Vec<ScalarValue>> = pinned.into_iter().flatten().collect();
        if lists.iter().any(Vec::is_empty) {
            let empty = keys.types.iter().map(|t| arrow::array::new_empty_array(t));
            return KeyAccess::Points(empty.collect());
        }
        let combinations = lists.iter().try_fold(1usize, |n, l| n.checked_mul(l.len()));
        if let Some(n) = combinations.filter(|&n| n <= MAX_POINTS)
            && let Some(columns) = cartesian(&lists, n)
        {
            return KeyAccess::Points(columns);
        }
    }
    if lower.is_none() && upper.is_none() {
        return KeyAccess::Full;
    }
    let bound = |b: Option<(ScalarValue, bool)>| -> Option<Bound<ArrayRef>> {
        Some(match b {
            None => Bound::Unbounded,
            Some((v, true)) => Bound::Included(v.to_array().ok()?),
            Some((v, false)) => Bound::Excluded(v.to_array().ok()?),
        })
    };
    match (bound(lower), bound(upper)) {
        (Some(l), Some(u)) => KeyAccess::Range(l, u),
        _ => KeyAccess::Full,
    }
}

/// Every combination of one value per list, as one array per list (`n`
/// rows: the product of the lists' lengths, none of them empty).
fn cartesian(lists: &[Vec<ScalarValue>], n: usize) -> Option<Vec<ArrayRef>> {
    let mut repeat = n;
    lists
        .iter()
        .map(|list| {
            repeat /= list.len();
            let cycle = n / (list.len() * repeat);
            let values = (0..cycle).flat_map(|_| {
                list.iter()
                    .flat_map(move |v| std::iter::repeat_n(v.clone(), repeat))
            });
            ScalarValue::iter_to_array(values).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use datafusion::logical_expr::{col, lit};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("v", DataType::Utf8, true),
        ]))
    }

    fn ints(a: &ArrayRef) -> Vec<i64> {
        a.as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec()
    }

    #[test]
    fn equality_and_in_lists_become_points() {
        let s = schema();
        let keys = KeyColumns::new(&s, &[0]);
        let KeyAccess::Points(p) = access(&keys, &[col("id").eq(lit(7i64))]) else {
            panic!("expected points");
        };
        assert_eq!(ints(&p[0]), vec![7]);
        // A literal of another integer type converts exactly.
        let KeyAccess::Points(p) = access(&keys, &[lit(3i32).eq(col("id"))]) else {
            panic!("expected points");
        };
        assert_eq!(ints(&p[0]), vec![3]);
        let KeyAccess::Points(p) = access(
            &keys,
            &[col("id").in_list(vec![lit(1i64), lit(2i64)], false)],
        ) else {
            panic!("expected points");
        };
        assert_eq!(ints(&p[0]), vec![1, 2]);
    }

    #[test]
    fn lossy_literals_and_other_columns_scan_everything() {
        let s = schema();
        let keys = KeyColumns::new(&s, &[0]);
        assert!(matches!(
            access(&keys, &[col("id").eq(lit(2.5f64))]),
            KeyAccess::Full
        ));
        assert!(matches!(
            access(&keys, &[col("v").eq(lit("x"))]),
            KeyAccess::Full
        ));
        assert!(!usable(&keys, &col("id").not_eq(lit(1i64))));
        assert!(!usable(&keys, &col("id").in_list(vec![lit(1i64)], true)));
    }

    #[test]
    fn bounds_intersect_into_one_range() {
        let s = schema();
        let keys = KeyColumns::new(&s, &[0]);
        let KeyAccess::Range(lower, upper) = access(
            &keys,
            &[
                col("id").gt(lit(1i64)),
                col("id").gt_eq(lit(5i64)),
                col("id").lt(lit(100i64)),
                col("id").between(lit(0i64), lit(50i64)),
            ],
        ) else {
            panic!("expected a range");
        };
        assert!(matches!(lower, Bound::Included(a) if ints(&a) == vec![5]));
        assert!(matches!(upper, Bound::Included(a) if ints(&a) == vec![50]));
    }

    #[test]
    fn composite_keys_need_every_column_pinned() {
        let s = schema();
        let keys = KeyColumns::new(&s, &[0, 1]);
        assert!(matches!(
            access(&keys, &[col("id").eq(lit(1i64))]),
            KeyAccess::Full
        ));
        assert!(!usable(&keys, &col("id").gt(lit(1i64))));
        let KeyAccess::Points(p) = access(
            &keys,
            &[
                col("id").in_list(vec![lit(1i64), lit(2i64)], false),
                col("name").in_list(vec![lit("a"), lit("b"), lit("c")], false),
            ],
        ) else {
            panic!("expected points");
        };
        assert_eq!(p[0].len(), 6);
        assert_eq!(ints(&p[0]), vec![1, 1, 1, 2, 2, 2]);
        let names = p[1].as_any().downcast_ref::<StringArray>().unwrap();
        let names: Vec<_> = names.iter().map(|n| n.unwrap().to_string()).collect();
        assert_eq!(names, ["a", "b", "c", "a", "b", "c"]);
    }
}
