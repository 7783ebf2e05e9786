//! Parsing SQL text into statements.

use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
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
    let moved = rewrite_move(sql);
    let sql = moved.as_deref().unwrap_or(sql);
    PARSER.parse(sql).map_err(|e| {
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

/// `FETCH ... INTO` this name is a `MOVE`: sqlparser has no MOVE statement,
/// and PostgreSQL's SQL-level FETCH has no INTO clause to clash with.
pub const MOVE_MARKER: &str = "weir.move";

/// Rewrites each `MOVE <direction> FROM cursor` statement as
/// `FETCH <direction> FROM cursor INTO "weir.move"`; `None` when there is no
/// MOVE (the common case, checked without tokenizing).
fn rewrite_move(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("move") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut out = String::with_capacity(sql.len() + 32);
    let (mut at_start, mut in_move, mut changed) = (true, false, false);
    let close = |out: &mut String| out.push_str(&format!(" INTO \"{MOVE_MARKER}\""));
    for token in tokens {
        match &token {
            Token::Whitespace(_) => {}
            Token::SemiColon => {
                if in_move {
                    close(&mut out);
                    in_move = false;
                }
                at_start = true;
            }
            Token::Word(w)
                if at_start && w.quote_style.is_none() && w.value.eq_ignore_ascii_case("move") =>
            {
                out.push_str("FETCH");
                (at_start, in_move, changed) = (false, true, true);
                continue;
            }
            _ => at_start = false,
        }
        out.push_str(&token.to_string());
    }
    if in_move {
        close(&mut out);
    }
    changed.then_some(out)
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
            "FETCH ALL IN c INTO \"weir.move\""
        );
        assert!(rewrite_move("select removed from t").is_none());
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
    fn syntax_errors_carry_a_position() {
        let err = parse_sql("SELECT 1;\nSELEC 2").unwrap_err();
        assert_eq!(err.position, Some(11), "{err:?}");
        assert!(err.message.contains("SELEC"), "{}", err.message);
    }
}
