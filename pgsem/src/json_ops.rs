//! PostgreSQL's json access operators on `json` and `jsonb`:
//!
//! - `j -> 'key'`, `j -> 2` (negative counts from the end): the member, of
//!   `j`'s own type;
//! - `j ->> 'key'`, `j ->> 2`: the member as text (strings unquoted, json
//!   `null` as SQL NULL);
//! - `j #> '{a,0,b}'`, `j #>> '{a,0,b}'`: the same along a path, each step
//!   a key, or a position where the value there is an array.
//!
//! A missing member is NULL, as in PostgreSQL. `json` members keep the text
//! they were written with; `jsonb` members print normalized, as jsonb does.
//! DataFusion has no such operators, so [`JsonOperators`] plans them as
//! calls of [`JsonGet`].

use std::sync::Arc;

use crate::PG_TYPE_METADATA_KEY;
use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DFSchema, Result, exec_err};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, ExprSchemable, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::BinaryOperator;

use crate::json::{self, Step};
use crate::udfs::{strings, value_error};

/// Whether `field` holds json or jsonb, and which.
fn json_kind(field: &Field) -> Option<&str> {
    field
        .metadata()
        .get(PG_TYPE_METADATA_KEY)
        .map(String::as_str)
        .filter(|t| matches!(*t, "json" | "jsonb"))
}

/// Plans `->`, `->>`, `#>`, `#>>` whose left side is json or jsonb, and
/// jsonb's `@>`, `<@`, `?`, `?|`, `?&` ([`crate::jsonb_predicates`]).
#[derive(Debug)]
pub struct JsonOperators;

impl ExprPlanner for JsonOperators {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if let Some((test, swapped)) = crate::jsonb_predicates::Test::of(&expr.op) {
            return plan_jsonb_predicate(expr, schema, test, swapped);
        }
        let (path, as_text) = match expr.op {
            BinaryOperator::Arrow => (false, false),
            BinaryOperator::LongArrow => (false, true),
            BinaryOperator::HashArrow => (true, false),
            BinaryOperator::HashLongArrow => (true, true),
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let (_, left) = expr.left.to_field(schema)?;
        if json_kind(&left).is_none() {
            return Ok(PlannerResult::Original(expr));
        }
        let call = JsonGet::udf(path, as_text).call(vec![expr.left, expr.right]);
        Ok(PlannerResult::Planned(call))
    }
}

/// `@>`, `<@`, `?`, `?|`, `?&` where the document side is jsonb (json has
/// none of them in PostgreSQL either); other operands keep DataFusion's
/// meaning (`@>` of arrays).
fn plan_jsonb_predicate(
    expr: RawBinaryExpr,
    schema: &DFSchema,
    test: crate::jsonb_predicates::Test,
    swapped: bool,
) -> Result<PlannerResult<RawBinaryExpr>> {
    let document = if swapped { &expr.right } else { &expr.left };
    let (_, field) = document.to_field(schema)?;
    if json_kind(&field) != Some("jsonb") {
        return Ok(PlannerResult::Original(expr));
    }
    let args = if swapped {
        vec![expr.right, expr.left]
    } else {
        vec![expr.left, expr.right]
    };
    Ok(PlannerResult::Planned(
        crate::jsonb_predicates::JsonbPredicate::udf(test).call(args),
    ))
}

/// `json_get(j, step)` and its text and path forms (see the module comment).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonGet {
    path: bool,
    as_text: bool,
    signature: Signature,
}

impl JsonGet {
    pub fn udf(path: bool, as_text: bool) -> ScalarUDF {
        ScalarUDF::new_from_impl(JsonGet {
            path,
            as_text,
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

/// The steps of a `#>` path: its text elements, from a text array or
/// array text (`'{a,0}'`); a path with a NULL step finds nothing.
fn path_steps(list: &ArrayRef, row: usize) -> Result<Option<Vec<String>>> {
    if let DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 = list.data_type() {
        let text = strings(list)?;
        let steps =
            crate::parse_array_literal(text.value(row)).map_err(|e| value_error("22P02", e))?;
        return Ok(steps.into_iter().collect());
    }
    let DataType::List(_) = list.data_type() else {
        return exec_err!("a json path is a text array, got {}", list.data_type());
    };
    let values = list.as_list::<i32>().value(row);
    let values = strings(&values)?;
    Ok((0..values.len())
        .map(|i| values.is_valid(i).then(|| values.value(i).to_string()))
        .collect())
}

/// Follows `steps` into `text`: a step is an array position where the value
/// there is an array and reads as an integer, a key otherwise.
fn follow<'t>(mut text: &'t str, steps: &[String]) -> Result<Option<&'t str>> {
    for step in steps {
        let step = if text.trim_start().starts_with('[') {
            match step.trim().parse::<i64>() {
                Ok(i) => Step::Index(i),
                Err(_) => return Ok(None),
            }
        } else {
            Step::Key(step)
        };
        match json::member(text, &step).map_err(|e| value_error("22P02", e))? {
            Some(member) => text = member,
            None => return Ok(None),
        }
    }
    Ok(Some(text))
}

impl ScalarUDFImpl for JsonGet {
    fn name(&self) -> &str {
        match (self.path, self.as_text) {
            (false, false) => "json_get",
            (false, true) => "json_get_text",
            (true, false) => "json_get_path",
            (true, true) => "json_get_path_text",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let field = Field::new(self.name(), DataType::Utf8, true);
        Ok(Arc::new(if self.as_text {
            field
        } else {
            // json -> json, jsonb -> jsonb.
            field.with_metadata(args.arg_fields[0].metadata().clone())
        }))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let jsonb = json_kind(&args.arg_fields[0]) == Some("jsonb");
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let documents = strings(&arrays[0])?;
        let selector = &arrays[1];
        let keys = match selector.data_type() {
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => Some(strings(selector)?),
            _ => None,
        };
        let positions = match selector.data_type() {
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Some(
                arrow::compute::cast(selector, &DataType::Int64)?
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .clone(),
            ),
            _ => None,
        };
        let mut out = Vec::with_capacity(documents.len());
        for row in 0..documents.len() {
            if documents.is_null(row) || selector.is_null(row) {
                out.push(None);
                continue;
            }
            let document = documents.value(row);
            let found = if self.path {
                match path_steps(selector, row)? {
                    Some(steps) => follow(document, &steps)?,
                    None => None,
                }
            } else {
                let step = match (&keys, &positions) {
                    (Some(keys), _) => Step::Key(keys.value(row)),
                    (_, Some(positions)) => Step::Index(positions.value(row)),
                    _ => {
                        return exec_err!(
                            "json -> takes a text key or an integer position, got {}",
                            selector.data_type()
                        );
                    }
                };
                json::member(document, &step).map_err(|e| value_error("22P02", e))?
            };
            let value = match found {
                None => None,
                Some(member) if self.as_text => {
                    json::as_text(member).map_err(|e| value_error("22P02", e))?
                }
                Some(member) if jsonb => {
                    Some(json::normalize_jsonb(member).map_err(|e| value_error("22P02", e))?)
                }
                Some(member) => Some(member.to_string()),
            };
            out.push(value);
        }
        crate::udfs::shaped_like(&args.args, Arc::new(StringArray::from(out)))
    }
}
