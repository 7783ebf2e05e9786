//! The COPY sub-protocol.
//!
//! `COPY t FROM STDIN`: after CopyInResponse the client's CopyData payloads
//! are buffered in [`CopyInState`]; CopyDone hands them to
//! `Session::copy_in` (which parses them with
//! [`weir_pgsem::copy_format::decode_copy`]) and sends its command tag. CopyFail,
//! an error, or a disconnect drops the buffer: nothing is written and the
//! session stays usable.
//!
//! `COPY ... TO STDOUT`: the rows are already computed; each becomes one
//! CopyData line in text or CSV format, rendered with the same PostgreSQL
//! text output as query results.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::{Sink, SinkExt, stream};
use pgwire::api::ClientInfo;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::Format;
use pgwire::api::results::CopyResponse;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail, CopyInResponse, CopyOutResponse};

use super::encode::{data_row_values, encode_batches, field_infos};
use super::simple::{Sent, send_result, send_tag};
use super::{Conn, copy_binary, errors, sync_status};
use crate::session::api::{CopyFormat, CopyInTarget, CopyOptions, StatementResult};
use weir_pgsem::copy_format::{encode_copy_header, encode_copy_line};

/// The most COPY FROM STDIN data buffered for one statement. The session
/// takes the whole payload at once, so this bounds one client's memory.
const MAX_COPY_IN_BYTES: usize = 1 << 30;

/// The overall format code of CopyInResponse / CopyOutResponse: 0 for text
/// and CSV, 1 for binary (then every column is binary too).
fn format_code(options: &CopyOptions) -> i8 {
    i8::from(options.format == CopyFormat::Binary)
}

/// A `COPY FROM STDIN` waiting for its data.
pub(crate) struct CopyInState {
    target: CopyInTarget,
    data: BytesMut,
}

impl Conn {
    pub(crate) fn begin_copy_in(&self, target: CopyInTarget) {
        *self.copy_in.lock() = Some(CopyInState {
            target,
            data: BytesMut::new(),
        });
    }
}

/// The extended protocol's way to start copy-in (pgwire sends the response).
pub(crate) fn copy_in_response(target: &CopyInTarget) -> CopyResponse {
    let columns = target.schema.fields().len();
    CopyResponse::new(format_code(&target.options), columns, stream::empty())
}

pub(crate) async fn send_copy_in_response<C>(
    client: &mut C,
    target: &CopyInTarget,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let columns = target.schema.fields().len();
    let format = format_code(&target.options);
    client
        .send(PgWireBackendMessage::CopyInResponse(CopyInResponse::new(
            format,
            columns as i16,
            vec![i16::from(format); columns],
        )))
        .await?;
    Ok(())
}

/// Sends CopyOutResponse, one CopyData per line and CopyDone; returns the
/// number of rows. The caller sends the `COPY n` tag.
pub(crate) async fn send_copy_out<C>(
    client: &mut C,
    options: &CopyOptions,
    schema: &Schema,
    batches: Vec<RecordBatch>,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let columns = schema.fields().len();
    let format = format_code(options);
    client
        .feed(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            format,
            columns as i16,
            vec![i16::from(format); columns],
        )))
        .await?;
    if options.format == CopyFormat::Binary {
        return send_binary_copy_out(client, schema, batches).await;
    }
    let mut line = Vec::new();
    if options.header {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        encode_copy_header(&names, options, &mut line);
        send_line(client, &mut line).await?;
    }
    let fields = Arc::new(field_infos(schema, &Format::UnifiedText));
    let mut rows = 0;
    for row in encode_batches(schema, fields, batches) {
        let row = row?;
        let values = data_row_values(&row)
            .into_iter()
            .map(|v| v.map(std::str::from_utf8).transpose())
            .collect::<Result<Vec<Option<&str>>, _>>()
            .map_err(|_| errors::error("22021", "invalid byte sequence for encoding \"UTF8\""))?;
        encode_copy_line(&values, options, &mut line);
        send_line(client, &mut line).await?;
        rows += 1;
    }
    client
        .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    Ok(rows)
}

async fn send_binary_copy_out<C>(
    client: &mut C,
    schema: &Schema,
    batches: Vec<RecordBatch>,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let mut chunk = copy_binary::header();
    let fields = Arc::new(field_infos(schema, &Format::UnifiedBinary));
    let mut rows = 0;
    for row in encode_batches(schema, fields, batches) {
        chunk.extend_from_slice(&copy_binary::tuple(&row?));
        send_line(client, &mut chunk).await?;
        rows += 1;
    }
    chunk.extend_from_slice(&copy_binary::trailer());
    send_line(client, &mut chunk).await?;
    client
        .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    Ok(rows)
}

async fn send_line<C>(client: &mut C, line: &mut Vec<u8>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let data = Bytes::from(std::mem::take(line));
    client
        .feed(PgWireBackendMessage::CopyData(CopyData::new(data)))
        .await?;
    Ok(())
}

#[async_trait]
impl CopyHandler for Conn {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut copy_in = self.copy_in.lock();
        let Some(state) = copy_in.as_mut() else {
            return Err(errors::error(
                "08P01",
                "unexpected CopyData: no COPY FROM STDIN is running",
            ));
        };
        if state.data.len() + copy_data.data.len() > MAX_COPY_IN_BYTES {
            *copy_in = None;
            return Err(errors::error(
                "54000",
                format!(
                    "COPY FROM STDIN data exceeds {MAX_COPY_IN_BYTES} bytes; split it into several COPY statements"
                ),
            ));
        }
        state.data.extend_from_slice(&copy_data.data);
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(state) = self.copy_in.lock().take() else {
            return Err(errors::error(
                "08P01",
                "unexpected CopyDone: no COPY FROM STDIN is running",
            ));
        };
        let mut session = self.session().await?;
        let result = session.copy_in(&state.target, state.data.freeze()).await;
        let rest = match &result {
            Ok(_) => session.resume_after_copy().await,
            Err(_) => {
                session.abandon_after_copy();
                Vec::new()
            }
        };
        sync_status(client, &session);
        drop(session);
        match result {
            Ok(StatementResult::Command { tag }) => send_tag(client, tag).await?,
            Ok(_) => {
                return Err(errors::error(
                    "XX000",
                    "COPY FROM STDIN did not produce a command tag",
                ));
            }
            Err(e) => return Err(errors::to_pgwire(e)),
        }
        for result in rest {
            match send_result(client, result).await? {
                Sent::Next => {}
                Sent::Stop | Sent::CopyIn(_) => break,
            }
        }
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.copy_in.lock().take();
        if let Ok(mut session) = self.session().await {
            session.abandon_after_copy();
        }
        errors::error("57014", format!("COPY from stdin failed: {}", fail.message))
    }
}
