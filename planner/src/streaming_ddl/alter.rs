//! `ALTER SOURCE name PAUSE | RESUME` and `ALTER SINK name RESET OFFSET`.

use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use serde::{Deserialize, Serialize};

use super::{StreamingDdl, name_parts, word};

/// What `ALTER SOURCE` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceAction {
    /// Stop reading, keeping the position; durable until RESUME.
    Pause,
    /// Read again from where it stopped.
    Resume,
}

/// The rest of `ALTER SOURCE`, after the keyword.
pub(super) fn alter_source(p: &mut Parser) -> Result<StreamingDdl, ParserError> {
    let name = name_parts(&p.parse_object_name(false)?);
    let action = match word(p).as_deref() {
        Some("PAUSE") => SourceAction::Pause,
        Some("RESUME") => SourceAction::Resume,
        _ => {
            p.prev_token();
            return p.expected("PAUSE or RESUME", p.peek_token());
        }
    };
    Ok(StreamingDdl::AlterSource { name, action })
}

/// What `ALTER SINK` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SinkAction {
    /// Deliver again from the beginning, as a sink created now would.
    ResetOffset,
}

/// The rest of `ALTER SINK`, after the keyword.
pub(super) fn alter_sink(p: &mut Parser) -> Result<StreamingDdl, ParserError> {
    let name = name_parts(&p.parse_object_name(false)?);
    let action = match (word(p).as_deref(), word(p).as_deref()) {
        (Some("RESET"), Some("OFFSET")) => SinkAction::ResetOffset,
        (Some(w @ ("PAUSE" | "RESUME")), _) => {
            return Err(ParserError::ParserError(format!(
                "ALTER SINK ... {w} is not supported yet (destinations have it: ALTER DESTINATION ... {w}); DROP SINK and CREATE it again to stop and restart it"
            )));
        }
        _ => {
            p.prev_token();
            return p.expected("RESET OFFSET", p.peek_token());
        }
    };
    Ok(StreamingDdl::AlterSink { name, action })
}
