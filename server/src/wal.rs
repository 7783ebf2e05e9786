//! What one table-log record holds: the table writes of one committed
//! transaction.
//!
//! Layout: `[header_len: u32 LE][header JSON][for each Changes op: len: u64 LE, Arrow IPC stream]`.
//! The header names the transaction, whether it also changed the catalog
//! (then the record only counts if the control log holds that transaction),
//! and the ops in order.

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use weir_common::{ChangeBatch, ObjectId};

use crate::error::ServerError;

#[derive(Debug, Clone)]
pub enum TableWrite {
    Changes(ChangeBatch),
    Truncate,
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
            if let TableWrite::Changes(change) = op {
                let batch = change
                    .to_record_batch()
                    .map_err(|e| ServerError::internal(e.to_string()))?;
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

    pub fn decode(bytes: &[u8]) -> Result<Self, ServerError> {
        let corrupt =
            |what: &str| ServerError::internal(format!("corrupt table-log record: {what}"));
        let mut pos = 0;
        let mut take = |n: usize| -> Result<&[u8], ServerError> {
            let slice = bytes
                .get(pos..pos + n)
                .ok_or_else(|| corrupt("truncated"))?;
            pos += n;
            Ok(slice)
        };
        let header_len = u32::from_le_bytes(take(4)?.try_into().map_err(|_| corrupt("length"))?);
        let header: Header = serde_json::from_slice(take(header_len as usize)?)
            .map_err(|e| corrupt(&e.to_string()))?;
        let mut ops = Vec::with_capacity(header.ops.len());
        for (id, kind) in header.ops {
            let op = match kind {
                OpKind::Truncate => TableWrite::Truncate,
                OpKind::Changes => {
                    let len =
                        u64::from_le_bytes(take(8)?.try_into().map_err(|_| corrupt("length"))?);
                    let ipc = take(len as usize)?;
                    let mut reader = StreamReader::try_new(Cursor::new(ipc), None)?;
                    let batch = reader.next().ok_or_else(|| corrupt("empty batch"))??;
                    TableWrite::Changes(
                        ChangeBatch::from_record_batch(&batch)
                            .map_err(|e| corrupt(&e.to_string()))?,
                    )
                }
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
    use arrow::array::{Int64Array, RecordBatch};
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
    fn garbage_is_an_error_not_a_panic() {
        assert!(WalRecord::decode(&[1, 2, 3]).is_err());
        assert!(WalRecord::decode(&[0, 0, 0, 0]).is_err());
    }
}
