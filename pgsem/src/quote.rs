//! `quote_literal(text)`: PostgreSQL's quoting of a value as a string
//! literal, which psql uses to print options (`\d` of a source).
//! DataFusion has `quote_ident` (from datafusion-pg-catalog) but not this.

use std::sync::Arc;

use arrow::array::{Array, StringArray};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion::scalar::ScalarValue;

/// `'...'` with quotes doubled; a value with a backslash is an escape
/// string (`E'...'`, backslashes doubled), as PostgreSQL writes it so the
/// literal reads back the same whatever `standard_conforming_strings` is.
pub fn quote_literal(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 3);
    if value.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
    out
}

pub fn udf() -> ScalarUDF {
    create_udf(
        "quote_literal",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args| {
            Ok(match &args[0] {
                ColumnarValue::Scalar(s) => {
                    let text = match s {
                        ScalarValue::Utf8(v)
                        | ScalarValue::LargeUtf8(v)
                        | ScalarValue::Utf8View(v) => v,
                        _ => &None,
                    };
                    ColumnarValue::Scalar(ScalarValue::Utf8(text.as_deref().map(quote_literal)))
                }
                ColumnarValue::Array(a) => {
                    let strings = arrow::compute::cast(a, &DataType::Utf8)?;
                    let strings = strings
                        .as_any()
                        .downcast_ref::<StringArray>()
                        .expect("cast to Utf8 gives a StringArray");
                    let out: StringArray = strings.iter().map(|v| v.map(quote_literal)).collect();
                    ColumnarValue::Array(Arc::new(out))
                }
            })
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::quote_literal;

    #[test]
    fn quotes_as_postgresql_does() {
        assert_eq!(quote_literal("bid"), "'bid'");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal(r"a\b"), r"E'a\\b'");
        assert_eq!(quote_literal(""), "''");
    }
}
