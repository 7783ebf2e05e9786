//! The `postgres-cdc` source: tables of a PostgreSQL database, read as a
//! snapshot and then as every committed change, exactly once.
//!
//! Two forms: with a `table` option the source is that table; without
//! one it holds the slot and publication and covers several tables, each
//! declared as its own relation (`CREATE SOURCE orders FROM shop TABLE
//! 'public.orders'`) and read through the one slot.
//!
//! - `mod.rs` (here): the spec, the upstream (connections, the table's
//!   shape) and what CREATE SOURCE checks against the live database.
//! - [`source`]: the protocol (snapshot segments, the stream, offsets),
//!   and its gaps (a lost slot, a table dropped or created again);
//!   [`keys`]: snapshot pages in primary-key order, and that order over
//!   keys from pages and from the stream.
//! - [`pgoutput`]: the logical replication messages between Begin and
//!   Commit (the `pgwire-replication` crate speaks the replication
//!   protocol, SCRAM and TLS, and decodes the boundaries).
//! - [`text`]: PostgreSQL types as Arrow fields, text values as columns.
//!
//! The upstream table must have a primary key (the snapshot is read in
//! its order, and resumes after the last key sealed) and `REPLICA IDENTITY
//! FULL`, so every update and delete carries the whole old row: the
//! source emits `-old/+new` without keeping a copy of the table. Both are
//! checked at CREATE, with the statement that fixes them.

pub(crate) mod keys;
mod pgoutput;
mod source;
pub(crate) mod text;

use std::collections::BTreeMap;

use arrow::datatypes::{Schema, SchemaRef};
use futures::future::BoxFuture;
use tokio_postgres::Client;

use super::{quote, split_table};
use crate::spec::{
    Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType, Options,
    fit_columns,
};
use crate::{Connector, ConnectorError, GAPS_ACCEPTED, Source, SourceOpen};

pub(crate) const NAME: &str = "postgres-cdc";

pub(crate) static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Source,
    help: "a PostgreSQL table: a snapshot, then every committed change (logical replication, pgoutput)",
    options: &[
        OptionSpec::optional(
            "dsn",
            OptionType::Text,
            "the database, as a libpq connection string or URL, without a password (e.g. 'host=db.internal user=weir dbname=app'); the user needs the REPLICATION attribute",
        )
        .required(),
        super::PASSWORD,
        super::PASSWORD_ENV,
        OptionSpec::optional(
            "table",
            OptionType::Text,
            "the table, as name or schema.name; it needs a primary key and REPLICA IDENTITY FULL. Without it the source covers several tables, each declared with CREATE SOURCE name FROM this_source TABLE 'schema.name'",
        ),
        OptionSpec::optional(
            "slot",
            OptionType::Text,
            "the logical replication slot this source creates and owns (it must not exist yet; DROP SOURCE drops it)",
        )
        .required(),
        OptionSpec::optional(
            "publication",
            OptionType::Text,
            "the publication to stream (created FOR TABLE the tables read if absent, and then kept listing exactly them; default: the slot's name)",
        ),
        OptionSpec::optional(
            "snapshot",
            OptionType::OneOf(&["initial", "never"]),
            "initial reads the table's rows first, then its changes; never reads only the changes committed after the source starts",
        )
        .with_default("initial"),
        OptionSpec::optional(
            "snapshot_batch_rows",
            OptionType::Count,
            "rows read per snapshot query (each batch's last key is sealed, so a restart resumes after it)",
        )
        .with_default("10000")
        .tunable(),
    ],
    capabilities: Capabilities {
        read_modes: &["cdc"],
        append_only: false,
        replayable: false,
        bounded: false,
        delivery: &[Delivery::ExactlyOnce],
        skips: false,
    },
};

pub(crate) struct PostgresCdcConnector;

impl Connector for PostgresCdcConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn check_source(&self, options: &BTreeMap<String, String>) -> Result<(), ConnectorError> {
        Upstream::parse(options).map(drop)
    }

    fn covers_tables(&self, options: &BTreeMap<String, String>) -> bool {
        !options.contains_key("table")
    }

    fn describe_source<'a>(
        &'a self,
        declared: Option<&'a SchemaRef>,
        options: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<SchemaRef, ConnectorError>> {
        Box::pin(async move {
            let upstream = Upstream::parse(options)?;
            let client = upstream.connect().await?;
            upstream.check_server(&client).await?;
            let Some(table) = &upstream.table else {
                if declared.is_some() {
                    return Err(bad_option(
                        "table",
                        "a source without a table covers several tables and has no columns of its own: declare the columns on each table (CREATE SOURCE name (columns) FROM this_source TABLE 'schema.name')",
                    ));
                }
                upstream.check_slot_is_free(&client).await?;
                return Ok(std::sync::Arc::new(Schema::empty()));
            };
            let shape = upstream.shape(&client, table).await?;
            let produced = shape.produced(declared)?;
            let columns = fit_columns(NAME, declared, &produced)?;
            upstream.check_slot_is_free(&client).await?;
            upstream.check_publication(&client, table).await?;
            Ok(columns)
        })
    }

    fn describe_source_table<'a>(
        &'a self,
        declared: Option<&'a SchemaRef>,
        options: &'a BTreeMap<String, String>,
        table: &'a str,
    ) -> BoxFuture<'a, Result<SchemaRef, ConnectorError>> {
        Box::pin(async move {
            let upstream = Upstream::parse(options)?;
            if upstream.table.is_some() {
                return Err(rejected(
                    "the source reads one table (its `table` option); only a postgres-cdc source without one covers several",
                ));
            }
            let table = UpstreamTable::parse(table)?;
            let client = upstream.connect().await?;
            let shape = upstream.shape(&client, &table).await?;
            let produced = shape.produced(declared)?;
            let columns = fit_columns(NAME, declared, &produced)?;
            // Weir's own publication gains the table when it is first
            // read; a user's must list it already.
            if !upstream.is_own_publication(&client).await? {
                upstream.check_publication(&client, &table).await?;
            }
            Ok(columns)
        })
    }

    fn release_source<'a>(
        &'a self,
        options: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), ConnectorError>> {
        Box::pin(async move {
            let upstream = Upstream::parse(options)?;
            let client = upstream.connect().await?;
            upstream.drop_slot(&client).await?;
            upstream.drop_own_publication(&client).await
        })
    }

    fn open_source(&self, open: SourceOpen<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        if open.until.is_some() {
            return Err(ConnectorError::Rejected {
                connector: NAME.into(),
                message: "a postgres-cdc source cannot replay".into(),
            });
        }
        let upstream = Upstream::parse(open.options)?;
        if upstream.table.is_some() && !open.tables.is_empty() {
            return Err(rejected(
                "a source with a `table` option reads that table only",
            ));
        }
        Ok(Box::new(source::CdcSource::new(&open, upstream)?))
    }
}

fn bad_option(option: &str, message: impl Into<String>) -> ConnectorError {
    ConnectorError::BadOption {
        connector: NAME.into(),
        option: option.into(),
        message: message.into(),
    }
}

/// Changes lost upstream: the source stops until the gap is accepted.
fn gap(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Gap {
        connector: NAME.into(),
        message: message.into(),
    }
}

fn rejected(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Rejected {
        connector: NAME.into(),
        message: message.into(),
    }
}

fn pg_error(doing: &str, e: tokio_postgres::Error) -> ConnectorError {
    super::pg_error_of(NAME, doing, e)
}

/// Session settings that make both sessions' text values parse the same.
pub(crate) const SESSION_OPTIONS: &str = "-c TimeZone=UTC -c DateStyle=ISO -c bytea_output=hex -c extra_float_digits=3 -c client_encoding=UTF8 -c standard_conforming_strings=on";

/// One upstream table, as `schema.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpstreamTable {
    pub(crate) schema: String,
    pub(crate) table: String,
}

impl UpstreamTable {
    /// `name` or `schema.name` (each part quoted or not).
    pub(crate) fn parse(text: &str) -> Result<Self, ConnectorError> {
        let (schema, table) = split_table(text)
            .map_err(|_| bad_option("table", format!("\"{text}\" is not name or schema.name")))?;
        Ok(Self { schema, table })
    }

    /// `"schema"."table"`.
    pub(crate) fn qualified(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }
}

/// Everything the options say about the upstream.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    config: tokio_postgres::Config,
    tls: super::tls::Tls,
    /// The `table` option: the one table of a source that reads one.
    pub(crate) table: Option<UpstreamTable>,
    pub(crate) slot: String,
    pub(crate) publication: String,
    pub(crate) snapshot: bool,
    pub(crate) batch_rows: u64,
    /// Retention gaps accepted so far (`ALTER DESTINATION ... ACCEPT GAP`,
    /// passed by the server as `weir.gaps_accepted`): one more than the
    /// source's offsets record lets it go on past a lost slot.
    pub(crate) gaps_accepted: u32,
}

impl Upstream {
    pub(crate) fn parse(options: &BTreeMap<String, String>) -> Result<Self, ConnectorError> {
        let opts = Options::new(&SPEC, options);
        let (mut config, tls) = super::connection_config(NAME, options)?;
        config.options(SESSION_OPTIONS);
        if config.get_hosts().len() != 1 {
            return Err(bad_option("dsn", "name exactly one host"));
        }
        let table = opts.get("table").map(UpstreamTable::parse).transpose()?;
        let slot = opts.get("slot").unwrap_or_default().to_string();
        if slot.is_empty()
            || slot.len() > 63
            || !slot
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(bad_option(
                "slot",
                format!(
                    "\"{slot}\" is not a slot name (lower-case letters, digits and underscores, at most 63)"
                ),
            ));
        }
        let publication = opts.get("publication").unwrap_or(&slot).to_string();
        Ok(Self {
            config,
            tls,
            table,
            slot,
            publication,
            snapshot: opts.get("snapshot") != Some("never"),
            batch_rows: opts.u64("snapshot_batch_rows")?.unwrap_or(10_000).max(1),
            gaps_accepted: options
                .get(GAPS_ACCEPTED)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        })
    }

    /// A session for queries (not replication).
    pub(crate) async fn connect(&self) -> Result<Client, ConnectorError> {
        super::connect(&self.config, &self.tls, NAME).await
    }

    /// The replication session's settings, streaming from `start` with
    /// `acked` reported as flushed until the seals say more.
    pub(crate) fn replication(
        &self,
        start: u64,
        acked: u64,
    ) -> pgwire_replication::ReplicationConfig {
        use pgwire_replication::{Lsn, ReplicationConfig};
        let host = match &self.config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let user = self.config.get_user().unwrap_or_default().to_string();
        let database = self.config.get_dbname().unwrap_or(&user).to_string();
        let password = self
            .config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        ReplicationConfig::new(
            host,
            user,
            password,
            database,
            self.slot.clone(),
            self.publication.clone(),
        )
        .with_port(port)
        .with_tls(self.tls.replication())
        .with_start_lsn(Lsn::from_u64(start))
        .with_ack_lsn(Lsn::from_u64(acked))
        .with_options(SESSION_OPTIONS)
        .with_application_name(format!("weir {}", self.slot))
        .with_status_interval(std::time::Duration::from_secs(1))
        .with_wakeup_interval(std::time::Duration::from_secs(1))
    }

    /// The server can stream: logical WAL and a user allowed to replicate.
    async fn check_server(&self, client: &Client) -> Result<(), ConnectorError> {
        let row = client
            .query_one(
                "SELECT current_setting('wal_level'),
                        (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)",
                &[],
            )
            .await
            .map_err(|e| pg_error("reading the server's settings", e))?;
        let wal_level: String = row.get(0);
        if wal_level != "logical" {
            return Err(rejected(format!(
                "the server's wal_level is {wal_level}; logical replication needs wal_level = logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)"
            )));
        }
        if !row.get::<_, Option<bool>>(1).unwrap_or(false) {
            return Err(rejected(
                "the user may not replicate: ALTER ROLE <user> REPLICATION (or connect as one that may)",
            ));
        }
        Ok(())
    }

    /// The table as it is now: its columns and key, with a replica
    /// identity that logs whole old rows.
    pub(crate) async fn shape(
        &self,
        client: &Client,
        table: &UpstreamTable,
    ) -> Result<Shape, ConnectorError> {
        let (shape, identity) = table_shape(client, &table.schema, &table.table, NAME).await?;
        if identity != "f" {
            let qualified = table.qualified();
            return Err(rejected(format!(
                "table {qualified} does not log whole old rows, so an update or delete would not say what it replaced: ALTER TABLE {qualified} REPLICA IDENTITY FULL"
            )));
        }
        Ok(shape)
    }

    async fn check_slot_is_free(&self, client: &Client) -> Result<(), ConnectorError> {
        let taken = client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await
            .map_err(|e| pg_error("looking up the slot", e))?;
        if taken.is_some() {
            return Err(bad_option(
                "slot",
                format!(
                    "replication slot {} already exists upstream; a source creates and owns its slot: name another, or drop that one (SELECT pg_drop_replication_slot('{}')) if nothing uses it",
                    self.slot, self.slot
                ),
            ));
        }
        Ok(())
    }

    async fn publication_exists(&self, client: &Client) -> Result<bool, ConnectorError> {
        Ok(client
            .query_opt(
                "SELECT 1 FROM pg_publication WHERE pubname = $1",
                &[&self.publication],
            )
            .await
            .map_err(|e| pg_error("looking up the publication", e))?
            .is_some())
    }

    /// Whether the publication lists the table.
    async fn publication_covers_table(
        &self,
        client: &Client,
        table: &UpstreamTable,
    ) -> Result<bool, ConnectorError> {
        Ok(client
            .query_opt(
                "SELECT 1 FROM pg_publication_tables
                 WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                &[&self.publication, &table.schema, &table.table],
            )
            .await
            .map_err(|e| pg_error("reading the publication's tables", e))?
            .is_some())
    }

    /// The publication, if it exists, covers the table.
    async fn check_publication(
        &self,
        client: &Client,
        table: &UpstreamTable,
    ) -> Result<(), ConnectorError> {
        if !self.publication_exists(client).await? {
            return Ok(());
        }
        let covers = self.publication_covers_table(client, table).await?;
        if !covers {
            return Err(bad_option(
                "publication",
                format!(
                    "publication {} exists and does not include {}: ALTER PUBLICATION {} ADD TABLE {}",
                    self.publication,
                    table.qualified(),
                    quote(&self.publication),
                    table.qualified()
                ),
            ));
        }
        Ok(())
    }

    /// The table's OID now (`None`: there is no such table).
    pub(crate) async fn table_oid(
        &self,
        client: &Client,
        table: &UpstreamTable,
    ) -> Result<Option<u32>, ConnectorError> {
        Ok(client
            .query_opt(
                "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&table.schema, &table.table],
            )
            .await
            .map_err(|e| pg_error("looking up the table", e))?
            .map(|r| r.get(0)))
    }

    /// Adds the table to the publication if it lacks it (a table created
    /// again after the publication lost it, a table newly read).
    pub(crate) async fn add_to_publication(
        &self,
        client: &Client,
        table: &UpstreamTable,
    ) -> Result<(), ConnectorError> {
        if !self.publication_covers_table(client, table).await? {
            client
                .batch_execute(&format!(
                    "ALTER PUBLICATION {} ADD TABLE {}",
                    quote(&self.publication),
                    table.qualified()
                ))
                .await
                .map_err(|e| pg_error("adding the table to the publication", e))?;
        }
        Ok(())
    }

    /// For a source that covers several tables: the publication exists
    /// and lists `tables`. Weir's own is kept listing exactly them (a
    /// table no longer read leaves it, so its changes are not sent); a
    /// user's must list them already (it is theirs to change).
    pub(crate) async fn reconcile_publication(
        &self,
        client: &Client,
        tables: &[UpstreamTable],
    ) -> Result<(), ConnectorError> {
        self.ensure_publication(client, tables).await?;
        let own = self.is_own_publication(client).await?;
        for table in tables {
            if own {
                self.add_to_publication(client, table).await?;
            } else {
                self.check_publication(client, table).await?;
            }
        }
        if !own {
            return Ok(());
        }
        let listed = client
            .query(
                "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1",
                &[&self.publication],
            )
            .await
            .map_err(|e| pg_error("reading the publication's tables", e))?;
        for row in listed {
            let table = UpstreamTable {
                schema: row.get(0),
                table: row.get(1),
            };
            if !tables.contains(&table) {
                client
                    .batch_execute(&format!(
                        "ALTER PUBLICATION {} DROP TABLE {}",
                        quote(&self.publication),
                        table.qualified()
                    ))
                    .await
                    .map_err(|e| pg_error("removing a table from the publication", e))?;
            }
        }
        Ok(())
    }

    /// Whether the publication exists and is one Weir created.
    pub(crate) async fn is_own_publication(&self, client: &Client) -> Result<bool, ConnectorError> {
        Ok(client
            .query_opt(
                "SELECT 1 FROM pg_publication p
                 WHERE p.pubname = $1 AND obj_description(p.oid, 'pg_publication') = $2",
                &[&self.publication, &self.own_publication_comment()],
            )
            .await
            .map_err(|e| pg_error("looking up the publication", e))?
            .is_some())
    }

    /// The comment Weir sets on a publication it created (for this slot),
    /// so DROP SOURCE drops that one and never a user's.
    fn own_publication_comment(&self) -> String {
        format!("created by Weir for replication slot {}", self.slot)
    }

    /// Drops the publication if this source created it (its comment says
    /// so); a publication the user made stays.
    pub(crate) async fn drop_own_publication(&self, client: &Client) -> Result<(), ConnectorError> {
        if self.is_own_publication(client).await? {
            client
                .batch_execute(&format!(
                    "DROP PUBLICATION IF EXISTS {}",
                    quote(&self.publication)
                ))
                .await
                .map_err(|e| pg_error("dropping the publication", e))?;
        }
        Ok(())
    }

    /// Creates the publication for `tables` if it does not exist.
    pub(crate) async fn ensure_publication(
        &self,
        client: &Client,
        tables: &[UpstreamTable],
    ) -> Result<(), ConnectorError> {
        if !self.publication_exists(client).await? {
            let listed: Vec<String> = tables.iter().map(UpstreamTable::qualified).collect();
            let sql = format!(
                "CREATE PUBLICATION {p}{}; COMMENT ON PUBLICATION {p} IS '{}'",
                if listed.is_empty() {
                    String::new()
                } else {
                    format!(" FOR TABLE {}", listed.join(", "))
                },
                self.own_publication_comment().replace('\'', "''"),
                p = quote(&self.publication),
            );
            match client.batch_execute(&sql).await {
                Ok(()) => {}
                // Another session created it meanwhile.
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {}
                Err(e) => return Err(pg_error("creating the publication", e)),
            }
        }
        Ok(())
    }

    /// Drops the slot, ending the session that holds it if there is one.
    pub(crate) async fn drop_slot(&self, client: &Client) -> Result<(), ConnectorError> {
        for _ in 0..50 {
            let row = client
                .query_opt(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                    &[&self.slot],
                )
                .await
                .map_err(|e| pg_error("looking up the slot", e))?;
            let Some(row) = row else { return Ok(()) };
            if let Some(pid) = row.get::<_, Option<i32>>(0) {
                let _ = client
                    .execute("SELECT pg_terminate_backend($1)", &[&pid])
                    .await;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
            match client
                .execute("SELECT pg_drop_replication_slot($1)", &[&self.slot])
                .await
            {
                Ok(_) => return Ok(()),
                // Taken again, or dropped by someone else: look again.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
        Err(rejected(format!(
            "replication slot {} stayed in use; drop it by hand with SELECT pg_drop_replication_slot('{}')",
            self.slot, self.slot
        )))
    }
}

/// `schema.table` as it is now: its columns and primary key (checked:
/// a plain table with a key of types Weir reads), and its replica
/// identity (`relreplident`), for errors of `connector`.
pub(crate) async fn table_shape(
    client: &Client,
    schema: &str,
    table: &str,
    connector: &'static str,
) -> Result<(Shape, String), ConnectorError> {
    let qualified = format!("{}.{}", quote(schema), quote(table));
    let rejected = |message: String| ConnectorError::Rejected {
        connector: connector.into(),
        message,
    };
    let pg_error = |doing: &str, e| super::pg_error_of(connector, doing, e);
    let Some(row) = client
        .query_opt(
            "SELECT c.oid, c.relreplident::text, c.relkind::text FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &table],
        )
        .await
        .map_err(|e| pg_error("looking up the table", e))?
    else {
        return Err(rejected(format!("table {qualified} does not exist")));
    };
    let oid: u32 = row.get(0);
    let identity: String = row.get(1);
    if row.get::<_, String>(2) != "r" {
        return Err(rejected(format!("{qualified} is not a plain table")));
    }
    let columns = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, a.attnotnull,
                    format_type(a.atttypid, a.atttypmod)
             FROM pg_attribute a
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum",
            &[&oid],
        )
        .await
        .map_err(|e| pg_error("reading the table's columns", e))?
        .into_iter()
        .map(|r| UpstreamColumn {
            name: r.get(0),
            type_oid: r.get(1),
            type_modifier: r.get(2),
            not_null: r.get(3),
            type_name: r.get(4),
        })
        .collect::<Vec<_>>();
    let key: Vec<String> = client
        .query(
            "SELECT a.attname::text FROM pg_index i
             JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n) ON true
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.n",
            &[&oid],
        )
        .await
        .map_err(|e| pg_error("reading the table's primary key", e))?
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    if key.is_empty() {
        return Err(rejected(format!(
            "table {qualified} has no primary key; a source reads the table in key order and resumes after the last key read: ALTER TABLE {qualified} ADD PRIMARY KEY (...)"
        )));
    }
    let shape = Shape { oid, columns, key };
    for name in &shape.key {
        let c = shape.column(name).expect("a key column is a column");
        if text::field_of(name, c.type_oid, c.type_modifier, false).is_none() {
            return Err(rejected(format!(
                "key column \"{name}\" of {qualified} is of type {}, which Weir cannot read yet",
                c.type_name
            )));
        }
    }
    Ok((shape, identity))
}

#[derive(Debug, Clone)]
pub(crate) struct UpstreamColumn {
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
    pub not_null: bool,
    /// As `format_type` writes it (`numeric(12,2)`), for casts and errors.
    pub type_name: String,
}

/// The upstream table's columns and primary key.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub oid: u32,
    pub columns: Vec<UpstreamColumn>,
    pub key: Vec<String>,
}

impl Shape {
    pub(crate) fn column(&self, name: &str) -> Option<&UpstreamColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The columns the source produces: every column when none are
    /// declared (a type Weir cannot read is then an error naming it),
    /// else the ones Weir can read (declared columns are checked
    /// against them).
    pub(crate) fn produced(
        &self,
        declared: Option<&SchemaRef>,
    ) -> Result<SchemaRef, ConnectorError> {
        let mut fields = Vec::new();
        for c in &self.columns {
            match text::field_of(&c.name, c.type_oid, c.type_modifier, !c.not_null) {
                Some(f) => fields.push(f),
                None if declared.is_some() => {}
                None => {
                    return Err(ConnectorError::ColumnMismatch {
                        connector: NAME.into(),
                        column: c.name.clone(),
                        message: format!(
                            "its type {} cannot be read yet; declare the source's columns without it",
                            c.type_name
                        ),
                    });
                }
            }
        }
        Ok(std::sync::Arc::new(Schema::new(fields)))
    }
}
