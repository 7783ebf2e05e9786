//! Columns of a `files` source created without them, read from the first
//! file under its path: a Parquet file's own schema, a CSV file's header
//! and the types its first lines hold, or the keys and types of a JSON
//! file's first objects. Every discovered column is nullable (a later
//! file may lack a value). With no file there yet, CREATE SOURCE is
//! refused with a hint to declare the columns.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use futures::TryStreamExt;

use super::read::{self, ReadError};
use super::source::Settings;
use super::{Format, Location, NAME};
use crate::ConnectorError;

/// Lines of a CSV or JSON file whose values decide the column types.
const INFER_LINES: usize = 1000;

/// The columns of the first file (in name order) under `location` that
/// `settings` reads.
pub(super) async fn discover(
    location: &Location,
    settings: &Settings,
) -> Result<SchemaRef, ConnectorError> {
    let prefix = format!("{}/", location.root);
    let listed: Vec<object_store::ObjectMeta> = location
        .store
        .list(Some(&location.root))
        .try_collect()
        .await
        .map_err(|e| {
            rejected(format!(
                "listing {} to discover its columns: {e}",
                location.url
            ))
        })?;
    let first = listed
        .iter()
        .map(|meta| {
            let full = meta.location.as_ref();
            full.strip_prefix(&prefix).unwrap_or(full).to_string()
        })
        .filter(|name| settings.wants(name))
        .min()
        .ok_or_else(|| {
            rejected(format!(
                "there is no {} file under {} to discover the columns from: declare them \
                 (CREATE SOURCE name (column type, ...) WITH (...)), or add a file first",
                settings.format.extension(),
                location.url
            ))
        })?;
    let failed = |e: ReadError| {
        rejected(match e {
            ReadError::Store(e) => format!("reading {first} to discover the columns: {e}"),
            ReadError::Decode { error, .. } => {
                format!("discovering the columns of {first}: {error}")
            }
        })
    };
    let decode = |error: ArrowError| failed(ReadError::Decode { row: 0, error });
    let schema = match settings.format {
        Format::Parquet => read::parquet_schema(location, &first)
            .await
            .map_err(failed)?,
        Format::Csv => {
            let head = read::first_lines(location, &first, settings, INFER_LINES + 1)
                .await
                .map_err(failed)?;
            arrow::csv::reader::Format::default()
                .with_header(settings.csv_header)
                .with_delimiter(settings.csv_delimiter)
                .infer_schema(std::io::Cursor::new(&head), Some(INFER_LINES))
                .map_err(decode)?
                .0
        }
        Format::Json => {
            let head = read::first_lines(location, &first, settings, INFER_LINES)
                .await
                .map_err(failed)?;
            arrow::json::reader::infer_json_schema(std::io::Cursor::new(&head), Some(INFER_LINES))
                .map_err(decode)?
                .0
        }
    };
    if schema.fields().is_empty() {
        return Err(rejected(format!("{first} has no columns to discover")));
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), true))
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

fn rejected(message: String) -> ConnectorError {
    ConnectorError::Rejected {
        connector: NAME.into(),
        message,
    }
}
