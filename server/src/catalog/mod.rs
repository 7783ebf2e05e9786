//! The catalog: what objects exist, how they are persisted, and how
//! DataFusion sees them.
//!
//! - [`model`]: the catalog value ([`Catalog`]), its definitions and the
//!   [`CatalogChange`]s recorded in the control log.
//! - [`streaming`]: sources and sinks.
//! - [`provider`]: DataFusion catalog/schema/table providers over one
//!   session's view of a database snapshot.
//! - [`pg`] and [`info_schema`]: `pg_catalog` and `information_schema` as
//!   PostgreSQL clients expect them; [`functions`]: the catalog functions
//!   (`pg_table_is_visible`, `format_type`'s companions, ...). The
//!   rewrites for catalog queries DataFusion cannot plan as sent are the
//!   planner's (`weir_planner::compat`).

mod alter;
mod comments;
pub mod constraint;
pub mod functions;
pub mod info_schema;
mod json;
mod key_access;
pub mod model;
mod oids;
pub mod pg;
mod pg_constraints;
mod pg_foreign;
pub mod provider;
mod rows;
pub mod sequence;
mod sizes;
pub mod streaming;
mod table_access;
pub mod view;

pub use model::{Catalog, CatalogChange, ColumnDef, ControlEntry, TableDef, UserDef};
