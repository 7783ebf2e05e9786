//! `CREATE TABLE name (columns..., WATERMARK FOR col AS expr) APPEND ONLY`,
//! which sqlparser has no clauses for: read as table options it does know
//! (`WITH (append_only = true, watermark_for = 'col', watermark_as =
//! 'expr')`), as [`crate::emit_clause`] does for `EMIT ON WINDOW CLOSE`.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::parse::plain_word;

/// The table option `APPEND ONLY` is read as.
pub const APPEND_ONLY_OPTION: &str = "append_only";
/// The table options `WATERMARK FOR col AS expr` is read as.
pub const WATERMARK_FOR_OPTION: &str = "watermark_for";
pub const WATERMARK_AS_OPTION: &str = "watermark_as";

/// The statements of `sql` with the clauses rewritten; `None` when no
/// CREATE TABLE has them (checked cheaply first).
pub(crate) fn rewrite_table_clauses(sql: &str) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    if !(lower.contains("watermark") || lower.contains("append")) {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let text = |ts: &[Token]| ts.iter().map(ToString::to_string).collect::<String>();
    let mut out = String::with_capacity(sql.len() + 80);
    let mut changed = false;
    for segment in tokens.split_inclusive(|t| *t == Token::SemiColon) {
        match rewrite_create_table(segment) {
            Some(rewritten) => {
                out.push_str(&rewritten);
                changed = true;
            }
            None => out.push_str(&text(segment)),
        }
    }
    changed.then_some(out)
}

fn rewrite_create_table(segment: &[Token]) -> Option<String> {
    let text = |ts: &[Token]| ts.iter().map(ToString::to_string).collect::<String>();
    let significant: Vec<usize> = (0..segment.len())
        .filter(|&i| !matches!(segment[i], Token::Whitespace(_) | Token::SemiColon))
        .collect();
    let word = |n: usize| significant.get(n).and_then(|&i| plain_word(&segment[i]));
    if word(0).as_deref() != Some("CREATE") || word(1).as_deref() != Some("TABLE") {
        return None;
    }
    // The column list: the first `(` and its matching `)`.
    let open = significant
        .iter()
        .position(|&i| segment[i] == Token::LParen)?;
    let mut depth = 0;
    let mut close = None;
    // `WATERMARK FOR col AS expr` at depth 1: (start, end) in `significant`.
    let mut watermark = None;
    for (n, &i) in significant.iter().enumerate().skip(open) {
        match &segment[i] {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    close = Some(n);
                    break;
                }
            }
            _ if depth == 1
                && watermark.is_none()
                && word(n).as_deref() == Some("WATERMARK")
                && word(n + 1).as_deref() == Some("FOR") =>
            {
                watermark = Some(n);
            }
            _ => {}
        }
    }
    let close = close?;
    let last = significant.len();
    let append_only = last >= close + 3
        && word(last - 2).as_deref() == Some("APPEND")
        && word(last - 1).as_deref() == Some("ONLY");
    if watermark.is_none() && !append_only {
        return None;
    }
    let mut options = Vec::new();
    if append_only {
        options.push(format!("{APPEND_ONLY_OPTION} = true"));
    }
    // Through the column list, without the clause (and the comma before
    // it, or after it when it comes first).
    let mut head: Vec<Token> = segment[..significant[close] + 1].to_vec();
    if let Some(start) = watermark {
        let (column, expr, end) = watermark_clause(segment, &significant, start, close)?;
        options.push(format!(
            "{WATERMARK_FOR_OPTION} = '{}', {WATERMARK_AS_OPTION} = '{}'",
            column.replace('\'', "''"),
            expr.trim().replace('\'', "''")
        ));
        let before = (open + 1..start)
            .rev()
            .find(|&n| segment[significant[n]] == Token::Comma);
        let (cut_from, cut_to) = match before {
            Some(comma) => (significant[comma], significant[end]),
            None if segment[significant[end]] == Token::Comma => {
                (significant[start], significant[end] + 1)
            }
            None => (significant[start], significant[end]),
        };
        head.drain(cut_from..cut_to);
    }
    let rest_to = if append_only {
        significant[last - 2]
    } else {
        segment.len()
    };
    let rest = text(&segment[significant[close] + 1..rest_to]);
    let semi = if segment.last() == Some(&Token::SemiColon) && append_only {
        ";"
    } else {
        ""
    };
    Some(format!(
        "{} WITH ({}){}{semi}",
        text(&head),
        options.join(", "),
        rest.trim_end()
    ))
}

/// The column, the expression text and where the clause ends (the `,` or
/// `)` after it, in `significant`) of `WATERMARK FOR col AS expr` starting
/// at `start`.
fn watermark_clause(
    segment: &[Token],
    significant: &[usize],
    start: usize,
    close: usize,
) -> Option<(String, String, usize)> {
    let column = match &segment[*significant.get(start + 2)?] {
        // As the column's name is normalized: unquoted folds to lower case.
        Token::Word(w) if w.quote_style.is_some() => w.value.clone(),
        Token::Word(w) => w.value.to_lowercase(),
        _ => return None,
    };
    if significant
        .get(start + 3)
        .and_then(|&i| plain_word(&segment[i]))
        .as_deref()
        != Some("AS")
    {
        return None;
    }
    let mut depth = 0;
    let mut end = close;
    for (n, &i) in significant.iter().enumerate().skip(start) {
        match &segment[i] {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => {
                end = n;
                break;
            }
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                end = n;
                break;
            }
            _ => {}
        }
    }
    let expr = segment[*significant.get(start + 4)?..significant[end]]
        .iter()
        .map(ToString::to_string)
        .collect();
    Some((column, expr, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        rewrite_table_clauses(sql).unwrap_or_else(|| panic!("{sql}: not rewritten"))
    }

    #[test]
    fn watermark_and_append_only_become_table_options() {
        assert_eq!(
            rewritten(
                "CREATE TABLE t (id INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY"
            ),
            "CREATE TABLE t (id INT, ts TIMESTAMP) WITH (append_only = true, \
             watermark_for = 'ts', watermark_as = 'ts - INTERVAL ''5'' SECOND')"
        );
        assert_eq!(
            rewritten("create table t (a int, b numeric(10, 2)) append only;"),
            "create table t (a int, b numeric(10, 2)) WITH (append_only = true);"
        );
        // First in the list, and with a function call in the expression.
        assert_eq!(
            rewritten(
                "CREATE TABLE t (WATERMARK FOR \"Ts\" AS date_trunc('second', \"Ts\"), \"Ts\" TIMESTAMP)"
            ),
            "CREATE TABLE t ( \"Ts\" TIMESTAMP) WITH (watermark_for = 'Ts', \
             watermark_as = 'date_trunc(''second'', \"Ts\")')"
        );
    }

    #[test]
    fn other_statements_are_left_alone() {
        for sql in [
            "CREATE TABLE t (watermark INT)",
            "SELECT 'watermark for x as y', 'append only'",
            "CREATE SOURCE s (ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (connector = 'datagen')",
            "INSERT INTO append VALUES (1)",
        ] {
            assert_eq!(rewrite_table_clauses(sql), None, "{sql}");
        }
    }
}
