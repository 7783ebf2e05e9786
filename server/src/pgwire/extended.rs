//! The extended query protocol: Parse / Bind / Describe / Execute / Sync.
//!
//! Parse prepares the statement in the session, with the client's parameter
//! type OIDs as hints, and stores it in pgwire's per-connection portal store
//! together with each parameter's wire type. Describe reports those types
//! (ParameterDescription) and the result schema (RowDescription or NoData).
//! Bind validates counts and format codes; Execute decodes the parameters
//! and runs `Session::execute_prepared`. pgwire's default Execute drives
//! row limits and PortalSuspended. Sync reports the session's transaction
//! status.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt, stream};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, DEFAULT_NAME, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Describe, Parse, ParseComplete, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL,
    TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::ReadyForQuery;

use super::encode::{encode_batches, field_infos};
use super::{Conn, copy, errors, params, sync_status, wire_status};
use crate::session::TxnStatus;
use crate::session::api::{PreparedStatement, StatementResult};

/// pgwire requires a parser type; ours is never asked to parse because
/// `on_parse` is overridden, but it can describe a prepared statement.
pub(crate) struct PreparedParser;

#[async_trait]
impl QueryParser for PreparedParser {
    type Statement = PreparedStatement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        _sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<PreparedStatement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        Err(errors::error(
            "XX000",
            "statements are prepared by the session",
        ))
    }

    fn get_parameter_types(&self, stmt: &PreparedStatement) -> PgWireResult<Vec<Type>> {
        Ok(params::wire_types(&[], stmt)
            .into_iter()
            .map(|t| t.unwrap_or(Type::TEXT))
            .collect())
    }

    fn get_result_schema(
        &self,
        stmt: &PreparedStatement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = column_format.cloned().unwrap_or_default();
        Ok(stmt
            .result_schema
            .as_ref()
            .map(|schema| field_infos(schema, &format))
            .unwrap_or_default())
    }
}

/// Whitespace and semicolons only: PostgreSQL's empty query.
fn is_blank(sql: &str) -> bool {
    sql.chars().all(|c| c == ';' || c.is_whitespace())
}

async fn send_row_description<C>(client: &mut C, fields: Option<Vec<FieldInfo>>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let message = match fields {
        Some(fields) => PgWireBackendMessage::RowDescription(RowDescription::new(
            fields.iter().map(Into::into).collect(),
        )),
        None => PgWireBackendMessage::NoData(NoData::new()),
    };
    client.feed(message).await?;
    Ok(())
}

#[async_trait]
impl ExtendedQueryHandler for Conn {
    type Statement = PreparedStatement;
    type QueryParser = PreparedParser;

    fn query_parser(&self) -> Arc<PreparedParser> {
        Arc::new(PreparedParser)
    }

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PreparedStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| DEFAULT_NAME.to_owned());
        if is_blank(&message.query) {
            client.portal_store().put_empty_statement(&name);
        } else {
            let hints = message
                .type_oids
                .iter()
                .map(|oid| params::hint_for_oid(*oid))
                .collect::<PgWireResult<Vec<_>>>()?;
            let prepared = self
                .session()
                .await?
                .prepare(&message.query, &hints)
                .await
                .map_err(errors::to_pgwire)?;
            let wire_types = params::wire_types(&message.type_oids, &prepared);
            client
                .portal_store()
                .put_statement(Arc::new(StoredStatement::new(name, prepared, wire_types)));
        }
        client
            .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PreparedStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement_name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal_name = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(statement)) => {
                params::validate_bind(&message, &statement)?;
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) => {
                if !message.parameters.is_empty() {
                    return Err(errors::error(
                        "08P01",
                        format!(
                            "bind message supplies {} parameters, but prepared statement \"{}\" requires 0",
                            message.parameters.len(),
                            errors::display_name(statement_name)
                        ),
                    ));
                }
                client.portal_store().put_empty_portal(portal_name);
            }
            None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
        }
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PreparedStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                let (types, fields) = match client.portal_store().get_statement(name) {
                    Some(Entry::Value(stmt)) => {
                        let types = stmt
                            .parameter_types
                            .iter()
                            .map(|t| t.as_ref().map_or(Type::UNKNOWN.oid(), Type::oid))
                            .collect();
                        // Formats are not known before Bind; PostgreSQL
                        // reports text for a statement.
                        let fields = stmt
                            .statement
                            .result_schema
                            .as_ref()
                            .map(|s| field_infos(s, &Format::UnifiedText));
                        (types, fields)
                    }
                    Some(Entry::Empty) => (Vec::new(), None),
                    None => return Err(PgWireError::StatementNotFound(name.to_owned())),
                };
                client
                    .feed(PgWireBackendMessage::ParameterDescription(
                        ParameterDescription::new(types),
                    ))
                    .await?;
                send_row_description(client, fields).await
            }
            TARGET_TYPE_BYTE_PORTAL => {
                let fields = match client.portal_store().get_portal(name) {
                    // A cursor opened with DECLARE is a portal too.
                    None if name != DEFAULT_NAME => {
                        let cursor = self.session().await?.cursor_description(name);
                        match cursor {
                            Some((schema, binary)) => {
                                let format = if binary {
                                    Format::UnifiedBinary
                                } else {
                                    Format::UnifiedText
                                };
                                Some(field_infos(&schema, &format))
                            }
                            None => return Err(PgWireError::PortalNotFound(name.to_owned())),
                        }
                    }
                    Some(Entry::Value(portal)) => portal
                        .statement
                        .statement
                        .result_schema
                        .as_ref()
                        .map(|s| field_infos(s, &portal.result_column_format)),
                    Some(Entry::Empty) => None,
                    None => return Err(PgWireError::PortalNotFound(name.to_owned())),
                };
                send_row_description(client, fields).await
            }
            other => Err(PgWireError::InvalidTargetType(other)),
        }
    }

    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PreparedStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.portal_store().rm_portal(DEFAULT_NAME);
        let status = match self.session.lock().await.as_ref() {
            Some(session) => sync_status(client, session),
            None => client.transaction_status(),
        };
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<PreparedStatement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PreparedStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session().await?;
        let values = params::decode_params(portal, &session.datetime_context())?;
        let before = session.transaction_status();
        let result = session
            .execute_prepared(&portal.statement.statement, values)
            .await;
        let after = session.transaction_status();
        client.set_transaction_status(wire_status(after));
        let notices = session.take_notices();
        drop(session);
        super::simple::send_notices(client, notices).await?;

        match result.map_err(errors::to_pgwire)? {
            StatementResult::Rows { schema, batches } => {
                let fields = Arc::new(field_infos(&schema, &portal.result_column_format));
                let rows = encode_batches(&schema, fields.clone(), batches);
                let mut response = QueryResponse::new(fields, stream::iter(rows));
                response.set_command_tag(super::simple::row_command(&schema));
                Ok(Response::Query(response))
            }
            StatementResult::Command { tag } => {
                // pgwire's Execute tracks the status through these variants.
                let tag = Tag::new(&tag);
                Ok(match (before, after) {
                    (TxnStatus::Idle, TxnStatus::InBlock) => Response::TransactionStart(tag),
                    (TxnStatus::InBlock | TxnStatus::Failed, TxnStatus::Idle) => {
                        Response::TransactionEnd(tag)
                    }
                    _ => Response::Execution(tag),
                })
            }
            StatementResult::Empty => Ok(Response::EmptyQuery),
            StatementResult::CopyIn(target) => {
                let response = copy::copy_in_response(&target);
                self.begin_copy_in(target);
                Ok(Response::CopyIn(response))
            }
            StatementResult::CopyOut {
                options,
                schema,
                batches,
            } => {
                let rows = copy::send_copy_out(client, &options, &schema, batches).await?;
                Ok(Response::Execution(Tag::new("COPY").with_rows(rows)))
            }
        }
    }
}
