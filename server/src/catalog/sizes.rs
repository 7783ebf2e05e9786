//! `pg_size_pretty` and the relation size functions (`pg_table_size`,
//! `pg_relation_size`, `pg_total_relation_size`), which psql's `\dt+` and
//! `\d+` and ORMs' table listings call. A table's size is the bytes its
//! rows and keys take in their stored format (Weir keeps no pages or
//! indexes besides the key); other relations have no stored rows of their
//! own and report NULL.

use std::sync::Arc;

use arrow::array::{Array, Int64Array, StringArray};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use datafusion::prelude::SessionContext;

use super::pg::table_oid;
use super::provider::SessionView;

/// PostgreSQL's `pg_size_pretty(bigint)`: bytes below 10 kB, then the
/// largest unit that keeps the number under 20 480, halves rounded away
/// from zero.
pub fn size_pretty(size: i64) -> String {
    // (name, limit, rounds, bits of its unit)
    const UNITS: [(&str, i64, bool, u32); 6] = [
        ("bytes", 10 * 1024, false, 0),
        ("kB", 20 * 1024 - 1, true, 10),
        ("MB", 20 * 1024 - 1, true, 20),
        ("GB", 20 * 1024 - 1, true, 30),
        ("TB", 20 * 1024 - 1, true, 40),
        ("PB", 20 * 1024 - 1, true, 50),
    ];
    let half_rounded = |x: i64| (x + if x < 0 { -1 } else { 1 }) / 2;
    let mut size = size;
    for (i, (name, limit, rounds, bits)) in UNITS.iter().enumerate() {
        let next = UNITS.get(i + 1);
        if next.is_none() || size.abs() < *limit {
            if *rounds {
                size = half_rounded(size);
            }
            return format!("{size} {name}");
        }
        let (_, _, next_rounds, next_bits) = next.expect("checked above");
        let shift = next_bits - bits - u32::from(*next_rounds) + u32::from(*rounds);
        size /= 1i64 << shift;
    }
    unreachable!("the last unit always matches")
}

pub fn register(ctx: &SessionContext, view: &Arc<SessionView>) {
    ctx.register_udf(create_udf(
        "pg_size_pretty",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let sizes = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
            let sizes = sizes
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("cast to Int64");
            let out: StringArray = sizes.iter().map(|s| s.map(size_pretty)).collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    ));
    for name in [
        "pg_table_size",
        "pg_relation_size",
        "pg_total_relation_size",
    ] {
        let v = view.clone();
        ctx.register_udf(create_udf(
            name,
            vec![DataType::Int64],
            DataType::Int64,
            Volatility::Stable,
            Arc::new(move |args| {
                let arrays = ColumnarValue::values_to_arrays(args)?;
                let oids = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
                let oids = oids
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("cast to Int64");
                let snapshot = v.snapshot();
                let out: Int64Array = oids
                    .iter()
                    .map(|oid| {
                        let oid = oid?;
                        let (id, _) = snapshot
                            .catalog
                            .tables
                            .iter()
                            .find(|(id, _)| table_oid(**id) == oid)?;
                        let bytes = snapshot.tables.get(id)?.stored_bytes();
                        Some(i64::try_from(bytes).unwrap_or(i64::MAX))
                    })
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(out)))
            }),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::size_pretty;

    #[test]
    fn sizes_print_as_postgresql_prints_them() {
        // Each pair checked against PostgreSQL 15's pg_size_pretty.
        for (size, text) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (20479 * 1024, "20 MB"),
            (20480 * 1024, "20 MB"),
            (1_500_000, "1465 kB"),
            (123_456_789, "118 MB"),
            (-123_456_789, "-118 MB"),
            (9_876_543_210_123, "9198 GB"),
            (i64::MAX, "8192 PB"),
        ] {
            assert_eq!(size_pretty(size), text, "{size}");
        }
    }
}
