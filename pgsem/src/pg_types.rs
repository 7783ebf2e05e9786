//! PostgreSQL wire types of Arrow fields: the §7 mapping as pgwire sees it.
//!
//! The SQL-level table lives in [`crate::types`]; this adds the PostgreSQL
//! `Type` values (`postgres_types::Type`, which pgwire re-exports) and OID
//! lookups the front ends need, and the type planner that lets queries name
//! the PostgreSQL types DataFusion lacks.

use arrow::datatypes::{DataType, Field};
use postgres_types::Type;

use crate::SqlType;

/// The PostgreSQL type a result column is reported as.
pub fn pg_type_of_field(field: &Field) -> Type {
    SqlType::from_field(field)
        .and_then(|t| Type::from_oid(t.pg_oid()))
        .unwrap_or(Type::TEXT)
}

/// The Arrow type a parameter declared with `oid` is decoded into, if Weir
/// knows the type.
pub fn arrow_type_of_pg_oid(oid: u32) -> Option<DataType> {
    sql_type_of_pg_oid(oid).map(|t| t.arrow_type())
}

/// The SQL type of a PostgreSQL type OID.
pub fn sql_type_of_pg_oid(oid: u32) -> Option<SqlType> {
    use SqlType as S;
    let scalar = |oid| {
        Some(match oid {
            16 => S::Bool,
            21 => S::Int2,
            23 => S::Int4,
            20 => S::Int8,
            700 => S::Float4,
            701 => S::Float8,
            1700 => S::Numeric(None),
            25 | 19 | 1042 | 705 => S::Text,
            1043 => S::Varchar(None),
            17 => S::Bytea,
            1082 => S::Date,
            1083 => S::Time,
            1114 => S::Timestamp,
            1184 => S::Timestamptz,
            1186 => S::Interval,
            2950 => S::Uuid,
            114 => S::Json,
            3802 => S::Jsonb,
            26 => S::Oid,
            _ => return None,
        })
    };
    if let Some(t) = scalar(oid) {
        return Some(t);
    }
    let element = match oid {
        1000 => 16,
        1005 => 21,
        1007 => 23,
        1016 => 20,
        1021 => 700,
        1022 => 701,
        1231 => 1700,
        1009 => 25,
        1015 => 1043,
        1001 => 17,
        1182 => 1082,
        1183 => 1083,
        1115 => 1114,
        1185 => 1184,
        1187 => 1186,
        2951 => 2950,
        199 => 114,
        3807 => 3802,
        1028 => 26,
        _ => return None,
    };
    scalar(element).map(|t| S::Array(Box::new(t)))
}

/// Lets queries name the PostgreSQL types DataFusion lacks (`::jsonb`,
/// `CAST(x AS uuid)`, `varchar(n)`, `::oid`): they plan to the same tagged
/// fields a table column of that type has. Everything else goes to
/// datafusion-pg-catalog's planner (`regclass`, `pg_catalog.text`, ...).
#[derive(Debug, Default)]
pub struct WeirTypePlanner {
    pg: datafusion_pg_catalog::pg_catalog::oid_type_planner::PgOidTypePlanner,
}

impl datafusion::logical_expr::planner::TypePlanner for WeirTypePlanner {
    fn plan_type_field(
        &self,
        sql_type: &datafusion::sql::sqlparser::ast::DataType,
    ) -> datafusion::error::Result<Option<std::sync::Arc<Field>>> {
        use datafusion::sql::sqlparser::ast::DataType as D;
        use datafusion::sql::sqlparser::ast::ExactNumberInfo;
        match sql_type {
            D::Varchar(_) | D::CharVarying(_) | D::CharacterVarying(_) => {
                let Ok(t @ SqlType::Varchar(len)) = SqlType::from_sql(sql_type) else {
                    return self.pg.plan_type_field(sql_type);
                };
                let mut field = t.field("", true);
                if let Some(len) = len {
                    // The length only matters to the cast itself (it truncates).
                    let mut metadata = field.metadata().clone();
                    metadata.insert(crate::VARCHAR_LEN_KEY.into(), len.to_string());
                    field = field.with_metadata(metadata);
                }
                return Ok(Some(std::sync::Arc::new(field)));
            }
            D::Numeric(ExactNumberInfo::None) | D::Decimal(ExactNumberInfo::None) => {
                let field = SqlType::Numeric(None).field("", true).with_metadata(
                    std::collections::HashMap::from([(
                        crate::PG_TYPE_METADATA_KEY.to_string(),
                        crate::UNCONSTRAINED_NUMERIC.to_string(),
                    )]),
                );
                return Ok(Some(std::sync::Arc::new(field)));
            }
            _ => {}
        }
        let tagged = match sql_type {
            D::JSON | D::JSONB | D::Uuid => SqlType::from_sql(sql_type).ok(),
            D::Custom(name, _) => match name.to_string().to_ascii_lowercase().as_str() {
                "jsonb" | "json" | "uuid" => SqlType::from_sql(sql_type).ok(),
                // datafusion-pg-catalog plans `oid` as a bare `int4`; the tag
                // makes `$1::oid[]` an `oid[]` parameter, as drivers expect.
                "oid" | "pg_catalog.oid" => Some(SqlType::Oid),
                _ => None,
            },
            _ => None,
        };
        match tagged {
            Some(t) => Ok(Some(std::sync::Arc::new(t.field("", true)))),
            None => self.pg.plan_type_field(sql_type),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mapped_oid_round_trips() {
        for oid in [
            16, 21, 23, 20, 700, 701, 1700, 25, 1043, 17, 1082, 1083, 1114, 1184, 1186, 2950, 114,
            3802, 1007, 1009, 1016, 26, 1028,
        ] {
            let t = sql_type_of_pg_oid(oid).unwrap();
            assert_eq!(t.pg_oid(), oid);
            assert_eq!(pg_type_of_field(&t.field("c", true)).oid(), oid, "{t:?}");
        }
    }
}
