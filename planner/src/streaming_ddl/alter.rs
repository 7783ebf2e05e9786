//! `ALTER SOURCE name PAUSE | RESUME | RESET OFFSET`, `ALTER SINK name PAUSE | RESUME | RESET OFFSET`,
//! `ALTER SOURCE | SINK name SET (option = value, ...)` and
//! `ALTER {SOURCE | SINK | VIEW | MATERIALIZED VIEW | PROJECTION} [IF EXISTS] name RENAME TO new`.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
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
