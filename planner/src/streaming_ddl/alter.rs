//! `ALTER SOURCE name PAUSE | RESUME | RESET OFFSET`, `ALTER SINK name PAUSE | RESUME | RESET OFFSET`,
//! `ALTER SOURCE | SINK name SET (option = value, ...)` and
//! `ALTER {SOURCE | SINK | VIEW | MATERIALIZED VIEW | PROJECTION} [IF EXISTS] name RENAME TO new`,
//! `ALTER {TABLE | VIEW | MATERIALIZED VIEW | PROJECTION | SEQUENCE} [IF EXISTS] name SET SCHEMA s`.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use serde::{Deserialize, Serialize};

use super::{StreamingDdl, StreamingKind, name_parts, option_list, word};

/// What `ALTER SOURCE` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceAction {
    /// Stop reading, keeping the position; durable until RESUME.
    Pause,
    /// Read again from where it stopped.
    Resume,
    /// Read again from the beginning, as a source created now would.
    ResetOffset,
}

/// What `ALTER ... RENAME TO` renames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenamedKind {
    Source,
    Sink,
    View,
    /// `MATERIALIZED VIEW` or `PROJECTION`.
    Projection,
}

/// What `ALTER ... SET SCHEMA` moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MovedKind {
    Table,
    View,
    /// `MATERIALIZED VIEW` or `PROJECTION`.
    Projection,
    Sequence,
}

/// Whether `tokens` hold the words `SET SCHEMA` one after the other (the
/// statements [`set_schema`] reads, which sqlparser does not).
pub(super) fn sets_schema(tokens: &[TokenWithSpan]) -> bool {
    let words: Vec<&str> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .map(|t| match &t.token {
            Token::Word(w) if w.quote_style.is_none() => w.value.as_str(),
            _ => "",
        })
        .collect();
    words
        .windows(2)
        .any(|w| w[0].eq_ignore_ascii_case("SET") && w[1].eq_ignore_ascii_case("SCHEMA"))
}

/// `ALTER {TABLE | VIEW | MATERIALIZED VIEW | PROJECTION | SEQUENCE}`
/// at the parser's position: consumes the words and says which, or
/// consumes nothing.
pub(super) fn moved_kind(p: &mut Parser) -> Option<MovedKind> {
    let is = |p: &Parser, n: usize, word: &str| {
        matches!(&p.peek_nth_token(n).token,
            Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
    };
    if !is(p, 0, "ALTER") {
        return None;
    }
    let (kind, words) = if is(p, 1, "TABLE") {
        (MovedKind::Table, 2)
    } else if is(p, 1, "VIEW") {
        (MovedKind::View, 2)
    } else if is(p, 1, "PROJECTION") {
        (MovedKind::Projection, 2)
    } else if is(p, 1, "SEQUENCE") {
        (MovedKind::Sequence, 2)
    } else if is(p, 1, "MATERIALIZED") && is(p, 2, "VIEW") {
        (MovedKind::Projection, 3)
    } else {
        return None;
    };
    for _ in 0..words {
        p.next_token();
    }
    Some(kind)
}

/// `[IF EXISTS] [ONLY] name SET SCHEMA schema`, after the kind's words.
pub(super) fn set_schema(p: &mut Parser, kind: MovedKind) -> Result<StreamingDdl, ParserError> {
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    if kind == MovedKind::Table {
        let _ = p.parse_keyword(Keyword::ONLY);
    }
    let name = name_parts(&p.parse_object_name(false)?);
    p.expect_keywords(&[Keyword::SET, Keyword::SCHEMA])?;
    let schema = super::normalize(&p.parse_identifier()?);
    Ok(StreamingDdl::SetSchema {
        kind,
        if_exists,
        name,
        schema,
    })
}

/// `RENAME TO new` after the name, if that is what follows.
fn rename(
    p: &mut Parser,
    kind: RenamedKind,
    if_exists: bool,
    name: &[String],
) -> Result<Option<StreamingDdl>, ParserError> {
    if word(p).as_deref() != Some("RENAME") {
        p.prev_token();
        return Ok(None);
    }
    if word(p).as_deref() != Some("TO") {
        p.prev_token();
        return p.expected("TO", p.peek_token());
    }
    let to = p.parse_identifier()?;
    Ok(Some(StreamingDdl::Rename {
        kind,
        if_exists,
        name: name.to_vec(),
        to: super::normalize(&to),
    }))
}

/// `ALTER VIEW | MATERIALIZED VIEW | PROJECTION [IF EXISTS] name RENAME
/// TO new`, after the kind's words.
pub(super) fn alter_relation(
    p: &mut Parser,
    kind: RenamedKind,
) -> Result<StreamingDdl, ParserError> {
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = name_parts(&p.parse_object_name(false)?);
    match rename(p, kind, if_exists, &name)? {
        Some(ddl) => Ok(ddl),
        None => p.expected("RENAME TO", p.peek_token()),
    }
}

/// The rest of `ALTER SOURCE`, after the keyword.
pub(super) fn alter_source(p: &mut Parser) -> Result<StreamingDdl, ParserError> {
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = name_parts(&p.parse_object_name(false)?);
    if let Some(ddl) = rename(p, RenamedKind::Source, if_exists, &name)? {
        return Ok(ddl);
    }
    let action = match word(p).as_deref() {
        Some("PAUSE") => SourceAction::Pause,
        Some("RESUME") => SourceAction::Resume,
        Some("RESET") if word(p).as_deref() == Some("OFFSET") => SourceAction::ResetOffset,
        Some("SET") => {
            let (options, secrets) = option_list(p)?;
            return Ok(StreamingDdl::AlterOptions {
                kind: StreamingKind::Source,
                name,
                options,
                secrets,
            });
        }
        _ => {
            p.prev_token();
            return p.expected("PAUSE, RESUME, RESET OFFSET or SET (...)", p.peek_token());
        }
    };
    Ok(StreamingDdl::AlterSource { name, action })
}

/// What `ALTER SINK` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SinkAction {
    /// Stop writing, keeping what is missed meanwhile; durable until RESUME.
    Pause,
    /// Deliver what was missed, then go on.
    Resume,
    /// Deliver again from the beginning, as a sink created now would.
    ResetOffset,
}

/// The rest of `ALTER SINK`, after the keyword.
pub(super) fn alter_sink(p: &mut Parser) -> Result<StreamingDdl, ParserError> {
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = name_parts(&p.parse_object_name(false)?);
    if let Some(ddl) = rename(p, RenamedKind::Sink, if_exists, &name)? {
        return Ok(ddl);
    }
    let action = match word(p).as_deref() {
        Some("PAUSE") => SinkAction::Pause,
        Some("RESUME") => SinkAction::Resume,
        Some("RESET") if word(p).as_deref() == Some("OFFSET") => SinkAction::ResetOffset,
        Some("SET") => {
            let (options, secrets) = option_list(p)?;
            return Ok(StreamingDdl::AlterOptions {
                kind: StreamingKind::Sink,
                name,
                options,
                secrets,
            });
        }
        _ => {
            p.prev_token();
            return p.expected("PAUSE, RESUME, RESET OFFSET or SET (...)", p.peek_token());
        }
    };
    Ok(StreamingDdl::AlterSink { name, action })
}
