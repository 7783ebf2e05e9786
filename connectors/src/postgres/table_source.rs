//! The `postgres` source: a table of a PostgreSQL database read with plain
//! queries, no replication (for a database where logical replication is
//! not allowed, or a table read once).
//!
//! - `read_mode = 'full'` (the default): the table's rows once, in
//!   primary-key order, in pages of `batch_rows`, all from one snapshot (a
//!   `REPEATABLE READ` transaction). The last key read is the offset: a
//!   restart resumes after it, from a new snapshot. The split then ends.
//! - `read_mode = 'incremental'`: every `poll_interval`, the rows whose
//!   `cursor` column is at least the highest value read minus `lookback`,
//!   in cursor order; each (key, cursor value) pair once. The offset holds
//!   the highest cursor value read and the pairs read within the lookback
//!   window behind it, so a restart neither loses nor repeats a row.
//!
//! Both are append-only: every row read is an insert. Incremental reading
//! sees an updated row again only if the update moved its cursor forward
//! (a new version: a new row), never sees deletes, and sees only the last
//! of several updates between two polls; a row committed with a cursor
//! value more than `lookback` behind the highest one read (a transaction
//! that ran longer than the lookback) is missed. docs/sql/sources-sinks.md
//! says so.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, SimpleQueryMessage};
use weir_common::ChangeBatch;

use super::cdc::{Shape, keys::page_query, table_shape, text};
use super::{quote, split_table};
use crate::recovery::parse_duration;
use crate::spec::{
    Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType, Options,
    fit_columns,
};
use crate::{Connector, ConnectorError, Source, SourceBatch, SourceEvent, SourceOpen};

const NAME: &str = "postgres";

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Source,
    help: "a PostgreSQL table read with queries: once (read_mode = 'full') or by a cursor column (read_mode = 'incremental')",
    options: &[
        OptionSpec::optional(
            "dsn",
            OptionType::Text,
            "the database, as a libpq connection string or URL, without a password",
        )
        .required(),
        super::PASSWORD,
        super::PASSWORD_ENV,
        OptionSpec::optional(
            "table",
            OptionType::Text,
            "the table, as name or schema.name; it needs a primary key",
        )
        .required(),
        OptionSpec::optional(
            "cursor",
            OptionType::Text,
            "incremental: a NOT NULL integer, timestamp or date column that every insert and update moves forward (an updated_at)",
        ),
        OptionSpec::optional(
            "lookback",
            OptionType::Text,
            "incremental: how far behind the highest cursor value read each poll reads again (a number for an integer cursor, a duration like 5m for a time); longer than any upstream transaction",
        ),
        OptionSpec::optional(
            "poll_interval",
            OptionType::Text,
            "incremental: the time between polls",
        )
        .with_default("10s"),
        OptionSpec::optional("batch_rows", OptionType::Count, "rows read per query")
            .with_default("10000"),
    ],
    capabilities: Capabilities {
        read_modes: &["full", "incremental"],
        append_only: true,
        replayable: false,
        bounded: false,
        delivery: &[Delivery::ExactlyOnce],
        skips: false,
    },
};

pub(crate) struct PostgresTableConnector;

impl Connector for PostgresTableConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn check_source(&self, options: &BTreeMap<String, String>) -> Result<(), ConnectorError> {
        Table::parse(options).map(drop)
    }

    fn describe_source<'a>(
        &'a self,
        declared: Option<&'a SchemaRef>,
        options: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<SchemaRef, ConnectorError>> {
        Box::pin(async move {
            let mut table = Table::parse(options)?;
            let client = table.connect().await?;
            let shape = table.shape(&client).await?;
            let produced = shape.produced(declared)?;
            fit_columns(NAME, declared, &produced)
        })
    }

    fn open_source(&self, open: SourceOpen<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        if open.until.is_some() {
            return Err(rejected("a postgres source cannot replay"));
        }
        let table = Table::parse(open.options)?;
        let split = format!("{}.{}", table.schema, table.table);
        let progress = match open.offsets.get(&split) {
            None => Progress::default(),
            Some(text) => serde_json::from_str(text).map_err(|e| ConnectorError::BadPosition {
                connector: NAME.into(),
                value: text.clone(),
                message: e.to_string(),
            })?,
        };
        Ok(Box::new(TableSource {
            name: open.name.to_string(),
            schema: open.schema.clone(),
            table,
            split,
            progress,
            client: None,
            shape: None,
            page_after: None,
            next_poll: tokio::time::Instant::now(),
            ended: false,
        }))
    }
}

fn rejected(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Rejected {
        connector: NAME.into(),
        message: message.into(),
    }
}

fn bad_option(option: &str, message: impl Into<String>) -> ConnectorError {
    ConnectorError::BadOption {
        connector: NAME.into(),
        option: option.into(),
        message: message.into(),
    }
}

fn pg_error(doing: &str, e: tokio_postgres::Error) -> ConnectorError {
    super::pg_error_of(NAME, doing, e)
}

/// Incremental reading's cursor: its column and how far back each poll
/// reads again, in the cursor's unit (an integer, or microseconds).
#[derive(Debug, Clone)]
struct Cursor {
    column: String,
    lookback_text: String,
    /// Known once the column's type is: see [`Table::cursor_kind`].
    lookback: Option<i64>,
}

/// What the options say.
#[derive(Debug, Clone)]
struct Table {
    config: tokio_postgres::Config,
    tls: super::tls::Tls,
    schema: String,
    table: String,
    cursor: Option<Cursor>,
    poll: Duration,
    batch_rows: u64,
}

/// How a cursor column's values compare: as integers, or as times (in
/// microseconds since 1970, the column cast back for the query).
#[derive(Debug, Clone, Copy, PartialEq)]
enum CursorKind {
    Integer,
    Time,
}

impl Table {
    fn parse(options: &BTreeMap<String, String>) -> Result<Self, ConnectorError> {
        let opts = Options::new(&SPEC, options);
        let (mut config, tls) = super::connection_config(NAME, options)?;
        config.options(super::cdc::SESSION_OPTIONS);
        let (schema, table) = split_table(opts.get("table").unwrap_or_default())
            .map_err(|_| bad_option("table", "not name or schema.name"))?;
        let incremental = opts.get("read_mode") == Some("incremental");
        let cursor = match (incremental, opts.get("cursor")) {
            (true, Some(column)) => Some(Cursor {
                column: column.to_string(),
                lookback_text: opts.get("lookback").unwrap_or("0").to_string(),
                lookback: None,
            }),
            (true, None) => {
                return Err(bad_option(
                    "cursor",
                    "read_mode = 'incremental' needs a cursor column (an updated_at that every insert and update moves forward)",
                ));
            }
            (false, Some(_)) => {
                return Err(bad_option(
                    "cursor",
                    "a cursor is for read_mode = 'incremental'; read_mode = 'full' reads every row",
                ));
            }
            (false, None) => None,
        };
        if cursor.is_none() && opts.get("lookback").is_some() {
            return Err(bad_option(
                "lookback",
                "a lookback is for read_mode = 'incremental'",
            ));
        }
        let poll = parse_duration(opts.get("poll_interval").unwrap_or("10s"))
            .map_err(|m| bad_option("poll_interval", m))?;
        Ok(Self {
            config,
            tls,
            schema,
            table,
            cursor,
            poll,
            batch_rows: opts.u64("batch_rows")?.unwrap_or(10_000).max(1),
        })
    }

    fn qualified(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }

    async fn connect(&self) -> Result<Client, ConnectorError> {
        super::connect(&self.config, &self.tls, NAME).await
    }

    /// The table's shape, and for incremental reading its cursor column
    /// checked (NOT NULL, of a type that orders) and its lookback read.
    async fn shape(&mut self, client: &Client) -> Result<Shape, ConnectorError> {
        let (shape, _) = table_shape(client, &self.schema, &self.table, NAME).await?;
        let qualified = self.qualified();
        if let Some(cursor) = &mut self.cursor {
            let column = shape.column(&cursor.column).ok_or_else(|| {
                bad_option(
                    "cursor",
                    format!("table {qualified} has no column \"{}\"", cursor.column),
                )
            })?;
            let kind = cursor_kind(column.type_oid).ok_or_else(|| {
                bad_option(
                    "cursor",
                    format!(
                        "column \"{}\" is {}; a cursor is an integer, timestamp, timestamptz or date column",
                        cursor.column, column.type_name
                    ),
                )
            })?;
            if !column.not_null {
                return Err(bad_option(
                    "cursor",
                    format!(
                        "column \"{}\" may be NULL, and a row with a NULL cursor would never be read: ALTER TABLE {qualified} ALTER COLUMN {} SET NOT NULL",
                        cursor.column,
                        quote(&cursor.column)
                    ),
                ));
            }
            let text = cursor.lookback_text.trim();
            cursor.lookback = Some(match kind {
                CursorKind::Integer => text.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    bad_option("lookback", format!("{text}: a number of cursor units, like 1000 (the cursor is an integer)"))
                })?,
                CursorKind::Time => {
                    let d = parse_duration(text).map_err(|m| bad_option("lookback", m))?;
                    i64::try_from(d.as_micros()).map_err(|_| bad_option("lookback", "too long"))?
                }
            });
        }
        Ok(shape)
    }
}

fn cursor_kind(type_oid: u32) -> Option<CursorKind> {
    match type_oid {
        20 | 21 | 23 => Some(CursorKind::Integer),
        1082 | 1114 | 1184 => Some(CursorKind::Time),
        _ => None,
    }
}

/// What the one split's offset holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Progress {
    /// Full: the last key read (text per key column), and whether the
    /// last page was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<Vec<String>>,
    #[serde(default)]
    done: bool,
    /// Incremental: the highest cursor value read, and the (cursor, key)
    /// pairs read at or after it minus the lookback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    high: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    seen: BTreeSet<(i64, Vec<String>)>,
}

struct TableSource {
    name: String,
    schema: SchemaRef,
    table: Table,
    split: String,
    progress: Progress,
    /// Full: in the snapshot's transaction; incremental: a session.
    client: Option<Client>,
    shape: Option<Shape>,
    /// Incremental: where the poll under way goes on (the last cursor
    /// value and key of its previous page).
    page_after: Option<(i64, Vec<String>)>,
    next_poll: tokio::time::Instant,
    ended: bool,
}

impl TableSource {
    /// The session (and, reading in full, the snapshot's transaction),
    /// made on first use and after an error.
    async fn connected(&mut self) -> Result<(), ConnectorError> {
        if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(());
        }
        let client = self.table.connect().await?;
        let shape = self.table.shape(&client).await?;
        if let Some(missing) = self
            .schema
            .fields()
            .iter()
            .find(|f| shape.column(f.name()).is_none())
        {
            return Err(rejected(format!(
                "table {} has no column \"{}\" any more: DROP and CREATE the source",
                self.table.qualified(),
                missing.name()
            )));
        }
        if self.table.cursor.is_none() {
            client
                .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await
                .map_err(|e| pg_error("starting the snapshot", e))?;
        }
        self.shape = Some(shape);
        self.client = Some(client);
        Ok(())
    }

    fn batch(&self, rows: RecordBatch) -> Result<SourceEvent, ConnectorError> {
        Ok(SourceEvent::Batch(SourceBatch {
            split: self.split.clone(),
            changes: ChangeBatch::inserts(rows),
            offset: serde_json::to_string(&self.progress).expect("progress serializes"),
            max_event_time: None,
            skipped: 0,
        }))
    }

    /// Runs `sql`; its rows as text, `width` columns each.
    async fn query(
        &self,
        sql: &str,
        width: usize,
    ) -> Result<Vec<Vec<Option<String>>>, ConnectorError> {
        let client = self.client.as_ref().expect("connected");
        let messages = client
            .simple_query(sql)
            .await
            .map_err(|e| pg_error(&format!("reading {}", self.table.qualified()), e))?;
        Ok(messages
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(row) => {
                    Some((0..width).map(|i| row.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect())
    }

    /// The first `schema` columns of `rows` as a batch.
    fn rows_of(&self, rows: &[Vec<Option<String>>]) -> Result<RecordBatch, ConnectorError> {
        let columns = self
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let values: Vec<Option<&[u8]>> = rows
                    .iter()
                    .map(|r| r[i].as_deref().map(str::as_bytes))
                    .collect();
                text::column(&values, field.data_type()).map_err(|e| {
                    rejected(format!(
                        "column \"{}\" of {}: {}",
                        field.name(),
                        self.table.qualified(),
                        e.0
                    ))
                })
            })
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| ConnectorError::arrow(NAME, e))
    }

    /// Full: the next page after the last key read.
    async fn read_page(&mut self) -> Result<SourceEvent, ConnectorError> {
        if self.progress.done {
            if self.ended {
                tokio::time::sleep(Duration::from_millis(500)).await;
                return Ok(SourceEvent::Idle);
            }
            self.ended = true;
            self.client = None;
            return Ok(SourceEvent::SplitEnd {
                split: self.split.clone(),
            });
        }
        self.connected().await?;
        let shape = self.shape.as_ref().expect("connected");
        let sql = page_query(
            &self.table.qualified(),
            self.table.batch_rows,
            shape,
            &self.schema,
            self.progress.after.as_deref(),
        );
        let width = self.schema.fields().len() + shape.key.len();
        let keys = shape.key.len();
        let rows = self.query(&sql, width).await?;
        let batch = self.rows_of(&rows)?;
        if let Some(last) = rows.last() {
            self.progress.after = Some(
                last[width - keys..]
                    .iter()
                    .map(|v| v.clone().unwrap_or_default())
                    .collect(),
            );
        }
        if (rows.len() as u64) < self.table.batch_rows {
            tracing::info!(source = %self.name, table = %self.table.qualified(), "table read");
            self.progress.done = true;
        }
        self.batch(batch)
    }

    /// Incremental: the next page of the poll under way, or of a new one
    /// when it is time.
    async fn poll(&mut self) -> Result<SourceEvent, ConnectorError> {
        if self.page_after.is_none() {
            let now = tokio::time::Instant::now();
            if now < self.next_poll {
                tokio::time::sleep((self.next_poll - now).min(Duration::from_secs(1))).await;
                return Ok(SourceEvent::Idle);
            }
        }
        self.connected().await?;
        let shape = self.shape.as_ref().expect("connected");
        let cursor = self.table.cursor.as_ref().expect("incremental");
        let lookback = cursor.lookback.expect("checked at connect");
        let column = shape.column(&cursor.column).expect("checked at connect");
        let kind = cursor_kind(column.type_oid).expect("checked at connect");
        let as_value = |n: i64| match kind {
            CursorKind::Integer => n.to_string(),
            CursorKind::Time => format!(
                "('epoch'::timestamptz + {n} * interval '1 microsecond')::{}",
                column.type_name
            ),
        };
        let as_number = match kind {
            CursorKind::Integer => format!("{}::int8", quote(&cursor.column)),
            CursorKind::Time => format!(
                "(extract(epoch from {}::timestamptz) * 1000000)::int8",
                quote(&cursor.column)
            ),
        };
        let key_order: Vec<String> = shape
            .key
            .iter()
            .map(|k| super::cdc::keys::ordered_key(shape, k))
            .collect();
        let select: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| quote(f.name()))
            .chain(std::iter::once(as_number))
            .chain(shape.key.iter().map(|k| quote(k)))
            .collect();
        let filter = match &self.page_after {
            Some((value, key)) => format!(
                "({}, {}) > ({}, {})",
                quote(&cursor.column),
                key_order.join(", "),
                as_value(*value),
                super::cdc::keys::key_literals(shape, key).join(", ")
            ),
            None => match self.progress.high {
                Some(high) => format!(
                    "{} >= {}",
                    quote(&cursor.column),
                    as_value(high.saturating_sub(lookback))
                ),
                None => "true".into(),
            },
        };
        let sql = format!(
            "SELECT {} FROM {} WHERE {filter} ORDER BY {}, {} LIMIT {}",
            select.join(", "),
            self.table.qualified(),
            quote(&cursor.column),
            key_order.join(", "),
            self.table.batch_rows
        );
        let width = self.schema.fields().len();
        let rows = self.query(&sql, width + 1 + shape.key.len()).await?;
        let full_page = rows.len() as u64 == self.table.batch_rows;
        let mut fresh = Vec::new();
        let mut last = None;
        for row in rows {
            let value: i64 = row[width]
                .as_deref()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    rejected(format!("cursor column \"{}\" read as NULL", cursor.column))
                })?;
            let key: Vec<String> = row[width + 1..]
                .iter()
                .map(|v| v.clone().unwrap_or_default())
                .collect();
            last = Some((value, key.clone()));
            if self.progress.seen.insert((value, key)) {
                self.progress.high = Some(self.progress.high.map_or(value, |h| h.max(value)));
                fresh.push(row);
            }
        }
        if full_page {
            self.page_after = last;
        } else {
            // The poll is over: forget pairs the next one cannot read again.
            self.page_after = None;
            self.next_poll = tokio::time::Instant::now() + self.table.poll;
            if let Some(high) = self.progress.high {
                let low = high.saturating_sub(lookback);
                self.progress.seen = self.progress.seen.split_off(&(low, Vec::new()));
            }
        }
        if fresh.is_empty() && full_page {
            return Ok(SourceEvent::Idle);
        }
        let batch = self.rows_of(&fresh)?;
        self.batch(batch)
    }
}

#[async_trait]
impl Source for TableSource {
    fn splits(&self) -> Vec<String> {
        vec![self.split.clone()]
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
        let result = if self.table.cursor.is_some() {
            self.poll().await
        } else {
            self.read_page().await
        };
        if result.is_err() {
            // Reconnect (and, reading in full, take a new snapshot) after
            // the last key delivered.
            self.client = None;
            self.page_after = None;
        }
        result
    }
}
