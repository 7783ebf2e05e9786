//! `ALTER TABLE`: ADD / DROP / RENAME COLUMN, ALTER COLUMN SET / DROP
//! DEFAULT, SET / DROP NOT NULL and TYPE ... USING, RENAME TO, OWNER TO.
//!
//! One statement is one catalog change (the table's next definition,
//! [`CatalogChange::ReplaceTable`]) plus, when the stored layout changes
//! (columns added, dropped, renamed, retyped or made NOT NULL), the whole
//! table rewritten into the new layout in the same transaction
//! ([`TableWrite::Rewrite`]), as PostgreSQL rewrites a table for ALTER
//! COLUMN TYPE. Both commit together or not at all, and a restart replays
//! the table log in the layout each record was written in.
//!
//! Projections and sinks over the table: a change they cannot depend on
//! (a new column, a default, a new NOT NULL) leaves them running, after
//! checking that each still plans to the same columns (a `SELECT *` would
//! not); every other change is refused with 2BP01 naming them (DROP
//! COLUMN ... CASCADE drops them).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::sql::sqlparser::ast::{
    AlterColumnOperation, AlterTable, AlterTableOperation, CastKind, ColumnOption, DropBehavior,
    Expr as SqlExpr, Ident, Owner, RenameTableNameKind,
};
use weir_pgsem::SqlType;

use super::constraints::{
    NewConstraint, Validate, drop_column_constraints, rename_column_constraints,
};
use super::dml::normalize_ident;
use super::eval::Frame;
use super::projection::drop_readers;
use super::sequence;
use super::{Session, StatementResult, command};
use crate::catalog::model::{ColumnDef, Generated, ROW_ID_COLUMN, TableDef};
use crate::catalog::sequence::OwnedBy;
use crate::catalog::{Catalog, CatalogChange};
use crate::db::TxnWrites;
use crate::error::ServerError;
use crate::wal::TableWrite;

/// Where a column of the altered table takes its values from, over the
/// rows as they are stored now.
#[derive(Clone)]
enum Values {
    /// The stored column of that name.
    Stored(String),
    /// An expression over the stored columns (a new column's default, a
    /// `USING` conversion), cast to the column's type.
    Computed(SqlExpr),
}

/// The statement's effect, built one operation at a time.
struct Alteration {
    before: Arc<TableDef>,
    def: TableDef,
    /// Per column of `def`, in order.
    values: Vec<Values>,
    /// Catalog changes besides the table's own (sequences, comments,
    /// dropped dependents), in order.
    changes: Vec<CatalogChange>,
    /// The stored layout changes: the rows are rewritten.
    relayout: bool,
    /// What of it projections over the table would depend on: refused
    /// while one reads the table (the first such operation, for the error).
    depended_on: Option<String>,
    /// `DROP COLUMN ... CASCADE`: drop those readers instead.
    cascade: bool,
    /// A column dropped or renamed that is neither in the key nor the
    /// watermark: readers that do not name it keep running (each is
    /// planned again over the new definition; one that names it is
    /// refused, or with CASCADE dropped).
    column_change: bool,
    renamed_column: bool,
    /// Constraints added: what the existing rows must be checked for.
    validations: Vec<Validate>,
}

impl Session {
    pub(super) async fn alter_table(
        &mut self,
        alter: AlterTable,
    ) -> Result<StatementResult, ServerError> {
        if alter.table_type.is_some() || alter.location.is_some() || alter.on_cluster.is_some() {
            return Err(ServerError::feature_not_supported(format!(
                "this form of ALTER TABLE ({alter})"
            )));
        }
        let (schema, name) = self.split_name(&alter.name)?;
        let catalog = self.snapshot().catalog.clone();
        let Some(before) = catalog.table(&schema, &name).cloned() else {
            if catalog.relation_exists(&schema, &name) {
                return Err(ServerError::Sqlstate {
                    code: "42809",
                    message: format!(
                        "\"{name}\" is not a table (ALTER TABLE changes tables; projections, \
                         sources and sequences have their own ALTER)"
                    ),
                });
            }
            if alter.if_exists {
                self.notice(format!("relation \"{name}\" does not exist, skipping"));
                return Ok(command("ALTER TABLE"));
            }
            return Err(ServerError::UndefinedTable(name));
        };
        let mut catalog = (*catalog).clone();
        let mut alteration = Alteration::new(before);
        for operation in &alter.operations {
            self.alter_one(&mut alteration, &mut catalog, operation)?;
            // A new or dropped primary key re-keys the stored rows.
            if alteration.def.primary_key != alteration.before.primary_key {
                alteration.relayout = true;
                alteration.depends("change the primary key".into());
            }
        }
        self.finish_alteration(alteration, &catalog).await?;
        Ok(command("ALTER TABLE"))
    }

    fn alter_one(
        &mut self,
        a: &mut Alteration,
        catalog: &mut Catalog,
        operation: &AlterTableOperation,
    ) -> Result<(), ServerError> {
        use AlterTableOperation as Op;
        let table = a.def.name.clone();
        match operation {
            Op::AddColumn {
                if_not_exists,
                column_def,
                column_position: None,
                ..
            } => {
                let column = column_name(&column_def.name)?;
                if a.position(&column).is_some() {
                    if *if_not_exists {
                        self.notice(format!(
                            "column \"{column}\" of relation \"{table}\" already exists, skipping"
                        ));
                        return Ok(());
                    }
                    return Err(duplicate_column(&column, &table));
                }
                let (sql_type, mut wants_sequence) = sequence::column_type(&column_def.data_type)?;
                let mut def = ColumnDef {
                    name: column.clone(),
                    sql_type,
                    nullable: true,
                    default: None,
                    generated: None,
                };
                let mut default = None;
                let mut constraints = Vec::new();
                for option in &column_def.options {
                    match &option.option {
                        ColumnOption::Null => def.nullable = true,
                        ColumnOption::NotNull => def.nullable = false,
                        ColumnOption::Default(expr) => {
                            def.default = Some(expr.to_string());
                            default = Some(expr.clone());
                        }
                        other if NewConstraint::is_column_constraint(other) => {
                            constraints.extend(NewConstraint::from_column(
                                &column,
                                option.name.as_ref(),
                                other,
                            )?);
                        }
                        other => match sequence::identity_option(other) {
                            Some(identity) if wants_sequence.is_none() => {
                                wants_sequence = Some(identity)
                            }
                            _ => {
                                return Err(ServerError::feature_not_supported(format!(
                                    "ADD COLUMN with {other}"
                                )));
                            }
                        },
                    }
                }
                if let Some(wanted) = wants_sequence {
                    if def.default.is_some() {
                        return Err(ServerError::Syntax {
                            message: format!(
                                "multiple default values specified for column \"{column}\" of table \"{table}\""
                            ),
                            position: None,
                        });
                    }
                    let seq = self.column_sequence(catalog, a, &def, wanted.options)?;
                    def.nullable = false;
                    def.generated = Some(wanted.generated);
                    def.default = Some(seq.nextval_call());
                    default = Some(parse_expr(&seq.nextval_call())?);
                    a.changes.push(CatalogChange::CreateSequence(seq));
                }
                let values = match default {
                    Some(expr) => Values::Computed(expr),
                    None => Values::Computed(SqlExpr::value(
                        datafusion::sql::sqlparser::ast::Value::Null,
                    )),
                };
                a.def.columns.push(def);
                a.values.push(values);
                a.relayout = true;
                constraints.sort_by_key(NewConstraint::order);
                for constraint in constraints {
                    let validate = self.add_constraint(catalog, &mut a.def, constraint)?;
                    a.validations.push(validate);
                }
            }
            Op::AddConstraint { constraint, .. } => match NewConstraint::from_table(constraint)? {
                Some(constraint) => {
                    let validate = self.add_constraint(catalog, &mut a.def, constraint)?;
                    a.validations.push(validate);
                }
                None => {
                    let datafusion::sql::sqlparser::ast::TableConstraint::PrimaryKey(pk) =
                        constraint
                    else {
                        return Err(ServerError::internal("a table constraint of no kind"));
                    };
                    super::primary_key::add_primary_key(catalog, &mut a.def, pk)?;
                }
            },
            Op::DropConstraint {
                if_exists,
                name,
                drop_behavior,
            } => {
                let cascade = matches!(drop_behavior, Some(DropBehavior::Cascade));
                let mut changes = Vec::new();
                self.drop_constraint(
                    catalog,
                    &mut a.def,
                    &normalize_ident(name),
                    *if_exists,
                    cascade,
                    &mut changes,
                )?;
                a.changes.extend(changes);
            }
            Op::DropColumn {
                column_names,
                if_exists,
                drop_behavior,
                ..
            } => {
                for ident in column_names {
                    let column = column_name(ident)?;
                    let Some(i) = a.position(&column) else {
                        if *if_exists {
                            self.notice(format!(
                                "column \"{column}\" of relation \"{table}\" does not exist, skipping"
                            ));
                            continue;
                        }
                        return Err(undefined_column(&column, &table));
                    };
                    if a.def.primary_key.contains(&column) {
                        return Err(ServerError::feature_not_supported(format!(
                            "dropping column \"{column}\" of the primary key of \"{table}\" (Weir keys a table's rows by its primary key, which cannot change yet)"
                        )));
                    }
                    if a.def.watermark.as_ref().is_some_and(|w| w.column == column) {
                        return Err(ServerError::Sqlstate {
                            code: "2BP01",
                            message: format!(
                                "cannot drop column \"{column}\" of table \"{table}\": the table's WATERMARK FOR is on it"
                            ),
                        });
                    }
                    if a.def.columns.len() == 1 {
                        return Err(ServerError::feature_not_supported(
                            "a table without columns",
                        ));
                    }
                    for seq in catalog.sequences.values() {
                        if seq
                            .owned_by
                            .as_ref()
                            .is_some_and(|o| o.table == a.def.id && o.column == column)
                        {
                            a.changes.push(CatalogChange::DropSequence { id: seq.id });
                        }
                    }
                    let cascade = matches!(drop_behavior, Some(DropBehavior::Cascade));
                    drop_column_constraints(catalog, &mut a.def, &column, cascade, &mut a.changes)?;
                    a.def.columns.remove(i);
                    a.values.remove(i);
                    a.relayout = true;
                    a.column_changed(&column, format!("drop column \"{column}\""));
                    a.cascade |= matches!(drop_behavior, Some(DropBehavior::Cascade));
                }
            }
            Op::RenameColumn {
                old_column_name,
                new_column_name,
            } => {
                let old = column_name(old_column_name)?;
                let new = column_name(new_column_name)?;
                let i = a
                    .position(&old)
                    .ok_or_else(|| undefined_column(&old, &table))?;
                if a.position(&new).is_some() {
                    return Err(duplicate_column(&new, &table));
                }
                a.def.columns[i].name = new.clone();
                rename_column_constraints(catalog, &mut a.def, &old, &new, &mut a.changes)?;
                for key in &mut a.def.primary_key {
                    if *key == old {
                        *key = new.clone();
                    }
                }
                if let Some(w) = &mut a.def.watermark
                    && w.column == old
                {
                    w.column = new.clone();
                }
                for seq in catalog.sequences.values() {
                    if seq
                        .owned_by
                        .as_ref()
                        .is_some_and(|o| o.table == a.def.id && o.column == old)
                    {
                        let mut seq = (**seq).clone();
                        seq.owned_by = Some(OwnedBy {
                            table: a.def.id,
                            column: new.clone(),
                        });
                        a.changes.push(CatalogChange::ReplaceSequence(seq));
                    }
                }
                if let Some(comment) = catalog.comment(a.def.id, Some(&old)) {
                    a.changes.push(CatalogChange::Comment {
                        object: a.def.id,
                        column: Some(new.clone()),
                        comment: Some(comment.clone()),
                    });
                }
                a.relayout = true;
                a.renamed_column = true;
                a.column_changed(&old, format!("rename column \"{old}\""));
            }
            Op::RenameTable { table_name } => {
                let (RenameTableNameKind::To(name) | RenameTableNameKind::As(name)) = table_name;
                let [part] = name.0.as_slice() else {
                    return Err(ServerError::Syntax {
                        message: "ALTER TABLE ... RENAME TO takes a name without a schema (use SET SCHEMA to move a table)".into(),
                        position: None,
                    });
                };
                let new = part.as_ident().map(normalize_ident).ok_or_else(|| {
                    ServerError::invalid_param(format!("improper table name: {name}"))
                })?;
                if new != a.def.name && catalog.relation_exists(&a.def.schema, &new) {
                    return Err(ServerError::DuplicateTable(new));
                }
                a.depends(format!("rename table \"{}\"", a.def.name));
                // The key keeps its name, as PostgreSQL's index does.
                if !a.def.primary_key.is_empty() && a.def.primary_key_name.is_none() {
                    a.def.primary_key_name = Some(a.def.pkey_constraint_name());
                }
                a.def.name = new;
            }
            Op::AlterColumn {
                column_name: ident,
                op,
            } => {
                let column = column_name(ident)?;
                let i = a
                    .position(&column)
                    .ok_or_else(|| undefined_column(&column, &table))?;
                let identity = matches!(
                    a.def.columns[i].generated,
                    Some(Generated::IdentityAlways | Generated::IdentityByDefault)
                );
                let is_identity = || ServerError::Sqlstate {
                    code: "42P16",
                    message: format!(
                        "column \"{column}\" of relation \"{table}\" is an identity column"
                    ),
                };
                match op {
                    AlterColumnOperation::SetDefault { value } => {
                        if identity {
                            return Err(is_identity());
                        }
                        a.def.columns[i].default = Some(value.to_string());
                    }
                    AlterColumnOperation::DropDefault => {
                        if identity {
                            return Err(is_identity());
                        }
                        a.def.columns[i].default = None;
                        if a.def.columns[i].generated == Some(Generated::Serial) {
                            a.def.columns[i].generated = None;
                        }
                    }
                    AlterColumnOperation::SetNotNull => {
                        if a.def.columns[i].nullable {
                            a.def.columns[i].nullable = false;
                            a.relayout = true;
                        }
                    }
                    AlterColumnOperation::DropNotNull => {
                        if a.def.primary_key.contains(&column) {
                            return Err(ServerError::Sqlstate {
                                code: "42P16",
                                message: format!("column \"{column}\" is in a primary key"),
                            });
                        }
                        if identity {
                            return Err(is_identity());
                        }
                        if !a.def.columns[i].nullable {
                            a.def.columns[i].nullable = true;
                            a.relayout = true;
                            a.depends(format!("drop not null of column \"{column}\""));
                        }
                    }
                    AlterColumnOperation::SetDataType {
                        data_type, using, ..
                    } => {
                        let sql_type = SqlType::from_sql(data_type)
                            .map_err(ServerError::feature_not_supported)?;
                        let in_foreign_key = a
                            .def
                            .foreign_keys
                            .iter()
                            .any(|f| f.columns.contains(&column))
                            || catalog
                                .foreign_keys_to(a.def.id)
                                .iter()
                                .any(|(_, f)| f.parent_columns.contains(&column));
                        if in_foreign_key {
                            return Err(ServerError::feature_not_supported(format!(
                                "changing the type of column \"{column}\", which a foreign key uses (drop the constraint, alter, add it again)"
                            )));
                        }
                        let from = a.def.columns[i].sql_type.clone();
                        let source = match (using, &a.values[i]) {
                            (Some(_), _) if a.renamed_column => {
                                return Err(ServerError::feature_not_supported(
                                    "ALTER COLUMN TYPE ... USING in the same statement as RENAME COLUMN (run them as two statements)",
                                ));
                            }
                            (Some(expr), _) => expr.clone(),
                            (None, _) if is_text(&from) && !is_text(&sql_type) => {
                                return Err(ServerError::Sqlstate {
                                    code: "42804",
                                    message: format!(
                                        "column \"{column}\" cannot be cast automatically to type {}; \
                                         specify how with USING {column}::{}",
                                        sql_type.display_name(),
                                        sql_type.display_name()
                                    ),
                                });
                            }
                            (None, Values::Computed(expr)) => expr.clone(),
                            (None, Values::Stored(name)) => {
                                SqlExpr::Identifier(Ident::with_quote('"', name))
                            }
                        };
                        // Converted as `CAST` converts, with the session's
                        // settings (DateStyle for text to dates, ...).
                        a.values[i] = Values::Computed(SqlExpr::Cast {
                            kind: CastKind::Cast,
                            expr: Box::new(SqlExpr::Nested(Box::new(source))),
                            data_type: data_type.clone(),
                            array: false,
                            format: None,
                        });
                        a.def.columns[i].sql_type = sql_type;
                        a.relayout = true;
                        a.depends(format!("alter type of column \"{column}\""));
                    }
                    AlterColumnOperation::AddGenerated { .. } => {
                        return Err(ServerError::feature_not_supported(
                            "ALTER COLUMN ... ADD GENERATED AS IDENTITY",
                        ));
                    }
                }
            }
            Op::OwnerTo { new_owner } => {
                // Weir keeps no owners (every object belongs to the
                // database), so the statement only checks its role:
                // pg_dump writes one after every CREATE.
                if let Owner::Ident(role) = new_owner {
                    let role = normalize_ident(role);
                    if !self.db.user_exists(&role) && role != "postgres" {
                        return Err(ServerError::Sqlstate {
                            code: "42704",
                            message: format!("role \"{role}\" does not exist"),
                        });
                    }
                }
            }
            other => {
                return Err(ServerError::feature_not_supported(format!(
                    "ALTER TABLE ... {other}"
                )));
            }
        }
        Ok(())
    }

    /// The sequence an added SERIAL or identity column takes its values
    /// from, owned by it.
    fn column_sequence(
        &self,
        catalog: &mut Catalog,
        a: &Alteration,
        column: &ColumnDef,
        options: Vec<datafusion::sql::sqlparser::ast::SequenceOptions>,
    ) -> Result<crate::catalog::sequence::SequenceDef, ServerError> {
        let taken: Vec<String> = a
            .changes
            .iter()
            .filter_map(|c| match c {
                CatalogChange::CreateSequence(s) => Some(s.name.clone()),
                _ => None,
            })
            .collect();
        let name = sequence::column_sequence_name(
            |n| catalog.relation_exists(&a.def.schema, n) || taken.iter().any(|t| t == n),
            &a.def.name,
            &column.name,
        );
        let mut seq = sequence::sequence_def(
            catalog.allocate_id(),
            a.def.schema.clone(),
            name,
            column.sql_type.clone(),
            &options,
        )?;
        seq.owned_by = Some(OwnedBy {
            table: a.def.id,
            column: column.name.clone(),
        });
        Ok(seq)
    }

    /// Checks the readers, writes the catalog change and, when the layout
    /// changed, the rewritten rows.
    async fn finish_alteration(
        &mut self,
        a: Alteration,
        catalog: &Catalog,
    ) -> Result<(), ServerError> {
        let id = a.def.id;
        let readers = catalog.readers_of(id);
        let sinks = catalog.sinks_reading(id);
        let views = catalog.views_reading(id);
        let mut changes = Vec::new();
        if let Some(what) = &a.depended_on
            && (!readers.is_empty() || !sinks.is_empty() || !views.is_empty())
        {
            if a.cascade {
                drop_readers(catalog, id, "", true, &mut changes)?;
            } else {
                let names = catalog.reader_names(id);
                return Err(ServerError::Sqlstate {
                    code: "2BP01",
                    message: format!(
                        "cannot {what} of table \"{}\" because {} {} on it (drop {} first{})",
                        a.before.name,
                        names.join(", "),
                        if names.len() == 1 {
                            "depends"
                        } else {
                            "depend"
                        },
                        if names.len() == 1 { "it" } else { "them" },
                        if what.starts_with("drop column") {
                            ", or add CASCADE"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }
        changes.push(CatalogChange::ReplaceTable(a.def.clone()));
        changes.extend(a.changes.iter().cloned());
        let stored = self.snapshot().tables.get(&id).cloned().ok_or_else(|| {
            ServerError::internal(format!("table {} has no stored rows", a.before.name))
        })?;
        self.write(TxnWrites {
            ddl: changes.clone(),
            tables: vec![],
        })?;
        self.ensure_defaults(&a.def)?;
        if a.depended_on.is_none() {
            match self.check_readers_still_plan(&a, catalog).await {
                Ok(()) => {}
                // DROP COLUMN ... CASCADE of a column a reader names drops
                // the table's readers (all of them, not only that one).
                Err(_) if a.cascade && a.column_change => {
                    let mut drops = Vec::new();
                    drop_readers(catalog, id, "", true, &mut drops)?;
                    self.write(TxnWrites {
                        ddl: drops,
                        tables: vec![],
                    })?;
                }
                Err(refused) => return Err(refused),
            }
        }
        if a.relayout {
            let rows = self.relaid_rows(&a, &stored)?;
            if a.def.primary_key != a.before.primary_key {
                super::primary_key::check_unique_key(&a.def, &rows)?;
            }
            let key = a.def.key_indices();
            let mut writes: Vec<(weir_common::ObjectId, TableWrite)> = Vec::new();
            let mut rows = rows.into_iter();
            let first = rows
                .next()
                .unwrap_or_else(|| RecordBatch::new_empty(a.def.physical_schema()));
            writes.push((id, TableWrite::Rewrite { key, rows: first }));
            for batch in rows {
                writes.push((
                    id,
                    TableWrite::Changes(weir_common::ChangeBatch::inserts(batch)),
                ));
            }
            self.write(TxnWrites {
                ddl: vec![],
                tables: writes,
            })?;
        }
        self.validate_existing(id, &a.validations)?;
        Ok(())
    }

    /// Every projection and sink over the table plans again, to the same
    /// columns, over the table's next definition: a `SELECT *` over it
    /// would not (its stored query would read one more column at the next
    /// start), nor would a query a new column makes ambiguous.
    async fn check_readers_still_plan(
        &self,
        a: &Alteration,
        catalog: &Catalog,
    ) -> Result<(), ServerError> {
        let snapshot = self.snapshot();
        for p in catalog.readers_of(a.def.id) {
            let planned = crate::planning::PlanContext::for_settings_over(
                &self.db,
                &p.settings,
                snapshot.clone(),
            )?
            .projection(p)
            .await;
            if let Err(e) = planned {
                return Err(refused_by_reader(
                    &a.before.name,
                    &format!("projection {}", p.qualified_name()),
                    &e,
                ));
            }
        }
        for v in catalog.views_reading(a.def.id) {
            let session = Arc::new(crate::catalog::provider::SessionView::new(
                snapshot.clone(),
                Arc::new(crate::system::SystemSchema::new(self.db.clone())),
            ));
            let planner = Arc::new(crate::planning::ViewPlanning {
                db: self.db.clone(),
            });
            session.set_view_planner(planner.clone());
            let planned =
                crate::catalog::view::ViewPlanner::plan(planner.as_ref(), session, v.clone()).await;
            if let Err(e) = planned {
                return Err(refused_by_reader(
                    &a.before.name,
                    &format!("view {}", v.qualified_name()),
                    &e.into(),
                ));
            }
        }
        for s in catalog.sinks_reading(a.def.id) {
            let planned = crate::planning::PlanContext::for_settings_over(
                &self.db,
                &s.settings,
                snapshot.clone(),
            )?
            .sink(s)
            .await;
            if let Err(e) = planned {
                return Err(refused_by_reader(
                    &a.before.name,
                    &format!("sink {}", s.qualified_name()),
                    &e,
                ));
            }
        }
        Ok(())
    }

    /// The stored rows in the new layout, batch by batch.
    fn relaid_rows(
        &self,
        a: &Alteration,
        stored: &weir_engine::TableState,
    ) -> Result<Vec<RecordBatch>, ServerError> {
        let schema = a.def.physical_schema();
        let mut out = Vec::new();
        for batch in stored.scan()?.iter() {
            let frame = Frame::new(vec![(a.before.name.as_str(), batch)])?;
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
            for (values, column) in a.values.iter().zip(&a.def.columns) {
                let field = column.sql_type.field(&column.name, column.nullable);
                let array = match values {
                    Values::Stored(name) => {
                        let i = batch.schema().index_of(name)?;
                        batch.column(i).clone()
                    }
                    Values::Computed(expr) => self.evaluate(&frame, expr.clone(), None)?.1,
                };
                let array = if array.data_type() == field.data_type() {
                    array
                } else {
                    cast_column(&array, &field, column)?
                };
                if !column.nullable && array.null_count() > 0 {
                    return Err(ServerError::Sqlstate {
                        code: "23502",
                        message: format!(
                            "column \"{}\" of relation \"{}\" contains null values",
                            column.name, a.def.name
                        ),
                    });
                }
                columns.push(array);
            }
            if a.def.has_row_id() {
                // Rows keyed by a primary key that is being dropped get
                // row ids of their own.
                columns.push(match batch.schema().index_of(ROW_ID_COLUMN) {
                    Ok(i) => batch.column(i).clone(),
                    Err(_) => {
                        let first = self.db.allocate_row_ids(batch.num_rows());
                        Arc::new(arrow::array::Int64Array::from_iter_values(
                            first..first + batch.num_rows() as i64,
                        ))
                    }
                });
            }
            out.push(RecordBatch::try_new(schema.clone(), columns)?);
        }
        Ok(out)
    }
}

impl Alteration {
    fn new(before: Arc<TableDef>) -> Self {
        let values = before
            .columns
            .iter()
            .map(|c| Values::Stored(c.name.clone()))
            .collect();
        Self {
            def: (*before).clone(),
            before,
            values,
            changes: Vec::new(),
            relayout: false,
            depended_on: None,
            cascade: false,
            renamed_column: false,
            column_change: false,
            validations: Vec::new(),
        }
    }

    fn position(&self, column: &str) -> Option<usize> {
        self.def.columns.iter().position(|c| c.name == column)
    }

    fn depends(&mut self, what: String) {
        self.depended_on.get_or_insert(what);
    }

    /// `column` dropped or renamed: only the readers that name it depend on
    /// that, unless it keys the table or carries its watermark (how its
    /// changes reach every reader).
    fn column_changed(&mut self, column: &str, what: String) {
        let structural = self.before.primary_key.iter().any(|k| k == column)
            || self
                .before
                .watermark
                .as_ref()
                .is_some_and(|w| w.column == column);
        if structural {
            self.depends(what);
        } else {
            self.column_change = true;
        }
    }
}

fn column_name(ident: &Ident) -> Result<String, ServerError> {
    let name = normalize_ident(ident);
    if name == ROW_ID_COLUMN {
        return Err(ServerError::invalid_param(format!(
            "column name \"{ROW_ID_COLUMN}\" is reserved"
        )));
    }
    Ok(name)
}

fn undefined_column(column: &str, table: &str) -> ServerError {
    ServerError::Sqlstate {
        code: "42703",
        message: format!("column \"{column}\" of relation \"{table}\" does not exist"),
    }
}

fn duplicate_column(column: &str, table: &str) -> ServerError {
    ServerError::Sqlstate {
        code: "42701",
        message: format!("column \"{column}\" of relation \"{table}\" already exists"),
    }
}

fn refused_by_reader(table: &str, reader: &str, why: &ServerError) -> ServerError {
    ServerError::Sqlstate {
        code: "2BP01",
        message: format!(
            "cannot alter table \"{table}\" this way because {reader} depends on it: over the \
             altered table it would not plan to the same columns ({why}); drop it first (or \
             DROP COLUMN ... CASCADE)"
        ),
    }
}

fn is_text(t: &SqlType) -> bool {
    matches!(t, SqlType::Text | SqlType::Varchar(_))
}

pub(super) fn parse_expr(text: &str) -> Result<SqlExpr, ServerError> {
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    datafusion::sql::sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| ServerError::internal(format!("parsing {text}: {e}")))
}

/// A computed column's values as the column's type, by PostgreSQL's cast
/// rules as Weir's types implement them.
fn cast_column(
    array: &ArrayRef,
    field: &arrow::datatypes::Field,
    column: &ColumnDef,
) -> Result<ArrayRef, ServerError> {
    arrow::compute::cast_with_options(
        array,
        field.data_type(),
        &arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        },
    )
    .map_err(|e| ServerError::Sqlstate {
        code: "22P02",
        message: format!(
            "cannot convert a value of column \"{}\" to {}: {e}",
            column.name,
            column.sql_type.display_name()
        ),
    })
}
