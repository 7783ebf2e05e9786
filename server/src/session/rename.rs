//! `ALTER {SOURCE | SINK | VIEW | MATERIALIZED VIEW | PROJECTION} name
//! RENAME TO new`. Objects are known by id everywhere but in the stored
//! query text of what reads them, so a renamed object must have no reader
//! (views, projections and sinks name what they read): those are refused
//! with 2BP01 naming them, as PostgreSQL would have to if it kept text.

use weir_planner::streaming_ddl::alter::RenamedKind;

use super::{Session, StatementResult, command};
use crate::catalog::CatalogChange;
use crate::db::TxnWrites;
use crate::error::ServerError;

impl Session {
    pub(super) fn rename_relation(
        &mut self,
        kind: RenamedKind,
        if_exists: bool,
        name: &[String],
        to: String,
    ) -> Result<StatementResult, ServerError> {
        let (schema, relation) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        let (what, tag, found) = match kind {
            RenamedKind::Source => (
                "source",
                "ALTER SOURCE",
                catalog.source(&schema, &relation).map(|d| d.id),
            ),
            RenamedKind::Sink => (
                "sink",
                "ALTER SINK",
                catalog
                    .sinks
                    .values()
                    .find(|s| s.schema == schema && s.name == relation && s.destination.is_none())
                    .map(|d| d.id),
            ),
            RenamedKind::View => (
                "view",
                "ALTER VIEW",
                catalog.view(&schema, &relation).map(|d| d.id),
            ),
            RenamedKind::Projection => (
                "projection",
                "ALTER MATERIALIZED VIEW",
                catalog.projection(&schema, &relation).map(|d| d.id),
            ),
        };
        let Some(id) = found else {
            if if_exists {
                self.notice(format!("{what} \"{relation}\" does not exist, skipping"));
                return Ok(command(tag));
            }
            return Err(ServerError::Sqlstate {
                code: "42P01",
                message: format!("{what} \"{relation}\" does not exist"),
            });
        };
        let readers = catalog.reader_names(id);
        if !readers.is_empty() {
            return Err(ServerError::Sqlstate {
                code: "2BP01",
                message: format!(
                    "cannot rename {what} \"{relation}\": {} {} it by name (drop {} first)",
                    readers.join(", "),
                    if readers.len() == 1 { "reads" } else { "read" },
                    if readers.len() == 1 { "it" } else { "them" },
                ),
            });
        }
        self.write(TxnWrites {
            ddl: vec![CatalogChange::Rename { id, name: to }],
            tables: vec![],
        })?;
        Ok(command(tag))
    }
}
