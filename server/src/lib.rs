//! The `weir` server: catalog, sessions, front ends and operations.
//!
//! - [`db::Database`]: shared state (catalog and table snapshots, the
//!   durable logs) and the commit path. Opened from a data directory.
//! - [`session::Session`]: one client's statements, transactions and
//!   planning context; the API both front ends use.
//! - [`pgwire`] and [`flight`]: the PostgreSQL wire protocol and Arrow
//!   Flight SQL front ends, translating their protocols to sessions.
//! - [`http`]: `/health`, `/ready`, `/metrics`.
//! - [`catalog`]: catalog model, control-log entries, DataFusion providers.
//! - [`planning`]: a projection's or sink's query to what the runtime
//!   deploys, for sessions and for recovery alike (no session needed).
//! - [`recovery`]: after a start, plans every projection and sink and has
//!   the engine's runtime ([`weir_engine::runtime`]: epochs, sources,
//!   sinks, checkpoints and seals) restore them from the latest sealed
//!   epoch and replay the table log after it (or rebuild them).
//! - [`secrets`]: the key that seals secrets at rest, and the options a
//!   connector is handed (connection options merged, secrets opened).
//! - [`table_snapshot`]: snapshots of every table, after which the table
//!   log before them is truncated.
//! - [`sequences`]: the values sequences hand out, reserved durably ahead
//!   (definitions are catalog state, values are not).
//! - [`system`]: the `weir_catalog` system tables.
//! - [`query_runtime`] and [`yield_points`]: execution runs apart from the
//!   front ends and yields, so one heavy query cannot starve the others.
//! - [`error::ServerError`]: every client-visible error and its SQLSTATE.
//!
//! PostgreSQL value semantics (the SQL type map, text input and output,
//! casts, PostgreSQL functions) come from `weir-pgsem`.
//!
//! Data enters through DML/COPY/ingest, becomes a change batch in the
//! session's transaction, and on COMMIT goes to the table log (fsync) and,
//! for DDL, the control log, before the next snapshot is published.

pub mod advisory_locks;
pub mod catalog;
pub mod config;
pub mod db;
pub mod error;
pub mod flight;
pub mod http;
pub mod metrics;
pub mod pgwire;
pub mod planning;
pub mod query_runtime;
pub mod recovery;
pub mod secrets;
pub mod sequences;
pub mod server;
pub mod session;
pub mod system;
pub mod system_streaming;
pub mod table_snapshot;
pub mod wal;
pub mod yield_points;

/// Stack size of the threads that plan and run statements (the server's
/// and the query runtime's). Planning recurses over the statement, so deep
/// statements need more than tokio's 2 MiB default; untouched stack pages
/// cost no memory.
pub const WORKER_STACK_BYTES: usize = 16 * 1024 * 1024;
