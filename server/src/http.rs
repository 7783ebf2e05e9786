//! HTTP operations endpoints: `/health` (liveness), `/ready` (503 until
//! every backend is ready), `/metrics` (Prometheus text).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::db::Database;

pub fn router(db: Arc<Database>) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(db)
}

async fn ready(State(db): State<Arc<Database>>) -> impl IntoResponse {
    if db.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: recovering\n")
    }
}

async fn metrics(State(db): State<Arc<Database>>) -> impl IntoResponse {
    db.metrics().table_log_synced(db.table_log_syncs());
    let sources: Vec<(u64, Option<i64>, u64)> = db
        .runtime()
        .stream_status()
        .sources
        .iter()
        .map(|(id, s)| (id.0, s.watermark, s.late_rows))
        .collect();
    db.metrics().source_watermarks(&sources);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        db.metrics().render(),
    )
}

pub async fn serve(
    db: Arc<Database>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(db))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
