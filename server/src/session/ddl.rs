//! CREATE and DROP of tables, schemas and users. Each produces catalog
//! changes that the transaction commits as one control-log entry.

use datafusion::sql::sqlparser::ast::helpers::key_value_options::KeyValueOptionKind;
use datafusion::sql::sqlparser::ast::{
    ColumnOption, CommentObject, CreateRole, CreateTable, CreateTableOptions, CreateUser, Expr,
    ObjectName, ObjectType, Password, SchemaName, SequenceOptions, SqlOption, TableConstraint,
    Value,
};

use super::constraints::{NewConstraint, unlink_foreign_keys};
use super::dml::normalize_ident;
use super::projection::drop_readers;
use super::sequence;
use super::{Session, StatementResult, command};
use crate::catalog::CatalogChange;
use crate::catalog::model::{
    ColumnDef, DEFAULT_SCHEMA, ROW_ID_COLUMN, TableDef, UserDef, WatermarkDef,
};
use crate::catalog::sequence::OwnedBy;
use crate::db::{TxnWrites, scram_secret};
use crate::error::ServerError;

impl Session {
    pub(super) fn split_name(&self, name: &ObjectName) -> Result<(String, String), ServerError> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| {
                p.as_ident()
                    .map(normalize_ident)
                    .unwrap_or_else(|| p.to_string())
            })
            .collect();
        match parts.as_slice() {
            [table] => Ok((self.vars.default_schema(), table.clone())),
            [schema, table] => Ok((schema.clone(), table.clone())),
            _ => Err(ServerError::invalid_param(format!(
                "improper qualified name: {name}"
            ))),
        }
    }

    pub(super) async fn create_table(
        &mut self,
        create: CreateTable,
    ) -> Result<StatementResult, ServerError> {
        if create.query.is_some() {
            return self.create_table_as(create).await;
        }
        if create.or_replace || create.external {
            return Err(ServerError::feature_not_supported(
                "CREATE OR REPLACE / EXTERNAL TABLE",
            ));
        }
        let (schema, name) = self.split_name(&create.name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if catalog.table(&schema, &name).is_some() {
            if create.if_not_exists {
                return Ok(command("CREATE TABLE"));
            }
            return Err(ServerError::DuplicateTable(name));
        }
        let mut columns = Vec::new();
        let mut primary_key: Vec<String> = Vec::new();
        let mut primary_key_name: Option<String> = None;
        // Columns that take their values from a sequence of their own.
        let mut sequences: Vec<(String, Vec<SequenceOptions>)> = Vec::new();
        let mut constraints: Vec<NewConstraint> = Vec::new();
        for column in &create.columns {
            let column_name = normalize_ident(&column.name);
            if column_name == ROW_ID_COLUMN {
                return Err(ServerError::invalid_param(format!(
                    "column name \"{ROW_ID_COLUMN}\" is reserved"
                )));
            }
            if columns.iter().any(|c: &ColumnDef| c.name == column_name) {
                return Err(ServerError::invalid_param(format!(
                    "column \"{column_name}\" specified more than once"
                )));
            }
            let (sql_type, mut wants_sequence) = sequence::column_type(&column.data_type)?;
            let mut def = ColumnDef {
                name: column_name.clone(),
                sql_type,
                nullable: true,
                default: None,
                generated: None,
            };
            for option in &column.options {
                match &option.option {
                    ColumnOption::Null => def.nullable = true,
                    ColumnOption::NotNull => def.nullable = false,
                    ColumnOption::Default(expr) => def.default = Some(expr.to_string()),
                    ColumnOption::PrimaryKey(pk) => {
                        if !primary_key.is_empty() {
                            return Err(ServerError::invalid_param(format!(
                                "multiple primary keys for table \"{name}\" are not allowed"
                            )));
                        }
                        primary_key.push(column_name.clone());
                        primary_key_name = pk
                            .name
                            .as_ref()
                            .or(option.name.as_ref())
                            .map(normalize_ident);
                    }
                    other if NewConstraint::is_column_constraint(other) => {
                        constraints.extend(NewConstraint::from_column(
                            &column_name,
                            option.name.as_ref(),
                            other,
                        )?);
                    }
                    other => match sequence::identity_option(other) {
                        Some(_) if wants_sequence.is_some() => {
                            return Err(ServerError::Syntax {
                                message: format!(
                                    "both default and identity specified for column \"{column_name}\" of table \"{name}\""
                                ),
                                position: None,
                            });
                        }
                        Some(identity) => wants_sequence = Some(identity),
                        None => {
                            return Err(ServerError::feature_not_supported(format!(
                                "column constraint {other}"
                            )));
                        }
                    },
                }
            }
            if let Some(wanted) = wants_sequence {
                if def.default.is_some() {
                    return Err(ServerError::Syntax {
                        message: format!(
                            "multiple default values specified for column \"{column_name}\" of table \"{name}\""
                        ),
                        position: None,
                    });
                }
                def.nullable = false;
                def.generated = Some(wanted.generated);
                sequences.push((column_name.clone(), wanted.options));
            }
            columns.push(def);
        }
        for constraint in &create.constraints {
            match constraint {
                TableConstraint::PrimaryKey(pk) => {
                    if !primary_key.is_empty() {
                        return Err(ServerError::invalid_param(format!(
                            "multiple primary keys for table \"{name}\" are not allowed"
                        )));
                    }
                    primary_key_name = pk.name.as_ref().map(normalize_ident);
                    for c in &pk.columns {
                        let Expr::Identifier(ident) = &c.column.expr else {
                            return Err(ServerError::feature_not_supported(
                                "a primary key on an expression",
                            ));
                        };
                        primary_key.push(normalize_ident(ident));
                    }
                }
                other => constraints.extend(NewConstraint::from_table(other)?),
            }
        }
        for key in &primary_key {
            let column = columns
                .iter_mut()
                .find(|c| &c.name == key)
                .ok_or_else(|| ServerError::UndefinedColumn(key.clone()))?;
            column.nullable = false;
        }
        if columns.is_empty() {
            return Err(ServerError::feature_not_supported(
                "a table without columns",
            ));
        }
        let (append_only, watermark) = table_clauses(&create.table_options, &columns)?;
        let mut catalog = (*catalog).clone();
        let mut def = TableDef {
            id: catalog.allocate_id(),
            schema,
            name,
            columns,
            primary_key,
            append_only,
            watermark,
            indexes: Vec::new(),
            checks: Vec::new(),
            foreign_keys: Vec::new(),
            primary_key_name,
        };
        match &def.primary_key_name {
            Some(key) if catalog.relation_exists(&def.schema, key) || *key == def.name => {
                return Err(ServerError::DuplicateTable(key.clone()));
            }
            // `t_pkey` can be taken by a table renamed from `t`, whose key
            // kept its name: then `t_pkey1`, ... as PostgreSQL names it.
            None if !def.primary_key.is_empty()
                && catalog.relation_exists(&def.schema, &def.pkey_constraint_name()) =>
            {
                def.primary_key_name =
                    Some(catalog.choose_constraint_name(&def.schema, &def.name, &[], "pkey", &[]));
            }
            _ => {}
        }
        let mut changes = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for (column, options) in sequences {
            let name = sequence::column_sequence_name(
                |n| {
                    catalog.relation_exists(&def.schema, n)
                        || n == def.name
                        || names.iter().any(|m| m == n)
                },
                &def.name,
                &column,
            );
            names.push(name.clone());
            let target = def
                .columns
                .iter_mut()
                .find(|c| c.name == column)
                .expect("the column was just declared");
            let mut seq = sequence::sequence_def(
                catalog.allocate_id(),
                def.schema.clone(),
                name,
                target.sql_type.clone(),
                &options,
            )
            .map_err(|e| match e {
                ServerError::InvalidParameterValue(m) if m.starts_with("sequence type") => {
                    ServerError::invalid_param(format!(
                        "identity column type must be smallint, integer, or bigint (column \"{column}\")"
                    ))
                }
                e => e,
            })?;
            seq.owned_by = Some(OwnedBy {
                table: def.id,
                column,
            });
            target.default = Some(seq.nextval_call());
            changes.push(CatalogChange::CreateSequence(seq));
        }
        constraints.sort_by_key(NewConstraint::order);
        for constraint in constraints {
            self.add_constraint(&mut catalog, &mut def, constraint)?;
        }
        // The watermark expression plans over the columns and keeps order.
        self.plan_context().table_watermark(&def)?;
        // Plan the defaults now so a bad DEFAULT fails the CREATE, not a later INSERT.
        self.ensure_defaults(&def)?;
        changes.insert(0, CatalogChange::CreateTable(def));
        self.write(TxnWrites {
            ddl: changes,
            tables: vec![],
        })?;
        Ok(command("CREATE TABLE"))
    }

    pub(super) fn create_schema(
        &mut self,
        name: SchemaName,
        if_not_exists: bool,
    ) -> Result<StatementResult, ServerError> {
        let name = match name {
            SchemaName::Simple(n) | SchemaName::NamedAuthorization(n, _) => {
                n.0.iter()
                    .map(|p| p.as_ident().map(normalize_ident).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(".")
            }
            SchemaName::UnnamedAuthorization(_) => {
                return Err(ServerError::feature_not_supported(
                    "CREATE SCHEMA AUTHORIZATION without a name",
                ));
            }
        };
        if self.snapshot().catalog.schemas.contains(&name) || is_system_schema(&name) {
            if if_not_exists {
                return Ok(command("CREATE SCHEMA"));
            }
            return Err(ServerError::DuplicateSchema(name));
        }
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateSchema { name }],
            tables: vec![],
        })?;
        Ok(command("CREATE SCHEMA"))
    }

    pub(super) fn create_user(
        &mut self,
        create: CreateUser,
    ) -> Result<StatementResult, ServerError> {
        let password = create
            .options
            .options
            .iter()
            .find(|o| o.option_name.eq_ignore_ascii_case("password"))
            .and_then(|o| match &o.option_value {
                KeyValueOptionKind::Single(v) => match &v.value {
                    Value::SingleQuotedString(s) => Some(s.clone()),
                    other => Some(other.to_string()),
                },
                _ => None,
            });
        self.add_user(
            normalize_ident(&create.name),
            password,
            create.if_not_exists,
        )
    }

    pub(super) fn create_role(
        &mut self,
        create: CreateRole,
    ) -> Result<StatementResult, ServerError> {
        let password = match &create.password {
            Some(Password::Password(Expr::Value(v))) => match &v.value {
                Value::SingleQuotedString(s) => Some(s.clone()),
                other => {
                    return Err(ServerError::invalid_param(format!(
                        "invalid password {other}"
                    )));
                }
            },
            Some(Password::NullPassword) | None => None,
            Some(other) => {
                return Err(ServerError::invalid_param(format!(
                    "invalid password {other:?}"
                )));
            }
        };
        for name in &create.names {
            let (_, name) = self.split_name(name)?;
            self.add_user(name, password.clone(), create.if_not_exists)?;
        }
        Ok(command("CREATE ROLE"))
    }

    fn add_user(
        &mut self,
        name: String,
        password: Option<String>,
        if_not_exists: bool,
    ) -> Result<StatementResult, ServerError> {
        if self.snapshot().catalog.users.contains_key(&name)
            || name == crate::catalog::model::SUPERUSER
        {
            if if_not_exists {
                return Ok(command("CREATE ROLE"));
            }
            return Err(ServerError::DuplicateRole(name));
        }
        let scram = password.map(|p| scram_secret(&p, uuid::Uuid::new_v4().as_bytes().to_vec()));
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateUser(UserDef {
                name,
                superuser: false,
                scram,
            })],
            tables: vec![],
        })?;
        Ok(command("CREATE ROLE"))
    }

    /// `COMMENT ON TABLE | COLUMN | MATERIALIZED VIEW | SEQUENCE name IS
    /// 'text' | NULL`.
    pub(super) fn comment_on(
        &mut self,
        object_type: CommentObject,
        name: &ObjectName,
        comment: Option<String>,
        if_exists: bool,
    ) -> Result<StatementResult, ServerError> {
        let relation = |session: &Self, kind: &CommentObject, name: &ObjectName| match kind {
            CommentObject::MaterializedView => session.resolve_projection(name).map(|p| p.id),
            CommentObject::Sequence => session.resolve_sequence(name).map(|s| s.id),
            _ => session.resolve_table(name).map(|t| t.id),
        };
        let found = match object_type {
            CommentObject::Table | CommentObject::MaterializedView | CommentObject::Sequence => {
                relation(self, &object_type, name).map(|id| (id, None))
            }
            CommentObject::Column => {
                let mut parts = name.0.clone();
                let column = parts.pop().filter(|_| !parts.is_empty()).ok_or_else(|| {
                    ServerError::invalid_param("COMMENT ON COLUMN needs table.column")
                })?;
                let column = column
                    .as_ident()
                    .map(normalize_ident)
                    .unwrap_or_else(|| column.to_string());
                let table = ObjectName(parts);
                self.resolve_table(&table)
                    .map(|t| t.id)
                    .or_else(|_| self.resolve_projection(&table).map(|p| p.id))
                    .map(|id| (id, Some(column)))
            }
            other => {
                return Err(ServerError::feature_not_supported(format!(
                    "COMMENT ON {other} (tables, columns, materialized views and sequences take comments)"
                )));
            }
        };
        let (object, column) = match found {
            Ok(found) => found,
            Err(_) if if_exists => return Ok(command("COMMENT")),
            Err(e) => return Err(e),
        };
        self.write(TxnWrites {
            ddl: vec![CatalogChange::Comment {
                object,
                column,
                comment,
            }],
            tables: vec![],
        })?;
        Ok(command("COMMENT"))
    }

    pub(super) fn drop_objects(
        &mut self,
        object_type: ObjectType,
        if_exists: bool,
        names: Vec<ObjectName>,
        cascade: bool,
    ) -> Result<StatementResult, ServerError> {
        let mut changes = Vec::new();
        let catalog = self.snapshot().catalog.clone();
        let tag = match object_type {
            ObjectType::Table => {
                let dropped: Vec<_> = names
                    .iter()
                    .filter_map(|n| self.resolve_table(n).ok())
                    .map(|d| d.id)
                    .collect();
                changes.extend(unlink_foreign_keys(&catalog, &dropped, cascade)?);
                for name in &names {
                    match self.resolve_table(name) {
                        Ok(def) => {
                            let what = format!("table {}", def.qualified_name());
                            drop_readers(&catalog, def.id, &what, cascade, &mut changes)?;
                            changes.push(CatalogChange::DropTable { id: def.id });
                            for owned in catalog.owned_sequences(def.id) {
                                changes.push(CatalogChange::DropSequence { id: owned.id });
                            }
                        }
                        Err(_) if if_exists => {}
                        Err(e) => return Err(e),
                    }
                }
                "DROP TABLE"
            }
            ObjectType::MaterializedView => {
                for name in &names {
                    match self.resolve_projection(name) {
                        Ok(def) => {
                            let what = format!("projection {}", def.qualified_name());
                            drop_readers(&catalog, def.id, &what, cascade, &mut changes)?;
                            let change = CatalogChange::DropProjection { id: def.id };
                            if !changes.contains(&change) {
                                changes.push(change);
                            }
                        }
                        Err(_) if if_exists => {}
                        Err(e) => return Err(e),
                    }
                }
                "DROP MATERIALIZED VIEW"
            }
            ObjectType::Schema => {
                for name in &names {
                    let (_, schema) = self.split_name(name)?;
                    if !catalog.schemas.contains(&schema) {
                        if if_exists {
                            continue;
                        }
                        return Err(ServerError::UndefinedSchema(schema));
                    }
                    if schema == DEFAULT_SCHEMA && !cascade {
                        // PostgreSQL allows dropping public; keep it simple and safe.
                    }
                    let tables: Vec<_> = catalog
                        .tables
                        .values()
                        .filter(|t| t.schema == schema)
                        .collect();
                    let projections: Vec<_> = catalog
                        .projections
                        .values()
                        .filter(|p| p.schema == schema)
                        .collect();
                    let sequences: Vec<_> = catalog
                        .sequences
                        .values()
                        .filter(|s| s.schema == schema)
                        .collect();
                    let views: Vec<_> = catalog
                        .views
                        .values()
                        .filter(|v| v.schema == schema)
                        .collect();
                    if (!tables.is_empty()
                        || !projections.is_empty()
                        || !sequences.is_empty()
                        || !views.is_empty())
                        && !cascade
                    {
                        let names = tables
                            .iter()
                            .map(|t| format!("table {}", t.name))
                            .chain(projections.iter().map(|p| format!("projection {}", p.name)))
                            .chain(sequences.iter().map(|s| format!("sequence {}", s.name)))
                            .chain(views.iter().map(|v| format!("view {}", v.name)));
                        return Err(ServerError::DependentObjects {
                            object: format!("schema {schema}"),
                            dependents: names.collect::<Vec<_>>().join(", "),
                        });
                    }
                    for v in &views {
                        drop_readers(&catalog, v.id, "", true, &mut changes)?;
                        let change = CatalogChange::DropView { id: v.id };
                        if !changes.contains(&change) {
                            changes.push(change);
                        }
                    }
                    for p in &projections {
                        drop_readers(&catalog, p.id, "", true, &mut changes)?;
                        let change = CatalogChange::DropProjection { id: p.id };
                        if !changes.contains(&change) {
                            changes.push(change);
                        }
                    }
                    let dropped: Vec<_> = tables.iter().map(|t| t.id).collect();
                    changes.extend(unlink_foreign_keys(&catalog, &dropped, true)?);
                    for t in &tables {
                        drop_readers(&catalog, t.id, "", true, &mut changes)?;
                        changes.push(CatalogChange::DropTable { id: t.id });
                    }
                    for s in catalog.sequences.values().filter(|s| s.schema == schema) {
                        changes.push(CatalogChange::DropSequence { id: s.id });
                    }
                    changes.push(CatalogChange::DropSchema { name: schema });
                }
                "DROP SCHEMA"
            }
            ObjectType::User | ObjectType::Role => {
                for name in &names {
                    let (_, user) = self.split_name(name)?;
                    if catalog.users.contains_key(&user) {
                        changes.push(CatalogChange::DropUser { name: user });
                    } else if !if_exists {
                        return Err(ServerError::invalid_param(format!(
                            "role \"{user}\" does not exist"
                        )));
                    }
                }
                "DROP ROLE"
            }
            ObjectType::Sequence => {
                self.drop_sequences(&names, if_exists, cascade, &mut changes)?;
                "DROP SEQUENCE"
            }
            ObjectType::View => {
                self.drop_views(&names, if_exists, cascade, &mut changes)?;
                "DROP VIEW"
            }
            ObjectType::Index => {
                self.drop_indexes(&names, if_exists, cascade, &mut changes)?;
                "DROP INDEX"
            }
            other => return Err(ServerError::feature_not_supported(format!("DROP {other}"))),
        };
        self.write(TxnWrites {
            ddl: changes,
            tables: vec![],
        })?;
        Ok(command(tag))
    }
}

fn is_system_schema(name: &str) -> bool {
    matches!(name, "pg_catalog" | "information_schema" | "weir_catalog")
}

/// A table's `APPEND ONLY` and `WATERMARK FOR col AS expr`, which the
/// parser reads as `WITH (...)` options
/// ([`weir_planner::table_clauses`]). Other `WITH` options (storage
/// parameters PostgreSQL dumps carry) are accepted and ignored, as before.
fn table_clauses(
    options: &CreateTableOptions,
    columns: &[ColumnDef],
) -> Result<(bool, Option<WatermarkDef>), ServerError> {
    use weir_planner::table_clauses::{
        APPEND_ONLY_OPTION, WATERMARK_AS_OPTION, WATERMARK_FOR_OPTION,
    };
    let CreateTableOptions::With(options) = options else {
        return Ok((false, None));
    };
    let (mut append_only, mut column, mut expr) = (false, None, None);
    for option in options {
        let SqlOption::KeyValue { key, value } = option else {
            continue;
        };
        let text = match value {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            other => other.to_string(),
        };
        match key.value.as_str() {
            APPEND_ONLY_OPTION => append_only = text.eq_ignore_ascii_case("true"),
            WATERMARK_FOR_OPTION => column = Some(text),
            WATERMARK_AS_OPTION => expr = Some(text),
            _ => {}
        }
    }
    let watermark = super::sources::watermark_of(columns, column.zip(expr))?;
    if watermark.is_some() && !append_only {
        return Err(ServerError::InvalidParameterValue(
            "WATERMARK FOR on a table needs APPEND ONLY (CREATE TABLE t (..., WATERMARK FOR ts AS \
             ts - INTERVAL '5' SECOND) APPEND ONLY): an UPDATE or DELETE could change a window \
             its watermark already closed"
                .into(),
        ));
    }
    Ok((append_only, watermark))
}
