//! The snapshot's key order: pages of the upstream table by primary key
//! (text keys compared bytewise, `COLLATE "C"`), and the same order over
//! keys read from pages and from the stream ([`KeyOrder`]), so a change
//! can be told to fall in a segment already read.

use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};

use super::pgoutput::Value;
use super::source::{RowLayout, value_bytes};
use super::text::{self, field_of};
use super::{NAME, Shape, rejected};
use crate::ConnectorError;
use crate::postgres::quote;

/// The query for the page of `batch_rows` rows of `table` (qualified)
/// after `after` (the last key read), in key order: `schema`'s columns,
/// then the key columns as text.
pub(crate) fn page_query(
    table: &str,
    batch_rows: u64,
    shape: &Shape,
    schema: &SchemaRef,
    after: Option<&[String]>,
) -> String {
    let select: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| quote(f.name()))
        .chain(shape.key.iter().map(|k| quote(k)))
        .collect();
    let order: Vec<String> = shape.key.iter().map(|k| ordered_key(shape, k)).collect();
    let filter = match after {
        None => String::new(),
        Some(values) => format!(
            " WHERE ({}) > ({})",
            order.join(", "),
            key_literals(shape, values).join(", ")
        ),
    };
    format!(
        "SELECT {} FROM {table}{filter} ORDER BY {} LIMIT {batch_rows}",
        select.join(", "),
        order.join(", "),
    )
}

/// Key column `name` as it is ordered (bytewise for text).
pub(crate) fn ordered_key(shape: &Shape, name: &str) -> String {
    let c = shape.column(name).expect("key column");
    if collatable(c.type_oid) {
        format!("{} COLLATE \"C\"", quote(name))
    } else {
        quote(name)
    }
}

/// A key read as text (`values`), as literals ordered like [`ordered_key`].
pub(crate) fn key_literals(shape: &Shape, values: &[String]) -> Vec<String> {
    shape
        .key
        .iter()
        .zip(values)
        .map(|(k, v)| {
            let c = shape.column(k).expect("key column");
            let literal = format!("'{}'::{}", v.replace('\'', "''"), c.type_name);
            if collatable(c.type_oid) {
                format!("{literal} COLLATE \"C\"")
            } else {
                literal
            }
        })
        .collect()
}

/// Text types, whose order depends on a collation: keys compare bytewise
/// (`COLLATE "C"`) upstream and here alike.
fn collatable(type_oid: u32) -> bool {
    matches!(type_oid, 25 | 1042 | 1043 | 19)
}

/// Compares primary keys in the snapshot's order.
pub(super) struct KeyOrder {
    types: Vec<arrow::datatypes::DataType>,
    converter: RowConverter,
}

impl KeyOrder {
    pub(super) fn new(shape: &Shape) -> Result<Self, ConnectorError> {
        let types = shape
            .key
            .iter()
            .map(|k| {
                let c = shape.column(k).expect("key column");
                field_of(k, c.type_oid, c.type_modifier, false)
                    .map(|f| f.data_type().clone())
                    .ok_or_else(|| {
                        rejected(format!("key column \"{k}\" has a type Weir cannot read"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let converter = RowConverter::new(types.iter().cloned().map(SortField::new).collect())
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        Ok(Self { types, converter })
    }

    pub(super) fn rows(
        &self,
        values: &[Vec<Option<&[u8]>>],
    ) -> Result<Vec<OwnedRow>, ConnectorError> {
        let columns = values
            .iter()
            .zip(&self.types)
            .map(|(v, t)| text::column(v, t).map_err(|e| rejected(e.0)))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = self
            .converter
            .convert_columns(&columns)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        Ok(rows.iter().map(|r| r.owned()).collect())
    }

    pub(super) fn row_of_text(&self, key: &[String]) -> Result<OwnedRow, ConnectorError> {
        let values: Vec<Vec<Option<&[u8]>>> =
            key.iter().map(|k| vec![Some(k.as_bytes())]).collect();
        Ok(self.rows(&values)?.remove(0))
    }

    pub(super) fn rows_of_values(
        &self,
        layout: &RowLayout,
        rows: &[(i64, Vec<Value>)],
    ) -> Result<Vec<OwnedRow>, ConnectorError> {
        let values = layout
            .key
            .iter()
            .map(|&i| {
                rows.iter()
                    .map(|(_, row)| value_bytes(&row[i], "key"))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.rows(&values)
    }
}
