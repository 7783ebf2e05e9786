//! Bulk ingest: `DoPut` with a `CommandStatementIngest` descriptor.
//!
//! The Arrow stream is decoded into record batches and handed to
//! [`crate::session::Session::ingest`], which matches columns by name and
//! returns the rows written. `table_definition_options` decide what happens
//! around that (see [`plan_ingest`], a pure function of the options and
//! whether the table exists):
//!
//! | table exists | option             | action                         |
//! |--------------|--------------------|--------------------------------|
//! | no           | FAIL / unspecified | `NotFound` (42P01)             |
//! | no           | CREATE             | `CREATE TABLE` from the schema |
//! | yes          | FAIL               | `AlreadyExists` (42P07)        |
//! | yes          | APPEND / unspec.   | append                         |
//! | yes          | REPLACE            | `DROP TABLE`, then create      |
//!
//! The target names resolve like unquoted SQL identifiers (lower-cased,
//! unqualified means schema `public`), as `Session::ingest` resolves them.
//! Tables are created from the Arrow schema with the SQL type of each field
//! ([`sql_type`]; column names kept verbatim); a field with no SQL equivalent
//! fails with `0A000` naming it. REPLACE is not atomic (no transactions). Temporary tables and
//! transactional ingest are not supported.

use std::fmt::Write as _;

use arrow::datatypes::{DataType, IntervalUnit, Schema, TimeUnit};
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{CommandStatementIngest, TableExistsOption, TableNotExistOption};
use tonic::Status;

use super::encode::{Outcome, collect_batches};
use super::service::WeirFlightSql;
use super::status::{to_status, unsupported, with_sqlstate};

/// The schema an unqualified ingest target resolves to.
const DEFAULT_SCHEMA: &str = "public";

/// What to do before appending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IngestPlan {
    Append,
    Create,
    Replace,
    FailNotFound,
    FailExists,
}

/// Decides the ingest action from the table definition options.
pub(crate) fn plan_ingest(
    exists: bool,
    if_not_exist: TableNotExistOption,
    if_exists: TableExistsOption,
) -> IngestPlan {
    if exists {
        match if_exists {
            TableExistsOption::Fail => IngestPlan::FailExists,
            TableExistsOption::Replace => IngestPlan::Replace,
            TableExistsOption::Append | TableExistsOption::Unspecified => IngestPlan::Append,
        }
    } else {
        match if_not_exist {
            TableNotExistOption::Create => IngestPlan::Create,
            TableNotExistOption::Fail | TableNotExistOption::Unspecified => {
                IngestPlan::FailNotFound
            }
        }
    }
}

impl WeirFlightSql {
    /// `DoPut(CommandStatementIngest)`: the number of rows written.
    pub(crate) async fn ingest(
        &self,
        cmd: CommandStatementIngest,
        stream: PeekableFlightDataStream,
    ) -> Result<i64, Status> {
        if cmd.temporary {
            return Err(unsupported("ingest into a temporary table"));
        }
        if cmd.transaction_id.is_some() {
            return Err(unsupported("transactional ingest (statements autocommit)"));
        }
        if cmd.table.is_empty() {
            return Err(with_sqlstate("42602", "ingest target table name is empty"));
        }
        let (if_not_exist, if_exists) = match cmd.table_definition_options {
            Some(o) => (
                TableNotExistOption::try_from(o.if_not_exist)
                    .unwrap_or(TableNotExistOption::Unspecified),
                TableExistsOption::try_from(o.if_exists).unwrap_or(TableExistsOption::Unspecified),
            ),
            None => (
                TableNotExistOption::Unspecified,
                TableExistsOption::Unspecified,
            ),
        };
        let (schema, batches) = collect_batches(stream).await?;
        // `Session::ingest` resolves names as unquoted SQL identifiers
        // (folded to lower case, default schema `public`); match it.
        let table = cmd.table.to_lowercase();
        let db_schema = cmd.schema.as_deref().map(str::to_lowercase);
        let display = display_name(db_schema.as_deref(), &table);
        let tables = self.list_tables().await?;
        let exists = tables.iter().any(|t| {
            t.kind == "TABLE"
                && t.name == table
                && t.schema == db_schema.as_deref().unwrap_or(DEFAULT_SCHEMA)
                && cmd.catalog.as_ref().is_none_or(|c| c == &t.catalog)
        });

        let mut session = self.session();
        let target = quoted_name(db_schema.as_deref(), &table);
        match plan_ingest(exists, if_not_exist, if_exists) {
            IngestPlan::FailNotFound => {
                return Err(with_sqlstate(
                    "42P01",
                    format!(
                        "relation {display} does not exist (ingest with if_not_exist=FAIL; \
                         use mode \"create\" or \"create_append\" to create it)"
                    ),
                ));
            }
            IngestPlan::FailExists => {
                return Err(with_sqlstate(
                    "42P07",
                    format!("relation {display} already exists (ingest with if_exists=FAIL)"),
                ));
            }
            IngestPlan::Append => {}
            IngestPlan::Create | IngestPlan::Replace => {
                let schema = schema
                    .or_else(|| batches.first().map(|b| b.schema()))
                    .ok_or_else(|| {
                        with_sqlstate("08P01", "ingest stream carries no schema to create from")
                    })?;
                let ddl = create_table_sql(&target, &schema)?;
                if exists {
                    let drop = format!("DROP TABLE {target}");
                    Outcome::from_simple(session.execute_simple(&drop).await)?;
                }
                Outcome::from_simple(session.execute_simple(&ddl).await)?;
            }
        }
        if batches.iter().all(|b| b.num_rows() == 0) {
            return Ok(0);
        }
        let written = session
            .ingest(&ingest_target(db_schema.as_deref(), &table), batches)
            .await
            .map_err(to_status)?;
        Ok(i64::try_from(written).unwrap_or(i64::MAX))
    }
}

/// The table name handed to `Session::ingest`.
fn ingest_target(schema: Option<&str>, table: &str) -> String {
    match schema {
        Some(s) => format!("{s}.{table}"),
        None => table.to_string(),
    }
}

/// `"schema"."table"` for messages.
fn display_name(schema: Option<&str>, table: &str) -> String {
    match schema {
        Some(s) => format!("\"{s}\".\"{table}\""),
        None => format!("\"{table}\""),
    }
}

/// A SQL identifier, always quoted so the name is taken verbatim.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quoted_name(schema: Option<&str>, table: &str) -> String {
    match schema {
        Some(s) => format!("{}.{}", quote_ident(s), quote_ident(table)),
        None => quote_ident(table),
    }
}

/// `CREATE TABLE` for an ingest stream's schema.
pub(crate) fn create_table_sql(table: &str, schema: &Schema) -> Result<String, Status> {
    if schema.fields().is_empty() {
        return Err(with_sqlstate(
            "42P16",
            "cannot create a table from an ingest stream without columns",
        ));
    }
    let mut sql = format!("CREATE TABLE {table} (");
    for (i, field) in schema.fields().iter().enumerate() {
        let ty = sql_type(field.data_type()).ok_or_else(|| {
            unsupported(format!(
                "creating a table from ingest with column \"{}\" of Arrow type {}",
                field.name(),
                field.data_type()
            ))
        })?;
        if i > 0 {
            sql.push_str(", ");
        }
        let _ = write!(sql, "{} {ty}", quote_ident(field.name()));
        if !field.is_nullable() {
            sql.push_str(" NOT NULL");
        }
    }
    sql.push(')');
    Ok(sql)
}

/// The SQL type Weir stores an Arrow type as (ARCHITECTURE.md §7 type table);
/// `None` when there is none.
pub(crate) fn sql_type(dt: &DataType) -> Option<String> {
    let name = match dt {
        DataType::Boolean => "BOOLEAN",
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "SMALLINT",
        DataType::Int32 | DataType::UInt16 => "INTEGER",
        DataType::Int64 | DataType::UInt32 => "BIGINT",
        DataType::Float16 | DataType::Float32 => "REAL",
        DataType::Float64 => "DOUBLE PRECISION",
        DataType::Decimal128(p, s) => return Some(format!("NUMERIC({p}, {s})")),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "TEXT",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTEA",
        DataType::Date32 | DataType::Date64 => "DATE",
        DataType::Time32(_) | DataType::Time64(_) => "TIME",
        DataType::Timestamp(_, None) => "TIMESTAMP",
        DataType::Timestamp(_, Some(_)) => "TIMESTAMPTZ",
        DataType::Interval(IntervalUnit::MonthDayNano) => "INTERVAL",
        DataType::Duration(TimeUnit::Microsecond) => "INTERVAL",
        DataType::Dictionary(_, value) => return sql_type(value),
        DataType::List(item) | DataType::LargeList(item) => {
            return match item.data_type() {
                DataType::List(_) | DataType::LargeList(_) => None,
                inner => sql_type(inner).map(|t| format!("{t}[]")),
            };
        }
        _ => return None,
    };
    Some(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;
    use std::sync::Arc;

    #[test]
    fn options_decide_the_plan() {
        use IngestPlan::*;
        use TableExistsOption as E;
        use TableNotExistOption as N;
        let cases = [
            (false, N::Unspecified, E::Unspecified, FailNotFound),
            (false, N::Fail, E::Append, FailNotFound),
            (false, N::Create, E::Fail, Create),
            (false, N::Create, E::Replace, Create),
            (true, N::Fail, E::Append, Append),
            (true, N::Fail, E::Unspecified, Append),
            (true, N::Create, E::Fail, FailExists),
            (true, N::Create, E::Replace, Replace),
        ];
        for (exists, n, e, want) in cases {
            assert_eq!(plan_ingest(exists, n, e), want, "{exists} {n:?} {e:?}");
        }
    }

    #[test]
    fn create_table_from_arrow_schema() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("Name", DataType::Utf8, true),
            Field::new("amount", DataType::Decimal128(12, 2), true),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
        ]);
        let sql = create_table_sql(&quoted_name(Some("public"), "t\"x"), &schema).expect("ddl");
        assert_eq!(
            sql,
            "CREATE TABLE \"public\".\"t\"\"x\" (\"id\" BIGINT NOT NULL, \"Name\" TEXT, \
             \"amount\" NUMERIC(12, 2), \"at\" TIMESTAMPTZ, \"tags\" TEXT[])"
        );
    }

    #[test]
    fn unsupported_types_are_named() {
        let schema = Schema::new(vec![Field::new("u", DataType::UInt64, true)]);
        let err = create_table_sql("t", &schema).expect_err("no SQL type for UInt64");
        assert_eq!(err.code(), tonic::Code::Unimplemented);
        assert!(err.message().contains("\"u\""), "{}", err.message());
        assert!(create_table_sql("t", &Schema::empty()).is_err());
    }
}
