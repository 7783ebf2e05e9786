//! `CREATE SEQUENCE` and `DROP SEQUENCE`, and the sequences `SERIAL` and
//! identity columns create for themselves. The functions that hand out
//! values are in [`super::sequence_functions`].

use datafusion::sql::sqlparser::ast::{
    ColumnOption, DataType, Expr, GeneratedAs, Ident, Insert, ObjectName, SequenceOptions, SetExpr,
    UnaryOperator, Update, Value,
};
use weir_common::ObjectId;
use weir_pgsem::SqlType;
use weir_planner::streaming_ddl::sequence::{AlterSequence, Owner, Restart, SequenceOption};

use super::{Session, StatementResult, command};
use crate::catalog::model::Generated;
use crate::catalog::sequence::{OwnedBy, SequenceDef};
use crate::catalog::{CatalogChange, TableDef};
use crate::db::TxnWrites;
use crate::error::ServerError;

/// What a column asks of a sequence: `SERIAL` or an identity.
pub(super) struct ColumnSequence {
    pub generated: Generated,
    pub options: Vec<SequenceOptions>,
}

/// The integer type a `SERIAL` spelling stands for.
pub(super) fn serial_type(data_type: &DataType) -> Option<SqlType> {
    let DataType::Custom(name, modifiers) = data_type else {
        return None;
    };
    if !modifiers.is_empty() || name.0.len() != 1 {
        return None;
    }
    match name.to_string().to_ascii_lowercase().as_str() {
        "smallserial" | "serial2" => Some(SqlType::Int2),
        "serial" | "serial4" => Some(SqlType::Int4),
        "bigserial" | "serial8" => Some(SqlType::Int8),
        _ => None,
    }
}

/// A declared column's type, and the sequence it asks for when it is
/// spelled `SERIAL`.
pub(super) fn column_type(
    data_type: &DataType,
) -> Result<(SqlType, Option<ColumnSequence>), ServerError> {
    Ok(match serial_type(data_type) {
        Some(t) => (
            t,
            Some(ColumnSequence {
                generated: Generated::Serial,
                options: Vec::new(),
            }),
        ),
        None => (
            SqlType::from_sql(data_type).map_err(ServerError::feature_not_supported)?,
            None,
        ),
    })
}

/// `GENERATED { ALWAYS | BY DEFAULT } AS IDENTITY [ ( options ) ]`.
pub(super) fn identity_option(option: &ColumnOption) -> Option<ColumnSequence> {
    let ColumnOption::Generated {
        generated_as,
        sequence_options,
        generation_expr: None,
        ..
    } = option
    else {
        return None;
    };
    Some(ColumnSequence {
        generated: match generated_as {
            GeneratedAs::Always => Generated::IdentityAlways,
            _ => Generated::IdentityByDefault,
        },
        options: sequence_options.clone().unwrap_or_default(),
    })
}

/// A name for a column's sequence that nothing in `schema` has:
/// `table_column_seq`, then with 1, 2, ... appended, as PostgreSQL does.
pub(super) fn column_sequence_name(
    taken: impl Fn(&str) -> bool,
    table: &str,
    column: &str,
) -> String {
    let base = format!("{table}_{column}_seq");
    std::iter::once(base.clone())
        .chain((1..).map(|n| format!("{base}{n}")))
        .find(|name| !taken(name))
        .expect("some suffix is free")
}

/// A sequence definition from `CREATE SEQUENCE` options, with PostgreSQL's
/// defaults and checks.
pub(super) fn sequence_def(
    id: ObjectId,
    schema: String,
    name: String,
    data_type: SqlType,
    options: &[SequenceOptions],
) -> Result<SequenceDef, ServerError> {
    if !matches!(data_type, SqlType::Int2 | SqlType::Int4 | SqlType::Int8) {
        return Err(ServerError::invalid_param(
            "sequence type must be smallint, integer, or bigint",
        ));
    }
    let options = options
        .iter()
        .map(from_sqlparser)
        .collect::<Result<Vec<_>, _>>()?;
    let mut def = SequenceDef {
        id,
        schema,
        name,
        incarnation: uuid::Uuid::new_v4(),
        data_type,
        start: 1,
        increment: 1,
        min: 1,
        max: 1,
        cache: 1,
        cycle: false,
        owned_by: None,
    };
    configure(&mut def, &options, true)?;
    Ok(def)
}

fn from_sqlparser(option: &SequenceOptions) -> Result<SequenceOption, ServerError> {
    Ok(match option {
        SequenceOptions::IncrementBy(e, _) => {
            SequenceOption::Increment(option_value(e, "INCREMENT")?)
        }
        SequenceOptions::MinValue(e) => SequenceOption::MinValue(
            e.as_ref()
                .map(|e| option_value(e, "MINVALUE"))
                .transpose()?,
        ),
        SequenceOptions::MaxValue(e) => SequenceOption::MaxValue(
            e.as_ref()
                .map(|e| option_value(e, "MAXVALUE"))
                .transpose()?,
        ),
        SequenceOptions::StartWith(e, _) => SequenceOption::Start(option_value(e, "START")?),
        SequenceOptions::Cache(e) => SequenceOption::Cache(option_value(e, "CACHE")?),
        SequenceOptions::Cycle(no) => SequenceOption::Cycle(!no),
    })
}

/// `ALTER SEQUENCE ... AS type`: a bound that was the old type's limit
/// becomes the new type's, as in PostgreSQL (the caller's [`configure`]
/// then checks the others against the new type).
fn retype(def: &mut SequenceDef, text: &str) -> Result<(), ServerError> {
    let data_type = datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(text)
    .and_then(|mut p| p.parse_data_type())
    .map_err(|e| ServerError::invalid_param(format!("type {text}: {e}")))?;
    let sql_type = SqlType::from_sql(&data_type).map_err(ServerError::feature_not_supported)?;
    if !matches!(sql_type, SqlType::Int2 | SqlType::Int4 | SqlType::Int8) {
        return Err(ServerError::invalid_param(
            "sequence type must be smallint, integer, or bigint",
        ));
    }
    let (old_min, old_max) = SequenceDef::type_range(&def.data_type);
    let (new_min, new_max) = SequenceDef::type_range(&sql_type);
    if def.max == old_max {
        def.max = new_max;
    }
    if def.min == old_min {
        def.min = new_min;
    }
    def.data_type = sql_type;
    Ok(())
}

/// Applies `options` to `def` and checks the result as PostgreSQL does. A
/// `fresh` definition takes PostgreSQL's defaults for what the options
/// leave out; an altered one keeps its values.
fn configure(
    def: &mut SequenceDef,
    options: &[SequenceOption],
    fresh: bool,
) -> Result<(), ServerError> {
    let (type_min, type_max) = SequenceDef::type_range(&def.data_type);
    // Outer `None`: not given; `Some(None)`: NO MINVALUE / NO MAXVALUE.
    let (mut min, mut max, mut start) = (None, None, None);
    for option in options {
        match option {
            SequenceOption::Increment(n) => def.increment = *n,
            SequenceOption::MinValue(v) => min = Some(*v),
            SequenceOption::MaxValue(v) => max = Some(*v),
            SequenceOption::Start(n) => start = Some(*n),
            SequenceOption::Cache(n) => def.cache = *n,
            SequenceOption::Cycle(on) => def.cycle = *on,
        }
    }
    if def.increment == 0 {
        return Err(ServerError::invalid_param("INCREMENT must not be zero"));
    }
    let ascending = def.increment > 0;
    def.min = match min {
        Some(Some(v)) => v,
        Some(None) => {
            if ascending {
                1
            } else {
                type_min
            }
        }
        None if fresh => {
            if ascending {
                1
            } else {
                type_min
            }
        }
        None => def.min,
    };
    def.max = match max {
        Some(Some(v)) => v,
        Some(None) => {
            if ascending {
                type_max
            } else {
                -1
            }
        }
        None if fresh => {
            if ascending {
                type_max
            } else {
                -1
            }
        }
        None => def.max,
    };
    let type_name = def.data_type.display_name();
    for (what, value) in [("MINVALUE", def.min), ("MAXVALUE", def.max)] {
        if value < type_min || value > type_max {
            return Err(ServerError::invalid_param(format!(
                "{what} ({value}) is out of range for sequence data type {type_name}"
            )));
        }
    }
    if def.min >= def.max {
        return Err(ServerError::invalid_param(format!(
            "MINVALUE ({}) must be less than MAXVALUE ({})",
            def.min, def.max
        )));
    }
    def.start = match start {
        Some(v) => v,
        None if fresh => {
            if ascending {
                def.min
            } else {
                def.max
            }
        }
        None => def.start,
    };
    check_in_range(def, def.start, "START")?;
    if def.cache < 1 {
        return Err(ServerError::invalid_param(format!(
            "CACHE ({}) must be greater than zero",
            def.cache
        )));
    }
    Ok(())
}

fn check_in_range(def: &SequenceDef, value: i64, what: &str) -> Result<(), ServerError> {
    if value < def.min {
        return Err(ServerError::invalid_param(format!(
            "{what} value ({value}) cannot be less than MINVALUE ({})",
            def.min
        )));
    }
    if value > def.max {
        return Err(ServerError::invalid_param(format!(
            "{what} value ({value}) cannot be greater than MAXVALUE ({})",
            def.max
        )));
    }
    Ok(())
}

fn option_value(expr: &Expr, what: &str) -> Result<i64, ServerError> {
    let (negative, expr) = match expr {
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => (true, expr.as_ref()),
        Expr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        } => (false, expr.as_ref()),
        other => (false, other),
    };
    let parsed = match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse::<i64>().ok(),
            _ => None,
        },
        _ => None,
    };
    let value = parsed.ok_or_else(|| ServerError::Syntax {
        message: format!("{what} takes an integer, not {expr}"),
        position: None,
    })?;
    Ok(if negative { -value } else { value })
}

impl Session {
    pub(super) fn create_sequence(
        &mut self,
        if_not_exists: bool,
        name: &ObjectName,
        data_type: Option<&DataType>,
        options: &[SequenceOptions],
        owned_by: Option<&ObjectName>,
    ) -> Result<StatementResult, ServerError> {
        let (schema, name) = self.split_name(name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if catalog.relation_exists(&schema, &name) {
            if if_not_exists {
                return Ok(command("CREATE SEQUENCE"));
            }
            return Err(ServerError::DuplicateTable(name));
        }
        let data_type = match data_type {
            None => SqlType::Int8,
            Some(t) => SqlType::from_sql(t).map_err(ServerError::invalid_param)?,
        };
        let mut catalog = (*catalog).clone();
        let mut def = sequence_def(catalog.allocate_id(), schema, name, data_type, options)?;
        if let Some(owner) = owned_by {
            def.owned_by = self.owned_by(owner)?;
        }
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateSequence(def)],
            tables: vec![],
        })?;
        Ok(command("CREATE SEQUENCE"))
    }

    /// `OWNED BY table.column` (or `NONE`).
    fn owned_by(&self, owner: &ObjectName) -> Result<Option<OwnedBy>, ServerError> {
        let mut parts = owner.0.clone();
        if parts.len() == 1 && owner.to_string().eq_ignore_ascii_case("none") {
            return Ok(None);
        }
        let Some(column) = parts.pop() else {
            return Err(ServerError::invalid_param("OWNED BY needs table.column"));
        };
        if parts.is_empty() {
            return Err(ServerError::invalid_param(
                "invalid OWNED BY option: specify OWNED BY table.column or OWNED BY NONE",
            ));
        }
        let table = self.resolve_table(&ObjectName(parts))?;
        let column = column
            .as_ident()
            .map(super::dml::normalize_ident)
            .unwrap_or_else(|| column.to_string());
        if !table.columns.iter().any(|c| c.name == column) {
            return Err(ServerError::UndefinedColumn(column));
        }
        Ok(Some(OwnedBy {
            table: table.id,
            column,
        }))
    }

    /// `ALTER SEQUENCE`: options change the definition (in the
    /// transaction); `RESTART` sets the value at once, as `setval` does.
    pub(super) fn alter_sequence(
        &mut self,
        alter: AlterSequence,
    ) -> Result<StatementResult, ServerError> {
        let quoted = |parts: &[String]| {
            ObjectName::from(
                parts
                    .iter()
                    .map(|p| Ident::with_quote('"', p))
                    .collect::<Vec<_>>(),
            )
        };
        let found = match self.resolve_sequence(&quoted(&alter.name)) {
            Ok(found) => found,
            Err(_) if alter.if_exists => return Ok(command("ALTER SEQUENCE")),
            Err(e) => return Err(e),
        };
        let mut def = SequenceDef::clone(&found);
        if let Some(text) = &alter.data_type {
            retype(&mut def, text)?;
        }
        configure(&mut def, &alter.options, false)?;
        if let Some(owner) = &alter.owned_by {
            def.owned_by = match owner {
                Owner::Nobody => None,
                Owner::Column(parts) => self.owned_by(&quoted(parts))?,
            };
        }
        let restart = alter.restart.as_ref().map(|restart| match restart {
            Restart::AtStart => def.start,
            Restart::At(value) => *value,
        });
        if let Some(value) = restart {
            check_in_range(&def, value, "RESTART")?;
        }
        if def != *found {
            self.write(TxnWrites {
                ddl: vec![CatalogChange::ReplaceSequence(def.clone())],
                tables: vec![],
            })?;
        }
        if let Some(value) = restart {
            self.db.sequence_values().set(&def, value, false)?;
        }
        Ok(command("ALTER SEQUENCE"))
    }

    /// Resolves a possibly qualified sequence name in this statement's snapshot.
    pub(super) fn resolve_sequence(
        &self,
        name: &ObjectName,
    ) -> Result<std::sync::Arc<SequenceDef>, ServerError> {
        let (schema, bare) = self.split_name(name)?;
        let snapshot = self.snapshot();
        let qualified = name.0.len() > 1;
        snapshot
            .catalog
            .sequence(&schema, &bare)
            .or_else(|| (!qualified).then(|| snapshot.catalog.sequence("public", &bare))?)
            .cloned()
            .ok_or_else(|| ServerError::UndefinedTable(bare))
    }

    /// The changes of `DROP SEQUENCE`: refused (2BP01) for a sequence a
    /// column's default uses, unless `CASCADE` (which drops the default).
    pub(super) fn drop_sequences(
        &self,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
        changes: &mut Vec<CatalogChange>,
    ) -> Result<(), ServerError> {
        let catalog = self.snapshot().catalog.clone();
        for name in names {
            let def = match self.resolve_sequence(name) {
                Ok(def) => def,
                Err(_) if if_exists => continue,
                Err(e) => return Err(e),
            };
            let users = catalog.sequence_users(&def);
            if !users.is_empty() {
                if !cascade {
                    return Err(ServerError::DependentObjects {
                        object: format!("sequence {}", def.name),
                        dependents: users
                            .iter()
                            .map(|(t, c)| {
                                format!("default value for column {c} of table {}", t.name)
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
                for (table, column) in users {
                    let mut table = TableDef::clone(table);
                    for c in table.columns.iter_mut().filter(|c| c.name == column) {
                        c.default = None;
                        c.generated = None;
                    }
                    changes.push(CatalogChange::ReplaceTable(table));
                }
            }
            changes.push(CatalogChange::DropSequence { id: def.id });
        }
        Ok(())
    }
}

/// `GENERATED ALWAYS` identity columns take no value but `DEFAULT` (428C9,
/// as PostgreSQL; `OVERRIDING SYSTEM VALUE` is not parsed yet).
pub(super) fn refuse_identity_values(
    def: &TableDef,
    insert: &Insert,
    targets: &[String],
) -> Result<(), ServerError> {
    for (i, target) in targets.iter().enumerate() {
        let always = def
            .columns
            .iter()
            .any(|c| &c.name == target && c.generated == Some(Generated::IdentityAlways));
        if !always {
            continue;
        }
        let given = match insert.source.as_deref().map(|q| q.body.as_ref()) {
            Some(SetExpr::Values(values)) => values
                .rows
                .iter()
                .any(|row| row.content.get(i).is_some_and(|e| !is_default_keyword(e))),
            _ => true,
        };
        if given {
            return Err(ServerError::Sqlstate {
                code: "428C9",
                message: format!(
                    "cannot insert a non-DEFAULT value into column \"{target}\": it is an identity column defined as GENERATED ALWAYS"
                ),
            });
        }
    }
    Ok(())
}

/// `SET column = DEFAULT`: the column's default expression (its
/// sequence's `nextval` for serial and identity columns, evaluated per
/// row), or NULL for a column without one, as PostgreSQL does.
pub(super) fn defaults_for_default_keyword(
    def: &TableDef,
    assignments: &mut [datafusion::sql::sqlparser::ast::Assignment],
) -> Result<(), ServerError> {
    for assignment in assignments {
        if !is_default_keyword(&assignment.value) {
            continue;
        }
        let (index, _) =
            super::dml::assigned_column(def, assignment, "UPDATE ... SET (a, b) = ...")?;
        assignment.value = match &def.columns[index].default {
            Some(text) => super::alter_table::parse_expr(text)?,
            None => Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
        };
    }
    Ok(())
}

/// `DEFAULT` in a VALUES row, which sqlparser reads as an identifier.
pub(super) fn is_default_keyword(expr: &Expr) -> bool {
    matches!(expr, Expr::Identifier(id)
        if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default"))
}

/// `UPDATE` may not set a `GENERATED ALWAYS` identity column (428C9) but
/// to `DEFAULT`.
pub(super) fn refuse_identity_updates(def: &TableDef, update: &Update) -> Result<(), ServerError> {
    for assignment in &update.assignments {
        let (index, column) =
            super::dml::assigned_column(def, assignment, "UPDATE ... SET (a, b) = ...")?;
        if def.columns[index].generated == Some(Generated::IdentityAlways)
            && !is_default_keyword(&assignment.value)
        {
            return Err(ServerError::Sqlstate {
                code: "428C9",
                message: format!(
                    "column \"{column}\" can only be updated to DEFAULT: it is an identity column defined as GENERATED ALWAYS"
                ),
            });
        }
    }
    Ok(())
}
