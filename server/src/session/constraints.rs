//! UNIQUE, CHECK and FOREIGN KEY constraints and secondary indexes from
//! SQL: declared in CREATE TABLE, added and dropped by ALTER TABLE,
//! `CREATE [UNIQUE] INDEX` and `DROP INDEX`; and the CHECK evaluation
//! every write goes through ([`Session::check_rows`]).
//!
//! What each becomes in the table's definition and who enforces it is in
//! `catalog::constraint`.

use arrow::array::{Array, BooleanArray, RecordBatch};
use datafusion::sql::sqlparser::ast::{
    ColumnOption, ConstraintCharacteristics, ConstraintReferenceMatchKind, CreateIndex,
    Expr as SqlExpr, Ident, NullsDistinctOption, ObjectName, ReferentialAction, TableConstraint,
    Visit, Visitor,
};
use weir_common::ObjectId;

use super::dml::normalize_ident;
use super::eval::Frame;
use super::{Session, StatementResult, command};
use crate::catalog::constraint::{CheckDef, ForeignKeyDef, IndexDef, RefAction};
use crate::catalog::model::TableDef;
use crate::catalog::{Catalog, CatalogChange};
use crate::db::TxnWrites;
use crate::error::ServerError;
use crate::wal::TableWrite;

/// A constraint as declared, before it is named and checked.
#[derive(Debug, Clone)]
pub(super) enum NewConstraint {
    Unique {
        name: Option<String>,
        columns: Vec<String>,
    },
    Check {
        name: Option<String>,
        expr: SqlExpr,
    },
    ForeignKey {
        name: Option<String>,
        columns: Vec<String>,
        parent: ObjectName,
        /// Empty: the parent's primary key.
        parent_columns: Vec<String>,
        on_delete: RefAction,
        on_update: RefAction,
    },
}

/// What adding a constraint to a table with rows must check of them.
#[derive(Debug, Clone)]
pub(super) enum Validate {
    /// Unique indexes are checked as they are built.
    Nothing,
    Check(String),
    ForeignKey(String),
}

fn not_supported(what: impl Into<String>) -> ServerError {
    ServerError::feature_not_supported(what.into())
}

fn characteristics(c: &Option<ConstraintCharacteristics>) -> Result<(), ServerError> {
    if let Some(c) = c
        && (c.deferrable == Some(true) || c.enforced == Some(false))
    {
        return Err(not_supported(format!(
            "{c} constraints (Weir checks every constraint at the end of each statement)"
        )));
    }
    Ok(())
}

fn action(a: Option<ReferentialAction>) -> Result<RefAction, ServerError> {
    Ok(match a {
        None | Some(ReferentialAction::NoAction) => RefAction::NoAction,
        Some(ReferentialAction::Restrict) => RefAction::Restrict,
        Some(ReferentialAction::Cascade) => RefAction::Cascade,
        Some(ReferentialAction::SetNull) => RefAction::SetNull,
        Some(ReferentialAction::SetDefault) => {
            return Err(not_supported("ON DELETE / ON UPDATE SET DEFAULT"));
        }
    })
}

fn column_of(expr: &SqlExpr) -> Result<String, ServerError> {
    match expr {
        SqlExpr::Identifier(ident) => Ok(normalize_ident(ident)),
        other => Err(not_supported(format!(
            "an index or constraint on the expression {other} (name columns)"
        ))),
    }
}

fn names(idents: &[Ident]) -> Vec<String> {
    idents.iter().map(normalize_ident).collect()
}

impl NewConstraint {
    /// A table constraint of CREATE TABLE or ALTER TABLE ADD; `None` for
    /// PRIMARY KEY, which the caller handles.
    pub(super) fn from_table(c: &TableConstraint) -> Result<Option<Self>, ServerError> {
        Ok(Some(match c {
            TableConstraint::PrimaryKey(_) => return Ok(None),
            TableConstraint::Unique(u) => {
                characteristics(&u.characteristics)?;
                if matches!(u.nulls_distinct, NullsDistinctOption::NotDistinct) {
                    return Err(not_supported("UNIQUE NULLS NOT DISTINCT"));
                }
                Self::Unique {
                    name: u.name.as_ref().map(normalize_ident),
                    columns: u
                        .columns
                        .iter()
                        .map(|c| column_of(&c.column.expr))
                        .collect::<Result<_, _>>()?,
                }
            }
            TableConstraint::Check(c) => {
                if c.enforced == Some(false) {
                    return Err(not_supported("NOT ENFORCED constraints"));
                }
                Self::Check {
                    name: c.name.as_ref().map(normalize_ident),
                    expr: (*c.expr).clone(),
                }
            }
            TableConstraint::ForeignKey(f) => {
                characteristics(&f.characteristics)?;
                if matches!(
                    f.match_kind,
                    Some(
                        ConstraintReferenceMatchKind::Full | ConstraintReferenceMatchKind::Partial
                    )
                ) {
                    return Err(not_supported("MATCH FULL / MATCH PARTIAL foreign keys"));
                }
                Self::ForeignKey {
                    name: f.name.as_ref().map(normalize_ident),
                    columns: names(&f.columns),
                    parent: f.foreign_table.clone(),
                    parent_columns: names(&f.referred_columns),
                    on_delete: action(f.on_delete)?,
                    on_update: action(f.on_update)?,
                }
            }
            other => return Err(not_supported(format!("table constraint {other}"))),
        }))
    }

    /// Whether a column option is a UNIQUE, CHECK or REFERENCES
    /// constraint ([`Self::from_column`] reads it).
    pub(super) fn is_column_constraint(option: &ColumnOption) -> bool {
        matches!(
            option,
            ColumnOption::Unique(_) | ColumnOption::Check(_) | ColumnOption::ForeignKey(_)
        )
    }

    /// A column's UNIQUE, CHECK or REFERENCES option; `None` for any
    /// other option.
    pub(super) fn from_column(
        column: &str,
        name: Option<&Ident>,
        option: &ColumnOption,
    ) -> Result<Option<Self>, ServerError> {
        let name = name.map(normalize_ident);
        Ok(Some(match option {
            ColumnOption::Unique(u) => {
                characteristics(&u.characteristics)?;
                Self::Unique {
                    name: name.or_else(|| u.name.as_ref().map(normalize_ident)),
                    columns: vec![column.to_string()],
                }
            }
            ColumnOption::Check(c) => Self::Check {
                name: name.or_else(|| c.name.as_ref().map(normalize_ident)),
                expr: (*c.expr).clone(),
            },
            ColumnOption::ForeignKey(f) => {
                characteristics(&f.characteristics)?;
                Self::ForeignKey {
                    name: name.or_else(|| f.name.as_ref().map(normalize_ident)),
                    columns: vec![column.to_string()],
                    parent: f.foreign_table.clone(),
                    parent_columns: names(&f.referred_columns),
                    on_delete: action(f.on_delete)?,
                    on_update: action(f.on_update)?,
                }
            }
            _ => return Ok(None),
        }))
    }

    /// Adding order: a foreign key may reference a unique constraint
    /// declared after it in the same statement.
    pub(super) fn order(&self) -> u8 {
        match self {
            Self::Unique { .. } => 0,
            Self::Check { .. } => 1,
            Self::ForeignKey { .. } => 2,
        }
    }
}

/// The column names an expression mentions, in order.
fn mentioned_columns(expr: &SqlExpr) -> Vec<String> {
    struct Names(Vec<String>);
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &SqlExpr) -> std::ops::ControlFlow<()> {
            match expr {
                SqlExpr::Identifier(i) => self.0.push(normalize_ident(i)),
                SqlExpr::CompoundIdentifier(parts) => {
                    if let Some(last) = parts.last() {
                        self.0.push(normalize_ident(last));
                    }
                }
                _ => {}
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut names = Names(Vec::new());
    let _ = expr.visit(&mut names);
    names.0
}

fn duplicate_constraint(name: &str, table: &str) -> ServerError {
    ServerError::Sqlstate {
        code: "42710",
        message: format!("constraint \"{name}\" for relation \"{table}\" already exists"),
    }
}

/// The given name, unless the table has a constraint of that name
/// (42710), or one chosen PostgreSQL's way (`table_columns_suffix`).
fn constraint_name(
    catalog: &Catalog,
    def: &TableDef,
    taken: &[String],
    name: Option<String>,
    columns: &[String],
    suffix: &str,
) -> Result<String, ServerError> {
    match name {
        Some(n) if taken.contains(&n) => Err(duplicate_constraint(&n, &def.name)),
        Some(n) => Ok(n),
        None => Ok(catalog.choose_constraint_name(&def.schema, &def.name, columns, suffix, taken)),
    }
}

fn invalid_fk(message: String) -> ServerError {
    ServerError::Sqlstate {
        code: "42830",
        message,
    }
}

impl Session {
    /// Adds a constraint to `def`, a table being created or altered (not
    /// yet in `catalog` in the first case). Returns what existing rows
    /// must be checked for.
    pub(super) fn add_constraint(
        &self,
        catalog: &mut Catalog,
        def: &mut TableDef,
        constraint: NewConstraint,
    ) -> Result<Validate, ServerError> {
        let mut taken: Vec<String> = def.constraint_names();
        taken.extend(def.indexes.iter().map(|i| i.name.clone()));
        let has_column = |def: &TableDef, c: &String| def.columns.iter().any(|d| &d.name == c);
        match constraint {
            NewConstraint::Unique { name, columns } => {
                if let Some(c) = columns.iter().find(|c| !has_column(def, c)) {
                    return Err(ServerError::UndefinedColumn(c.clone()));
                }
                // The constraint's index is a relation: its name clashes
                // with relations first, as in PostgreSQL.
                if let Some(n) = &name
                    && (catalog.relation_exists(&def.schema, n)
                        || def.indexes.iter().any(|i| &i.name == n)
                        || *n == def.name)
                {
                    return Err(ServerError::DuplicateTable(n.clone()));
                }
                let name = constraint_name(catalog, def, &taken, name, &columns, "key")?;
                def.indexes.push(IndexDef {
                    id: catalog.allocate_id(),
                    name,
                    columns,
                    unique: true,
                    constraint: true,
                });
                Ok(Validate::Nothing)
            }
            NewConstraint::Check { name, expr } => {
                self.plan_check(def, &expr)?;
                let first: Vec<String> = mentioned_columns(&expr)
                    .into_iter()
                    .find(|c| has_column(def, c))
                    .into_iter()
                    .collect();
                let name = constraint_name(catalog, def, &taken, name, &first, "check")?;
                def.checks.push(CheckDef {
                    id: catalog.allocate_id(),
                    name: name.clone(),
                    expr: expr.to_string(),
                });
                Ok(Validate::Check(name))
            }
            NewConstraint::ForeignKey {
                name,
                columns,
                parent,
                parent_columns,
                on_delete,
                on_update,
            } => {
                if let Some(c) = columns.iter().find(|c| !has_column(def, c)) {
                    return Err(ServerError::UndefinedColumn(c.clone()));
                }
                let (schema, table) = self.split_name(&parent)?;
                let parent_def: TableDef = if schema == def.schema && table == def.name {
                    def.clone()
                } else {
                    match catalog.table(&schema, &table) {
                        Some(p) => (**p).clone(),
                        None if catalog.relation_exists(&schema, &table) => {
                            return Err(ServerError::Sqlstate {
                                code: "42809",
                                message: format!("referenced relation \"{table}\" is not a table"),
                            });
                        }
                        None => return Err(ServerError::UndefinedTable(table)),
                    }
                };
                let parent_columns = if parent_columns.is_empty() {
                    if parent_def.primary_key.is_empty() {
                        return Err(invalid_fk(format!(
                            "there is no primary key for referenced table \"{table}\""
                        )));
                    }
                    parent_def.primary_key.clone()
                } else {
                    parent_columns
                };
                if let Some(c) = parent_columns.iter().find(|c| !has_column(&parent_def, c)) {
                    return Err(ServerError::UndefinedColumn(c.clone()));
                }
                if parent_columns.len() != columns.len() {
                    return Err(invalid_fk(
                        "number of referencing and referenced columns for foreign key disagree"
                            .into(),
                    ));
                }
                if !parent_def.is_unique_key(&parent_columns) {
                    return Err(invalid_fk(format!(
                        "there is no unique constraint matching given keys for referenced table \"{table}\""
                    )));
                }
                let name = constraint_name(catalog, def, &taken, name, &columns, "fkey")?;
                for (c, p) in columns.iter().zip(&parent_columns) {
                    let ty = |d: &TableDef, n: &String| {
                        d.columns
                            .iter()
                            .find(|x| &x.name == n)
                            .map(|x| x.sql_type.clone())
                            .expect("checked above")
                    };
                    let (a, b) = (ty(def, c), ty(&parent_def, p));
                    let data = |t: &weir_pgsem::SqlType| t.field("x", true).data_type().clone();
                    let (da, db) = (data(&a), data(&b));
                    let compatible = da == db
                        || (da.is_integer() && db.is_integer())
                        || (matches!(
                            da,
                            arrow::datatypes::DataType::Utf8
                                | arrow::datatypes::DataType::LargeUtf8
                                | arrow::datatypes::DataType::Utf8View
                        ) && matches!(
                            db,
                            arrow::datatypes::DataType::Utf8
                                | arrow::datatypes::DataType::LargeUtf8
                                | arrow::datatypes::DataType::Utf8View
                        ));
                    if !compatible {
                        return Err(ServerError::Sqlstate {
                            code: "42804",
                            message: format!(
                                "foreign key constraint \"{name}\" cannot be implemented: key columns \"{c}\" and \"{p}\" are of incompatible types: {} and {}",
                                a.display_name(),
                                b.display_name()
                            ),
                        });
                    }
                }
                def.foreign_keys.push(ForeignKeyDef {
                    id: catalog.allocate_id(),
                    name: name.clone(),
                    columns,
                    parent: parent_def.id,
                    parent_columns,
                    on_delete,
                    on_update,
                });
                Ok(Validate::ForeignKey(name))
            }
        }
    }

    /// Plans a CHECK expression over the table's columns: an unknown
    /// column or a non-boolean expression fails the DDL, not a later write.
    fn plan_check(&self, def: &TableDef, expr: &SqlExpr) -> Result<(), ServerError> {
        let empty = RecordBatch::new_empty(def.physical_schema());
        let frame = Frame::new(vec![(def.name.as_str(), &empty)])?;
        let (_, array) = self.evaluate(&frame, expr.clone(), None)?;
        if !matches!(array.data_type(), arrow::datatypes::DataType::Boolean) {
            return Err(ServerError::Sqlstate {
                code: "42804",
                message: format!(
                    "argument of CHECK must be type boolean, not type {}",
                    array.data_type()
                ),
            });
        }
        Ok(())
    }

    /// Every CHECK constraint over every row `ops` add (23514 naming the
    /// constraint). NULL passes, as in PostgreSQL.
    pub(super) fn check_rows(
        &self,
        catalog: &Catalog,
        ops: &[(ObjectId, TableWrite)],
    ) -> Result<(), ServerError> {
        for (id, op) in ops {
            let Some(def) = catalog.tables.get(id) else {
                continue;
            };
            if def.checks.is_empty() {
                continue;
            }
            let (Some(added), _) = crate::db::added_and_removed(op) else {
                continue;
            };
            for check in &def.checks {
                self.check_batch(def, check, &added)?;
            }
        }
        Ok(())
    }

    pub(super) fn check_batch(
        &self,
        def: &TableDef,
        check: &CheckDef,
        rows: &RecordBatch,
    ) -> Result<(), ServerError> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let expr = super::alter_table::parse_expr(&check.expr)?;
        let frame = Frame::new(vec![(def.name.as_str(), rows)])?;
        let (_, array) = self.evaluate(&frame, expr, None)?;
        let passed = array
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| ServerError::internal(format!("check {} is not boolean", check.name)))?;
        if let Some(i) = (0..passed.len()).find(|&i| passed.is_valid(i) && !passed.value(i)) {
            let values: Vec<String> = (0..def.columns.len())
                .map(|c| {
                    let column = rows.column(c);
                    if column.is_null(i) {
                        "null".into()
                    } else {
                        arrow::util::display::array_value_to_string(column, i).unwrap_or_default()
                    }
                })
                .collect();
            return Err(ServerError::Sqlstate {
                code: "23514",
                message: format!(
                    "new row for relation \"{}\" violates check constraint \"{}\": Failing row contains ({}).",
                    def.name,
                    check.name,
                    values.join(", ")
                ),
            });
        }
        Ok(())
    }

    /// Checks the rows a table already has against constraints just added
    /// to its definition (which the transaction's overlay now holds).
    pub(super) fn validate_existing(
        &self,
        table: ObjectId,
        validations: &[Validate],
    ) -> Result<(), ServerError> {
        let snapshot = self.snapshot();
        let (Some(def), Some(state)) = (
            snapshot.catalog.tables.get(&table),
            snapshot.tables.get(&table),
        ) else {
            return Ok(());
        };
        for v in validations {
            for batch in state.scan()?.iter() {
                match v {
                    Validate::Nothing => {}
                    Validate::Check(name) => {
                        if let Some(check) = def.checks.iter().find(|c| &c.name == name) {
                            self.check_batch(def, check, batch).map_err(|e| match e {
                                ServerError::Sqlstate { code: "23514", .. } => ServerError::Sqlstate {
                                    code: "23514",
                                    message: format!(
                                        "check constraint \"{name}\" of relation \"{}\" is violated by some row",
                                        def.name
                                    ),
                                },
                                e => e,
                            })?;
                        }
                    }
                    Validate::ForeignKey(name) => {
                        if let Some(fk) = def.foreign_keys.iter().find(|f| &f.name == name) {
                            snapshot.check_child_rows(def, fk, batch)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `CREATE [UNIQUE] INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON
    /// table [USING method] (columns)`.
    pub(super) fn create_index(
        &mut self,
        create: CreateIndex,
    ) -> Result<StatementResult, ServerError> {
        if create.predicate.is_some() {
            return Err(not_supported("a partial index (CREATE INDEX ... WHERE)"));
        }
        if !create.include.is_empty() {
            return Err(not_supported("CREATE INDEX ... INCLUDE"));
        }
        if create.nulls_distinct == Some(false) {
            return Err(not_supported("CREATE UNIQUE INDEX ... NULLS NOT DISTINCT"));
        }
        if create.concurrently && self.txn.as_ref().is_some_and(|t| t.explicit) {
            return Err(ServerError::Sqlstate {
                code: "25001",
                message: "CREATE INDEX CONCURRENTLY cannot run inside a transaction block".into(),
            });
        }
        let def = self.resolve_table(&create.table_name).map_err(|e| {
            match self.resolve_projection(&create.table_name) {
                Ok(_) => not_supported(
                    "CREATE INDEX on a projection (a projection is read by its group-by key and derived unique key already)",
                ),
                Err(_) => e,
            }
        })?;
        let columns: Vec<String> = create
            .columns
            .iter()
            .map(|c| column_of(&c.column.expr))
            .collect::<Result<_, _>>()?;
        if let Some(c) = columns
            .iter()
            .find(|c| !def.columns.iter().any(|d| &d.name == *c))
        {
            return Err(ServerError::UndefinedColumn(c.clone()));
        }
        let mut catalog = (*self.snapshot().catalog).clone();
        let name = match &create.name {
            Some(name) => {
                let parts = &name.0;
                let last = parts
                    .last()
                    .and_then(|p| p.as_ident())
                    .map(normalize_ident)
                    .ok_or_else(|| {
                        ServerError::invalid_param(format!("improper index name: {name}"))
                    })?;
                if catalog.relation_exists(&def.schema, &last) {
                    if create.if_not_exists {
                        self.notice(format!("relation \"{last}\" already exists, skipping"));
                        return Ok(command("CREATE INDEX"));
                    }
                    return Err(ServerError::DuplicateTable(last));
                }
                last
            }
            None => catalog.choose_constraint_name(&def.schema, &def.name, &columns, "idx", &[]),
        };
        let mut next = (*def).clone();
        next.indexes.push(IndexDef {
            id: catalog.allocate_id(),
            name: name.clone(),
            columns,
            unique: create.unique,
            constraint: false,
        });
        self.write(TxnWrites {
            ddl: vec![CatalogChange::ReplaceTable(next)],
            tables: vec![],
        })
        .map_err(|e| could_not_create(&name, e))?;
        Ok(command("CREATE INDEX"))
    }

    /// `DROP INDEX [CONCURRENTLY] [IF EXISTS] name, ... [CASCADE]`.
    pub(super) fn drop_indexes(
        &mut self,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
        changes: &mut Vec<CatalogChange>,
    ) -> Result<(), ServerError> {
        let catalog = self.snapshot().catalog.clone();
        let mut tables: Vec<TableDef> = Vec::new();
        for name in names {
            let (schema, index) = self.split_name(name)?;
            let found = catalog
                .index(&schema, &index)
                .map(|(t, i)| (t.id, i.clone()));
            if let Some(t) = catalog.tables.values().find(|t| {
                t.schema == schema && !t.primary_key.is_empty() && t.pkey_constraint_name() == index
            }) {
                return Err(ServerError::Sqlstate {
                    code: "2BP01",
                    message: format!(
                        "cannot drop index {index} because constraint {index} on table {} requires it",
                        t.name
                    ),
                });
            }
            let Some((table, def)) = found else {
                if if_exists {
                    self.notice(format!("index \"{index}\" does not exist, skipping"));
                    continue;
                }
                return Err(ServerError::Sqlstate {
                    code: "42704",
                    message: format!("index \"{index}\" does not exist"),
                });
            };
            let mut t = match tables.iter().position(|t| t.id == table) {
                Some(i) => tables.remove(i),
                None => (*catalog.tables[&table]).clone(),
            };
            if def.constraint {
                return Err(ServerError::Sqlstate {
                    code: "2BP01",
                    message: format!(
                        "cannot drop index {index} because constraint {index} on table {} requires it (drop the constraint instead: ALTER TABLE {} DROP CONSTRAINT {index})",
                        t.name, t.name
                    ),
                });
            }
            t.indexes.retain(|i| i.id != def.id);
            drop_dependent_foreign_keys(&catalog, &mut t, &def, cascade, &mut tables)?;
            tables.push(t);
        }
        changes.extend(tables.into_iter().map(CatalogChange::ReplaceTable));
        Ok(())
    }
}

/// Foreign keys that reference `table` through the unique `index` just
/// removed from it: refused (2BP01), or with CASCADE dropped from their
/// tables (`table` itself, or others collected in `tables`).
pub(super) fn drop_dependent_foreign_keys(
    catalog: &Catalog,
    table: &mut TableDef,
    index: &IndexDef,
    cascade: bool,
    tables: &mut Vec<TableDef>,
) -> Result<(), ServerError> {
    // Another unique index (or the key) over the same columns still
    // serves them.
    if !index.unique || table.is_unique_key(&index.columns) {
        return Ok(());
    }
    let dependents: Vec<(ObjectId, String)> = catalog
        .foreign_keys_to(table.id)
        .into_iter()
        .filter(|(_, f)| f.parent_columns == index.columns)
        .map(|(t, f)| (t.id, f.name.clone()))
        .chain(
            table
                .foreign_keys
                .iter()
                .filter(|f| f.parent == table.id && f.parent_columns == index.columns)
                .map(|f| (table.id, f.name.clone())),
        )
        .collect();
    if dependents.is_empty() {
        return Ok(());
    }
    if !cascade {
        return Err(ServerError::Sqlstate {
            code: "2BP01",
            message: format!(
                "cannot drop {} because constraint {} depends on it (use CASCADE to drop it too)",
                index.name,
                dependents
                    .iter()
                    .map(|d| d.1.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    for (id, fk) in dependents {
        if id == table.id {
            table.foreign_keys.retain(|f| f.name != fk);
            continue;
        }
        let position = tables.iter().position(|t| t.id == id);
        let mut child = match position {
            Some(i) => tables.remove(i),
            None => (*catalog.tables[&id]).clone(),
        };
        child.foreign_keys.retain(|f| f.name != fk);
        tables.push(child);
    }
    Ok(())
}

/// A unique index over rows that already repeat a key: PostgreSQL's words.
fn could_not_create(name: &str, e: ServerError) -> ServerError {
    match e {
        ServerError::UniqueViolation {
            columns, values, ..
        } => ServerError::Sqlstate {
            code: "23505",
            message: format!(
                "could not create unique index \"{name}\": Key ({columns})=({values}) is duplicated."
            ),
        },
        e => e,
    }
}

impl Session {
    /// `ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name [CASCADE]` on
    /// `def`; tables whose foreign keys CASCADE drops are added to
    /// `changes`.
    pub(super) fn drop_constraint(
        &mut self,
        catalog: &Catalog,
        def: &mut TableDef,
        name: &str,
        if_exists: bool,
        cascade: bool,
        changes: &mut Vec<CatalogChange>,
    ) -> Result<(), ServerError> {
        if !def.primary_key.is_empty() && name == def.pkey_constraint_name() {
            super::primary_key::drop_primary_key(catalog, def, cascade, changes)?;
        } else if let Some(at) = def
            .indexes
            .iter()
            .position(|i| i.constraint && i.name == name)
        {
            let index = def.indexes.remove(at);
            let mut tables = Vec::new();
            drop_dependent_foreign_keys(catalog, def, &index, cascade, &mut tables)?;
            changes.extend(tables.into_iter().map(CatalogChange::ReplaceTable));
        } else if let Some(at) = def.checks.iter().position(|c| c.name == name) {
            def.checks.remove(at);
        } else if let Some(at) = def.foreign_keys.iter().position(|f| f.name == name) {
            def.foreign_keys.remove(at);
        } else if if_exists {
            self.notice(format!(
                "constraint \"{name}\" of relation \"{}\" does not exist, skipping",
                def.name
            ));
        } else {
            return Err(ServerError::Sqlstate {
                code: "42704",
                message: format!(
                    "constraint \"{name}\" of relation \"{}\" does not exist",
                    def.name
                ),
            });
        }
        Ok(())
    }
}

/// What DROP COLUMN does to the table's constraints: indexes and
/// constraints on the column go with it, as in PostgreSQL; a foreign key
/// of another table that references it needs CASCADE (its key is dropped
/// then, added to `changes`).
pub(super) fn drop_column_constraints(
    catalog: &Catalog,
    def: &mut TableDef,
    column: &str,
    cascade: bool,
    changes: &mut Vec<CatalogChange>,
) -> Result<(), ServerError> {
    let has = |columns: &[String]| columns.iter().any(|c| c == column);
    let mut tables = Vec::new();
    let dropped: Vec<IndexDef> = def
        .indexes
        .iter()
        .filter(|i| has(&i.columns))
        .cloned()
        .collect();
    def.indexes.retain(|i| !has(&i.columns));
    for index in &dropped {
        drop_dependent_foreign_keys(catalog, def, index, cascade, &mut tables)?;
    }
    def.foreign_keys
        .retain(|f| !has(&f.columns) && !(f.parent == def.id && has(&f.parent_columns)));
    def.checks.retain(|c| {
        super::alter_table::parse_expr(&c.expr)
            .map(|e| !mentioned_columns(&e).iter().any(|m| m == column))
            .unwrap_or(true)
    });
    changes.extend(tables.into_iter().map(CatalogChange::ReplaceTable));
    Ok(())
}

/// What RENAME COLUMN does to the table's constraints (and to foreign keys
/// of other tables that reference the column, added to `changes`).
pub(super) fn rename_column_constraints(
    catalog: &Catalog,
    def: &mut TableDef,
    old: &str,
    new: &str,
    changes: &mut Vec<CatalogChange>,
) -> Result<(), ServerError> {
    let rename = |columns: &mut Vec<String>| {
        for c in columns.iter_mut() {
            if c == old {
                *c = new.to_string();
            }
        }
    };
    for index in &mut def.indexes {
        rename(&mut index.columns);
    }
    let id = def.id;
    for fk in &mut def.foreign_keys {
        rename(&mut fk.columns);
        if fk.parent == id {
            rename(&mut fk.parent_columns);
        }
    }
    for check in &mut def.checks {
        let mut expr = super::alter_table::parse_expr(&check.expr)?;
        rename_in_expr(&mut expr, old, new);
        check.expr = expr.to_string();
    }
    for (child, _) in catalog.foreign_keys_to(id) {
        if child.id == id {
            continue;
        }
        let mut child = child.clone();
        for fk in child.foreign_keys.iter_mut().filter(|f| f.parent == id) {
            rename(&mut fk.parent_columns);
        }
        changes.push(CatalogChange::ReplaceTable(child));
    }
    Ok(())
}

/// Renames column references in a CHECK expression, as PostgreSQL keeps
/// constraints by column number and so follows a rename.
fn rename_in_expr(expr: &mut SqlExpr, old: &str, new: &str) {
    struct Rename<'a>(&'a str, &'a str);
    impl datafusion::sql::sqlparser::ast::VisitorMut for Rename<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut SqlExpr) -> std::ops::ControlFlow<()> {
            if let SqlExpr::Identifier(ident) = expr
                && normalize_ident(ident) == self.0
            {
                *ident = Ident::with_quote('"', self.1);
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = datafusion::sql::sqlparser::ast::VisitMut::visit(expr, &mut Rename(old, new));
}

/// The catalog changes that take foreign keys into the `dropped` tables
/// off the tables that keep them (each such table replaced once), to go
/// before the drops. Without `cascade`, a foreign key from a table that is
/// not dropped too is refused (2BP01).
pub(super) fn unlink_foreign_keys(
    catalog: &Catalog,
    dropped: &[ObjectId],
    cascade: bool,
) -> Result<Vec<CatalogChange>, ServerError> {
    let mut unlinked: Vec<TableDef> = Vec::new();
    for id in dropped {
        for (child, fk) in catalog.foreign_keys_to(*id) {
            if child.id == *id {
                continue;
            }
            if !cascade && !dropped.contains(&child.id) {
                catalog.refuse_if_referenced(*id)?;
            }
            let at = unlinked.iter().position(|t| t.id == child.id);
            let mut next = match at {
                Some(i) => unlinked.remove(i),
                None => child.clone(),
            };
            next.foreign_keys.retain(|f| f.id != fk.id);
            unlinked.push(next);
        }
    }
    Ok(unlinked
        .into_iter()
        .map(CatalogChange::ReplaceTable)
        .collect())
}
