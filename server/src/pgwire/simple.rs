//! The simple query protocol: a Query message may hold several statements;
//! `Session::execute_simple` returns one result per statement (stopping at
//! the first error) and each is sent as RowDescription + DataRows +
//! CommandComplete, CommandComplete, EmptyQueryResponse, a COPY exchange, or
//! ErrorResponse. ReadyForQuery then reports the session's transaction
//! status.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::portal::Format;
use pgwire::api::query::{SimpleQueryHandler, send_ready_for_query};
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::RowDescription;
use pgwire::messages::response::{CommandComplete, EmptyQueryResponse};
use pgwire::messages::simplequery::Query;

use super::encode::{encode_batches, field_infos};
use super::{Conn, copy, errors, sync_status};
use crate::error::ServerError;
use crate::session::api::{CopyInTarget, StatementResult};
use crate::session::cursor::{BINARY_METADATA_KEY, COMMAND_TAG_METADATA_KEY};

/// The command a row result's tag names: `SELECT`, or `FETCH` for a cursor.
pub(crate) fn row_command(schema: &arrow::datatypes::Schema) -> &str {
    schema
        .metadata()
        .get(COMMAND_TAG_METADATA_KEY)
        .map_or("SELECT", String::as_str)
}

/// What the caller should do after one statement's result was sent.
pub(crate) enum Sent {
    Next,
    /// An error was sent; later results are not.
    Stop,
    /// `COPY FROM STDIN`: the client must now send the data.
    CopyIn(CopyInTarget),
}

#[async_trait]
impl SimpleQueryHandler for Conn {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let mut session = self.session().await?;
        let results = session.execute_simple(&query.query).await;
        send_notices(client, session.take_notices()).await?;
        for result in results {
            match send_result(client, result).await? {
                Sent::Next => {}
                Sent::Stop => break,
                Sent::CopyIn(target) => {
                    // The statements after the COPY run once its data is in
                    // (see `on_copy_done`).
                    copy::send_copy_in_response(client, &target).await?;
                    self.begin_copy_in(target);
                    sync_status(client, &session);
                    client.set_state(PgWireConnectionState::CopyInProgress(false));
                    return Ok(());
                }
            }
        }
        let status = sync_status(client, &session);
        client.set_state(PgWireConnectionState::ReadyForQuery);
        send_ready_for_query(client, status).await
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // `on_query` above does all the work and never calls this.
        Err(errors::error("XX000", "simple query dispatch bypassed"))
    }
}

/// Sends one statement's result the way the simple protocol does (with a
/// RowDescription before rows).
pub(crate) async fn send_result<C>(
    client: &mut C,
    result: Result<StatementResult, ServerError>,
) -> PgWireResult<Sent>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let result = match result {
        Ok(result) => result,
        Err(e) => {
            send_error(client, errors::to_pgwire(e)).await?;
            return Ok(Sent::Stop);
        }
    };
    match result {
        StatementResult::Rows { schema, batches } => {
            let format = if schema.metadata().contains_key(BINARY_METADATA_KEY) {
                Format::UnifiedBinary
            } else {
                Format::UnifiedText
            };
            let fields = Arc::new(field_infos(&schema, &format));
            client
                .feed(PgWireBackendMessage::RowDescription(RowDescription::new(
                    fields.iter().map(Into::into).collect(),
                )))
                .await?;
            let mut rows = 0usize;
            for row in encode_batches(&schema, fields, batches) {
                match row {
                    Ok(row) => client.feed(PgWireBackendMessage::DataRow(row)).await?,
                    Err(e) => {
                        send_error(client, e).await?;
                        return Ok(Sent::Stop);
                    }
                }
                rows += 1;
            }
            send_tag(client, format!("{} {rows}", row_command(&schema))).await?;
        }
        StatementResult::Command { tag } => send_tag(client, tag).await?,
        StatementResult::Empty => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        StatementResult::CopyIn(target) => return Ok(Sent::CopyIn(target)),
        StatementResult::CopyOut {
            options,
            schema,
            batches,
        } => match copy::send_copy_out(client, &options, &schema, batches).await {
            Ok(rows) => send_tag(client, format!("COPY {rows}")).await?,
            Err(e) => {
                send_error(client, e).await?;
                return Ok(Sent::Stop);
            }
        },
    }
    Ok(Sent::Next)
}

pub(crate) async fn send_tag<C>(client: &mut C, tag: String) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    client
        .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
            tag,
        )))
        .await?;
    Ok(())
}

/// Sends an ErrorResponse for a statement error. Errors writing to the
/// socket propagate; the statement error itself is consumed.
/// Sends NOTICEs (SQLSTATE 00000) ahead of the results they came with.
pub(crate) async fn send_notices<C>(client: &mut C, notices: Vec<String>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for message in notices {
        let info = ErrorInfo::new("NOTICE".into(), "00000".into(), message);
        client
            .feed(PgWireBackendMessage::NoticeResponse(info.into()))
            .await?;
    }
    Ok(())
}

async fn send_error<C>(client: &mut C, err: PgWireError) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if let PgWireError::IoError(e) = err {
        return Err(PgWireError::IoError(e));
    }
    let info = errors::normalize(err);
    client
        .feed(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    Ok(())
}
