//! The catalog: what objects exist, how they are persisted, and how
//! DataFusion sees them.
//!
//! - [`model`]: the catalog value ([`Catalog`]), its definitions and the
//!   [`CatalogChange`]s recorded in the control log.
//! - [`provider`]: DataFusion catalog/schema/table providers over one
//!   session's view of a database snapshot.

pub mod model;
pub mod provider;

pub use model::{Catalog, CatalogChange, ColumnDef, ControlEntry, TableDef, UserDef};
