//! `ALTER TABLE` in the catalog: a table's definition replaced whole by
//! its next version (columns, names, defaults). The rows move with a
//! [`crate::wal::TableWrite::Rewrite`] in the same transaction when the
//! physical layout changes; the catalog only checks that the new
//! definition can stand next to the others.

use std::sync::Arc;

use weir_common::ObjectId;

use super::model::{Catalog, TableDef};
use crate::error::ServerError;

impl Catalog {
    /// A source, sink, view or projection renamed in its schema.
    pub(super) fn rename(&mut self, id: ObjectId, name: &str) -> Result<(), ServerError> {
        fn renamed<T: Clone>(def: &mut Arc<T>, set: impl FnOnce(&mut T)) {
            set(Arc::make_mut(def));
        }
        let schema = if let Some(d) = self.sources.get(&id) {
            d.schema.clone()
        } else if let Some(d) = self.sinks.get(&id) {
            d.schema.clone()
        } else if let Some(d) = self.views.get(&id) {
            d.schema.clone()
        } else if let Some(d) = self.projections.get(&id) {
            d.schema.clone()
        } else {
            return Err(ServerError::UndefinedTable(format!("object {id}")));
        };
        // Sinks have a namespace of their own; the rest share relations'.
        let taken = if self.sinks.contains_key(&id) {
            self.sinks
                .values()
                .any(|s| s.schema == schema && s.name == name)
        } else {
            self.relation_exists(&schema, name)
        };
        if taken {
            return Err(ServerError::DuplicateTable(name.to_string()));
        }
        let name = name.to_string();
        if let Some(d) = self.sources.get_mut(&id) {
            renamed(d, |d| d.name = name);
        } else if let Some(d) = self.sinks.get_mut(&id) {
            renamed(d, |d| d.name = name);
        } else if let Some(d) = self.views.get_mut(&id) {
            renamed(d, |d| d.name = name);
        } else if let Some(d) = self.projections.get_mut(&id) {
            renamed(d, |d| d.name = name);
        }
        Ok(())
    }

    pub(super) fn move_to(&mut self, id: ObjectId, schema: &str) -> Result<(), ServerError> {
        if !self.schemas.contains(schema) {
            return Err(ServerError::UndefinedSchema(schema.to_string()));
        }
        let name = if let Some(d) = self.views.get(&id) {
            d.name.clone()
        } else if let Some(d) = self.projections.get(&id) {
            d.name.clone()
        } else {
            return Err(ServerError::UndefinedTable(format!("object {id}")));
        };
        if self.relation_exists(schema, &name) {
            return Err(ServerError::DuplicateTable(name));
        }
        let schema = schema.to_string();
        if let Some(d) = self.views.get_mut(&id) {
            Arc::make_mut(d).schema = schema;
        } else if let Some(d) = self.projections.get_mut(&id) {
            Arc::make_mut(d).schema = schema;
        }
        Ok(())
    }

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
        self.next_id = self.next_id.max(def.max_id().0 + 1);
        self.tables.insert(def.id, Arc::new(def.clone()));
        self.forget_dropped_comments();
        Ok(())
    }
}
