//! Parsing SQL text into statements.

use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
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
    let parsed = match create_user_as_create_role(sql) {
        Some(tokens) => Parser::new(&PostgreSqlDialect {})
            .with_tokens_with_locations(tokens)
            .parse_statements()
            .map(|statements| statements.into_iter().map(|s| PARSER.rewrite(s)).collect()),
        None => PARSER.parse(sql),
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

/// PostgreSQL's `CREATE USER name [WITH] option...` is `CREATE ROLE` with
/// LOGIN, but sqlparser reads `CREATE USER` with Snowflake's grammar, which
/// rejects `PASSWORD 'x'`. Returns the tokens with `USER` read as `ROLE` when
/// a statement starts with `CREATE USER`, so the role grammar parses it.
fn create_user_as_create_role(sql: &str) -> Option<Vec<TokenWithSpan>> {
    let mut tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let words: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
        .collect();
    let mut found = false;
    for (n, &i) in words.iter().enumerate() {
        let starts_statement = n == 0 || matches!(tokens[words[n - 1]].token, Token::SemiColon);
        let is_keyword = |at: usize, keyword: Keyword| matches!(&tokens[at].token, Token::Word(w) if w.keyword == keyword);
        if starts_statement
            && is_keyword(i, Keyword::CREATE)
            && words
                .get(n + 1)
                .is_some_and(|&j| is_keyword(j, Keyword::USER))
        {
            let user = words[n + 1];
            tokens[user].token = Token::make_keyword("ROLE");
            found = true;
        }
    }
    found.then_some(tokens)
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
