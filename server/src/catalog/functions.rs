//! Catalog functions that depend on the session: name visibility through
//! `search_path` (`current_schema`, `pg_table_is_visible`, ...) and the
//! deparsing functions psql and drivers call on Weir's relations
//! (`pg_get_indexdef`, `pg_get_constraintdef`, `pg_get_expr`,
//! `_pg_expandarray`, ...).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int32Array, Int64Array, ListArray, ListBuilder,
    StringArray, StringBuilder, StructArray,
};
use arrow::datatypes::{DataType, Field, Fields};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility, create_udf,
};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use datafusion_pg_catalog::pg_catalog::PgCatalogStaticTables;
use weir_pgsem::SqlType;

use super::model::quote_ident;
use super::pg::{self, PG_CATALOG_OID, schema_oid};
use super::pg_constraints;
use super::provider::{PG_CATALOG, SessionView, SharedVars, WeirCatalogList};

/// Registers the catalog functions on a session's context.
pub fn register(
    ctx: &SessionContext,
    pg_static: &Arc<PgCatalogStaticTables>,
    user: &str,
    vars: SharedVars,
) {
    let state = ctx.state();
    let Some(list) = state.catalog_list().downcast_ref::<WeirCatalogList>() else {
        return;
    };
    let view = list.view().clone();
    view.set_vars(vars);
    let user = user.to_string();

    let v = view.clone();
    let u = user.clone();
    ctx.register_udf(create_udf(
        "current_schema",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_| {
            let first = search_path(&v, &u).into_iter().next();
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(first)))
        }),
    ));

    let v = view.clone();
    let u = user.clone();
    ctx.register_udf(create_udf(
        "current_schemas",
        vec![DataType::Boolean],
        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        Volatility::Stable,
        Arc::new(move |args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let implicit = arrays[0].as_boolean();
            let explicit = search_path(&v, &u);
            let mut lists = ListBuilder::new(StringBuilder::new());
            for i in 0..implicit.len() {
                if implicit.is_null(i) {
                    lists.append(false);
                    continue;
                }
                if implicit.value(i) && !explicit.iter().any(|s| s == PG_CATALOG) {
                    lists.values().append_value(PG_CATALOG);
                }
                for s in &explicit {
                    lists.values().append_value(s);
                }
                lists.append(true);
            }
            Ok(ColumnarValue::Array(Arc::new(lists.finish())))
        }),
    ));

    let v = view.clone();
    let u = user.clone();
    ctx.register_udf(create_udf(
        "pg_table_is_visible",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |args| {
            let relations = relations(&v);
            let path = effective_path(&v, &u);
            let by_name = |schema: &str, name: &str| {
                relations.values().any(|(s, n)| s == schema && n == name)
            };
            map_oids(args, |oid| {
                let (schema, name) = relations.get(&oid)?;
                // Visible when no earlier schema of the path has the name.
                let first = path.iter().find(|s| by_name(s, name));
                Some(first == Some(schema))
            })
        }),
    ));

    let v = view.clone();
    let u = user.clone();
    let statics = pg_static.clone();
    let procs: Arc<OnceLock<HashMap<i64, i64>>> = Arc::default();
    ctx.register_udf(create_udf(
        "pg_function_is_visible",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |args| {
            let namespaces = procs.get_or_init(|| proc_namespaces(&statics));
            let path: Vec<i64> = effective_path(&v, &u)
                .iter()
                .map(|s| schema_oid(s))
                .collect();
            map_oids(args, |oid| {
                let nsp = namespaces.get(&oid)?;
                Some(*nsp == PG_CATALOG_OID || path.contains(nsp))
            })
        }),
    ));

    // A view's query as it was stored (sqlparser's spelling, not
    // PostgreSQL's deparsed one); NULL for other relations.
    let v = view.clone();
    ctx.register_udf(oid_to_text("pg_get_viewdef", move |oid| {
        let snapshot = v.snapshot();
        let def = snapshot
            .catalog
            .views
            .values()
            .find(|d| pg::table_oid(d.id) == oid)?;
        Some(format!("{};", def.query))
    }));

    let statics = pg_static.clone();
    let proc_info: Arc<OnceLock<ProcInfo>> = Arc::default();
    let info = proc_info.clone();
    ctx.register_udf(oid_to_text("pg_get_function_result", move |oid| {
        let info = info.get_or_init(|| ProcInfo::new(&statics));
        let (ret, set, _) = info.procs.get(&oid)?;
        let name = info.type_name(*ret);
        Some(if *set { format!("SETOF {name}") } else { name })
    }));
    for name in [
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
    ] {
        let statics = pg_static.clone();
        let info = proc_info.clone();
        ctx.register_udf(oid_to_text(name, move |oid| {
            let info = info.get_or_init(|| ProcInfo::new(&statics));
            let (_, _, args) = info.procs.get(&oid)?;
            Some(
                args.iter()
                    .map(|t| info.type_name(*t))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }));
    }

    let v = view.clone();
    ctx.register_udf(oid_to_text("pg_get_constraintdef", move |oid| {
        let snapshot = v.snapshot();
        let catalog = &snapshot.catalog;
        let (_, c) = pg_constraints::all_constraints(catalog).find(|(_, c)| c.oid == oid)?;
        Some(pg_constraints::constraint_definition(catalog, &c))
    }));

    let v = view.clone();
    ctx.register_udf(oid_to_text("pg_get_indexdef", move |oid| {
        let snapshot = v.snapshot();
        let (def, index) =
            pg_constraints::all_indexes(&snapshot.catalog).find(|(_, i)| i.oid == oid)?;
        Some(pg_constraints::index_definition(def, &index))
    }));

    let v = view.clone();
    let u = user.clone();
    ctx.register_udf(text_to_oid("to_regclass", move |name| {
        let (schema, table) = match name.split_once('.') {
            Some((s, t)) => (Some(unquote(s)), unquote(t)),
            None => (None, unquote(name)),
        };
        let relations = relations(&v);
        let path = match schema {
            Some(s) => vec![s],
            None => effective_path(&v, &u),
        };
        path.iter().find_map(|s| {
            relations
                .iter()
                .find(|(_, (rs, rn))| rs == s && *rn == table)
                .map(|(oid, _)| *oid)
        })
    }));

    // `oid::regclass::text` (see `weir_planner::compat`): the name as
    // PostgreSQL prints a regclass, schema-qualified unless the search path
    // finds this relation first under its bare name; the number itself for
    // an OID that names no relation.
    let v = view.clone();
    let u = user.clone();
    ctx.register_udf(oid_to_text(
        weir_planner::compat::REGCLASS_TEXT,
        move |oid| {
            let relations = relations(&v);
            let Some((schema, name)) = relations.get(&oid) else {
                return Some(oid.to_string());
            };
            let first_found = effective_path(&v, &u)
                .into_iter()
                .find(|s| relations.values().any(|(rs, rn)| rs == s && rn == name));
            Some(if first_found.as_ref() == Some(schema) {
                quote_ident(name)
            } else {
                format!("{}.{}", quote_ident(schema), quote_ident(name))
            })
        },
    ));

    let statics = pg_static.clone();
    let info = proc_info.clone();
    ctx.register_udf(text_to_oid("to_regtype", move |name| {
        let info = info.get_or_init(|| ProcInfo::new(&statics));
        let name = name.trim().to_ascii_lowercase();
        let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
        info.types
            .iter()
            .find(|(oid, typname)| *typname == name || info.type_name(**oid) == name)
            .map(|(oid, _)| *oid)
    }));

    // Weir has no triggers: no OID names one (psql's `\d` asks for a
    // table's triggers once it has foreign keys).
    ctx.register_udf(oid_to_text("pg_get_triggerdef", |_| None));

    // Roles have no OIDs in Weir; the bootstrap superuser's is 10, as in
    // PostgreSQL.
    ctx.register_udf(oid_to_text("pg_get_userbyid", |oid| {
        Some(if oid == 10 {
            super::model::SUPERUSER.to_string()
        } else {
            format!("unknown (OID={oid})")
        })
    }));

    // Every collation PostgreSQL ships lives in pg_catalog, which is always
    // searched.
    ctx.register_udf(create_udf(
        "pg_collation_is_visible",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|args| map_oids(args, |_| Some(true))),
    ));

    ctx.register_udf(create_udf(
        "like_escape",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let patterns = arrays[0].as_string::<i32>();
            let escapes = arrays[1].as_string::<i32>();
            let mut out = StringBuilder::new();
            for (p, e) in patterns.iter().zip(escapes.iter()) {
                match (p, e) {
                    (Some(p), Some(e)) => out.append_value(like_escape(p, e)?),
                    _ => out.append_null(),
                }
            }
            Ok(ColumnarValue::Array(Arc::new(out.finish())))
        }),
    ));

    ctx.register_udf(ScalarUDF::from(super::json::JsonBuildObject::new()));
    ctx.register_udf(ScalarUDF::from(PgGetExpr::new()));
    ctx.register_udf(ScalarUDF::from(ExpandArray::new()));
    super::comments::register(ctx, &view);
    super::sizes::register(ctx, &view);
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => s.to_ascii_lowercase(),
    }
}

/// PostgreSQL's `like_escape`: a pattern using `escape` as its escape
/// character, rewritten to use backslash (an empty escape disables escaping).
pub fn like_escape(pattern: &str, escape: &str) -> DfResult<String> {
    let mut chars = escape.chars();
    let escape = match (chars.next(), chars.next()) {
        (None, _) => None,
        (Some(c), None) => Some(c),
        _ => {
            return Err(DataFusionError::Execution(
                "invalid escape string: escape string must be empty or one character".into(),
            ));
        }
    };
    let mut out = String::with_capacity(pattern.len());
    let mut input = pattern.chars();
    while let Some(c) = input.next() {
        if Some(c) == escape {
            match input.next() {
                Some(next) if next == '\\' => out.push_str("\\\\"),
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => {
                    return Err(DataFusionError::Execution(
                        "LIKE pattern must not end with escape character".into(),
                    ));
                }
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The schemas of `search_path` that exist, in order (`$user` resolved).
pub fn search_path(view: &SessionView, user: &str) -> Vec<String> {
    let path = view
        .var("search_path")
        .unwrap_or_else(|| "\"$user\", public".into());
    let snapshot = view.snapshot();
    let exists = |s: &str| {
        snapshot.catalog.schemas.contains(s)
            || s == PG_CATALOG
            || s == super::provider::INFORMATION_SCHEMA
            || s == super::provider::WEIR_CATALOG
    };
    path.split(',')
        .map(|s| {
            let s = s.trim();
            match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                Some(quoted) => quoted.replace("\"\"", "\""),
                None => s.to_ascii_lowercase(),
            }
        })
        .map(|s| if s == "$user" { user.to_string() } else { s })
        .filter(|s| !s.is_empty() && exists(s))
        .collect()
}

/// The path names are looked up in: `pg_catalog` first unless placed.
fn effective_path(view: &SessionView, user: &str) -> Vec<String> {
    let mut path = search_path(view, user);
    if !path.iter().any(|s| s == PG_CATALOG) {
        path.insert(0, PG_CATALOG.to_string());
    }
    path
}

/// Relations by OID: (schema, name).
fn relations(view: &SessionView) -> HashMap<i64, (String, String)> {
    let snapshot = view.snapshot();
    let mut out = HashMap::new();
    for d in snapshot.catalog.tables.values() {
        out.insert(pg::table_oid(d.id), (d.schema.clone(), d.name.clone()));
    }
    for (d, index) in pg_constraints::all_indexes(&snapshot.catalog) {
        out.insert(index.oid, (d.schema.clone(), index.name));
    }
    for p in snapshot.catalog.projections.values() {
        out.insert(pg::table_oid(p.id), (p.schema.clone(), p.name.clone()));
    }
    for s in snapshot.catalog.sequences.values() {
        out.insert(pg::table_oid(s.id), (s.schema.clone(), s.name.clone()));
    }
    for s in snapshot.catalog.sources.values().filter(|s| !s.is_shared()) {
        out.insert(pg::table_oid(s.id), (s.schema.clone(), s.name.clone()));
    }
    for v in snapshot.catalog.views.values() {
        out.insert(pg::table_oid(v.id), (v.schema.clone(), v.name.clone()));
    }
    for (i, name) in view.system.table_names_sorted().into_iter().enumerate() {
        out.insert(
            pg::system_table_oid(i),
            (super::provider::WEIR_CATALOG.to_string(), name),
        );
    }
    out
}

fn oids(args: &[ColumnarValue]) -> DfResult<Int64Array> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let array = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
    Ok(array.as_primitive::<arrow::datatypes::Int64Type>().clone())
}

fn map_oids(args: &[ColumnarValue], f: impl Fn(i64) -> Option<bool>) -> DfResult<ColumnarValue> {
    let out: BooleanArray = oids(args)?.iter().map(|o| o.and_then(&f)).collect();
    Ok(ColumnarValue::Array(Arc::new(out)))
}

/// A function of an OID (plus optional ignored flags) returning text; NULL
/// for OIDs it does not know, as PostgreSQL does.
pub(super) fn oid_to_text(
    name: &str,
    f: impl Fn(i64) -> Option<String> + Send + Sync + 'static,
) -> ScalarUDF {
    ScalarUDF::from(OidToText {
        name: name.to_string(),
        signature: Signature::one_of(
            vec![
                TypeSignature::Any(1),
                TypeSignature::Any(2),
                TypeSignature::Any(3),
            ],
            Volatility::Stable,
        ),
        f: Arc::new(f),
    })
}

/// A function of a name returning an OID, or NULL when nothing has the name.
fn text_to_oid(name: &str, f: impl Fn(&str) -> Option<i64> + Send + Sync + 'static) -> ScalarUDF {
    create_udf(
        name,
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(move |args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let names = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
            let out: Int32Array = names
                .as_string::<i32>()
                .iter()
                .map(|n| n.and_then(&f).map(|o| o as i32))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    )
}

type OidFn = Arc<dyn Fn(i64) -> Option<String> + Send + Sync>;

struct OidToText {
    name: String,
    signature: Signature,
    f: OidFn,
}

impl std::fmt::Debug for OidToText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl PartialEq for OidToText {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.f, &other.f)
    }
}

impl Eq for OidToText {}

impl std::hash::Hash for OidToText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for OidToText {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let out: StringArray = oids(&args.args[..1])?
            .iter()
            .map(|o| o.and_then(|o| (self.f)(o)))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `pg_get_expr(expr, relation [, pretty])`: Weir stores expressions as the
/// text that declared them, so the text is its own deparsed form.
#[cfg(test)]
mod tests {
    use super::like_escape;

    #[test]
    fn like_escape_translates_to_backslash() {
        assert_eq!(like_escape("pg/_%", "/").unwrap(), "pg\\_%");
        assert_eq!(like_escape("a//b", "/").unwrap(), "a\\/b");
        assert_eq!(like_escape("a\\b", "/").unwrap(), "a\\\\b");
        assert_eq!(like_escape("a_b", "").unwrap(), "a_b");
        assert!(like_escape("ab/", "/").is_err());
        assert!(like_escape("ab", "//").is_err());
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgGetExpr {
    signature: Signature,
}

impl PgGetExpr {
    fn new() -> Self {
        Self {
            signature: Signature::one_of(
                vec![TypeSignature::Any(2), TypeSignature::Any(3)],
                Volatility::Stable,
            ),
        }
    }
}

impl ScalarUDFImpl for PgGetExpr {
    fn name(&self) -> &str {
        "pg_get_expr"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args[..1])?;
        Ok(ColumnarValue::Array(arrow::compute::cast(
            &arrays[0],
            &DataType::Utf8,
        )?))
    }
}

/// `information_schema._pg_expandarray(array)`: the elements with their
/// 1-based positions, as a list of `(x, n)` records. [`super::compat`] wraps
/// calls in `unnest`, which turns the list into rows as PostgreSQL's
/// set-returning original does.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ExpandArray {
    signature: Signature,
}

impl ExpandArray {
    fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }

    fn fields(element: &DataType) -> Fields {
        Fields::from(vec![
            Field::new("x", element.clone(), true),
            Field::new("n", DataType::Int32, false),
        ])
    }
}

impl ScalarUDFImpl for ExpandArray {
    fn name(&self) -> &str {
        "_pg_expandarray"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        match &args[0] {
            DataType::List(f) => Ok(DataType::List(Arc::new(Field::new_list_field(
                DataType::Struct(Self::fields(f.data_type())),
                true,
            )))),
            other => Err(DataFusionError::Plan(format!(
                "function _pg_expandarray(anyarray) does not accept {other}"
            ))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let list = arrays[0].as_list::<i32>();
        let offsets = list.offsets();
        let mut positions = vec![0i32; list.values().len()];
        for row in 0..list.len() {
            let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
            for (n, p) in positions[start..end].iter_mut().enumerate() {
                *p = n as i32 + 1;
            }
        }
        let element = list.values().data_type().clone();
        let records = StructArray::try_new(
            Self::fields(&element),
            vec![
                list.values().clone(),
                Arc::new(Int32Array::from(positions)) as ArrayRef,
            ],
            None,
        )?;
        let out = ListArray::try_new(
            Arc::new(Field::new_list_field(records.data_type().clone(), true)),
            offsets.clone(),
            Arc::new(records),
            list.nulls().cloned(),
        )?;
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// Namespace OID of each built-in function.
fn proc_namespaces(statics: &PgCatalogStaticTables) -> HashMap<i64, i64> {
    let mut out = HashMap::new();
    for b in statics.pg_proc.data() {
        let (Ok(oid), Ok(nsp)) = (
            b.schema().index_of("oid"),
            b.schema().index_of("pronamespace"),
        ) else {
            continue;
        };
        let (Ok(oid), Ok(nsp)) = (
            arrow::compute::cast(b.column(oid), &DataType::Int64),
            arrow::compute::cast(b.column(nsp), &DataType::Int64),
        ) else {
            continue;
        };
        let oid = oid.as_primitive::<arrow::datatypes::Int64Type>();
        let nsp = nsp.as_primitive::<arrow::datatypes::Int64Type>();
        for i in 0..oid.len() {
            out.insert(oid.value(i), nsp.value(i));
        }
    }
    out
}

/// Result and argument types of built-in functions, and type names.
struct ProcInfo {
    /// oid -> (return type, returns a set, argument types)
    procs: HashMap<i64, (i64, bool, Vec<i64>)>,
    types: HashMap<i64, String>,
}

impl ProcInfo {
    fn new(statics: &PgCatalogStaticTables) -> Self {
        let mut procs = HashMap::new();
        for b in statics.pg_proc.data() {
            let col = |n: &str| b.schema().index_of(n).ok().map(|i| b.column(i).clone());
            let (Some(oid), Some(ret), Some(set), Some(args)) = (
                col("oid"),
                col("prorettype"),
                col("proretset"),
                col("proargtypes"),
            ) else {
                continue;
            };
            let (Ok(oid), Ok(ret), Ok(args)) = (
                arrow::compute::cast(&oid, &DataType::Int64),
                arrow::compute::cast(&ret, &DataType::Int64),
                arrow::compute::cast(&args, &DataType::Utf8),
            ) else {
                continue;
            };
            let oid = oid.as_primitive::<arrow::datatypes::Int64Type>();
            let ret = ret.as_primitive::<arrow::datatypes::Int64Type>();
            let args = args.as_string::<i32>();
            let set = set.as_boolean();
            for i in 0..oid.len() {
                let arg_types = args
                    .value(i)
                    .split_whitespace()
                    .filter_map(|t| t.parse().ok())
                    .collect();
                procs.insert(oid.value(i), (ret.value(i), set.value(i), arg_types));
            }
        }
        let mut types = HashMap::new();
        for b in statics.pg_type.data() {
            let (Ok(oid), Ok(name)) = (b.schema().index_of("oid"), b.schema().index_of("typname"))
            else {
                continue;
            };
            let Ok(oid) = arrow::compute::cast(b.column(oid), &DataType::Int64) else {
                continue;
            };
            let oid = oid.as_primitive::<arrow::datatypes::Int64Type>();
            let name = b.column(name).as_string::<i32>();
            for i in 0..oid.len() {
                types.insert(oid.value(i), name.value(i).to_string());
            }
        }
        Self { procs, types }
    }

    /// The name `format_type` prints: SQL spellings for Weir's types,
    /// `pg_type.typname` otherwise.
    fn type_name(&self, oid: i64) -> String {
        const KNOWN: &[SqlType] = &[
            SqlType::Bool,
            SqlType::Int2,
            SqlType::Int4,
            SqlType::Int8,
            SqlType::Float4,
            SqlType::Float8,
            SqlType::Numeric(None),
            SqlType::Text,
            SqlType::Varchar(None),
            SqlType::Bytea,
            SqlType::Date,
            SqlType::Time,
            SqlType::Timestamp,
            SqlType::Timestamptz,
            SqlType::Interval,
            SqlType::Uuid,
            SqlType::Json,
            SqlType::Jsonb,
        ];
        if let Some(t) = KNOWN.iter().find(|t| i64::from(t.pg_oid()) == oid) {
            return t.display_name();
        }
        self.types
            .get(&oid)
            .cloned()
            .unwrap_or_else(|| oid.to_string())
    }
}
