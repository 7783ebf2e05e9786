//! `pg_catalog` as Weir serves it.
//!
//! datafusion-pg-catalog supplies PostgreSQL's own catalog rows (`pg_type`,
//! `pg_proc`, ...) and generic `pg_class`/`pg_attribute` built from Arrow
//! schemas. Arrow types lose what DDL declared (`varchar(4)` is just `Utf8`,
//! `numeric` has no typmod) and its OIDs are handed out per session, so Weir
//! computes the relation tables itself from the catalog model:
//! `pg_namespace`, `pg_class`, `pg_attribute`, `pg_attrdef`, `pg_index` and
//! `pg_constraint` (the last two keep PostgreSQL's system rows too), and
//! the foreign-data tables that describe sources ([`super::pg_foreign`]).
//! Every other table comes from the crate.
//!
//! OIDs are derived from catalog ids, so they are the same in every session
//! and across restarts: table `id` is `16384 + 4*id`, its primary-key index
//! the next OID and the key constraint the one after.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;
use datafusion::scalar::ScalarValue;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};
use weir_common::ObjectId;
use weir_pgsem::SqlType;

use super::TableDef;
use super::pg_constraints::{
    ConstraintKind, all_constraints, all_indexes, index_definition, indexes_of,
};
use super::pg_foreign;
use super::provider::{INFORMATION_SCHEMA, PG_CATALOG, SessionView, ViewCatalogInfo, WEIR_CATALOG};
use super::rows::{Row, batch, boolean, conform, int, int2_list, null, oid_list, text};
use arrow::datatypes::{DataType, Field, Schema};

pub const PG_CATALOG_OID: i64 = 11;
pub const PUBLIC_OID: i64 = 2200;
pub const INFORMATION_SCHEMA_OID: i64 = 13283;
/// Below the user range (16384) and above every OID of PostgreSQL's own rows.
const WEIR_CATALOG_OID: i64 = 16000;
const SUPERUSER_OID: i64 = 10;
const HEAP_AM: i64 = 2;
const BTREE_AM: i64 = 403;
const DEFAULT_COLLATION: i64 = 100;

pub fn schema_oid(name: &str) -> i64 {
    match name {
        PG_CATALOG => PG_CATALOG_OID,
        "public" => PUBLIC_OID,
        INFORMATION_SCHEMA => INFORMATION_SCHEMA_OID,
        WEIR_CATALOG => WEIR_CATALOG_OID,
        // Schemas have no catalog id; a name hash keeps the OID stable and
        // far above table OIDs.
        _ => {
            let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
            });
            0x4000_0000 | i64::from(hash & 0x3fff_ffff)
        }
    }
}

pub use super::oids::table_oid;

pub fn pkey_index_oid(id: ObjectId) -> i64 {
    table_oid(id) + 1
}

pub fn pkey_constraint_oid(id: ObjectId) -> i64 {
    table_oid(id) + 2
}

fn attrdef_oid(id: ObjectId, attnum: i64) -> i64 {
    0x2000_0000 + (id.0 as i64 * 1600 + attnum) % 0x2000_0000
}

/// OIDs of `weir_catalog`'s tables: just above its namespace.
pub fn system_table_oid(position: usize) -> i64 {
    WEIR_CATALOG_OID + 1 + position as i64
}

/// `atttypmod`: `varchar(n)` is n+4, `numeric(p,s)` is (p<<16 | s)+4.
pub fn typmod(t: &SqlType) -> i64 {
    match t {
        SqlType::Varchar(Some(n)) => *n as i64 + 4,
        SqlType::Numeric(Some((p, s))) => ((i64::from(*p) << 16) | (i64::from(*s) & 0xffff)) + 4,
        SqlType::Array(inner) => typmod(inner),
        _ => -1,
    }
}

/// `(typlen, typbyval, typalign, typstorage)` of PostgreSQL's `pg_type`.
pub fn storage(t: &SqlType) -> (i64, bool, &'static str, &'static str) {
    match t {
        SqlType::Bool => (1, true, "c", "p"),
        SqlType::Int2 => (2, true, "s", "p"),
        SqlType::Int4 | SqlType::Float4 | SqlType::Date | SqlType::Oid => (4, true, "i", "p"),
        SqlType::Int8
        | SqlType::Float8
        | SqlType::Time
        | SqlType::Timestamp
        | SqlType::Timestamptz => (8, true, "d", "p"),
        SqlType::Interval => (16, false, "d", "p"),
        SqlType::Uuid => (16, false, "c", "p"),
        SqlType::Numeric(_) => (-1, false, "i", "m"),
        SqlType::Text | SqlType::Varchar(_) | SqlType::Bytea | SqlType::Json | SqlType::Jsonb => {
            (-1, false, "i", "x")
        }
        SqlType::Array(_) => (-1, false, "d", "x"),
    }
}

pub fn is_collatable(t: &SqlType) -> bool {
    match t {
        SqlType::Text | SqlType::Varchar(_) => true,
        SqlType::Array(inner) => is_collatable(inner),
        _ => false,
    }
}

/// The columns of a relation, as (name, type, nullable, default).
pub struct Column {
    pub name: String,
    pub sql_type: SqlType,
    pub nullable: bool,
    pub default: Option<String>,
    /// `pg_attribute.attidentity`: `a`, `d`, or none.
    pub identity: Option<char>,
}

impl Column {
    /// The default as PostgreSQL shows it: none for an identity column
    /// (its values come from the identity), a sequence's name as a
    /// `regclass` in `nextval`, the text as declared otherwise.
    pub fn shown_default(&self) -> Option<String> {
        if self.identity.is_some() {
            return None;
        }
        let text = self.default.as_ref()?;
        Some(
            match text
                .strip_prefix("nextval('")
                .and_then(|t| t.strip_suffix("')"))
            {
                Some(name) => format!("nextval('{name}'::regclass)"),
                // PostgreSQL stores a quoted default as a constant of the
                // column's type and prints it with its cast: 'draft'::text.
                None if is_quoted_literal(text) => match literal_cast(&self.sql_type) {
                    Some(t) => format!("{text}::{t}"),
                    None => text.clone(),
                },
                None => text.clone(),
            },
        )
    }
}

/// `'...'` with only doubled quotes inside: one string literal.
fn is_quoted_literal(text: &str) -> bool {
    text.len() >= 2
        && text.starts_with('\'')
        && text.ends_with('\'')
        && !text[1..text.len() - 1].replace("''", "").contains('\'')
}

/// The type a quoted default is shown cast to; `None` for types whose
/// constants PostgreSQL prints bare (numbers, booleans).
fn literal_cast(t: &SqlType) -> Option<String> {
    match t {
        SqlType::Varchar(_) => Some("character varying".into()),
        SqlType::Text
        | SqlType::Date
        | SqlType::Time
        | SqlType::Timestamp
        | SqlType::Timestamptz
        | SqlType::Interval
        | SqlType::Uuid
        | SqlType::Json
        | SqlType::Jsonb
        | SqlType::Bytea => Some(t.display_name()),
        _ => None,
    }
}

pub fn columns_of(def: &TableDef) -> Vec<Column> {
    def.columns
        .iter()
        .map(|c| Column {
            name: c.name.clone(),
            sql_type: c.sql_type.clone(),
            nullable: c.nullable,
            default: c.default.clone(),
            identity: c.generated.and_then(|g| g.attidentity()),
        })
        .collect()
}

/// Columns of a `weir_catalog` table, typed from its Arrow schema.
pub fn columns_of_schema(schema: &Schema) -> Vec<Column> {
    schema
        .fields()
        .iter()
        .map(|f| Column {
            name: f.name().clone(),
            sql_type: SqlType::from_field(f).unwrap_or(SqlType::Text),
            nullable: f.is_nullable(),
            default: None,
            identity: None,
        })
        .collect()
}

/// 1-based attribute numbers of the primary-key columns.
/// The attribute numbers of `columns` of `def`, in their order.
pub fn attnums(def: &TableDef, columns: &[String]) -> Vec<i16> {
    columns
        .iter()
        .filter_map(|k| def.columns.iter().position(|c| &c.name == k))
        .map(|i| i as i16 + 1)
        .collect()
}

/// The columns a CHECK expression mentions (its `conkey`).
fn check_columns(def: &TableDef, expr: &str) -> Vec<String> {
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let Ok(words) =
        datafusion::sql::sqlparser::tokenizer::Tokenizer::new(&dialect, expr).tokenize()
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for token in words {
        if let datafusion::sql::sqlparser::tokenizer::Token::Word(w) = token {
            let name = if w.quote_style.is_some() {
                w.value
            } else {
                w.value.to_lowercase()
            };
            if def.columns.iter().any(|c| c.name == name) && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

type Inner = PgCatalogSchemaProvider<ViewCatalogInfo, EmptyContextProvider>;

/// The `pg_catalog` schema of one session.
#[derive(Debug)]
pub struct PgCatalog {
    inner: Arc<Inner>,
    view: Arc<SessionView>,
    pg_static: Arc<PgCatalogStaticTables>,
}

const COMPUTED: &[&str] = &[
    "pg_namespace",
    "pg_class",
    "pg_attribute",
    "pg_attrdef",
    "pg_sequence",
    "pg_index",
    "pg_constraint",
    "pg_indexes",
    "pg_description",
    "pg_settings",
    "pg_foreign_data_wrapper",
    "pg_foreign_server",
    "pg_foreign_table",
];

/// `schema` with nullable `text[]` columns `names` added before column
/// `before` (PostgreSQL's order), for catalog columns the shipped schema
/// lacks (`pg_class.reloptions`, which SQLAlchemy's index reflection reads).
fn with_text_arrays_before(schema: &Schema, names: &[&str], before: &str) -> Schema {
    let text_array = |name: &str| {
        Field::new(
            name,
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        )
    };
    let mut fields = Vec::with_capacity(schema.fields().len() + names.len());
    for f in schema.fields() {
        if f.name() == before {
            fields.extend(names.iter().map(|n| text_array(n)));
        }
        fields.push(f.as_ref().clone());
    }
    if fields.len() == schema.fields().len() {
        fields.extend(names.iter().map(|n| text_array(n)));
    }
    Schema::new(fields)
}

/// `schema` with the named text columns retyped as lists: `int2vector` and
/// `int2[]` columns as lists of int2, `oidvector` columns as lists of oid,
/// so that `unnest(indkey)` and `unnest(indclass)` work as in PostgreSQL.
fn with_vector_columns(schema: &Schema, int2: &[&str], oid: &[&str]) -> Schema {
    let list = |t: DataType| DataType::List(Arc::new(Field::new_list_field(t, true)));
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                let name = f.name().as_str();
                let field = f.as_ref().clone();
                if int2.contains(&name) {
                    field.with_data_type(list(DataType::Int16))
                } else if oid.contains(&name) {
                    field.with_data_type(list(DataType::Int32))
                } else {
                    field
                }
            })
            .collect::<Vec<_>>(),
    )
}

impl PgCatalog {
    pub fn new(
        inner: Arc<Inner>,
        view: Arc<SessionView>,
        pg_static: Arc<PgCatalogStaticTables>,
    ) -> Self {
        Self {
            inner,
            view,
            pg_static,
        }
    }

    fn crate_schema(&self, name: &str) -> DfResult<Arc<Schema>> {
        match self.inner.build_table_by_name(name)? {
            Some(t) => Ok(t.schema()),
            None => Err(datafusion::error::DataFusionError::Internal(format!(
                "pg_catalog.{name} is missing"
            ))),
        }
    }

    /// Namespaces in OID order of creation: the system ones, then the user's.
    pub fn namespaces(view: &SessionView) -> Vec<String> {
        let mut names = vec![PG_CATALOG.to_string(), INFORMATION_SCHEMA.to_string()];
        names.extend(view.snapshot().catalog.schemas.iter().cloned());
        names.push(WEIR_CATALOG.to_string());
        names
    }

    fn pg_namespace(&self) -> DfResult<Vec<Row>> {
        Ok(Self::namespaces(&self.view)
            .into_iter()
            .map(|n| {
                vec![
                    ("oid", int(schema_oid(&n))),
                    ("nspname", text(n)),
                    ("nspowner", int(SUPERUSER_OID)),
                ]
            })
            .collect())
    }

    fn pg_class(&self) -> Vec<Row> {
        let snapshot = self.view.snapshot();
        let mut rows = Vec::new();
        // Tables other tables' foreign keys reference, found once.
        let referenced: std::collections::HashSet<_> = snapshot
            .catalog
            .tables
            .values()
            .flat_map(|t| t.foreign_keys.iter().map(|f| f.parent))
            .collect();
        for def in snapshot.catalog.tables.values() {
            let oid = table_oid(def.id);
            let indexes = indexes_of(def);
            let mut row = class_row(
                oid,
                &def.name,
                schema_oid(&def.schema),
                "r",
                HEAP_AM,
                def.columns.len(),
                !indexes.is_empty(),
            );
            // psql's \d lists check constraints only when relchecks > 0.
            row.push(("relchecks", int(def.checks.len() as i64)));
            // psql's `\d` lists foreign keys only when relhastriggers.
            let references = !def.foreign_keys.is_empty() || referenced.contains(&def.id);
            row.push(("relhastriggers", boolean(references)));
            rows.push(row);
            for index in indexes {
                rows.push(class_row(
                    index.oid,
                    &index.name,
                    schema_oid(&def.schema),
                    "i",
                    BTREE_AM,
                    index.columns.len(),
                    false,
                ));
            }
        }
        for def in snapshot.catalog.sequences.values() {
            rows.push(class_row(
                table_oid(def.id),
                &def.name,
                schema_oid(&def.schema),
                "S",
                0,
                3,
                false,
            ));
        }
        for def in snapshot.catalog.projections.values() {
            rows.push(class_row(
                table_oid(def.id),
                &def.name,
                schema_oid(&def.schema),
                "m",
                HEAP_AM,
                def.columns.len(),
                false,
            ));
        }
        for def in snapshot.catalog.views.values() {
            rows.push(class_row(
                table_oid(def.id),
                &def.name,
                schema_oid(&def.schema),
                "v",
                0,
                def.columns.len(),
                false,
            ));
        }
        // A source is PostgreSQL's nearest kind of relation: a foreign
        // table (rows from outside), which `\d` lists as such. A shared
        // source is not a relation (its tables are).
        for def in snapshot.catalog.sources.values().filter(|d| !d.is_shared()) {
            rows.push(class_row(
                table_oid(def.id),
                &def.name,
                schema_oid(&def.schema),
                "f",
                0,
                def.columns.len(),
                false,
            ));
        }
        // The system catalogs clients name by regclass
        // ('pg_catalog.pg_class'::regclass in SQLAlchemy's comment
        // reflection), with PostgreSQL's OIDs.
        for (oid, name) in SYSTEM_RELATIONS {
            rows.push(class_row(*oid, name, PG_CATALOG_OID, "r", HEAP_AM, 0, true));
        }
        for (i, name) in self.view.system.table_names_sorted().iter().enumerate() {
            let natts = self
                .view
                .system
                .table_schema(name)
                .map_or(0, |s| s.fields().len());
            rows.push(class_row(
                system_table_oid(i),
                name,
                WEIR_CATALOG_OID,
                "v",
                0,
                natts,
                false,
            ));
        }
        rows
    }

    fn pg_attribute(&self) -> Vec<Row> {
        let snapshot = self.view.snapshot();
        let mut rows = Vec::new();
        for def in snapshot.catalog.tables.values() {
            let columns = columns_of(def);
            attribute_rows(&mut rows, table_oid(def.id), columns.iter());
            for index in indexes_of(def) {
                let keys = index
                    .columns
                    .iter()
                    .filter_map(|k| columns.iter().find(|c| &c.name == k));
                attribute_rows(&mut rows, index.oid, keys);
            }
        }
        for def in snapshot.catalog.projections.values() {
            let columns = columns_without_defaults(&def.columns);
            attribute_rows(&mut rows, table_oid(def.id), columns.iter());
        }
        for def in snapshot.catalog.views.values() {
            let columns = columns_without_defaults(&def.columns);
            attribute_rows(&mut rows, table_oid(def.id), columns.iter());
        }
        for def in snapshot.catalog.sources.values() {
            let columns = columns_without_defaults(&def.columns);
            attribute_rows(&mut rows, table_oid(def.id), columns.iter());
        }
        for (i, name) in self.view.system.table_names_sorted().iter().enumerate() {
            if let Some(schema) = self.view.system.table_schema(name) {
                let columns = columns_of_schema(&schema);
                attribute_rows(&mut rows, system_table_oid(i), columns.iter());
            }
        }
        rows
    }

    fn pg_attrdef(&self) -> Vec<Row> {
        let snapshot = self.view.snapshot();
        let mut rows = Vec::new();
        for def in snapshot.catalog.tables.values() {
            for (i, c) in columns_of(def).iter().enumerate() {
                if let Some(d) = c.shown_default() {
                    let attnum = i as i64 + 1;
                    rows.push(vec![
                        ("oid", int(attrdef_oid(def.id, attnum))),
                        ("adrelid", int(table_oid(def.id))),
                        ("adnum", int(attnum)),
                        ("adbin", text(d)),
                    ]);
                }
            }
        }
        rows
    }

    fn pg_sequence(&self) -> Vec<Row> {
        let snapshot = self.view.snapshot();
        snapshot
            .catalog
            .sequences
            .values()
            .map(|s| {
                vec![
                    ("seqrelid", int(table_oid(s.id))),
                    ("seqtypid", int(i64::from(s.data_type.pg_oid()))),
                    ("seqstart", int(s.start)),
                    ("seqincrement", int(s.increment)),
                    ("seqmax", int(s.max)),
                    ("seqmin", int(s.min)),
                    ("seqcache", int(s.cache)),
                    ("seqcycle", boolean(s.cycle)),
                ]
            })
            .collect()
    }

    fn pg_index(&self) -> Vec<Row> {
        let snapshot = self.view.snapshot();
        let mut rows = Vec::new();
        for (def, index) in all_indexes(&snapshot.catalog) {
            let keys = attnums(def, &index.columns);
            let n = keys.len() as i64;
            let collations: Vec<i32> = keys
                .iter()
                .map(|k| {
                    let t = &def.columns[*k as usize - 1].sql_type;
                    if is_collatable(t) {
                        DEFAULT_COLLATION as i32
                    } else {
                        0
                    }
                })
                .collect();
            rows.push(vec![
                ("indexrelid", int(index.oid)),
                ("indrelid", int(table_oid(def.id))),
                ("indnatts", int(n)),
                ("indnkeyatts", int(n)),
                ("indisunique", boolean(index.unique)),
                ("indisprimary", boolean(index.primary)),
                ("indimmediate", boolean(true)),
                ("indisvalid", boolean(true)),
                ("indisready", boolean(true)),
                ("indislive", boolean(true)),
                ("indkey", int2_list(&keys)),
                ("indcollation", oid_list(&collations)),
                ("indclass", oid_list(&vec![0; keys.len()])),
                // int2vector's text form: SQLAlchemy's psycopg dialect
                // splits it on spaces (it unnests only indkey).
                ("indoption", text(vec!["0"; keys.len()].join(" "))),
                ("indexprs", null()),
                ("indpred", null()),
            ]);
        }
        rows
    }

    fn pg_constraint(&self) -> Vec<Row> {
        let snapshot = self.view.snapshot();
        let catalog = &snapshot.catalog;
        let mut rows = Vec::new();
        for (def, c) in all_constraints(catalog) {
            let (parent, confkey, upd, del, matchtype) = match &c.kind {
                ConstraintKind::ForeignKey(f) => {
                    let keys = catalog
                        .tables
                        .get(&f.parent)
                        .map(|p| attnums(p, &f.parent_columns))
                        .unwrap_or_default();
                    (
                        table_oid(f.parent),
                        int2_list(&keys),
                        f.on_update.code(),
                        f.on_delete.code(),
                        "s",
                    )
                }
                _ => (0, null(), " ", " ", " "),
            };
            let conkey = match &c.kind {
                ConstraintKind::Check(expr) => attnums(def, &check_columns(def, expr)),
                _ => attnums(def, &c.columns),
            };
            rows.push(vec![
                ("oid", int(c.oid)),
                ("conname", text(c.name.clone())),
                ("connamespace", int(schema_oid(&def.schema))),
                ("contype", text(c.contype())),
                ("convalidated", boolean(true)),
                ("conrelid", int(table_oid(def.id))),
                ("conindid", int(c.index_oid.unwrap_or(0))),
                ("confrelid", int(parent)),
                ("confupdtype", text(upd)),
                ("confdeltype", text(del)),
                ("confmatchtype", text(matchtype)),
                ("conislocal", boolean(true)),
                ("connoinherit", boolean(true)),
                ("conkey", int2_list(&conkey)),
                ("confkey", confkey),
            ]);
        }
        rows
    }

    /// `pg_indexes`: one row per index, with its definition.
    fn pg_indexes(&self) -> Vec<Row> {
        let snapshot = self.view.snapshot();
        all_indexes(&snapshot.catalog)
            .map(|(def, index)| {
                vec![
                    ("schemaname", text(def.schema.clone())),
                    ("tablename", text(def.name.clone())),
                    ("indexname", text(index.name.clone())),
                    ("tablespace", null()),
                    ("indexdef", text(index_definition(def, &index))),
                ]
            })
            .collect()
    }

    /// The session's variables, as `SHOW ALL` lists them.
    fn pg_settings(&self) -> Vec<Row> {
        let Some(vars) = self.view.vars() else {
            return Vec::new();
        };
        let values = vars.read();
        values
            .iter()
            .map(|(name, value)| {
                vec![
                    ("name", text(name.clone())),
                    ("setting", text(value.clone())),
                    ("context", text("user")),
                    ("vartype", text("string")),
                    ("source", text("session")),
                    ("reset_val", text(value.clone())),
                    ("pending_restart", boolean(false)),
                ]
            })
            .collect()
    }

    fn computed(&self, name: &str) -> DfResult<Arc<dyn TableProvider>> {
        let (schema, rows, system) = match name {
            "pg_settings" => (
                self.crate_schema(name)?.as_ref().clone(),
                self.pg_settings(),
                None,
            ),
            "pg_namespace" => (
                self.crate_schema(name)?.as_ref().clone(),
                self.pg_namespace()?,
                None,
            ),
            "pg_class" => (
                with_text_arrays_before(
                    self.crate_schema(name)?.as_ref(),
                    &["relacl", "reloptions"],
                    "relpartbound",
                ),
                self.pg_class(),
                None,
            ),
            // A column's options, psql's `\d` of a foreign table reads.
            "pg_attribute" => (
                pg_foreign::with_text_lists(self.crate_schema(name)?.as_ref(), |c| {
                    c == "attfdwoptions"
                }),
                self.pg_attribute(),
                None,
            ),
            "pg_attrdef" => (
                self.pg_static.pg_attrdef.schema().as_ref().clone(),
                self.pg_attrdef(),
                None,
            ),
            "pg_sequence" => (
                self.pg_static.pg_sequence.schema().as_ref().clone(),
                self.pg_sequence(),
                None,
            ),
            name if pg_foreign::TABLES.contains(&name) => (
                pg_foreign::with_text_lists(
                    self.crate_schema(name)?.as_ref(),
                    pg_foreign::is_list_column,
                ),
                pg_foreign::rows(
                    name,
                    self.view
                        .snapshot()
                        .catalog
                        .sources
                        .values()
                        .filter(|d| !d.is_shared())
                        .map(|d| d.as_ref()),
                ),
                None,
            ),
            "pg_description" => {
                let t = &self.pg_static.pg_description;
                let rows = self
                    .view
                    .snapshot()
                    .catalog
                    .descriptions()
                    .into_iter()
                    .map(|(oid, subid, text_)| {
                        vec![
                            ("objoid", int(oid)),
                            ("classoid", int(PG_CLASS_OID)),
                            ("objsubid", int(subid)),
                            ("description", text(text_.clone())),
                        ]
                    })
                    .collect();
                (t.schema().as_ref().clone(), rows, Some(t.data().to_vec()))
            }
            "pg_indexes" => (
                Schema::new(
                    [
                        "schemaname",
                        "tablename",
                        "indexname",
                        "tablespace",
                        "indexdef",
                    ]
                    .map(|n| Field::new(n, DataType::Utf8, true))
                    .to_vec(),
                ),
                self.pg_indexes(),
                None,
            ),
            "pg_index" => {
                let t = &self.pg_static.pg_index;
                let schema =
                    with_vector_columns(&t.schema(), &["indkey"], &["indclass", "indcollation"]);
                (schema, self.pg_index(), Some(t.data().to_vec()))
            }
            _ => {
                let t = &self.pg_static.pg_constraint;
                let schema = with_vector_columns(&t.schema(), &["conkey", "confkey"], &[]);
                (schema, self.pg_constraint(), Some(t.data().to_vec()))
            }
        };
        let mut batches = vec![batch(&schema, &rows)?];
        for b in system.unwrap_or_default() {
            batches.push(conform(&b, &schema)?);
        }
        let out = batches[0].schema();
        Ok(Arc::new(MemTable::try_new(out, vec![batches])?))
    }
}

fn class_row(
    oid: i64,
    name: &str,
    namespace: i64,
    kind: &'static str,
    am: i64,
    natts: usize,
    has_index: bool,
) -> Row {
    vec![
        ("oid", int(oid)),
        ("relname", text(name)),
        ("relnamespace", int(namespace)),
        ("relowner", int(SUPERUSER_OID)),
        ("relam", int(am)),
        ("relfilenode", int(if kind == "v" { 0 } else { oid })),
        ("reltuples", ScalarValue::Float64(Some(-1.0))),
        ("relhasindex", boolean(has_index)),
        ("relpersistence", text("p")),
        ("relkind", text(kind)),
        ("relnatts", int(natts as i64)),
        ("relispopulated", boolean(true)),
        ("relreplident", text(if kind == "r" { "d" } else { "n" })),
        ("relrewrite", int(0)),
        ("relpartbound", null()),
    ]
}

fn attribute_rows<'a>(rows: &mut Vec<Row>, relid: i64, columns: impl Iterator<Item = &'a Column>) {
    for (i, c) in columns.enumerate() {
        let (len, byval, align, storage) = storage(&c.sql_type);
        rows.push(vec![
            ("attrelid", int(relid)),
            ("attname", text(c.name.clone())),
            ("atttypid", int(i64::from(c.sql_type.pg_oid()))),
            ("attstattarget", int(-1)),
            ("attlen", int(len)),
            ("attnum", int(i as i64 + 1)),
            (
                "attndims",
                int(i64::from(matches!(c.sql_type, SqlType::Array(_)))),
            ),
            ("attcacheoff", int(-1)),
            ("atttypmod", int(typmod(&c.sql_type))),
            ("attbyval", boolean(byval)),
            ("attalign", text(align)),
            ("attstorage", text(storage)),
            ("attcompression", text("")),
            ("attnotnull", boolean(!c.nullable)),
            ("atthasdef", boolean(c.shown_default().is_some())),
            (
                "attidentity",
                text(c.identity.map(String::from).unwrap_or_default()),
            ),
            ("attislocal", boolean(true)),
            (
                "attcollation",
                int(if is_collatable(&c.sql_type) {
                    DEFAULT_COLLATION
                } else {
                    0
                }),
            ),
        ]);
    }
}

#[async_trait]
impl SchemaProvider for PgCatalog {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        // Not among the crate's tables: served here only.
        names.push(PG_INDEXES.into());
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let name = name.to_ascii_lowercase();
        if COMPUTED.contains(&name.as_str()) {
            return Ok(Some(self.computed(&name)?));
        }
        self.inner.table(&name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case(PG_INDEXES) || self.inner.table_exist(name)
    }
}

const PG_INDEXES: &str = "pg_indexes";

/// `pg_class`'s own OID: the `classoid` of a relation's description.
const PG_CLASS_OID: i64 = 1259;

/// System catalogs listed in `pg_class` under their PostgreSQL OIDs.
const SYSTEM_RELATIONS: &[(i64, &str)] = &[
    (1247, "pg_type"),
    (1249, "pg_attribute"),
    (1255, "pg_proc"),
    (PG_CLASS_OID, "pg_class"),
    (1262, "pg_database"),
    (2224, "pg_sequence"),
    (2601, "pg_am"),
    (2604, "pg_attrdef"),
    (2606, "pg_constraint"),
    (2609, "pg_description"),
    (2610, "pg_index"),
    (2615, "pg_namespace"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typmods_follow_postgresql() {
        assert_eq!(typmod(&SqlType::Varchar(Some(4))), 8);
        assert_eq!(typmod(&SqlType::Numeric(Some((10, 2)))), 655366);
        assert_eq!(typmod(&SqlType::Numeric(None)), -1);
        assert_eq!(typmod(&SqlType::Text), -1);
    }

    #[test]
    fn oids_are_stable_and_distinct() {
        assert_eq!(schema_oid("public"), 2200);
        assert_eq!(schema_oid("sales"), schema_oid("sales"));
        assert_ne!(schema_oid("sales"), schema_oid("sale"));
        assert!(schema_oid("sales") > i64::from(u16::MAX));
        assert!(schema_oid("sales") <= i64::from(i32::MAX));
        let id = ObjectId(3);
        assert_eq!(table_oid(id), 16396);
        assert_ne!(pkey_index_oid(id), table_oid(ObjectId(4)));
        assert_ne!(pkey_constraint_oid(id), table_oid(ObjectId(4)));
    }
}

/// Catalog columns of an object whose columns have no defaults
/// (projections, sources).
pub(super) fn columns_without_defaults(columns: &[crate::catalog::ColumnDef]) -> Vec<Column> {
    columns
        .iter()
        .map(|c| Column {
            name: c.name.clone(),
            sql_type: c.sql_type.clone(),
            nullable: c.nullable,
            default: None,
            identity: None,
        })
        .collect()
}
