//! What one table-log record holds: the table writes of one committed
//! transaction.
//!
//! Layout: `[header_len: u32 LE][header JSON][for each Changes or Rewrite op: len: u64 LE, Arrow IPC stream]`.
//! The header names the transaction, whether it also changed the catalog
//! (then the record only counts if the control log holds that transaction),
//! and the ops in order.

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::writer::StreamWriter;
use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use weir_common::{ChangeBatch, ObjectId};

use crate::error::ServerError;

#[derive(Debug, Clone)]
pub enum TableWrite {
    Changes(ChangeBatch),
    Truncate,
    /// The table's whole contents from here on, in a new physical layout
    /// (`ALTER TABLE`, and the first batch of each table in a table
    /// snapshot): the state is replaced by one over `rows`' schema keyed by
    /// `key` (indices into it). Records before it were written in an
    /// older layout, so the log replays into the layout each record had,
    /// never into the catalog's latest.
    Rewrite {
        key: Vec<usize>,
        rows: RecordBatch,
    },
}

#[derive(Debug, Clone)]
pub struct WalRecord {
    pub txn: uuid::Uuid,
    /// The transaction also appended a control-log entry.
    pub has_ddl: bool,
    pub ops: Vec<(ObjectId, TableWrite)>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    txn: uuid::Uuid,
    has_ddl: bool,
    ops: Vec<(ObjectId, OpKind)>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OpKind {
    Changes,
    Truncate,
    Rewrite { key: Vec<usize> },
}

impl WalRecord {
    pub fn encode(&self) -> Result<Bytes, ServerError> {
        let header = Header {
            txn: self.txn,
            has_ddl: self.has_ddl,
            ops: self
                .ops
                .iter()
                .map(|(id, op)| {
                    let kind = match op {
                        TableWrite::Changes(_) => OpKind::Changes,
                        TableWrite::Truncate => OpKind::Truncate,
                        TableWrite::Rewrite { key, .. } => OpKind::Rewrite { key: key.clone() },
                    };
                    (*id, kind)
                })
                .collect(),
        };
        let header =
            serde_json::to_vec(&header).map_err(|e| ServerError::internal(e.to_string()))?;
        let mut out = BytesMut::new();
        out.put_u32_le(header.len() as u32);
        out.put_slice(&header);
        for (_, op) in &self.ops {
            let batch = match op {
                TableWrite::Changes(change) => Some(
                    change
                        .to_record_batch()
                        .map_err(|e| ServerError::internal(e.to_string()))?,
                ),
                TableWrite::Rewrite { rows, .. } => Some(rows.clone()),
                TableWrite::Truncate => None,
            };
            if let Some(batch) = batch {
                let mut ipc = Vec::new();
                let mut writer = StreamWriter::try_new(&mut ipc, &batch.schema())?;
                writer.write(&batch)?;
                writer.finish()?;
                drop(writer);
                out.put_u64_le(ipc.len() as u64);
                out.put_slice(&ipc);
            }
        }
        Ok(out.freeze())
    }

    /// Reads a record from `bytes`. The decoded batches share `bytes`
    /// instead of copying out of it (Arrow copies only buffers that are
    /// misaligned for their type), so opening a large table snapshot or log
    /// touches no second copy of it.
    pub fn decode(bytes: &Bytes) -> Result<Self, ServerError> {
        let corrupt =
            |what: &str| ServerError::internal(format!("corrupt table-log record: {what}"));
        let mut pos = 0usize;
        let mut take = |n: usize| -> Result<Bytes, ServerError> {
            let end = pos
                .checked_add(n)
                .filter(|end| *end <= bytes.len())
                .ok_or_else(|| corrupt("truncated"))?;
            let slice = bytes.slice(pos..end);
            pos = end;
            Ok(slice)
        };
        let header_len =
            u32::from_le_bytes(take(4)?[..].try_into().map_err(|_| corrupt("length"))?);
        let header: Header = serde_json::from_slice(&take(header_len as usize)?)
            .map_err(|e| corrupt(&e.to_string()))?;
        let mut ops = Vec::with_capacity(header.ops.len());
        for (id, kind) in header.ops {
            let mut batch = || -> Result<RecordBatch, ServerError> {
                let len =
                    u64::from_le_bytes(take(8)?[..].try_into().map_err(|_| corrupt("length"))?);
                let len = usize::try_from(len).map_err(|_| corrupt("length"))?;
                let mut ipc = Buffer::from(take(len)?);
                let mut decoder = StreamDecoder::new();
                decoder
                    .decode(&mut ipc)?
                    .ok_or_else(|| corrupt("empty batch"))
            };
            let op = match kind {
                OpKind::Truncate => TableWrite::Truncate,
                OpKind::Changes => TableWrite::Changes(
                    ChangeBatch::from_record_batch(&batch()?)
                        .map_err(|e| corrupt(&e.to_string()))?,
                ),
                OpKind::Rewrite { key } => TableWrite::Rewrite {
                    key,
                    rows: batch()?,
                },
            };
            ops.push((id, op));
        }
        Ok(Self {
            txn: header.txn,
            has_ddl: header.has_ddl,
            ops,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn round_trip() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let record = WalRecord {
            txn: uuid::Uuid::new_v4(),
            has_ddl: true,
            ops: vec![
                (ObjectId(7), TableWrite::Truncate),
                (
                    ObjectId(7),
                    TableWrite::Changes(ChangeBatch::inserts(rows.clone())),
                ),
            ],
        };
        let back = WalRecord::decode(&record.encode().unwrap()).unwrap();
        assert_eq!(back.txn, record.txn);
        assert!(back.has_ddl);
        assert!(matches!(back.ops[0], (ObjectId(7), TableWrite::Truncate)));
        let TableWrite::Changes(c) = &back.ops[1].1 else {
            panic!()
        };
        assert_eq!(c.rows(), &rows);
    }

    #[test]
    fn a_rewrite_keeps_its_key_and_layout() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int64, false),
            Field::new("y", DataType::Utf8, true),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        let record = WalRecord {
            txn: uuid::Uuid::new_v4(),
            has_ddl: true,
            ops: vec![
                (
                    ObjectId(3),
                    TableWrite::Rewrite {
                        key: vec![0],
                        rows: rows.clone(),
                    },
                ),
                (ObjectId(3), TableWrite::Truncate),
                (
                    ObjectId(3),
                    TableWrite::Changes(ChangeBatch::inserts(rows.clone())),
                ),
            ],
        };
        let back = WalRecord::decode(&record.encode().unwrap()).unwrap();
        let TableWrite::Rewrite {
            key,
            rows: back_rows,
        } = &back.ops[0].1
        else {
            panic!("{:?}", back.ops[0])
        };
        assert_eq!(key, &[0]);
        assert_eq!(back_rows, &rows);
        assert!(matches!(back.ops[1].1, TableWrite::Truncate));
        let TableWrite::Changes(c) = &back.ops[2].1 else {
            panic!()
        };
        assert_eq!(c.rows(), &rows);
    }

    #[test]
    fn decoded_strings_share_the_record() {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
        let text = StringArray::from(vec!["x".repeat(1000), "y".repeat(1000)]);
        let rows = RecordBatch::try_new(schema, vec![Arc::new(text)]).unwrap();
        let record = WalRecord {
            txn: uuid::Uuid::new_v4(),
            has_ddl: false,
            ops: vec![(ObjectId(1), TableWrite::Changes(ChangeBatch::inserts(rows)))],
        };
        let bytes = record.encode().unwrap();
        let back = WalRecord::decode(&bytes).unwrap();
        let TableWrite::Changes(c) = &back.ops[0].1 else {
            panic!()
        };
        let values = c.rows().column(0).as_string::<i32>().values().as_ptr();
        assert!(
            bytes.as_ptr_range().contains(&values),
            "the strings were copied"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(WalRecord::decode(&Bytes::from_static(&[1, 2, 3])).is_err());
        assert!(WalRecord::decode(&Bytes::from_static(&[0, 0, 0, 0])).is_err());
    }
}
