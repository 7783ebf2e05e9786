//! PostgreSQL value semantics on top of DataFusion's plans.
//!
//! DataFusion types and evaluates some things differently from PostgreSQL;
//! these plan rewrites (never SQL text rewrites) close the gaps:
//!
//! - [`pg_result_types`]: integer literals that fit are `int4`, PostgreSQL's
//!   rule (DataFusion makes every integer literal `int8`), `avg(int)` is
//!   numeric. Runs on the bound plan, before type coercion, so result
//!   schemas (RowDescription) see it.
//! - [`PgSemantics`] (an analyzer rule after type coercion): casts from text
//!   to bytea, arrays, interval, uuid, json, jsonb and varchar(n) read the
//!   text as PostgreSQL does; integer `+ - *` fail with 22003 on overflow;
//!   a cast to unconstrained `numeric` keeps the value's own scale;
//!   `numeric / numeric` keeps 16 decimals at least ([`crate::numeric_div`]).
//! - `pg_typeof`; `array_agg` keeps its argument's type ([`crate::array_agg`]).
//! - json's `->`, `->>`, `#>`, `#>>` ([`crate::json_ops`]); jsonb's `@>`, `<@`,
//!   `?`, `?|`, `?&` ([`crate::jsonb_predicates`]).
//! - `to_char` with PostgreSQL's template patterns ([`crate::to_char`]);
//!   `quote_literal` ([`crate::quote`]).
//! - Date and time text read as PostgreSQL reads it, in the session's
//!   DateStyle order and TimeZone ([`crate::datetime_in`]); the analyzer finds
//!   those in [`SessionSettings`] and `datafusion.execution.time_zone`.

use std::sync::Arc;

use crate::{PG_TYPE_METADATA_KEY, SqlType};
use crate::{array_agg, datetime_in, numeric_div, quote, to_char, udfs};
use arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

/// Field metadata key for the declared length of a `varchar(n)` cast.
pub const VARCHAR_LEN_KEY: &str = "weir.varchar_len";
/// Tag value marking a cast to `numeric` without precision.
pub const UNCONSTRAINED_NUMERIC: &str = "numeric";

datafusion::common::extensions_options! {
    /// Session variables the analyzer rule reads; the session sets them
    /// before it plans a statement.
    pub struct SessionSettings {
        /// The session's DateStyle (`ISO, MDY`), whose order reads dates.
        pub date_style: String, default = "ISO, MDY".to_string()
    }
}

impl datafusion::common::config::ConfigExtension for SessionSettings {
    const PREFIX: &'static str = "weir";
}

/// How date/time text reads under `config` (its DateStyle and TimeZone).
pub fn datetime_context(config: &ConfigOptions) -> datetime_in::DateTimeContext {
    let order = config
        .extensions
        .get::<SessionSettings>()
        .map(|s| datetime_in::DateOrder::of_date_style(&s.date_style))
        .unwrap_or_default();
    datetime_in::DateTimeContext {
        order,
        time_zone: config
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "+00:00".into()),
    }
}

/// Adds the analyzer rule to a session template, after type coercion.
pub fn install(builder: &mut SessionStateBuilder) {
    builder
        .analyzer()
        .get_or_insert_with(datafusion::optimizer::Analyzer::new)
        .rules
        .push(Arc::new(PgSemantics));
}

/// The functions this module defines for SQL: `pg_typeof`.
pub fn functions() -> Vec<datafusion::logical_expr::ScalarUDF> {
    vec![
        udfs::PgTypeof::udf(),
        udfs::TimeZoneFn::udf(),
        to_char::ToChar::udf(),
        quote::udf(),
    ]
}

/// The aggregates this module defines, replacing DataFusion's of the same
/// name: `array_agg`.
pub fn aggregate_functions() -> Vec<datafusion::logical_expr::AggregateUDF> {
    vec![array_agg::udaf()]
}

/// What a rewrite may do in the plan node it is rewriting.
#[derive(Debug, Clone, Copy)]
struct NodeKind {
    may_change_type: bool,
    checks_overflow: bool,
}

/// Rewrites each node's expressions bottom-up (subqueries included),
/// keeping the names they had, and recomputes schemas.
fn rewrite_plan(
    plan: LogicalPlan,
    skip: impl Fn(&LogicalPlan) -> bool,
    f: impl Fn(Expr, &DFSchema, NodeKind) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|plan| {
        if skip(&plan) {
            return Ok(Transformed::no(plan));
        }
        let mut schema = merge_schema(&plan.inputs());
        if let LogicalPlan::TableScan(scan) = &plan {
            schema.merge(&DFSchema::try_from_qualified_schema(
                scan.table_name.clone(),
                &scan.source.schema(),
            )?);
        }
        let node = NodeKind {
            // Values keeps the schema it was built with, so types must not change there.
            may_change_type: !matches!(plan, LogicalPlan::Values(_)),
            // Overflow checks go wherever integers are computed: outputs,
            // and predicates, where a wrapped sum would silently pick the
            // wrong rows (PostgreSQL fails the statement with 22003).
            checks_overflow: matches!(
                plan,
                LogicalPlan::Projection(_)
                    | LogicalPlan::Aggregate(_)
                    | LogicalPlan::Window(_)
                    | LogicalPlan::Values(_)
                    | LogicalPlan::Filter(_)
                    | LogicalPlan::Join(_)
            ),
        };
        let preserver = NamePreserver::new(&plan);
        let transformed = plan.map_expressions(|expr| {
            let saved = preserver.save(&expr);
            Ok(f(expr, &schema, node)?.update_data(|e| saved.restore(e)))
        })?;
        // Every node restates its schema, not only the rewritten ones: a
        // projection that passes a rewritten literal's column through would
        // otherwise still promise the old type, and execution fails on the
        // mismatch (INSERT ... SELECT 0 into a bigint column did).
        let changed = transformed.transformed;
        let recomputed = transformed.data.recompute_schema()?;
        Ok(if changed {
            Transformed::yes(recomputed)
        } else {
            Transformed::no(recomputed)
        })
    })
    .map(|t| t.data)
}

/// PostgreSQL's result types, applied to the bound plan:
/// - integer literals that fit in 32 bits are `int4` (LIMIT/OFFSET stay
///   `int8`, as DataFusion requires, and so do VALUES rows, whose schema
///   is fixed when they are built);
/// - `avg` of integers is `numeric` (16 decimals, PostgreSQL's usual
///   division scale) and so is `sum` of `bigint`; `avg` of `numeric` has
///   16 decimals too.
pub fn pg_result_types(plan: LogicalPlan) -> Result<LogicalPlan> {
    // A recursive CTE's work table keeps the types it was planned with, so
    // its terms must not change theirs.
    let mut recursive = false;
    plan.apply_with_subqueries(|p| {
        recursive |= matches!(p, LogicalPlan::RecursiveQuery(_));
        Ok(if recursive {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if recursive {
        return Ok(plan);
    }
    rewrite_plan(
        plan,
        |p| matches!(p, LogicalPlan::Limit(_) | LogicalPlan::Values(_)),
        |expr, schema, _| {
            // A lambda's parameter keeps the element type it was bound
            // with, so the list it maps must keep its type too: calls of
            // higher-order functions (`array_transform`, which ARRAY(subquery)
            // becomes) are left as bound.
            let skip_lambdas = |e: Expr| {
                let tnr = if matches!(e, Expr::HigherOrderFunction(_)) {
                    TreeNodeRecursion::Jump
                } else {
                    TreeNodeRecursion::Continue
                };
                Ok(Transformed::new(e, false, tnr))
            };
            expr.transform_down_up(skip_lambdas, |e| match e {
                Expr::Literal(ScalarValue::Int64(Some(n)), meta) if i32::try_from(n).is_ok() => Ok(
                    Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(n as i32)), meta)),
                ),
                Expr::AggregateFunction(mut agg) if agg.params.args.len() == 1 => {
                    let arg_type = agg.params.args[0].get_type(schema)?;
                    let exact = match (agg.func.name(), &arg_type) {
                        ("avg", t) if is_int(t) => Some(DataType::Decimal128(34, 12)),
                        // DataFusion's avg keeps 4 more decimals than its
                        // argument; PostgreSQL's keeps 16 (for averages of
                        // 1 to 9999, as its division does).
                        ("avg", DataType::Decimal128(p, s))
                            if (0..12).contains(s) && i16::from(*p) - i16::from(*s) + 12 <= 28 =>
                        {
                            Some(DataType::Decimal128(p - *s as u8 + 12, 12))
                        }
                        ("sum", DataType::Int64) => Some(DataType::Decimal128(19, 0)),
                        _ => None,
                    };
                    match exact {
                        Some(t) => {
                            let arg = agg.params.args.remove(0);
                            agg.params
                                .args
                                .push(Expr::Cast(Cast::new(Box::new(arg), t)));
                            Ok(Transformed::yes(Expr::AggregateFunction(agg)))
                        }
                        None => Ok(Transformed::no(Expr::AggregateFunction(agg))),
                    }
                }
                Expr::ScalarFunction(mut f)
                    if matches!(f.func.name(), "length" | "character_length")
                        && f.args.len() == 1
                        && matches!(f.args[0].get_type(schema)?, DataType::Binary) =>
                {
                    // length(bytea) counts bytes.
                    let arg = f.args.remove(0);
                    Ok(Transformed::yes(udfs::ByteaLength::udf().call(vec![arg])))
                }
                Expr::BinaryExpr(b) if is_comparison(b.op) => typed_text_literal(b, schema),
                e => Ok(Transformed::no(e)),
            })
        },
    )
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// A string literal compared with a bytea, interval or array value is read
/// as that type, as PostgreSQL types an untyped literal from its context
/// (`v > '3 days'`, `b = '\x01ff'`); DataFusion would compare text.
fn typed_text_literal(b: BinaryExpr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let BinaryExpr { left, op, right } = b;
    let is_text_literal = |e: &Expr| {
        matches!(
            e,
            Expr::Literal(
                ScalarValue::Utf8(Some(_))
                    | ScalarValue::Utf8View(Some(_))
                    | ScalarValue::LargeUtf8(Some(_)),
                _
            )
        )
    };
    let needs_reading = |t: &DataType| {
        matches!(
            t,
            DataType::Binary | DataType::Interval(_) | DataType::List(_)
        )
    };
    let (left, right, changed) = if is_text_literal(&right)
        && let Ok(t) = left.get_type(schema)
        && needs_reading(&t)
    {
        let right = Box::new(Expr::Cast(Cast::new(right, t)));
        (left, right, true)
    } else if is_text_literal(&left)
        && let Ok(t) = right.get_type(schema)
        && needs_reading(&t)
    {
        let left = Box::new(Expr::Cast(Cast::new(left, t)));
        (left, right, true)
    } else {
        (left, right, false)
    };
    let expr = Expr::BinaryExpr(BinaryExpr { left, op, right });
    Ok(if changed {
        Transformed::yes(expr)
    } else {
        Transformed::no(expr)
    })
}

/// The analyzer rule; see the module documentation.
#[derive(Debug)]
pub struct PgSemantics;

impl AnalyzerRule for PgSemantics {
    fn name(&self) -> &str {
        "weir_pg_semantics"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let datetime = datetime_context(config);
        rewrite_plan(
            plan,
            |p| matches!(p, LogicalPlan::Dml(_)),
            |expr, schema, node| expr.transform_up(|e| rewrite_expr(e, schema, node, &datetime)),
        )
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
}

fn is_int(t: &DataType) -> bool {
    matches!(t, DataType::Int16 | DataType::Int32 | DataType::Int64)
}

/// The PostgreSQL type a text cast to `field` must read its input as, when
/// Arrow's string cast would read it differently.
fn text_target(field: &Field) -> Option<SqlType> {
    let tag = field
        .metadata()
        .get(PG_TYPE_METADATA_KEY)
        .map(String::as_str);
    match (field.data_type(), tag) {
        (DataType::Utf8, Some("varchar")) => {
            let len = field.metadata().get(VARCHAR_LEN_KEY)?.parse().ok()?;
            Some(SqlType::Varchar(Some(len)))
        }
        (DataType::Utf8, Some("uuid")) => Some(SqlType::Uuid),
        (DataType::Utf8, Some("json")) => Some(SqlType::Json),
        (DataType::Utf8, Some("jsonb")) => Some(SqlType::Jsonb),
        (DataType::Binary, _) => Some(SqlType::Bytea),
        (DataType::Interval(_), _) => Some(SqlType::Interval),
        (DataType::Date32, _) => Some(SqlType::Date),
        (DataType::Time64(_) | DataType::Time32(_), _) => Some(SqlType::Time),
        (DataType::Timestamp(_, None), _) => Some(SqlType::Timestamp),
        (DataType::Timestamp(_, Some(_)), _) => Some(SqlType::Timestamptz),
        (DataType::List(_), _) => match SqlType::from_field(field)? {
            t @ SqlType::Array(_)
                if arrow::compute::can_cast_types(&t.arrow_type(), field.data_type()) =>
            {
                Some(t)
            }
            _ => None,
        },
        _ => None,
    }
}

fn rewrite_expr(
    expr: Expr,
    schema: &DFSchema,
    node: NodeKind,
    datetime: &datetime_in::DateTimeContext,
) -> Result<Transformed<Expr>> {
    match expr {
        Expr::Cast(Cast { expr: inner, field }) => {
            let from = inner.get_type(schema)?;
            if is_text(&from)
                && let Some(target) = text_target(&field)
            {
                let read = udfs::TextIn::udf(target.clone(), datetime.clone()).call(vec![*inner]);
                // `text[]` plans as a list of Utf8View; the reader makes
                // Utf8 elements, cast on to the planned type.
                return Ok(Transformed::yes(
                    if target.arrow_type() == *field.data_type() {
                        read
                    } else {
                        Expr::Cast(Cast {
                            expr: Box::new(read),
                            field,
                        })
                    },
                ));
            }
            if matches!(from, DataType::Decimal128(..))
                && matches!(field.data_type(), DataType::Float64 | DataType::Float32)
            {
                return Ok(Transformed::yes(
                    udfs::NumericToFloat::udf(field.data_type().clone()).call(vec![*inner]),
                ));
            }
            let unconstrained = field
                .metadata()
                .get(PG_TYPE_METADATA_KEY)
                .is_some_and(|t| t == UNCONSTRAINED_NUMERIC);
            if unconstrained && node.may_change_type {
                // `numeric` without a precision keeps the digits it has.
                let exact = match from {
                    DataType::Decimal128(..) => return Ok(Transformed::yes(*inner)),
                    DataType::Int16 => Some(DataType::Decimal128(5, 0)),
                    DataType::Int32 => Some(DataType::Decimal128(10, 0)),
                    DataType::Int64 => Some(DataType::Decimal128(19, 0)),
                    _ => None,
                };
                if let Some(t) = exact {
                    return Ok(Transformed::yes(Expr::Cast(Cast::new(inner, t))));
                }
            }
            Ok(Transformed::no(Expr::Cast(Cast { expr: inner, field })))
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Divide,
            right,
        }) if node.may_change_type
            && matches!(left.get_type(schema)?, DataType::Decimal128(..))
            && matches!(right.get_type(schema)?, DataType::Decimal128(..)) =>
        {
            Ok(Transformed::yes(
                numeric_div::NumericDiv::udf().call(vec![*left, *right]),
            ))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if node.checks_overflow
                && matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply) =>
        {
            let (lt, rt) = (left.get_type(schema)?, right.get_type(schema)?);
            if lt == rt && is_int(&lt) {
                let op = match op {
                    Operator::Plus => udfs::ArithOp::Add,
                    Operator::Minus => udfs::ArithOp::Sub,
                    _ => udfs::ArithOp::Mul,
                };
                return Ok(Transformed::yes(
                    udfs::CheckedArith::udf(op).call(vec![*left, *right]),
                ));
            }
            Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                left,
                op,
                right,
            })))
        }
        e => Ok(Transformed::no(e)),
    }
}

/// `x AT TIME ZONE z` is PostgreSQL's `timezone(z, x)`: a timestamptz
/// becomes the local timestamp in `z`, a timestamp is read as local time
/// in `z`. (DataFusion plans it as a cast that keeps a timestamptz.)
pub fn at_time_zone_as_function(statement: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{
        Expr as SqlExpr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
        FunctionArguments, Ident, ObjectName, VisitMut, VisitorMut,
    };
    struct AtTimeZone;
    impl VisitorMut for AtTimeZone {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut SqlExpr) -> std::ops::ControlFlow<()> {
            if let SqlExpr::AtTimeZone {
                timestamp,
                time_zone,
            } = expr
            {
                let arg = |e: &SqlExpr| FunctionArg::Unnamed(FunctionArgExpr::Expr(e.clone()));
                *expr = SqlExpr::Function(Function {
                    name: ObjectName::from(vec![Ident::new("timezone")]),
                    uses_odbc_syntax: false,
                    parameters: FunctionArguments::None,
                    args: FunctionArguments::List(FunctionArgumentList {
                        duplicate_treatment: None,
                        args: vec![arg(time_zone), arg(timestamp)],
                        clauses: vec![],
                    }),
                    filter: None,
                    null_treatment: None,
                    over: None,
                    within_group: vec![],
                });
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut AtTimeZone);
}
