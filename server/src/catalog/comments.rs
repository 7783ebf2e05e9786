//! `COMMENT ON`: comments on relations (tables, projections, sequences,
//! sources) and their columns. They are catalog state, so they commit and
//! roll back with their transaction and survive restarts like other DDL;
//! `obj_description` and `col_description` (what psql's `\d+` and ORMs'
//! reflection read) return them.

use std::sync::Arc;

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use weir_common::ObjectId;

use super::model::Catalog;
use super::pg::table_oid;
use super::provider::SessionView;
use crate::error::ServerError;

impl Catalog {
    /// The comment on relation `id`, or on its column `column`.
    pub fn comment(&self, id: ObjectId, column: Option<&str>) -> Option<&String> {
        self.comments.get(&(id, column.map(str::to_string)))
    }

    /// Every comment as `pg_description` keys it: (relation oid, column
    /// number or 0, text).
    pub fn descriptions(&self) -> Vec<(i64, i64, &String)> {
        self.comments
            .iter()
            .filter_map(|((id, column), text)| {
                let subid = match column {
                    None => 0,
                    Some(c) => {
                        let columns = self.relation_columns(*id)?;
                        columns.iter().position(|n| n == c)? as i64 + 1
                    }
                };
                Some((table_oid(*id), subid, text))
            })
            .collect()
    }

    /// The column names of relation `id`, in order; `None` if no relation
    /// has the id.
    fn relation_columns(&self, id: ObjectId) -> Option<Vec<&str>> {
        fn names(columns: &[super::ColumnDef]) -> Vec<&str> {
            columns.iter().map(|c| c.name.as_str()).collect()
        }
        if let Some(t) = self.tables.get(&id) {
            return Some(names(&t.columns));
        }
        if let Some(p) = self.projections.get(&id) {
            return Some(names(&p.columns));
        }
        if let Some(s) = self.sources.get(&id) {
            return Some(names(&s.columns));
        }
        if let Some(v) = self.views.get(&id) {
            return Some(names(&v.columns));
        }
        self.sequences.get(&id).map(|_| Vec::new())
    }

    pub(super) fn set_comment(
        &mut self,
        id: ObjectId,
        column: &Option<String>,
        comment: &Option<String>,
    ) -> Result<(), ServerError> {
        let columns = self
            .relation_columns(id)
            .ok_or_else(|| ServerError::UndefinedTable(format!("object {id}")))?;
        if let Some(column) = column
            && !columns.contains(&column.as_str())
        {
            return Err(ServerError::UndefinedColumn(column.clone()));
        }
        let key = (id, column.clone());
        match comment {
            Some(text) => self.comments.insert(key, text.clone()),
            None => self.comments.remove(&key),
        };
        Ok(())
    }

    /// Forgets the comments of relations that were dropped.
    pub(super) fn forget_dropped_comments(&mut self) {
        // Comments on relations that are gone, and on columns their
        // relation no longer has (ALTER TABLE ... DROP COLUMN).
        let gone: Vec<(ObjectId, Option<String>)> = self
            .comments
            .keys()
            .filter(|(id, column)| match self.relation_columns(*id) {
                None => true,
                Some(columns) => column.as_deref().is_some_and(|c| !columns.contains(&c)),
            })
            .cloned()
            .collect();
        for key in gone {
            self.comments.remove(&key);
        }
    }

    /// The relation whose `pg_class` OID is `oid`.
    fn relation_of_oid(&self, oid: i64) -> Option<ObjectId> {
        self.tables
            .keys()
            .chain(self.projections.keys())
            .chain(self.sources.keys())
            .chain(self.sequences.keys())
            .chain(self.views.keys())
            .copied()
            .find(|id| table_oid(*id) == oid)
    }
}

/// `obj_description(oid [, catalog])` and `col_description(oid, attnum)`
/// over the statement's snapshot; NULL where there is no comment.
pub fn register(ctx: &SessionContext, view: &Arc<SessionView>) {
    let v = view.clone();
    ctx.register_udf(super::functions::oid_to_text(
        "obj_description",
        move |oid| {
            let snapshot = v.snapshot();
            let catalog = &snapshot.catalog;
            let id = catalog.relation_of_oid(oid)?;
            catalog.comment(id, None).cloned()
        },
    ));
    let v = view.clone();
    ctx.register_udf(create_udf(
        "col_description",
        vec![DataType::Int64, DataType::Int64],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let oids = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
            let attnums = arrow::compute::cast(&arrays[1], &DataType::Int64)?;
            let (oids, attnums) = (
                oids.as_any().downcast_ref::<Int64Array>(),
                attnums.as_any().downcast_ref::<Int64Array>(),
            );
            let (Some(oids), Some(attnums)) = (oids, attnums) else {
                return Err(datafusion::error::DataFusionError::Execution(
                    "col_description takes an oid and an attribute number".into(),
                ));
            };
            let snapshot = v.snapshot();
            let catalog = &snapshot.catalog;
            let out: StringArray = oids
                .iter()
                .zip(attnums.iter())
                .map(|(oid, attnum)| {
                    let id = catalog.relation_of_oid(oid?)?;
                    let index = usize::try_from(attnum?).ok()?.checked_sub(1)?;
                    let column = *catalog.relation_columns(id)?.get(index)?;
                    catalog.comment(id, Some(column)).cloned()
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    ));
}
