//! INSERT (with ON CONFLICT and RETURNING), TRUNCATE, and the bulk paths
//! that end in an insert: COPY FROM STDIN and Flight ingest. UPDATE and
//! DELETE are in `modify`.
//!
//! DataFusion binds each statement (column lists, defaults, casts, WHERE,
//! SET); the session runs the bound input over the statement's snapshot and
//! turns the result into a change batch (`-old/+new`) for the transaction.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::StringArray;
use arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array,
};
use arrow::compute::{cast_with_options, concat_batches, filter_record_batch, take};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DFSchema, ParamValues};
use datafusion::logical_expr::{ExprSchemable, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    self, Assignment, AssignmentTarget, ConflictTarget, Ident, Insert, ObjectName,
    OnConflictAction, OnInsert, SelectItem, Statement, TableObject, Truncate,
};
use weir_common::ChangeBatch;

use super::eval::{Frame, qualify_bare_columns};
use super::{Session, StatementResult, command};
use crate::catalog::TableDef;
use crate::db::TxnWrites;
use crate::error::ServerError;
use crate::wal::TableWrite;
use weir_pgsem::datetime_in::DateTimeContext;

/// What an INSERT does with a row whose key exists.
pub(super) enum Conflict {
    Error,
    /// Skip a row that conflicts on the arbiter (`None`: on the primary
    /// key or any unique index).
    DoNothing(Option<Vec<usize>>),
    DoUpdate {
        /// The primary key's or a unique index's columns.
        arbiter: Vec<usize>,
        assignments: Vec<Assignment>,
        selection: Option<ast::Expr>,
    },
}

/// PostgreSQL folds unquoted identifiers to lower case.
pub(crate) fn normalize_ident(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The parts of a possibly qualified name, case-folded like PostgreSQL.
pub(crate) fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(normalize_ident)
                .unwrap_or_else(|| p.to_string())
        })
        .collect()
}

impl Session {
    /// Resolves a possibly schema-qualified table name in this statement's snapshot.
    pub(crate) fn resolve_table(&self, name: &ObjectName) -> Result<Arc<TableDef>, ServerError> {
        let parts = name_parts(name);
        let snapshot = self.snapshot();
        let catalog = &snapshot.catalog;
        let found = match parts.as_slice() {
            [table] => catalog
                .table(&self.vars.default_schema(), table)
                .or_else(|| catalog.table("public", table)),
            [schema, table] => catalog.table(schema, table),
            [_db, schema, table] => catalog.table(schema, table),
            _ => None,
        };
        found.cloned().ok_or_else(|| {
            if self.resolve_projection(name).is_ok() {
                ServerError::feature_not_supported(format!(
                    "this on projection {}: it is not a table; its rows come from its query",
                    parts.join(".")
                ))
            } else {
                ServerError::UndefinedTable(parts.join("."))
            }
        })
    }

    /// Resolves a possibly schema-qualified projection name.
    pub(crate) fn resolve_projection(
        &self,
        name: &ObjectName,
    ) -> Result<Arc<crate::catalog::model::ProjectionDef>, ServerError> {
        let parts = name_parts(name);
        let snapshot = self.snapshot();
        let catalog = &snapshot.catalog;
        let found = match parts.as_slice() {
            [name] => catalog
                .projection(&self.vars.default_schema(), name)
                .or_else(|| catalog.projection("public", name)),
            [schema, name] | [_, schema, name] => catalog.projection(schema, name),
            _ => None,
        };
        found
            .cloned()
            .ok_or_else(|| ServerError::UndefinedTable(parts.join(".")))
    }

    /// Plans the DEFAULT expressions of `def` so DataFusion fills omitted columns.
    pub(super) fn ensure_defaults(&self, def: &TableDef) -> Result<(), ServerError> {
        let state = self.ctx.state();
        let mut defaults = HashMap::new();
        for column in &def.columns {
            if let Some(text) = &column.default {
                let sql = state.sql_to_expr(text, &datafusion::config::Dialect::PostgreSQL)?;
                let expr = state.create_logical_expr_from_sql_expr(
                    ast::ExprWithAlias {
                        expr: sql,
                        alias: None,
                    },
                    &DFSchema::empty(),
                )?;
                let field = column.sql_type.field(&column.name, true);
                defaults.insert(
                    column.name.clone(),
                    expr.cast_to(field.data_type(), &DFSchema::empty())?,
                );
            }
        }
        self.view.set_defaults(def.id, Arc::new(defaults));
        Ok(())
    }

    /// `VALUES (1, DEFAULT)`: the keyword means the column's default, or NULL
    /// when it has none. sqlparser reads it as a bare identifier, so each one
    /// is replaced by the column's default expression before planning.
    fn substitute_default_keywords(
        &self,
        def: &TableDef,
        insert: &mut Insert,
    ) -> Result<(), ServerError> {
        let targets = insert_targets(def, insert);
        let Some(source) = insert.source.as_mut() else {
            return Ok(());
        };
        let ast::SetExpr::Values(values) = source.body.as_mut() else {
            return Ok(());
        };
        let state = self.ctx.state();
        for row in &mut values.rows {
            for (target, expr) in targets.iter().zip(row.content.iter_mut()) {
                if !super::sequence::is_default_keyword(expr) {
                    continue;
                }
                let default = def
                    .columns
                    .iter()
                    .find(|c| &c.name == target)
                    .and_then(|c| c.default.as_ref());
                *expr = match default {
                    Some(text) => {
                        state.sql_to_expr(text, &datafusion::config::Dialect::PostgreSQL)?
                    }
                    None => ast::Expr::Value(ast::Value::Null.into()),
                };
            }
        }
        Ok(())
    }

    pub(super) async fn insert(
        &mut self,
        mut insert: Insert,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        let TableObject::TableName(name) = &insert.table else {
            return Err(ServerError::feature_not_supported(
                "INSERT INTO a table function",
            ));
        };
        let def = self.resolve_table(name)?;
        let qualifier = insert
            .table_alias
            .as_ref()
            .map(|a| normalize_ident(&a.alias))
            .unwrap_or_else(|| def.name.clone());
        let conflict = match insert.on.take() {
            None => Conflict::Error,
            Some(OnInsert::OnConflict(on)) => {
                let arbiter = conflict_arbiter(&def, on.conflict_target.as_ref())?;
                match on.action {
                    OnConflictAction::DoNothing => Conflict::DoNothing(arbiter),
                    OnConflictAction::DoUpdate(update) => Conflict::DoUpdate {
                        arbiter: arbiter.ok_or_else(|| {
                            ServerError::Syntax {
                                message: "ON CONFLICT DO UPDATE requires inference specification or constraint name (name the conflict columns: ON CONFLICT (id) DO UPDATE ...)".into(),
                                position: None,
                            }
                        })?,
                        assignments: update.assignments,
                        selection: update.selection,
                    },
                }
            }
            Some(other) => {
                return Err(ServerError::feature_not_supported(format!(
                    "INSERT {other}"
                )));
            }
        };
        let returning = insert.returning.take();
        insert.table_alias = None;
        self.ensure_defaults(&def)?;
        let targets = insert_targets(&def, &insert);
        super::sequence::refuse_identity_values(&def, &insert, &targets)?;
        self.substitute_default_keywords(&def, &mut insert)?;
        let plan = self.plan_statement(Statement::Insert(insert)).await?;
        let LogicalPlan::Dml(dml) = plan else {
            return Err(ServerError::internal(
                "INSERT did not plan to a DML statement",
            ));
        };
        let input = Self::bind(Arc::unwrap_or_clone(dml.input), params)?;
        let (schema, batches) = self
            .run_plan(input)
            .await
            .map_err(|e| values_not_null_error(&def, &targets, e))?;
        let rows = concat_batches(&schema, &batches)?;
        let rows = conform(&def, &rows, &self.datetime_context())?;
        let written = self.insert_rows(&def, rows, conflict, &qualifier, params)?;
        let tag = format!("INSERT 0 {}", written.num_rows());
        self.answer_dml(&qualifier, &written, returning, params, &tag)
    }

    /// What a DML statement answers: its RETURNING rows, computed over the
    /// `rows` it changed (the table's user columns, `qualifier` naming the
    /// table), or else its command tag.
    pub(super) fn answer_dml(
        &self,
        qualifier: &str,
        rows: &RecordBatch,
        returning: Option<Vec<SelectItem>>,
        params: Option<&ParamValues>,
        tag: &str,
    ) -> Result<StatementResult, ServerError> {
        match returning {
            Some(items) => {
                let (schema, batch) = self.returning(qualifier, rows, items, params)?;
                let (schema, batches) = self.in_session_time_zone(schema, vec![batch])?;
                Ok(StatementResult::Rows { schema, batches })
            }
            None => Ok(command(tag)),
        }
    }

    /// Inserts user-schema rows (already conformed) into the transaction;
    /// returns the rows actually written (inserted or updated), for
    /// RETURNING and the command tag.
    pub(super) fn insert_rows(
        &mut self,
        def: &TableDef,
        rows: RecordBatch,
        conflict: Conflict,
        qualifier: &str,
        params: Option<&ParamValues>,
    ) -> Result<RecordBatch, ServerError> {
        let physical = self.with_row_ids(def, &rows)?;
        let state = self
            .snapshot()
            .tables
            .get(&def.id)
            .ok_or_else(|| ServerError::UndefinedTable(def.name.clone()))?
            .clone();
        let (changes, written) = match conflict {
            Conflict::Error => (ChangeBatch::inserts(physical), rows),
            Conflict::DoNothing(arbiter) => {
                // A row is skipped when a stored row or a row kept before
                // it in the statement has its values in an arbiter.
                let arbiters = match arbiter {
                    Some(columns) => vec![columns],
                    None => std::iter::once(state.key_columns().to_vec())
                        .chain(state.unique_index_columns())
                        .collect(),
                };
                let mut checks = Vec::new();
                for columns in &arbiters {
                    let (positions, _) = state
                        .lookup_by(columns, &physical)?
                        .ok_or_else(|| ServerError::internal("an arbiter without an index"))?;
                    checks.push((
                        positions,
                        state.values_by(columns, &physical)?,
                        HashSet::new(),
                    ));
                }
                let keep: BooleanArray = (0..physical.num_rows())
                    .map(|i| {
                        let clear = checks.iter().all(|(positions, values, seen)| {
                            positions[i].is_none()
                                && values[i].as_ref().is_none_or(|v| !seen.contains(v))
                        });
                        if clear {
                            for (_, values, seen) in &mut checks {
                                if let Some(v) = &values[i] {
                                    seen.insert(v.clone());
                                }
                            }
                        }
                        Some(clear)
                    })
                    .collect();
                let kept = filter_record_batch(&physical, &keep)?;
                (
                    ChangeBatch::inserts(kept),
                    filter_record_batch(&rows, &keep)?,
                )
            }
            Conflict::DoUpdate {
                arbiter,
                assignments,
                selection,
            } => {
                let (positions, existing) = state
                    .lookup_by(&arbiter, &physical)?
                    .ok_or_else(|| ServerError::internal("an arbiter without an index"))?;
                let keys = state.values_by(&arbiter, &physical)?;
                let mut seen = HashSet::new();
                for key in keys.iter().flatten() {
                    if !seen.insert(key.clone()) {
                        return Err(ServerError::DataException(
                            "ON CONFLICT DO UPDATE command cannot affect row a second time".into(),
                        ));
                    }
                }
                let fresh: BooleanArray = positions.iter().map(|p| Some(p.is_none())).collect();
                let conflicting: Vec<u32> = (0..positions.len() as u32)
                    .filter(|&i| positions[i as usize].is_some())
                    .collect();
                let existing_idx: UInt32Array = positions.iter().flatten().copied().collect();
                let old = take_batch(&existing, &existing_idx)?;
                let excluded = take_batch(&rows, &UInt32Array::from(conflicting))?;
                let (old, new) = self.conflict_updates(
                    def,
                    qualifier,
                    old,
                    excluded,
                    assignments,
                    selection,
                    params,
                )?;
                let inserted = filter_record_batch(&physical, &fresh)?;
                let retract = old.clone();
                let all_new = concat_batches(&physical.schema(), &[inserted, new.clone()])?;
                let weights: Vec<i64> = std::iter::repeat_n(-1, retract.num_rows())
                    .chain(std::iter::repeat_n(1, all_new.num_rows()))
                    .collect();
                let rows_all = concat_batches(&physical.schema(), &[retract, all_new.clone()])?;
                let change = ChangeBatch::new(rows_all, Int64Array::from(weights))
                    .map_err(|e| ServerError::internal(e.to_string()))?;
                let user_cols: Vec<usize> = (0..def.columns.len()).collect();
                let written = rebind(all_new.project(&user_cols)?, def.user_schema())?;
                (change, written)
            }
        };
        let n = changes.num_rows() as u64;
        self.write(TxnWrites {
            ddl: vec![],
            tables: vec![(def.id, TableWrite::Changes(changes))],
        })?;
        self.db.metrics().rows_written(n);
        Ok(written)
    }

    /// For ON CONFLICT DO UPDATE: the stored rows that conflict (`old`) and
    /// their replacements, after the optional WHERE.
    #[allow(clippy::too_many_arguments)]
    fn conflict_updates(
        &self,
        def: &TableDef,
        qualifier: &str,
        old: RecordBatch,
        excluded: RecordBatch,
        assignments: Vec<Assignment>,
        selection: Option<ast::Expr>,
        params: Option<&ParamValues>,
    ) -> Result<(RecordBatch, RecordBatch), ServerError> {
        let user_schema = def.user_schema();
        let old_user = rebind(old.clone(), def.physical_schema())?;
        let old_user = RecordBatch::try_new(
            user_schema.clone(),
            old_user.columns()[..def.columns.len()].to_vec(),
        )?;
        let frame = Frame::new(vec![(qualifier, &old_user), ("excluded", &excluded)])?;
        let mut columns: Vec<ArrayRef> = old_user.columns().to_vec();
        for assignment in assignments {
            let (index, _) = assigned_column(
                def,
                &assignment,
                "tuple assignment in ON CONFLICT DO UPDATE",
            )?;
            let mut value = assignment.value;
            qualify_bare_columns(&mut value, qualifier);
            let (_, array) = self.evaluate(&frame, value, params)?;
            columns[index] =
                cast_with_options(&array, user_schema.field(index).data_type(), &strict_cast())?;
        }
        let new_user = RecordBatch::try_new_with_options(
            user_schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(old_user.num_rows())),
        )
        .map_err(|e| not_null_error(def, e))?;
        let new_user = conform(def, &new_user, &self.datetime_context())?;
        let (old, new_user) = match selection {
            Some(mut predicate) => {
                qualify_bare_columns(&mut predicate, qualifier);
                let (_, mask) = self.evaluate(&frame, predicate, params)?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| {
                        ServerError::planning("ON CONFLICT ... WHERE must be a boolean")
                    })?
                    .clone();
                let chosen: UInt32Array = (0..mask.len() as u32)
                    .filter(|&i| mask.is_valid(i as usize) && mask.value(i as usize))
                    .collect();
                (take_batch(&old, &chosen)?, take_batch(&new_user, &chosen)?)
            }
            None => (old, new_user),
        };
        Ok((old, self.with_row_ids(def, &new_user)?))
    }

    /// Appends hidden row ids for tables without a primary key.
    fn with_row_ids(&self, def: &TableDef, rows: &RecordBatch) -> Result<RecordBatch, ServerError> {
        if !def.has_row_id() {
            return rebind(rows.clone(), def.physical_schema());
        }
        let first = self.db.allocate_row_ids(rows.num_rows());
        let ids = Int64Array::from_iter_values(first..first + rows.num_rows() as i64);
        let mut columns = rows.columns().to_vec();
        columns.push(Arc::new(ids));
        Ok(RecordBatch::try_new(def.physical_schema(), columns)?)
    }

    pub(super) fn truncate(&mut self, truncate: Truncate) -> Result<StatementResult, ServerError> {
        let mut ids = Vec::new();
        for target in &truncate.table_names {
            match self.resolve_table(&target.name) {
                Ok(def) => ids.push(def.id),
                Err(_) if truncate.if_exists => {}
                Err(e) => return Err(e),
            }
        }
        // A table other tables' foreign keys reference empties only with
        // them, as in PostgreSQL: named in the statement, or by CASCADE.
        let cascade = matches!(
            truncate.cascade,
            Some(datafusion::sql::sqlparser::ast::CascadeOption::Cascade)
        );
        let catalog = self.snapshot().catalog.clone();
        let mut next = 0;
        while next < ids.len() {
            let parent = ids[next];
            next += 1;
            for (child, _) in catalog.foreign_keys_to(parent) {
                if ids.contains(&child.id) {
                    continue;
                }
                if !cascade {
                    let parent = catalog.tables.get(&parent).map(|t| t.name.clone());
                    return Err(ServerError::Sqlstate {
                        code: "0A000",
                        message: format!(
                            "cannot truncate a table referenced in a foreign key constraint: table \"{}\" references \"{}\" (truncate it in the same statement, or use TRUNCATE ... CASCADE)",
                            child.name,
                            parent.unwrap_or_default()
                        ),
                    });
                }
                self.notice(format!("truncate cascades to table \"{}\"", child.name));
                ids.push(child.id);
            }
        }
        let writes = TxnWrites {
            ddl: vec![],
            tables: ids
                .into_iter()
                .map(|id| (id, TableWrite::Truncate))
                .collect(),
        };
        self.write(writes)?;
        Ok(command("TRUNCATE TABLE"))
    }

    /// Fills columns a bulk load did not provide with their defaults (or
    /// NULL) and conforms the result to the table.
    pub(super) fn complete_columns(
        &self,
        def: &TableDef,
        provided: HashMap<String, ArrayRef>,
        num_rows: usize,
    ) -> Result<RecordBatch, ServerError> {
        let empty = RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(num_rows)),
        )?;
        let frame = Frame::new(vec![])?;
        let mut columns = Vec::with_capacity(def.columns.len());
        for column in &def.columns {
            let field = column.sql_type.field(&column.name, true);
            let array = match (provided.get(&column.name), &column.default) {
                (Some(array), _) => array.clone(),
                (None, Some(text)) => {
                    let state = self.ctx.state();
                    let sql = state.sql_to_expr(text, &datafusion::config::Dialect::PostgreSQL)?;
                    let frame = Frame {
                        schema: frame.schema.clone(),
                        batch: empty.clone(),
                    };
                    self.evaluate(&frame, sql, None)?.1
                }
                (None, None) => arrow::array::new_null_array(field.data_type(), num_rows),
            };
            columns.push(cast_with_options(
                &array,
                field.data_type(),
                &strict_cast(),
            )?);
        }
        let batch = RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::new(
                def.columns
                    .iter()
                    .map(|c| c.sql_type.field(&c.name, true))
                    .collect::<Vec<_>>(),
            )),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(num_rows)),
        )?;
        conform(def, &batch, &self.datetime_context())
    }

    /// Bulk insert of Arrow batches (Flight SQL ingest): columns by name.
    pub async fn ingest(
        &mut self,
        table: &str,
        batches: Vec<RecordBatch>,
    ) -> Result<u64, ServerError> {
        let name = ObjectName::from(table.split('.').map(Ident::new).collect::<Vec<_>>());
        let implicit = self.open_implicit()?;
        let result = (|| {
            let def = self.resolve_table(&name)?;
            let mut total = 0u64;
            for batch in batches {
                let mut provided = HashMap::new();
                for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
                    let column = def
                        .columns
                        .iter()
                        .find(|c| c.name.eq_ignore_ascii_case(field.name()))
                        .ok_or_else(|| {
                            ServerError::UndefinedColumn(format!("{}.{}", def.name, field.name()))
                        })?;
                    provided.insert(column.name.clone(), array.clone());
                }
                let rows = self.complete_columns(&def, provided, batch.num_rows())?;
                total += self
                    .insert_rows(&def, rows, Conflict::Error, &def.name.clone(), None)?
                    .num_rows() as u64;
            }
            Ok(total)
        })();
        self.close_implicit(implicit, result).await
    }
}

/// The columns an INSERT's values go to, in order.
fn insert_targets(def: &TableDef, insert: &Insert) -> Vec<String> {
    if insert.columns.is_empty() {
        return def.columns.iter().map(|c| c.name.clone()).collect();
    }
    insert
        .columns
        .iter()
        .map(
            |name| match name.0.last().and_then(|part| part.as_ident()) {
                Some(ident) => normalize_ident(ident),
                None => name.to_string(),
            },
        )
        .collect()
}

/// DataFusion names VALUES columns `column1..n` and rejects a NULL in a NOT
/// NULL target while casting them; report it as PostgreSQL does, naming the
/// table's column.
fn values_not_null_error(def: &TableDef, targets: &[String], e: ServerError) -> ServerError {
    let text = e.to_string();
    let Some(rest) = text.split("Column 'column").nth(1) else {
        return e;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let position = digits.parse::<usize>().ok().and_then(|n| n.checked_sub(1));
    match position.and_then(|i| targets.get(i)) {
        Some(column) if rest[digits.len()..].starts_with("' is declared as non-nullable") => {
            ServerError::NotNullViolation {
                table: def.name.clone(),
                column: column.clone(),
            }
        }
        _ => e,
    }
}

/// The columns an ON CONFLICT target names, by position in the table's
/// stored layout: its primary key or one of its unique indexes (`None`
/// without a target: any of them).
fn conflict_arbiter(
    def: &TableDef,
    target: Option<&ConflictTarget>,
) -> Result<Option<Vec<usize>>, ServerError> {
    let no_match = || {
        ServerError::InvalidColumnReference(
            "there is no unique or exclusion constraint matching the ON CONFLICT specification"
                .into(),
        )
    };
    let schema = def.physical_schema();
    let positions = |columns: &[String]| -> Vec<usize> {
        columns
            .iter()
            .filter_map(|c| schema.index_of(c).ok())
            .collect()
    };
    let mut candidates: Vec<(String, Vec<String>)> = Vec::new();
    if !def.primary_key.is_empty() {
        candidates.push((def.pkey_constraint_name(), def.primary_key.clone()));
    }
    candidates.extend(
        def.indexes
            .iter()
            .filter(|i| i.unique)
            .map(|i| (i.name.clone(), i.columns.clone())),
    );
    match target {
        None => Ok(None),
        Some(ConflictTarget::Columns(columns)) => {
            let mut given: Vec<String> = columns.iter().map(normalize_ident).collect();
            given.sort();
            candidates
                .iter()
                .find(|(_, c)| {
                    let mut c = c.clone();
                    c.sort();
                    c == given
                })
                .map(|(_, c)| Some(positions(c)))
                .ok_or_else(no_match)
        }
        Some(ConflictTarget::OnConstraint(name)) => {
            let name = name_parts(name).pop().unwrap_or_default();
            candidates
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| Some(positions(c)))
                .ok_or_else(no_match)
        }
    }
}

/// The index and name of the column a SET assignment targets; `tuple` names
/// the statement in the error for `SET (a, b) = ...`.
pub(super) fn assigned_column(
    def: &TableDef,
    assignment: &Assignment,
    tuple: &str,
) -> Result<(usize, String), ServerError> {
    let AssignmentTarget::ColumnName(target) = &assignment.target else {
        return Err(ServerError::feature_not_supported(tuple));
    };
    let name = target
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(normalize_ident)
        .unwrap_or_default();
    let index = def
        .columns
        .iter()
        .position(|c| c.name == name)
        .ok_or_else(|| ServerError::UndefinedColumn(name.clone()))?;
    Ok((index, name))
}

pub(super) fn strict_cast() -> arrow::compute::CastOptions<'static> {
    arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    }
}

pub(super) fn take_batch(
    batch: &RecordBatch,
    indices: &UInt32Array,
) -> Result<RecordBatch, ServerError> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), indices, None))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(indices.len())),
    )?)
}

fn not_null_error(def: &TableDef, e: arrow::error::ArrowError) -> ServerError {
    let text = e.to_string();
    match def
        .columns
        .iter()
        .find(|c| text.contains(&format!("'{}'", c.name)))
    {
        Some(c) => ServerError::NotNullViolation {
            table: def.name.clone(),
            column: c.name.clone(),
        },
        None => e.into(),
    }
}

/// Casts rows to the table's user schema and enforces NOT NULL.
/// `rows` as the table's user columns: text read as each column's type
/// (dates and times with `datetime`), NOT NULL and lengths checked.
pub(super) fn conform(
    def: &TableDef,
    rows: &RecordBatch,
    datetime: &DateTimeContext,
) -> Result<RecordBatch, ServerError> {
    let schema: SchemaRef = def.user_schema();
    if rows.num_columns() != schema.fields().len() {
        return Err(ServerError::internal(format!(
            "{} values for {} columns of {}",
            rows.num_columns(),
            schema.fields().len(),
            def.name
        )));
    }
    let mut columns = Vec::with_capacity(rows.num_columns());
    for (column, (field, array)) in def
        .columns
        .iter()
        .zip(schema.fields().iter().zip(rows.columns()))
    {
        if !column.nullable && array.null_count() > 0 {
            return Err(ServerError::NotNullViolation {
                table: def.name.clone(),
                column: column.name.clone(),
            });
        }
        let context = format!(
            "column \"{}\" is of type {}",
            column.name,
            column.sql_type.display_name()
        );
        let invalid = |e: String| ServerError::InvalidText(format!("{context}: {e}"));
        // Text becomes bytea, arrays, uuid and json the way PostgreSQL reads
        // literals ('\x00ff', '{1,2}'), not by Arrow's byte-for-byte cast.
        let text = matches!(
            array.data_type(),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
        );
        let parsed = if text && weir_pgsem::text_input::needs_text_input(&column.sql_type) {
            let strings = cast_with_options(array, &DataType::Utf8, &strict_cast())?;
            let strings = strings
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| ServerError::internal("cast to Utf8"))?;
            weir_pgsem::text_input::parse_column(strings, &column.sql_type, datetime)
                .map_err(|e| e.in_context(&context))?
        } else {
            array.clone()
        };
        let cast =
            cast_with_options(&parsed, field.data_type(), &strict_cast()).map_err(|e| match e {
                arrow::error::ArrowError::CastError(m) if m.contains("Can't cast value") => {
                    out_of_range(&column.sql_type)
                }
                e => invalid(e.to_string()),
            })?;
        columns.push(match column.sql_type {
            weir_pgsem::SqlType::Varchar(Some(n)) => fit_varchar(cast, n)?,
            _ => cast,
        });
    }
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.num_rows())),
    )?)
}

fn out_of_range(sql_type: &weir_pgsem::SqlType) -> ServerError {
    use weir_pgsem::SqlType as S;
    let name = match sql_type {
        S::Int2 => "smallint",
        S::Int4 => "integer",
        S::Int8 => "bigint",
        _ => "numeric field",
    };
    ServerError::Value {
        sqlstate: "22003",
        message: format!("{name} out of range"),
    }
}

/// Stores text in a `varchar(n)` column: longer values are an error
/// (22001) unless the excess is only spaces, which PostgreSQL drops.
fn fit_varchar(
    array: arrow::array::ArrayRef,
    n: u64,
) -> Result<arrow::array::ArrayRef, ServerError> {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let Some(strings) = array.as_any().downcast_ref::<StringArray>() else {
        return Ok(array);
    };
    if strings.iter().flatten().all(|v| v.chars().count() <= n) {
        return Ok(array);
    }
    let fitted = strings
        .iter()
        .map(
            |v| match v.and_then(|v| v.char_indices().nth(n).map(|(i, _)| (v, i))) {
                None => Ok(v),
                Some((v, i)) if v[i..].chars().all(|c| c == ' ') => Ok(Some(&v[..i])),
                Some(_) => Err(ServerError::Value {
                    sqlstate: "22001",
                    message: format!("value too long for type character varying({n})"),
                }),
            },
        )
        .collect::<Result<StringArray, _>>()?;
    Ok(Arc::new(fitted))
}

/// The same columns under the table's schema (names and metadata), whatever
/// the plan called them.
pub(super) fn rebind(batch: RecordBatch, schema: SchemaRef) -> Result<RecordBatch, ServerError> {
    Ok(RecordBatch::try_new_with_options(
        schema,
        batch.columns().to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}
