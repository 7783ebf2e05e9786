//! Starting and stopping the whole server: open the database, bind the
//! three listeners, run until shutdown.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ServeConfig;
use crate::db::Database;
use crate::error::ServerError;

/// Runs until `shutdown` is cancelled. Binds every port before returning
/// from startup so a caller that sees the "listening" log can connect.
pub async fn run(config: ServeConfig, shutdown: CancellationToken) -> Result<(), ServerError> {
    let bind = |addr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|e| ServerError::internal(format!("cannot listen on {addr}: {e}")))
    };
    let pg = bind(config.pg_addr).await?;
    let flight = bind(config.flight_addr).await?;
    let http = bind(config.http_addr).await?;
    let db: Arc<Database> = Database::open(config.clone()).await?;
    tracing::info!(
        pg = %config.pg_addr,
        flight = %config.flight_addr,
        http = %config.http_addr,
        data_dir = %config.data_dir.display(),
        "weir is listening"
    );
    let pg_task = tokio::spawn(crate::pgwire::serve(db.clone(), pg, shutdown.clone()));
    let flight_task = tokio::spawn(crate::flight::serve(db.clone(), flight, shutdown.clone()));
    let http_task = tokio::spawn(crate::http::serve(db.clone(), http, shutdown.clone()));
    tokio::spawn(crate::recovery::recover(db.clone()));
    shutdown.cancelled().await;
    let _ = tokio::join!(pg_task, flight_task, http_task);
    tracing::info!("weir stopped");
    Ok(())
}
