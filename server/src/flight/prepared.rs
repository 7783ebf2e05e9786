//! Prepared statement handles and parameter binding.
//!
//! Flight SQL prepared statements outlive the call that created them, so the
//! server keeps a [`PreparedRegistry`] from handle (16 random bytes) to the
//! [`PreparedStatement`] and the parameters last bound with `DoPut`. The
//! registry is bounded: past [`MAX_PREPARED`] handles the least recently used
//! one is dropped (clients that never close statements cannot grow it without
//! limit).
//!
//! Parameters arrive as Arrow record batches, one row per execution, columns
//! by position. [`bind_batch`] casts each column to the statement's declared
//! parameter type; [`param_rows`] turns rows into `ScalarValue`s.
//!
//! Tickets for prepared queries carry the handle followed by the bound
//! parameters as an Arrow IPC stream ([`ExecTicket`]), so a `DoGet` runs with
//! the parameters seen at `GetFlightInfo` even if the client rebinds in
//! between.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::{CastOptions, cast_with_options, concat_batches};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use bytes::Bytes;
use datafusion::scalar::ScalarValue;
use parking_lot::Mutex;
use tonic::Status;

use super::status::{arrow_status, bad_request, to_status};
use crate::error::ServerError;
use crate::session::PreparedStatement;

/// Most prepared statements kept at once.
pub(crate) const MAX_PREPARED: usize = 4096;

/// Length of a prepared statement handle.
const HANDLE_LEN: usize = 16;

type Handle = [u8; HANDLE_LEN];

/// Prepared statements by handle, shared by all calls. Generic over the
/// statement type so the bookkeeping can be tested without a database.
pub(crate) struct PreparedRegistry<S = PreparedStatement> {
    inner: Mutex<Entries<S>>,
}

struct Entries<S> {
    by_handle: HashMap<Handle, Entry<S>>,
    /// Logical clock for least-recently-used eviction.
    clock: u64,
}

struct Entry<S> {
    stmt: S,
    params: Option<RecordBatch>,
    last_used: u64,
}

/// A statement and the parameters bound to it.
#[derive(Clone)]
pub(crate) struct Bound<S = PreparedStatement> {
    pub stmt: S,
    pub params: Option<RecordBatch>,
}

impl<S> Default for PreparedRegistry<S> {
    fn default() -> Self {
        PreparedRegistry {
            inner: Mutex::new(Entries {
                by_handle: HashMap::new(),
                clock: 0,
            }),
        }
    }
}

impl<S: Clone> PreparedRegistry<S> {
    /// Stores `stmt` under a new random handle and returns the handle.
    pub(crate) fn insert(&self, stmt: S) -> Bytes {
        let handle = *uuid::Uuid::new_v4().as_bytes();
        let mut entries = self.inner.lock();
        entries.clock += 1;
        let last_used = entries.clock;
        entries.by_handle.insert(
            handle,
            Entry {
                stmt,
                params: None,
                last_used,
            },
        );
        if entries.by_handle.len() > MAX_PREPARED {
            let oldest = entries
                .by_handle
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(h, _)| *h);
            if let Some(oldest) = oldest {
                entries.by_handle.remove(&oldest);
            }
        }
        Bytes::copy_from_slice(&handle)
    }

    /// The statement and bound parameters for `handle`.
    pub(crate) fn get(&self, handle: &[u8]) -> Result<Bound<S>, Status> {
        let key = parse_handle(handle)?;
        let mut entries = self.inner.lock();
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries.by_handle.get_mut(&key).ok_or_else(unknown_handle)?;
        entry.last_used = now;
        Ok(Bound {
            stmt: entry.stmt.clone(),
            params: entry.params.clone(),
        })
    }

    /// Replaces the parameters bound to `handle`.
    pub(crate) fn bind(&self, handle: &[u8], params: RecordBatch) -> Result<(), Status> {
        let key = parse_handle(handle)?;
        let mut entries = self.inner.lock();
        let entry = entries.by_handle.get_mut(&key).ok_or_else(unknown_handle)?;
        entry.params = Some(params);
        Ok(())
    }

    /// Forgets `handle`; closing an unknown handle is not an error (close is
    /// idempotent, and the handle may have been evicted).
    pub(crate) fn remove(&self, handle: &[u8]) {
        if let Ok(key) = parse_handle(handle) {
            self.inner.lock().by_handle.remove(&key);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().by_handle.len()
    }
}

fn parse_handle(handle: &[u8]) -> Result<Handle, Status> {
    handle
        .try_into()
        .map_err(|_| bad_request("malformed prepared statement handle"))
}

fn unknown_handle() -> Status {
    let mut status = Status::not_found(
        "26000: prepared statement handle is unknown (closed, evicted, or from another server)",
    );
    status.metadata_mut().insert(
        "x-sqlstate",
        tonic::metadata::MetadataValue::from_static("26000"),
    );
    status
}

/// The execution ticket of a prepared query: handle plus parameter snapshot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExecTicket {
    pub handle: Bytes,
    pub params: Option<RecordBatch>,
}

impl ExecTicket {
    /// Serializes as `handle ++ IPC stream of params`.
    pub(crate) fn encode(&self) -> Result<Bytes, Status> {
        let mut out = self.handle.to_vec();
        if let Some(params) = &self.params {
            let mut writer = StreamWriter::try_new(&mut out, params.schema_ref())
                .map_err(|e| arrow_status("cannot encode parameters", e))?;
            writer
                .write(params)
                .map_err(|e| arrow_status("cannot encode parameters", e))?;
            writer
                .finish()
                .map_err(|e| arrow_status("cannot encode parameters", e))?;
        }
        Ok(Bytes::from(out))
    }

    /// Parses what [`Self::encode`] wrote; a bare handle has no snapshot.
    pub(crate) fn decode(bytes: &Bytes) -> Result<Self, Status> {
        if bytes.len() < HANDLE_LEN {
            return Err(bad_request("malformed prepared statement handle"));
        }
        let handle = bytes.slice(..HANDLE_LEN);
        let rest = bytes.slice(HANDLE_LEN..);
        if rest.is_empty() {
            return Ok(ExecTicket {
                handle,
                params: None,
            });
        }
        let reader = StreamReader::try_new(std::io::Cursor::new(rest), None)
            .map_err(|e| bad_request(format!("malformed parameter snapshot in ticket: {e}")))?;
        let schema = reader.schema();
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad_request(format!("malformed parameter snapshot in ticket: {e}")))?;
        let params = concat_batches(&schema, &batches)
            .map_err(|e| arrow_status("cannot combine parameters", e))?;
        Ok(ExecTicket {
            handle,
            params: Some(params),
        })
    }
}

/// The Arrow schema describing a statement's parameters (`$1`, `$2`, ...).
pub(crate) fn parameter_schema(param_types: &[DataType]) -> Schema {
    Schema::new(
        param_types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("${}", i + 1), t.clone(), true))
            .collect::<Vec<_>>(),
    )
}

/// Combines the batches a client sent as parameters and casts each column to
/// the declared parameter type. Columns bind by position.
pub(crate) fn bind_batch(
    schema: Option<SchemaRef>,
    batches: &[RecordBatch],
    param_types: &[DataType],
) -> Result<RecordBatch, Status> {
    let schema = match (schema, batches.first()) {
        (_, Some(first)) => first.schema(),
        (Some(schema), None) => schema,
        (None, None) => Arc::new(Schema::empty()),
    };
    let combined = concat_batches(&schema, batches)
        .map_err(|e| arrow_status("cannot combine parameters", e))?;
    cast_params(&combined, param_types).map_err(to_status)
}

fn cast_params(batch: &RecordBatch, param_types: &[DataType]) -> Result<RecordBatch, ServerError> {
    if batch.num_columns() != param_types.len() {
        return Err(ServerError::invalid_param(format!(
            "statement takes {} parameter(s) but {} were bound",
            param_types.len(),
            batch.num_columns()
        )));
    }
    let options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(param_types.len());
    let mut fields = Vec::with_capacity(param_types.len());
    for (i, (column, to)) in batch.columns().iter().zip(param_types).enumerate() {
        let cast = if column.data_type() == to {
            Arc::clone(column)
        } else {
            cast_with_options(column, to, &options).map_err(|e| {
                ServerError::invalid_param(format!(
                    "parameter ${}: cannot convert {} to {}: {e}",
                    i + 1,
                    column.data_type(),
                    to
                ))
            })?
        };
        fields.push(Field::new(format!("${}", i + 1), to.clone(), true));
        columns.push(cast);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(|e| ServerError::internal(format!("cannot bind parameters: {e}")))
}

/// One `Vec<ScalarValue>` per row of `params`; a statement without parameters
/// and no bound batch executes once with no values.
pub(crate) fn param_rows(
    params: Option<&RecordBatch>,
    param_types: &[DataType],
) -> Result<Vec<Vec<ScalarValue>>, Status> {
    let Some(batch) = params else {
        if param_types.is_empty() {
            return Ok(vec![Vec::new()]);
        }
        return Err(to_status(ServerError::invalid_param(format!(
            "statement takes {} parameter(s) but none were bound",
            param_types.len()
        ))));
    };
    if batch.num_columns() == 0 && param_types.is_empty() {
        return Ok(vec![Vec::new()]);
    }
    (0..batch.num_rows())
        .map(|row| {
            batch
                .columns()
                .iter()
                .map(|col| {
                    ScalarValue::try_from_array(col.as_ref(), row).map_err(|e| {
                        to_status(ServerError::invalid_param(format!(
                            "cannot read parameter value: {e}"
                        )))
                    })
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array, StringArray};

    fn params() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("0", DataType::Int64, true),
            Field::new("1", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("a"), Some("b")])),
            ],
        )
        .expect("valid batch")
    }

    #[test]
    fn binding_casts_to_declared_types() {
        let b = params();
        let bound =
            bind_batch(None, &[b.clone(), b], &[DataType::Int32, DataType::Utf8]).expect("binds");
        assert_eq!(bound.num_rows(), 4);
        assert_eq!(bound.column(0).data_type(), &DataType::Int32);
        let rows = param_rows(Some(&bound), &[DataType::Int32, DataType::Utf8]).expect("rows");
        assert_eq!(
            rows[0],
            vec![
                ScalarValue::Int32(Some(1)),
                ScalarValue::Utf8(Some("a".into()))
            ]
        );
        assert_eq!(
            rows[1],
            vec![
                ScalarValue::Int32(None),
                ScalarValue::Utf8(Some("b".into()))
            ]
        );
    }

    #[test]
    fn binding_checks_arity_and_conversions() {
        let err = bind_batch(None, &[params()], &[DataType::Int64]).expect_err("arity");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        let err = bind_batch(None, &[params()], &[DataType::Int64, DataType::Int32])
            .expect_err("'a' is not an int");
        assert!(err.message().contains("$2"), "{}", err.message());
    }

    #[test]
    fn rows_without_parameters() {
        assert_eq!(
            param_rows(None, &[]).expect("ok"),
            vec![Vec::<ScalarValue>::new()]
        );
        assert!(param_rows(None, &[DataType::Int64]).is_err());
        let empty = bind_batch(None, &[], &[]).expect("binds");
        assert_eq!(param_rows(Some(&empty), &[]).expect("ok").len(), 1);
    }

    #[test]
    fn exec_ticket_round_trips() {
        let handle = Bytes::copy_from_slice(&[7u8; 16]);
        let bare = ExecTicket {
            handle: handle.clone(),
            params: None,
        };
        assert_eq!(
            ExecTicket::decode(&bare.encode().expect("enc")).expect("dec"),
            bare
        );
        let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Int32, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![5, 6]))])
            .expect("valid");
        let full = ExecTicket {
            handle,
            params: Some(batch),
        };
        assert_eq!(
            ExecTicket::decode(&full.encode().expect("enc")).expect("dec"),
            full
        );
        assert!(ExecTicket::decode(&Bytes::from_static(b"short")).is_err());
    }

    #[test]
    fn registry_binds_and_evicts_least_recently_used() {
        let registry = PreparedRegistry::<String>::default();
        let first = registry.insert("first".to_string());
        let second = registry.insert("second".to_string());
        assert_ne!(first, second);
        assert_eq!(first.len(), 16);
        registry.bind(&second, params()).expect("binds");
        let bound = registry.get(&second).expect("known");
        assert_eq!(bound.stmt, "second");
        assert_eq!(bound.params, Some(params()));
        // Touch `first` so `second` is the least recently used.
        registry.get(&first).expect("known");
        for i in 0..MAX_PREPARED - 1 {
            registry.insert(format!("s{i}"));
        }
        assert_eq!(registry.len(), MAX_PREPARED);
        assert!(registry.get(&second).is_err(), "evicted");
        assert!(registry.get(&first).is_ok(), "kept");
        registry.remove(&first);
        assert!(registry.get(&first).is_err());
    }

    #[test]
    fn unknown_and_malformed_handles() {
        let registry = PreparedRegistry::<String>::default();
        assert_eq!(
            registry.get(&[0u8; 16]).err().map(|s| s.code()),
            Some(tonic::Code::NotFound)
        );
        assert_eq!(
            registry.get(b"nope").err().map(|s| s.code()),
            Some(tonic::Code::InvalidArgument)
        );
        registry.remove(b"nope");
        assert_eq!(registry.len(), 0);
    }
}
