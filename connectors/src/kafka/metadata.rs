//! Columns of a kafka source filled from the message rather than its
//! value: `key_column` (the message key), `timestamp_column` (its
//! timestamp), `partition_column`, `offset_column` and `headers_column`
//! (its headers as one JSON object, NULL for a message without any). Each names a
//! declared column, checked at CREATE for a type that holds it; the value
//! is decoded into the other columns.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::error::ArrowError;

use super::bad_option;
use crate::ConnectorError;
use crate::spec::{OptionSpec, OptionType};

/// The options that name metadata columns.
pub(super) const OPTIONS: [OptionSpec; 5] = [
    OptionSpec::optional(
        "key_column",
        OptionType::Text,
        "a declared column (text or bytea) that holds each message's key",
    ),
    OptionSpec::optional(
        "timestamp_column",
        OptionType::Text,
        "a declared column (timestamptz or timestamp) that holds each message's timestamp",
    ),
    OptionSpec::optional(
        "partition_column",
        OptionType::Text,
        "a declared column (integer or bigint) that holds each message's partition",
    ),
    OptionSpec::optional(
        "offset_column",
        OptionType::Text,
        "a declared column (bigint) that holds each message's offset",
    ),
    OptionSpec::optional(
        "headers_column",
        OptionType::Text,
        "a declared column (text or jsonb) that holds each message's headers as a JSON object \
         {\"name\": \"value\"} (values as UTF-8 text, a repeated name's last value; NULL without headers)",
    ),
];

/// What a metadata column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    Key,
    Timestamp,
    Partition,
    Offset,
    Headers,
}

impl Field {
    fn option(self) -> &'static str {
        match self {
            Self::Key => "key_column",
            Self::Timestamp => "timestamp_column",
            Self::Partition => "partition_column",
            Self::Offset => "offset_column",
            Self::Headers => "headers_column",
        }
    }

    /// Whether a column of `ty` can hold this field.
    fn fits(self, ty: &DataType) -> bool {
        match self {
            Self::Key => matches!(
                ty,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
            ),
            Self::Timestamp => matches!(ty, DataType::Timestamp(_, _)),
            Self::Partition => matches!(ty, DataType::Int32 | DataType::Int64),
            Self::Offset => matches!(ty, DataType::Int64),
            Self::Headers => matches!(ty, DataType::Utf8 | DataType::LargeUtf8),
        }
    }

    fn types(self) -> &'static str {
        match self {
            Self::Key => "text or bytea",
            Self::Timestamp => "timestamptz or timestamp",
            Self::Partition => "integer or bigint",
            Self::Offset => "bigint",
            Self::Headers => "text or jsonb",
        }
    }
}

/// One message's metadata, kept for the rows its value holds.
#[derive(Debug, Clone)]
pub(super) struct Meta {
    pub key: Option<Vec<u8>>,
    /// Milliseconds since the epoch.
    pub timestamp: Option<i64>,
    pub offset: i64,
    /// The headers as a JSON object, when wanted and present.
    pub headers: Option<String>,
}

/// The declared columns split into metadata and value columns.
#[derive(Debug, Clone)]
pub(super) struct Columns {
    declared: SchemaRef,
    /// The declared columns the value is decoded into, in order.
    pub value: SchemaRef,
    /// Each declared column's field, or None for a value column.
    fields: Vec<Option<Field>>,
}

impl Columns {
    /// Checks the options against the declared columns.
    pub(super) fn parse(
        declared: &SchemaRef,
        options: &BTreeMap<String, String>,
    ) -> Result<Self, ConnectorError> {
        let mut fields = vec![None; declared.fields().len()];
        for field in [
            Field::Key,
            Field::Timestamp,
            Field::Partition,
            Field::Offset,
            Field::Headers,
        ] {
            let Some(name) = options.get(field.option()) else {
                continue;
            };
            let index = declared.index_of(name).map_err(|_| {
                bad_option(
                    field.option(),
                    format!("the source has no column \"{name}\""),
                )
            })?;
            if fields[index].is_some() {
                return Err(bad_option(
                    field.option(),
                    format!("column \"{name}\" already holds another part of the message"),
                ));
            }
            let ty = declared.field(index).data_type();
            if !field.fits(ty) {
                return Err(bad_option(
                    field.option(),
                    format!(
                        "column \"{name}\" is {ty}, which cannot hold it: declare it as {}",
                        field.types()
                    ),
                ));
            }
            fields[index] = Some(field);
        }
        let value = Schema::new(
            declared
                .fields()
                .iter()
                .zip(&fields)
                .filter(|(_, f)| f.is_none())
                .map(|(f, _)| f.clone())
                .collect::<Vec<_>>(),
        );
        Ok(Self {
            declared: declared.clone(),
            value: Arc::new(value),
            fields,
        })
    }

    /// Whether any column comes from the message's metadata.
    pub(super) fn any(&self) -> bool {
        self.fields.iter().any(Option::is_some)
    }

    /// Whether the key of each message is needed.
    pub(super) fn wants_key(&self) -> bool {
        self.fields.contains(&Some(Field::Key))
    }

    /// Whether the headers of each message are needed.
    pub(super) fn wants_headers(&self) -> bool {
        self.fields.contains(&Some(Field::Headers))
    }

    /// The declared columns of `values` (rows of the value columns), each
    /// row `i` from message `messages[owners[i]]` of `partition`.
    pub(super) fn assemble(
        &self,
        values: RecordBatch,
        partition: i32,
        messages: &[Meta],
        owners: &[usize],
    ) -> Result<RecordBatch, ArrowError> {
        let mut next_value = 0;
        let columns = self
            .declared
            .fields()
            .iter()
            .zip(&self.fields)
            .map(|(declared, field)| {
                let Some(field) = field else {
                    let column = values.column(next_value).clone();
                    next_value += 1;
                    return Ok(column);
                };
                let of = |i: &usize| &messages[*i];
                let array: ArrayRef = match field {
                    Field::Key => match declared.data_type() {
                        DataType::Binary | DataType::LargeBinary => Arc::new(
                            owners
                                .iter()
                                .map(|i| of(i).key.as_deref())
                                .collect::<BinaryArray>(),
                        ),
                        _ => Arc::new(
                            owners
                                .iter()
                                .map(|i| of(i).key.as_deref().map(String::from_utf8_lossy))
                                .collect::<StringArray>(),
                        ),
                    },
                    Field::Timestamp => {
                        // The instant, in the column's zone (a timestamp
                        // without one shows UTC wall time).
                        let zone = match declared.data_type() {
                            DataType::Timestamp(_, zone) => zone.clone(),
                            _ => None,
                        };
                        let millis: TimestampMillisecondArray =
                            owners.iter().map(|i| of(i).timestamp).collect();
                        arrow::compute::cast(&millis.with_timezone_opt(zone), declared.data_type())?
                    }
                    Field::Partition => arrow::compute::cast(
                        &Int64Array::from(vec![i64::from(partition); owners.len()]),
                        declared.data_type(),
                    )?,
                    Field::Offset => {
                        Arc::new(owners.iter().map(|i| of(i).offset).collect::<Int64Array>())
                    }
                    Field::Headers => arrow::compute::cast(
                        &owners
                            .iter()
                            .map(|i| of(i).headers.as_deref())
                            .collect::<StringArray>(),
                        declared.data_type(),
                    )?,
                };
                Ok(array)
            })
            .collect::<Result<Vec<_>, ArrowError>>()?;
        RecordBatch::try_new(self.declared.clone(), columns)
    }
}
