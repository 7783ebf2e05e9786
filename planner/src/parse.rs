//! Parsing SQL text into statements.

use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::{FlushType, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

static PARSER: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// A syntax error, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    pub message: String,
    /// 1-based character offset into the whole query string, when known.
    pub position: Option<usize>,
}

/// Parses every statement of `sql`. Like PostgreSQL, a syntax error anywhere
/// fails the whole string before any statement runs.
pub fn parse_sql(sql: &str) -> Result<Vec<Statement>, ParseError> {
    if let Some((head, tail)) = split_at_flush(sql) {
        let mut statements = parse_sql(&head)?;
        statements.push(flush_statement());
        let offset = sql.chars().count() - tail.chars().count();
        let rest = parse_sql(&tail).map_err(|mut e| {
            e.position = e.position.map(|p| p + offset);
            e
        })?;
        statements.extend(rest);
        return Ok(statements);
    }
    let Some((head, tail)) = split_after_copy_from_stdin(sql) else {
        return parse_statements(sql);
    };
    let mut statements = parse_statements(&head)?;
    let offset = head.chars().count();
    let rest = parse_sql(&tail).map_err(|mut e| {
        e.position = e.position.map(|p| p + offset);
        e
    })?;
    statements.extend(rest);
    Ok(statements)
}

/// Weir's `FLUSH` (wait until every acknowledged write is visible in every
/// projection). sqlparser only knows MySQL's FLUSH, so the statement is
/// built here and the session reads `FLUSH TABLES` with no table list as it.
pub fn flush_statement() -> Statement {
    Statement::Flush {
        object_type: FlushType::Tables,
        location: None,
        channel: None,
        read_lock: false,
        export: false,
        tables: Vec::new(),
    }
}

/// Splits around the first statement that is exactly `FLUSH`: the text
/// before it and the text after its `;`.
fn split_at_flush(sql: &str) -> Option<(String, String)> {
    if !sql.to_ascii_lowercase().contains("flush") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let text = |ts: &[Token]| ts.iter().map(ToString::to_string).collect::<String>();
    let mut start = 0;
    for end in (0..=tokens.len()).filter(|&i| i == tokens.len() || tokens[i] == Token::SemiColon) {
        let words: Vec<&Token> = tokens[start..end]
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect();
        if let [Token::Word(w)] = words.as_slice()
            && w.quote_style.is_none()
            && w.value.eq_ignore_ascii_case("flush")
        {
            let tail_from = (end + 1).min(tokens.len());
            return Some((text(&tokens[..start]), text(&tokens[tail_from..])));
        }
        start = end + 1;
    }
    None
}

/// sqlparser reads whatever follows `COPY ... FROM STDIN;` as inline data
/// (psql's dump format), which would swallow the statements after it. On the
/// wire the data comes separately, so the string is split after each such
/// COPY: the text up to and including its `;`, and the rest.
fn split_after_copy_from_stdin(sql: &str) -> Option<(String, String)> {
    if !sql.to_ascii_lowercase().contains("stdin") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    let (mut at_start, mut is_copy, mut from_stdin) = (true, false, false);
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Whitespace(_) => continue,
            Token::SemiColon => {
                let more = tokens[i + 1..]
                    .iter()
                    .any(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon));
                if is_copy && from_stdin && more {
                    let text =
                        |ts: &[Token]| ts.iter().map(ToString::to_string).collect::<String>();
                    return Some((text(&tokens[..=i]), text(&tokens[i + 1..])));
                }
                (at_start, is_copy, from_stdin) = (true, false, false);
                continue;
            }
            t if at_start => is_copy = word(t, "copy"),
            t if is_copy && word(t, "stdin") => from_stdin = true,
            _ => {}
        }
        at_start = false;
    }
    None
}

fn parse_statements(sql: &str) -> Result<Vec<Statement>, ParseError> {
    use crate::sequence_options::{reorder_sequence_options, strip_regclass_casts};
    let stripped = strip_regclass_casts(sql);
    let sql = stripped.as_deref().unwrap_or(sql);
    match reorder_sequence_options(sql) {
        Some(reordered) => parse_reordered_statements(&reordered),
        None => parse_reordered_statements(sql),
    }
}

fn parse_reordered_statements(sql: &str) -> Result<Vec<Statement>, ParseError> {
    if let Some(statements) = parse_with_streaming(sql) {
        return statements;
    }
    parse_plain_statements(sql)
}

/// Splits `sql` around Weir's streaming statements (CREATE SOURCE, ...;
/// see [`crate::streaming_ddl`]), which are parsed apart; `None` when it
/// holds none (checked cheaply first).
fn parse_with_streaming(sql: &str) -> Option<Result<Vec<Statement>, ParseError>> {
    use crate::streaming_ddl::{is_streaming, parse_streaming, to_statement};
    let lower = sql.to_ascii_lowercase();
    if ![
        "source",
        "sink",
        "destination",
        "connectors",
        "connection",
        "secret",
        "sequence",
        "rename",
        "projection",
        "materialized",
        // ALTER ... SET SCHEMA
        "schema",
    ]
    .iter()
    .any(|w| lower.contains(w))
    {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let segments: Vec<&[TokenWithSpan]> = tokens
        .split_inclusive(|t| t.token == Token::SemiColon)
        .collect();
    if !segments.iter().any(|s| is_streaming(s)) {
        return None;
    }
    let text = |ts: &[TokenWithSpan]| ts.iter().map(|t| t.token.to_string()).collect::<String>();
    let mut out = Vec::new();
    let mut offset = 0;
    for segment in segments {
        let segment_text = text(segment);
        let parsed = if is_streaming(segment) {
            let body: Vec<TokenWithSpan> = segment
                .iter()
                .filter(|t| t.token != Token::SemiColon)
                .cloned()
                .collect();
            parse_streaming(body)
                .map(|ddl| vec![to_statement(&ddl)])
                .map_err(|e| {
                    let message = match e {
                        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
                        ParserError::RecursionLimitExceeded => {
                            "statement is nested too deeply".into()
                        }
                    };
                    let position = position_of(&message, &segment_text);
                    let message = match message.find(" at Line: ") {
                        Some(i) => message[..i].to_string(),
                        None => message,
                    };
                    ParseError { message, position }
                })
        } else if segment
            .iter()
            .all(|t| matches!(t.token, Token::Whitespace(_) | Token::SemiColon))
        {
            Ok(Vec::new())
        } else {
            parse_plain_statements(&segment_text)
        };
        match parsed {
            Ok(statements) => out.extend(statements),
            Err(mut e) => {
                e.position = e.position.map(|p| p + offset);
                return Some(Err(e));
            }
        }
        offset += segment_text.chars().count();
    }
    Some(Ok(out))
}

fn parse_plain_statements(sql: &str) -> Result<Vec<Statement>, ParseError> {
    let moved = rewrite_move(sql);
    let sql = moved.as_deref().unwrap_or(sql);
    let emitting = crate::emit_clause::rewrite_emit_on_window_close(sql);
    let sql = emitting.as_deref().unwrap_or(sql);
    let tabled = crate::table_clauses::rewrite_table_clauses(sql);
    let sql = tabled.as_deref().unwrap_or(sql);
    let parsed = match respell(sql) {
        Some(tokens) => Parser::new(&PostgreSqlDialect {})
            .with_tokens_with_locations(tokens)
            .parse_statements()
            .map(|statements| statements.into_iter().map(compat_rewrite).collect()),
        None => compat_parse(sql),
    };
    parsed.map_err(|e| {
        let message = match e {
            ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
            ParserError::RecursionLimitExceeded => "statement is nested too deeply".to_string(),
        };
        let position = position_of(&message, sql).or_else(|| locate_with_plain_parser(sql));
        let message = match message.find(" at Line: ") {
            Some(i) => message[..i].to_string(),
            None => message,
        };
        ParseError { message, position }
    })
}

/// `PARSER.parse`, except that a subquery in a select list keeps its meaning.
///
/// The compatibility parser swaps known client queries it cannot run for
/// ones it can (its blacklist), then rewrites each statement. One of its
/// rewrites replaces every correlated subquery in a select list with NULL,
/// which answers user queries wrongly and hides catalog columns (psql's
/// Default, SQLAlchemy's column defaults). When the swap did not apply,
/// the statement is parsed plainly and rewritten with those subqueries
/// shielded; DataFusion then plans them or says why not.
fn compat_parse(sql: &str) -> Result<Vec<Statement>, ParserError> {
    let compat = PARSER.parse(sql)?;
    let Ok(plain) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
        return Ok(compat);
    };
    let swapped = plain.len() != compat.len()
        || plain
            .iter()
            .zip(&compat)
            .any(|(p, c)| PARSER.rewrite(p.clone()) != *c);
    if swapped {
        return Ok(compat);
    }
    Ok(plain.into_iter().map(compat_rewrite).collect())
}

/// The compatibility rewrites, with select-list subqueries parenthesized
/// first: the NULL-ing rewrite matches only a bare subquery item.
fn compat_rewrite(mut statement: Statement) -> Statement {
    use datafusion::sql::sqlparser::ast::visit_expressions_mut;
    use datafusion::sql::sqlparser::ast::{
        Expr, Query, SelectItem, SetExpr, Value, VisitMut, VisitorMut,
    };
    use std::ops::ControlFlow;

    struct Shield;
    impl VisitorMut for Shield {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } =
                        item
                    {
                        if matches!(expr, Expr::Subquery(_)) {
                            let subquery = std::mem::replace(expr, Expr::value(Value::Null));
                            *expr = Expr::Nested(Box::new(subquery));
                        }
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Shield);
    let _ = statement.visit(&mut QualifyWeirCatalogTables);
    let _ = visit_expressions_mut(&mut statement, |expr| {
        array_cast_elements(expr);
        ControlFlow::<()>::Continue(())
    });
    PARSER.rewrite(statement)
}

/// `pg_catalog` relations Weir serves that the compatibility parser's
/// list lacks (PostgreSQL has them in `pg_catalog`, which is always on the
/// search path).
const WEIR_CATALOG_RELATIONS: &[&str] = &["pg_indexes"];

/// Qualifies an unqualified [`WEIR_CATALOG_RELATIONS`] name with
/// `pg_catalog`, as the compatibility parser does for its own list.
struct QualifyWeirCatalogTables;

impl datafusion::sql::sqlparser::ast::VisitorMut for QualifyWeirCatalogTables {
    type Break = ();
    fn pre_visit_table_factor(
        &mut self,
        factor: &mut datafusion::sql::sqlparser::ast::TableFactor,
    ) -> std::ops::ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{Ident, ObjectName, ObjectNamePart, TableFactor};
        if let TableFactor::Table {
            name, args: None, ..
        } = factor
            && let [ObjectNamePart::Identifier(ident)] = name.0.as_slice()
            && ident.quote_style.is_none()
            && WEIR_CATALOG_RELATIONS
                .iter()
                .any(|r| r.eq_ignore_ascii_case(&ident.value))
        {
            *name = ObjectName(vec![
                ObjectNamePart::Identifier(Ident::new("pg_catalog")),
                ObjectNamePart::Identifier(ident.clone()),
            ]);
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// `'{1,NULL,3}'::int[]` becomes `ARRAY['1', NULL, '3']::int[]`, read the
/// way PostgreSQL reads array text (quotes, escapes, unquoted NULL), so the
/// cast converts each element. The compatibility parser's own rewrite of
/// these literals splits on commas and keeps `NULL` as text.
fn array_cast_elements(expr: &mut datafusion::sql::sqlparser::ast::Expr) {
    use datafusion::sql::sqlparser::ast::{Array, DataType, Expr, Value};
    let Expr::Cast {
        expr: inner,
        data_type: DataType::Array(_),
        ..
    } = expr
    else {
        return;
    };
    let Expr::Value(value) = inner.as_ref() else {
        return;
    };
    let Value::SingleQuotedString(text) = &value.value else {
        return;
    };
    let Ok(elements) = weir_pgsem::parse_array_literal(text) else {
        // Malformed text is left for the cast, which rejects it with 22P02
        // as PostgreSQL does; parenthesized so the compatibility parser does
        // not split it on commas into an array first.
        **inner = Expr::Nested(inner.clone());
        return;
    };
    let elements = elements
        .into_iter()
        .map(|e| match e {
            Some(s) => Expr::value(Value::SingleQuotedString(s)),
            None => Expr::value(Value::Null),
        })
        .collect();
    **inner = Expr::Array(Array {
        elem: elements,
        named: true,
    });
}

/// Statement openings read as another spelling sqlparser knows.
/// PostgreSQL's `CREATE USER name [WITH] option...` is `CREATE ROLE` with
/// LOGIN, but sqlparser reads `CREATE USER` with Snowflake's grammar, which
/// rejects `PASSWORD 'x'`. A projection is stored and served as what
/// sqlparser calls a materialized view; `SHOW CREATE` has no materialized
/// form there, so it reads `VIEW` (Weir has no plain views).
const SPELLINGS: &[(&[&str], &[&str])] = &[
    (&["CREATE", "USER"], &["CREATE", "ROLE"]),
    (
        &["CREATE", "PROJECTION"],
        &["CREATE", "MATERIALIZED", "VIEW"],
    ),
    (&["DROP", "PROJECTION"], &["DROP", "MATERIALIZED", "VIEW"]),
    (
        &["EXPLAIN", "CREATE", "PROJECTION"],
        &["EXPLAIN", "CREATE", "MATERIALIZED", "VIEW"],
    ),
    (
        &["SHOW", "CREATE", "PROJECTION"],
        &["SHOW", "CREATE", "VIEW"],
    ),
    (
        &["SHOW", "CREATE", "MATERIALIZED", "VIEW"],
        &["SHOW", "CREATE", "VIEW"],
    ),
    (&["SHOW", "PROJECTIONS"], &["SHOW", "MATERIALIZED", "VIEWS"]),
];

/// Returns the tokens with [`SPELLINGS`] applied at statement starts, or
/// `None` when no statement needs it. Replacement words take the span of the
/// first word they replace, so error positions stay in the user's text.
fn respell(sql: &str) -> Option<Vec<TokenWithSpan>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len() + 4);
    let mut found = false;
    let mut at_start = true;
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        if matches!(token.token, Token::Whitespace(_)) {
            out.push(token.clone());
            i += 1;
            continue;
        }
        if at_start && let Some((end, words)) = match_spelling(&tokens, i) {
            for (n, word) in words.iter().enumerate() {
                if n > 0 {
                    out.push(TokenWithSpan::new(
                        Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space),
                        token.span,
                    ));
                }
                out.push(TokenWithSpan::new(Token::make_keyword(word), token.span));
            }
            found = true;
            at_start = false;
            i = end;
            continue;
        }
        at_start = matches!(token.token, Token::SemiColon);
        out.push(token.clone());
        i += 1;
    }
    found.then_some(out)
}

/// The spelling whose words start at `tokens[i]`: the index after its last
/// word and the replacement.
fn match_spelling(tokens: &[TokenWithSpan], i: usize) -> Option<(usize, &'static [&'static str])> {
    'patterns: for (pattern, replacement) in SPELLINGS {
        let mut at = i;
        for (n, word) in pattern.iter().enumerate() {
            if n > 0 {
                while matches!(tokens.get(at).map(|t| &t.token), Some(Token::Whitespace(_))) {
                    at += 1;
                }
            }
            match tokens.get(at).map(|t| &t.token) {
                Some(Token::Word(w))
                    if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word) =>
                {
                    at += 1;
                }
                _ => continue 'patterns,
            }
        }
        return Some((at, replacement));
    }
    None
}

/// `FETCH ... INTO` this name is a `MOVE`: sqlparser has no MOVE statement,
/// and PostgreSQL's SQL-level FETCH has no INTO clause to clash with.
pub const MOVE_MARKER: &str = "weir.move";
/// `FETCH ABSOLUTE|RELATIVE n ... INTO` this name (or a MOVE's, the two
/// joined by `.`) means `-n`: sqlparser reads only unsigned counts there.
pub const NEGATED_MARKER: &str = "weir.negated";

/// Rewrites each `FETCH`/`MOVE` statement into the one form sqlparser
/// reads: `FETCH <direction> FROM cursor`, with `INTO "weir.move"` for a
/// MOVE. PostgreSQL also accepts a missing direction (`FETCH c`), a missing
/// `FROM`, `FORWARD`/`BACKWARD` without a count and negative counts; sqlparser
/// does not. `None` when there is nothing to rewrite (checked cheaply first).
fn rewrite_move(sql: &str) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    if !lower.contains("move") && !lower.contains("fetch") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut out = String::with_capacity(sql.len() + 32);
    let mut changed = false;
    for segment in tokens.split_inclusive(|t| *t == Token::SemiColon) {
        let (body, end) = match segment.split_last() {
            Some((Token::SemiColon, body)) => (body, ";"),
            _ => (segment, ""),
        };
        let significant: Vec<&Token> = body
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect();
        let keyword = significant.first().and_then(|t| plain_word(t));
        let rewritten = match keyword.as_deref() {
            Some(k @ ("FETCH" | "MOVE")) => {
                canonical_fetch(&significant[1..]).map(|(fetch, negated)| {
                    match (k == "MOVE", negated) {
                        (false, false) => fetch,
                        (true, false) => format!("{fetch} INTO \"{MOVE_MARKER}\""),
                        (false, true) => format!("{fetch} INTO \"{NEGATED_MARKER}\""),
                        (true, true) => {
                            format!("{fetch} INTO \"{MOVE_MARKER}.{NEGATED_MARKER}\"")
                        }
                    }
                })
            }
            _ => None,
        };
        match rewritten {
            Some(text) => {
                // Keep leading whitespace and comments so positions before
                // the statement stay put.
                for t in body
                    .iter()
                    .take_while(|t| matches!(t, Token::Whitespace(_)))
                {
                    out.push_str(&t.to_string());
                }
                out.push_str(&text);
                out.push_str(end);
                changed = true;
            }
            None => segment.iter().for_each(|t| out.push_str(&t.to_string())),
        }
    }
    changed.then_some(out)
}

pub(crate) fn plain_word(token: &Token) -> Option<String> {
    match token {
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    }
}

/// `FETCH <direction> FROM <name>` for the tokens after FETCH/MOVE, and
/// whether its ABSOLUTE/RELATIVE count stands for its negative; `None` if
/// they are not a cursor command sqlparser should see rewritten.
fn canonical_fetch(tokens: &[&Token]) -> Option<(String, bool)> {
    let mut negated = false;
    let mut i = 0;
    let number = |i: &mut usize| -> Option<i64> {
        let negative = matches!(tokens.get(*i), Some(Token::Minus));
        if negative || matches!(tokens.get(*i), Some(Token::Plus)) {
            *i += 1;
        }
        let Some(Token::Number(n, _)) = tokens.get(*i) else {
            return None;
        };
        *i += 1;
        let n: i64 = n.parse().ok()?;
        Some(if negative { -n } else { n })
    };
    let signed = |n: i64, forward: bool| {
        let way = if (n >= 0) == forward {
            "FORWARD"
        } else {
            "BACKWARD"
        };
        format!("{way} {}", n.unsigned_abs())
    };
    let first = tokens.first().and_then(|t| plain_word(t));
    let direction = match first.as_deref() {
        Some(d @ ("NEXT" | "PRIOR" | "FIRST" | "LAST" | "ALL")) => {
            i = 1;
            d.to_string()
        }
        Some(d @ ("ABSOLUTE" | "RELATIVE")) => {
            i = 1;
            let n = number(&mut i)?;
            // sqlparser reads only unsigned counts here.
            negated = n < 0;
            format!("{d} {}", n.unsigned_abs())
        }
        Some(d @ ("FORWARD" | "BACKWARD")) => {
            i = 1;
            let forward = d == "FORWARD";
            if tokens.get(1).and_then(|t| plain_word(t)).as_deref() == Some("ALL") {
                i = 2;
                format!("{d} ALL")
            } else {
                match number(&mut i) {
                    Some(n) => signed(n, forward),
                    None => format!("{d} 1"),
                }
            }
        }
        _ => match number(&mut i) {
            Some(n) => signed(n, true),
            None => "NEXT".to_string(),
        },
    };
    if matches!(
        tokens.get(i).and_then(|t| plain_word(t)).as_deref(),
        Some("FROM" | "IN")
    ) {
        i += 1;
    }
    match &tokens[i..] {
        [name @ Token::Word(_)] => Some((format!("FETCH {direction} FROM {name}"), negated)),
        _ => None,
    }
}

/// The compatibility parser drops the location from some errors (a bad first
/// keyword, for one); sqlparser's own PostgreSQL dialect keeps it, so ask it
/// where the same text breaks.
fn locate_with_plain_parser(sql: &str) -> Option<usize> {
    match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
        Err(ParserError::TokenizerError(m) | ParserError::ParserError(m)) => position_of(&m, sql),
        _ => None,
    }
}

/// sqlparser reports `... at Line: L, Column: C`; PostgreSQL clients want a
/// character offset into the query.
fn position_of(message: &str, sql: &str) -> Option<usize> {
    let rest = &message[message.find("Line: ")? + "Line: ".len()..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let line: usize = line.trim().parse().ok()?;
    let column: usize = rest
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    let before: usize = sql
        .split('\n')
        .take(line.checked_sub(1)?)
        .map(|l| l.chars().count() + 1)
        .sum();
    Some(before + column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_on_window_close_is_read_as_an_option_before_the_query() {
        let sql = "create projection p (a) as select w as a from t group by 1 emit on window close; \
                   EXPLAIN CREATE MATERIALIZED VIEW q AS SELECT (1) AS x EMIT ON WINDOW CLOSE";
        let statements = parse_sql(sql).unwrap();
        assert_eq!(
            statements[0].to_string(),
            "CREATE MATERIALIZED VIEW p (a) WITH (emit_on_window_close = true) AS SELECT w AS a FROM t GROUP BY 1"
        );
        assert!(
            statements[1]
                .to_string()
                .contains("WITH (emit_on_window_close = true) AS SELECT (1) AS x"),
            "{}",
            statements[1]
        );
        // Elsewhere the words keep their meaning.
        let plain = parse_sql("SELECT 1 AS emit").unwrap();
        assert_eq!(plain[0].to_string(), "SELECT 1 AS emit");
    }

    #[test]
    fn projection_statements_read_as_materialized_views() {
        let sql = "create projection p as select 1; DROP PROJECTION IF EXISTS p; \
                   show create projection p; show projections; explain create projection q as select 2";
        let texts: Vec<String> = parse_sql(sql)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            texts,
            vec![
                "CREATE MATERIALIZED VIEW p AS SELECT 1",
                "DROP MATERIALIZED VIEW IF EXISTS p",
                "SHOW CREATE VIEW p",
                "SHOW MATERIALIZED VIEWS",
                "EXPLAIN CREATE MATERIALIZED VIEW q AS SELECT 2",
            ]
        );
        // Only at the start of a statement: a column named projection stays.
        let select = parse_sql("select projection from t").unwrap();
        assert_eq!(select[0].to_string(), "SELECT projection FROM t");
    }

    #[test]
    fn flush_is_a_statement_of_its_own() {
        let statements = parse_sql("insert into t values (1); FLUSH; select 'flush'").unwrap();
        assert_eq!(statements.len(), 3);
        assert_eq!(statements[1], flush_statement());
        assert_eq!(statements[2].to_string(), "SELECT 'flush'");
        assert_eq!(parse_sql("flush;").unwrap(), vec![flush_statement()]);
        let error = parse_sql("FLUSH; selec 1").unwrap_err();
        assert_eq!(error.position, Some(8));
    }

    #[test]
    fn move_becomes_a_marked_fetch() {
        let statements = parse_sql("move forward 2 from c; select 'move'; MOVE ALL IN c").unwrap();
        assert_eq!(statements.len(), 3);
        assert_eq!(
            statements[0].to_string(),
            "FETCH FORWARD 2 FROM c INTO \"weir.move\""
        );
        assert_eq!(statements[1].to_string(), "SELECT 'move'");
        assert_eq!(
            statements[2].to_string(),
            "FETCH ALL FROM c INTO \"weir.move\""
        );
        assert!(rewrite_move("select removed from t").is_none());
    }

    #[test]
    fn fetch_forms_sqlparser_lacks_are_rewritten() {
        for (sql, expected) in [
            ("FETCH c", "FETCH NEXT FROM c"),
            ("fetch from \"Cur\"", "FETCH NEXT FROM \"Cur\""),
            ("FETCH 5 c", "FETCH FORWARD 5 FROM c"),
            ("FETCH -2 FROM c", "FETCH BACKWARD 2 FROM c"),
            ("FETCH FORWARD FROM c", "FETCH FORWARD 1 FROM c"),
            ("FETCH BACKWARD -3 IN c", "FETCH FORWARD 3 FROM c"),
            ("FETCH BACKWARD ALL FROM c", "FETCH BACKWARD ALL FROM c"),
            ("FETCH ABSOLUTE 3 FROM c", "FETCH ABSOLUTE 3 FROM c"),
            ("MOVE LAST IN c", "FETCH LAST FROM c INTO \"weir.move\""),
            (
                "FETCH ABSOLUTE -2 FROM c",
                "FETCH ABSOLUTE 2 FROM c INTO \"weir.negated\"",
            ),
            (
                "MOVE RELATIVE -1 IN c",
                "FETCH RELATIVE 1 FROM c INTO \"weir.move.weir.negated\"",
            ),
        ] {
            let statements = parse_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            assert_eq!(statements[0].to_string(), expected, "{sql}");
        }
        assert!(parse_sql("FETCH 1 FROM c extra").is_err());
    }

    #[test]
    fn statements_after_copy_from_stdin_are_kept() {
        let statements = parse_sql(
            "INSERT INTO t VALUES (1); COPY t FROM STDIN; SELECT 'stdin'; COPY t FROM stdin",
        )
        .unwrap();
        let text: Vec<String> = statements.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "INSERT INTO t VALUES (1)",
                "COPY t FROM STDIN",
                "SELECT 'stdin'",
                "COPY t FROM STDIN"
            ]
        );
        let err = parse_sql("COPY t FROM STDIN; SELEC 1").unwrap_err();
        assert_eq!(err.position, Some(20), "{err:?}");
    }

    #[test]
    fn splits_statements() {
        assert_eq!(parse_sql("select 1; select 2;").unwrap().len(), 2);
        assert!(parse_sql("  -- only a comment\n").unwrap().is_empty());
    }

    #[test]
    fn create_user_takes_role_options() {
        let parsed =
            parse_sql("CREATE USER bob WITH PASSWORD 'x'; create user eve password 'y'").unwrap();
        assert!(
            parsed.iter().all(|s| matches!(s, Statement::CreateRole(_))),
            "{parsed:?}"
        );
        assert!(parse_sql("CREATE USER bob PASSWORD").is_err());
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let err = parse_sql("SELECT 1;\nSELEC 2").unwrap_err();
        assert_eq!(err.position, Some(11), "{err:?}");
        assert!(err.message.contains("SELEC"), "{}", err.message);
    }
}
