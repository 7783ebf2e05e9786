//! `ALTER {SOURCE | SINK | VIEW | MATERIALIZED VIEW | PROJECTION} name
//! RENAME TO new` and `ALTER {TABLE | VIEW | MATERIALIZED VIEW |
//! PROJECTION | SEQUENCE} name SET SCHEMA s`. Objects are known by id
//! everywhere but in the stored query text of what reads them, so a renamed
//! or moved object must have no reader (views, projections and sinks name
//! what they read): those are refused with 2BP01 naming them, as PostgreSQL
//! would have to if it kept text.

use weir_planner::streaming_ddl::alter::{MovedKind, RenamedKind};

use super::{Session, StatementResult, command};
use crate::catalog::{Catalog, CatalogChange};
use crate::db::TxnWrites;
use crate::error::ServerError;

impl Session {
    pub(super) fn rename_relation(
        &mut self,
        kind: RenamedKind,
        if_exists: bool,
        name: &[String],
        to: String,
    ) -> Result<StatementResult, ServerError> {
        let (schema, relation) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        let (what, tag, found) = match kind {
            RenamedKind::Source => (
                "source",
                "ALTER SOURCE",
                catalog.source(&schema, &relation).map(|d| d.id),
            ),
            RenamedKind::Sink => (
                "sink",
                "ALTER SINK",
                catalog
                    .sinks
                    .values()
                    .find(|s| s.schema == schema && s.name == relation && s.destination.is_none())
                    .map(|d| d.id),
            ),
            RenamedKind::View => (
                "view",
                "ALTER VIEW",
                catalog.view(&schema, &relation).map(|d| d.id),
            ),
            RenamedKind::Projection => (
                "projection",
                "ALTER MATERIALIZED VIEW",
                catalog.projection(&schema, &relation).map(|d| d.id),
            ),
        };
        let Some(id) = found else {
            if if_exists {
                self.notice(format!("{what} \"{relation}\" does not exist, skipping"));
                return Ok(command(tag));
            }
            return Err(ServerError::Sqlstate {
                code: "42P01",
                message: format!("{what} \"{relation}\" does not exist"),
            });
        };
        refuse_if_read(&catalog, id, "rename", what, &relation)?;
        self.write(TxnWrites {
            ddl: vec![CatalogChange::Rename { id, name: to }],
            tables: vec![],
        })?;
        Ok(command(tag))
    }
}

/// 2BP01 when views, projections or sinks read object `id` by name.
fn refuse_if_read(
    catalog: &Catalog,
    id: weir_common::ObjectId,
    verb: &str,
    what: &str,
    relation: &str,
) -> Result<(), ServerError> {
    let readers = catalog.reader_names(id);
    if readers.is_empty() {
        return Ok(());
    }
    Err(ServerError::Sqlstate {
        code: "2BP01",
        message: format!(
            "cannot {verb} {what} \"{relation}\": {} {} it by name (drop {} first)",
            readers.join(", "),
            if readers.len() == 1 { "reads" } else { "read" },
            if readers.len() == 1 { "it" } else { "them" },
        ),
    })
}

impl Session {
    /// `ALTER ... SET SCHEMA`. A table takes the sequences it owns (its
    /// serial and identity columns') along, its defaults naming them in
    /// their new schema, as PostgreSQL does; an owned sequence does not
    /// move alone (0A000, as in PostgreSQL). Moving to the schema it is in
    /// does nothing.
    pub(super) fn set_schema(
        &mut self,
        kind: MovedKind,
        if_exists: bool,
        name: &[String],
        schema: String,
    ) -> Result<StatementResult, ServerError> {
        let (from, relation) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        let (what, tag, found) = match kind {
            MovedKind::Table => (
                "table",
                "ALTER TABLE",
                catalog.table(&from, &relation).map(|d| d.id),
            ),
            MovedKind::View => (
                "view",
                "ALTER VIEW",
                catalog.view(&from, &relation).map(|d| d.id),
            ),
            MovedKind::Projection => (
                "materialized view",
                "ALTER MATERIALIZED VIEW",
                catalog.projection(&from, &relation).map(|d| d.id),
            ),
            MovedKind::Sequence => (
                "sequence",
                "ALTER SEQUENCE",
                catalog.sequence(&from, &relation).map(|d| d.id),
            ),
        };
        let Some(id) = found else {
            if if_exists {
                self.notice(format!("relation \"{relation}\" does not exist, skipping"));
                return Ok(command(tag));
            }
            return Err(ServerError::Sqlstate {
                code: "42P01",
                message: format!("{what} \"{relation}\" does not exist"),
            });
        };
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if schema == from {
            return Ok(command(tag));
        }
        refuse_if_read(&catalog, id, "move", what, &relation)?;
        let ddl = match kind {
            MovedKind::Table => moved_table(&catalog, id, &schema)?,
            MovedKind::Sequence => {
                let def = &catalog.sequences[&id];
                if let Some(owner) = def
                    .owned_by
                    .as_ref()
                    .and_then(|o| catalog.tables.get(&o.table))
                {
                    return Err(ServerError::Sqlstate {
                        code: "0A000",
                        message: format!(
                            "cannot move an owned sequence into another schema: sequence \"{relation}\" is linked to table \"{}\"",
                            owner.name
                        ),
                    });
                }
                if let Some((table, column)) = catalog.sequence_users(def).first() {
                    return Err(ServerError::Sqlstate {
                        code: "2BP01",
                        message: format!(
                            "cannot move sequence \"{relation}\": the default of column {column} of table {} names it",
                            table.name
                        ),
                    });
                }
                let mut moved = (**def).clone();
                moved.schema = schema;
                vec![CatalogChange::ReplaceSequence(moved)]
            }
            MovedKind::View | MovedKind::Projection => vec![CatalogChange::Move { id, schema }],
        };
        self.write(TxnWrites {
            ddl,
            tables: vec![],
        })?;
        Ok(command(tag))
    }
}

/// The changes that move table `id` and the sequences it owns to `schema`.
fn moved_table(
    catalog: &Catalog,
    id: weir_common::ObjectId,
    schema: &str,
) -> Result<Vec<CatalogChange>, ServerError> {
    let mut def = (*catalog.tables[&id]).clone();
    def.schema = schema.to_string();
    let pkey = (!def.primary_key.is_empty()).then(|| def.pkey_constraint_name());
    for index in def.indexes.iter().map(|i| i.name.clone()).chain(pkey) {
        if catalog.relation_exists(schema, &index) {
            return Err(ServerError::DuplicateTable(index));
        }
    }
    let mut sequences = Vec::new();
    for owned in catalog
        .sequences
        .values()
        .filter(|s| s.owned_by.as_ref().is_some_and(|o| o.table == id))
    {
        if let Some((table, column)) = catalog
            .sequence_users(owned)
            .into_iter()
            .find(|(t, _)| t.id != id)
        {
            return Err(ServerError::Sqlstate {
                code: "2BP01",
                message: format!(
                    "cannot move table \"{}\": its sequence {} is also the default of column {column} of table {}",
                    def.name, owned.name, table.name
                ),
            });
        }
        let mut moved = (**owned).clone();
        moved.schema = schema.to_string();
        let (before, after) = (owned.nextval_call(), moved.nextval_call());
        for column in &mut def.columns {
            if column.default.as_deref() == Some(before.as_str()) {
                column.default = Some(after.clone());
            }
        }
        sequences.push(CatalogChange::ReplaceSequence(moved));
    }
    let mut changes = vec![CatalogChange::ReplaceTable(def)];
    changes.extend(sequences);
    Ok(changes)
}
