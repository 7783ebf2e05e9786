//! A table's constraints and indexes beyond its primary key: UNIQUE,
//! CHECK and FOREIGN KEY constraints, and `CREATE INDEX`.
//!
//! They are part of the table's definition ([`TableDef`]), so adding or
//! dropping one is a `ReplaceTable` catalog change, durable and
//! transactional like any other. What enforces them:
//! - unique indexes (UNIQUE constraints, `CREATE UNIQUE INDEX`) are
//!   secondary indexes of the table's stored state
//!   ([`weir_engine::TableState`]), checked by every write and again at
//!   commit against what committed since;
//! - foreign keys are checked at the end of each statement and again at
//!   commit (`db::references`), through the parent's key or unique index
//!   and an index the child keeps over its referencing columns;
//! - CHECK expressions are evaluated over each written row by the session.

use serde::{Deserialize, Serialize};
use weir_common::ObjectId;
use weir_engine::table::IndexSpec;

use super::Catalog;
use super::model::{TableDef, quote_ident};

/// A secondary index: `CREATE [UNIQUE] INDEX`, or the index behind a
/// UNIQUE constraint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDef {
    /// Its own relation OID (indexes are relations in `pg_class`).
    pub id: ObjectId,
    pub name: String,
    pub columns: Vec<String>,
    pub unique: bool,
    /// The index of a UNIQUE constraint of the same name: listed in
    /// `pg_constraint` too, dropped with the constraint, not by DROP INDEX.
    #[serde(default)]
    pub constraint: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckDef {
    pub id: ObjectId,
    pub name: String,
    /// The expression as sqlparser prints it, evaluated over each new row.
    pub expr: String,
}

/// What happens to referencing rows when the referenced row goes or its
/// key changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RefAction {
    /// Refused while referenced (checked at the end of the statement).
    #[default]
    NoAction,
    /// Refused while referenced (checked at once: the same in Weir, which
    /// has no deferred constraints).
    Restrict,
    /// Referencing rows are deleted, or take the new key.
    Cascade,
    /// Referencing columns become NULL.
    SetNull,
}

impl RefAction {
    /// `pg_constraint.confdeltype` / `confupdtype`.
    pub fn code(self) -> &'static str {
        match self {
            Self::NoAction => "a",
            Self::Restrict => "r",
            Self::Cascade => "c",
            Self::SetNull => "n",
        }
    }

    /// As `information_schema.referential_constraints` and DDL spell it.
    pub fn sql(self) -> &'static str {
        match self {
            Self::NoAction => "NO ACTION",
            Self::Restrict => "RESTRICT",
            Self::Cascade => "CASCADE",
            Self::SetNull => "SET NULL",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignKeyDef {
    pub id: ObjectId,
    pub name: String,
    /// The referencing columns of this table.
    pub columns: Vec<String>,
    /// The referenced table (this one for a self-reference).
    pub parent: ObjectId,
    /// Its primary key or the columns of one of its unique indexes, in
    /// the order matching `columns`.
    pub parent_columns: Vec<String>,
    #[serde(default)]
    pub on_delete: RefAction,
    #[serde(default)]
    pub on_update: RefAction,
}

impl TableDef {
    /// The secondary indexes the table's stored state keeps: its indexes,
    /// then one per foreign key over the referencing columns (so deleting
    /// a parent row finds its children without a scan).
    pub fn index_specs(&self) -> Vec<IndexSpec> {
        let schema = self.physical_schema();
        let positions = |columns: &[String]| -> Vec<usize> {
            columns
                .iter()
                .filter_map(|c| schema.index_of(c).ok())
                .collect()
        };
        let mut specs: Vec<IndexSpec> = self
            .indexes
            .iter()
            .map(|i| IndexSpec {
                name: i.name.clone(),
                columns: positions(&i.columns),
                unique: i.unique,
            })
            .collect();
        for fk in &self.foreign_keys {
            let columns = positions(&fk.columns);
            if !specs.iter().any(|s| s.columns == columns) {
                specs.push(IndexSpec {
                    name: fk.name.clone(),
                    columns,
                    unique: false,
                });
            }
        }
        specs
    }

    /// The largest object id the definition holds (its own, its indexes'
    /// and constraints'), which the catalog's next id must pass.
    pub fn max_id(&self) -> ObjectId {
        self.indexes
            .iter()
            .map(|i| i.id)
            .chain(self.checks.iter().map(|c| c.id))
            .chain(self.foreign_keys.iter().map(|f| f.id))
            .fold(self.id, ObjectId::max)
    }

    /// Whether `columns` (in this order) are the primary key or a unique
    /// index's columns: what a foreign key may reference.
    pub fn is_unique_key(&self, columns: &[String]) -> bool {
        self.primary_key == columns
            || self
                .indexes
                .iter()
                .any(|i| i.unique && i.columns == columns)
    }

    /// The names of its constraints of every kind (primary key included).
    pub fn constraint_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if !self.primary_key.is_empty() {
            names.push(self.pkey_constraint_name());
        }
        names.extend(
            self.indexes
                .iter()
                .filter(|i| i.constraint)
                .map(|i| i.name.clone()),
        );
        names.extend(self.checks.iter().map(|c| c.name.clone()));
        names.extend(self.foreign_keys.iter().map(|f| f.name.clone()));
        names
    }

    /// `CONSTRAINT name UNIQUE (...)`, `... CHECK (...)`, `... FOREIGN KEY
    /// (...) REFERENCES t (...) [ON ...]`, for `SHOW CREATE TABLE`.
    pub fn constraint_clauses(&self, catalog: &Catalog) -> Vec<String> {
        let list = |columns: &[String]| {
            columns
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = Vec::new();
        for i in self.indexes.iter().filter(|i| i.constraint) {
            out.push(format!(
                "CONSTRAINT {} UNIQUE ({})",
                quote_ident(&i.name),
                list(&i.columns)
            ));
        }
        for c in &self.checks {
            out.push(format!(
                "CONSTRAINT {} CHECK ({})",
                quote_ident(&c.name),
                c.expr
            ));
        }
        for f in &self.foreign_keys {
            let parent = match catalog.tables.get(&f.parent) {
                Some(p) if p.schema == super::model::DEFAULT_SCHEMA => quote_ident(&p.name),
                Some(p) => format!("{}.{}", quote_ident(&p.schema), quote_ident(&p.name)),
                // Itself, while being created.
                None => quote_ident(&self.name),
            };
            let mut s = format!(
                "CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {parent} ({})",
                quote_ident(&f.name),
                list(&f.columns),
                list(&f.parent_columns)
            );
            if f.on_delete != RefAction::NoAction {
                s.push_str(&format!(" ON DELETE {}", f.on_delete.sql()));
            }
            if f.on_update != RefAction::NoAction {
                s.push_str(&format!(" ON UPDATE {}", f.on_update.sql()));
            }
            out.push(s);
        }
        out
    }
}

impl Catalog {
    /// A table that other tables' foreign keys reference cannot be
    /// dropped (the drop statement removes those keys first, with CASCADE).
    pub fn refuse_if_referenced(&self, id: ObjectId) -> Result<(), crate::error::ServerError> {
        let Some(table) = self.tables.get(&id) else {
            return Ok(());
        };
        if let Some((child, fk)) = self
            .foreign_keys_to(id)
            .into_iter()
            .find(|(child, _)| child.id != id)
        {
            return Err(crate::error::ServerError::Sqlstate {
                code: "2BP01",
                message: format!(
                    "cannot drop table {} because constraint {} on table {} depends on it (use DROP ... CASCADE to drop the constraint too)",
                    table.name, fk.name, child.name
                ),
            });
        }
        Ok(())
    }

    /// Every foreign key that references table `parent`, with its table.
    pub fn foreign_keys_to(&self, parent: ObjectId) -> Vec<(&TableDef, &ForeignKeyDef)> {
        self.tables
            .values()
            .flat_map(|t| {
                t.foreign_keys
                    .iter()
                    .filter(move |f| f.parent == parent)
                    .map(move |f| (t.as_ref(), f))
            })
            .collect()
    }

    /// A name for a new constraint or index of `table` in `schema`,
    /// PostgreSQL's way: `table_col1_col2_suffix`, then with 1, 2, ...
    /// appended until no relation or constraint in the schema has it.
    pub fn choose_constraint_name(
        &self,
        schema: &str,
        table: &str,
        columns: &[String],
        suffix: &str,
        taken: &[String],
    ) -> String {
        let mut base = table.to_string();
        for c in columns {
            base.push('_');
            base.push_str(c);
        }
        if !suffix.is_empty() {
            base.push('_');
            base.push_str(suffix);
        }
        let in_use = |name: &str| {
            taken.iter().any(|t| t == name)
                || self.relation_exists(schema, name)
                || self
                    .tables
                    .values()
                    .filter(|t| t.schema == schema)
                    .any(|t| t.constraint_names().iter().any(|c| c == name))
        };
        if !in_use(&base) {
            return base;
        }
        (1..)
            .map(|n| format!("{base}{n}"))
            .find(|n| !in_use(n))
            .expect("some suffix is free")
    }

    /// The table and index called `name` in `schema`.
    pub fn index(&self, schema: &str, name: &str) -> Option<(&TableDef, &IndexDef)> {
        self.tables
            .values()
            .filter(|t| t.schema == schema)
            .find_map(|t| {
                t.indexes
                    .iter()
                    .find(|i| i.name == name)
                    .map(|i| (t.as_ref(), i))
            })
    }
}
