//! Changes as the stage's COPY text lines, checked on the way: a NULL
//! key or a second row with one key in an epoch refuses the change (or,
//! skipping, sets the row aside), and an append sink refuses retractions.

use std::io::Write;

use arrow::row::{RowConverter, SortField};
use weir_common::ChangeBatch;

use super::PostgresSink;
use crate::ConnectorError;
use crate::postgres::copy_text::{ColumnText, format_options};
use crate::postgres::{Mode, NAME};

impl PostgresSink {
    /// Encodes `changes` as stage lines of `epoch`.
    pub(super) fn encode(
        &mut self,
        epoch: u64,
        changes: &ChangeBatch,
    ) -> Result<(), ConnectorError> {
        let rows = changes.rows();
        let weights = changes.weights().values();
        let hashes = crate::receipt::row_hashes(rows.columns())
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        let options = format_options();
        let columns = rows
            .columns()
            .iter()
            .map(|a| ColumnText::new(NAME, a, &options))
            .collect::<Result<Vec<_>, _>>()?;
        if self
            .pending_epochs
            .last()
            .is_none_or(|&(e, _, _)| e != epoch)
        {
            self.pending_epochs.push((epoch, self.pending.len(), 0));
        }
        let rows_before = self.pending_rows;
        let skip_now = self.tables.skip_now;
        let mut null_keys: Option<arrow::array::BooleanArray> = None;
        let keys = if self.tables.target.mode == Mode::Upsert {
            if self.keys_epoch != epoch {
                self.keys.clear();
                self.keys_epoch = epoch;
            }
            let key_columns: Vec<_> = self
                .tables
                .target
                .key
                .iter()
                .map(|&k| rows.column(k).clone())
                .collect();
            for (&k, column) in self.tables.target.key.iter().zip(&key_columns) {
                if column.null_count() > 0 && skip_now {
                    // A row error: the row is refused, the rest go on.
                    let null = arrow::compute::is_null(column)
                        .map_err(|e| ConnectorError::arrow(NAME, e))?;
                    null_keys = Some(match null_keys {
                        None => null,
                        Some(before) => arrow::compute::or(&before, &null)
                            .map_err(|e| ConnectorError::arrow(NAME, e))?,
                    });
                    self.pending_refused_error = Some(format!(
                        "key column {} is NULL; an upsert needs every key",
                        rows.schema().field(k).name()
                    ));
                } else if column.null_count() > 0 {
                    return Err(ConnectorError::Refused {
                        connector: NAME.into(),
                        message: format!(
                            "sink {} got a row whose key column {} is NULL; an upsert needs every key",
                            self.tables.name,
                            rows.schema().field(k).name()
                        ),
                    });
                }
            }
            let converter = RowConverter::new(
                key_columns
                    .iter()
                    .map(|c| SortField::new(c.data_type().clone()))
                    .collect(),
            )
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
            Some(
                converter
                    .convert_columns(&key_columns)
                    .map_err(|e| ConnectorError::arrow(NAME, e))?,
            )
        } else {
            None
        };
        let mut scratch = String::new();
        let mut line = |out: &mut Vec<u8>, row: usize, weight: i64| {
            // Writing into a Vec cannot fail; no String per row.
            let _ = write!(out, "{epoch}\t{weight}");
            for column in &columns {
                out.push(b'\t');
                column.write(row, out, &mut scratch);
            }
            out.push(b'\n');
        };
        for (row, &weight) in weights.iter().enumerate() {
            if null_keys.as_ref().is_some_and(|n| n.value(row)) {
                if weight != 0 {
                    line(&mut self.pending_refused, row, weight.signum());
                    self.tally.add(hashes[row], weight);
                }
                continue;
            }
            match self.tables.target.mode {
                Mode::Append if !self.tables.target.changelog && weight < 0 => {
                    return Err(ConnectorError::Rejected {
                        connector: NAME.into(),
                        message: format!(
                            "append sink {} got a retraction, which it cannot write: use mode = 'upsert' with a key, or format = 'changelog'",
                            self.tables.name
                        ),
                    });
                }
                Mode::Append => {
                    let sign = weight.signum();
                    for _ in 0..weight.unsigned_abs() {
                        line(&mut self.pending, row, sign);
                        self.pending_rows += 1;
                        self.tally.add(hashes[row], sign);
                    }
                }
                Mode::Upsert => {
                    // Skipping, the commit's key check refuses the epoch.
                    if weight > 0
                        && !skip_now
                        && let Some(keys) = &keys
                    {
                        if weight > 1 || !self.keys.insert(keys.row(row).as_ref().into()) {
                            return Err(ConnectorError::Refused {
                                connector: NAME.into(),
                                message: format!(
                                    "sink {} got two rows with one key ({}) in epoch {epoch}: the key is not unique in its input",
                                    self.tables.name,
                                    self.tables.key_list()
                                ),
                            });
                        }
                    }
                    if weight != 0 {
                        // One line stands for the row's whole weight: an
                        // upsert writes or deletes the key's row.
                        line(&mut self.pending, row, weight.signum());
                        self.pending_rows += 1;
                        self.tally.add(hashes[row], weight);
                    }
                }
            }
        }
        if let Some(last) = self.pending_epochs.last_mut() {
            last.2 += self.pending_rows - rows_before;
        }
        Ok(())
    }
}
