//! jsonb's containment and existence operators, which [`crate::JsonOperators`]
//! plans as calls of [`JsonbPredicate`]:
//!
//! - `a @> b`, `b <@ a`: `a` contains `b` ([`json::contains`]);
//! - `j ? 'key'`: a top-level key (or string array element) exists;
//! - `j ?| array['a','b']`, `j ?& array['a','b']`: any, or all, exist.
//!
//! The side that is not jsonb is read as jsonb (`j @> '{"a":1}'`), or as
//! the text or text array of keys.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::BinaryOperator;

use crate::json;
use crate::udfs::{strings, value_error};

/// Which test a [`JsonbPredicate`] makes of its `(document, operand)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Test {
    Contains,
    HasKey,
    HasAnyKey,
    HasAllKeys,
}

impl Test {
    /// The test an operator makes, and whether its jsonb document is the
    /// right operand (`<@`).
    pub fn of(op: &BinaryOperator) -> Option<(Self, bool)> {
        Some(match op {
            BinaryOperator::AtArrow => (Self::Contains, false),
            BinaryOperator::ArrowAt => (Self::Contains, true),
            BinaryOperator::Question => (Self::HasKey, false),
            BinaryOperator::QuestionPipe => (Self::HasAnyKey, false),
            BinaryOperator::QuestionAnd => (Self::HasAllKeys, false),
            _ => return None,
        })
    }
}

/// `jsonb_contains(document, other)`, `jsonb_exists(document, key)` and
/// the any/all forms; NULL in, NULL out.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonbPredicate {
    test: Test,
    signature: Signature,
}

impl JsonbPredicate {
    pub fn udf(test: Test) -> ScalarUDF {
        ScalarUDF::new_from_impl(JsonbPredicate {
            test,
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

/// The keys of a `?|`/`?&` operand at `row`: a text array, or array text.
fn keys_at(keys: &ArrayRef, row: usize) -> Result<Vec<Option<String>>> {
    match keys.data_type() {
        DataType::List(_) => {
            let values = strings(&keys.as_list::<i32>().value(row))?;
            Ok((0..values.len())
                .map(|i| values.is_valid(i).then(|| values.value(i).to_string()))
                .collect())
        }
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
            crate::parse_array_literal(strings(keys)?.value(row))
                .map_err(|e| value_error("22P02", e))
        }
        other => exec_err!("?| and ?& take a text array, got {other}"),
    }
}

impl ScalarUDFImpl for JsonbPredicate {
    fn name(&self) -> &str {
        match self.test {
            Test::Contains => "jsonb_contains",
            Test::HasKey => "jsonb_exists",
            Test::HasAnyKey => "jsonb_exists_any",
            Test::HasAllKeys => "jsonb_exists_all",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let documents = strings(&arrays[0])?;
        let operand = &arrays[1];
        let texts = match self.test {
            Test::Contains | Test::HasKey => Some(strings(operand)?),
            Test::HasAnyKey | Test::HasAllKeys => None,
        };
        let invalid = |e: String| value_error("22P02", e);
        let mut out = Vec::with_capacity(documents.len());
        for row in 0..documents.len() {
            if documents.is_null(row) || operand.is_null(row) {
                out.push(None);
                continue;
            }
            let document = documents.value(row);
            let answer = match (self.test, &texts) {
                (Test::Contains, Some(t)) => {
                    json::contains(document, t.value(row)).map_err(invalid)?
                }
                (Test::HasKey, Some(t)) => {
                    json::has_key(document, t.value(row)).map_err(invalid)?
                }
                (test, _) => {
                    let mut found = keys_at(operand, row)?
                        .into_iter()
                        .flatten()
                        .map(|k| json::has_key(document, &k));
                    if test == Test::HasAnyKey {
                        found.try_fold(false, |any, f| f.map(|f| any || f))
                    } else {
                        found.try_fold(true, |all, f| f.map(|f| all && f))
                    }
                    .map_err(invalid)?
                }
            };
            out.push(Some(answer));
        }
        crate::udfs::shaped_like(&args.args, Arc::new(BooleanArray::from(out)))
    }
}
