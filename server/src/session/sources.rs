//! CREATE SOURCE of each kind, and what a source that covers several
//! upstream tables changes in DROP.
//!
//! - `CREATE SOURCE s [(columns)] WITH (connector = ...)`: a source whose
//!   rows are its relation ([`SourceKind::Rows`]), or, when its connector
//!   says the options cover several tables (a postgres-cdc source without a
//!   `table`), a shared source ([`SourceKind::Shared`]): no columns, not
//!   readable, holding the upstream position (slot, publication).
//! - `CREATE SOURCE t [(columns)] FROM s TABLE 'schema.table'`: one table of
//!   shared source `s` ([`SourceKind::Table`]), an ordinary relation, checked
//!   upstream with `s`'s options. One reader (the parent's) delivers every
//!   table's rows: [`crate::planning::PlanContext::source_to_read`].
//! - DROP of a table stops what reads it and restarts the parent's reader
//!   without it (after the commit); DROP of a shared source needs CASCADE
//!   when it has tables, then drops them first and lets go of the slot.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use weir_connectors::ConnectorKind;
use weir_pgsem::SqlType;
use weir_planner::streaming_ddl::{DeclaredColumn, StreamingKind};

use super::projection::{column_def_of, drop_readers};
use super::streaming::{ParsedOptions, column_of, split_connector, undefined};
use super::{Session, StatementResult, command};
use crate::catalog::model::ColumnDef;
use crate::catalog::streaming::{SourceDef, SourceKind, WatermarkDef};
use crate::catalog::{Catalog, CatalogChange};
use crate::db::TxnWrites;
use crate::error::ServerError;

/// What a CREATE SOURCE reads from: its own connector's options, or a
/// table of a shared source.
pub(super) enum SourceInput {
    With(ParsedOptions),
    /// The shared source's name parts and the upstream table as written.
    Table(Vec<String>, String),
}

impl Session {
    pub(super) async fn create_source(
        &mut self,
        if_not_exists: bool,
        name: &[String],
        declared: &[DeclaredColumn],
        watermark: Option<(String, String)>,
        input: SourceInput,
    ) -> Result<StatementResult, ServerError> {
        let (schema, name) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if catalog.relation_exists(&schema, &name) {
            if if_not_exists && catalog.source(&schema, &name).is_some() {
                return Ok(command("CREATE SOURCE"));
            }
            return Err(ServerError::DuplicateTable(name));
        }
        let declared_columns = declared
            .iter()
            .map(column_of)
            .collect::<Result<Vec<_>, _>>()?;
        let mut seen = std::collections::HashSet::new();
        for c in &declared_columns {
            if !seen.insert(c.name.clone()) {
                return Err(ServerError::DuplicateColumn(c.name.clone()));
            }
        }
        let declared_schema: Option<SchemaRef> = (!declared_columns.is_empty()).then(|| {
            Arc::new(Schema::new(
                declared_columns
                    .iter()
                    .map(|c| c.sql_type.field(&c.name, c.nullable))
                    .collect::<Vec<_>>(),
            ))
        });
        let (connector_name, stored, secrets, kind, produced) = match input {
            SourceInput::With((options, secrets)) => {
                let (connector_name, given) = split_connector(options, "CREATE SOURCE")?;
                let connector = weir_connectors::connector(&connector_name, ConnectorKind::Source)?;
                let super::secrets::ConnectorOptions {
                    stored,
                    secrets,
                    resolved: options,
                } = self.connector_options(connector, &connector_name, given, &secrets)?;
                if connector.covers_tables(&options) {
                    if !declared_columns.is_empty() || watermark.is_some() {
                        return Err(ServerError::Sqlstate {
                            code: "42P16",
                            message: format!(
                                "source {name} covers several upstream tables (it has no table option), so it has no columns of its own: declare them on each table, CREATE SOURCE t (...) FROM {name} TABLE 'schema.table'"
                            ),
                        });
                    }
                    // The connector checks what the shared reader needs
                    // (server, user, slot); each table is checked at its
                    // own CREATE.
                    connector.describe_source(None, &options).await?;
                    let none: SchemaRef = Arc::new(Schema::empty());
                    (connector_name, stored, secrets, SourceKind::Shared, none)
                } else {
                    let produced = connector
                        .describe_source(declared_schema.as_ref(), &options)
                        .await?;
                    (connector_name, stored, secrets, SourceKind::Rows, produced)
                }
            }
            SourceInput::Table(parent, upstream) => {
                let (parent_schema, parent_name) = self.split_parts(&parent)?;
                let parent = catalog
                    .source(&parent_schema, &parent_name)
                    .cloned()
                    .ok_or_else(|| undefined(StreamingKind::Source, &parent_name))?;
                catalog.check_source_table(parent.id, &upstream)?;
                let connector =
                    weir_connectors::connector(&parent.connector, ConnectorKind::Source)?;
                let options = crate::secrets::resolve(
                    &catalog,
                    self.db.secret_key(),
                    &parent.connector,
                    &parent.options,
                    &parent.secrets,
                )?;
                let produced = connector
                    .describe_source_table(declared_schema.as_ref(), &options, &upstream)
                    .await?;
                let kind = SourceKind::Table {
                    source: parent.id,
                    upstream,
                };
                // The parent's options and secrets apply.
                let (options, secrets) = (BTreeMap::new(), BTreeMap::new());
                (parent.connector.clone(), options, secrets, kind, produced)
            }
        };
        let columns = if declared_columns.is_empty() {
            let what = format!("column produced by connector {connector_name}");
            produced
                .fields()
                .iter()
                .map(|f| column_def_of(f, &what))
                .collect::<Result<Vec<_>, ServerError>>()?
        } else {
            declared_columns
        };
        let watermark = watermark_of(&columns, watermark)?;
        let def = SourceDef {
            id: (*catalog).clone().allocate_id(),
            schema,
            name,
            columns,
            watermark,
            connector: connector_name,
            options: stored,
            secrets,
            gaps_accepted: 0,
            generation: 0,
            paused: false,
            kind,
        };
        // The expression plans, keeps the column's order, and the
        // idle timeout reads.
        self.plan_context().watermark_spec(&def)?;
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateSource(def)],
            tables: vec![],
        })?;
        Ok(command("CREATE SOURCE"))
    }
}

/// `WATERMARK FOR column AS expression`, checked against the columns.
pub(super) fn watermark_of(
    columns: &[ColumnDef],
    watermark: Option<(String, String)>,
) -> Result<Option<WatermarkDef>, ServerError> {
    let Some((column, expr)) = watermark else {
        return Ok(None);
    };
    let c = columns
        .iter()
        .find(|c| c.name == column)
        .ok_or_else(|| ServerError::UndefinedColumn(column.clone()))?;
    if !matches!(c.sql_type, SqlType::Timestamp | SqlType::Timestamptz) {
        return Err(ServerError::Sqlstate {
            code: "42804",
            message: format!(
                "WATERMARK FOR {column}: the column is {}, a watermark needs a timestamp column",
                c.sql_type.display_name()
            ),
        });
    }
    Ok(Some(WatermarkDef { column, expr }))
}

/// The DROP changes for source `def`, appended to `changes` (each once):
/// what reads it (with CASCADE), and for a shared source its tables and
/// what reads them first. A shared source with tables, or a source that is
/// read, is refused without CASCADE (2BP01, naming them). Whether the
/// upstream is let go of afterwards is the caller's: not for a table.
pub(super) fn drop_source(
    catalog: &Catalog,
    def: &SourceDef,
    cascade: bool,
    changes: &mut Vec<CatalogChange>,
) -> Result<(), ServerError> {
    let what = format!("source {}", def.qualified_name());
    // Tables dropped by the same statement (`DROP SOURCE orders, shop`)
    // are gone already.
    let tables: Vec<_> = catalog
        .tables_of_source(def.id)
        .into_iter()
        .filter(|t| !changes.contains(&CatalogChange::DropSource { id: t.id }))
        .collect();
    if !tables.is_empty() && !cascade {
        return Err(ServerError::DependentObjects {
            object: what,
            dependents: tables
                .iter()
                .map(|t| format!("source {}", t.qualified_name()))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    for table in tables {
        let table_what = format!("source {}", table.qualified_name());
        drop_readers(catalog, table.id, &table_what, true, changes)?;
        push_once(changes, CatalogChange::DropSource { id: table.id });
    }
    drop_readers(catalog, def.id, &what, cascade, changes)?;
    push_once(changes, CatalogChange::DropSource { id: def.id });
    Ok(())
}

fn push_once(changes: &mut Vec<CatalogChange>, change: CatalogChange) {
    if !changes.contains(&change) {
        changes.push(change);
    }
}

/// The shared sources whose set of tables `ddl` changed (a table created
/// or dropped) and that still exist in `catalog`: their readers restart
/// with the tables there are now. `before` is the catalog the changes
/// were made against (a dropped table's parent is known there).
pub(super) fn shared_sources_changed(
    ddl: &[CatalogChange],
    before: &Catalog,
    catalog: &Catalog,
) -> Vec<Arc<SourceDef>> {
    let mut parents = Vec::new();
    for change in ddl {
        let parent = match change {
            CatalogChange::CreateSource(def) => def.parent(),
            CatalogChange::DropSource { id } => before.sources.get(id).and_then(|d| d.parent()),
            _ => None,
        };
        if let Some(parent) = parent.and_then(|p| catalog.sources.get(&p))
            && !parents.iter().any(|p: &Arc<SourceDef>| p.id == parent.id)
        {
            parents.push(parent.clone());
        }
    }
    parents
}
