//! The catalog value and the changes that evolve it.
//!
//! The catalog is an immutable value; DDL produces [`CatalogChange`]s that
//! are validated against a copy, written to the control log as one
//! [`ControlEntry`] per transaction, and then applied. Replaying the control
//! log with [`Catalog::apply`] rebuilds exactly the same value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_common::ObjectId;
use weir_pgsem::SqlType;

use super::streaming::{SourceDef, SourceKind, upstream_table_key};
use crate::error::ServerError;

/// The hidden key column of tables declared without a primary key.
pub const ROW_ID_COLUMN: &str = "_weir_row_id";
pub const DEFAULT_SCHEMA: &str = "public";
pub const DATABASE_NAME: &str = "weir";
pub const SUPERUSER: &str = "weir";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub sql_type: SqlType,
    pub nullable: bool,
    /// The DEFAULT expression as written, re-planned when the table loads.
    pub default: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableDef {
    pub id: ObjectId,
    pub schema: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Primary-key column names; empty means the hidden row id is the key.
    pub primary_key: Vec<String>,
    /// `APPEND ONLY`: rows are only ever inserted (UPDATE, DELETE,
    /// TRUNCATE and upserts are refused), so windows over it can close.
    #[serde(default)]
    pub append_only: bool,
    /// `WATERMARK FOR column AS expression` (append-only tables only).
    #[serde(default)]
    pub watermark: Option<WatermarkDef>,
}

/// `WATERMARK FOR column AS expression` of a source or an append-only
/// table, stored for event time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatermarkDef {
    pub column: String,
    /// The expression as sqlparser prints it.
    pub expr: String,
}

impl TableDef {
    /// The columns users see, in order.
    pub fn user_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| c.sql_type.field(&c.name, c.nullable))
                .collect::<Vec<Field>>(),
        ))
    }

    /// The stored columns: the user's, then the hidden row id when there is
    /// no primary key.
    pub fn physical_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| c.sql_type.field(&c.name, c.nullable))
            .collect();
        if self.has_row_id() {
            fields.push(Field::new(ROW_ID_COLUMN, DataType::Int64, false));
        }
        Arc::new(Schema::new(fields))
    }

    pub fn has_row_id(&self) -> bool {
        self.primary_key.is_empty()
    }

    /// Indices of the key columns in the physical schema.
    pub fn key_indices(&self) -> Vec<usize> {
        if self.has_row_id() {
            return vec![self.columns.len()];
        }
        self.primary_key
            .iter()
            .filter_map(|k| self.columns.iter().position(|c| &c.name == k))
            .collect()
    }

    pub fn qualified_name(&self) -> String {
        if self.schema == DEFAULT_SCHEMA {
            self.name.clone()
        } else {
            format!("{}.{}", self.schema, self.name)
        }
    }

    pub fn pkey_constraint_name(&self) -> String {
        format!("{}_pkey", self.name)
    }

    /// `CREATE TABLE` text that recreates this table exactly.
    pub fn create_statement(&self) -> String {
        let mut parts: Vec<String> = self
            .columns
            .iter()
            .map(|c| {
                let mut s = format!(
                    "{} {}",
                    quote_ident(&c.name),
                    c.sql_type.display_name().to_uppercase()
                );
                if !c.nullable && !self.primary_key.contains(&c.name) {
                    s.push_str(" NOT NULL");
                }
                if let Some(d) = &c.default {
                    s.push_str(&format!(" DEFAULT {d}"));
                }
                s
            })
            .collect();
        if !self.primary_key.is_empty() {
            let cols: Vec<String> = self.primary_key.iter().map(|c| quote_ident(c)).collect();
            parts.push(format!("PRIMARY KEY ({})", cols.join(", ")));
        }
        if let Some(w) = &self.watermark {
            parts.push(format!(
                "WATERMARK FOR {} AS {}",
                quote_ident(&w.column),
                w.expr
            ));
        }
        let name = if self.schema == DEFAULT_SCHEMA {
            quote_ident(&self.name)
        } else {
            format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
        };
        let append_only = if self.append_only { " APPEND ONLY" } else { "" };
        format!("CREATE TABLE {name} ({}){append_only}", parts.join(", "))
    }
}

/// Quotes an identifier only when PostgreSQL would need it.
pub fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// A projection: a query Weir keeps up to date. Only the query text is
/// stored; the operator graph is planned from it at creation and at every
/// start, against the catalog of that moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectionDef {
    pub id: ObjectId,
    pub schema: String,
    pub name: String,
    /// The query, as sqlparser prints it.
    pub query: String,
    pub columns: Vec<ColumnDef>,
    /// Tables and projections the query reads.
    pub reads: Vec<ObjectId>,
    /// The session settings the query was planned under, by name
    /// ([`PROJECTION_SETTINGS`]): a start plans it under them again, so its
    /// names and literals (`'01/02/2024'::date`) keep their meaning.
    /// Empty for projections created before settings were kept.
    #[serde(default)]
    pub settings: std::collections::BTreeMap<String, String>,
    /// `EMIT ON WINDOW CLOSE`: its window aggregates emit each window's
    /// row once, when the watermark closes it.
    #[serde(default)]
    pub emit_on_window_close: bool,
    /// Its result only ever inserts (as planned at CREATE: an `EMIT ON
    /// WINDOW CLOSE` aggregate, inner joins and maps over sources that only
    /// insert), so an append sink may read it.
    #[serde(default)]
    pub append_only: bool,
    /// Its columns that carry a watermark (as planned at CREATE: window
    /// columns over sources with `WATERMARK FOR`), so projections reading
    /// it close their windows too. Empty for projections created before.
    #[serde(default)]
    pub watermark_columns: Vec<String>,
}

/// The session settings that change what a query's text means.
pub const PROJECTION_SETTINGS: &[&str] = &["search_path", "DateStyle", "TimeZone"];

impl ProjectionDef {
    pub fn arrow_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| c.sql_type.field(&c.name, c.nullable))
                .collect::<Vec<Field>>(),
        ))
    }

    pub fn qualified_name(&self) -> String {
        if self.schema == DEFAULT_SCHEMA {
            self.name.clone()
        } else {
            format!("{}.{}", self.schema, self.name)
        }
    }

    pub fn create_statement(&self) -> String {
        let name = if self.schema == DEFAULT_SCHEMA {
            quote_ident(&self.name)
        } else {
            format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
        };
        let emit = if self.emit_on_window_close {
            " EMIT ON WINDOW CLOSE"
        } else {
            ""
        };
        format!("CREATE PROJECTION {name} AS {}{emit}", self.query)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserDef {
    pub name: String,
    pub superuser: bool,
    /// SCRAM-SHA-256 credentials; `None` for users without a password.
    pub scram: Option<ScramSecret>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScramSecret {
    pub salt: Vec<u8>,
    pub iterations: usize,
    pub salted_password: Vec<u8>,
}

/// One change to the catalog, as recorded in the control log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum CatalogChange {
    CreateSchema {
        name: String,
    },
    DropSchema {
        name: String,
    },
    CreateTable(TableDef),
    DropTable {
        id: ObjectId,
    },
    CreateUser(UserDef),
    DropUser {
        name: String,
    },
    CreateProjection(ProjectionDef),
    DropProjection {
        id: ObjectId,
    },
    CreateSource(super::streaming::SourceDef),
    DropSource {
        id: ObjectId,
    },
    CreateSink(super::streaming::SinkDef),
    DropSink {
        id: ObjectId,
    },
    /// Replaces a source's entry in place (same id; its reader is
    /// restarted by the statement that made the change).
    ReplaceSource(super::streaming::SourceDef),
    /// Replaces a sink's entry in place (same id, same deployment): a
    /// destination's records.
    ReplaceSink(super::streaming::SinkDef),
    /// Creates the secret, or replaces its value (ALTER SECRET).
    PutSecret(super::streaming::SecretDef),
    DropSecret {
        name: String,
    },
    /// Creates the connection, or replaces it (ALTER CONNECTION).
    PutConnection(super::streaming::ConnectionDef),
    DropConnection {
        name: String,
    },
}

/// The control-log entry of one committed transaction.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlEntry {
    /// Identifies the transaction; its table-log record names it too, so a
    /// record whose entry never made it to the control log is skipped.
    pub txn: uuid::Uuid,
    pub changes: Vec<CatalogChange>,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// The control-log revision this value reflects.
    pub revision: u64,
    pub schemas: BTreeSet<String>,
    pub tables: BTreeMap<ObjectId, Arc<TableDef>>,
    pub projections: BTreeMap<ObjectId, Arc<ProjectionDef>>,
    pub users: BTreeMap<String, UserDef>,
    pub sources: BTreeMap<ObjectId, Arc<super::streaming::SourceDef>>,
    pub sinks: BTreeMap<ObjectId, Arc<super::streaming::SinkDef>>,
    pub secrets: BTreeMap<String, Arc<super::streaming::SecretDef>>,
    pub connections: BTreeMap<String, Arc<super::streaming::ConnectionDef>>,
    next_id: u64,
}

impl Catalog {
    /// The catalog of a new database: the `public` schema.
    pub fn bootstrap() -> Self {
        Self {
            schemas: BTreeSet::from([DEFAULT_SCHEMA.to_string()]),
            next_id: 1,
            ..Default::default()
        }
    }

    /// The connections, sources and sinks that name secret `name`, as
    /// `connection x` / `source s` / `sink s`.
    pub fn secret_users(&self, name: &str) -> Vec<String> {
        let names = |secrets: &BTreeMap<String, String>| secrets.values().any(|s| s == name);
        self.connections
            .values()
            .filter(|c| names(&c.secrets))
            .map(|c| format!("connection {}", c.name))
            .chain(
                self.sources
                    .values()
                    .filter(|s| names(&s.secrets))
                    .map(|s| format!("source {}", s.qualified_name())),
            )
            .chain(
                self.sinks
                    .values()
                    .filter(|s| names(&s.secrets))
                    .map(|s| format!("sink {}", s.qualified_name())),
            )
            .collect()
    }

    /// The sources and sinks that name connection `name`.
    pub fn connection_users(&self, name: &str) -> Vec<String> {
        let uses = |options: &BTreeMap<String, String>| {
            options.get("connection").is_some_and(|c| c == name)
        };
        self.sources
            .values()
            .filter(|s| uses(&s.options))
            .map(|s| format!("source {}", s.qualified_name()))
            .chain(
                self.sinks
                    .values()
                    .filter(|s| uses(&s.options))
                    .map(|s| format!("sink {}", s.qualified_name())),
            )
            .collect()
    }

    pub fn allocate_id(&mut self) -> ObjectId {
        let id = ObjectId(self.next_id);
        self.next_id += 1;
        id
    }

    pub fn table(&self, schema: &str, name: &str) -> Option<&Arc<TableDef>> {
        self.tables
            .values()
            .find(|t| t.schema == schema && t.name == name)
    }

    pub fn projection(&self, schema: &str, name: &str) -> Option<&Arc<ProjectionDef>> {
        self.projections
            .values()
            .find(|p| p.schema == schema && p.name == name)
    }

    pub fn source(&self, schema: &str, name: &str) -> Option<&Arc<super::streaming::SourceDef>> {
        self.sources
            .values()
            .find(|s| s.schema == schema && s.name == name)
    }

    pub fn sink(&self, schema: &str, name: &str) -> Option<&Arc<super::streaming::SinkDef>> {
        self.sinks
            .values()
            .find(|s| s.schema == schema && s.name == name)
    }

    /// Whether a table, projection or source already has this name.
    pub fn relation_exists(&self, schema: &str, name: &str) -> bool {
        self.table(schema, name).is_some()
            || self.projection(schema, name).is_some()
            || self.source(schema, name).is_some()
    }

    /// Projections that read `id` directly.
    pub fn readers_of(&self, id: ObjectId) -> Vec<&Arc<ProjectionDef>> {
        self.projections
            .values()
            .filter(|p| p.reads.contains(&id))
            .collect()
    }

    /// Sinks that read `id` directly.
    pub fn sinks_reading(&self, id: ObjectId) -> Vec<&Arc<super::streaming::SinkDef>> {
        self.sinks
            .values()
            .filter(|s| s.reads.contains(&id))
            .collect()
    }

    fn readable(&self, id: &ObjectId) -> bool {
        self.tables.contains_key(id)
            || self.projections.contains_key(id)
            || self.sources.contains_key(id)
    }

    /// Applies one change, validating it. On error `self` is unchanged.
    pub fn apply(&mut self, change: &CatalogChange) -> Result<(), ServerError> {
        match change {
            CatalogChange::CreateSchema { name } => {
                if !self.schemas.insert(name.clone()) {
                    return Err(ServerError::DuplicateSchema(name.clone()));
                }
            }
            CatalogChange::DropSchema { name } => {
                if self.tables.values().any(|t| &t.schema == name)
                    || self.projections.values().any(|p| &p.schema == name)
                    || self.sources.values().any(|s| &s.schema == name)
                    || self.sinks.values().any(|s| &s.schema == name)
                {
                    return Err(ServerError::DependentObjects {
                        object: format!("schema {name}"),
                        dependents: "tables".into(),
                    });
                }
                if !self.schemas.remove(name) {
                    return Err(ServerError::UndefinedSchema(name.clone()));
                }
            }
            CatalogChange::CreateTable(def) => {
                if !self.schemas.contains(&def.schema) {
                    return Err(ServerError::UndefinedSchema(def.schema.clone()));
                }
                if self.relation_exists(&def.schema, &def.name) {
                    return Err(ServerError::DuplicateTable(def.name.clone()));
                }
                self.next_id = self.next_id.max(def.id.0 + 1);
                self.tables.insert(def.id, Arc::new(def.clone()));
            }
            CatalogChange::CreateProjection(def) => {
                if !self.schemas.contains(&def.schema) {
                    return Err(ServerError::UndefinedSchema(def.schema.clone()));
                }
                if self.relation_exists(&def.schema, &def.name) {
                    return Err(ServerError::DuplicateTable(def.name.clone()));
                }
                if let Some(missing) = def.reads.iter().find(|id| !self.readable(id)) {
                    return Err(ServerError::UndefinedTable(format!("object {missing}")));
                }
                self.next_id = self.next_id.max(def.id.0 + 1);
                self.projections.insert(def.id, Arc::new(def.clone()));
            }
            CatalogChange::CreateSource(def) => {
                if !self.schemas.contains(&def.schema) {
                    return Err(ServerError::UndefinedSchema(def.schema.clone()));
                }
                if self.relation_exists(&def.schema, &def.name) {
                    return Err(ServerError::DuplicateTable(def.name.clone()));
                }
                if let SourceKind::Table { source, upstream } = &def.kind {
                    self.check_source_table(*source, upstream)?;
                }
                self.next_id = self.next_id.max(def.id.0 + 1);
                self.sources.insert(def.id, Arc::new(def.clone()));
            }
            CatalogChange::DropSource { id } => {
                self.refuse_if_read(*id)?;
                let tables = self.tables_of_source(*id);
                if !tables.is_empty() {
                    return Err(ServerError::DependentObjects {
                        object: format!("source {}", self.sources[id].qualified_name()),
                        dependents: tables
                            .iter()
                            .map(|t| format!("source {}", t.qualified_name()))
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
                if self.sources.remove(id).is_none() {
                    return Err(ServerError::UndefinedTable(format!("object {id}")));
                }
            }
            CatalogChange::CreateSink(def) => {
                if !self.schemas.contains(&def.schema) {
                    return Err(ServerError::UndefinedSchema(def.schema.clone()));
                }
                if self.sink(&def.schema, &def.name).is_some() {
                    return Err(ServerError::DuplicateObject(format!(
                        "sink \"{}\"",
                        def.name
                    )));
                }
                if let Some(missing) = def.reads.iter().find(|id| !self.readable(id)) {
                    return Err(ServerError::UndefinedTable(format!("object {missing}")));
                }
                self.next_id = self.next_id.max(def.id.0 + 1);
                self.sinks.insert(def.id, Arc::new(def.clone()));
            }
            CatalogChange::DropSink { id } => {
                if self.sinks.remove(id).is_none() {
                    return Err(ServerError::UndefinedTable(format!("object {id}")));
                }
            }
            CatalogChange::ReplaceSource(def) => {
                if !self.sources.contains_key(&def.id) {
                    return Err(ServerError::UndefinedTable(format!("object {}", def.id)));
                }
                self.sources.insert(def.id, Arc::new(def.clone()));
            }
            CatalogChange::ReplaceSink(def) => {
                if !self.sinks.contains_key(&def.id) {
                    return Err(ServerError::UndefinedTable(format!("object {}", def.id)));
                }
                self.sinks.insert(def.id, Arc::new(def.clone()));
            }
            CatalogChange::DropProjection { id } => {
                self.refuse_if_read(*id)?;
                if self.projections.remove(id).is_none() {
                    return Err(ServerError::UndefinedTable(format!("object {id}")));
                }
            }
            CatalogChange::DropTable { id } => {
                self.refuse_if_read(*id)?;
                if self.tables.remove(id).is_none() {
                    return Err(ServerError::UndefinedTable(format!("object {id}")));
                }
            }
            CatalogChange::PutSecret(def) => {
                self.secrets.insert(def.name.clone(), Arc::new(def.clone()));
            }
            CatalogChange::DropSecret { name } => {
                if let Some(user) = self.secret_users(name).first() {
                    return Err(ServerError::DependentObjects {
                        object: format!("secret {name}"),
                        dependents: user.clone(),
                    });
                }
                self.secrets.remove(name);
            }
            CatalogChange::PutConnection(def) => {
                if let Some(missing) = def
                    .secrets
                    .values()
                    .find(|s| !self.secrets.contains_key(*s))
                {
                    return Err(ServerError::Sqlstate {
                        code: "42704",
                        message: format!("secret \"{missing}\" does not exist"),
                    });
                }
                self.connections
                    .insert(def.name.clone(), Arc::new(def.clone()));
            }
            CatalogChange::DropConnection { name } => {
                if let Some(user) = self.connection_users(name).first() {
                    return Err(ServerError::DependentObjects {
                        object: format!("connection {name}"),
                        dependents: user.clone(),
                    });
                }
                self.connections.remove(name);
            }
            CatalogChange::CreateUser(user) => {
                if self.users.contains_key(&user.name) {
                    return Err(ServerError::DuplicateRole(user.name.clone()));
                }
                self.users.insert(user.name.clone(), user.clone());
            }
            CatalogChange::DropUser { name } => {
                if self.users.remove(name).is_none() {
                    return Err(ServerError::InvalidParameterValue(format!(
                        "role \"{name}\" does not exist"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl Catalog {
    /// The tables of shared source `id` (`CREATE SOURCE t FROM it TABLE
    /// ...`), by id; none for any other object.
    pub fn tables_of_source(&self, id: ObjectId) -> Vec<&Arc<SourceDef>> {
        self.sources
            .values()
            .filter(|s| s.parent() == Some(id))
            .collect()
    }

    /// Why shared source `def` cannot be read (a SELECT, a projection or
    /// sink over it): its rows are its tables'; 42809 naming them.
    pub fn shared_source_unreadable(&self, def: &SourceDef) -> ServerError {
        let name = def.qualified_name();
        let tables: Vec<String> = self
            .tables_of_source(def.id)
            .iter()
            .map(|t| t.qualified_name())
            .collect();
        let read = if tables.is_empty() {
            format!("declare one to read it: CREATE SOURCE t FROM {name} TABLE 'schema.table'")
        } else {
            format!("read one of them: {}", tables.join(", "))
        };
        ServerError::Sqlstate {
            code: "42809",
            message: format!("source {name} covers several upstream tables; {read}"),
        }
    }

    /// The table of shared source `parent` that already reads upstream
    /// table `upstream` (however spelled).
    pub fn source_table_reading(
        &self,
        parent: ObjectId,
        upstream: &str,
    ) -> Option<&Arc<SourceDef>> {
        let key = upstream_table_key(upstream);
        self.tables_of_source(parent).into_iter().find(|t| {
            matches!(&t.kind, SourceKind::Table { upstream, .. } if upstream_table_key(upstream) == key)
        })
    }

    /// A new table `upstream` of source `parent`: the parent exists and is
    /// shared, and no other table of it reads the same upstream table
    /// (one reader would deliver its rows to one relation only).
    pub fn check_source_table(&self, parent: ObjectId, upstream: &str) -> Result<(), ServerError> {
        let Some(def) = self.sources.get(&parent) else {
            return Err(ServerError::UndefinedTable(format!("source {parent}")));
        };
        if !def.is_shared() {
            return Err(not_shared(def));
        }
        if let Some(sibling) = self.source_table_reading(parent, upstream) {
            return Err(ServerError::Sqlstate {
                code: "42710",
                message: format!(
                    "source {} already reads upstream table '{upstream}' as source {}: read that one, or DROP SOURCE {} first",
                    def.qualified_name(),
                    sibling.qualified_name(),
                    sibling.qualified_name()
                ),
            });
        }
        Ok(())
    }

    fn refuse_if_read(&self, id: ObjectId) -> Result<(), ServerError> {
        let readers: Vec<String> = self
            .readers_of(id)
            .iter()
            .map(|p| format!("projection {}", p.qualified_name()))
            .chain(
                self.sinks_reading(id)
                    .iter()
                    .map(|s| format!("sink {}", s.qualified_name())),
            )
            .collect();
        if readers.is_empty() {
            return Ok(());
        }
        let name = self
            .tables
            .get(&id)
            .map(|t| format!("table {}", t.qualified_name()))
            .or_else(|| {
                self.projections
                    .get(&id)
                    .map(|p| format!("projection {}", p.qualified_name()))
            })
            .or_else(|| {
                self.sources
                    .get(&id)
                    .map(|s| format!("source {}", s.qualified_name()))
            })
            .unwrap_or_else(|| format!("object {id}"));
        Err(ServerError::DependentObjects {
            object: name,
            dependents: readers.join(", "),
        })
    }
}

/// `CREATE SOURCE ... FROM def TABLE ...` where `def` covers no tables.
pub fn not_shared(def: &SourceDef) -> ServerError {
    ServerError::Sqlstate {
        code: "42809",
        message: format!(
            "source {} does not cover several tables: FROM names a postgres-cdc source created without a table option (CREATE SOURCE shop WITH (connector = 'postgres-cdc', slot = ..., ...))",
            def.qualified_name()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(id: u64, name: &str) -> TableDef {
        TableDef {
            id: ObjectId(id),
            schema: DEFAULT_SCHEMA.into(),
            name: name.into(),
            columns: vec![
                ColumnDef {
                    name: "id".into(),
                    sql_type: SqlType::Int8,
                    nullable: false,
                    default: None,
                },
                ColumnDef {
                    name: "Owner".into(),
                    sql_type: SqlType::Numeric(Some((12, 2))),
                    nullable: true,
                    default: Some("0".into()),
                },
            ],
            primary_key: vec!["id".into()],
            append_only: false,
            watermark: None,
        }
    }

    #[test]
    fn replaying_changes_rebuilds_the_catalog() {
        let changes = vec![
            CatalogChange::CreateTable(table(1, "a")),
            CatalogChange::CreateSchema { name: "s".into() },
            CatalogChange::DropTable { id: ObjectId(1) },
            CatalogChange::CreateTable(table(2, "a")),
        ];
        let json = serde_json::to_string(&changes).unwrap();
        let mut catalog = Catalog::bootstrap();
        for c in serde_json::from_str::<Vec<CatalogChange>>(&json).unwrap() {
            catalog.apply(&c).unwrap();
        }
        assert_eq!(catalog.table("public", "a").unwrap().id, ObjectId(2));
        assert_eq!(catalog.allocate_id(), ObjectId(3));
        assert!(catalog.schemas.contains("s"));
    }

    #[test]
    fn duplicate_table_is_rejected() {
        let mut catalog = Catalog::bootstrap();
        catalog
            .apply(&CatalogChange::CreateTable(table(1, "a")))
            .unwrap();
        let err = catalog
            .apply(&CatalogChange::CreateTable(table(2, "a")))
            .unwrap_err();
        assert_eq!(err.sqlstate(), "42P07");
    }

    #[test]
    fn create_statement_round_trips_names_and_types() {
        assert_eq!(
            table(1, "a").create_statement(),
            "CREATE TABLE a (id BIGINT, \"Owner\" NUMERIC(12,2) DEFAULT 0, PRIMARY KEY (id))"
        );
    }
}
