//! Weir's statements for streaming objects, which sqlparser does not know:
//!
//! ```sql
//! CREATE SOURCE [IF NOT EXISTS] name [(column type, ... [, WATERMARK FOR col AS expr])]
//!   { WITH (connector = '...', option = 'value', ...) | FROM source TABLE 'schema.table' }
//! CREATE SINK [IF NOT EXISTS] name { FROM relation | AS query } WITH (connector = '...', ...)
//! DROP SOURCE | SINK | DESTINATION [IF EXISTS] name [, ...] [CASCADE | RESTRICT]
//! SHOW SOURCES | SINKS | DESTINATIONS | CONNECTORS
//! SHOW CREATE SOURCE | SINK | DESTINATION name
//! CREATE DESTINATION ... FROM projection INTO kind (...) KEY (...) [WITH (...)]
//! ALTER DESTINATION name REPAIR | ACCEPT GAP | PAUSE | RESUME
//! ALTER SOURCE name PAUSE | RESUME
//! ALTER SINK name RESET OFFSET
//! CREATE SECRET [IF NOT EXISTS] name AS 'value'
//! ALTER SECRET name AS 'value'
//! CREATE CONNECTION [IF NOT EXISTS] name TO kind (option = 'value', password = SECRET name, ...)
//! ALTER CONNECTION name SET (option = 'value', ...)
//! DROP SECRET | CONNECTION [IF EXISTS] name [, ...] [CASCADE | RESTRICT]
//! SHOW SECRETS | CONNECTIONS
//! ALTER SEQUENCE [IF EXISTS] name option ...   -- not streaming; sqlparser lacks it too
//! ALTER TABLE | VIEW | MATERIALIZED VIEW | PROJECTION | SEQUENCE [IF EXISTS] name SET SCHEMA s   -- likewise
//! ```
//!
//! In any option list, `option = SECRET name` names a secret instead of
//! giving a value; such options travel apart (`secrets`), so no value of a
//! secret is ever part of a source's, sink's or connection's options.
//!
//! [`parse_streaming`] reads one statement's tokens into a [`StreamingDdl`].
//! The session receives every statement as a sqlparser `Statement`, so a
//! streaming one travels as `CALL "weir.streaming_ddl"('<json>')`
//! ([`to_statement`] / [`from_statement`]), the way `MOVE` travels as a
//! marked FETCH. Destinations are parsed in [`destination`], `ALTER SEQUENCE`
//! in [`sequence`].

use datafusion::sql::sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName, ObjectNamePart, Statement, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use serde::{Deserialize, Serialize};

pub mod alter;
mod destination;
pub mod sequence;
pub use alter::{SinkAction, SourceAction};
pub use destination::{CreateDestination, DestinationAction};

/// The function name a streaming statement travels under.
pub const STREAMING_DDL_MARKER: &str = "weir.streaming_ddl";

/// Which kind of streaming object a statement names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamingKind {
    Source,
    Sink,
    /// A sink that keeps a keyed copy of a projection (`CREATE DESTINATION`).
    Destination,
}

impl StreamingKind {
    pub fn keyword(self) -> &'static str {
        match self {
            Self::Source => "SOURCE",
            Self::Sink => "SINK",
            Self::Destination => "DESTINATION",
        }
    }
}

/// Objects with a plain (schema-less) name that sources and sinks refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NamedKind {
    Secret,
    Connection,
}

impl NamedKind {
    pub fn keyword(self) -> &'static str {
        match self {
            Self::Secret => "SECRET",
            Self::Connection => "CONNECTION",
        }
    }
}

/// A declared column: its name (normalized as PostgreSQL does) and type
/// as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredColumn {
    pub name: String,
    pub data_type: String,
    pub not_null: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamingDdl {
    CreateSource {
        if_not_exists: bool,
        /// Name parts, normalized (`s.bid` is `["s", "bid"]`).
        name: Vec<String>,
        columns: Vec<DeclaredColumn>,
        /// `WATERMARK FOR column AS expression`: the column and the
        /// expression as sqlparser prints it.
        watermark: Option<(String, String)>,
        /// The WITH options in order, keys lowercased, values as text.
        options: Vec<(String, String)>,
        /// `option = SECRET name`: (option, secret name).
        #[serde(default)]
        secrets: Vec<(String, String)>,
        /// `FROM source TABLE 'schema.table'` instead of `WITH (...)`: one
        /// upstream table of a source that covers several, as (the
        /// source's name parts, normalized; the table as written). Then
        /// `options` and `secrets` are empty.
        #[serde(default)]
        from: Option<(Vec<String>, String)>,
    },
    CreateSink {
        if_not_exists: bool,
        name: Vec<String>,
        /// `FROM relation`: the relation's name parts.
        from: Option<Vec<String>>,
        /// `AS query`: the query as sqlparser prints it.
        query: Option<String>,
        options: Vec<(String, String)>,
        #[serde(default)]
        secrets: Vec<(String, String)>,
        /// `AS query EMIT ON WINDOW CLOSE` (before or after the options).
        #[serde(default)]
        emit_on_window_close: bool,
    },
    CreateDestination(CreateDestination),
    /// Not a streaming statement, but one sqlparser does not parse either.
    AlterSequence(sequence::AlterSequence),
    AlterDestination {
        name: Vec<String>,
        action: DestinationAction,
    },
    AlterSource {
        name: Vec<String>,
        action: SourceAction,
    },
    /// `ALTER {SOURCE | SINK | VIEW | MATERIALIZED VIEW | PROJECTION}
    /// [IF EXISTS] name RENAME TO to` (sqlparser reads none of these).
    Rename {
        kind: alter::RenamedKind,
        if_exists: bool,
        name: Vec<String>,
        to: String,
    },
    /// `ALTER {TABLE | VIEW | MATERIALIZED VIEW | PROJECTION | SEQUENCE}
    /// [IF EXISTS] name SET SCHEMA schema` (sqlparser reads none of these).
    SetSchema {
        kind: alter::MovedKind,
        if_exists: bool,
        name: Vec<String>,
        schema: String,
    },
    AlterSink {
        name: Vec<String>,
        action: SinkAction,
    },
    /// `ALTER SOURCE | SINK name SET (option = value, ...)`: the options
    /// given replace those of the same name.
    AlterOptions {
        kind: StreamingKind,
        name: Vec<String>,
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    },
    CreateSecret {
        if_not_exists: bool,
        name: String,
        value: String,
    },
    AlterSecret {
        name: String,
        value: String,
    },
    CreateConnection {
        if_not_exists: bool,
        name: String,
        /// What it connects to: `postgres`, `kafka`, `s3`.
        kind: String,
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    },
    /// `ALTER CONNECTION name SET (...)`: the options given replace those
    /// of the same name.
    AlterConnection {
        name: String,
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    },
    DropNamed {
        what: NamedKind,
        if_exists: bool,
        names: Vec<String>,
        cascade: bool,
    },
    ShowNamed {
        what: NamedKind,
    },
    Drop {
        kind: StreamingKind,
        if_exists: bool,
        names: Vec<Vec<String>>,
        cascade: bool,
    },
    /// `SHOW SOURCES` / `SINKS` / `DESTINATIONS` (`kind`), or `SHOW
    /// CONNECTORS` (`None`).
    Show {
        kind: Option<StreamingKind>,
    },
    ShowCreate {
        kind: StreamingKind,
        name: Vec<String>,
    },
}

/// Whether the statement starting at `tokens` (whitespace included) is one
/// of Weir's streaming statements.
pub fn is_streaming(tokens: &[TokenWithSpan]) -> bool {
    let words: Vec<String> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .take(3)
        .map(|t| match &t.token {
            Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
            _ => String::new(),
        })
        .collect();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    // `ALTER VIEW v AS query` is sqlparser's; `ALTER VIEW v RENAME TO w`
    // is not.
    let renames_view = (w(0), w(1)) == ("ALTER", "VIEW")
        && tokens
            .iter()
            .any(|t| matches!(&t.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("RENAME")));
    let moves = matches!(
        (w(0), w(1)),
        (
            "ALTER",
            "TABLE" | "VIEW" | "SEQUENCE" | "MATERIALIZED" | "PROJECTION"
        )
    ) && alter::sets_schema(tokens);
    renames_view
        || moves
        || matches!(
            (w(0), w(1), w(2)),
            ("CREATE" | "DROP", "SOURCE" | "SINK", _)
                | (
                    "CREATE" | "DROP" | "ALTER",
                    "SECRET" | "CONNECTION" | "DESTINATION",
                    _
                )
                | (
                    "ALTER",
                    "SOURCE" | "SINK" | "SEQUENCE" | "MATERIALIZED" | "PROJECTION",
                    _
                )
                | (
                    "SHOW",
                    "SOURCES" | "SINKS" | "DESTINATIONS" | "CONNECTORS" | "SECRETS" | "CONNECTIONS",
                    _
                )
                | ("SHOW", "CREATE", "SOURCE" | "SINK" | "DESTINATION")
        )
}

/// Parses one streaming statement (its tokens, without the `;`).
pub fn parse_streaming(mut tokens: Vec<TokenWithSpan>) -> Result<StreamingDdl, ParserError> {
    // `CREATE SINK s AS SELECT ... FROM t WITH (...)`: sqlparser would read
    // `t WITH (...)` as a table hint, so the options (from the last WITH
    // outside parentheses) are parsed apart.
    let options = match sink_options_at(&tokens) {
        Some(at) => {
            let tail = tokens.split_off(at);
            let mut p = Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(tail);
            let options = with_options(&mut p)?;
            let emits = emit_on_window_close(&mut p);
            let _ = p.consume_token(&Token::SemiColon);
            if p.peek_token().token != Token::EOF {
                return p.expected("end of statement", p.peek_token());
            }
            Some((options, emits))
        }
        None => None,
    };
    let moves = alter::sets_schema(&tokens);
    let mut p = Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(tokens);
    let ddl = if let Some(ddl) = named_ddl(&mut p)? {
        ddl
    } else if let Some(kind) = moves.then(|| alter::moved_kind(&mut p)).flatten() {
        alter::set_schema(&mut p, kind)?
    } else if p.parse_keyword(Keyword::CREATE) {
        let kind = kind_word(&mut p)?;
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = name_parts(&p.parse_object_name(false)?);
        match kind {
            StreamingKind::Source => create_source(&mut p, if_not_exists, name)?,
            StreamingKind::Sink => create_sink(&mut p, if_not_exists, name, options)?,
            StreamingKind::Destination => {
                destination::create_destination(&mut p, if_not_exists, name)?
            }
        }
    } else if p.parse_keywords(&[Keyword::ALTER, Keyword::SEQUENCE]) {
        sequence::alter_sequence(&mut p)?
    } else if p.parse_keywords(&[Keyword::ALTER, Keyword::VIEW]) {
        alter::alter_relation(&mut p, alter::RenamedKind::View)?
    } else if p.parse_keywords(&[Keyword::ALTER, Keyword::MATERIALIZED, Keyword::VIEW]) {
        alter::alter_relation(&mut p, alter::RenamedKind::Projection)?
    } else if matches!(
        &p.peek_nth_token(1).token,
        Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("PROJECTION")
    ) && p.parse_keyword(Keyword::ALTER)
    {
        p.next_token();
        alter::alter_relation(&mut p, alter::RenamedKind::Projection)?
    } else if p.parse_keyword(Keyword::ALTER) {
        match kind_word(&mut p)? {
            StreamingKind::Destination => destination::alter_destination(&mut p)?,
            StreamingKind::Source => alter::alter_source(&mut p)?,
            StreamingKind::Sink => alter::alter_sink(&mut p)?,
        }
    } else if p.parse_keyword(Keyword::DROP) {
        let kind = kind_word(&mut p)?;
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let mut names = vec![name_parts(&p.parse_object_name(false)?)];
        while p.consume_token(&Token::Comma) {
            names.push(name_parts(&p.parse_object_name(false)?));
        }
        let cascade = p.parse_keyword(Keyword::CASCADE);
        if !cascade {
            let _ = p.parse_keyword(Keyword::RESTRICT);
        }
        StreamingDdl::Drop {
            kind,
            if_exists,
            names,
            cascade,
        }
    } else if p.parse_keyword(Keyword::SHOW) {
        if p.parse_keyword(Keyword::CREATE) {
            let kind = kind_word(&mut p)?;
            StreamingDdl::ShowCreate {
                kind,
                name: name_parts(&p.parse_object_name(false)?),
            }
        } else {
            let word = word(&mut p).unwrap_or_default();
            match word.as_str() {
                "SOURCES" => StreamingDdl::Show {
                    kind: Some(StreamingKind::Source),
                },
                "SINKS" => StreamingDdl::Show {
                    kind: Some(StreamingKind::Sink),
                },
                "DESTINATIONS" => StreamingDdl::Show {
                    kind: Some(StreamingKind::Destination),
                },
                "SECRETS" => StreamingDdl::ShowNamed {
                    what: NamedKind::Secret,
                },
                "CONNECTIONS" => StreamingDdl::ShowNamed {
                    what: NamedKind::Connection,
                },
                _ => StreamingDdl::Show { kind: None },
            }
        }
    } else {
        return p.expected("CREATE, ALTER, DROP or SHOW", p.peek_token());
    };
    let _ = p.consume_token(&Token::SemiColon);
    if p.peek_token().token != Token::EOF {
        return p.expected("end of statement", p.peek_token());
    }
    Ok(ddl)
}

fn word(p: &mut Parser) -> Option<String> {
    match p.next_token().token {
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    }
}

fn kind_word(p: &mut Parser) -> Result<StreamingKind, ParserError> {
    match word(p).as_deref() {
        Some("SOURCE") => Ok(StreamingKind::Source),
        Some("SINK") => Ok(StreamingKind::Sink),
        Some("DESTINATION") => Ok(StreamingKind::Destination),
        _ => {
            p.prev_token();
            p.expected("SOURCE, SINK or DESTINATION", p.peek_token())
        }
    }
}

/// An identifier as PostgreSQL reads it: folded to lower case unless quoted.
fn normalize(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => normalize(ident),
            other => other.to_string(),
        })
        .collect()
}

fn create_source(
    p: &mut Parser,
    if_not_exists: bool,
    name: Vec<String>,
) -> Result<StreamingDdl, ParserError> {
    let mut columns = Vec::new();
    let mut watermark = None;
    if p.consume_token(&Token::LParen) {
        loop {
            let is_watermark = matches!(&p.peek_token().token,
                Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("watermark"))
                && matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::FOR);
            if is_watermark {
                p.next_token();
                p.expect_keyword_is(Keyword::FOR)?;
                let column = normalize(&p.parse_identifier()?);
                p.expect_keyword_is(Keyword::AS)?;
                let expr: Expr = p.parse_expr()?;
                if watermark.replace((column, expr.to_string())).is_some() {
                    return parser_error("a source has at most one WATERMARK clause");
                }
            } else {
                let def = p.parse_column_def()?;
                let mut not_null = false;
                for option in &def.options {
                    use datafusion::sql::sqlparser::ast::ColumnOption;
                    match &option.option {
                        ColumnOption::NotNull => not_null = true,
                        ColumnOption::Null => not_null = false,
                        other => {
                            return parser_error(&format!(
                                "column \"{}\" of a source takes no {other}: a source's rows come from its connector",
                                def.name
                            ));
                        }
                    }
                }
                columns.push(DeclaredColumn {
                    name: normalize(&def.name),
                    data_type: def.data_type.to_string(),
                    not_null,
                });
            }
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
        p.expect_token(&Token::RParen)?;
    }
    let from = if p.parse_keyword(Keyword::FROM) {
        let source = name_parts(&p.parse_object_name(false)?);
        p.expect_keyword_is(Keyword::TABLE)?;
        let table = match p.next_token().token {
            Token::SingleQuotedString(table) if !table.trim().is_empty() => table,
            _ => {
                return parser_error(
                    "FROM source TABLE takes the upstream table as a quoted name: TABLE 'schema.table'",
                );
            }
        };
        Some((source, table))
    } else {
        None
    };
    let (options, secrets) = match from {
        Some(_) => (Vec::new(), Vec::new()),
        None => with_options(p)?,
    };
    Ok(StreamingDdl::CreateSource {
        if_not_exists,
        name,
        columns,
        watermark,
        options,
        secrets,
        from,
    })
}

/// Where a CREATE SINK's `WITH (` options start: the last `WITH` outside
/// parentheses that a `(` follows.
fn sink_options_at(tokens: &[TokenWithSpan]) -> Option<usize> {
    let significant: Vec<(usize, &Token)> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(i, t)| (i, &t.token))
        .collect();
    let word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    if !(significant.len() > 2
        && word(significant[0].1, "create")
        && word(significant[1].1, "sink"))
    {
        return None;
    }
    let mut depth = 0i32;
    let mut found = None;
    for (n, (i, token)) in significant.iter().enumerate() {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            t if depth == 0
                && word(t, "with")
                && matches!(significant.get(n + 1), Some((_, Token::LParen))) =>
            {
                found = Some(*i)
            }
            _ => {}
        }
    }
    found
}

fn create_sink(
    p: &mut Parser,
    if_not_exists: bool,
    name: Vec<String>,
    options: Option<(ParsedOptions, bool)>,
) -> Result<StreamingDdl, ParserError> {
    let (from, query) = if p.parse_keyword(Keyword::FROM) {
        (Some(name_parts(&p.parse_object_name(false)?)), None)
    } else if p.parse_keyword(Keyword::AS) {
        (None, Some(p.parse_query()?.to_string()))
    } else {
        return p.expected("FROM relation or AS query", p.peek_token());
    };
    let mut emits = emit_on_window_close(p);
    let (options, secrets) = match options {
        Some((options, after)) => {
            emits |= after;
            options
        }
        None => {
            let options = with_options(p)?;
            emits |= emit_on_window_close(p);
            options
        }
    };
    if emits && query.is_none() {
        return Err(ParserError::ParserError(
            "EMIT ON WINDOW CLOSE applies to CREATE SINK ... AS query; a sink FROM a \
             relation takes what the relation emits (create the projection with it)"
                .into(),
        ));
    }
    Ok(StreamingDdl::CreateSink {
        if_not_exists,
        name,
        from,
        query,
        options,
        secrets,
        emit_on_window_close: emits,
    })
}

/// Consumes `EMIT ON WINDOW CLOSE` if it comes next.
fn emit_on_window_close(p: &mut Parser) -> bool {
    let words = ["EMIT", "ON", "WINDOW", "CLOSE"];
    let next = (0..words.len()).all(|n| {
        matches!(&p.peek_nth_token(n).token, Token::Word(w)
            if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(words[n]))
    });
    if next {
        for _ in words {
            p.next_token();
        }
    }
    next
}

/// Options as parsed: values, and the options that name a secret.
pub type ParsedOptions = (Vec<(String, String)>, Vec<(String, String)>);

/// `WITH (key = value, ...)`; keys may be dotted (`fields.id.kind`).
fn with_options(p: &mut Parser) -> Result<ParsedOptions, ParserError> {
    p.expect_keyword_is(Keyword::WITH)?;
    option_list(p)
}

/// `(key = value | key = SECRET name, ...)`.
fn option_list(p: &mut Parser) -> Result<ParsedOptions, ParserError> {
    p.expect_token(&Token::LParen)?;
    let mut options = Vec::new();
    let mut secrets: Vec<(String, String)> = Vec::new();
    loop {
        let key = name_parts(&p.parse_object_name(false)?).join(".");
        p.expect_token(&Token::Eq)?;
        if options.iter().chain(&secrets).any(|(k, _)| *k == key) {
            return parser_error(&format!("option {key} is given twice"));
        }
        let is_secret = matches!(&p.peek_token().token,
            Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("secret"))
            && matches!(&p.peek_nth_token(1).token, Token::Word(_));
        if is_secret {
            p.next_token();
            secrets.push((key, normalize(&p.parse_identifier()?)));
        } else {
            let value = match p.next_token().token {
                Token::SingleQuotedString(s) => s,
                Token::Number(n, _) => n,
                Token::Word(w) => w.value,
                Token::Minus => match p.next_token().token {
                    Token::Number(n, _) => format!("-{n}"),
                    _ => return parser_error(&format!("option {key} needs a value")),
                },
                other => {
                    return parser_error(&format!(
                        "option {key} needs a quoted value, not {other}"
                    ));
                }
            };
            options.push((key, value));
        }
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    p.expect_token(&Token::RParen)?;
    Ok((options, secrets))
}

/// `CREATE | ALTER | DROP SECRET | CONNECTION ...` and nothing consumed
/// when the statement is another one.
fn named_ddl(p: &mut Parser) -> Result<Option<StreamingDdl>, ParserError> {
    let is = |p: &Parser, n: usize, w: &str| {
        matches!(&p.peek_nth_token(n).token,
            Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
    };
    let what = if is(p, 1, "secret") {
        NamedKind::Secret
    } else if is(p, 1, "connection") {
        NamedKind::Connection
    } else {
        return Ok(None);
    };
    let verb = word(p).unwrap_or_default();
    p.next_token();
    let ddl = match (verb.as_str(), what) {
        ("CREATE", _) => {
            let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
            let name = normalize(&p.parse_identifier()?);
            match what {
                NamedKind::Secret => {
                    p.expect_keyword_is(Keyword::AS)?;
                    StreamingDdl::CreateSecret {
                        if_not_exists,
                        name,
                        value: secret_value(p)?,
                    }
                }
                NamedKind::Connection => {
                    p.expect_keyword_is(Keyword::TO)?;
                    let kind = normalize(&p.parse_identifier()?);
                    let (options, secrets) = option_list(p)?;
                    StreamingDdl::CreateConnection {
                        if_not_exists,
                        name,
                        kind,
                        options,
                        secrets,
                    }
                }
            }
        }
        ("ALTER", NamedKind::Secret) => {
            let name = normalize(&p.parse_identifier()?);
            p.expect_keyword_is(Keyword::AS)?;
            StreamingDdl::AlterSecret {
                name,
                value: secret_value(p)?,
            }
        }
        ("ALTER", NamedKind::Connection) => {
            let name = normalize(&p.parse_identifier()?);
            p.expect_keyword_is(Keyword::SET)?;
            let (options, secrets) = option_list(p)?;
            StreamingDdl::AlterConnection {
                name,
                options,
                secrets,
            }
        }
        ("DROP", _) => {
            let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            let mut names = vec![normalize(&p.parse_identifier()?)];
            while p.consume_token(&Token::Comma) {
                names.push(normalize(&p.parse_identifier()?));
            }
            let cascade = p.parse_keyword(Keyword::CASCADE);
            if !cascade {
                let _ = p.parse_keyword(Keyword::RESTRICT);
            }
            StreamingDdl::DropNamed {
                what,
                if_exists,
                names,
                cascade,
            }
        }
        _ => return p.expected("CREATE, ALTER or DROP", p.peek_token()),
    };
    Ok(Some(ddl))
}

fn secret_value(p: &mut Parser) -> Result<String, ParserError> {
    match p.next_token().token {
        Token::SingleQuotedString(s) => Ok(s),
        _ => parser_error("a secret's value is a quoted string: AS 'value'"),
    }
}

fn parser_error<T>(message: &str) -> Result<T, ParserError> {
    Err(ParserError::ParserError(message.to_string()))
}

/// The statement a streaming statement travels as.
pub fn to_statement(ddl: &StreamingDdl) -> Statement {
    let json = serde_json::to_string(ddl).expect("streaming statements serialize");
    Statement::Call(Function {
        name: ObjectName::from(vec![Ident::with_quote('"', STREAMING_DDL_MARKER)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::value(
                Value::SingleQuotedString(json),
            )))],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// The streaming statement `statement` carries, if it is one.
pub fn from_statement(statement: &Statement) -> Option<StreamingDdl> {
    let Statement::Call(function) = statement else {
        return None;
    };
    if function.name.to_string() != format!("\"{STREAMING_DDL_MARKER}\"") {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))] => match &v.value {
            Value::SingleQuotedString(json) => serde_json::from_str(json).ok(),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests;
