//! PostgreSQL: the `postgres` sink, a sink object's changes written to a
//! table of an external database exactly once across crashes and restarts,
//! the `postgres-cdc` source ([`cdc`]), a table's snapshot and changes,
//! and the `postgres` source ([`table_source`]), a table read with plain
//! queries, once or by a cursor column.
//!
//! - `mod.rs` (here): the spec, the options a CREATE SINK is checked
//!   against (and, at CREATE, the target table itself), the connection.
//! - [`sink`]: the protocol. Each epoch's changes are staged in a table
//!   beside the target at `pre_commit`, and moved into the target at
//!   `commit` in one transaction with the sink's progress row; every
//!   transaction locks that row and checks the writer's generation first,
//!   so a deposed Weir process can write nothing.
//! - [`target`]: the target table checked against the sink, or created.
//! - [`copy_text`]: Arrow values as `COPY ... FROM STDIN` text.
//!
//! Modes: `append` inserts every row (a retraction is an error, unless
//! `format = 'changelog'` writes each change with its op and epoch);
//! `upsert` keeps one row per `key`, the latest. A destination (`CREATE
//! DESTINATION`) is an upsert sink that may create its target
//! (`create_table`), refuses or truncates rows found there at its first
//! fill (`on_existing`), and records its generation in the progress row.

pub(crate) mod cdc;
mod copy_text;
mod sink;
pub(crate) mod table_source;
mod target;
pub(crate) mod tls;

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;

use crate::spec::{Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType};
use crate::{Connector, ConnectorError, Sink, SinkOpen};

pub(crate) const NAME: &str = "postgres";

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Sink,
    help: "writes changes to a table of a PostgreSQL database, exactly once",
    options: &[
        OptionSpec::optional(
            "dsn",
            OptionType::Text,
            "the database to write to, as a libpq connection string or URL, without a password (e.g. 'host=db.internal user=weir dbname=app')",
        )
        .required(),
        PASSWORD,
        PASSWORD_ENV,
        OptionSpec::optional(
            "table",
            OptionType::Text,
            "the target table, as name or schema.name; it must exist",
        )
        .required(),
        OptionSpec::optional(
            "mode",
            OptionType::OneOf(&["append", "upsert"]),
            "append inserts every row; upsert keeps the latest row per key (default: upsert when key is given, else append)",
        ),
        OptionSpec::optional(
            "key",
            OptionType::Text,
            "the key columns of an upsert, comma-separated",
        ),
        OptionSpec::optional(
            "format",
            OptionType::OneOf(&["rows", "changelog"]),
            "changelog (append mode only) writes every change with columns weir_op ('insert' or 'delete') and weir_epoch, so input that retracts can be appended",
        )
        .with_default("rows"),
        OptionSpec::optional(
            "on_existing",
            OptionType::OneOf(&["keep", "error", "truncate"]),
            "what the sink's first fill does with rows the target already holds: keep them, refuse to start (error), or truncate the target in the same transaction as its first commit",
        )
        .with_default("keep"),
        OptionSpec::optional(
            "create_table",
            OptionType::OneOf(&["true", "false"]),
            "create the target table (with the sink's columns, and its key as primary key) if it does not exist",
        )
        .with_default("false"),
    ],
    capabilities: Capabilities {
        read_modes: &[],
        append_only: false,
        replayable: false,
        bounded: false,
        // At-least-once is honoured by the same protocol; at-most-once
        // saves the progress row first ([`sink`]).
        delivery: &[
            Delivery::AtMostOnce,
            Delivery::AtLeastOnce,
            Delivery::ExactlyOnce,
        ],
        skips: true,
    },
};

/// The option both PostgreSQL connectors take for the password.
pub(crate) const PASSWORD_ENV: OptionSpec = OptionSpec::optional(
    "password_env",
    OptionType::Text,
    "the name of an environment variable of the Weir server that holds the password (never stored in the catalog)",
)
.tunable();

/// The password as a secret: `password = SECRET name`.
pub(crate) const PASSWORD: OptionSpec = OptionSpec::optional(
    "password",
    OptionType::Text,
    "the password, as password = SECRET name (CREATE SECRET name AS '...')",
)
.secret()
.tunable();

pub(crate) struct PostgresConnector;

impl Connector for PostgresConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn check_sink<'a>(
        &'a self,
        schema: &'a SchemaRef,
        options: &'a BTreeMap<String, String>,
        input_append_only: bool,
    ) -> BoxFuture<'a, Result<(), ConnectorError>> {
        Box::pin(async move {
            let target = Target::parse(schema, options)?;
            if target.mode == Mode::Append && !target.changelog && !input_append_only {
                return Err(bad_option(
                    "mode",
                    "the sink's input can retract rows (it is not append-only), which an append sink cannot write: use mode = 'upsert' with a key, or format = 'changelog' to append every change with its op",
                ));
            }
            let client = target.connect().await?;
            if !target.create_table || target::target_exists(&client, &target).await? {
                target::check_target(&client, &target).await?;
                if target.on_existing == OnExisting::Error
                    && target::target_holds_rows(&client, &target).await?
                {
                    return Err(bad_option(
                        "on_existing",
                        format!(
                            "{} already holds rows: empty it first, or give on_existing = 'truncate' to empty it when the first fill commits",
                            target.qualified()
                        ),
                    ));
                }
            }
            Ok(())
        })
    }

    fn sink_target(&self, options: &BTreeMap<String, String>) -> Option<String> {
        let (dsn, _) = tls::split(options.get("dsn")?).ok()?;
        let config: tokio_postgres::Config = dsn.parse().ok()?;
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let ports = config.get_ports();
        let database = config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or_default();
        let (schema, table) = split_table(options.get("table")?).ok()?;
        Some(format!(
            "postgres {}:{} database {database} table {}.{}",
            hosts.join(","),
            if ports.is_empty() {
                "5432".to_string()
            } else {
                ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            },
            quote(&schema),
            quote(&table)
        ))
    }

    fn open_sink(&self, open: SinkOpen<'_>) -> Result<Box<dyn Sink>, ConnectorError> {
        let target = Target::parse(&open.schema, open.options)?;
        Ok(Box::new(sink::PostgresSink::new(open, target)?))
    }
}

fn bad_option(option: &str, message: impl Into<String>) -> ConnectorError {
    ConnectorError::BadOption {
        connector: NAME.into(),
        option: option.into(),
        message: message.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Append,
    Upsert,
}

/// What a sink's first fill does with rows the target already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnExisting {
    Keep,
    Error,
    Truncate,
}

/// The option the server passes a destination's generation in (never a
/// user's: the spec does not declare it, so CREATE refuses it).
const DESTINATION_GENERATION: &str = "weir.destination_generation";

/// Everything a sink's options say about where and how it writes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    config: tokio_postgres::Config,
    tls: tls::Tls,
    /// The target's schema and table, unquoted.
    schema: String,
    table: String,
    mode: Mode,
    /// Indexes into the sink's columns.
    key: Vec<usize>,
    changelog: bool,
    /// The sink's columns.
    columns: SchemaRef,
    on_existing: OnExisting,
    create_table: bool,
    /// Set for a destination: the generation its fill writes, recorded
    /// in the progress row for whoever reads the target.
    destination_generation: Option<u64>,
    /// `on_error` and `dead_letter`: whether refused epochs are skipped.
    recovery: crate::recovery::Recovery,
    /// `delivery = 'at_most_once'`: each commit saves the progress row
    /// before it moves the rows, in a transaction of its own.
    at_most_once: bool,
}

impl Target {
    fn parse(
        columns: &SchemaRef,
        options: &BTreeMap<String, String>,
    ) -> Result<Self, ConnectorError> {
        let (config, tls) = connection_config(NAME, options)?;
        let (schema, table) =
            split_table(options.get("table").map(String::as_str).unwrap_or_default())?;
        let key_names: Vec<String> = options
            .get("key")
            .map(|k| k.split(',').map(|c| unquote(c.trim())).collect())
            .unwrap_or_default();
        let mut key = Vec::new();
        for name in &key_names {
            let index = columns.index_of(name).map_err(|_| {
                bad_option(
                    "key",
                    format!(
                        "the sink has no column \"{name}\" (its columns: {})",
                        column_list(columns)
                    ),
                )
            })?;
            key.push(index);
        }
        let mode = match options.get("mode").map(String::as_str) {
            Some("append") => Mode::Append,
            Some(_) => Mode::Upsert,
            None if key.is_empty() => Mode::Append,
            None => Mode::Upsert,
        };
        if mode == Mode::Upsert && key.is_empty() {
            return Err(bad_option(
                "key",
                "an upsert sink needs its key columns: key = 'column, ...'",
            ));
        }
        let changelog = options.get("format").is_some_and(|f| f == "changelog");
        if changelog && mode == Mode::Upsert {
            return Err(bad_option(
                "format",
                "changelog appends every change: use it with mode = 'append'",
            ));
        }
        for field in columns.fields() {
            if !copy_text::supported(field.data_type()) {
                return Err(ConnectorError::ColumnMismatch {
                    connector: NAME.into(),
                    column: field.name().clone(),
                    message: format!(
                        "values of type {} cannot be written to PostgreSQL yet",
                        field.data_type()
                    ),
                });
            }
        }
        let on_existing = match options.get("on_existing").map(String::as_str) {
            Some("error") => OnExisting::Error,
            Some("truncate") => OnExisting::Truncate,
            _ => OnExisting::Keep,
        };
        let destination_generation = match options.get(DESTINATION_GENERATION) {
            Some(g) => Some(g.parse().map_err(|_| {
                bad_option(DESTINATION_GENERATION, format!("not a generation: {g}"))
            })?),
            None => None,
        };
        let recovery = crate::recovery::Recovery::from_options(options)
            .map_err(|(option, message)| bad_option(&option, message))?;
        Ok(Self {
            config,
            tls,
            schema,
            table,
            mode,
            key,
            changelog,
            columns: columns.clone(),
            on_existing,
            create_table: options.get("create_table").is_some_and(|v| v == "true"),
            destination_generation,
            recovery,
            at_most_once: options.get("delivery").map(String::as_str) == Some("at_most_once"),
        })
    }

    async fn connect(&self) -> Result<tokio_postgres::Client, ConnectorError> {
        connect(&self.config, &self.tls, NAME).await
    }

    /// `"schema"."table"`.
    fn qualified(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }

    /// A table beside the target, `"schema"."name"`.
    fn beside(&self, name: &str) -> String {
        format!("{}.{}", quote(&self.schema), quote(name))
    }
}

/// The connection an external-database connector's `dsn` and
/// `password_env` options describe, for errors named as `connector`. A
/// password in the DSN is refused: it would be stored in the catalog.
pub(crate) fn connection_config(
    connector: &str,
    options: &BTreeMap<String, String>,
) -> Result<(tokio_postgres::Config, tls::Tls), ConnectorError> {
    let bad = |option: &str, message: String| ConnectorError::BadOption {
        connector: connector.into(),
        option: option.into(),
        message,
    };
    let dsn = options.get("dsn").map(String::as_str).unwrap_or_default();
    let (dsn, tls) = tls::split(dsn).map_err(|e| bad("dsn", e))?;
    let mut config: tokio_postgres::Config = dsn
        .parse()
        .map_err(|e| bad("dsn", format!("not a connection string: {e}")))?;
    if config.get_connect_timeout().is_none() {
        // A CREATE waits for this connection: never forever.
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    if config.get_password().is_some() {
        return Err(bad(
            "dsn",
            "holds a password, which would be stored in the catalog in plain text: remove it and give password = SECRET name (after CREATE SECRET name AS '...'), or password_env = 'NAME' for an environment variable of the server".into(),
        ));
    }
    if let Some(password) = options.get("password") {
        config.password(password.clone());
    } else if let Some(var) = options.get("password_env") {
        let password = std::env::var(var).map_err(|_| {
            bad(
                "password_env",
                format!("the server has no environment variable {var}"),
            )
        })?;
        config.password(password);
    }
    if let Some(path) = &tls.root_cert
        && !path.is_file()
    {
        return Err(bad(
            "dsn",
            format!(
                "sslrootcert {} is not a file the server can read",
                path.display()
            ),
        ));
    }
    Ok((config, tls))
}

/// Connects with `config` over `tls`, the connection driven by a task of
/// its own.
pub(crate) async fn connect(
    config: &tokio_postgres::Config,
    tls: &tls::Tls,
    connector: &'static str,
) -> Result<tokio_postgres::Client, ConnectorError> {
    fn drive<S, T>(connector: &'static str, connection: tokio_postgres::Connection<S, T>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(connector, error = %e, "postgres session closed");
            }
        });
    }
    let failed = |e: tokio_postgres::Error| pg_error_of(connector, "connecting", e);
    let client = match tls.client_config().map_err(|e| ConnectorError::BadOption {
        connector: connector.into(),
        option: "dsn".into(),
        message: e,
    })? {
        None => {
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(failed)?;
            drive(connector, connection);
            client
        }
        Some(rustls) => {
            let mut config = config.clone();
            config.ssl_mode(if tls.mode == tls::Mode::Prefer {
                tokio_postgres::config::SslMode::Prefer
            } else {
                tokio_postgres::config::SslMode::Require
            });
            let make = tokio_postgres_rustls::MakeRustlsConnect::new(rustls);
            let (client, connection) = config.connect(make).await.map_err(failed)?;
            drive(connector, connection);
            client
        }
    };
    Ok(client)
}

fn column_list(columns: &SchemaRef) -> String {
    columns
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `name` or `schema.name`, each part quoted ("...") or folded to lower
/// case as PostgreSQL folds unquoted names; the schema defaults to public.
fn split_table(text: &str) -> Result<(String, String), ConnectorError> {
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (part, after) = if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                if c == '"' {
                    if quoted[i + 1..].starts_with('"') {
                        value.push('"');
                        chars.next();
                    } else {
                        end = Some(i + 1);
                        break;
                    }
                } else {
                    value.push(c);
                }
            }
            let end = end.ok_or_else(|| bad_option("table", "an unterminated quoted name"))?;
            (value, &quoted[end..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            (rest[..end].trim().to_lowercase(), &rest[end..])
        };
        if part.is_empty() {
            return Err(bad_option("table", format!("\"{text}\" has an empty name")));
        }
        parts.push(part);
        rest = after.trim_start();
        if let Some(r) = rest.strip_prefix('.') {
            rest = r.trim_start();
        } else if !rest.is_empty() {
            return Err(bad_option(
                "table",
                format!("\"{text}\" is not name or schema.name"),
            ));
        }
    }
    match parts.len() {
        1 => Ok(("public".into(), parts.remove(0))),
        2 => {
            let table = parts.remove(1);
            Ok((parts.remove(0), table))
        }
        _ => Err(bad_option(
            "table",
            format!("\"{text}\" is not name or schema.name"),
        )),
    }
}

/// A column name as given in `key`: quoted kept, unquoted as written (Weir
/// column names are already folded).
fn unquote(name: &str) -> String {
    match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => name.to_string(),
    }
}

/// A PostgreSQL identifier, quoted.
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub(crate) fn pg_error(doing: &str, e: tokio_postgres::Error) -> ConnectorError {
    pg_error_of(NAME, doing, e)
}

/// `connector`'s error for a failed call: the server's own message (with
/// its SQLSTATE) when it answered, which retrying will not change; else a
/// transient failure (the network, the server down) worth retrying.
pub(crate) fn pg_error_of(
    connector: &str,
    doing: &str,
    e: tokio_postgres::Error,
) -> ConnectorError {
    match e.as_db_error() {
        // The server going down or away (57: shutdown, 08: connection),
        // out of resources (53), a conflict between transactions (40001,
        // 40P01), or a credential refused (28: a password rotated upstream
        // before its secret; ALTER SECRET reopens what uses it): trying
        // again later can succeed.
        Some(db)
            if ["57", "08", "53", "28"].contains(&&db.code().code()[..2])
                || ["40001", "40P01"].contains(&db.code().code()) =>
        {
            ConnectorError::Transient {
                connector: connector.into(),
                message: format!("{doing}: {} (SQLSTATE {})", db.message(), db.code().code()),
            }
        }
        // Data exceptions (22) and integrity constraints (23): this data
        // is refused, other data may not be.
        Some(db) if ["22", "23"].contains(&&db.code().code()[..2]) => ConnectorError::Refused {
            connector: connector.into(),
            message: format!("{doing}: {} (SQLSTATE {})", db.message(), db.code().code()),
        },
        Some(db) => ConnectorError::Rejected {
            connector: connector.into(),
            message: format!("{doing}: {} (SQLSTATE {})", db.message(), db.code().code()),
        },
        None => {
            // tokio-postgres's own text stops at "error performing TLS
            // handshake"; the causes say which certificate was refused.
            let mut message = format!("{doing}: {e}");
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                message.push_str(&format!(": {c}"));
                cause = c.source();
            }
            ConnectorError::Transient {
                connector: connector.into(),
                message,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_fold_or_keep_quotes() {
        assert_eq!(
            split_table("Alerts").unwrap(),
            ("public".into(), "alerts".into())
        );
        assert_eq!(
            split_table("app.\"Top Bids\"").unwrap(),
            ("app".into(), "Top Bids".into())
        );
        assert_eq!(
            split_table("\"a\"\"b\".c").unwrap(),
            ("a\"b".into(), "c".into())
        );
        assert!(split_table("a.b.c").is_err());
        assert!(split_table("\"open").is_err());
        assert!(split_table("").is_err());
    }

    #[test]
    fn a_password_in_the_dsn_is_refused_with_the_way_out() {
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = std::sync::Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let options = BTreeMap::from([
            (
                "dsn".to_string(),
                "host=h user=u password=hunter2".to_string(),
            ),
            ("table".to_string(), "t".to_string()),
        ]);
        let err = Target::parse(&schema, &options).unwrap_err().to_string();
        assert!(err.contains("password_env"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn upsert_needs_a_key_that_is_a_column() {
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = std::sync::Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let mut options = BTreeMap::from([
            ("dsn".to_string(), "host=h".to_string()),
            ("table".to_string(), "t".to_string()),
            ("mode".to_string(), "upsert".to_string()),
        ]);
        assert!(
            Target::parse(&schema, &options)
                .unwrap_err()
                .to_string()
                .contains("key")
        );
        options.insert("key".into(), "b".into());
        let err = Target::parse(&schema, &options).unwrap_err().to_string();
        assert!(err.contains("no column \"b\""), "{err}");
        options.insert("key".into(), "a".into());
        let target = Target::parse(&schema, &options).unwrap();
        assert_eq!((target.mode, target.key), (Mode::Upsert, vec![0]));
    }
}
