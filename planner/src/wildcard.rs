//! `*` in a stored query, expanded to the columns it stood for when the
//! query was created, as PostgreSQL stores a view: a column added to a
//! table later is not read by the views and projections over it, so they
//! keep running (and keep their columns) across `ALTER TABLE ... ADD
//! COLUMN`.
//!
//! The expansion is read off the query's planned output schema, whose
//! fields carry the relation they came from: `SELECT *, a + 1 AS b FROM t`
//! planned to `(t.x, t.y, b)` becomes `SELECT t.x, t.y, a + 1 AS b FROM t`.
//! Only the outermost `SELECT` is expanded (the one that decides the
//! stored columns; a `*` nested in a subquery reads only what the outer
//! query uses of it). Where the schema cannot say which fields a `*` stood
//! for (more than one `*` among other items, a field with no relation, a
//! `*` with EXCLUDE/REPLACE options, a join with USING or NATURAL, whose
//! merged columns have no single relation), [`expand_wildcards`] gives
//! `None` and the query is stored as written. The caller plans the
//! expansion again and keeps it only if it plans to the same columns.

use datafusion::common::{DFSchema, TableReference};
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, JoinConstraint, JoinOperator, ObjectName, Query, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, TableFactor, TableWithJoins,
    WildcardAdditionalOptions,
};
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;

/// `query` with the wildcards of its outermost `SELECT` replaced by the
/// columns of `schema` (its planned output) they stand for; `None` when it
/// has none or they cannot be told apart (see the module's docs).
pub fn expand_wildcards(query: &Query, schema: &DFSchema) -> Option<Query> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let wildcards = select
        .projection
        .iter()
        .filter(|item| !matches!(star_of(item), Star::No))
        .count();
    if wildcards == 0 || select.from.iter().any(merges_columns) {
        return None;
    }
    let explicit = select.projection.len() - wildcards;
    if wildcards > 1 && explicit > 0 {
        return None;
    }
    let fields: Vec<(Option<&TableReference>, &str)> =
        schema.iter().map(|(q, f)| (q, f.name().as_str())).collect();
    // A lone wildcard stands for what the explicit items leave; each of
    // several (qualified ones, with nothing else) for its relation's run.
    let width_of_one = fields.len().checked_sub(explicit)?;
    let mut items = Vec::with_capacity(fields.len());
    let mut next = 0;
    for item in &select.projection {
        let qualifier = match star_of(item) {
            Star::No => {
                items.push(item.clone());
                next += 1;
                continue;
            }
            Star::Any => None,
            Star::Of(parts) => Some(parts),
            Star::Unplaceable => return None,
        };
        let start = next;
        while next < fields.len()
            && if wildcards == 1 {
                next - start < width_of_one
            } else {
                from_relation(fields[next].0, qualifier.as_ref())
            }
        {
            let (Some(relation), name) = fields[next] else {
                return None;
            };
            if !from_relation(Some(relation), qualifier.as_ref()) {
                return None;
            }
            items.push(SelectItem::UnnamedExpr(column(relation, name)));
            next += 1;
        }
        if next == start {
            return None;
        }
    }
    if next != fields.len() {
        return None;
    }
    let mut expanded = query.clone();
    let SetExpr::Select(select) = expanded.body.as_mut() else {
        return None;
    };
    select.projection = items;
    Some(expanded)
}

/// What a select item is, as far as wildcards go.
enum Star {
    /// Not a wildcard.
    No,
    /// `*`.
    Any,
    /// `t.*`, its name parts normalized.
    Of(Vec<String>),
    /// A wildcard the schema cannot place (options, an expression
    /// qualifier).
    Unplaceable,
}

fn star_of(item: &SelectItem) -> Star {
    match item {
        SelectItem::Wildcard(options) if plain(options) => Star::Any,
        SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(name), o)
            if plain(o) =>
        {
            Star::Of(normalized(name))
        }
        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => Star::Unplaceable,
        _ => Star::No,
    }
}

fn plain(options: &WildcardAdditionalOptions) -> bool {
    options.opt_ilike.is_none()
        && options.opt_exclude.is_none()
        && options.opt_except.is_none()
        && options.opt_replace.is_none()
        && options.opt_rename.is_none()
}

/// Name parts as the planner resolves them: unquoted ones folded to lower
/// case.
fn normalized(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .filter_map(|p| p.as_ident())
        .map(|i| match i.quote_style {
            Some(_) => i.value.clone(),
            None => i.value.to_lowercase(),
        })
        .collect()
}

/// Whether a field of `relation` is one a wildcard qualified by
/// `qualifier` (none: any relation) expands to.
fn from_relation(relation: Option<&TableReference>, qualifier: Option<&Vec<String>>) -> bool {
    match (relation, qualifier) {
        (Some(_), None) => true,
        (Some(relation), Some(parts)) => {
            let written: Vec<&str> = parts.iter().map(String::as_str).collect();
            match written.as_slice() {
                [table] => relation.table() == *table,
                [schema, table] => relation.table() == *table && relation.schema() == Some(*schema),
                _ => false,
            }
        }
        (None, _) => false,
    }
}

/// Whether a FROM item has a join whose columns are merged (USING,
/// NATURAL): its `*` lists the merged column once, under no one relation.
fn merges_columns(from: &TableWithJoins) -> bool {
    let nested = |f: &TableFactor| match f {
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => merges_columns(table_with_joins),
        _ => false,
    };
    nested(&from.relation)
        || from.joins.iter().any(|join| {
            nested(&join.relation)
                || matches!(
                    constraint_of(&join.join_operator),
                    Some(JoinConstraint::Using(_) | JoinConstraint::Natural)
                )
        })
}

fn constraint_of(operator: &JoinOperator) -> Option<&JoinConstraint> {
    match operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c)
        | JoinOperator::Semi(c)
        | JoinOperator::LeftSemi(c)
        | JoinOperator::RightSemi(c)
        | JoinOperator::Anti(c)
        | JoinOperator::LeftAnti(c)
        | JoinOperator::RightAnti(c)
        | JoinOperator::StraightJoin(c) => Some(c),
        _ => None,
    }
}

/// `relation.name`, each part quoted only where it has to be (a keyword
/// is a name after a dot, so only the relation's parts are checked for
/// keywords).
fn column(relation: &TableReference, name: &str) -> Expr {
    let mut parts: Vec<Ident> = relation.to_vec().iter().map(|p| ident(p, true)).collect();
    parts.push(ident(name, false));
    Expr::CompoundIdentifier(parts)
}

fn ident(name: &str, first: bool) -> Ident {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !(first
            && ALL_KEYWORDS
                .binary_search(&name.to_ascii_uppercase().as_str())
                .is_ok());
    if plain {
        Ident::new(name)
    } else {
        Ident::with_quote('"', name)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field};
    use datafusion::sql::sqlparser::ast::Statement;

    use super::*;

    fn schema(fields: &[(Option<&str>, &str)]) -> DFSchema {
        let qualified: Vec<(Option<TableReference>, Arc<Field>)> = fields
            .iter()
            .map(|(q, n)| {
                (
                    q.map(TableReference::from),
                    Arc::new(Field::new(*n, DataType::Int64, true)),
                )
            })
            .collect();
        DFSchema::new_with_metadata(qualified, Default::default()).unwrap()
    }

    fn expanded(sql: &str, fields: &[(Option<&str>, &str)]) -> Option<String> {
        let Statement::Query(query) = crate::parse_sql(sql).unwrap().remove(0) else {
            panic!("not a query");
        };
        let text = expand_wildcards(&query, &schema(fields))?.to_string();
        // What is stored must parse back.
        crate::parse_sql(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        Some(text)
    }

    #[test]
    fn a_star_becomes_the_columns_it_stood_for() {
        assert_eq!(
            expanded(
                "SELECT *, a + 1 AS b FROM t WHERE a > 0 ORDER BY 1",
                &[
                    (Some("t"), "a"),
                    (Some("t"), "Mixed"),
                    (Some("t"), "order"),
                    (None, "b")
                ]
            )
            .as_deref(),
            Some("SELECT t.a, t.\"Mixed\", t.order, a + 1 AS b FROM t WHERE a > 0 ORDER BY 1")
        );
        assert_eq!(
            expanded(
                "SELECT x.*, y.* FROM s.t AS x JOIN u AS y ON x.a = y.a",
                &[(Some("x"), "a"), (Some("y"), "a"), (Some("y"), "c")]
            )
            .as_deref(),
            Some("SELECT x.a, y.a, y.c FROM s.t AS x JOIN u AS y ON x.a = y.a")
        );
        assert_eq!(
            expanded(
                "SELECT y.*, 1 AS one FROM u AS y",
                &[(Some("y"), "a"), (None, "one")]
            )
            .as_deref(),
            Some("SELECT y.a, 1 AS one FROM u AS y")
        );
    }

    #[test]
    fn stars_it_cannot_place_are_left_as_written() {
        // No star, nothing to do.
        assert_eq!(expanded("SELECT a FROM t", &[(Some("t"), "a")]), None);
        // USING merges `a`.
        assert_eq!(
            expanded(
                "SELECT * FROM t JOIN u USING (a)",
                &[(Some("t"), "a"), (Some("u"), "b")]
            ),
            None
        );
        // Two stars among other items.
        assert_eq!(
            expanded(
                "SELECT t.*, 1 AS one, u.* FROM t, u",
                &[(Some("t"), "a"), (None, "one"), (Some("u"), "b")]
            ),
            None
        );
        // A field with no relation, a set operation.
        assert_eq!(
            expanded("SELECT * FROM (VALUES (1))", &[(None, "column1")]),
            None
        );
        assert_eq!(
            expanded("SELECT * FROM t UNION SELECT * FROM u", &[(Some("t"), "a")]),
            None
        );
        // A qualifier that is not where the fields came from.
        assert_eq!(
            expanded("SELECT z.* FROM t AS z", &[(Some("t"), "a")]),
            None
        );
    }
}
