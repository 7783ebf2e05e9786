//! Rows as file bytes: Parquet, CSV (with a header) or JSON lines.

use arrow::array::RecordBatch;

use super::NAME;
use crate::ConnectorError;

/// A file format the sink writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Parquet,
    Csv,
    Json,
}

impl Format {
    /// The `format` option's word (validated; anything else is Parquet).
    pub(crate) fn parse(word: Option<&str>) -> Self {
        match word {
            Some("csv") => Self::Csv,
            Some("json") => Self::Json,
            _ => Self::Parquet,
        }
    }

    /// The file name extension.
    pub(crate) fn extension(self) -> &'static str {
        match self {
            Self::Parquet => "parquet",
            Self::Csv => "csv",
            Self::Json => "jsonl",
        }
    }
}

/// One file's bytes.
pub(crate) fn encode(format: Format, batch: &RecordBatch) -> Result<Vec<u8>, ConnectorError> {
    let arrow = |e| ConnectorError::arrow(NAME, e);
    let mut out = Vec::new();
    match format {
        Format::Parquet => {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::SNAPPY)
                .build();
            let parquet = |e: parquet::errors::ParquetError| ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!("encoding Parquet: {e}"),
            };
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props))
                    .map_err(parquet)?;
            writer.write(batch).map_err(parquet)?;
            writer.close().map_err(parquet)?;
        }
        Format::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            writer.write(batch).map_err(arrow)?;
        }
        Format::Json => {
            let mut writer = arrow::json::LineDelimitedWriter::new(&mut out);
            writer.write(batch).map_err(arrow)?;
            writer.finish().map_err(arrow)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn each_format_encodes_every_row() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let rows = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(vec![4, 5, 5])) as ArrayRef],
        )
        .unwrap();
        let csv = String::from_utf8(encode(Format::Csv, &rows).unwrap()).unwrap();
        assert_eq!(csv, "v\n4\n5\n5\n");
        let json = String::from_utf8(encode(Format::Json, &rows).unwrap()).unwrap();
        assert_eq!(json, "{\"v\":4}\n{\"v\":5}\n{\"v\":5}\n");
        let parquet = bytes::Bytes::from(encode(Format::Parquet, &rows).unwrap());
        let read: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(parquet, 1024)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(read, vec![rows]);
    }
}
