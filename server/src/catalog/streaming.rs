//! Catalog entries of streaming objects: sources (rows from a connector),
//! sinks (a query's changes pushed to a connector), destinations (sinks
//! that keep a keyed copy of a projection, [`DestinationDef`]), and the
//! secrets and connections they name.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_common::ObjectId;

use super::model::{ColumnDef, DEFAULT_SCHEMA, quote_ident};

/// `WATERMARK FOR column AS expression`, stored for event time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatermarkDef {
    pub column: String,
    /// The expression as sqlparser prints it.
    pub expr: String,
}

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

    /// `CREATE SOURCE` text that recreates this source exactly.
    pub fn create_statement(&self) -> String {
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
        format!(
            "CREATE SOURCE {} ({}) WITH ({})",
            quoted_name(&self.schema, &self.name),
            parts.join(", "),
            with_options(Some(&self.connector), &self.options, &self.secrets)
        )
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

fn qualified(schema: &str, name: &str) -> String {
    if schema == DEFAULT_SCHEMA {
        name.to_string()
    } else {
        format!("{schema}.{name}")
    }
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
