//! Arrow and Flight encoding helpers shared by the command handlers.
//!
//! - [`batches_response`]: record batches out as a `DoGet` stream, with the
//!   schema message first even when there are no rows, and dictionaries kept
//!   as dictionaries so the wire schema is the plan's schema.
//! - [`collect_batches`]: a `DoPut` stream in as record batches.
//! - [`schema_bytes`], [`flight_info`], [`any_ticket`]: FlightInfo plumbing.
//! - [`Outcome`]: what a run of statements produced, and [`rows_affected`],
//!   the row count in a PostgreSQL command tag.

use std::pin::Pin;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::sql::ProstMessageExt;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::{
    FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket,
};
use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Response, Status};

use super::status::{arrow_status, to_status, unsupported};
use crate::error::ServerError;
use crate::session::StatementResult;

/// The stream type of every `DoGet` answer.
pub(crate) type DoGetStream = Pin<Box<dyn Stream<Item = Result<FlightData, Status>> + Send>>;

/// Streams `batches` to the client, announcing `schema` first.
pub(crate) fn batches_response(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Response<DoGetStream> {
    let input = futures::stream::iter(batches.into_iter().map(Ok));
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_dictionary_handling(DictionaryHandling::Resend)
        .build(input)
        .map_err(Status::from);
    Response::new(Box::pin(encoded))
}

/// Decodes every record batch of a `DoPut` stream. Returns the stream's schema
/// (if the client sent one) with the batches; messages without an IPC header
/// (a descriptor-only first message) are skipped.
pub(crate) async fn collect_batches(
    stream: PeekableFlightDataStream,
) -> Result<(Option<SchemaRef>, Vec<RecordBatch>), Status> {
    let data = stream
        .try_filter(|fd| futures::future::ready(!fd.data_header.is_empty()))
        .map_err(FlightError::from);
    let mut decoded = FlightRecordBatchStream::new_from_flight_data(data);
    let mut batches = Vec::new();
    while let Some(batch) = decoded.next().await {
        let batch = batch.map_err(|e| match e {
            FlightError::Tonic(status) => *status,
            other => super::status::bad_request(format!("cannot decode Arrow data: {other}")),
        })?;
        batches.push(batch);
    }
    Ok((decoded.schema().cloned(), batches))
}

/// `schema` as an IPC schema message, the form Flight SQL uses for
/// `dataset_schema`, `parameter_schema` and `FlightInfo.schema`.
pub(crate) fn schema_bytes(schema: &Schema) -> Result<Bytes, Status> {
    let options = IpcWriteOptions::default();
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &options)
        .try_into()
        .map_err(|e| arrow_status("cannot encode schema", e))?;
    Ok(bytes)
}

/// A ticket holding `cmd` packed as a protobuf `Any`, the form the Flight SQL
/// dispatcher decodes in `DoGet`.
pub(crate) fn any_ticket<C: ProstMessageExt>(cmd: &C) -> Ticket {
    Ticket::new(cmd.as_any().encode_to_vec())
}

/// A FlightInfo announcing `schema`, with one endpoint for `ticket` (none
/// when the result is already complete).
pub(crate) fn flight_info(
    schema: &Schema,
    ticket: Option<Ticket>,
    descriptor: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    let mut info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| arrow_status("cannot encode schema", e))?
        .with_descriptor(descriptor);
    if let Some(ticket) = ticket {
        info = info.with_endpoint(FlightEndpoint::new().with_ticket(ticket));
    }
    Ok(info)
}

/// The empty schema of statements that return no rows.
pub(crate) fn empty_schema() -> SchemaRef {
    Arc::new(Schema::empty())
}

/// What a run of one or more statements produced.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The rows of the last statement that returned rows.
    pub rows: Option<(SchemaRef, Vec<RecordBatch>)>,
    /// Rows affected by commands plus rows returned by queries.
    pub count: i64,
}

impl Outcome {
    pub(crate) fn new() -> Self {
        Outcome {
            rows: None,
            count: 0,
        }
    }

    /// Adds one statement's result.
    pub(crate) fn add(&mut self, result: StatementResult) -> Result<(), Status> {
        match result {
            StatementResult::Rows { schema, batches } => {
                let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
                self.count = self
                    .count
                    .saturating_add(i64::try_from(n).unwrap_or(i64::MAX));
                match &mut self.rows {
                    Some((existing, acc)) if existing == &schema => acc.extend(batches),
                    _ => self.rows = Some((schema, batches)),
                }
            }
            StatementResult::Command { tag } => {
                self.count = self.count.saturating_add(rows_affected(&tag));
            }
            StatementResult::Empty => {}
            StatementResult::CopyIn(_) | StatementResult::CopyOut { .. } => {
                return Err(unsupported(
                    "COPY (use Flight SQL bulk ingest, CommandStatementIngest, to load data)",
                ));
            }
        }
        Ok(())
    }

    /// Folds the per-statement results of `Session::execute_simple`; the first
    /// error (always the last entry) wins.
    pub(crate) fn from_simple(
        results: Vec<Result<StatementResult, ServerError>>,
    ) -> Result<Outcome, Status> {
        let mut outcome = Outcome::new();
        for result in results {
            outcome.add(result.map_err(to_status)?)?;
        }
        Ok(outcome)
    }
}

/// The row count in a PostgreSQL command tag: `INSERT 0 3` → 3,
/// `UPDATE 2` → 2; tags without a count (DDL, `BEGIN`) → 0.
pub(crate) fn rows_affected(tag: &str) -> i64 {
    let mut words = tag.split_whitespace();
    let verb = words.next().unwrap_or("");
    let counts_rows = matches!(
        verb.to_ascii_uppercase().as_str(),
        "INSERT" | "UPDATE" | "DELETE" | "SELECT" | "COPY" | "MERGE" | "FETCH" | "MOVE"
    );
    if !counts_rows {
        return 0;
    }
    words
        .last()
        .and_then(|n| n.parse::<i64>().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field};

    #[test]
    fn command_tags_give_row_counts() {
        assert_eq!(rows_affected("INSERT 0 3"), 3);
        assert_eq!(rows_affected("UPDATE 2"), 2);
        assert_eq!(rows_affected("DELETE 0"), 0);
        assert_eq!(rows_affected("SELECT 7"), 7);
        assert_eq!(rows_affected("COPY 12"), 12);
        assert_eq!(rows_affected("CREATE TABLE"), 0);
        assert_eq!(rows_affected("DROP TABLE"), 0);
        assert_eq!(rows_affected("BEGIN"), 0);
        assert_eq!(rows_affected(""), 0);
        assert_eq!(rows_affected("INSERT 0 x"), 0);
    }

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .expect("valid batch")
    }

    #[test]
    fn outcome_sums_counts_and_keeps_last_rows() {
        let b = batch();
        let results = vec![
            Ok(StatementResult::Command {
                tag: "INSERT 0 3".into(),
            }),
            Ok(StatementResult::Empty),
            Ok(StatementResult::Rows {
                schema: b.schema(),
                batches: vec![b.clone()],
            }),
        ];
        let outcome = Outcome::from_simple(results).expect("no error");
        assert_eq!(outcome.count, 5);
        let (schema, batches) = outcome.rows.expect("rows");
        assert_eq!(schema, b.schema());
        assert_eq!(batches, vec![b]);
    }

    #[tokio::test]
    async fn encoded_stream_starts_with_schema_even_without_rows() {
        let b = batch();
        let response = batches_response(b.schema(), vec![]);
        let messages: Vec<FlightData> = response.into_inner().try_collect().await.expect("encodes");
        assert_eq!(messages.len(), 1);
        let schema = Schema::try_from(&messages[0]).expect("schema message");
        assert_eq!(&schema, b.schema().as_ref());
    }

    #[tokio::test]
    async fn encoded_batches_round_trip() {
        let b = batch();
        let stream = batches_response(b.schema(), vec![b.clone()])
            .into_inner()
            .map_err(FlightError::from);
        let decoded: Vec<RecordBatch> = FlightRecordBatchStream::new_from_flight_data(stream)
            .try_collect()
            .await
            .expect("decodes");
        assert_eq!(decoded, vec![b]);
    }

    #[test]
    fn schema_bytes_round_trip() {
        let b = batch();
        let bytes = schema_bytes(b.schema().as_ref()).expect("encodes");
        let schema = Schema::try_from(IpcMessage(bytes)).expect("decodes");
        assert_eq!(&schema, b.schema().as_ref());
    }
}
