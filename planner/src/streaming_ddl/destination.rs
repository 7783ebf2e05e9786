//! `CREATE DESTINATION` and `ALTER DESTINATION`:
//!
//! ```sql
//! CREATE DESTINATION [IF NOT EXISTS] name FROM projection
//!   INTO kind (option = 'value', password = SECRET name, ...)
//!   KEY (column, ...)
//!   [WITH (delivery = '...', on_existing = 'error' | 'truncate')]
//! ALTER DESTINATION name REPAIR | ACCEPT GAP | PAUSE | RESUME
//! ```

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;
use serde::{Deserialize, Serialize};

use super::{StreamingDdl, name_parts, normalize, option_list, parser_error, word};

/// `CREATE DESTINATION`, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateDestination {
    pub if_not_exists: bool,
    pub name: Vec<String>,
    /// The projection it copies, as name parts.
    pub from: Vec<String>,
    /// `INTO kind (...)`: the connector and its options.
    pub into: String,
    pub options: Vec<(String, String)>,
    pub secrets: Vec<(String, String)>,
    /// `KEY (...)`: the target's key columns, normalized.
    pub key: Vec<String>,
    /// `WITH (...)`: the destination's own options.
    pub with: Vec<(String, String)>,
}

/// What `ALTER DESTINATION` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DestinationAction {
    /// Refill the target from the projection under a new generation.
    Repair,
    /// Record the gap upstream and go on without the lost changes.
    AcceptGap,
    /// Stop delivering (after committing what is in flight); durable.
    Pause,
    /// Deliver again: refill the target under the next generation.
    Resume,
}

/// The rest of `CREATE DESTINATION [IF NOT EXISTS] name`, after the name.
pub(super) fn create_destination(
    p: &mut Parser,
    if_not_exists: bool,
    name: Vec<String>,
) -> Result<StreamingDdl, ParserError> {
    p.expect_keyword_is(Keyword::FROM)?;
    let from = name_parts(&p.parse_object_name(false)?);
    p.expect_keyword_is(Keyword::INTO)?;
    let into = normalize(&p.parse_identifier()?);
    let (options, secrets) = option_list(p)?;
    p.expect_keyword_is(Keyword::KEY)?;
    p.expect_token(&Token::LParen)?;
    let mut key = vec![normalize(&p.parse_identifier()?)];
    while p.consume_token(&Token::Comma) {
        key.push(normalize(&p.parse_identifier()?));
    }
    p.expect_token(&Token::RParen)?;
    let with = if p.parse_keyword(Keyword::WITH) {
        let (with, secrets) = option_list(p)?;
        if let Some((option, _)) = secrets.first() {
            return parser_error(&format!(
                "{option} = SECRET belongs in the INTO (...) options, with the connection's"
            ));
        }
        with
    } else {
        Vec::new()
    };
    Ok(StreamingDdl::CreateDestination(CreateDestination {
        if_not_exists,
        name,
        from,
        into,
        options,
        secrets,
        key,
        with,
    }))
}

/// The rest of `ALTER DESTINATION`, after the keyword.
pub(super) fn alter_destination(p: &mut Parser) -> Result<StreamingDdl, ParserError> {
    let name = name_parts(&p.parse_object_name(false)?);
    let action = match word(p).as_deref() {
        Some("REPAIR") => DestinationAction::Repair,
        Some("PAUSE") => DestinationAction::Pause,
        Some("RESUME") => DestinationAction::Resume,
        Some("ACCEPT") if word(p).as_deref() == Some("GAP") => DestinationAction::AcceptGap,
        _ => {
            p.prev_token();
            return p.expected("REPAIR, ACCEPT GAP, PAUSE or RESUME", p.peek_token());
        }
    };
    Ok(StreamingDdl::AlterDestination { name, action })
}
