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

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    AccessExpr, CastKind, DataType as SqlDataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, Statement, Value,
    visit_expressions_mut,
};

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
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
        if let Some([array]) = args_of(f, "_pg_expandarray").as_deref() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let statement = weir_planner::parse_sql(sql).unwrap().remove(0);
        rewrite(statement).to_string()
    }

    #[test]
    fn expandarray_is_unnested() {
        assert_eq!(
            rewritten("SELECT (information_schema._pg_expandarray(i.indkey)).n FROM pg_index i"),
            "SELECT (unnest(_pg_expandarray(i.indkey))).n FROM pg_index AS i"
        );
    }

    #[test]
    fn generate_subscripts_becomes_a_series() {
        assert_eq!(
            rewritten("SELECT unnest(conkey), generate_subscripts(conkey, 1) FROM pg_constraint"),
            "SELECT unnest(conkey), unnest(generate_series(1, array_length(conkey, 1)::BIGINT)) FROM pg_constraint"
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
    fn other_calls_are_left_alone() {
        assert_eq!(rewritten("SELECT lower('A')"), "SELECT lower('A')");
    }
}
