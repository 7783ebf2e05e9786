//! PostgreSQL functions that need the session or the database:
//! `version()`, `current_setting()`, `pg_backend_pid()` and the advisory
//! locks migration tools take (`pg_advisory_lock` and friends). The catalog
//! functions are in [`crate::catalog::functions`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray};
use arrow::datatypes::DataType;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;

use super::vars::{SERVER_VERSION, SharedVars};
use crate::db::Database;

/// How long `pg_advisory_lock` waits before giving up.
const ADVISORY_LOCK_WAIT: Duration = Duration::from_secs(60);

pub(super) fn release_advisory_locks(db: &Database, pid: i32) {
    db.advisory_locks().release_all(pid);
}

fn keys(args: &[ColumnarValue]) -> Result<Vec<Option<i64>>, DataFusionError> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let array = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
    let keys = array
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| DataFusionError::Execution("advisory lock key must be a bigint".into()))?;
    Ok(keys.iter().collect())
}

pub(super) fn register_session_functions(
    ctx: &SessionContext,
    db: &Arc<Database>,
    pid: i32,
    user: &str,
    vars: SharedVars,
) {
    let vars_for_set = vars.clone();
    crate::catalog::functions::register(ctx, &db.query_env().pg_static, user, vars.clone());
    super::sequence_functions::register(ctx, db, user);
    let version = format!(
        "PostgreSQL {SERVER_VERSION} (Weir {}) on x86_64-pc-linux-gnu, a SQL-first streaming database",
        env!("CARGO_PKG_VERSION")
    );
    ctx.register_udf(create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                version.clone(),
            ))))
        }),
    ));

    ctx.register_udf(create_udf(
        "pg_backend_pid",
        vec![],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Int32(Some(pid))))),
    ));

    let setting = move |args: &[ColumnarValue]| -> Result<ColumnarValue, DataFusionError> {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let names = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let names = names
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| DataFusionError::Execution("setting name must be text".into()))?;
        let values = vars.read();
        let out: StringArray = names
            .iter()
            .map(|n| {
                n.and_then(|n| {
                    values
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(n))
                        .map(|(_, v)| v.clone())
                })
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    };
    let setting = Arc::new(setting);
    ctx.register_udf(create_udf(
        "current_setting",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        setting,
    ));

    // weir_wait_ready('10s'): true once the database is ready (every
    // projection restored or rebuilt after a start), false if it is not
    // within the given time. Polls like pg_advisory_lock: readiness is a
    // flag another task sets.
    let ready_db = db.clone();
    ctx.register_udf(create_udf(
        "weir_wait_ready",
        vec![DataType::Utf8],
        DataType::Boolean,
        Volatility::Volatile,
        Arc::new(move |args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let texts = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
            let texts = texts
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| {
                    DataFusionError::Execution(
                        "weir_wait_ready takes a duration such as '10s'".into(),
                    )
                })?;
            let out = texts
                .iter()
                .map(|text| {
                    let Some(text) = text else { return Ok(None) };
                    let limit = crate::config::parse_duration(text)
                        .map_err(|e| DataFusionError::Execution(format!("weir_wait_ready: {e}")))?;
                    let started = Instant::now();
                    Ok(Some(tokio::task::block_in_place(|| {
                        loop {
                            if ready_db.is_recovered() {
                                return true;
                            }
                            if started.elapsed() >= limit {
                                return false;
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    })))
                })
                .collect::<Result<BooleanArray, DataFusionError>>()?;
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    ));

    let lock_db = db.clone();
    ctx.register_udf(create_udf(
        "pg_advisory_lock",
        vec![DataType::Int64],
        DataType::Null,
        Volatility::Volatile,
        Arc::new(move |args| {
            for key in keys(args)?.into_iter().flatten() {
                let started = Instant::now();
                // The lock is held across statements, so waiting is polling:
                // the holder releases it from another session.
                tokio::task::block_in_place(|| {
                    while !lock_db.advisory_locks().try_lock(key, pid) {
                        if started.elapsed() > ADVISORY_LOCK_WAIT {
                            return Err(DataFusionError::Execution(format!(
                                "could not obtain advisory lock {key} within {ADVISORY_LOCK_WAIT:?}"
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Ok(())
                })?;
            }
            Ok(ColumnarValue::Scalar(ScalarValue::Null))
        }),
    ));

    let try_db = db.clone();
    ctx.register_udf(create_udf(
        "pg_try_advisory_lock",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Volatile,
        Arc::new(move |args| {
            let out: BooleanArray = keys(args)?
                .into_iter()
                .map(|k| k.map(|k| try_db.advisory_locks().try_lock(k, pid)))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    ));

    let unlock_db = db.clone();
    ctx.register_udf(create_udf(
        "pg_advisory_unlock",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Volatile,
        Arc::new(move |args| {
            let out: BooleanArray = keys(args)?
                .into_iter()
                .map(|k| k.map(|k| unlock_db.advisory_locks().unlock(k, pid)))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    ));

    let all_db = db.clone();
    ctx.register_udf(create_udf(
        "pg_advisory_unlock_all",
        vec![],
        DataType::Null,
        Volatility::Volatile,
        Arc::new(move |_| {
            all_db.advisory_locks().release_all(pid);
            Ok(ColumnarValue::Scalar(ScalarValue::Null))
        }),
    ));

    for name in ["session_user", "current_user", "user", "current_role"] {
        let user = user.to_string();
        ctx.register_udf(create_udf(
            name,
            vec![],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(user.clone()))))),
        ));
    }

    // set_config(name, value, is_local): sets a session variable and returns
    // the value, as drivers use it on connect (asyncpg: jit off).
    let set_vars = vars_for_set;
    ctx.register_udf(create_udf(
        "set_config",
        vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
        DataType::Utf8,
        Volatility::Volatile,
        Arc::new(move |args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let names = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
            let values = arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
            let (Some(names), Some(values)) = (
                names.as_any().downcast_ref::<StringArray>(),
                values.as_any().downcast_ref::<StringArray>(),
            ) else {
                return Err(DataFusionError::Execution(
                    "set_config takes text arguments".into(),
                ));
            };
            let mut vars = set_vars.write();
            let out: StringArray = names
                .iter()
                .zip(values.iter())
                .map(|(n, v)| {
                    let (n, v) = (n?, v?);
                    let key = vars
                        .keys()
                        .find(|k| k.eq_ignore_ascii_case(n))
                        .cloned()
                        .unwrap_or_else(|| n.to_ascii_lowercase());
                    vars.insert(key, v.to_string());
                    Some(v.to_string())
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    ));

    // Comments on shared objects (databases, roles) are not kept.
    ctx.register_udf(create_udf(
        "shobj_description",
        vec![DataType::Int64, DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    ));
}
