//! Arrow record batches to pgwire `DataRow`s.
//!
//! Every column's PostgreSQL type comes from [`weir_pgsem::pg_types::pg_type_of_field`]
//! (ARCHITECTURE §7). Utf8 columns tagged `weir.pg_type` = uuid / json / jsonb
//! / varchar are encoded here, because their Arrow storage is a string but
//! their binary wire form is not plain text (uuid is 16 raw bytes, jsonb has
//! a version byte). Everything else goes through `arrow_pg`'s
//! `encode_value`, writing into our own [`RowWriter`].

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow_pg::encoder::{Encoder, encode_value};
use bytes::{BufMut, BytesMut};
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;
use pgwire::types::ToSqlText;
use postgres_types::{IsNull, ToSql};

use super::errors;

/// Field metadata key naming the PostgreSQL type of a Utf8 column.
pub(crate) const PG_TYPE_KEY: &str = "weir.pg_type";

/// The PostgreSQL type clients see for an Arrow type with no metadata.
pub(crate) fn pg_type_of(data_type: &DataType) -> Type {
    weir_pgsem::pg_types::pg_type_of_field(&Field::new("", data_type.clone(), true))
}

/// The format of result column `idx`, tolerating a short format list (Bind
/// already rejects lists whose length is neither 0, 1 nor the column count).
pub(crate) fn format_at(format: &Format, idx: usize) -> FieldFormat {
    match format {
        Format::UnifiedText => FieldFormat::Text,
        Format::UnifiedBinary => FieldFormat::Binary,
        Format::Individual(codes) => codes
            .get(idx)
            .map_or(FieldFormat::Text, |c| FieldFormat::from(*c)),
    }
}

/// RowDescription fields for a result schema with the client's formats.
pub(crate) fn field_infos(schema: &Schema, format: &Format) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(idx, f)| {
            FieldInfo::new(
                f.name().clone(),
                None,
                None,
                weir_pgsem::pg_types::pg_type_of_field(f),
                format_at(format, idx),
            )
        })
        .collect()
}

/// Utf8 storage whose wire form Weir encodes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaggedText {
    Uuid,
    Json,
    Jsonb,
    Varchar,
}

fn tagged_text(field: &Field) -> Option<TaggedText> {
    if !matches!(
        field.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        return None;
    }
    match field.metadata().get(PG_TYPE_KEY).map(String::as_str) {
        Some("uuid") => Some(TaggedText::Uuid),
        Some("json") => Some(TaggedText::Json),
        Some("jsonb") => Some(TaggedText::Jsonb),
        Some("varchar") => Some(TaggedText::Varchar),
        _ => None,
    }
}

/// Builds one `DataRow` at a time; `arrow_pg` writes into it through the
/// [`Encoder`] trait and we write tagged text columns directly.
#[derive(Default)]
struct RowWriter {
    buf: BytesMut,
    fields: i16,
}

impl RowWriter {
    fn put(&mut self, value: Option<&[u8]>) {
        match value {
            None => self.buf.put_i32(-1),
            Some(bytes) => {
                self.buf.put_i32(bytes.len() as i32);
                self.buf.put_slice(bytes);
            }
        }
        self.fields += 1;
    }
}

impl Encoder for RowWriter {
    type Item = DataRow;

    fn encode_field<T>(&mut self, value: &T, pg_field: &FieldInfo) -> PgWireResult<()>
    where
        T: ToSql + ToSqlText + Sized,
    {
        let start = self.buf.len();
        self.buf.put_i32(-1);
        let is_null = match pg_field.format() {
            FieldFormat::Text => value.to_sql_text(
                pg_field.datatype(),
                &mut self.buf,
                pg_field.format_options(),
            )?,
            FieldFormat::Binary => value.to_sql(pg_field.datatype(), &mut self.buf)?,
        };
        if let IsNull::No = is_null {
            let len = (self.buf.len() - start - 4) as i32;
            self.buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
        }
        self.fields += 1;
        Ok(())
    }

    fn take_row(&mut self) -> DataRow {
        DataRow::new(self.buf.split(), std::mem::take(&mut self.fields))
    }
}

/// Encodes the rows of batches that share one result schema.
pub(crate) struct RowEncoder {
    fields: Arc<Vec<FieldInfo>>,
    schema_fields: Vec<Arc<Field>>,
    extra_float_digits: i32,
    tagged: Vec<Option<TaggedText>>,
    writer: RowWriter,
}

impl RowEncoder {
    /// `schema` is the statement's result schema (its field metadata decides
    /// the tagged text columns); `fields` its RowDescription.
    pub(crate) fn new(schema: &Schema, fields: Arc<Vec<FieldInfo>>) -> Self {
        let tagged = schema.fields().iter().map(|f| tagged_text(f)).collect();
        RowEncoder {
            fields,
            schema_fields: schema.fields().iter().cloned().collect(),
            extra_float_digits: schema
                .metadata()
                .get(weir_pgsem::text_output::EXTRA_FLOAT_DIGITS_KEY)
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            tagged,
            writer: RowWriter::default(),
        }
    }

    pub(crate) fn encode(&mut self, batch: &RecordBatch, row: usize) -> PgWireResult<DataRow> {
        if batch.num_columns() != self.fields.len() {
            return Err(errors::error(
                "XX000",
                format!(
                    "result batch has {} columns, expected {}",
                    batch.num_columns(),
                    self.fields.len()
                ),
            ));
        }
        let batch_schema = batch.schema();
        for (col, pg_field) in self.fields.iter().enumerate() {
            let array = batch.column(col);
            // The batch's own field matches the array's physical type, which
            // arrow_pg relies on when it downcasts.
            let arrow_field = batch_schema.field(col);
            if weir_pgsem::text_output::is_null_at(array.as_ref(), row) {
                self.writer.put(None);
                continue;
            }
            if pg_field.format() == FieldFormat::Text {
                // PostgreSQL's own text output, not arrow_pg's (see
                // `text_output`); the statement schema carries the tags.
                let field = self
                    .schema_fields
                    .get(col)
                    .map_or(arrow_field, |f| f.as_ref());
                let text = weir_pgsem::text_output::value_text_with(
                    array.as_ref(),
                    row,
                    field,
                    self.extra_float_digits,
                )
                .map_err(|e| errors::error("22000", e))?;
                self.writer.put(text.as_deref().map(str::as_bytes));
                continue;
            }
            let tagged = self.tagged.get(col).copied().flatten();
            if let Some(kind) = tagged.filter(|_| is_string(array)) {
                encode_tagged(&mut self.writer, kind, array, row, pg_field)?;
            } else if let Some(bytes) =
                tagged_list_binary(self.schema_fields.get(col).map(|f| f.as_ref()), array, row)?
            {
                self.writer.put(Some(&bytes));
            } else if let Some(micros) = time_micros(array, row) {
                self.writer.put(Some(&micros.to_be_bytes()));
            } else {
                encode_value(&mut self.writer, array, row, arrow_field, pg_field)?;
            }
        }
        Ok(self.writer.take_row())
    }
}

/// A `time` value as PostgreSQL's binary form, its microseconds; arrow_pg
/// goes through chrono, which has no `24:00:00` (it sent NULL).
fn time_micros(array: &ArrayRef, row: usize) -> Option<i64> {
    use arrow::datatypes::{Time64MicrosecondType, Time64NanosecondType, TimeUnit};
    match array.data_type() {
        DataType::Time64(TimeUnit::Microsecond) => {
            Some(array.as_primitive::<Time64MicrosecondType>().value(row))
        }
        DataType::Time64(TimeUnit::Nanosecond) => {
            Some(array.as_primitive::<Time64NanosecondType>().value(row) / 1000)
        }
        _ => None,
    }
}

fn is_string(array: &ArrayRef) -> bool {
    matches!(
        array.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

fn string_at(array: &ArrayRef, row: usize) -> Option<&str> {
    match array.data_type() {
        DataType::Utf8 => array.as_string_opt::<i32>().map(|a| a.value(row)),
        DataType::LargeUtf8 => array.as_string_opt::<i64>().map(|a| a.value(row)),
        DataType::Utf8View => array.as_string_view_opt().map(|a| a.value(row)),
        _ => None,
    }
}

fn encode_tagged(
    writer: &mut RowWriter,
    kind: TaggedText,
    array: &ArrayRef,
    row: usize,
    pg_field: &FieldInfo,
) -> PgWireResult<()> {
    let text = if array.is_null(row) {
        None
    } else {
        string_at(array, row)
    };
    let Some(text) = text else {
        writer.put(None);
        return Ok(());
    };
    match (pg_field.format(), kind) {
        (FieldFormat::Text, _) | (FieldFormat::Binary, TaggedText::Json | TaggedText::Varchar) => {
            writer.put(Some(text.as_bytes()));
        }
        (FieldFormat::Binary, TaggedText::Uuid) => {
            let uuid = uuid::Uuid::parse_str(text).map_err(|_| {
                errors::error(
                    "22P02",
                    format!("invalid input syntax for type uuid: \"{text}\""),
                )
            })?;
            writer.put(Some(uuid.as_bytes()));
        }
        (FieldFormat::Binary, TaggedText::Jsonb) => {
            let mut bytes = Vec::with_capacity(text.len() + 1);
            bytes.push(1u8);
            bytes.extend_from_slice(text.as_bytes());
            writer.put(Some(&bytes));
        }
    }
    Ok(())
}

/// The binary form of row `row` of a list of tagged text (`uuid[]`,
/// `jsonb[]`, ...), which arrow_pg would write element by element as plain
/// text; `None` for any other array. Layout as PostgreSQL's `array_send`.
/// The tag is read from the statement's field (`declared`), since the
/// batch's own item field may have lost it (`ARRAY[...]` of tagged values).
fn tagged_list_binary(
    declared: Option<&Field>,
    array: &ArrayRef,
    row: usize,
) -> PgWireResult<Option<Vec<u8>>> {
    let Some(DataType::List(item)) = declared.map(Field::data_type) else {
        return Ok(None);
    };
    let (Some(kind), DataType::List(_)) = (tagged_text(item), array.data_type()) else {
        return Ok(None);
    };
    let element_oid = match kind {
        TaggedText::Uuid => Type::UUID.oid(),
        TaggedText::Json => Type::JSON.oid(),
        TaggedText::Jsonb => Type::JSONB.oid(),
        TaggedText::Varchar => Type::VARCHAR.oid(),
    };
    let values = array.as_list::<i32>().value(row);
    let mut out = Vec::new();
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&i32::from(values.null_count() > 0).to_be_bytes());
    out.extend_from_slice(&element_oid.to_be_bytes());
    out.extend_from_slice(&(values.len() as i32).to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let binary = FieldInfo::new(String::new(), None, None, Type::TEXT, FieldFormat::Binary);
    let mut element = RowWriter::default();
    for i in 0..values.len() {
        encode_tagged(&mut element, kind, &values, i, &binary)?;
    }
    out.extend_from_slice(&element.buf);
    Ok(Some(out))
}

/// Lazily encodes all rows of `batches`; the iterator owns its inputs so it
/// can back a `QueryResponse` stream.
pub(crate) fn encode_batches(
    schema: &Schema,
    fields: Arc<Vec<FieldInfo>>,
    batches: Vec<RecordBatch>,
) -> impl Iterator<Item = PgWireResult<DataRow>> + Send + 'static {
    let mut encoder = RowEncoder::new(schema, fields);
    batches.into_iter().flat_map(move |batch| {
        let rows: Vec<PgWireResult<DataRow>> = (0..batch.num_rows())
            .map(|row| encoder.encode(&batch, row))
            .collect();
        rows
    })
}

/// The fields of an encoded row: `None` for NULL, else the value bytes.
pub(crate) fn data_row_values(row: &DataRow) -> Vec<Option<&[u8]>> {
    let mut values = Vec::with_capacity(row.field_count.max(0) as usize);
    let data = &row.data[..];
    let mut pos = 0;
    while pos + 4 <= data.len() {
        let len = i32::from_be_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]);
        pos += 4;
        if len < 0 {
            values.push(None);
            continue;
        }
        let end = (pos + len as usize).min(data.len());
        values.push(Some(&data[pos..end]));
        pos = end;
    }
    values
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::array::{Int32Array, StringArray};

    use super::*;

    fn tagged_field(name: &str, tag: &str) -> Field {
        Field::new(name, DataType::Utf8, true)
            .with_metadata(HashMap::from([(PG_TYPE_KEY.to_owned(), tag.to_owned())]))
    }

    fn encode_one(schema: Schema, columns: Vec<ArrayRef>, format: Format) -> Vec<Option<Vec<u8>>> {
        let schema = Arc::new(schema);
        let fields = Arc::new(field_infos(&schema, &format));
        let batch = RecordBatch::try_new(schema.clone(), columns).expect("batch");
        let rows: Vec<DataRow> = encode_batches(&schema, fields, vec![batch])
            .collect::<PgWireResult<_>>()
            .expect("encode");
        assert_eq!(rows.len(), 1);
        data_row_values(&rows[0])
            .into_iter()
            .map(|v| v.map(<[u8]>::to_vec))
            .collect()
    }

    const UUID: &str = "67e55044-10b1-426f-9247-bb680e5fe0c8";

    fn tagged_columns() -> (Schema, Vec<ArrayRef>) {
        let schema = Schema::new(vec![
            Field::new("n", DataType::Int32, true),
            tagged_field("u", "uuid"),
            tagged_field("j", "json"),
            tagged_field("jb", "jsonb"),
            tagged_field("v", "varchar"),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![Some(7)])),
            Arc::new(StringArray::from(vec![Some(UUID)])),
            Arc::new(StringArray::from(vec![Some("{\"a\":1}")])),
            Arc::new(StringArray::from(vec![Some("[1]")])),
            Arc::new(StringArray::from(vec![None::<&str>])),
        ];
        (schema, columns)
    }

    #[test]
    fn text_format_writes_the_strings() {
        let (schema, columns) = tagged_columns();
        assert_eq!(
            encode_one(schema, columns, Format::UnifiedText),
            vec![
                Some(b"7".to_vec()),
                Some(UUID.as_bytes().to_vec()),
                Some(b"{\"a\":1}".to_vec()),
                Some(b"[1]".to_vec()),
                None,
            ]
        );
    }

    #[test]
    fn binary_format_uses_wire_representations() {
        let (schema, columns) = tagged_columns();
        let uuid = uuid::Uuid::parse_str(UUID).expect("uuid");
        assert_eq!(
            encode_one(schema, columns, Format::UnifiedBinary),
            vec![
                Some(7i32.to_be_bytes().to_vec()),
                Some(uuid.as_bytes().to_vec()),
                Some(b"{\"a\":1}".to_vec()),
                Some(b"\x01[1]".to_vec()),
                None,
            ]
        );
    }

    #[test]
    fn per_column_formats_follow_bind() {
        let (schema, columns) = tagged_columns();
        let values = encode_one(schema, columns, Format::Individual(vec![0, 1, 0, 0, 0]));
        assert_eq!(values[0], Some(b"7".to_vec()));
        assert_eq!(values[1].as_ref().map(Vec::len), Some(16));
    }

    #[test]
    fn malformed_uuid_is_an_error_not_a_panic() {
        let schema = Arc::new(Schema::new(vec![tagged_field("u", "uuid")]));
        let fields = Arc::new(field_infos(&schema, &Format::UnifiedBinary));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(StringArray::from(vec!["not-a-uuid"]))],
        )
        .expect("batch");
        let mut rows = encode_batches(&schema, fields, vec![batch]);
        assert!(matches!(rows.next(), Some(Err(_))));
    }
}
