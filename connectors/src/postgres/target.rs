//! The postgres sink's target table: checking it against the sink's
//! columns, whether it holds rows, and creating it for a sink (a
//! destination) that owns it.

use arrow::datatypes::DataType;
use tokio_postgres::Client;

use super::{Target, bad_option, pg_error, quote};
use crate::ConnectorError;

/// Whether the target table exists.
pub(crate) async fn target_exists(
    client: &Client,
    target: &Target,
) -> Result<bool, ConnectorError> {
    let row = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&target.qualified()])
        .await
        .map_err(|e| pg_error("looking the target table up", e))?;
    Ok(row.get(0))
}

/// Whether the target table holds any row.
pub(crate) async fn target_holds_rows(
    client: &impl tokio_postgres::GenericClient,
    target: &Target,
) -> Result<bool, ConnectorError> {
    let row = client
        .query_one(
            &format!("SELECT EXISTS (SELECT 1 FROM {})", target.qualified()),
            &[],
        )
        .await
        .map_err(|e| pg_error("reading the target table", e))?;
    Ok(row.get(0))
}

/// Creates the target table: the sink's columns with the PostgreSQL type
/// of each, and its key (if it has one) as primary key.
pub(crate) async fn create_target(client: &Client, target: &Target) -> Result<(), ConnectorError> {
    let mut columns = Vec::new();
    for field in target.columns.fields() {
        let ty = pg_type_of(field.data_type()).ok_or_else(|| ConnectorError::ColumnMismatch {
            connector: super::NAME.into(),
            column: field.name().clone(),
            message: format!(
                "Weir cannot choose a PostgreSQL type for {} to create the target table with: create the table yourself",
                field.data_type()
            ),
        })?;
        let not_null = if field.is_nullable() { "" } else { " NOT NULL" };
        columns.push(format!("{} {ty}{not_null}", quote(field.name())));
    }
    if !target.key.is_empty() {
        columns.push(format!(
            "PRIMARY KEY ({})",
            target
                .key
                .iter()
                .map(|&k| quote(target.columns.field(k).name()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {} ({})",
            target.qualified(),
            columns.join(", ")
        ))
        .await
        .map_err(|e| pg_error("creating the target table", e))
}

/// The PostgreSQL type a column of `ty` is created with, if there is one
/// that holds every value (unsigned integers get the next wider type).
fn pg_type_of(ty: &DataType) -> Option<String> {
    use DataType::*;
    Some(match ty {
        Boolean => "boolean".into(),
        Int8 | Int16 | UInt8 => "smallint".into(),
        Int32 | UInt16 => "integer".into(),
        Int64 | UInt32 => "bigint".into(),
        UInt64 => "numeric(20, 0)".into(),
        Float16 | Float32 => "real".into(),
        Float64 => "double precision".into(),
        Utf8 | LargeUtf8 | Utf8View => "text".into(),
        Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => "bytea".into(),
        Date32 | Date64 => "date".into(),
        Time32(_) | Time64(_) => "time".into(),
        Timestamp(_, None) => "timestamp".into(),
        Timestamp(_, Some(_)) => "timestamptz".into(),
        Duration(_) | Interval(_) => "interval".into(),
        Decimal128(p, s) | Decimal256(p, s) if *s >= 0 => {
            format!("numeric({p}, {s})")
        }
        Decimal128(..) | Decimal256(..) => "numeric".into(),
        Dictionary(_, values) => return pg_type_of(values),
        _ => return None,
    })
}

/// Checks the target table against the sink: it exists and has every
/// column the sink writes (and, for a changelog, `weir_op` and
/// `weir_epoch`). Returns the target's type of each sink column, in order.
pub(crate) async fn check_target(
    client: &Client,
    target: &Target,
) -> Result<Vec<String>, ConnectorError> {
    let qualified = target.qualified();
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
             FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
            &[&qualified],
        )
        .await
        .map_err(|e| pg_error("reading the target table's columns", e))?;
    if rows.is_empty() {
        return Err(bad_option(
            "table",
            format!(
                "{qualified} does not exist in that database (or has no columns): create it first"
            ),
        ));
    }
    let columns: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let type_of = |name: &str| {
        columns
            .iter()
            .find(|(c, _)| c == name)
            .map(|(_, t)| t.clone())
    };
    let mut wanted: Vec<String> = target
        .columns
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    for reserved in ["weir_epoch", "weir_weight", "weir_op"] {
        if wanted.iter().any(|w| w == reserved) {
            return Err(bad_option(
                "table",
                format!(
                    "the sink has a column named {reserved}, a name the postgres sink reserves: rename it in the sink's query"
                ),
            ));
        }
    }
    let count = wanted.len();
    if target.changelog {
        wanted.extend(["weir_op".to_string(), "weir_epoch".to_string()]);
    }
    let types: Vec<Option<String>> = wanted.iter().map(|w| type_of(w)).collect();
    let missing: Vec<&String> = wanted
        .iter()
        .zip(&types)
        .filter(|(_, t)| t.is_none())
        .map(|(w, _)| w)
        .collect();
    if !missing.is_empty() {
        return Err(bad_option(
            "table",
            format!(
                "{qualified} has no column {} (it has: {})",
                missing
                    .iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                columns
                    .iter()
                    .map(|(c, _)| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(types.into_iter().take(count).flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_columns_hold_every_value() {
        assert_eq!(pg_type_of(&DataType::UInt64).unwrap(), "numeric(20, 0)");
        assert_eq!(
            pg_type_of(&DataType::Decimal128(12, 2)).unwrap(),
            "numeric(12, 2)"
        );
        assert_eq!(
            pg_type_of(&DataType::Timestamp(
                arrow::datatypes::TimeUnit::Microsecond,
                Some("UTC".into())
            ))
            .unwrap(),
            "timestamptz"
        );
        assert!(pg_type_of(&DataType::Null).is_none());
    }
}
