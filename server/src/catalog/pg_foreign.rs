//! Sources as PostgreSQL's foreign tables: `pg_foreign_data_wrapper`,
//! `pg_foreign_server` and `pg_foreign_table`, which psql's `\d` of a
//! source reads for its "Server:" and "FDW options:" footer (and `\dew`,
//! `\des`, `\det` list).
//!
//! Every source connector is one foreign-data wrapper and one server of the
//! same name (a connector is both the code and where rows come from; Weir
//! has no separate server object). A source is a foreign table on its
//! connector's server, its `ftoptions` the options it was created with,
//! as `name=value` like PostgreSQL stores them, minus the options the
//! connector marks secret.
//!
//! OIDs: wrappers and servers are numbered by the connector's position in
//! the name-sorted registry, from [`FDW_OID_BASE`]; below the user range
//! (16384) and above `weir_catalog`'s tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ListBuilder, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::scalar::ScalarValue;
use weir_connectors::ConnectorKind;
use weir_connectors::spec::ConnectorSpec;

use super::oids::table_oid;
use super::rows::{Row, int, null, text};
use super::streaming::SourceDef;

const FDW_OID_BASE: i64 = 16200;
const SUPERUSER_OID: i64 = 10;

/// The source connectors, sorted by name: the wrappers and servers.
fn source_connectors() -> Vec<&'static ConnectorSpec> {
    let mut specs: Vec<&'static ConnectorSpec> = weir_connectors::registry()
        .into_iter()
        .map(|c| c.spec())
        .filter(|s| s.kind == ConnectorKind::Source)
        .collect();
    specs.sort_by_key(|s| s.name);
    specs
}

fn wrapper_oid(position: usize) -> i64 {
    FDW_OID_BASE + 2 * position as i64
}

fn server_oid(position: usize) -> i64 {
    wrapper_oid(position) + 1
}

/// The catalog tables this module computes.
pub const TABLES: &[&str] = &[
    "pg_foreign_data_wrapper",
    "pg_foreign_server",
    "pg_foreign_table",
];

/// Whether a column of the foreign-data tables is a list in PostgreSQL
/// (`*options`, `*acl`); the shipped schemas have them as text.
pub fn is_list_column(name: &str) -> bool {
    name.ends_with("options") || name.ends_with("acl")
}

/// `schema` with the columns `is_list` picks as `text[]`, as PostgreSQL
/// has them: psql reads options with `pg_options_to_table(options)`.
pub fn with_text_lists(schema: &Schema, is_list: impl Fn(&str) -> bool) -> Schema {
    let list = DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)));
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                let field = f.as_ref().clone();
                if is_list(f.name()) {
                    field.with_data_type(list.clone())
                } else {
                    field
                }
            })
            .collect::<Vec<_>>(),
    )
}

/// The rows of `table` (one of [`TABLES`]).
pub fn rows<'a>(table: &str, sources: impl Iterator<Item = &'a SourceDef>) -> Vec<Row> {
    let connectors = source_connectors();
    match table {
        "pg_foreign_data_wrapper" => connectors
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                vec![
                    ("oid", int(wrapper_oid(i))),
                    ("fdwname", text(spec.name)),
                    ("fdwowner", int(SUPERUSER_OID)),
                    ("fdwhandler", int(0)),
                    ("fdwvalidator", int(0)),
                    ("fdwacl", null()),
                    ("fdwoptions", null()),
                ]
            })
            .collect(),
        "pg_foreign_server" => connectors
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                vec![
                    ("oid", int(server_oid(i))),
                    ("srvname", text(spec.name)),
                    ("srvowner", int(SUPERUSER_OID)),
                    ("srvfdw", int(wrapper_oid(i))),
                    ("srvtype", null()),
                    ("srvversion", null()),
                    ("srvacl", null()),
                    ("srvoptions", null()),
                ]
            })
            .collect(),
        _ => sources
            .filter_map(|def| {
                let position = connectors.iter().position(|s| s.name == def.connector)?;
                let options = shown_options(connectors[position], &def.options);
                Some(vec![
                    ("ftrelid", int(table_oid(def.id))),
                    ("ftserver", int(server_oid(position))),
                    ("ftoptions", text_list(&options)),
                ])
            })
            .collect(),
    }
}

/// `name=value` for each option but the secret ones.
fn shown_options(spec: &ConnectorSpec, options: &BTreeMap<String, String>) -> Vec<String> {
    options
        .iter()
        .filter(|(name, _)| !spec.all_options().any(|o| o.secret && o.matches(name)))
        .map(|(name, value)| format!("{name}={value}"))
        .collect()
}

fn text_list(values: &[String]) -> ScalarValue {
    let mut builder = ListBuilder::new(StringBuilder::new());
    for v in values {
        builder.values().append_value(v);
    }
    builder.append(true);
    ScalarValue::List(Arc::new(builder.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_connectors::spec::{Capabilities, OptionSpec, OptionType};

    #[test]
    fn secret_options_are_never_listed() {
        static OPTIONS: &[OptionSpec] = &[
            OptionSpec::optional("dsn", OptionType::Text, "where"),
            OptionSpec {
                secret: true,
                ..OptionSpec::optional("password", OptionType::Text, "secret")
            },
        ];
        let spec = ConnectorSpec {
            name: "pg",
            kind: ConnectorKind::Source,
            help: "",
            options: OPTIONS,
            capabilities: Capabilities {
                read_modes: &[],
                append_only: true,
                replayable: true,
                bounded: false,
                delivery: &[],
                skips: false,
            },
        };
        let options = BTreeMap::from([
            ("dsn".to_string(), "host=a".to_string()),
            ("password".to_string(), "hunter2".to_string()),
        ]);
        assert_eq!(shown_options(&spec, &options), vec!["dsn=host=a"]);
    }

    #[test]
    fn every_source_connector_has_a_wrapper_and_a_server() {
        let wrappers = rows("pg_foreign_data_wrapper", std::iter::empty());
        let servers = rows("pg_foreign_server", std::iter::empty());
        assert_eq!(wrappers.len(), servers.len());
        let names: Vec<String> = servers
            .iter()
            .map(|r| {
                r.iter()
                    .find(|(c, _)| *c == "srvname")
                    .unwrap()
                    .1
                    .to_string()
            })
            .collect();
        assert!(names.contains(&"nexmark".to_string()), "{names:?}");
        assert!(!names.contains(&"blackhole".to_string()), "{names:?}");
    }
}
