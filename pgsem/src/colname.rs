//! Result column names as PostgreSQL gives them.
//!
//! DataFusion names an unaliased select item after its whole expression
//! (`count(*)`, `Int64(10) / Int64(3)`); PostgreSQL after what the
//! expression is (`count`, `?column?`), by the rules of its
//! `FigureColname`. Drivers that key rows by column name, and users reading
//! psql's header, expect PostgreSQL's. The top-level select list gets those
//! names as aliases.
//!
//! PostgreSQL lets a result have two columns of one name (`SELECT i, i`,
//! `SELECT 1, 2` is two `?column?`); a DataFusion plan cannot. An item whose
//! name an earlier item already has is aliased `name` + [`REPEAT_MARK`] +
//! its position, which no SQL identifier can contain, and
//! [`presented_schema`] takes the mark off again where results leave the
//! plan. Columns a `*` expands to are not known here, so `SELECT *, i` over
//! a table with an `i` still gets DataFusion's error.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    AccessExpr, DataType as SqlDataType, Expr, Ident, Query, SelectItem, SetExpr, Statement,
    TableAliasColumnDef, TableFactor, VisitMut, VisitorMut,
};

use crate::SqlType;

/// How sure the name is: a cast names its column after the type only when
/// the casted expression has no name of its own (`x::text` is `x`).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Strength {
    Weak,
    Strong,
}

/// Table functions in FROM that return one scalar column.
const SCALAR_TABLE_FUNCTIONS: &[&str] = &["generate_series", "range", "unnest"];

/// `FROM generate_series(1, 3) AS g` names its column `g`: PostgreSQL
/// names the one column of a function returning a scalar after the alias,
/// where DataFusion keeps the function's own name (`value`).
pub fn name_function_columns(statement: &mut Statement) {
    struct AliasNamesColumn;
    impl VisitorMut for AliasNamesColumn {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(_),
                alias: Some(alias),
                ..
            } = factor
                && alias.columns.is_empty()
                && name.0.last().and_then(|p| p.as_ident()).is_some_and(|f| {
                    SCALAR_TABLE_FUNCTIONS.contains(&f.value.to_ascii_lowercase().as_str())
                })
            {
                alias.columns = vec![TableAliasColumnDef {
                    name: alias.name.clone(),
                    data_type: None,
                }];
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut AliasNamesColumn);
}

/// Aliases the unaliased items of the statement's top-level select list
/// with PostgreSQL's names, where those are unique in the list.
pub fn name_columns(statement: &mut Statement) {
    let Statement::Query(query) = statement else {
        return;
    };
    let Some(items) = leftmost_select_items(query) else {
        return;
    };
    let names: Vec<Option<String>> = items.iter().map(output_name).collect();
    for (position, (item, name)) in items.iter_mut().zip(&names).enumerate() {
        let Some(name) = name else { continue };
        let repeat = names[..position].contains(&Some(name.clone()));
        let expr = match item {
            SelectItem::UnnamedExpr(expr) => expr,
            SelectItem::ExprWithAlias { expr, .. } if repeat => expr,
            _ => continue,
        };
        let alias = if repeat {
            format!("{name}{REPEAT_MARK}{position}")
        } else if matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
            continue; // DataFusion names a column reference the same way
        } else {
            name.clone()
        };
        *item = SelectItem::ExprWithAlias {
            expr: expr.clone(),
            alias: Ident::with_quote('"', alias),
        };
    }
}

/// Ends the alias of a select item whose name an earlier item has (see the
/// module comment).
pub const REPEAT_MARK: char = '\0';

/// The column name a client sees for a plan's output field name.
pub fn presented_name(name: &str) -> &str {
    name.split(REPEAT_MARK).next().unwrap_or(name)
}

/// `schema` with [`REPEAT_MARK`]s taken off its field names, when it has any.
pub fn presented_schema(schema: &Schema) -> Option<SchemaRef> {
    if !schema
        .fields()
        .iter()
        .any(|f| f.name().contains(REPEAT_MARK))
    {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let name = presented_name(f.name()).to_string();
            f.as_ref().clone().with_name(name)
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// The select list whose names a query's result takes: the first SELECT,
/// through set operations and parentheses.
fn leftmost_select_items(query: &mut Query) -> Option<&mut Vec<SelectItem>> {
    let mut body = query.body.as_mut();
    loop {
        match body {
            SetExpr::Select(select) => return Some(&mut select.projection),
            SetExpr::SetOperation { left, .. } => body = left.as_mut(),
            SetExpr::Query(inner) => body = inner.body.as_mut(),
            _ => return None,
        }
    }
}

/// The name an item's column has; `None` for a wildcard.
fn output_name(item: &SelectItem) -> Option<String> {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => Some(ident_name(alias)),
        SelectItem::UnnamedExpr(expr) => {
            Some(figure(expr).map_or_else(|| "?column?".to_string(), |(name, _)| name))
        }
        _ => None,
    }
}

fn ident_name(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// PostgreSQL's `FigureColnameInternal`: the name an expression gives its
/// column, if any.
fn figure(expr: &Expr) -> Option<(String, Strength)> {
    let strong = |name: &str| Some((name.to_string(), Strength::Strong));
    let weak = |name: &str| Some((name.to_string(), Strength::Weak));
    match expr {
        Expr::Identifier(ident) => Some((ident_name(ident), Strength::Strong)),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map(|ident| (ident_name(ident), Strength::Strong)),
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .map(|ident| (ident_name(ident), Strength::Strong)),
        Expr::Cast {
            expr, data_type, ..
        } => match figure(expr) {
            Some((name, Strength::Strong)) => Some((name, Strength::Strong)),
            _ => Some((type_name(data_type), Strength::Weak)),
        },
        Expr::TypedString(typed) => Some((type_name(&typed.data_type), Strength::Weak)),
        Expr::Interval(_) => weak("interval"),
        Expr::Nested(inner) => figure(inner),
        Expr::Collate { expr, .. } => figure(expr),
        Expr::CompoundFieldAccess { root, access_chain } => match access_chain.last() {
            Some(AccessExpr::Dot(Expr::Identifier(field))) => {
                Some((ident_name(field), Strength::Strong))
            }
            Some(AccessExpr::Dot(_)) => None,
            _ => figure(root),
        },
        Expr::Case { .. } => weak("case"),
        Expr::Array(_) => weak("array"),
        Expr::Tuple(_) => weak("row"),
        Expr::Exists { .. } => strong("exists"),
        Expr::Subquery(query) => subquery_name(query),
        Expr::Extract { .. } => strong("extract"),
        Expr::Substring { .. } => strong("substring"),
        Expr::Position { .. } => strong("position"),
        Expr::Overlay { .. } => strong("overlay"),
        Expr::Trim { .. } => strong("btrim"),
        Expr::Ceil { .. } => strong("ceil"),
        Expr::Floor { .. } => strong("floor"),
        Expr::AtTimeZone { .. } => strong("timezone"),
        _ => None,
    }
}

/// A scalar subquery's column is named after the subquery's one item.
fn subquery_name(query: &Query) -> Option<(String, Strength)> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    match select.projection.first()? {
        SelectItem::ExprWithAlias { alias, .. } => Some((ident_name(alias), Strength::Strong)),
        SelectItem::UnnamedExpr(expr) => figure(expr),
        _ => None,
    }
}

/// The type's name as PostgreSQL prints it in a column name (`int4`,
/// `jsonb`); an array type names its column after its element type.
fn type_name(data_type: &SqlDataType) -> String {
    match SqlType::from_sql(data_type) {
        Ok(SqlType::Array(inner)) => inner.pg_type_name(),
        Ok(t) => t.pg_type_name(),
        Err(_) => data_type
            .to_string()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn named(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        name_columns(&mut statement);
        statement.to_string()
    }

    #[test]
    fn items_take_postgresql_names() {
        assert_eq!(
            named(
                "SELECT count(*), t.x, y::text, '{}'::jsonb, 10 / 3, CASE WHEN true THEN 1 END FROM t"
            ),
            "SELECT count(*) AS \"count\", t.x, y::TEXT AS \"y\", '{}'::JSONB AS \"jsonb\", 10 / 3 AS \"?column?\", CASE WHEN true THEN 1 END AS \"case\" FROM t"
        );
        assert_eq!(
            named("SELECT (SELECT max(y) FROM u), EXISTS (SELECT 1) UNION ALL SELECT 1, true"),
            "SELECT (SELECT max(y) FROM u) AS \"max\", EXISTS (SELECT 1) AS \"exists\" UNION ALL SELECT 1, true"
        );
    }

    #[test]
    fn repeated_names_are_marked_and_presented_without_the_mark() {
        assert_eq!(
            named("SELECT 1, 2"),
            "SELECT 1 AS \"?column?\", 2 AS \"?column?\u{0}1\""
        );
        assert_eq!(
            named("SELECT i, t.i, count(*), sum(x) AS count FROM t"),
            "SELECT i, t.i AS \"i\u{0}1\", count(*) AS \"count\", sum(x) AS \"count\u{0}3\" FROM t"
        );
        let schema = Schema::new(vec![
            Field::new("i", arrow::datatypes::DataType::Int32, true),
            Field::new("i\u{0}1", arrow::datatypes::DataType::Int32, true),
        ]);
        let presented = presented_schema(&schema).expect("marked");
        assert_eq!(presented.field(1).name(), "i");
        assert!(presented_schema(&presented).is_none());
    }
}
