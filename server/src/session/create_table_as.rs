//! `CREATE TABLE name AS query` and `SELECT ... INTO name
//! FROM ...`: a new table with the query's columns, filled with its rows in
//! the same transaction. As in PostgreSQL the table has no primary key and
//! no defaults; the command tag is `SELECT n`.

use datafusion::sql::sqlparser::ast::{
    CreateTable, Insert, ObjectName, Query, SetExpr, Statement, TableObject,
};
use weir_pgsem::SqlType;

use super::{Session, StatementResult};
use crate::catalog::CatalogChange;
use crate::catalog::model::{ColumnDef, ROW_ID_COLUMN, TableDef};
use crate::db::TxnWrites;
use crate::error::ServerError;

impl Session {
    pub(super) async fn create_table_as(
        &mut self,
        create: CreateTable,
    ) -> Result<StatementResult, ServerError> {
        let Some(query) = create.query.clone() else {
            return Err(ServerError::internal("CREATE TABLE AS without a query"));
        };
        if create.or_replace || create.external || create.temporary {
            return Err(ServerError::feature_not_supported(
                "CREATE OR REPLACE / TEMPORARY / EXTERNAL TABLE ... AS",
            ));
        }
        // PostgreSQL's `CREATE TABLE t (a, b) AS` (names only) does not
        // parse here; a typed column list is not PostgreSQL's.
        if !create.constraints.is_empty() || !create.columns.is_empty() {
            return Err(ServerError::Syntax {
                message: "CREATE TABLE ... AS takes its columns from the query: name them there \
                          with AS"
                    .into(),
                position: None,
            });
        }
        self.table_from_query(&create.name, create.if_not_exists, query)
            .await
    }

    /// `SELECT ... INTO name FROM ...` (not PL/pgSQL's `INTO variable`).
    pub(super) async fn select_into(
        &mut self,
        mut query: Box<Query>,
    ) -> Result<StatementResult, ServerError> {
        let SetExpr::Select(select) = query.body.as_mut() else {
            return Err(ServerError::internal("SELECT INTO without a SELECT"));
        };
        let Some(into) = select.into.take() else {
            return Err(ServerError::internal("SELECT INTO without INTO"));
        };
        if into.temporary || into.unlogged {
            return Err(ServerError::feature_not_supported(
                "SELECT INTO TEMPORARY / UNLOGGED",
            ));
        }
        self.table_from_query(&into.name, false, query).await
    }

    async fn table_from_query(
        &mut self,
        name: &ObjectName,
        if_not_exists: bool,
        query: Box<Query>,
    ) -> Result<StatementResult, ServerError> {
        let (schema, table) = self.split_name(name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if catalog.relation_exists(&schema, &table) {
            if if_not_exists {
                self.notice(format!("relation \"{table}\" already exists, skipping"));
                return Ok(super::command("CREATE TABLE AS"));
            }
            return Err(ServerError::DuplicateTable(table));
        }
        let plan = self.plan_statement(Statement::Query(query.clone())).await?;
        let fields = plan.schema().fields().clone();
        let mut columns: Vec<ColumnDef> = Vec::with_capacity(fields.len());
        for field in fields.iter() {
            let name = field.name().clone();
            if name == ROW_ID_COLUMN {
                return Err(ServerError::invalid_param(format!(
                    "column name \"{ROW_ID_COLUMN}\" is reserved"
                )));
            }
            if columns.iter().any(|c| c.name == name) {
                return Err(ServerError::Sqlstate {
                    code: "42701",
                    message: format!("column \"{name}\" specified more than once"),
                });
            }
            let sql_type = SqlType::from_arrow(field.data_type()).ok_or_else(|| {
                ServerError::feature_not_supported(format!(
                    "a table column of the query's type {} (column \"{name}\"; cast it)",
                    field.data_type()
                ))
            })?;
            columns.push(ColumnDef {
                name,
                sql_type,
                nullable: true,
                default: None,
                generated: None,
            });
        }
        let mut next = (*catalog).clone();
        let def = TableDef {
            id: next.allocate_id(),
            schema,
            name: table,
            columns,
            primary_key: Vec::new(),
            append_only: false,
            watermark: None,
            indexes: Vec::new(),
            checks: Vec::new(),
            foreign_keys: Vec::new(),
            primary_key_name: None,
        };
        let target = ObjectName::from(vec![
            datafusion::sql::sqlparser::ast::Ident::with_quote('"', &def.schema),
            datafusion::sql::sqlparser::ast::Ident::with_quote('"', &def.name),
        ]);
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateTable(def)],
            tables: vec![],
        })?;
        let inserted = self.insert(insert_of(target, query)?, None).await?;
        let count = match &inserted {
            StatementResult::Command { tag } => tag.rsplit(' ').next().unwrap_or("0").to_string(),
            _ => "0".into(),
        };
        Ok(super::command(&format!("SELECT {count}")))
    }
}

/// `INSERT INTO target <query>`, as the parser would have built it.
fn insert_of(target: ObjectName, query: Box<Query>) -> Result<Insert, ServerError> {
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let mut statements =
        datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, "INSERT INTO t SELECT 1")
            .map_err(|e| ServerError::internal(e.to_string()))?;
    let Some(Statement::Insert(mut insert)) = statements.pop() else {
        return Err(ServerError::internal("INSERT template did not parse"));
    };
    insert.table = TableObject::TableName(target);
    insert.source = Some(query);
    Ok(insert)
}
