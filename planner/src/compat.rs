//! Rewrites for set-returning catalog functions drivers call in the select
//! list, which DataFusion can only express as `unnest` of a list:
//!
//! - `_pg_expandarray(a)` (pgjdbc's `getPrimaryKeys`) becomes
//!   `unnest(_pg_expandarray(a))`, the scalar `_pg_expandarray` returning
//!   the `(x, n)` records as a list;
//! - `generate_subscripts(a, d)` (SQLAlchemy's constraint reflection) becomes
//!   `unnest(generate_series(1, array_length(a, d)))`.
//!
//! Several such calls in one select list expand in lockstep, as PostgreSQL's
//! set-returning functions do.
//!
//! Two more spellings from the same queries: a record field taken from an
//! expression, `(f(x)).name`, becomes `(f(x)).'name'` (DataFusion accepts
//! only the quoted form there), and `LIKE p ESCAPE 'c'` with an escape other
//! than backslash becomes `LIKE like_escape(p, 'c')` (SQLAlchemy escapes
//! with `/`).
//!
//! DataFusion runs a correlated scalar subquery only when it aggregates.
//! Lookups in `pg_catalog` (a column's default, its type's collation) return
//! at most one row, so a scalar subquery over `pg_catalog` tables alone gets
//! its single output wrapped in `max(...)`, which is the row's value or NULL
//! when there is none, as the subquery's. DataFusion cannot decorrelate
//! conditions on the outer row alone either (SQLAlchemy's `WHERE
//! attribute.atthasdef AND ...`), so those move out into
//! `CASE WHEN <condition> THEN (subquery) END`, which is NULL exactly when the
//! subquery would find no row.
//!
//! `regclass` casts of anything but a literal (literals are resolved by the
//! compatibility parser): `oid::regclass::text` becomes
//! [`REGCLASS_TEXT`]`(oid)`, the relation's name as PostgreSQL prints a
//! regclass, and a text expression cast to `regclass` (a function's result,
//! a cast to text) becomes `to_regclass(text)`. SQLAlchemy's identity
//! reflection chains both: `pg_get_serial_sequence(attrelid::regclass::text,
//! attname)::regclass`.
//!
//! `ARRAY(subquery)` is rewritten by the private `compat_array` module.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    AccessExpr, BinaryOperator, CaseWhen, CastKind, DataType as SqlDataType, Expr, Function,
    FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Query, Select, SelectItem,
    SetExpr, SetOperator, Statement, TableFactor, Value, Visit, Visitor, visit_expressions_mut,
};

fn call(name: &str, args: Vec<Expr>) -> Expr {
    crate::compat_array::call_with(name, args, vec![])
}

/// The plain positional arguments of a call named `name` (any schema).
fn args_of<'a>(f: &'a Function, name: &str) -> Option<Vec<&'a Expr>> {
    let last = f.name.0.last()?.as_ident()?;
    if !last.value.eq_ignore_ascii_case(name) || f.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

const AGGREGATES: &[&str] = &[
    "max",
    "min",
    "count",
    "sum",
    "avg",
    "bool_and",
    "bool_or",
    "every",
    "array_agg",
    "string_agg",
    "json_agg",
    "jsonb_agg",
];

/// Table qualifiers a column reference may use for the subquery's own
/// relations (names and aliases, lowercased); `None` unless every relation
/// is a `pg_catalog` table.
fn own_qualifiers(select: &Select) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for t in &select.from {
        for r in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            let TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = r
            else {
                return None;
            };
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
                .collect();
            if parts.len() != 2 || parts[0] != "pg_catalog" {
                return None;
            }
            names.push(parts[1].clone());
            if let Some(alias) = alias {
                names.push(alias.name.value.to_ascii_lowercase());
            }
        }
    }
    (!names.is_empty()).then_some(names)
}

/// Whether every column `expr` names is qualified by a table not in `own`.
fn only_outer(expr: &Expr, own: &[String]) -> bool {
    struct Columns<'a> {
        own: &'a [String],
        outer: bool,
        any: bool,
    }
    impl Visitor for Columns<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Identifier(_) => self.outer = false,
                Expr::CompoundIdentifier(parts) => {
                    self.any = true;
                    let table = parts[parts.len().saturating_sub(2)]
                        .value
                        .to_ascii_lowercase();
                    if parts.len() < 2 || self.own.contains(&table) {
                        self.outer = false;
                    }
                }
                Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                    self.outer = false
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = Columns {
        own,
        outer: true,
        any: false,
    };
    let _ = expr.visit(&mut v);
    v.outer && v.any
}

fn conjuncts(expr: Expr, out: &mut Vec<Expr>) {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjuncts(*left, out);
            conjuncts(*right, out);
        }
        other => out.push(other),
    }
}

fn and_all(exprs: Vec<Expr>) -> Option<Expr> {
    exprs.into_iter().reduce(|l, r| Expr::BinaryOp {
        left: Box::new(l),
        op: BinaryOperator::And,
        right: Box::new(r),
    })
}

/// Makes a scalar subquery over `pg_catalog` tables plannable (see the
/// module comment): wraps its output in `max` and returns the conditions on
/// the outer row it no longer checks. Other subqueries are left alone.
fn aggregate_catalog_lookup(query: &mut Query) -> Option<Expr> {
    if query.limit_clause.is_some() || query.fetch.is_some() || query.with.is_some() {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if grouped || select.distinct.is_some() || select.having.is_some() {
        return None;
    }
    let own = own_qualifiers(select)?;
    let [item] = select.projection.as_mut_slice() else {
        return None;
    };
    let expr = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return None,
    };
    if let Expr::Function(f) = expr
        && f.name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| AGGREGATES.contains(&i.value.to_ascii_lowercase().as_str()))
    {
        return None;
    }
    *expr = call("max", vec![expr.clone()]);
    let mut parts = Vec::new();
    conjuncts(select.selection.take()?, &mut parts);
    let (outer, inner): (Vec<Expr>, Vec<Expr>) =
        parts.into_iter().partition(|e| only_outer(e, &own));
    select.selection = and_all(inner);
    and_all(outer)
}

/// asyncpg's type introspection finds a domain's base type with a recursive
/// CTE correlated to the outer `pg_type` row, which DataFusion cannot
/// decorrelate: `WITH RECURSIVE typebases(oid, depth) AS (SELECT
/// t2.typbasetype, 0 FROM pg_type t2 WHERE t2.oid = t.oid UNION ALL <one
/// step further>) SELECT oid FROM typebases ORDER BY depth DESC LIMIT 1`.
/// Weir has no `CREATE DOMAIN`, so no type's base type is itself a domain and
/// the walk ends after its first step; that step is the lookup returned here
/// (`SELECT t2.typbasetype FROM pg_catalog.pg_type t2 WHERE t2.oid = t.oid`),
/// which [`aggregate_catalog_lookup`] then makes plannable.
fn domain_base_type_walk(query: &Query) -> Option<Query> {
    let with = query.with.as_ref()?;
    let [cte] = with.cte_tables.as_slice() else {
        return None;
    };
    let SetExpr::SetOperation {
        op: SetOperator::Union,
        left,
        right,
        ..
    } = cte.query.body.as_ref()
    else {
        return None;
    };
    let (SetExpr::Select(anchor), SetExpr::Select(step)) = (left.as_ref(), right.as_ref()) else {
        return None;
    };
    let first_column = |select: &Select| match select.projection.first() {
        Some(SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)))
        | Some(SelectItem::ExprWithAlias {
            expr: Expr::CompoundIdentifier(parts),
            ..
        }) => parts.last().map(|p| p.value.to_ascii_lowercase()),
        _ => None,
    };
    let walks_base_types = with.recursive
        && first_column(anchor).as_deref() == Some("typbasetype")
        && first_column(step).as_deref() == Some("typbasetype")
        && own_qualifiers(anchor).is_some_and(|own| own.iter().any(|q| q == "pg_type"));
    if !walks_base_types {
        return None;
    }
    let mut lookup = Select::clone(anchor);
    // Unaliased: an output named `oid` next to the correlated `t2.oid` makes
    // DataFusion's decorrelation fail on an ambiguous name.
    let base_type = match lookup.projection.swap_remove(0) {
        SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr) => expr,
        _ => return None,
    };
    lookup.projection = vec![SelectItem::UnnamedExpr(base_type)];
    Some(crate::plain_query(SetExpr::Select(Box::new(lookup))))
}

/// Whether `query` is a SELECT of one call to `name`.
fn outputs_call(query: &Query, name: &str) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    matches!(
        select.projection.as_slice(),
        [SelectItem::UnnamedExpr(Expr::Function(f)) | SelectItem::ExprWithAlias { expr: Expr::Function(f), .. }]
            if args_of(f, name).is_some()
    )
}

fn as_json(expr: Expr) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(expr),
        data_type: SqlDataType::JSON,
        array: false,
        format: None,
    }
}

/// Whether `expr` is a CASE each of whose results is NULL or a cast to
/// `json`, one at least: DataFusion's CASE drops the `json` type its
/// results have, so the CASE is cast as a whole.
fn json_or_null_case(expr: &Expr) -> bool {
    let Expr::Case {
        conditions,
        else_result,
        ..
    } = expr
    else {
        return false;
    };
    let is_json = |e: &Expr| {
        matches!(
            e,
            Expr::Cast {
                data_type: SqlDataType::JSON,
                ..
            }
        )
    };
    let is_null = |e: &Expr| matches!(e, Expr::Value(v) if v.value == Value::Null);
    let results: Vec<&Expr> = conditions
        .iter()
        .map(|c| &c.result)
        .chain(else_result.as_deref())
        .collect();
    results.iter().any(|e| is_json(e)) && results.iter().all(|e| is_json(e) || is_null(e))
}

fn case(branches: Vec<(Expr, Expr)>, else_result: Option<Expr>) -> Expr {
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: branches
            .into_iter()
            .map(|(condition, result)| CaseWhen { condition, result })
            .collect(),
        else_result: else_result.map(Box::new),
    }
}

/// A catalog lookup whose output holds a comparison of the outer row
/// alone (SQLAlchemy's identity reflection: `json_build_object('always',
/// a.attidentity = 'a', 'start', s.seqstart, ...)`), which DataFusion cannot
/// decorrelate, as `CASE WHEN c THEN <lookup with c true> WHEN NOT c THEN
/// <with c false> ELSE <with c NULL> END`: the same value, with nothing of
/// the outer row left in any lookup's output.
fn split_on_outer_comparison(query: &Query) -> Option<Expr> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let own = own_qualifiers(select)?;
    let [SelectItem::UnnamedExpr(output) | SelectItem::ExprWithAlias { expr: output, .. }] =
        select.projection.as_slice()
    else {
        return None;
    };
    let mut found = None;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(output, |e| {
        let comparison = matches!(
            e,
            Expr::BinaryOp {
                op: BinaryOperator::Eq
                    | BinaryOperator::NotEq
                    | BinaryOperator::Lt
                    | BinaryOperator::LtEq
                    | BinaryOperator::Gt
                    | BinaryOperator::GtEq,
                ..
            }
        );
        if comparison && only_outer(e, &own) {
            found = Some(e.clone());
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    let comparison = found?;
    let taking = |value: Value| {
        let mut lookup = query.clone();
        let _ = visit_expressions_mut(&mut lookup, |e| {
            if *e == comparison {
                *e = Expr::value(value.clone());
            }
            ControlFlow::<()>::Continue(())
        });
        Expr::Subquery(Box::new(lookup))
    };
    Some(case(
        vec![
            (comparison.clone(), taking(Value::Boolean(true))),
            (
                Expr::UnaryOp {
                    op: datafusion::sql::sqlparser::ast::UnaryOperator::Not,
                    expr: Box::new(Expr::Nested(Box::new(comparison.clone()))),
                },
                taking(Value::Boolean(false)),
            ),
        ],
        Some(taking(Value::Null)),
    ))
}

/// The function Weir registers for `oid::regclass::text`.
pub const REGCLASS_TEXT: &str = "weir_regclass_text";

fn is_regclass(data_type: &SqlDataType) -> bool {
    match data_type {
        SqlDataType::Regclass => true,
        SqlDataType::Custom(name, modifiers) => {
            modifiers.is_empty()
                && name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .is_some_and(|i| i.value.eq_ignore_ascii_case("regclass"))
        }
        _ => false,
    }
}

fn is_text(data_type: &SqlDataType) -> bool {
    matches!(
        data_type,
        SqlDataType::Text | SqlDataType::Varchar(_) | SqlDataType::String(_)
    )
}

/// A function's arguments that are `oid::regclass::text` as
/// [`REGCLASS_TEXT`]`(oid)`: the relation's name, as the function expects
/// (SQLAlchemy's `pg_get_serial_sequence(attrelid::regclass::text, ...)`).
/// Only there: an ORDER BY of it beside a select item `oid::regclass`
/// (psql's `\d`) must still read as that item, which DataFusion resolves
/// only while the expression is the same.
fn regclass_text_arguments(f: &mut Function) {
    let FunctionArguments::List(list) = &mut f.args else {
        return;
    };
    for arg in &mut list.args {
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = arg else {
            continue;
        };
        if let Expr::Cast {
            expr: inner,
            data_type,
            ..
        } = e
            && is_text(data_type)
            && let Expr::Cast {
                expr: oid,
                data_type: inner_type,
                ..
            } = inner.as_ref()
            && is_regclass(inner_type)
        {
            *e = call(REGCLASS_TEXT, vec![(**oid).clone()]);
        }
    }
}

/// The rewrite of `CAST(inner AS data_type)`, a text expression cast to
/// regclass (see the module's docs).
fn regclass_cast(inner: &Expr, data_type: &SqlDataType) -> Option<Expr> {
    let names_a_relation = match inner {
        Expr::Function(_) => true,
        Expr::Cast { data_type, .. } => is_text(data_type),
        _ => false,
    };
    (is_regclass(data_type) && names_a_relation).then(|| call("to_regclass", vec![inner.clone()]))
}

/// A regclass a query returns prints as the relation's name in
/// PostgreSQL (psql's `\d` shows the tables that reference this one as
/// `conrelid::regclass`): each output column of the statement's SELECT
/// that is a regclass cast of an OID under a name of its own (`AS
/// ontable`) becomes [`REGCLASS_TEXT`] of it. (Unnamed, the column would
/// take the OID column's name, which DataFusion finds ambiguous beside that
/// column: those stay numbers.)
///
/// Run before the output columns are named (`weir_pgsem::name_columns`),
/// so only names the query gives count.
pub fn name_regclass_outputs(statement: &mut Statement) {
    let Statement::Query(query) = statement else {
        return;
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    for item in &mut select.projection {
        let SelectItem::ExprWithAlias { expr, .. } = item else {
            continue;
        };
        let Expr::Cast {
            expr: oid,
            data_type,
            ..
        } = expr
        else {
            continue;
        };
        if !is_regclass(data_type) {
            continue;
        }
        *expr = call(REGCLASS_TEXT, vec![(**oid).clone()]);
    }
}

/// Applies the rewrites to one statement.
pub fn rewrite(mut statement: Statement) -> Statement {
    let _ = visit_expressions_mut(&mut statement, |expr| {
        match expr {
            Expr::CompoundFieldAccess { root, access_chain }
                if !matches!(root.as_ref(), Expr::Identifier(_)) =>
            {
                for access in access_chain.iter_mut() {
                    if let AccessExpr::Dot(Expr::Identifier(field)) = access {
                        let name = if field.quote_style.is_some() {
                            field.value.clone()
                        } else {
                            field.value.to_lowercase()
                        };
                        *access = AccessExpr::Dot(Expr::value(Value::SingleQuotedString(name)));
                    }
                }
                return ControlFlow::Continue(());
            }
            Expr::Cast {
                expr: inner,
                data_type,
                ..
            } => {
                if let Some(rewritten) = regclass_cast(inner, data_type) {
                    *expr = rewritten;
                }
                return ControlFlow::Continue(());
            }
            Expr::Subquery(query) => {
                if let Some(lookup) = domain_base_type_walk(query) {
                    **query = lookup;
                }
                let builds_json = outputs_call(query, "json_build_object");
                let outer_condition = aggregate_catalog_lookup(query);
                if let Some(split) = split_on_outer_comparison(query) {
                    *expr = split;
                }
                if let Some(condition) = outer_condition {
                    *expr = case(vec![(condition, expr.clone())], None);
                }
                // `max` and CASE keep the value but not its `json` type,
                // which drivers decode by (psycopg: to a dict).
                if builds_json && !matches!(expr, Expr::Subquery(_)) {
                    *expr = as_json(expr.clone());
                }
                return ControlFlow::Continue(());
            }
            Expr::Case { .. } if json_or_null_case(expr) => {
                *expr = as_json(expr.clone());
                return ControlFlow::Continue(());
            }
            Expr::Like {
                pattern,
                escape_char,
                ..
            }
            | Expr::ILike {
                pattern,
                escape_char,
                ..
            } => {
                let custom = match escape_char.as_ref().map(|e| &e.value) {
                    Some(Value::SingleQuotedString(c)) if c != "\\" => Some(c.clone()),
                    _ => None,
                };
                if let Some(c) = custom {
                    let escaped = call(
                        "like_escape",
                        vec![
                            (**pattern).clone(),
                            Expr::value(Value::SingleQuotedString(c)),
                        ],
                    );
                    **pattern = escaped;
                    *escape_char = None;
                }
                return ControlFlow::Continue(());
            }
            _ => {}
        }
        let Expr::Function(f) = expr else {
            return ControlFlow::<()>::Continue(());
        };
        regclass_text_arguments(f);
        if let Some(array) = crate::compat_array::rewrite_array_subquery(f) {
            *expr = array;
        } else if let Some([array]) = args_of(f, "_pg_expandarray").as_deref() {
            let inner = call("_pg_expandarray", vec![(*array).clone()]);
            *expr = call("unnest", vec![inner]);
        } else if let Some([array, dim]) = args_of(f, "generate_subscripts").as_deref() {
            let length = Expr::Cast {
                kind: CastKind::DoubleColon,
                expr: Box::new(call("array_length", vec![(*array).clone(), (*dim).clone()])),
                data_type: SqlDataType::BigInt(None),
                array: false,
                format: None,
            };
            let one = Expr::value(Value::Number("1".into(), false));
            *expr = call("unnest", vec![call("generate_series", vec![one, length])]);
        }
        ControlFlow::Continue(())
    });
    statement
}

pub use crate::compat_array::has_unrewritable_array;

/// Whether every table `statement` reads is a system table (`pg_catalog`,
/// `information_schema`, `weir_catalog`, or an unqualified `pg_*` name).
pub fn reads_only_catalog(statement: &Statement) -> bool {
    let (any, system) = relations_are_system(statement);
    any && system
}

/// Whether every relation `statement` reads (possibly none, as in
/// `SELECT weir_wait_ready('10s')`) is a system table.
pub fn reads_only_system(statement: &Statement) -> bool {
    relations_are_system(statement).1
}

/// (whether `statement` reads any relation, whether all it reads are
/// system tables).
fn relations_are_system(statement: &Statement) -> (bool, bool) {
    use datafusion::sql::sqlparser::ast::visit_relations;
    const SYSTEM: [&str; 3] = ["pg_catalog", "information_schema", "weir_catalog"];
    let mut any = false;
    let flow = visit_relations(statement, |name| {
        any = true;
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
            .collect();
        let system = match parts.as_slice() {
            [table] => table.starts_with("pg_"),
            [.., schema, _] => SYSTEM.contains(&schema.as_str()),
            [] => false,
        };
        if system {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    });
    (any, flow.is_continue())
}

/// The name of every relation `statement` reads, each as its lower-cased
/// parts (`["weir_catalog", "sources"]`, `["t"]`), in the order they appear.
pub fn relation_names(statement: &Statement) -> Vec<Vec<String>> {
    use datafusion::sql::sqlparser::ast::visit_relations;
    let mut names = Vec::new();
    let _ = visit_relations(statement, |name| {
        names.push(
            name.0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
                .collect(),
        );
        ControlFlow::<()>::Continue(())
    });
    names
}

/// How many scalar subqueries the select lists of `statement` hold.
pub fn select_subquery_count(statement: &Statement) -> usize {
    let mut copy = statement.clone();
    null_select_subqueries(&mut copy, |_| false)
}

/// Replaces the select-list scalar subqueries whose number (in the order
/// [`select_subquery_count`] counts them) `null` picks with NULL; returns
/// how many there are.
///
/// The last resort for client introspection queries with a lookup
/// DataFusion cannot decorrelate (psql's collation column), which would
/// otherwise fail whole. The caller only does this to statements that read
/// nothing but system tables; a user's query gets DataFusion's error.
pub fn null_select_subqueries(statement: &mut Statement, null: impl Fn(usize) -> bool) -> usize {
    use datafusion::sql::sqlparser::ast::{VisitMut, VisitorMut};

    struct Nulling<F> {
        next: usize,
        null: F,
    }
    impl<F: Fn(usize) -> bool> VisitorMut for Nulling<F> {
        type Break = ();
        // After the children, so a subquery inside a nulled one is
        // counted all the same and the numbering never shifts.
        fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    let (SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. }) =
                        item
                    else {
                        continue;
                    };
                    self.item(expr);
                }
            }
            ControlFlow::Continue(())
        }
    }
    impl<F: Fn(usize) -> bool> Nulling<F> {
        /// The subqueries an item is or picks between (psql's `CASE WHEN
        /// ... THEN (SELECT ...) END`), not those deeper in other
        /// expressions.
        fn item(&mut self, expr: &mut Expr) {
            match expr {
                Expr::Subquery(_) => {
                    if (self.null)(self.next) {
                        *expr = Expr::value(Value::Null);
                    }
                    self.next += 1;
                }
                Expr::Nested(inner) => self.item(inner),
                Expr::Case {
                    conditions,
                    else_result,
                    ..
                } => {
                    for branch in conditions {
                        self.item(&mut branch.result);
                    }
                    if let Some(e) = else_result {
                        self.item(e);
                    }
                }
                _ => {}
            }
        }
    }
    let mut visitor = Nulling { next: 0, null };
    let _ = VisitMut::visit(statement, &mut visitor);
    visitor.next
}

/// Whether optimizing `plan` leaves a subquery DataFusion cannot execute.
pub fn keeps_subqueries(plan: &datafusion::logical_expr::LogicalPlan) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr as DfExpr;
    let mut found = false;
    let _ = plan.apply(|node| {
        node.apply_expressions(|e| {
            found |= e
                .exists(|e| {
                    // DataFusion runs an uncorrelated scalar subquery as it
                    // stands (ScalarSubqueryExec); a correlated one only
                    // once decorrelated into a join.
                    Ok(match e {
                        DfExpr::ScalarSubquery(s) => !s.outer_ref_columns.is_empty(),
                        DfExpr::Exists(_) | DfExpr::InSubquery(_) => true,
                        _ => false,
                    })
                })
                .unwrap_or(false);
            Ok(if found {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let statement = crate::parse_sql(sql).unwrap().remove(0);
        rewrite(statement).to_string()
    }

    #[test]
    fn expandarray_is_unnested() {
        assert_eq!(
            rewritten("SELECT (information_schema._pg_expandarray(i.indkey)).n FROM pg_index i"),
            "SELECT (unnest(_pg_expandarray(i.indkey))).'n' FROM pg_catalog.pg_index i"
        );
    }

    #[test]
    fn generate_subscripts_becomes_a_series() {
        assert_eq!(
            rewritten("SELECT unnest(conkey), generate_subscripts(conkey, 1) FROM pg_constraint"),
            "SELECT unnest(conkey), unnest(generate_series(1, array_length(conkey, 1)::BIGINT)) FROM pg_catalog.pg_constraint"
        );
    }

    #[test]
    fn record_fields_and_custom_escapes_are_respelled() {
        assert_eq!(
            rewritten("SELECT (r.keys).x FROM t AS r WHERE a NOT LIKE 'pg/_' || '%' ESCAPE '/'"),
            "SELECT (r.keys).'x' FROM t AS r WHERE a NOT LIKE like_escape('pg/_' || '%', '/')"
        );
        assert_eq!(
            rewritten("SELECT a FROM t WHERE a LIKE 'x' ESCAPE '\\'"),
            "SELECT a FROM t WHERE a LIKE 'x' ESCAPE '\\'"
        );
    }

    #[test]
    fn catalog_lookups_in_expressions_are_aggregated() {
        assert_eq!(
            rewritten(
                "SELECT CASE WHEN a.atthasdef THEN (SELECT d.adbin FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid) END FROM pg_catalog.pg_attribute a"
            ),
            "SELECT CASE WHEN a.atthasdef THEN (SELECT max(d.adbin) FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid) END FROM pg_catalog.pg_attribute a"
        );
        assert_eq!(
            rewritten(
                "SELECT lower((SELECT d.adbin FROM pg_catalog.pg_attrdef d WHERE a.atthasdef AND d.adrelid = a.attrelid)) FROM pg_catalog.pg_attribute a"
            ),
            "SELECT lower(CASE WHEN a.atthasdef THEN (SELECT max(d.adbin) FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid) END) FROM pg_catalog.pg_attribute a"
        );
        // asyncpg's introspection collects a composite type's attributes.
        let aggregated = "SELECT CASE WHEN t.typtype = 'c' THEN (SELECT array_agg(ia.atttypid ORDER BY ia.attnum) FROM pg_catalog.pg_attribute ia WHERE ia.attrelid = t.typrelid) END FROM pg_catalog.pg_type t";
        assert_eq!(rewritten(aggregated), aggregated);
        // asyncpg's domain base-type walk becomes its first step.
        let walk = "SELECT CASE WHEN t.typtype = 'd' THEN (WITH RECURSIVE typebases(oid, depth) AS (SELECT t2.typbasetype AS oid, 0 AS depth FROM pg_type t2 WHERE t2.oid = t.oid UNION ALL SELECT t2.typbasetype AS oid, tb.depth + 1 AS depth FROM pg_type t2, typebases tb WHERE tb.oid = t2.oid AND t2.typbasetype <> 0) SELECT oid FROM typebases ORDER BY depth DESC LIMIT 1) END FROM pg_type t";
        assert_eq!(
            rewritten(walk),
            "SELECT CASE WHEN t.typtype = 'd' THEN (SELECT max(t2.typbasetype) FROM pg_catalog.pg_type t2 WHERE t2.oid = t.oid) END FROM pg_catalog.pg_type t"
        );
        let user_table = "SELECT x FROM t WHERE x > (SELECT y FROM u WHERE u.k = t.k)";
        assert_eq!(rewritten(user_table), user_table);
    }

    #[test]
    fn outer_comparisons_in_a_lookups_output_split_it() {
        assert_eq!(
            rewritten(
                "SELECT CASE WHEN a.attidentity != '' THEN (SELECT json_build_object('always', a.attidentity = 'a', 'start', s.seqstart) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = a.attrelid) END FROM pg_catalog.pg_attribute a"
            ),
            "SELECT CAST(CASE WHEN a.attidentity <> '' THEN CAST(CASE WHEN a.attidentity = 'a' THEN (SELECT max(json_build_object('always', true, 'start', s.seqstart)) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = a.attrelid) WHEN NOT (a.attidentity = 'a') THEN (SELECT max(json_build_object('always', false, 'start', s.seqstart)) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = a.attrelid) ELSE (SELECT max(json_build_object('always', NULL, 'start', s.seqstart)) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = a.attrelid) END AS JSON) END AS JSON) FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn regclass_casts_of_expressions_look_relations_up() {
        // SQLAlchemy's identity reflection.
        assert_eq!(
            rewritten(
                "SELECT CAST(CAST(pg_get_serial_sequence(CAST(CAST(a.attrelid AS REGCLASS) AS TEXT), a.attname) AS REGCLASS) AS OID) FROM pg_catalog.pg_attribute a"
            ),
            "SELECT CAST(to_regclass(pg_get_serial_sequence(weir_regclass_text(a.attrelid), a.attname)) AS OID) FROM pg_catalog.pg_attribute a"
        );
        // Only as a function's argument: an ORDER BY keeps its spelling.
        assert_eq!(
            rewritten(
                "SELECT lower(c.oid::pg_catalog.regclass::text), (n || '.t')::text::regclass FROM pg_catalog.pg_class c ORDER BY c.oid::regclass::text"
            ),
            "SELECT lower(weir_regclass_text(c.oid)), to_regclass((n || '.t')::TEXT) FROM pg_catalog.pg_class c ORDER BY c.oid::REGCLASS::TEXT"
        );
        // An OID column cast to regclass in an expression is the number it
        // is; as a named output column it prints as the name.
        let plain =
            "SELECT c.oid::REGCLASS FROM pg_catalog.pg_class c WHERE c.oid::REGCLASS = 1259";
        assert_eq!(rewritten(plain), plain);
        let mut named =
            crate::parse_sql("SELECT c.oid::regclass AS t FROM pg_catalog.pg_class c").unwrap();
        name_regclass_outputs(&mut named[0]);
        assert_eq!(
            named[0].to_string(),
            "SELECT weir_regclass_text(c.oid) AS t FROM pg_catalog.pg_class c"
        );
    }

    #[test]
    fn other_calls_are_left_alone() {
        assert_eq!(rewritten("SELECT lower('A')"), "SELECT lower('A')");
    }
}
