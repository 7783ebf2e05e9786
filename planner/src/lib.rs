//! SQL front half of Weir: parsing with Weir's dialect and the SQL type system.
//!
//! - [`parse`]: SQL text to `sqlparser` statements (PostgreSQL dialect, with
//!   the PostgreSQL-compatibility rewrites psql and drivers need), with
//!   syntax errors carrying the 1-based character position.
//! - [`types`]: the SQL type names users write in DDL, mapped to Arrow
//!   fields; the one mapping every front end shares.
//! - [`interval`]: PostgreSQL interval text (`1 day 2 hours`) to months,
//!   days and microseconds; used for casts and window sizes.
//! - [`window_tvf`]: the `TUMBLE`/`HOP` window table functions, rewritten in
//!   the statement's AST into derived tables with `window_start` and
//!   `window_end`; ad-hoc queries and projections both plan through it.
//! - [`lower`]: a projection's bound `LogicalPlan` to its incremental
//!   operator graph ([`StreamPlan`]), rejecting what cannot be maintained.
//! - [`streaming_ddl`]: CREATE/DROP/SHOW of sources and sinks, which
//!   sqlparser does not know.
//! - [`error`]: [`PlanError`].

pub mod array_literal;
pub mod error;
pub mod interval;
pub mod lower;
pub mod parse;
pub mod streaming_ddl;
pub mod types;
pub mod window_tvf;

pub use array_literal::parse_array_literal;
pub use datafusion::sql::sqlparser;
pub use error::PlanError;
pub use lower::{SourceRef, StreamPlan, lower};
pub use parse::{ParseError, parse_sql};
pub use types::{OID_ALIAS_METADATA_KEY, PG_TYPE_METADATA_KEY, SqlType};
pub use window_tvf::{plain_query, rewrite_window_tvfs};
