//! SQL front half of Weir: parsing with Weir's dialect, window table
//! functions and projection lowering. The SQL type system and PostgreSQL
//! value semantics it builds on live in `weir-pgsem`.
//!
//! - [`parse`]: SQL text to `sqlparser` statements (PostgreSQL dialect, with
//!   the PostgreSQL-compatibility rewrites psql and drivers need), with
//!   syntax errors carrying the 1-based character position;
//!   [`emit_clause`]: a projection's trailing `EMIT ON WINDOW CLOSE`;
//!   [`table_clauses`]: a table's `WATERMARK FOR` and `APPEND ONLY`;
//!   `sequence_options`: sequence options put in the order sqlparser reads,
//!   and `nextval('s'::regclass)` read as `nextval('s')`.
//! - [`mod@bind`]: a statement to DataFusion's `LogicalPlan` after Weir's
//!   rewrites, in the caller's DataFusion state; [`compat`] (and
//!   `compat_array` for `ARRAY(subquery)`): the rewrites for catalog
//!   queries drivers send that DataFusion cannot plan as sent.
//! - [`window_tvf`]: the `TUMBLE`/`HOP`/`SESSION` window table functions,
//!   rewritten in the statement's AST into derived tables with
//!   `window_start` and `window_end`; ad-hoc queries and projections both
//!   plan through it. [`session_window`]: SESSION's two window functions.
//! - [`mod@lower`]: a projection's bound `LogicalPlan` to its incremental
//!   operator graph ([`StreamPlan`]), rejecting what cannot be maintained.
//! - [`wildcard`]: `*` in a stored query expanded to the columns it stood
//!   for when the query was created, as PostgreSQL stores a view.
//! - [`streaming_ddl`]: CREATE/DROP/SHOW of sources and sinks, which
//!   sqlparser does not know.
//! - [`error`]: [`PlanError`].

pub mod bind;
pub mod compat;
mod compat_array;
pub mod emit_clause;
pub mod error;
pub mod lower;
pub mod parse;
mod sequence_options;
pub mod session_window;
pub mod streaming_ddl;
pub mod table_clauses;
pub mod wildcard;
pub mod window_tvf;

pub use bind::bind;
pub use datafusion::sql::sqlparser;
pub use error::PlanError;
pub use lower::{LowerOptions, ScannedRelation, SourceRef, StreamPlan, lower};
pub use parse::{ParseError, parse_sql};
pub use window_tvf::{plain_query, rewrite_window_tvfs};
