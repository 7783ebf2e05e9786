//! `information_schema` as PostgreSQL presents it.
//!
//! DataFusion's own information_schema speaks Arrow (`data_type` is `Int64`,
//! positions start at 0) and knows nothing of declared lengths, so Weir
//! serves the views clients read (`tables`, `columns`, `schemata`,
//! `table_constraints`, `key_column_usage`, `views`) from the catalog model,
//! with PostgreSQL's columns and spellings.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;
use weir_pgsem::SqlType;

use super::model::DATABASE_NAME;
use super::pg::{Column, PgCatalog, columns_of, columns_of_schema};
use super::pg_constraints::{ConstraintKind, all_constraints};
use super::provider::{PG_CATALOG, SessionView, WEIR_CATALOG};
use super::rows::{Row, batch, int, null, text};

const TABLES: &[&str] = &[
    "columns",
    "key_column_usage",
    "referential_constraints",
    "schemata",
    "table_constraints",
    "tables",
    "views",
];

#[derive(Debug)]
pub struct InformationSchema {
    view: Arc<SessionView>,
}

impl InformationSchema {
    pub fn new(view: Arc<SessionView>) -> Self {
        Self { view }
    }

    /// Every relation: (schema, name, is a view, columns).
    fn relations(&self) -> Vec<(String, String, bool, Vec<Column>)> {
        let snapshot = self.view.snapshot();
        let mut out: Vec<_> = snapshot
            .catalog
            .tables
            .values()
            .map(|d| (d.schema.clone(), d.name.clone(), false, columns_of(d)))
            .collect();
        for v in snapshot.catalog.views.values() {
            out.push((
                v.schema.clone(),
                v.name.clone(),
                true,
                super::pg::columns_without_defaults(&v.columns),
            ));
        }
        for name in self.view.system.table_names_sorted() {
            if let Some(schema) = self.view.system.table_schema(&name) {
                out.push((
                    WEIR_CATALOG.to_string(),
                    name,
                    true,
                    columns_of_schema(&schema),
                ));
            }
        }
        out
    }

    fn build(&self, name: &str) -> DfResult<Option<(Schema, Vec<Row>)>> {
        let identifier = |n: &str| Field::new(n, DataType::Utf8, true);
        let number = |n: &str| Field::new(n, DataType::Int32, true);
        Ok(Some(match name {
            "tables" => (
                Schema::new(
                    [
                        "table_catalog",
                        "table_schema",
                        "table_name",
                        "table_type",
                        "self_referencing_column_name",
                        "reference_generation",
                        "user_defined_type_catalog",
                        "user_defined_type_schema",
                        "user_defined_type_name",
                        "is_insertable_into",
                        "is_typed",
                        "commit_action",
                    ]
                    .map(identifier)
                    .to_vec(),
                ),
                self.relations()
                    .into_iter()
                    .map(|(schema, name, is_view, _)| {
                        vec![
                            ("table_catalog", text(DATABASE_NAME)),
                            ("table_schema", text(schema)),
                            ("table_name", text(name)),
                            (
                                "table_type",
                                text(if is_view { "VIEW" } else { "BASE TABLE" }),
                            ),
                            (
                                "is_insertable_into",
                                text(if is_view { "NO" } else { "YES" }),
                            ),
                            ("is_typed", text("NO")),
                        ]
                    })
                    .collect(),
            ),
            "columns" => (columns_schema(), self.column_rows()),
            "schemata" => (
                Schema::new(
                    [
                        "catalog_name",
                        "schema_name",
                        "schema_owner",
                        "default_character_set_catalog",
                        "default_character_set_schema",
                        "default_character_set_name",
                        "sql_path",
                    ]
                    .map(identifier)
                    .to_vec(),
                ),
                PgCatalog::namespaces(&self.view)
                    .into_iter()
                    .map(|n| {
                        vec![
                            ("catalog_name", text(DATABASE_NAME)),
                            ("schema_name", text(n)),
                            ("schema_owner", text(super::model::SUPERUSER)),
                        ]
                    })
                    .collect(),
            ),
            "table_constraints" => (
                Schema::new(
                    [
                        "constraint_catalog",
                        "constraint_schema",
                        "constraint_name",
                        "table_catalog",
                        "table_schema",
                        "table_name",
                        "constraint_type",
                        "is_deferrable",
                        "initially_deferred",
                        "enforced",
                        "nulls_distinct",
                    ]
                    .map(identifier)
                    .to_vec(),
                ),
                all_constraints(&self.view.snapshot().catalog)
                    .map(|(d, c)| {
                        vec![
                            ("constraint_catalog", text(DATABASE_NAME)),
                            ("constraint_schema", text(d.schema.clone())),
                            ("constraint_name", text(c.name.clone())),
                            ("table_catalog", text(DATABASE_NAME)),
                            ("table_schema", text(d.schema.clone())),
                            ("table_name", text(d.name.clone())),
                            ("constraint_type", text(c.sql_type())),
                            ("is_deferrable", text("NO")),
                            ("initially_deferred", text("NO")),
                            ("enforced", text("YES")),
                            ("nulls_distinct", null()),
                        ]
                    })
                    .collect(),
            ),
            "key_column_usage" => (
                Schema::new(vec![
                    identifier("constraint_catalog"),
                    identifier("constraint_schema"),
                    identifier("constraint_name"),
                    identifier("table_catalog"),
                    identifier("table_schema"),
                    identifier("table_name"),
                    identifier("column_name"),
                    number("ordinal_position"),
                    number("position_in_unique_constraint"),
                ]),
                all_constraints(&self.view.snapshot().catalog)
                    .filter(|(_, c)| !matches!(c.kind, ConstraintKind::Check(_)))
                    .flat_map(|(d, c)| {
                        let columns = c.columns.clone();
                        columns.into_iter().enumerate().map(move |(i, k)| {
                            // A foreign key's column: where its referenced
                            // column sits in the referenced unique key.
                            let in_unique = match &c.kind {
                                ConstraintKind::ForeignKey(_) => int(i as i64 + 1),
                                _ => null(),
                            };
                            vec![
                                ("constraint_catalog", text(DATABASE_NAME)),
                                ("constraint_schema", text(d.schema.clone())),
                                ("constraint_name", text(c.name.clone())),
                                ("table_catalog", text(DATABASE_NAME)),
                                ("table_schema", text(d.schema.clone())),
                                ("table_name", text(d.name.clone())),
                                ("column_name", text(k)),
                                ("ordinal_position", int(i as i64 + 1)),
                                ("position_in_unique_constraint", in_unique),
                            ]
                        })
                    })
                    .collect(),
            ),
            "referential_constraints" => {
                let snapshot = self.view.snapshot();
                let catalog = &snapshot.catalog;
                (
                    Schema::new(
                        [
                            "constraint_catalog",
                            "constraint_schema",
                            "constraint_name",
                            "unique_constraint_catalog",
                            "unique_constraint_schema",
                            "unique_constraint_name",
                            "match_option",
                            "update_rule",
                            "delete_rule",
                        ]
                        .map(identifier)
                        .to_vec(),
                    ),
                    catalog
                        .tables
                        .values()
                        .flat_map(|d| d.foreign_keys.iter().map(move |f| (d, f)))
                        .map(|(d, f)| {
                            let parent = catalog.tables.get(&f.parent);
                            // The referenced table's key or unique
                            // constraint over the referenced columns.
                            let unique = parent.and_then(|p| {
                                if p.primary_key == f.parent_columns {
                                    Some(p.pkey_constraint_name())
                                } else {
                                    p.indexes
                                        .iter()
                                        .find(|i| i.unique && i.columns == f.parent_columns)
                                        .map(|i| i.name.clone())
                                }
                            });
                            vec![
                                ("constraint_catalog", text(DATABASE_NAME)),
                                ("constraint_schema", text(d.schema.clone())),
                                ("constraint_name", text(f.name.clone())),
                                ("unique_constraint_catalog", text(DATABASE_NAME)),
                                (
                                    "unique_constraint_schema",
                                    parent.map_or(null(), |p| text(p.schema.clone())),
                                ),
                                ("unique_constraint_name", unique.map_or(null(), text)),
                                ("match_option", text("NONE")),
                                ("update_rule", text(f.on_update.sql())),
                                ("delete_rule", text(f.on_delete.sql())),
                            ]
                        })
                        .collect(),
                )
            }
            "views" => (
                Schema::new(
                    [
                        "table_catalog",
                        "table_schema",
                        "table_name",
                        "view_definition",
                        "check_option",
                        "is_updatable",
                        "is_insertable_into",
                        "is_trigger_updatable",
                        "is_trigger_deletable",
                        "is_trigger_insertable_into",
                    ]
                    .map(identifier)
                    .to_vec(),
                ),
                // weir_catalog's tables are computed, not defined by SQL:
                // only CREATE VIEW's views are listed.
                self.view
                    .snapshot()
                    .catalog
                    .views
                    .values()
                    .map(|v| {
                        vec![
                            ("table_catalog", text(DATABASE_NAME)),
                            ("table_schema", text(v.schema.clone())),
                            ("table_name", text(v.name.clone())),
                            ("view_definition", text(format!("{};", v.query))),
                            ("check_option", text("NONE")),
                            ("is_updatable", text("NO")),
                            ("is_insertable_into", text("NO")),
                            ("is_trigger_updatable", text("NO")),
                            ("is_trigger_deletable", text("NO")),
                            ("is_trigger_insertable_into", text("NO")),
                        ]
                    })
                    .collect(),
            ),
            _ => return Ok(None),
        }))
    }

    fn column_rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (schema, table, is_view, columns) in self.relations() {
            for (i, c) in columns.iter().enumerate() {
                let mut row = vec![
                    ("table_catalog", text(DATABASE_NAME)),
                    ("table_schema", text(schema.clone())),
                    ("table_name", text(table.clone())),
                    ("column_name", text(c.name.clone())),
                    ("ordinal_position", int(i as i64 + 1)),
                    ("column_default", c.shown_default().map_or(null(), text)),
                    ("is_nullable", text(if c.nullable { "YES" } else { "NO" })),
                    ("data_type", text(data_type(&c.sql_type))),
                    ("udt_catalog", text(DATABASE_NAME)),
                    ("udt_schema", text(PG_CATALOG)),
                    ("udt_name", text(c.sql_type.pg_type_name())),
                    ("dtd_identifier", text((i + 1).to_string())),
                    ("is_self_referencing", text("NO")),
                    (
                        "is_identity",
                        text(if c.identity.is_some() { "YES" } else { "NO" }),
                    ),
                    (
                        "identity_generation",
                        match c.identity {
                            Some('a') => text("ALWAYS"),
                            Some(_) => text("BY DEFAULT"),
                            None => null(),
                        },
                    ),
                    ("identity_cycle", text("NO")),
                    ("is_generated", text("NEVER")),
                    ("is_updatable", text(if is_view { "NO" } else { "YES" })),
                ];
                row.extend(type_facts(&c.sql_type));
                rows.push(row);
            }
        }
        rows
    }
}

fn columns_schema() -> Schema {
    let identifier = |n: &str| Field::new(n, DataType::Utf8, true);
    let number = |n: &str| Field::new(n, DataType::Int32, true);
    let mut fields = ["table_catalog", "table_schema", "table_name", "column_name"]
        .map(identifier)
        .to_vec();
    fields.push(number("ordinal_position"));
    fields.extend(["column_default", "is_nullable", "data_type"].map(identifier));
    fields.extend(
        [
            "character_maximum_length",
            "character_octet_length",
            "numeric_precision",
            "numeric_precision_radix",
            "numeric_scale",
            "datetime_precision",
        ]
        .map(number),
    );
    fields.push(identifier("interval_type"));
    fields.push(number("interval_precision"));
    fields.extend(
        [
            "character_set_catalog",
            "character_set_schema",
            "character_set_name",
            "collation_catalog",
            "collation_schema",
            "collation_name",
            "domain_catalog",
            "domain_schema",
            "domain_name",
            "udt_catalog",
            "udt_schema",
            "udt_name",
            "scope_catalog",
            "scope_schema",
            "scope_name",
        ]
        .map(identifier),
    );
    fields.push(number("maximum_cardinality"));
    fields.extend(
        [
            "dtd_identifier",
            "is_self_referencing",
            "is_identity",
            "identity_generation",
            "identity_start",
            "identity_increment",
            "identity_maximum",
            "identity_minimum",
            "identity_cycle",
            "is_generated",
            "generation_expression",
            "is_updatable",
        ]
        .map(identifier),
    );
    Schema::new(fields)
}

/// `information_schema.columns.data_type`: the type without modifiers.
pub fn data_type(t: &SqlType) -> String {
    match t {
        SqlType::Array(_) => "ARRAY".into(),
        SqlType::Varchar(_) => SqlType::Varchar(None).display_name(),
        SqlType::Numeric(_) => SqlType::Numeric(None).display_name(),
        other => other.display_name(),
    }
}

/// Length, precision and scale columns of one type, as PostgreSQL reports them.
fn type_facts(t: &SqlType) -> Row {
    let binary = |bits: i64, scale: Option<i64>| {
        vec![
            ("numeric_precision", int(bits)),
            ("numeric_precision_radix", int(2)),
            ("numeric_scale", scale.map_or(null(), int)),
        ]
    };
    match t {
        SqlType::Int2 => binary(16, Some(0)),
        SqlType::Int4 => binary(32, Some(0)),
        SqlType::Int8 => binary(64, Some(0)),
        SqlType::Float4 => binary(24, None),
        SqlType::Float8 => binary(53, None),
        SqlType::Numeric(Some((p, s))) => vec![
            ("numeric_precision", int(i64::from(*p))),
            ("numeric_precision_radix", int(10)),
            ("numeric_scale", int(i64::from(*s))),
        ],
        SqlType::Numeric(None) => vec![("numeric_precision_radix", int(10))],
        SqlType::Varchar(Some(n)) => vec![
            ("character_maximum_length", int(*n as i64)),
            ("character_octet_length", int(*n as i64 * 4)),
        ],
        SqlType::Varchar(None) | SqlType::Text => {
            vec![("character_octet_length", int(1_073_741_824))]
        }
        SqlType::Date => vec![("datetime_precision", int(0))],
        SqlType::Time | SqlType::Timestamp | SqlType::Timestamptz | SqlType::Interval => {
            vec![("datetime_precision", int(6))]
        }
        _ => Vec::new(),
    }
}

#[async_trait]
impl SchemaProvider for InformationSchema {
    fn table_names(&self) -> Vec<String> {
        TABLES.iter().map(|s| s.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some((schema, rows)) = self.build(&name.to_ascii_lowercase())? else {
            return Ok(None);
        };
        let batch = batch(&schema, &rows)?;
        Ok(Some(Arc::new(MemTable::try_new(
            batch.schema(),
            vec![vec![batch]],
        )?)))
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.contains(&name.to_ascii_lowercase().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_types_drop_modifiers() {
        assert_eq!(data_type(&SqlType::Varchar(Some(4))), "character varying");
        assert_eq!(data_type(&SqlType::Numeric(Some((10, 2)))), "numeric");
        assert_eq!(data_type(&SqlType::Int8), "bigint");
        assert_eq!(data_type(&SqlType::Array(Box::new(SqlType::Int4))), "ARRAY");
    }
}
