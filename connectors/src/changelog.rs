//! Changes as the rows a sink writes out (files, messages): each row
//! repeated by its weight and, for a changelog, each change with its op
//! (`weir_op`, `'insert'` or `'delete'`) and epoch (`weir_epoch`).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_common::ChangeBatch;

use crate::ConnectorError;

/// Refuses a sink without a changelog over input that can retract rows
/// (CREATE SINK's check, with the way out).
pub(crate) fn check_retractions(
    connector: &str,
    changelog: bool,
    input_append_only: bool,
) -> Result<(), ConnectorError> {
    if changelog || input_append_only {
        return Ok(());
    }
    Err(ConnectorError::BadOption {
        connector: connector.into(),
        option: "changelog".into(),
        message: "the sink's input can retract rows (it is not append-only), which plain rows \
                  cannot express: add changelog = 'true' to write every change with its op"
            .into(),
    })
}

/// The columns of an output row: the sink's, then for a changelog
/// `weir_op` and `weir_epoch`.
pub(crate) fn output_schema(sink: &SchemaRef, changelog: bool) -> SchemaRef {
    if !changelog {
        return sink.clone();
    }
    let mut fields: Vec<Arc<Field>> = sink.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new("weir_op", DataType::Utf8, false)));
    fields.push(Arc::new(Field::new("weir_epoch", DataType::Int64, false)));
    Arc::new(Schema::new(fields))
}

/// The rows of `changes` as a sink of `connector` writes them: a row of
/// weight w appears |w| times. Without a changelog a retraction is an
/// error (CREATE refused such input, so this is a plan that changed under
/// the sink).
pub(crate) fn output_rows(
    connector: &str,
    changes: &ChangeBatch,
    epoch: u64,
    schema: &SchemaRef,
    changelog: bool,
) -> Result<RecordBatch, ConnectorError> {
    let weights = changes.weights();
    if !changelog && weights.values().iter().any(|w| *w < 0) {
        return Err(ConnectorError::Rejected {
            connector: connector.into(),
            message: "the sink received a retraction, which it cannot write without a \
                      changelog; recreate it with changelog = 'true'"
                .into(),
        });
    }
    let arrow = |e| ConnectorError::arrow(connector, e);
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
    RecordBatch::try_new(schema.clone(), columns).map_err(arrow)
}

/// Tallies rows as [`output_rows`] made them ([`crate::receipt`]): each
/// stands for weight 1, or -1 for a changelog's `delete`; a changelog's
/// own two columns are not part of the row.
pub(crate) fn tally_output(
    connector: &str,
    tally: &mut crate::Tally,
    rows: &RecordBatch,
    changelog: bool,
) -> Result<(), ConnectorError> {
    let arrow = |e| ConnectorError::arrow(connector, e);
    let columns = rows.columns();
    if !changelog {
        return tally.add_written(columns, |_| 1).map_err(arrow);
    }
    let data = &columns[..columns.len().saturating_sub(2)];
    let ops = columns[columns.len() - 2]
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| ConnectorError::Rejected {
            connector: connector.into(),
            message: "a changelog row without its weir_op".into(),
        })?;
    tally
        .add_written(data, |i| if ops.value(i) == "delete" { -1 } else { 1 })
        .map_err(arrow)
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
        let plain = output_schema(&c.schema(), false);
        let err = output_rows("demo", &c, 7, &plain, false).unwrap_err();
        assert!(err.to_string().contains("changelog = 'true'"), "{err}");
        let log = output_schema(&c.schema(), true);
        let rows = output_rows("demo", &c, 7, &log, true).unwrap();
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
        let rows = output_rows("demo", &inserts, 1, &plain, false).unwrap();
        assert_eq!(rows.num_rows(), 4);
    }
}
