//! Catalog entries of streaming objects: sources (rows from a connector;
//! or, for a source that covers several upstream tables, a shared one that
//! holds the upstream position and one source relation per table, see
//! [`SourceKind`]), sinks (a query's changes pushed to a connector), destinations (sinks
//! that keep a keyed copy of a projection, [`DestinationDef`]), and the
//! secrets and connections they name.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_common::ObjectId;

use super::model::{Catalog, ColumnDef, DEFAULT_SCHEMA, qualified, quote_ident};
use crate::error::ServerError;

pub use super::model::WatermarkDef;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceDef {
    pub id: ObjectId,
    pub schema: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub watermark: Option<WatermarkDef>,
    pub connector: String,
    /// Validated options, with the defaults fixed at CREATE filled in
    /// (and `connection` when it names one, whose options are not copied).
    pub options: BTreeMap<String, String>,
    /// `option = SECRET name`: option -> secret name.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// Retention gaps accepted (`ALTER DESTINATION ... ACCEPT GAP`): the
    /// source goes on past as many lost stretches of its upstream.
    #[serde(default)]
    pub gaps_accepted: u32,
    /// `ALTER SOURCE ... PAUSE`: nothing reads it until RESUME.
    #[serde(default)]
    pub paused: bool,
    /// Which input it reads: one more each time `ALTER SOURCE ... SET`
    /// names another (a path, a topic); its reader then starts that input
    /// from the beginning, whatever offsets were sealed before.
    #[serde(default)]
    pub generation: u64,
    /// What the source is: a relation of its own rows, a shared source
    /// covering several upstream tables, or one of those tables.
    #[serde(default)]
    pub kind: SourceKind,
}

/// What a source is. A postgres-cdc source without a `table` is
/// [`SourceKind::Shared`]: it holds the slot and publication, has no
/// columns and cannot be read; each `CREATE SOURCE t FROM shared TABLE
/// 'schema.table'` is a [`SourceKind::Table`] of it, an ordinary readable
/// relation whose rows one shared reader delivers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Its connector's rows are the relation (every source before shared
    /// ones existed).
    #[default]
    Rows,
    /// Covers several upstream tables; `options` are the shared reader's
    /// (connection, slot, publication, snapshot); no columns.
    Shared,
    /// One upstream table of the shared source `source`: `connector` is
    /// the parent's, `options` and `secrets` are empty (the parent's
    /// apply), `gaps_accepted` counts this table's gaps, `paused` is unused.
    Table {
        source: ObjectId,
        /// The upstream table as written (`name` or `schema.name`).
        upstream: String,
    },
}

/// The option the server passes a source's accepted gaps in; `weir.`
/// options are never a user's (validation refuses them).
pub const GAPS_ACCEPTED_OPTION: &str = weir_connectors::GAPS_ACCEPTED;

impl SourceDef {
    pub fn arrow_schema(&self) -> SchemaRef {
        columns_schema(&self.columns)
    }

    pub fn qualified_name(&self) -> String {
        qualified(&self.schema, &self.name)
    }

    /// The shared source this is a table of.
    pub fn parent(&self) -> Option<ObjectId> {
        match self.kind {
            SourceKind::Table { source, .. } => Some(source),
            _ => None,
        }
    }

    pub fn is_shared(&self) -> bool {
        self.kind == SourceKind::Shared
    }

    /// `CREATE SOURCE` text that recreates this source exactly; a table of
    /// a shared source names its parent, looked up in `catalog`.
    pub fn create_statement(&self, catalog: &Catalog) -> String {
        let mut parts: Vec<String> = self
            .columns
            .iter()
            .map(|c| {
                let not_null = if c.nullable { "" } else { " NOT NULL" };
                format!(
                    "{} {}{not_null}",
                    quote_ident(&c.name),
                    c.sql_type.display_name().to_uppercase()
                )
            })
            .collect();
        if let Some(w) = &self.watermark {
            parts.push(format!(
                "WATERMARK FOR {} AS {}",
                quote_ident(&w.column),
                w.expr
            ));
        }
        // A shared source has no columns, and `()` does not parse.
        let columns = if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        };
        let name = quoted_name(&self.schema, &self.name);
        match &self.kind {
            SourceKind::Table { source, upstream } => {
                let parent = catalog.sources.get(source).map_or_else(
                    || format!("\"{source}\""),
                    |p| format!("{}.{}", always_quoted(&p.schema), always_quoted(&p.name)),
                );
                format!(
                    "CREATE SOURCE {name}{columns} FROM {parent} TABLE '{}'",
                    upstream.replace('\'', "''")
                )
            }
            SourceKind::Rows | SourceKind::Shared => format!(
                "CREATE SOURCE {name}{columns} WITH ({})",
                with_options(Some(&self.connector), &self.options, &self.secrets)
            ),
        }
    }
}

/// An identifier in double quotes whatever it is, as PostgreSQL's
/// `quote_ident` would print it with `force_quote`.
fn always_quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `schema.table` as PostgreSQL resolves it: unquoted parts lower case,
/// quoted ones as they are, schema `public` when none is given. Two
/// spellings of one upstream table give the same key (`Orders`,
/// `public.orders`, `"public"."orders"`).
pub fn upstream_table_key(upstream: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut part = String::new();
    let mut quoted = false;
    let mut chars = upstream.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                part.push('"');
            }
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut part)),
            c if quoted => part.push(c),
            c => part.extend(c.to_lowercase()),
        }
    }
    parts.push(part);
    let parts: Vec<String> = parts.iter().map(|p| p.trim().to_string()).collect();
    match parts.as_slice() {
        [table] => format!("{DEFAULT_SCHEMA}.{table}"),
        _ => parts.join("."),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkDef {
    pub id: ObjectId,
    pub schema: String,
    pub name: String,
    /// `FROM relation`: the relation as written (then `query` reads it all).
    pub from: Option<String>,
    /// The query whose changes the sink receives, as sqlparser prints it.
    pub query: String,
    /// The columns of the changes it receives.
    pub columns: Vec<ColumnDef>,
    /// Tables, sources and projections the query reads.
    pub reads: Vec<ObjectId>,
    pub connector: String,
    pub options: BTreeMap<String, String>,
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// Session settings the query is planned under (as for projections).
    pub settings: BTreeMap<String, String>,
    /// Set for a destination (`CREATE DESTINATION`): then `from` is its
    /// projection and `options` are its `INTO (...)` options.
    #[serde(default)]
    pub destination: Option<DestinationDef>,
    /// `ALTER SINK ... PAUSE`: it writes nothing until RESUME.
    #[serde(default)]
    pub paused: bool,
    /// `AS query EMIT ON WINDOW CLOSE`: planned as a projection with it.
    #[serde(default)]
    pub emit_on_window_close: bool,
}

/// What makes a sink a destination: a keyed copy of a projection in an
/// external table, with an identity that outlives its generations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationDef {
    /// The id it was first created with. `REPAIR` replaces the sink (a new
    /// id, so a fresh deployment and seal entry) and keeps this.
    pub identity: ObjectId,
    /// 1 when created; every `REPAIR` adds one. The target's progress row
    /// says which generation its contents are.
    pub generation: u64,
    /// `KEY (...)`: the target's key columns.
    pub key: Vec<String>,
    /// `WITH (...)`: `on_existing`, `delivery`, `on_error`, `restart_*`.
    pub with: BTreeMap<String, String>,
    /// Its history: created, repaired, gaps accepted, paused, resumed.
    pub records: Vec<DestinationRecord>,
    /// `ALTER DESTINATION ... PAUSE`: not deployed until RESUME.
    #[serde(default)]
    pub paused: bool,
}

/// One entry of a destination's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationRecord {
    /// When, as RFC 3339 UTC.
    pub at: String,
    /// The generation it started or applied to.
    pub generation: u64,
    /// `created`, `repair`, `gap_accepted`, `paused` or `resumed`.
    pub event: String,
    pub detail: String,
}

/// The option the server passes a destination's connector with its
/// generation; `weir.` options are never a user's (validation refuses them).
pub const DESTINATION_GENERATION_OPTION: &str = "weir.destination_generation";

impl DestinationDef {
    /// The connector options a destination runs with: its `INTO (...)`
    /// options (resolved) and what a keyed copy implies.
    pub fn connector_options(
        &self,
        mut options: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        options.insert("mode".into(), "upsert".into());
        options.insert(
            "key".into(),
            self.key
                .iter()
                .map(|k| quote_ident(k))
                .collect::<Vec<_>>()
                .join(", "),
        );
        options
            .entry("create_table".into())
            .or_insert("true".into());
        let on_existing = if self.generation > 1 {
            // A repair refills a target that holds an earlier generation.
            "truncate"
        } else {
            self.with.get("on_existing").map_or("error", String::as_str)
        };
        options.insert("on_existing".into(), on_existing.into());
        for (option, value) in &self.with {
            if option != "on_existing" {
                // Options every sink takes: delivery and recovery.
                options.insert(option.clone(), value.clone());
            }
        }
        options.insert(
            DESTINATION_GENERATION_OPTION.into(),
            self.generation.to_string(),
        );
        options
    }
}

impl SinkDef {
    pub fn arrow_schema(&self) -> SchemaRef {
        columns_schema(&self.columns)
    }

    pub fn qualified_name(&self) -> String {
        qualified(&self.schema, &self.name)
    }

    pub fn create_statement(&self) -> String {
        if let Some(d) = &self.destination {
            let with = if d.with.is_empty() {
                String::new()
            } else {
                format!(" WITH ({})", with_options(None, &d.with, &BTreeMap::new()))
            };
            return format!(
                "CREATE DESTINATION {} FROM {} INTO {} ({}) KEY ({}){with}",
                quoted_name(&self.schema, &self.name),
                self.from.as_deref().unwrap_or_default(),
                quote_ident(&self.connector),
                with_options(None, &self.options, &self.secrets),
                d.key
                    .iter()
                    .map(|k| quote_ident(k))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let body = match &self.from {
            Some(relation) => format!("FROM {relation}"),
            None if self.emit_on_window_close => {
                format!("AS {} EMIT ON WINDOW CLOSE", self.query)
            }
            None => format!("AS {}", self.query),
        };
        format!(
            "CREATE SINK {} {body} WITH ({})",
            quoted_name(&self.schema, &self.name),
            with_options(Some(&self.connector), &self.options, &self.secrets)
        )
    }
}

fn columns_schema(columns: &[ColumnDef]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| c.sql_type.field(&c.name, c.nullable))
            .collect::<Vec<Field>>(),
    ))
}

fn quoted_name(schema: &str, name: &str) -> String {
    if schema == DEFAULT_SCHEMA {
        quote_ident(name)
    } else {
        format!("{}.{}", quote_ident(schema), quote_ident(name))
    }
}

/// A secret: a value the catalog holds only sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecretDef {
    pub name: String,
    pub value: crate::secrets::SealedValue,
}

/// A connection: options (and secrets) shared by the sources and sinks
/// that name it with `connection = name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionDef {
    pub name: String,
    /// What it connects to: `postgres`, `kafka`, `s3`.
    pub kind: String,
    pub options: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
}

impl ConnectionDef {
    pub fn create_statement(&self) -> String {
        format!(
            "CREATE CONNECTION {} TO {} ({})",
            quote_ident(&self.name),
            quote_ident(&self.kind),
            with_options(None, &self.options, &self.secrets)
        )
    }
}

/// `connector = '...', key = 'value', key = SECRET name, ...` with keys in
/// a stable order; a `connection` is written as the name it is.
fn with_options(
    connector: Option<&str>,
    options: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, String>,
) -> String {
    let quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
    let key = |k: &str| k.split('.').map(quote_ident).collect::<Vec<_>>().join(".");
    let mut all: BTreeMap<&str, String> = options
        .iter()
        .map(|(k, v)| {
            let value = if k == "connection" {
                quote_ident(v)
            } else {
                quote(v)
            };
            (k.as_str(), value)
        })
        .collect();
    for (k, name) in secrets {
        all.insert(k.as_str(), format!("SECRET {}", quote_ident(name)));
    }
    connector
        .map(|c| format!("connector = {}", quote(c)))
        .into_iter()
        .chain(all.into_iter().map(|(k, v)| format!("{} = {v}", key(k))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Shared sources and their tables.
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
    use crate::catalog::CatalogChange;
    use weir_pgsem::SqlType;

    fn source(id: u64, name: &str, kind: SourceKind) -> SourceDef {
        let shared = kind == SourceKind::Shared;
        let table = matches!(kind, SourceKind::Table { .. });
        SourceDef {
            id: ObjectId(id),
            schema: DEFAULT_SCHEMA.into(),
            name: name.into(),
            columns: if shared {
                vec![]
            } else {
                vec![ColumnDef {
                    name: "id".into(),
                    sql_type: SqlType::Int8,
                    nullable: false,
                    default: None,
                    generated: None,
                }]
            },
            watermark: None,
            connector: "postgres-cdc".into(),
            options: if table {
                BTreeMap::new()
            } else {
                BTreeMap::from([
                    ("connection".to_string(), "shop_db".to_string()),
                    ("slot".to_string(), "weir_shop".to_string()),
                ])
            },
            secrets: BTreeMap::new(),
            gaps_accepted: 0,
            generation: 0,
            paused: false,
            kind,
        }
    }

    fn table_of(id: u64, name: &str, parent: u64, upstream: &str) -> SourceDef {
        source(
            id,
            name,
            SourceKind::Table {
                source: ObjectId(parent),
                upstream: upstream.into(),
            },
        )
    }

    #[test]
    fn a_source_stored_before_kinds_existed_reads_as_rows() {
        let mut json = serde_json::to_value(source(1, "s", SourceKind::Rows)).unwrap();
        json.as_object_mut().unwrap().remove("kind");
        let def: SourceDef = serde_json::from_value(json).unwrap();
        assert_eq!(def.kind, SourceKind::Rows);
        let table = table_of(3, "orders", 2, "public.orders");
        let json = serde_json::to_string(&table).unwrap();
        assert!(
            json.contains(r#""kind":{"table":{"source":2,"upstream":"public.orders"}}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<SourceDef>(&json).unwrap(), table);
    }

    #[test]
    fn a_shared_source_and_its_tables_print_statements_that_parse() {
        let mut catalog = Catalog::bootstrap();
        catalog
            .apply(&CatalogChange::CreateSource(source(
                2,
                "shop",
                SourceKind::Shared,
            )))
            .unwrap();
        let mut orders = table_of(3, "orders", 2, "public.o'rders");
        orders.columns[0].nullable = true;
        catalog
            .apply(&CatalogChange::CreateSource(orders.clone()))
            .unwrap();
        assert_eq!(
            catalog.sources[&ObjectId(2)].create_statement(&catalog),
            "CREATE SOURCE shop WITH (connector = 'postgres-cdc', connection = shop_db, slot = 'weir_shop')"
        );
        assert_eq!(
            orders.create_statement(&catalog),
            "CREATE SOURCE orders (id BIGINT) FROM \"public\".\"shop\" TABLE 'public.o''rders'"
        );
        assert_eq!(
            source(1, "s", SourceKind::Rows).create_statement(&catalog),
            "CREATE SOURCE s (id BIGINT NOT NULL) WITH (connector = 'postgres-cdc', connection = shop_db, slot = 'weir_shop')"
        );
    }

    #[test]
    fn a_table_needs_a_shared_parent_and_an_upstream_table_of_its_own() {
        let mut catalog = Catalog::bootstrap();
        for def in [
            source(1, "plain", SourceKind::Rows),
            source(2, "shop", SourceKind::Shared),
            table_of(3, "orders", 2, "public.orders"),
        ] {
            catalog.apply(&CatalogChange::CreateSource(def)).unwrap();
        }
        let create = |def| CatalogChange::CreateSource(def);
        let err = catalog
            .apply(&create(table_of(4, "o2", 2, "\"public\".Orders")))
            .unwrap_err();
        assert_eq!(err.sqlstate(), "42710", "{err}");
        assert!(err.to_string().contains("as source orders"), "{err}");
        let err = catalog
            .apply(&create(table_of(4, "o2", 1, "orders")))
            .unwrap_err();
        assert_eq!(err.sqlstate(), "42809", "{err}");
        let err = catalog
            .apply(&create(table_of(4, "o2", 3, "orders")))
            .unwrap_err();
        assert_eq!(err.sqlstate(), "42809", "{err}");
        catalog
            .apply(&create(table_of(4, "customers", 2, "customers")))
            .unwrap();
        assert_eq!(
            catalog
                .tables_of_source(ObjectId(2))
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["orders", "customers"]
        );
        let err = catalog
            .apply(&CatalogChange::DropSource { id: ObjectId(2) })
            .unwrap_err();
        assert_eq!(err.sqlstate(), "2BP01", "{err}");
        assert!(
            matches!(&err, crate::error::ServerError::DependentObjects { dependents, .. }
                if dependents == "source orders, source customers"),
            "{err:?}"
        );
        let unreadable = catalog.shared_source_unreadable(&catalog.sources[&ObjectId(2)]);
        assert_eq!(unreadable.sqlstate(), "42809");
        assert_eq!(
            unreadable.to_string(),
            "source shop covers several upstream tables; read one of them: orders, customers"
        );
        for id in [3, 4, 2] {
            catalog
                .apply(&CatalogChange::DropSource { id: ObjectId(id) })
                .unwrap();
        }
    }

    #[test]
    fn spellings_of_one_upstream_table_have_one_key() {
        for same in ["orders", "Orders", "public.orders", "\"public\".\"orders\""] {
            assert_eq!(upstream_table_key(same), "public.orders", "{same}");
        }
        assert_eq!(upstream_table_key("\"Sales\".\"A.b\""), "Sales.A.b");
        assert_ne!(upstream_table_key("\"Orders\""), "public.orders");
    }
}
