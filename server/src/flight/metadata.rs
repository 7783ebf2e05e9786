//! Catalog metadata commands: GetSqlInfo, GetCatalogs, GetDbSchemas,
//! GetTables, GetTableTypes, GetPrimaryKeys, and the key listings.
//!
//! Each command answers `GetFlightInfo` with the result schema and a ticket
//! that is the command itself; `DoGet` builds the rows from a fresh session's
//! view of the catalog (`list_schemas` / `list_tables`) with arrow-flight's
//! metadata builders, which also apply the filters and ordering the Flight SQL
//! spec prescribes. Weir has no foreign keys, so exported/imported keys and
//! cross references are empty results with the specified schema.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, Int32Builder, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_flight::sql::metadata::{GetCatalogsBuilder, SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetSqlInfo,
    CommandGetTableTypes, CommandGetTables, ProstMessageExt, SqlInfo, SqlNullOrdering,
    SqlSupportedCaseSensitivity, SqlSupportedTransaction,
};
use arrow_flight::{FlightDescriptor, FlightInfo};
use tonic::{Response, Status};

use super::encode::{DoGetStream, any_ticket, batches_response, flight_info};
use super::service::WeirFlightSql;
use super::status::with_sqlstate;

/// Table types `list_tables` reports.
pub(crate) const TABLE_TYPES: [&str; 4] = ["MATERIALIZED VIEW", "SYSTEM TABLE", "TABLE", "VIEW"];

/// The server's answers to `GetSqlInfo`, built once.
static SQL_INFO: LazyLock<Result<SqlInfoData, String>> = LazyLock::new(|| {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "weir");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // Arrow IPC format version (Schema.fbs MetadataVersion V5).
    b.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
    b.append(SqlInfo::FlightSqlServerReadOnly, false);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    b.append(SqlInfo::FlightSqlServerCancel, false);
    b.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    b.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    b.append(SqlInfo::FlightSqlServerStatementTimeout, 0i32);
    b.append(SqlInfo::FlightSqlServerTransactionTimeout, 0i32);
    b.append(SqlInfo::SqlDdlCatalog, false);
    b.append(SqlInfo::SqlDdlSchema, true);
    b.append(SqlInfo::SqlDdlTable, true);
    b.append(
        SqlInfo::SqlIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase as i32,
    );
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    b.append(
        SqlInfo::SqlQuotedIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32,
    );
    b.append(SqlInfo::SqlAllTablesAreSelectable, true);
    b.append(
        SqlInfo::SqlNullOrdering,
        SqlNullOrdering::SqlNullsSortedHigh as i32,
    );
    b.append(SqlInfo::SqlSearchStringEscape, "\\");
    b.append(SqlInfo::SqlExtraNameCharacters, "");
    b.append(SqlInfo::SqlSupportsColumnAliasing, true);
    b.append(SqlInfo::SqlNullPlusNullIsNull, true);
    b.append(SqlInfo::SqlSupportsTableCorrelationNames, true);
    b.append(SqlInfo::SqlSupportsExpressionsInOrderBy, true);
    b.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    b.append(SqlInfo::SqlSupportsLikeEscapeClause, true);
    b.append(SqlInfo::SqlSupportsNonNullableColumns, true);
    b.append(SqlInfo::SqlSchemaTerm, "schema");
    b.append(SqlInfo::SqlProcedureTerm, "function");
    b.append(SqlInfo::SqlCatalogTerm, "database");
    b.append(SqlInfo::SqlCatalogAtStart, true);
    b.append(SqlInfo::SqlSelectForUpdateSupported, false);
    b.append(SqlInfo::SqlStoredProceduresSupported, false);
    b.append(SqlInfo::SqlCorrelatedSubqueriesSupported, true);
    b.append(SqlInfo::SqlTransactionsSupported, false);
    b.build().map_err(|e| e.to_string())
});

fn sql_info() -> Result<&'static SqlInfoData, Status> {
    SQL_INFO
        .as_ref()
        .map_err(|e| with_sqlstate("XX000", format!("cannot build SqlInfo: {e}")))
}

/// The FlightInfo of a metadata command: its schema, and itself as ticket.
fn metadata_info<C: ProstMessageExt>(
    cmd: &C,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    flight_info(schema, Some(any_ticket(cmd)), descriptor)
}

fn batch_response(batch: RecordBatch) -> Response<DoGetStream> {
    batches_response(batch.schema(), vec![batch])
}

fn build_failed<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Status + '_ {
    move |e| with_sqlstate("XX000", format!("cannot build {what} result: {e}"))
}

impl WeirFlightSql {
    pub(crate) fn sql_info_flight_info(
        &self,
        query: CommandGetSqlInfo,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let schema = query.clone().into_builder(sql_info()?).schema();
        metadata_info(&query, &schema, descriptor)
    }

    pub(crate) fn sql_info_do_get(
        &self,
        query: CommandGetSqlInfo,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = query
            .into_builder(sql_info()?)
            .build()
            .map_err(build_failed("GetSqlInfo"))?;
        Ok(batch_response(batch))
    }

    pub(crate) fn catalogs_flight_info(
        &self,
        query: CommandGetCatalogs,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let schema = query.into_builder().schema();
        metadata_info(&query, &schema, descriptor)
    }

    pub(crate) fn catalogs_do_get(
        &self,
        query: CommandGetCatalogs,
    ) -> Result<Response<DoGetStream>, Status> {
        let catalogs: BTreeSet<String> = self
            .session()
            .list_schemas()
            .into_iter()
            .map(|(catalog, _)| catalog)
            .collect();
        let mut builder: GetCatalogsBuilder = query.into_builder();
        for catalog in catalogs {
            builder.append(catalog);
        }
        let batch = builder.build().map_err(build_failed("GetCatalogs"))?;
        Ok(batch_response(batch))
    }

    pub(crate) fn schemas_flight_info(
        &self,
        query: CommandGetDbSchemas,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(&query, &schema, descriptor)
    }

    pub(crate) fn schemas_do_get(
        &self,
        query: CommandGetDbSchemas,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        for (catalog, schema) in self.session().list_schemas() {
            builder.append(catalog, schema);
        }
        let batch = builder.build().map_err(build_failed("GetDbSchemas"))?;
        Ok(batch_response(batch))
    }

    pub(crate) fn tables_flight_info(
        &self,
        query: CommandGetTables,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(&query, &schema, descriptor)
    }

    pub(crate) async fn tables_do_get(
        &self,
        query: CommandGetTables,
    ) -> Result<Response<DoGetStream>, Status> {
        let tables = self.list_tables().await?;
        let mut builder = query.into_builder();
        for t in &tables {
            builder
                .append(
                    &t.catalog,
                    &t.schema,
                    &t.name,
                    t.kind,
                    t.arrow_schema.as_ref(),
                )
                .map_err(build_failed("GetTables"))?;
        }
        let batch = builder.build().map_err(build_failed("GetTables"))?;
        Ok(batch_response(batch))
    }

    pub(crate) fn table_types_flight_info(
        &self,
        query: CommandGetTableTypes,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let schema = query.into_builder().schema();
        metadata_info(&query, &schema, descriptor)
    }

    pub(crate) fn table_types_do_get(
        &self,
        query: CommandGetTableTypes,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        for kind in TABLE_TYPES {
            builder.append(kind);
        }
        let batch = builder.build().map_err(build_failed("GetTableTypes"))?;
        Ok(batch_response(batch))
    }

    pub(crate) fn primary_keys_flight_info(
        &self,
        query: CommandGetPrimaryKeys,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        metadata_info(&query, &primary_keys_schema(), descriptor)
    }

    pub(crate) async fn primary_keys_do_get(
        &self,
        query: CommandGetPrimaryKeys,
    ) -> Result<Response<DoGetStream>, Status> {
        let tables = self.list_tables().await?;
        let mut rows = PrimaryKeyRows::default();
        for t in &tables {
            let matches = t.name == query.table
                && query.catalog.as_ref().is_none_or(|c| c == &t.catalog)
                && query.db_schema.as_ref().is_none_or(|s| s == &t.schema);
            if matches {
                rows.append(&t.catalog, &t.schema, &t.name, &t.primary_key);
            }
        }
        let batch = rows.finish().map_err(build_failed("GetPrimaryKeys"))?;
        Ok(batch_response(batch))
    }

    /// GetExportedKeys / GetImportedKeys / GetCrossReference.
    pub(crate) fn keys_flight_info<C: ProstMessageExt>(
        &self,
        query: &C,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        metadata_info(query, &foreign_keys_schema(), descriptor)
    }

    /// Weir has no foreign keys: always the empty result.
    pub(crate) fn keys_do_get(&self) -> Response<DoGetStream> {
        batches_response(foreign_keys_schema(), Vec::new())
    }
}

/// Schema of `CommandGetPrimaryKeys` results (FlightSql.proto).
pub(crate) fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// Schema of exported/imported keys and cross reference results.
pub(crate) fn foreign_keys_schema() -> SchemaRef {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
}

/// Rows of a GetPrimaryKeys answer; key names follow PostgreSQL (`t_pkey`).
#[derive(Default)]
struct PrimaryKeyRows {
    catalog: StringBuilder,
    schema: StringBuilder,
    table: StringBuilder,
    column: StringBuilder,
    key_name: StringBuilder,
    sequence: Int32Builder,
}

impl PrimaryKeyRows {
    fn append(&mut self, catalog: &str, schema: &str, table: &str, key: &[String]) {
        for (i, column) in key.iter().enumerate() {
            self.catalog.append_value(catalog);
            self.schema.append_value(schema);
            self.table.append_value(table);
            self.column.append_value(column);
            self.key_name.append_value(format!("{table}_pkey"));
            self.sequence
                .append_value(i32::try_from(i + 1).unwrap_or(i32::MAX));
        }
    }

    fn finish(mut self) -> Result<RecordBatch, arrow::error::ArrowError> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.catalog.finish()),
            Arc::new(self.schema.finish()),
            Arc::new(self.table.finish()),
            Arc::new(self.column.finish()),
            Arc::new(self.key_name.finish()),
            Arc::new(self.sequence.finish()),
        ];
        RecordBatch::try_new(primary_keys_schema(), columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int32Type;

    #[test]
    fn sql_info_builds_and_names_the_server() {
        let data = sql_info().expect("builds");
        let batch = data
            .record_batch([SqlInfo::FlightSqlServerName as u32])
            .expect("selects");
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(
            batch
                .column(0)
                .as_primitive::<arrow::datatypes::UInt32Type>()
                .value(0),
            SqlInfo::FlightSqlServerName as u32
        );
    }

    #[test]
    fn primary_key_rows_follow_key_order() {
        let mut rows = PrimaryKeyRows::default();
        rows.append("weir", "public", "t", &["a".into(), "b".into()]);
        rows.append("weir", "public", "u", &[]);
        let batch = rows.finish().expect("valid");
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.column(3).as_string::<i32>().value(1), "b");
        assert_eq!(batch.column(4).as_string::<i32>().value(0), "t_pkey");
        let seq = batch.column(5).as_primitive::<Int32Type>();
        assert_eq!((seq.value(0), seq.value(1)), (1, 2));
        assert_eq!(seq.null_count(), 0);
    }

    #[test]
    fn empty_foreign_keys_have_the_spec_schema() {
        let schema = foreign_keys_schema();
        assert_eq!(schema.fields().len(), 13);
        assert_eq!(schema.field(11).data_type(), &DataType::UInt8);
    }
}
