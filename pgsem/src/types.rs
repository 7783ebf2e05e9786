//! The SQL type system users see, and its Arrow representation.
//!
//! One table (ARCHITECTURE.md §7) serves DDL, pgwire, Flight and the catalog:
//! each [`SqlType`] has an Arrow type, a PostgreSQL type OID and a canonical
//! name. Types Arrow has no native form for (`varchar`, `uuid`, `json`,
//! `jsonb`) are `Utf8` columns tagged with [`PG_TYPE_METADATA_KEY`] so the
//! wire layer still reports and encodes them as PostgreSQL does. `oid` is an
//! `Int32` tagged with [`OID_ALIAS_METADATA_KEY`], the tag
//! datafusion-pg-catalog puts on its catalog columns (`pg_type.oid`,
//! `pg_attribute.atttypid`, ...), so those columns are `oid` on the wire.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, IntervalUnit, TimeUnit};
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, DataType as SqlDataType, ExactNumberInfo, TimezoneInfo,
};

/// Field metadata key naming the PostgreSQL type of a `Utf8` column when it
/// is not plain `text`.
pub const PG_TYPE_METADATA_KEY: &str = "weir.pg_type";

/// Field metadata key datafusion-pg-catalog (and arrow-pg) use to mark an
/// `Int32` column as an object identifier; the value names its alias kind
/// (`oid`, `regclass`, `regtype`, ...).
pub const OID_ALIAS_METADATA_KEY: &str = "pg.oid_alias";

/// Precision and scale of `numeric` without a declared precision, as
/// DataFusion plans it.
const DEFAULT_NUMERIC: (u8, i8) = (38, 10);

#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SqlType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric(Option<(u8, i8)>),
    Text,
    Varchar(Option<u64>),
    Bytea,
    Date,
    Time,
    Timestamp,
    Timestamptz,
    Interval,
    Uuid,
    Json,
    Jsonb,
    /// PostgreSQL's object identifier: only catalog columns and `::oid`
    /// casts have it, DDL does not accept it.
    Oid,
    Array(Box<SqlType>),
}

impl SqlType {
    /// Maps a type as written in DDL. Unsupported types name themselves.
    pub fn from_sql(data_type: &SqlDataType) -> Result<Self, String> {
        use SqlDataType as D;
        Ok(match data_type {
            D::Boolean | D::Bool => Self::Bool,
            D::SmallInt(_) | D::Int2(_) => Self::Int2,
            D::Int(_) | D::Integer(_) | D::Int4(_) => Self::Int4,
            D::BigInt(_) | D::Int8(_) => Self::Int8,
            D::Real | D::Float4 => Self::Float4,
            D::Double(_) | D::DoublePrecision | D::Float8 | D::Float(_) => Self::Float8,
            D::Numeric(info) | D::Decimal(info) | D::Dec(info) => Self::Numeric(match info {
                ExactNumberInfo::None => None,
                ExactNumberInfo::Precision(p) => Some((checked_precision(*p)?, 0)),
                ExactNumberInfo::PrecisionAndScale(p, s) => {
                    let p = checked_precision(*p)?;
                    let s = i8::try_from(*s)
                        .ok()
                        .filter(|s| *s >= 0 && (*s as u8) <= p)
                        .ok_or_else(|| {
                            format!("NUMERIC scale {s} must be between 0 and precision {p}")
                        })?;
                    Some((p, s))
                }
            }),
            D::Text | D::String(_) => Self::Text,
            D::Varchar(len) | D::CharVarying(len) | D::CharacterVarying(len) => {
                Self::Varchar(len.as_ref().and_then(char_len))
            }
            D::Char(_) | D::Character(_) => Self::Text,
            D::Bytea => Self::Bytea,
            D::Date => Self::Date,
            D::Time(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => Self::Time,
            D::Timestamp(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => Self::Timestamp,
            D::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => Self::Timestamptz,
            D::Interval { .. } => Self::Interval,
            D::Uuid => Self::Uuid,
            D::JSON => Self::Json,
            D::JSONB => Self::Jsonb,
            D::Array(ArrayElemTypeDef::SquareBracket(inner, _))
            | D::Array(ArrayElemTypeDef::AngleBracket(inner))
            | D::Array(ArrayElemTypeDef::Parenthesis(inner)) => {
                let inner = Self::from_sql(inner)?;
                if matches!(inner, Self::Array(_)) {
                    return Err("multi-dimensional arrays".to_string());
                }
                Self::Array(Box::new(inner))
            }
            D::Custom(name, _) => match name.to_string().to_ascii_lowercase().as_str() {
                "timestamptz" => Self::Timestamptz,
                "int2" => Self::Int2,
                "int4" => Self::Int4,
                "int8" => Self::Int8,
                "float4" => Self::Float4,
                "float8" => Self::Float8,
                "bool" => Self::Bool,
                "jsonb" => Self::Jsonb,
                "json" => Self::Json,
                "uuid" => Self::Uuid,
                "bytea" => Self::Bytea,
                "serial" | "bigserial" | "smallserial" => {
                    return Err(format!("type {name} (use BIGINT with explicit values)"));
                }
                other => return Err(format!("type {other}")),
            },
            other => return Err(format!("type {other}")),
        })
    }

    /// The Arrow type values of this SQL type are stored as.
    pub fn arrow_type(&self) -> DataType {
        match self {
            Self::Bool => DataType::Boolean,
            Self::Int2 => DataType::Int16,
            Self::Int4 | Self::Oid => DataType::Int32,
            Self::Int8 => DataType::Int64,
            Self::Float4 => DataType::Float32,
            Self::Float8 => DataType::Float64,
            Self::Numeric(ps) => {
                let (p, s) = ps.unwrap_or(DEFAULT_NUMERIC);
                DataType::Decimal128(p, s)
            }
            Self::Text | Self::Varchar(_) | Self::Uuid | Self::Json | Self::Jsonb => DataType::Utf8,
            Self::Bytea => DataType::Binary,
            Self::Date => DataType::Date32,
            Self::Time => DataType::Time64(TimeUnit::Microsecond),
            Self::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Self::Timestamptz => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            Self::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            Self::Array(inner) => DataType::List(Arc::new(inner.field("item", true))),
        }
    }

    /// The Arrow field for a column of this type, tagged when `Utf8` alone
    /// would lose the PostgreSQL type.
    pub fn field(&self, name: &str, nullable: bool) -> Field {
        let field = Field::new(name, self.arrow_type(), nullable);
        match self.metadata_tag() {
            Some((key, tag)) => {
                field.with_metadata(HashMap::from([(key.to_string(), tag.to_string())]))
            }
            None => field,
        }
    }

    fn metadata_tag(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Varchar(_) => Some((PG_TYPE_METADATA_KEY, "varchar")),
            Self::Uuid => Some((PG_TYPE_METADATA_KEY, "uuid")),
            Self::Json => Some((PG_TYPE_METADATA_KEY, "json")),
            Self::Jsonb => Some((PG_TYPE_METADATA_KEY, "jsonb")),
            Self::Oid => Some((OID_ALIAS_METADATA_KEY, "oid")),
            _ => None,
        }
    }

    /// The PostgreSQL type OID.
    pub fn pg_oid(&self) -> u32 {
        match self {
            Self::Bool => 16,
            Self::Int2 => 21,
            Self::Int4 => 23,
            Self::Int8 => 20,
            Self::Float4 => 700,
            Self::Float8 => 701,
            Self::Numeric(_) => 1700,
            Self::Text => 25,
            Self::Varchar(_) => 1043,
            Self::Bytea => 17,
            Self::Date => 1082,
            Self::Time => 1083,
            Self::Timestamp => 1114,
            Self::Timestamptz => 1184,
            Self::Interval => 1186,
            Self::Uuid => 2950,
            Self::Json => 114,
            Self::Jsonb => 3802,
            Self::Oid => 26,
            Self::Array(inner) => match inner.pg_oid() {
                16 => 1000,
                21 => 1005,
                23 => 1007,
                20 => 1016,
                700 => 1021,
                701 => 1022,
                1700 => 1231,
                25 => 1009,
                1043 => 1015,
                17 => 1001,
                1082 => 1182,
                1083 => 1183,
                1114 => 1115,
                1184 => 1185,
                1186 => 1187,
                2950 => 2951,
                114 => 199,
                26 => 1028,
                _ => 3807,
            },
        }
    }

    /// The type of an Arrow field, when it is one Weir stores.
    pub fn from_field(field: &Field) -> Option<Self> {
        let tag = field
            .metadata()
            .get(PG_TYPE_METADATA_KEY)
            .map(String::as_str);
        Some(match (field.data_type(), tag) {
            (DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8, Some("varchar")) => {
                Self::Varchar(None)
            }
            (DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8, Some("uuid")) => Self::Uuid,
            (DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8, Some("json")) => Self::Json,
            (DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8, Some("jsonb")) => {
                Self::Jsonb
            }
            // Every alias kind, because PostgreSQL's own catalog columns that
            // datafusion-pg-catalog tags `regclass`/`regtype`/`regnamespace`
            // (`attrelid`, `atttypid`, `relnamespace`) are plain `oid`, and
            // Weir prints reg* values as numbers, which is what `oid` prints.
            (DataType::Int32, _) if field.metadata().contains_key(OID_ALIAS_METADATA_KEY) => {
                Self::Oid
            }
            (data_type, _) => Self::from_arrow(data_type)?,
        })
    }

    /// The closest SQL type of an Arrow type (for query results and ingest).
    pub fn from_arrow(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Boolean => Self::Bool,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 => Self::Int2,
            DataType::Int32 | DataType::UInt16 => Self::Int4,
            DataType::Int64 | DataType::UInt32 => Self::Int8,
            DataType::Float16 | DataType::Float32 => Self::Float4,
            DataType::Float64 => Self::Float8,
            DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
                Self::Numeric(Some((*p, *s)))
            }
            DataType::UInt64 => Self::Numeric(Some((20, 0))),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => Self::Text,
            DataType::Binary | DataType::BinaryView | DataType::LargeBinary => Self::Bytea,
            DataType::Date32 | DataType::Date64 => Self::Date,
            DataType::Time32(_) | DataType::Time64(_) => Self::Time,
            DataType::Timestamp(_, None) => Self::Timestamp,
            DataType::Timestamp(_, Some(_)) => Self::Timestamptz,
            DataType::Interval(_) | DataType::Duration(_) => Self::Interval,
            DataType::List(f) | DataType::LargeList(f) | DataType::ListView(f) => {
                Self::Array(Box::new(Self::from_field(f)?))
            }
            _ => return None,
        })
    }

    /// The name PostgreSQL's `format_type` prints, used by `SHOW CREATE
    /// TABLE`, `\d` and `information_schema`.
    pub fn display_name(&self) -> String {
        match self {
            Self::Bool => "boolean".into(),
            Self::Int2 => "smallint".into(),
            Self::Int4 => "integer".into(),
            Self::Int8 => "bigint".into(),
            Self::Float4 => "real".into(),
            Self::Float8 => "double precision".into(),
            Self::Numeric(None) => "numeric".into(),
            Self::Numeric(Some((p, s))) => format!("numeric({p},{s})"),
            Self::Text => "text".into(),
            Self::Varchar(None) => "character varying".into(),
            Self::Varchar(Some(n)) => format!("character varying({n})"),
            Self::Bytea => "bytea".into(),
            Self::Date => "date".into(),
            Self::Time => "time without time zone".into(),
            Self::Timestamp => "timestamp without time zone".into(),
            Self::Timestamptz => "timestamp with time zone".into(),
            Self::Interval => "interval".into(),
            Self::Uuid => "uuid".into(),
            Self::Json => "json".into(),
            Self::Jsonb => "jsonb".into(),
            Self::Oid => "oid".into(),
            Self::Array(inner) => format!("{}[]", inner.display_name()),
        }
    }

    /// The `pg_type.typname` of this type (`int8`, `_int4`, ...).
    pub fn pg_type_name(&self) -> String {
        match self {
            Self::Bool => "bool".into(),
            Self::Int2 => "int2".into(),
            Self::Int4 => "int4".into(),
            Self::Int8 => "int8".into(),
            Self::Float4 => "float4".into(),
            Self::Float8 => "float8".into(),
            Self::Numeric(_) => "numeric".into(),
            Self::Text => "text".into(),
            Self::Varchar(_) => "varchar".into(),
            Self::Bytea => "bytea".into(),
            Self::Date => "date".into(),
            Self::Time => "time".into(),
            Self::Timestamp => "timestamp".into(),
            Self::Timestamptz => "timestamptz".into(),
            Self::Interval => "interval".into(),
            Self::Uuid => "uuid".into(),
            Self::Json => "json".into(),
            Self::Jsonb => "jsonb".into(),
            Self::Oid => "oid".into(),
            Self::Array(inner) => format!("_{}", inner.pg_type_name()),
        }
    }
}

fn checked_precision(p: u64) -> Result<u8, String> {
    u8::try_from(p)
        .ok()
        .filter(|p| (1..=38).contains(p))
        .ok_or_else(|| format!("NUMERIC precision {p} must be between 1 and 38"))
}

fn char_len(len: &datafusion::sql::sqlparser::ast::CharacterLength) -> Option<u64> {
    match len {
        datafusion::sql::sqlparser::ast::CharacterLength::IntegerLength { length, .. } => {
            Some(*length)
        }
        datafusion::sql::sqlparser::ast::CharacterLength::Max => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn column_types(ddl: &str) -> Vec<SqlType> {
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, ddl).unwrap();
        let Statement::CreateTable(create) = statements.into_iter().next().unwrap() else {
            panic!("not a CREATE TABLE")
        };
        create
            .columns
            .iter()
            .map(|c| SqlType::from_sql(&c.data_type).unwrap())
            .collect()
    }

    #[test]
    fn ddl_types_map_to_the_contract_table() {
        let types = column_types(
            "CREATE TABLE t (a BIGINT, b NUMERIC(12,2), c VARCHAR(20), d TIMESTAMPTZ, \
             e TIMESTAMP WITH TIME ZONE, f UUID, g JSONB, h INT[], i DOUBLE PRECISION)",
        );
        assert_eq!(
            types.iter().map(SqlType::pg_oid).collect::<Vec<_>>(),
            vec![20, 1700, 1043, 1184, 1184, 2950, 3802, 1007, 701]
        );
        assert_eq!(types[1].display_name(), "numeric(12,2)");
        assert_eq!(types[7].arrow_type().to_string(), "List(Int32)");
    }

    #[test]
    fn tagged_fields_round_trip() {
        for t in [
            SqlType::Uuid,
            SqlType::Json,
            SqlType::Jsonb,
            SqlType::Varchar(None),
            SqlType::Oid,
            SqlType::Array(Box::new(SqlType::Oid)),
        ] {
            assert_eq!(SqlType::from_field(&t.field("x", true)), Some(t));
        }
    }
}
