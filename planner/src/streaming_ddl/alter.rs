//! `ALTER SOURCE name PAUSE | RESUME | RESET OFFSET`, `ALTER SINK name PAUSE | RESUME | RESET OFFSET`
//! and `ALTER SOURCE | SINK name SET (option = value, ...)`.

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

/// The rest of `ALTER SOURCE`, after the keyword.
pub(super) fn alter_source(p: &mut Parser) -> Result<StreamingDdl, ParserError> {
    let name = name_parts(&p.parse_object_name(false)?);
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
    let name = name_parts(&p.parse_object_name(false)?);
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
