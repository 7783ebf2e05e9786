//! Sequences as the catalog holds them: their definition (type, bounds,
//! increment, cycling, the column that owns them). Their values are not
//! catalog state: `nextval` must not wait for DDL or conflict with it, so
//! values live in [`crate::sequences::SequenceValues`], reserved durably in
//! blocks.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir_common::ObjectId;
use weir_pgsem::SqlType;

use super::model::{Catalog, DEFAULT_SCHEMA, TableDef, quote_ident};
use crate::error::ServerError;

/// The column a sequence belongs to (`SERIAL`, identity, `OWNED BY`): it is
/// dropped with the column's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedBy {
    pub table: ObjectId,
    pub column: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequenceDef {
    pub id: ObjectId,
    pub schema: String,
    pub name: String,
    /// Names this sequence's values in the value store. Ids of creates
    /// that were rolled back are handed out again, so values are keyed by
    /// this instead: a new sequence never inherits a dead one's values.
    pub incarnation: uuid::Uuid,
    /// `smallint`, `integer` or `bigint`: the bounds' default range.
    pub data_type: SqlType,
    pub start: i64,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    pub cache: i64,
    pub cycle: bool,
    #[serde(default)]
    pub owned_by: Option<OwnedBy>,
}

impl SequenceDef {
    pub fn qualified_name(&self) -> String {
        if self.schema == DEFAULT_SCHEMA {
            quote_ident(&self.name)
        } else {
            format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
        }
    }

    /// The `DEFAULT` of a column filled from this sequence.
    pub fn nextval_call(&self) -> String {
        format!("nextval('{}')", self.qualified_name().replace('\'', "''"))
    }

    /// The range a type allows, as PostgreSQL gives its sequences.
    pub fn type_range(data_type: &SqlType) -> (i64, i64) {
        match data_type {
            SqlType::Int2 => (i16::MIN.into(), i16::MAX.into()),
            SqlType::Int4 => (i32::MIN.into(), i32::MAX.into()),
            _ => (i64::MIN, i64::MAX),
        }
    }

    /// The value after `value`, or `None` past the bound of a sequence that
    /// does not cycle.
    pub fn after(&self, value: i64) -> Option<i64> {
        match value.checked_add(self.increment) {
            Some(next) if next >= self.min && next <= self.max => Some(next),
            _ if self.cycle => Some(if self.increment > 0 {
                self.min
            } else {
                self.max
            }),
            _ => None,
        }
    }

    /// `CREATE SEQUENCE` text that recreates this sequence.
    pub fn create_statement(&self) -> String {
        format!(
            "CREATE SEQUENCE {} AS {} INCREMENT BY {} MINVALUE {} MAXVALUE {} START WITH {} CACHE {}{}",
            self.qualified_name(),
            self.data_type.display_name(),
            self.increment,
            self.min,
            self.max,
            self.start,
            self.cache,
            if self.cycle { " CYCLE" } else { " NO CYCLE" }
        )
    }
}

/// The parts of a `regclass` text: unquoted parts fold to lower case.
pub fn regclass_parts(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = text.trim().chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut current)),
            c if quoted => current.push(c),
            c => current.extend(c.to_lowercase()),
        }
    }
    parts.push(current);
    parts
}

impl Catalog {
    pub fn sequence(&self, schema: &str, name: &str) -> Option<&Arc<SequenceDef>> {
        self.sequences
            .values()
            .find(|s| s.schema == schema && s.name == name)
    }

    /// The sequences owned by a column of table `id` (dropped with it).
    pub fn owned_sequences(&self, table: ObjectId) -> Vec<&Arc<SequenceDef>> {
        self.sequences
            .values()
            .filter(|s| s.owned_by.as_ref().is_some_and(|o| o.table == table))
            .collect()
    }

    /// The (table, column) pairs whose default takes `def`'s next value
    /// (`nextval('s')`, however the name is spelled; an unqualified name
    /// counts when it is the sequence's in the table's schema or `public`).
    pub fn sequence_users(&self, def: &SequenceDef) -> Vec<(&Arc<TableDef>, String)> {
        let names = |table: &TableDef, text: &str| {
            let Some(arg) = text
                .strip_prefix("nextval('")
                .and_then(|t| t.strip_suffix("')"))
            else {
                return false;
            };
            match regclass_parts(&arg.replace("''", "'")).as_slice() {
                [name] => {
                    *name == def.name
                        && (def.schema == table.schema || def.schema == DEFAULT_SCHEMA)
                }
                [schema, name] | [_, schema, name] => *schema == def.schema && *name == def.name,
                _ => false,
            }
        };
        self.tables
            .values()
            .flat_map(|t| {
                t.columns
                    .iter()
                    .filter(move |c| c.default.as_deref().is_some_and(|d| names(t, d)))
                    .map(move |c| (t, c.name.clone()))
            })
            .collect()
    }

    pub(super) fn create_sequence(&mut self, def: &SequenceDef) -> Result<(), ServerError> {
        if !self.schemas.contains(&def.schema) {
            return Err(ServerError::UndefinedSchema(def.schema.clone()));
        }
        if self.relation_exists(&def.schema, &def.name) {
            return Err(ServerError::DuplicateTable(def.name.clone()));
        }
        self.next_id = self.next_id.max(def.id.0 + 1);
        self.sequences.insert(def.id, Arc::new(def.clone()));
        Ok(())
    }

    pub(super) fn replace_sequence(&mut self, def: &SequenceDef) -> Result<(), ServerError> {
        let Some(old) = self.sequences.get(&def.id) else {
            return Err(ServerError::UndefinedTable(format!("object {}", def.id)));
        };
        if old.schema != def.schema || old.name != def.name {
            if !self.schemas.contains(&def.schema) {
                return Err(ServerError::UndefinedSchema(def.schema.clone()));
            }
            if self.relation_exists(&def.schema, &def.name) {
                return Err(ServerError::DuplicateTable(def.name.clone()));
            }
        }
        self.sequences.insert(def.id, Arc::new(def.clone()));
        Ok(())
    }

    pub(super) fn drop_sequence(&mut self, id: ObjectId) -> Result<(), ServerError> {
        let def = self
            .sequences
            .get(&id)
            .ok_or_else(|| ServerError::UndefinedTable(format!("object {id}")))?;
        if let Some((table, column)) = self.sequence_users(def).first() {
            return Err(ServerError::DependentObjects {
                object: format!("sequence {}", def.name),
                dependents: format!("default value for column {column} of table {}", table.name),
            });
        }
        self.sequences.remove(&id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(increment: i64, min: i64, max: i64, cycle: bool) -> SequenceDef {
        SequenceDef {
            id: ObjectId(1),
            schema: "public".into(),
            name: "s".into(),
            incarnation: uuid::Uuid::nil(),
            data_type: SqlType::Int8,
            start: if increment > 0 { min } else { max },
            increment,
            min,
            max,
            cache: 1,
            cycle,
            owned_by: None,
        }
    }

    #[test]
    fn after_stops_at_the_bound_or_wraps_when_cycling() {
        assert_eq!(def(1, 1, 3, false).after(2), Some(3));
        assert_eq!(def(1, 1, 3, false).after(3), None);
        assert_eq!(def(2, 1, 4, true).after(3), Some(1));
        assert_eq!(def(-1, -3, -1, false).after(-3), None);
        assert_eq!(def(-1, -3, -1, true).after(-3), Some(-1));
        assert_eq!(def(1, 1, i64::MAX, false).after(i64::MAX), None);
    }

    #[test]
    fn regclass_text_folds_unquoted_parts_only() {
        assert_eq!(regclass_parts("S"), ["s"]);
        assert_eq!(regclass_parts("App.\"My.Seq\""), ["app", "My.Seq"]);
        assert_eq!(regclass_parts("\"a\"\"b\""), ["a\"b"]);
    }
}
