//! `ARRAY(subquery)`, PostgreSQL's array constructor over a query, which
//! DataFusion does not plan (it reports "Invalid function 'array'"). psql
//! sends it for `\d` of a foreign table (its options, its columns' options)
//! and `\d+` of any table (toast options); users write it too.
//!
//! Two rewrites, tried in order:
//!
//! - A query that only maps and filters the elements of one list, which
//!   usually comes from the outer row — `ARRAY(SELECT e FROM unnest(list) x
//!   [WHERE c])`, `ARRAY(SELECT e FROM pg_options_to_table(options) [WHERE
//!   c])` — is a per-row computation DataFusion cannot decorrelate (a table
//!   function of an outer column), but can express with its lambdas:
//!   `array_transform(array_filter(list, v -> c), v -> e)`. For
//!   `pg_options_to_table`, whose rows split each `name=value` element at
//!   its first `=` (how PostgreSQL stores options), `option_name` and
//!   `option_value` become those parts of `v`. The list keeps its order, as
//!   the function's rows do in PostgreSQL.
//! - Any other query of one column becomes an aggregate of its rows,
//!   `(SELECT array_agg(e ORDER BY ...) FROM ... WHERE ...)` (the query's
//!   ORDER BY moves into the aggregate, where it orders the elements);
//!   a query that groups, is DISTINCT, has a LIMIT or is a UNION is first
//!   made a derived table, `(SELECT array_agg(c) FROM (query) AS t(c))`,
//!   unless it also orders its rows, which the derived table would lose
//!   (that shape is refused, see [`has_unrewritable_array`]). A correlated lookup is
//!   then one DataFusion decorrelates as for any aggregate subquery.
//!
//! `array_agg` of no rows is NULL where `ARRAY(...)` is an empty array, so
//! the aggregate is wrapped in `coalesce(..., make_array())`, whose empty
//! list of no type DataFusion coerces to the aggregate's list type.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CaseWhen, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentClause,
    FunctionArguments, GroupByExpr, Ident, LambdaFunction, LambdaFunctionParameter, LambdaSyntax,
    ObjectName, OneOrManyWithParens, OrderByExpr, OrderByKind, Query, Select, SelectItem, SetExpr,
    Statement, TableAlias, TableAliasColumnDef, TableFactor, TableWithJoins, Value,
    visit_expressions, visit_expressions_mut,
};

/// The lambda parameter: one element of the list.
const ELEMENT: &str = "weir_element";
/// The derived table (and its column) of the aggregate over a whole query.
const DERIVED: &str = "weir_array";

/// Whether `statement` has an `ARRAY(subquery)` neither rewrite takes (a
/// grouped, DISTINCT, LIMITed or UNION query that orders its rows), which
/// DataFusion would report as an unknown function `array`.
pub fn has_unrewritable_array(statement: &Statement) -> bool {
    let mut found = false;
    let _ = visit_expressions(statement, |e| {
        if let Expr::Function(f) = e
            && is_array_subquery(f)
            && rewrite_array_subquery(f).is_none()
        {
            found = true;
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

fn is_array_subquery(f: &Function) -> bool {
    let [name] = f.name.0.as_slice() else {
        return false;
    };
    name.as_ident()
        .is_some_and(|i| i.value.eq_ignore_ascii_case("array"))
        && matches!(f.args, FunctionArguments::Subquery(_))
}

/// If `f` is `ARRAY(subquery)`, the expression PostgreSQL means by it.
pub fn rewrite_array_subquery(f: &Function) -> Option<Expr> {
    let FunctionArguments::Subquery(query) = &f.args else {
        return None;
    };
    if !is_array_subquery(f) {
        return None;
    }
    list_map(query).or_else(|| aggregate(query))
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    call_with(name, args, vec![])
}

/// `name(args ...clauses)`: a plain call as the parser would give it.
pub(crate) fn call_with(name: &str, args: Vec<Expr>, clauses: Vec<FunctionArgumentClause>) -> Expr {
    let mut function = crate::window_tvf::function(name, args);
    if let FunctionArguments::List(list) = &mut function.args {
        list.clauses = clauses;
    }
    Expr::Function(function)
}

fn lambda(body: Expr) -> Expr {
    Expr::Lambda(LambdaFunction {
        params: OneOrManyWithParens::One(LambdaFunctionParameter {
            name: Ident::new(ELEMENT),
            data_type: None,
        }),
        body: Box::new(body),
        syntax: LambdaSyntax::Arrow,
    })
}

fn element() -> Expr {
    Expr::Identifier(Ident::new(ELEMENT))
}

fn number(n: i64) -> Expr {
    Expr::value(Value::Number(n.to_string(), false))
}

/// The select of a plain query: no WITH, no LIMIT/FETCH, one output.
fn single_output_select(query: &Query) -> Option<(&Select, &Expr)> {
    if query.with.is_some() || query.limit_clause.is_some() || query.fetch.is_some() {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [item] = select.projection.as_slice() else {
        return None;
    };
    let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) = item else {
        return None;
    };
    Some((select, e))
}

fn is_grouped(select: &Select) -> bool {
    !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty())
        || select.having.is_some()
        || select.distinct.is_some()
}

/// The set-returning function a query reads alone: (function name, its one
/// argument, its alias).
fn only_function(select: &Select) -> Option<(String, &Expr, Option<&TableAlias>)> {
    let [TableWithJoins { relation, joins }] = select.from.as_slice() else {
        return None;
    };
    if !joins.is_empty() {
        return None;
    }
    let last_name = |name: &ObjectName| {
        name.0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.to_ascii_lowercase())
    };
    fn one_arg(args: &[FunctionArg]) -> Option<&Expr> {
        match args {
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => Some(e),
            _ => None,
        }
    }
    match relation {
        TableFactor::Table {
            name,
            alias,
            args: Some(args),
            with_ordinality: false,
            ..
        } => Some((last_name(name)?, one_arg(&args.args)?, alias.as_ref())),
        TableFactor::Function {
            name,
            args,
            alias,
            with_ordinality: false,
            ..
        } => Some((last_name(name)?, one_arg(args)?, alias.as_ref())),
        TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset: false,
            with_ordinality: false,
            ..
        } => match array_exprs.as_slice() {
            [list] => Some(("unnest".into(), list, alias.as_ref())),
            _ => None,
        },
        _ => None,
    }
}

/// The first rewrite of the module comment.
fn list_map(query: &Query) -> Option<Expr> {
    if query.order_by.is_some() {
        return None;
    }
    let (select, output) = single_output_select(query)?;
    if is_grouped(select) {
        return None;
    }
    let (function, list, alias) = only_function(select)?;
    let column = |i: usize, default: &str| {
        alias
            .and_then(|a| a.columns.get(i))
            .map(|c| c.name.value.to_ascii_lowercase())
            .unwrap_or_else(|| default.to_string())
    };
    // What each column of the function's rows is, given one element.
    let columns: Vec<(String, Expr)> = match function.as_str() {
        "unnest" => {
            // PostgreSQL names a scalar function's column after the table
            // alias when no column alias is given.
            let name = alias.map_or("unnest".to_string(), |a| {
                a.columns
                    .first()
                    .map_or(&a.name.value, |c| &c.name.value)
                    .to_ascii_lowercase()
            });
            vec![(name, element())]
        }
        "pg_options_to_table" => {
            let eq = || {
                call(
                    "strpos",
                    vec![
                        element(),
                        Expr::value(Value::SingleQuotedString("=".into())),
                    ],
                )
            };
            let has_eq = || Expr::BinaryOp {
                left: Box::new(eq()),
                op: BinaryOperator::Gt,
                right: Box::new(number(0)),
            };
            let minus_one = Expr::BinaryOp {
                left: Box::new(eq()),
                op: BinaryOperator::Minus,
                right: Box::new(number(1)),
            };
            let plus_one = Expr::BinaryOp {
                left: Box::new(eq()),
                op: BinaryOperator::Plus,
                right: Box::new(number(1)),
            };
            let when = |then: Expr, otherwise: Option<Expr>| Expr::Case {
                case_token: AttachedToken::empty(),
                end_token: AttachedToken::empty(),
                operand: None,
                conditions: vec![CaseWhen {
                    condition: has_eq(),
                    result: then,
                }],
                else_result: otherwise.map(Box::new),
            };
            vec![
                (
                    column(0, "option_name"),
                    when(
                        call("substr", vec![element(), number(1), minus_one]),
                        Some(element()),
                    ),
                ),
                (
                    column(1, "option_value"),
                    when(call("substr", vec![element(), plus_one]), None),
                ),
            ]
        }
        _ => return None,
    };
    let qualifier = alias.map_or(function.clone(), |a| a.name.value.to_ascii_lowercase());
    let substitute = |expr: &Expr| {
        let mut expr = expr.clone();
        let _ = visit_expressions_mut(&mut expr, |e| {
            let name = match e {
                Expr::Identifier(i) => Some(i.value.to_ascii_lowercase()),
                Expr::CompoundIdentifier(parts)
                    if parts.len() == 2 && parts[0].value.eq_ignore_ascii_case(&qualifier) =>
                {
                    Some(parts[1].value.to_ascii_lowercase())
                }
                _ => None,
            };
            if let Some((_, value)) = name.and_then(|n| columns.iter().find(|(c, _)| *c == n)) {
                *e = value.clone();
            }
            ControlFlow::<()>::Continue(())
        });
        expr
    };
    let mut list = list.clone();
    if let Some(condition) = &select.selection {
        list = call("array_filter", vec![list, lambda(substitute(condition))]);
    }
    Some(call(
        "array_transform",
        vec![list, lambda(substitute(output))],
    ))
}

/// The second rewrite of the module comment.
fn aggregate(query: &Query) -> Option<Expr> {
    let inline = single_output_select(query).filter(|(select, _)| !is_grouped(select));
    let aggregated = match inline {
        Some((select, output)) => {
            let order: Vec<OrderByExpr> = match &query.order_by {
                None => vec![],
                Some(order) => match &order.kind {
                    OrderByKind::Expressions(exprs) => exprs
                        .iter()
                        .map(|o| {
                            let mut o = o.clone();
                            // `ORDER BY 1` names the output, which is no
                            // longer a column of the select.
                            if let Expr::Value(v) = &o.expr
                                && matches!(&v.value, Value::Number(n, _) if n == "1")
                            {
                                o.expr = output.clone();
                            }
                            o
                        })
                        .collect(),
                    OrderByKind::All(_) => return None,
                },
            };
            let clauses = if order.is_empty() {
                vec![]
            } else {
                vec![FunctionArgumentClause::OrderBy(order)]
            };
            let mut select = select.clone();
            select.projection = vec![SelectItem::UnnamedExpr(call_with(
                "array_agg",
                vec![output.clone()],
                clauses,
            ))];
            SetExpr::Select(Box::new(select))
        }
        None if query.order_by.is_none() => {
            let derived = Ident::new(DERIVED);
            let select = Select {
                projection: vec![SelectItem::UnnamedExpr(call(
                    "array_agg",
                    vec![Expr::CompoundIdentifier(vec![
                        derived.clone(),
                        derived.clone(),
                    ])],
                ))],
                from: vec![TableWithJoins {
                    relation: TableFactor::Derived {
                        lateral: false,
                        subquery: Box::new(query.clone()),
                        alias: Some(TableAlias {
                            explicit: true,
                            name: derived.clone(),
                            columns: vec![TableAliasColumnDef::from_name(DERIVED)],
                            at: None,
                        }),
                        sample: None,
                    },
                    joins: vec![],
                }],
                ..empty_select()
            };
            SetExpr::Select(Box::new(select))
        }
        None => return None,
    };
    let subquery = Expr::Subquery(Box::new(crate::plain_query(aggregated)));
    Some(call("coalesce", vec![subquery, call("make_array", vec![])]))
}

fn empty_select() -> Select {
    let SetExpr::Select(select) = *crate::parse_sql("SELECT 1")
        .ok()
        .and_then(|mut s| s.pop())
        .and_then(|s| match s {
            datafusion::sql::sqlparser::ast::Statement::Query(q) => Some(q.body),
            _ => None,
        })
        .expect("SELECT 1 parses")
    else {
        unreachable!("SELECT 1 is a select")
    };
    Select {
        projection: vec![],
        ..*select
    }
}

#[cfg(test)]
mod tests {
    fn rewritten(sql: &str) -> String {
        let statement = crate::parse_sql(sql).unwrap().remove(0);
        super::super::compat::rewrite(statement).to_string()
    }

    #[test]
    fn options_of_the_outer_row_are_mapped_with_a_lambda() {
        // psql's `\d` footer of a foreign table.
        assert_eq!(
            rewritten(
                "SELECT array_to_string(ARRAY(SELECT quote_ident(option_name) || ' ' || quote_literal(option_value) FROM pg_catalog.pg_options_to_table(ftoptions)), ', ') FROM pg_catalog.pg_foreign_table f"
            ),
            "SELECT array_to_string(array_transform(ftoptions, weir_element -> quote_ident(CASE WHEN strpos(weir_element, '=') > 0 THEN substr(weir_element, 1, strpos(weir_element, '=') - 1) ELSE weir_element END) || ' ' || quote_literal(CASE WHEN strpos(weir_element, '=') > 0 THEN substr(weir_element, strpos(weir_element, '=') + 1) END)), ', ') FROM pg_catalog.pg_foreign_table f"
        );
        // psql's `\d+` toast options: unnest with a table alias naming the column.
        assert_eq!(
            rewritten(
                "SELECT array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x where x <> '') FROM pg_class tc"
            ),
            "SELECT array_transform(array_filter(tc.reloptions, weir_element -> weir_element <> ''), weir_element -> 'toast.' || weir_element) FROM pg_catalog.pg_class tc"
        );
    }

    #[test]
    fn other_queries_are_aggregated() {
        assert_eq!(
            rewritten(
                "SELECT ARRAY(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid ORDER BY a.attnum DESC) FROM pg_class c"
            ),
            "SELECT coalesce((SELECT array_agg(a.attname ORDER BY a.attnum DESC) FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid), make_array()) FROM pg_catalog.pg_class c"
        );
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT rolname FROM pg_roles ORDER BY 1)"),
            "SELECT coalesce((SELECT array_agg(rolname ORDER BY rolname) FROM pg_catalog.pg_roles), make_array())"
        );
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT DISTINCT relkind FROM pg_class)"),
            "SELECT coalesce((SELECT array_agg(weir_array.weir_array) FROM (SELECT DISTINCT relkind FROM pg_catalog.pg_class) AS weir_array (weir_array)), make_array())"
        );
        // A grouped query that orders its rows is refused; a call named
        // array that is not the constructor is left alone.
        let grouped = "SELECT ARRAY(SELECT k FROM t GROUP BY k ORDER BY k)";
        assert_eq!(rewritten(grouped), grouped);
        let statement = crate::parse_sql(grouped).unwrap().remove(0);
        assert!(super::has_unrewritable_array(&statement));
        let call = "SELECT array(1, 2)";
        assert_eq!(rewritten(call), call);
        let statement = crate::parse_sql(call).unwrap().remove(0);
        assert!(!super::has_unrewritable_array(&statement));
    }
}
