//! `ALTER SOURCE name PAUSE | RESUME`.

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
