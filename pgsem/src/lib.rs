//! PostgreSQL value semantics on DataFusion: how Weir types, reads, writes,
//! casts and computes values so that clients see what PostgreSQL would show.
//!
//! It knows no protocol, catalog or session: values enter as text (COPY,
//! literals, text parameters) or Arrow arrays, and leave as text or Arrow
//! arrays; plans enter as DataFusion `LogicalPlan`s and leave rewritten.
//!
//! The SQL type map:
//! - [`types`]: [`SqlType`], the SQL type names users write in DDL mapped to
//!   Arrow fields (with the [`PG_TYPE_METADATA_KEY`] tag for types Arrow
//!   lacks); the one mapping every front end shares.
//! - [`pg_types`]: PostgreSQL type OIDs of Arrow fields and back, and the
//!   [`pg_types::WeirTypePlanner`] that lets queries name `jsonb`, `uuid`,
//!   `varchar(n)`, `oid`.
//!
//! Text input and output of values:
//! - [`text_input`]: text to Arrow arrays as PostgreSQL reads it (COPY
//!   fields, text inserted into typed columns, text casts).
//! - [`text_output`]: Arrow values to PostgreSQL's text form.
//! - [`datetime_in`]: date and time text in the session's DateStyle and
//!   TimeZone.
//! - [`interval`]: interval text (`1 day 2 hours`).
//! - [`array_literal`]: one-dimensional array text (`{a,"b c",NULL}`).
//! - [`json`]: json paths, validation and jsonb normalization.
//! - [`copy_format`]: COPY's text and CSV line formats and their options
//!   ([`CopyOptions`]). Binary COPY stays in the server: it decodes values
//!   with the wire protocol's binary parameter codecs.
//!
//! Casts and functions, installed into DataFusion:
//! - [`semantics`]: the plan rewrites ([`PgSemantics`], [`pg_result_types`],
//!   [`at_time_zone_as_function`]), the session settings they read
//!   ([`SessionSettings`]), and the lists of functions to register. Its
//!   private helpers: `udfs` (text casts, checked arithmetic, `pg_typeof`,
//!   `timezone`), `numeric_div`, `to_char`, `array_agg`, `json_ops` and
//!   `jsonb_predicates` (the json operators), `colname` (PostgreSQL's
//!   result column names), `quote` (`quote_literal`).
//!
//! The session template: [`template::session_template`] builds the
//! DataFusion `SessionState` every plan is made in, with all of the above
//! installed.
//!
//! Errors: [`PgsemError`]; each keeps the SQLSTATE the client must see, and
//! expression errors travel through DataFusion as
//! `DataFusionError::External(PgsemError)` ([`value_error`]).

mod array_agg;
pub mod array_literal;
mod colname;
pub mod copy_format;
pub mod datetime_in;
pub mod error;
pub mod interval;
pub mod json;
mod json_ops;
mod jsonb_predicates;
mod numeric_div;
pub mod pg_types;
pub(crate) mod quote;
pub mod semantics;
pub mod template;
pub mod text_input;
pub mod text_output;
mod to_char;
pub mod types;
mod udfs;

pub use array_literal::parse_array_literal;
pub use colname::{name_columns, name_function_columns, presented_name, presented_schema};
pub use copy_format::{CopyFormat, CopyOptions};
pub use error::PgsemError;
pub use interval::parse_interval;
pub use json_ops::JsonOperators;
pub use semantics::{
    PgSemantics, SessionSettings, UNCONSTRAINED_NUMERIC, VARCHAR_LEN_KEY, aggregate_functions,
    at_time_zone_as_function, datetime_context, functions, install, pg_result_types,
};
pub use template::session_template;
pub use types::{OID_ALIAS_METADATA_KEY, PG_TYPE_METADATA_KEY, SqlType};
pub use udfs::{regtype_name, value_error};
