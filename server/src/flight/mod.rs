//! Arrow Flight SQL front end.
//!
//! [`serve`] runs a tonic gRPC server whose one service, [`WeirFlightSql`],
//! implements `arrow_flight::sql::server::FlightSqlService`. Flight is
//! stateless per call, so every RPC builds its own [`Session`] (user and
//! database `weir`) and drops it when the call ends; the only state kept
//! between calls is the [`prepared::PreparedRegistry`] of prepared statements.
//!
//! How data enters and leaves:
//! - Queries (`CommandStatementQuery`, prepared queries): `GetFlightInfo`
//!   plans the statement to learn its result schema, which is exactly the Arrow
//!   schema of the plan's output, and returns a ticket; `DoGet` executes and
//!   streams the batches with `FlightDataEncoderBuilder`. Statements without
//!   rows (DDL, DML sent through the query path, as ADBC does) run during
//!   `GetFlightInfo` and answer with an empty schema and no endpoints, so they
//!   are complete when the call returns.
//! - Updates (`CommandStatementUpdate`, prepared updates): `DoPut` executes and
//!   answers with the affected row count parsed from the command tag.
//! - Bulk ingest (`CommandStatementIngest`): `DoPut` decodes the Arrow stream
//!   and hands the batches to [`Session::ingest`].
//! - Catalog metadata (`GetSqlInfo`, `GetCatalogs`, `GetDbSchemas`,
//!   `GetTables`, `GetTableTypes`, `GetPrimaryKeys`, and empty key listings):
//!   built from [`Session::list_schemas`] / [`Session::list_tables`].
//!
//! Errors leave as `tonic::Status` through [`status::to_status`], which keeps
//! the SQLSTATE at the front of the message.
//!
//! Modules: [`service`] (the trait impl, thin delegation), [`statement`]
//! (queries, updates, prepared statements), [`prepared`] (handle registry,
//! parameter binding), [`ingest`], [`metadata`], [`auth`] (handshake),
//! [`encode`] (Arrow/Flight encoding helpers), [`status`] (error mapping);
//! `tests` runs a real server against arrow-flight's Flight SQL client.

mod auth;
mod encode;
mod ingest;
mod metadata;
mod prepared;
mod service;
mod statement;
mod status;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;

use crate::db::Database;
use crate::error::ServerError;
use crate::session::Session;

pub use service::WeirFlightSql;

/// Largest gRPC message the server accepts (DoPut ingest and parameter
/// batches arrive in messages of this size at most).
const MAX_DECODING_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// User and database every Flight call's session runs as (trust auth).
const SESSION_USER: &str = "weir";
const SESSION_DATABASE: &str = "weir";

/// Serves Arrow Flight SQL on `listener` until `shutdown` is cancelled, then
/// stops accepting connections and lets in-flight calls finish.
pub async fn serve(
    db: Arc<Database>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let addr = listener.local_addr().ok();
    let service = FlightServiceServer::new(WeirFlightSql::new(db))
        .max_decoding_message_size(MAX_DECODING_MESSAGE_BYTES);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tracing::info!(?addr, "Arrow Flight SQL listening");
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await
        .map_err(|e| ServerError::internal(format!("Flight SQL server failed: {e}")))
}

/// A fresh session for one Flight call.
fn new_session(db: &Arc<Database>) -> Session {
    Session::new(Arc::clone(db), SESSION_USER, SESSION_DATABASE)
}
