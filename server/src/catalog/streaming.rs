//! Catalog entries of streaming objects: sources (rows from a connector)
//! and sinks (a query's changes pushed to a connector).

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
    /// Validated options, with the defaults fixed at CREATE filled in.
    pub options: BTreeMap<String, String>,
}

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
            with_options(&self.connector, &self.options)
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
    /// Session settings the query is planned under (as for projections).
    pub settings: BTreeMap<String, String>,
}

impl SinkDef {
    pub fn arrow_schema(&self) -> SchemaRef {
        columns_schema(&self.columns)
    }

    pub fn qualified_name(&self) -> String {
        qualified(&self.schema, &self.name)
    }

    pub fn create_statement(&self) -> String {
        let body = match &self.from {
            Some(relation) => format!("FROM {relation}"),
            None => format!("AS {}", self.query),
        };
        format!(
            "CREATE SINK {} {body} WITH ({})",
            quoted_name(&self.schema, &self.name),
            with_options(&self.connector, &self.options)
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

/// `connector = '...', key = 'value', ...` with keys in a stable order.
fn with_options(connector: &str, options: &BTreeMap<String, String>) -> String {
    let quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
    std::iter::once(format!("connector = {}", quote(connector)))
        .chain(options.iter().map(|(k, v)| {
            let key = k.split('.').map(quote_ident).collect::<Vec<_>>().join(".");
            format!("{key} = {}", quote(v))
        }))
        .collect::<Vec<_>>()
        .join(", ")
}
