//! Changes as file bytes: the rows a file holds (each row repeated by its
//! weight; for a changelog, each change with its op and epoch) and their
//! encoding as Parquet, CSV (with a header) or JSON lines.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_common::ChangeBatch;

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

/// The columns of a file: the sink's, then for a changelog `weir_op` and
/// `weir_epoch`.
pub(crate) fn file_schema(sink: &SchemaRef, changelog: bool) -> SchemaRef {
    if !changelog {
        return sink.clone();
    }
    let mut fields: Vec<Arc<Field>> = sink.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new("weir_op", DataType::Utf8, false)));
    fields.push(Arc::new(Field::new("weir_epoch", DataType::Int64, false)));
    Arc::new(Schema::new(fields))
}

/// The rows of `changes` as a file holds them: a row of weight w appears
/// |w| times. Without a changelog a retraction is an error (CREATE refused
/// such input, so this is a plan that changed under the sink).
pub(crate) fn file_rows(
    changes: &ChangeBatch,
    epoch: u64,
    file_schema: &SchemaRef,
    changelog: bool,
) -> Result<RecordBatch, ConnectorError> {
    let weights = changes.weights();
    if !changelog && weights.values().iter().any(|w| *w < 0) {
        return Err(ConnectorError::Rejected {
            connector: NAME.into(),
            message: "the sink received a retraction, which plain files cannot express; \
                      recreate it with changelog = 'true'"
                .into(),
        });
    }
    let arrow = |e| ConnectorError::arrow(NAME, e);
    let rows = changes.rows();
    let repeat = weights.values().iter().any(|w| w.unsigned_abs() != 1);
    let (columns, signs): (Vec<ArrayRef>, Vec<bool>) = if repeat {
        let mut take = Vec::new();
        let mut signs = Vec::new();
        for (i, w) in weights.values().iter().enumerate() {
            for _ in 0..w.unsigned_abs() {
                take.push(i as u32);
                signs.push(*w > 0);
            }
        }
        let take = UInt32Array::from(take);
        let columns = rows
            .columns()
            .iter()
            .map(|c| arrow::compute::take(c.as_ref(), &take, None))
            .collect::<Result<_, _>>()
            .map_err(arrow)?;
        (columns, signs)
    } else {
        let signs = weights.values().iter().map(|w| *w > 0).collect();
        (rows.columns().to_vec(), signs)
    };
    let mut columns = columns;
    if changelog {
        let ops: StringArray = signs
            .iter()
            .map(|insert| Some(if *insert { "insert" } else { "delete" }))
            .collect();
        columns.push(Arc::new(ops));
        columns.push(Arc::new(Int64Array::from(vec![epoch as i64; signs.len()])));
    }
    RecordBatch::try_new(file_schema.clone(), columns).map_err(arrow)
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
    use super::*;

    fn changes(values: &[i64], weights: &[i64]) -> ChangeBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let rows = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(values.to_vec())) as ArrayRef],
        )
        .unwrap();
        ChangeBatch::new(rows, Int64Array::from(weights.to_vec())).unwrap()
    }

    #[test]
    fn weights_repeat_rows_and_a_changelog_says_each_op() {
        let c = changes(&[1, 2, 3], &[1, 2, -1]);
        let plain = file_schema(&c.schema(), false);
        let err = file_rows(&c, 7, &plain, false).unwrap_err();
        assert!(err.to_string().contains("changelog = 'true'"), "{err}");
        let log = file_schema(&c.schema(), true);
        let rows = file_rows(&c, 7, &log, true).unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&[rows])
            .unwrap()
            .to_string();
        let want = "\
+---+---------+------------+
| v | weir_op | weir_epoch |
+---+---------+------------+
| 1 | insert  | 7          |
| 2 | insert  | 7          |
| 2 | insert  | 7          |
| 3 | delete  | 7          |
+---+---------+------------+";
        assert_eq!(text, want);
        let inserts = changes(&[4, 5], &[1, 3]);
        let rows = file_rows(&inserts, 1, &plain, false).unwrap();
        assert_eq!(rows.num_rows(), 4);
        let csv = String::from_utf8(encode(Format::Csv, &rows).unwrap()).unwrap();
        assert_eq!(csv, "v\n4\n5\n5\n5\n");
        let json = String::from_utf8(encode(Format::Json, &rows).unwrap()).unwrap();
        assert_eq!(json, "{\"v\":4}\n{\"v\":5}\n{\"v\":5}\n{\"v\":5}\n");
        let parquet = bytes::Bytes::from(encode(Format::Parquet, &rows).unwrap());
        let read: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(parquet, 1024)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(read, vec![rows]);
    }
}
