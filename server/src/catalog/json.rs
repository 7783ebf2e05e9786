//! `json_build_object`, which SQLAlchemy's column reflection calls.

use std::sync::Arc;

use arrow::array::StringBuilder;
use arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::scalar::ScalarValue;

/// `json_build_object(key, value, ...)`, which SQLAlchemy's column
/// reflection calls (on identity and collation details Weir has none of).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonBuildObject {
    signature: Signature,
}

impl JsonBuildObject {
    pub fn new() -> Self {
        Self {
            signature: Signature::one_of(
                vec![TypeSignature::VariadicAny, TypeSignature::Nullary],
                Volatility::Stable,
            ),
        }
    }
}

fn json_value(value: &ScalarValue) -> serde_json::Value {
    use serde_json::Value as J;
    if value.is_null() {
        return J::Null;
    }
    match value {
        ScalarValue::Boolean(Some(b)) => J::Bool(*b),
        ScalarValue::Int8(_)
        | ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::Int64(_)
        | ScalarValue::UInt8(_)
        | ScalarValue::UInt16(_)
        | ScalarValue::UInt32(_)
        | ScalarValue::UInt64(_)
        | ScalarValue::Float32(_)
        | ScalarValue::Float64(_)
        | ScalarValue::Decimal128(..) => value
            .to_string()
            .parse::<serde_json::Number>()
            .map_or_else(|_| J::String(value.to_string()), J::Number),
        other => J::String(other.to_string()),
    }
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if args.args.len() % 2 != 0 {
            return Err(DataFusionError::Plan(
                "argument list must have even number of elements".into(),
            ));
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut out = StringBuilder::new();
        for row in 0..args.number_rows {
            // PostgreSQL's spelling: keys in call order, ` : ` and `, `.
            let mut members = Vec::with_capacity(arrays.len() / 2);
            for pair in arrays.chunks(2) {
                let key = ScalarValue::try_from_array(&pair[0], row)?;
                if key.is_null() {
                    return Err(DataFusionError::Execution(
                        "null value not allowed for object key".into(),
                    ));
                }
                let value = ScalarValue::try_from_array(&pair[1], row)?;
                let key = match key {
                    ScalarValue::Utf8(Some(k)) | ScalarValue::LargeUtf8(Some(k)) => k,
                    other => other.to_string(),
                };
                members.push(format!(
                    "{} : {}",
                    serde_json::Value::String(key),
                    json_value(&value)
                ));
            }
            out.append_value(format!("{{{}}}", members.join(", ")));
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}
