//! `EMIT ON WINDOW CLOSE` at the end of `CREATE PROJECTION | MATERIALIZED
//! VIEW ... AS query`, which sqlparser has no clause for: read as an
//! option it does know ([`EMIT_ON_WINDOW_CLOSE_OPTION`]).

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::parse::plain_word;

/// The option a projection's `EMIT ON WINDOW CLOSE` is read as
/// (sqlparser has no such clause).
pub const EMIT_ON_WINDOW_CLOSE_OPTION: &str = "emit_on_window_close";

/// `CREATE PROJECTION | MATERIALIZED VIEW name [...] AS query EMIT ON
/// WINDOW CLOSE` becomes `CREATE ... name [...] WITH
/// (emit_on_window_close = true) AS query`, which sqlparser reads (the
/// first `AS` outside parentheses is the one before the query). `None`
/// when no statement ends so (checked cheaply first).
pub(crate) fn rewrite_emit_on_window_close(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("emit") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let text = |ts: &[Token]| ts.iter().map(ToString::to_string).collect::<String>();
    let mut out = String::with_capacity(sql.len() + 40);
    let mut changed = false;
    for segment in tokens.split_inclusive(|t| *t == Token::SemiColon) {
        let significant: Vec<usize> = (0..segment.len())
            .filter(|&i| !matches!(segment[i], Token::Whitespace(_) | Token::SemiColon))
            .collect();
        let word = |i: usize| plain_word(&segment[i]);
        let words: Vec<String> = significant.iter().filter_map(|&i| word(i)).collect();
        let creates = matches!(
            words
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .as_slice(),
            ["CREATE" | "EXPLAIN", ..]
        ) && (words.iter().any(|w| w == "PROJECTION")
            || words.iter().any(|w| w == "MATERIALIZED"));
        let ends_emitting = significant.len() > 4
            && significant[significant.len() - 4..]
                .iter()
                .map(|&i| word(i))
                .collect::<Vec<_>>()
                == [
                    Some("EMIT".to_string()),
                    Some("ON".to_string()),
                    Some("WINDOW".to_string()),
                    Some("CLOSE".to_string()),
                ];
        let mut depth = 0i32;
        let first_as = significant.iter().copied().find(|&i| {
            match &segment[i] {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            depth == 0 && word(i).as_deref() == Some("AS")
        });
        match (creates && ends_emitting, first_as) {
            (true, Some(at)) => {
                let emit = significant[significant.len() - 4];
                let end = segment[emit..]
                    .iter()
                    .position(|t| *t == Token::SemiColon)
                    .map(|p| emit + p);
                out.push_str(&text(&segment[..at]));
                out.push_str(&format!("WITH ({EMIT_ON_WINDOW_CLOSE_OPTION} = true) "));
                out.push_str(&text(&segment[at..emit]));
                if let Some(end) = end {
                    out.push_str(&text(&segment[end..]));
                }
                changed = true;
            }
            _ => out.push_str(&text(segment)),
        }
    }
    changed.then_some(out)
}
