//! `ALTER TABLE ... ADD [CONSTRAINT name] PRIMARY KEY (columns)` and
//! `ALTER TABLE ... DROP CONSTRAINT <its primary key>`.
//!
//! A table's rows are stored keyed by its primary key (or by a hidden row
//! id when it has none), so changing the key rewrites the table into the
//! new keying, as a column type change does (ALTER TABLE's `Rewrite`):
//! adding a key checks that the rows are unique and not NULL on it (23505,
//! 23502) and makes its columns NOT NULL; dropping it gives every row a
//! fresh row id and leaves the columns NOT NULL, as PostgreSQL does.

use std::collections::HashSet;

use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion::sql::sqlparser::ast::{Expr, PrimaryKeyConstraint};
use weir_common::ObjectId;

use super::constraints::drop_dependent_foreign_keys;
use super::dml::normalize_ident;
use crate::catalog::constraint::IndexDef;
use crate::catalog::model::TableDef;
use crate::catalog::{Catalog, CatalogChange};
use crate::error::ServerError;

/// Makes `pk` the primary key of keyless `def` (its columns NOT NULL);
/// the caller rewrites the rows and checks them with [`check_unique_key`].
pub(super) fn add_primary_key(
    catalog: &Catalog,
    def: &mut TableDef,
    pk: &PrimaryKeyConstraint,
) -> Result<(), ServerError> {
    if !def.primary_key.is_empty() {
        return Err(ServerError::Sqlstate {
            code: "42P16",
            message: format!(
                "multiple primary keys for table \"{}\" are not allowed",
                def.name
            ),
        });
    }
    let mut columns = Vec::with_capacity(pk.columns.len());
    for c in &pk.columns {
        let Expr::Identifier(ident) = &c.column.expr else {
            return Err(ServerError::feature_not_supported(
                "a primary key on an expression",
            ));
        };
        let name = normalize_ident(ident);
        let column = def
            .columns
            .iter_mut()
            .find(|col| col.name == name)
            .ok_or_else(|| ServerError::UndefinedColumn(name.clone()))?;
        column.nullable = false;
        columns.push(name);
    }
    def.primary_key = columns;
    def.primary_key_name = pk.name.as_ref().map(normalize_ident);
    let key_name = def.pkey_constraint_name();
    if catalog.relation_exists(&def.schema, &key_name) {
        return Err(ServerError::DuplicateTable(key_name));
    }
    Ok(())
}

/// Takes the primary key off `def`; foreign keys that reference it (and no
/// other unique index over the same columns) need `cascade`, which drops
/// them (other tables' into `changes`).
pub(super) fn drop_primary_key(
    catalog: &Catalog,
    def: &mut TableDef,
    cascade: bool,
    changes: &mut Vec<CatalogChange>,
) -> Result<(), ServerError> {
    let key = IndexDef {
        id: ObjectId(0),
        name: def.pkey_constraint_name(),
        columns: std::mem::take(&mut def.primary_key),
        unique: true,
        constraint: true,
    };
    def.primary_key_name = None;
    let mut tables = Vec::new();
    drop_dependent_foreign_keys(catalog, def, &key, cascade, &mut tables)?;
    changes.extend(tables.into_iter().map(CatalogChange::ReplaceTable));
    Ok(())
}

/// 23505 unless the rows' primary-key values are distinct (NULLs were
/// refused when the columns became NOT NULL).
pub(super) fn check_unique_key(def: &TableDef, rows: &[RecordBatch]) -> Result<(), ServerError> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let indices = def.key_indices();
    let fields = indices
        .iter()
        .map(|&i| SortField::new(first.schema().field(i).data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let mut seen = HashSet::new();
    for batch in rows {
        let columns: Vec<_> = indices.iter().map(|&i| batch.column(i).clone()).collect();
        let keys = converter.convert_columns(&columns)?;
        for (row, key) in keys.iter().enumerate() {
            if !seen.insert(key.owned()) {
                let values: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        arrow::util::display::array_value_to_string(c, row)
                            .unwrap_or_else(|_| "?".into())
                    })
                    .collect();
                return Err(ServerError::Sqlstate {
                    code: "23505",
                    message: format!(
                        "could not create unique index \"{}\": key ({})=({}) is duplicated",
                        def.pkey_constraint_name(),
                        def.primary_key.join(", "),
                        values.join(", ")
                    ),
                });
            }
        }
    }
    Ok(())
}
