//! Building catalog tables row by row.
//!
//! The pg_catalog and information_schema tables Weir computes have many
//! columns, most of them constant for Weir's objects. A [`Row`] names only the
//! columns it sets; [`batch`] lays rows out in the table's schema and fills
//! the rest with the column type's zero value (or NULL where PostgreSQL has
//! NULL), so each table states just what differs.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int16Builder, ListBuilder, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::scalar::ScalarValue;

/// One catalog row: (column, value) for the columns that are not defaults.
pub type Row = Vec<(&'static str, ScalarValue)>;

pub fn text(s: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(s.into()))
}

pub fn int(v: i64) -> ScalarValue {
    ScalarValue::Int64(Some(v))
}

pub fn boolean(v: bool) -> ScalarValue {
    ScalarValue::Boolean(Some(v))
}

pub fn null() -> ScalarValue {
    ScalarValue::Null
}

/// An `int2[]` value (`indkey`, `conkey`).
pub fn int2_list(values: &[i16]) -> ScalarValue {
    let mut builder = ListBuilder::new(Int16Builder::new());
    builder.values().append_slice(values);
    builder.append(true);
    ScalarValue::List(Arc::new(builder.finish()))
}

/// An `oidvector` value (`indclass`, `indcollation`), as a list of oids.
pub fn oid_list(values: &[i32]) -> ScalarValue {
    let mut builder = ListBuilder::new(arrow::array::Int32Builder::new());
    builder.values().append_slice(values);
    builder.append(true);
    ScalarValue::List(Arc::new(builder.finish()))
}

/// `schema` with every column nullable: computed rows may leave any column
/// NULL, and clients never rely on the NOT NULL flag of catalog columns.
pub fn relaxed(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<Field>>(),
    ))
}

fn zero(field: &Field) -> ScalarValue {
    let null = ScalarValue::try_from(field.data_type()).unwrap_or(ScalarValue::Null);
    if field.is_nullable() {
        return null;
    }
    match field.data_type() {
        DataType::Boolean => boolean(false),
        DataType::Utf8 => text(""),
        DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64 => int(0).cast_to(field.data_type()).unwrap_or(null),
        _ => null,
    }
}

/// Lays `rows` out in `schema` (made nullable, see [`relaxed`]).
pub fn batch(schema: &Schema, rows: &[Row]) -> DfResult<RecordBatch> {
    let out = relaxed(schema);
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values = rows
            .iter()
            .map(|row| {
                let value = row
                    .iter()
                    .find(|(name, _)| *name == field.name())
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| zero(field));
                if value.data_type() == *field.data_type() {
                    Ok(value)
                } else if value.is_null() {
                    ScalarValue::try_from(field.data_type())
                } else {
                    value.cast_to(field.data_type())
                }
            })
            .collect::<DfResult<Vec<_>>>()?;
        columns.push(if values.is_empty() {
            arrow::array::new_empty_array(field.data_type())
        } else {
            ScalarValue::iter_to_array(values)?
        });
    }
    Ok(RecordBatch::try_new(out, columns)?)
}

/// Re-lays a batch of PostgreSQL's own catalog rows (shipped by
/// datafusion-pg-catalog) in `schema`: columns are matched by name, text
/// `int2vector`/`oidvector`/`int2[]` values become lists.
pub fn conform(source: &RecordBatch, schema: &Schema) -> DfResult<RecordBatch> {
    let out = relaxed(schema);
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = match source.schema().index_of(field.name()) {
            Err(_) => arrow::array::new_null_array(field.data_type(), source.num_rows()),
            Ok(i) => {
                let column = source.column(i);
                match (column.data_type(), field.data_type()) {
                    (a, b) if a == b => column.clone(),
                    (DataType::Utf8, DataType::List(_)) => {
                        arrow::compute::cast(&int_lists(column)?, field.data_type())?
                    }
                    _ => arrow::compute::cast(column, field.data_type())?,
                }
            }
        };
        columns.push(column);
    }
    Ok(RecordBatch::try_new(out, columns)?)
}

/// Parses `int2vector`/`oidvector` (`1 2`) or `int2[]` (`{1,2}`) text into
/// lists of int8, for a cast to the column's element type.
fn int_lists(column: &ArrayRef) -> DfResult<ArrayRef> {
    let strings = column
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| DataFusionError::Internal("expected a text column".into()))?;
    let mut builder = ListBuilder::new(arrow::array::Int64Builder::new());
    for value in strings.iter() {
        match value {
            None => builder.append(false),
            Some(s) => {
                for part in s
                    .trim_matches(|c| c == '{' || c == '}')
                    .split([',', ' '])
                    .filter(|p| !p.is_empty())
                {
                    builder.values().append_option(part.parse::<i64>().ok());
                }
                builder.append(true);
            }
        }
    }
    Ok(Arc::new(builder.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int32Array};
    use arrow::datatypes::Int16Type;

    #[test]
    fn unnamed_columns_get_zero_values_and_names_are_matched() {
        let schema = Schema::new(vec![
            Field::new("oid", DataType::Int32, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("flag", DataType::Boolean, false),
            Field::new("acl", DataType::Utf8, true),
        ]);
        let rows = vec![vec![("name", text("a")), ("oid", int(7))]];
        let b = batch(&schema, &rows).unwrap();
        assert_eq!(
            b.column(0)
                .as_primitive::<arrow::datatypes::Int32Type>()
                .value(0),
            7
        );
        assert_eq!(b.column(1).as_string::<i32>().value(0), "a");
        assert!(!b.column(2).as_boolean().value(0));
        assert!(b.column(3).is_null(0));
        assert!(batch(&schema, &[]).unwrap().num_rows() == 0);
    }

    #[test]
    fn static_rows_are_conformed_with_int2_vectors_parsed() {
        let source = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("indkey", DataType::Utf8, false),
                Field::new("indrelid", DataType::Int32, false),
            ])),
            vec![
                Arc::new(StringArray::from(vec!["1 3", "{2}"])),
                Arc::new(Int32Array::from(vec![5, 6])),
            ],
        )
        .unwrap();
        let target = Schema::new(vec![
            Field::new("indrelid", DataType::Int32, false),
            Field::new(
                "indkey",
                DataType::List(Arc::new(Field::new_list_field(DataType::Int16, true))),
                false,
            ),
            Field::new("missing", DataType::Utf8, true),
        ]);
        let b = conform(&source, &target).unwrap();
        let keys = b.column(1).as_list::<i32>();
        assert_eq!(
            keys.value(0).as_primitive::<Int16Type>().values().to_vec(),
            vec![1, 3]
        );
        assert_eq!(
            keys.value(1).as_primitive::<Int16Type>().values().to_vec(),
            vec![2]
        );
        assert!(b.column(2).is_null(1));
    }
}
