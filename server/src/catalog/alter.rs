//! `ALTER TABLE` in the catalog: a table's definition replaced whole by
//! its next version (columns, names, defaults). The rows move with a
//! [`crate::wal::TableWrite::Rewrite`] in the same transaction when the
//! physical layout changes; the catalog only checks that the new
//! definition can stand next to the others.

use std::sync::Arc;

use super::model::{Catalog, TableDef};
use crate::error::ServerError;

impl Catalog {
    pub(super) fn replace_table(&mut self, def: &TableDef) -> Result<(), ServerError> {
        let old = self
            .tables
            .get(&def.id)
            .ok_or_else(|| ServerError::UndefinedTable(format!("object {}", def.id)))?;
        if old.schema != def.schema || old.name != def.name {
            if !self.schemas.contains(&def.schema) {
                return Err(ServerError::UndefinedSchema(def.schema.clone()));
            }
            if self.relation_exists(&def.schema, &def.name) {
                return Err(ServerError::DuplicateTable(def.name.clone()));
            }
        }
        if let Some(key) = def
            .primary_key
            .iter()
            .find(|k| !def.columns.iter().any(|c| &c.name == *k))
        {
            return Err(ServerError::internal(format!(
                "table {} replaced by a definition without its key column {key}",
                def.name
            )));
        }
        self.tables.insert(def.id, Arc::new(def.clone()));
        self.forget_dropped_comments();
        Ok(())
    }
}
