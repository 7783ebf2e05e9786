//! A table's indexes and constraints as `pg_catalog` shows them: the rows
//! of `pg_class` (relkind `i`), `pg_attribute`, `pg_index`,
//! `pg_constraint` and `pg_indexes` for each, and the text of
//! `pg_get_indexdef` / `pg_get_constraintdef`, which psql's `\d`, ORMs'
//! reflection and schema-diff tools read.
//!
//! OIDs: the primary key's index and constraint take the table's OID + 1
//! and + 2 (`pg::pkey_index_oid`); every other index and constraint has
//! an object id of its own, whose OID it takes (a UNIQUE constraint's
//! index that OID, the constraint that OID + 1).

use super::Catalog;
use super::constraint::{ForeignKeyDef, RefAction};
use super::model::{TableDef, quote_ident};
use super::oids::table_oid;
use super::pg::{pkey_constraint_oid, pkey_index_oid};

/// An index of a table: its primary key's or a secondary one.
#[derive(Debug, Clone)]
pub struct IndexEntry {
    pub oid: i64,
    pub name: String,
    pub columns: Vec<String>,
    pub unique: bool,
    pub primary: bool,
}

/// What kind of constraint, with what `pg_get_constraintdef` needs.
#[derive(Debug, Clone)]
pub enum ConstraintKind<'a> {
    PrimaryKey,
    Unique,
    Check(&'a str),
    ForeignKey(&'a ForeignKeyDef),
}

#[derive(Debug, Clone)]
pub struct ConstraintEntry<'a> {
    pub oid: i64,
    pub name: String,
    pub kind: ConstraintKind<'a>,
    pub columns: Vec<String>,
    /// The index that enforces it (primary key, unique).
    pub index_oid: Option<i64>,
}

impl ConstraintEntry<'_> {
    /// `pg_constraint.contype`.
    pub fn contype(&self) -> &'static str {
        match self.kind {
            ConstraintKind::PrimaryKey => "p",
            ConstraintKind::Unique => "u",
            ConstraintKind::Check(_) => "c",
            ConstraintKind::ForeignKey(_) => "f",
        }
    }

    /// `information_schema.table_constraints.constraint_type`.
    pub fn sql_type(&self) -> &'static str {
        match self.kind {
            ConstraintKind::PrimaryKey => "PRIMARY KEY",
            ConstraintKind::Unique => "UNIQUE",
            ConstraintKind::Check(_) => "CHECK",
            ConstraintKind::ForeignKey(_) => "FOREIGN KEY",
        }
    }
}

/// The table's indexes: the primary key's first, then the others in the
/// order they were created.
pub fn indexes_of(def: &TableDef) -> Vec<IndexEntry> {
    let mut out = Vec::new();
    if !def.primary_key.is_empty() {
        out.push(IndexEntry {
            oid: pkey_index_oid(def.id),
            name: def.pkey_constraint_name(),
            columns: def.primary_key.clone(),
            unique: true,
            primary: true,
        });
    }
    out.extend(def.indexes.iter().map(|i| IndexEntry {
        oid: table_oid(i.id),
        name: i.name.clone(),
        columns: i.columns.clone(),
        unique: i.unique,
        primary: false,
    }));
    out
}

/// The table's constraints: primary key, unique, check, foreign keys.
pub fn constraints_of(def: &TableDef) -> Vec<ConstraintEntry<'_>> {
    let mut out = Vec::new();
    if !def.primary_key.is_empty() {
        out.push(ConstraintEntry {
            oid: pkey_constraint_oid(def.id),
            name: def.pkey_constraint_name(),
            kind: ConstraintKind::PrimaryKey,
            columns: def.primary_key.clone(),
            index_oid: Some(pkey_index_oid(def.id)),
        });
    }
    for i in def.indexes.iter().filter(|i| i.constraint) {
        out.push(ConstraintEntry {
            oid: table_oid(i.id) + 1,
            name: i.name.clone(),
            kind: ConstraintKind::Unique,
            columns: i.columns.clone(),
            index_oid: Some(table_oid(i.id)),
        });
    }
    for c in &def.checks {
        out.push(ConstraintEntry {
            oid: table_oid(c.id),
            name: c.name.clone(),
            kind: ConstraintKind::Check(&c.expr),
            columns: Vec::new(),
            index_oid: None,
        });
    }
    for f in &def.foreign_keys {
        out.push(ConstraintEntry {
            oid: table_oid(f.id),
            name: f.name.clone(),
            kind: ConstraintKind::ForeignKey(f),
            columns: f.columns.clone(),
            index_oid: None,
        });
    }
    out
}

fn column_list(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A relation's name as PostgreSQL prints it: qualified unless in `public`.
fn relation_name(catalog: &Catalog, id: weir_common::ObjectId) -> String {
    match catalog.tables.get(&id) {
        Some(t) if t.schema == super::model::DEFAULT_SCHEMA => quote_ident(&t.name),
        Some(t) => format!("{}.{}", quote_ident(&t.schema), quote_ident(&t.name)),
        None => format!("object {id}"),
    }
}

/// `pg_get_constraintdef`: `UNIQUE (a)`, `CHECK ((a > 0))`,
/// `FOREIGN KEY (a) REFERENCES p(id) ON DELETE CASCADE`.
pub fn constraint_definition(catalog: &Catalog, entry: &ConstraintEntry<'_>) -> String {
    match &entry.kind {
        ConstraintKind::PrimaryKey => format!("PRIMARY KEY ({})", column_list(&entry.columns)),
        ConstraintKind::Unique => format!("UNIQUE ({})", column_list(&entry.columns)),
        ConstraintKind::Check(expr) => format!("CHECK (({expr}))"),
        ConstraintKind::ForeignKey(f) => {
            let mut s = format!(
                "FOREIGN KEY ({}) REFERENCES {}({})",
                column_list(&f.columns),
                relation_name(catalog, f.parent),
                column_list(&f.parent_columns)
            );
            if f.on_update != RefAction::NoAction {
                s.push_str(&format!(" ON UPDATE {}", f.on_update.sql()));
            }
            if f.on_delete != RefAction::NoAction {
                s.push_str(&format!(" ON DELETE {}", f.on_delete.sql()));
            }
            s
        }
    }
}

/// `pg_get_indexdef` and `pg_indexes.indexdef`.
pub fn index_definition(def: &TableDef, index: &IndexEntry) -> String {
    format!(
        "CREATE {}INDEX {} ON {}.{} USING btree ({})",
        if index.unique { "UNIQUE " } else { "" },
        quote_ident(&index.name),
        quote_ident(&def.schema),
        quote_ident(&def.name),
        column_list(&index.columns)
    )
}

/// Every index of every table, with its table.
pub fn all_indexes(catalog: &Catalog) -> impl Iterator<Item = (&TableDef, IndexEntry)> {
    catalog
        .tables
        .values()
        .flat_map(|t| indexes_of(t).into_iter().map(move |i| (t.as_ref(), i)))
}

/// Every constraint of every table, with its table.
pub fn all_constraints(
    catalog: &Catalog,
) -> impl Iterator<Item = (&TableDef, ConstraintEntry<'_>)> {
    catalog
        .tables
        .values()
        .flat_map(|t| constraints_of(t).into_iter().map(move |c| (t.as_ref(), c)))
}
