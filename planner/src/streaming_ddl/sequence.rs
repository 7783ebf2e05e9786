//! `ALTER SEQUENCE`, which sqlparser does not parse. Its options are
//! PostgreSQL's, in any order.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;
use serde::{Deserialize, Serialize};

use super::{StreamingDdl, name_parts};

/// One option of `CREATE SEQUENCE` or `ALTER SEQUENCE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SequenceOption {
    Increment(i64),
    /// `None`: `NO MINVALUE` (the type's default).
    MinValue(Option<i64>),
    MaxValue(Option<i64>),
    Start(i64),
    Cache(i64),
    Cycle(bool),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterSequence {
    pub if_exists: bool,
    pub name: Vec<String>,
    pub options: Vec<SequenceOption>,
    pub restart: Option<Restart>,
    pub owned_by: Option<Owner>,
    /// `AS type`, the type as written (`smallint`, `int4`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_type: Option<String>,
}

/// `RESTART [[WITH] n]`. (Enums rather than nested options: the statement
/// travels as JSON, where `Some(None)` would come back as `None`.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Restart {
    AtStart,
    At(i64),
}

/// `OWNED BY table.column` (its name parts) or `OWNED BY NONE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Owner {
    Nobody,
    Column(Vec<String>),
}

fn signed(p: &mut Parser) -> Result<i64, ParserError> {
    let negative = p.consume_token(&Token::Minus);
    if !negative {
        let _ = p.consume_token(&Token::Plus);
    }
    let value = p.parse_literal_uint()?;
    let value = i64::try_from(value)
        .map_err(|_| ParserError::ParserError(format!("{value} is out of range for bigint")))?;
    Ok(if negative { -value } else { value })
}

/// After `ALTER SEQUENCE`: `[IF EXISTS] name` and one or more options.
pub(super) fn alter_sequence(p: &mut Parser) -> Result<StreamingDdl, ParserError> {
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = name_parts(&p.parse_object_name(false)?);
    let mut alter = AlterSequence {
        if_exists,
        name,
        options: Vec::new(),
        restart: None,
        owned_by: None,
        data_type: None,
    };
    loop {
        let option = if p.parse_keyword(Keyword::INCREMENT) {
            let _ = p.parse_keyword(Keyword::BY);
            SequenceOption::Increment(signed(p)?)
        } else if p.parse_keywords(&[Keyword::NO, Keyword::MINVALUE]) {
            SequenceOption::MinValue(None)
        } else if p.parse_keywords(&[Keyword::NO, Keyword::MAXVALUE]) {
            SequenceOption::MaxValue(None)
        } else if p.parse_keywords(&[Keyword::NO, Keyword::CYCLE]) {
            SequenceOption::Cycle(false)
        } else if p.parse_keyword(Keyword::MINVALUE) {
            SequenceOption::MinValue(Some(signed(p)?))
        } else if p.parse_keyword(Keyword::MAXVALUE) {
            SequenceOption::MaxValue(Some(signed(p)?))
        } else if p.parse_keyword(Keyword::START) {
            let _ = p.parse_keyword(Keyword::WITH);
            SequenceOption::Start(signed(p)?)
        } else if p.parse_keyword(Keyword::CACHE) {
            SequenceOption::Cache(signed(p)?)
        } else if p.parse_keyword(Keyword::CYCLE) {
            SequenceOption::Cycle(true)
        } else if p.parse_keyword(Keyword::RESTART) {
            let with = p.parse_keyword(Keyword::WITH);
            let number = matches!(
                p.peek_token().token,
                Token::Number(..) | Token::Minus | Token::Plus
            );
            alter.restart = Some(if with || number {
                Restart::At(signed(p)?)
            } else {
                Restart::AtStart
            });
            continue;
        } else if p.parse_keyword(Keyword::AS) {
            alter.data_type = Some(p.parse_data_type()?.to_string());
            continue;
        } else if p.parse_keywords(&[Keyword::OWNED, Keyword::BY]) {
            alter.owned_by = Some(if p.parse_keyword(Keyword::NONE) {
                Owner::Nobody
            } else {
                Owner::Column(name_parts(&p.parse_object_name(false)?))
            });
            continue;
        } else {
            break;
        };
        alter.options.push(option);
    }
    if alter.options.is_empty()
        && alter.restart.is_none()
        && alter.owned_by.is_none()
        && alter.data_type.is_none()
    {
        return p.expected(
            "a sequence option (AS, INCREMENT, MINVALUE, MAXVALUE, START, RESTART, CACHE, CYCLE, OWNED BY)",
            p.peek_token(),
        );
    }
    Ok(StreamingDdl::AlterSequence(alter))
}

#[cfg(test)]
mod tests {
    use super::SequenceOption::{Cycle, Increment, MinValue};
    use super::*;
    use crate::streaming_ddl::from_statement;

    /// Parsed, and carried as the session receives it.
    fn parsed(sql: &str) -> AlterSequence {
        let statements = crate::parse::parse_sql(sql).unwrap();
        match from_statement(&statements[0]) {
            Some(StreamingDdl::AlterSequence(alter)) => alter,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn alter_sequence_takes_options_in_any_order_and_arrives_whole() {
        assert_eq!(
            parsed(
                "ALTER SEQUENCE IF EXISTS app.s RESTART CYCLE INCREMENT BY -2 OWNED BY NONE NO MINVALUE"
            ),
            AlterSequence {
                if_exists: true,
                name: vec!["app".into(), "s".into()],
                options: vec![Cycle(true), Increment(-2), MinValue(None)],
                restart: Some(Restart::AtStart),
                owned_by: Some(Owner::Nobody),
                data_type: None,
            }
        );
        assert_eq!(
            parsed("alter sequence \"S\" restart with 5 owned by t.id"),
            AlterSequence {
                if_exists: false,
                name: vec!["S".into()],
                options: vec![],
                restart: Some(Restart::At(5)),
                owned_by: Some(Owner::Column(vec!["t".into(), "id".into()])),
                data_type: None,
            }
        );
        assert_eq!(
            parsed("ALTER SEQUENCE s AS smallint MAXVALUE 100").data_type,
            Some("SMALLINT".into())
        );
        assert!(crate::parse::parse_sql("ALTER SEQUENCE s").is_err());
        assert!(crate::parse::parse_sql("ALTER SEQUENCE s RENAME TO t").is_err());
    }
}
