//! [`WeirFlightSql`]: the `FlightSqlService` implementation.
//!
//! arrow-flight's blanket `FlightService` impl decodes each request into a
//! Flight SQL command and calls the matching method here; every method
//! delegates to the module that owns the concern ([`super::statement`],
//! [`super::metadata`], [`super::ingest`], [`super::auth`]). Commands Weir
//! does not offer (Substrait, transactions, savepoints, cancellation, XDBC
//! type info) answer `Unimplemented` naming the command.

use std::sync::Arc;

use arrow_flight::sql::server::{DoPutError, FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginSavepointRequest, ActionBeginSavepointResult, ActionBeginTransactionRequest,
    ActionBeginTransactionResult, ActionCancelQueryRequest, ActionCancelQueryResult,
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, ActionCreatePreparedSubstraitPlanRequest,
    ActionEndSavepointRequest, ActionEndTransactionRequest, Any, Command, CommandGetCatalogs,
    CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys, CommandGetImportedKeys,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementIngest, CommandStatementQuery, CommandStatementSubstraitPlan,
    CommandStatementUpdate, DoPutPreparedStatementResult, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{Action, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, Ticket};
use futures::FutureExt;
use tonic::{Request, Response, Status, Streaming};

use super::auth::{self, HandshakeStream};
use super::encode::DoGetStream;
use super::prepared::PreparedRegistry;
use super::status::{bad_request, unsupported, with_sqlstate};
use crate::db::Database;
use crate::session::{Session, TableInfo};

type PutStream = <WeirFlightSql as arrow_flight::flight_service_server::FlightService>::DoPutStream;
type ActionStream =
    <WeirFlightSql as arrow_flight::flight_service_server::FlightService>::DoActionStream;
type ExchangeStream =
    <WeirFlightSql as arrow_flight::flight_service_server::FlightService>::DoExchangeStream;

/// The Flight SQL service: the database plus the prepared statements clients
/// hold handles to.
pub struct WeirFlightSql {
    db: Arc<Database>,
    pub(crate) prepared: PreparedRegistry,
}

impl WeirFlightSql {
    pub fn new(db: Arc<Database>) -> Self {
        WeirFlightSql {
            db,
            prepared: PreparedRegistry::default(),
        }
    }

    /// A fresh session for one call.
    pub(crate) fn session(&self) -> Session {
        super::new_session(&self.db)
    }

    /// Every relation visible to a fresh session.
    ///
    /// `Session` is not `Sync`, so the future of `list_tables(&self)` is not
    /// `Send` and cannot be held across an await in a tonic handler. It does
    /// not wait on anything today, so it is polled to completion in place;
    /// should it ever wait, it is driven on a blocking thread instead.
    pub(crate) async fn list_tables(&self) -> Result<Vec<TableInfo>, Status> {
        let session = self.session();
        if let Some(tables) = session.list_tables().now_or_never() {
            return Ok(tables);
        }
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || runtime.block_on(session.list_tables()))
            .await
            .map_err(|e| with_sqlstate("XX000", format!("listing tables failed: {e}")))
    }
}

fn not_offered(command: &str) -> Status {
    unsupported(format!("Flight SQL command {command}"))
}

#[tonic::async_trait]
impl FlightSqlService for WeirFlightSql {
    type FlightService = WeirFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<HandshakeStream>, Status> {
        auth::handshake(request.metadata())
    }

    // ---- queries -----------------------------------------------------------

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let info = self
            .statement_flight_info(query, request.into_inner())
            .await?;
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.statement_do_get(ticket).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let info = self
            .prepared_flight_info(query, request.into_inner())
            .await?;
        Ok(Response::new(info))
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.prepared_do_get(query).await
    }

    // ---- updates and ingest ------------------------------------------------

    async fn do_put_statement_update(
        &self,
        cmd: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        self.statement_update(cmd).await
    }

    async fn do_put_statement_ingest(
        &self,
        cmd: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        self.ingest(cmd, request.into_inner()).await
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        self.bind_prepared(query, request.into_inner()).await
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        self.prepared_update(query, request.into_inner()).await
    }

    async fn do_put_error_callback(
        &self,
        _request: Request<PeekableFlightDataStream>,
        error: DoPutError,
    ) -> Result<Response<PutStream>, Status> {
        Err(bad_request(format!("DoPut: {error}")))
    }

    async fn do_put_fallback(
        &self,
        _request: Request<PeekableFlightDataStream>,
        message: Any,
    ) -> Result<Response<PutStream>, Status> {
        Err(unsupported(format!("DoPut with {}", message.type_url)))
    }

    // ---- prepared statement actions -----------------------------------------

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        self.create_prepared(query).await
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        self.close_prepared(query);
        Ok(())
    }

    // ---- catalog metadata ----------------------------------------------------

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.sql_info_flight_info(query, request.into_inner())?,
        ))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.sql_info_do_get(query)
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.catalogs_flight_info(query, request.into_inner())?,
        ))
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.catalogs_do_get(query)
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.schemas_flight_info(query, request.into_inner())?,
        ))
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.schemas_do_get(query)
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.tables_flight_info(query, request.into_inner())?,
        ))
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.tables_do_get(query).await
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.table_types_flight_info(query, request.into_inner())?,
        ))
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.table_types_do_get(query)
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.primary_keys_flight_info(query, request.into_inner())?,
        ))
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.primary_keys_do_get(query).await
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.keys_flight_info(&query, request.into_inner())?,
        ))
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Ok(self.keys_do_get())
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.keys_flight_info(&query, request.into_inner())?,
        ))
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Ok(self.keys_do_get())
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.keys_flight_info(&query, request.into_inner())?,
        ))
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Ok(self.keys_do_get())
    }

    // ---- not offered ---------------------------------------------------------

    async fn get_flight_info_xdbc_type_info(
        &self,
        _query: CommandGetXdbcTypeInfo,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_offered("CommandGetXdbcTypeInfo"))
    }

    async fn do_get_xdbc_type_info(
        &self,
        _query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Err(not_offered("CommandGetXdbcTypeInfo"))
    }

    async fn get_flight_info_substrait_plan(
        &self,
        _query: CommandStatementSubstraitPlan,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_offered("CommandStatementSubstraitPlan"))
    }

    async fn do_put_substrait_plan(
        &self,
        _query: CommandStatementSubstraitPlan,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(not_offered("CommandStatementSubstraitPlan"))
    }

    async fn do_action_create_prepared_substrait_plan(
        &self,
        _query: ActionCreatePreparedSubstraitPlanRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        Err(not_offered("CreatePreparedSubstraitPlan"))
    }

    async fn do_action_begin_transaction(
        &self,
        _query: ActionBeginTransactionRequest,
        _request: Request<Action>,
    ) -> Result<ActionBeginTransactionResult, Status> {
        Err(not_offered("BeginTransaction (statements autocommit)"))
    }

    async fn do_action_end_transaction(
        &self,
        _query: ActionEndTransactionRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        Err(not_offered("EndTransaction (statements autocommit)"))
    }

    async fn do_action_begin_savepoint(
        &self,
        _query: ActionBeginSavepointRequest,
        _request: Request<Action>,
    ) -> Result<ActionBeginSavepointResult, Status> {
        Err(not_offered("BeginSavepoint"))
    }

    async fn do_action_end_savepoint(
        &self,
        _query: ActionEndSavepointRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        Err(not_offered("EndSavepoint"))
    }

    async fn do_action_cancel_query(
        &self,
        _query: ActionCancelQueryRequest,
        _request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        Err(not_offered("CancelQuery"))
    }

    async fn get_flight_info_fallback(
        &self,
        cmd: Command,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(unsupported(format!(
            "GetFlightInfo with {}",
            cmd.type_url()
        )))
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<DoGetStream>, Status> {
        Err(unsupported(format!("DoGet with {}", message.type_url)))
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<ActionStream>, Status> {
        Err(unsupported(format!(
            "action {:?}",
            request.get_ref().r#type
        )))
    }

    async fn do_exchange_fallback(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<ExchangeStream>, Status> {
        Err(unsupported("DoExchange"))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
