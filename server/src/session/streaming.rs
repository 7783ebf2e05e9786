//! DROP / SHOW / ALTER of sources (whose CREATE is in `sources.rs`),
//! CREATE / DROP / SHOW of sinks and destinations (whose CREATE and ALTER
//! are in `destination.rs`), and deploying sinks.
//!
//! A source is only a catalog entry until something reads it: the first
//! projection or sink over it starts its reader (see [`weir_engine::runtime::streams`]).
//! A sink is planned like a projection, its query lowered to a graph whose
//! output goes to the connector each epoch instead of being kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use weir_common::ObjectId;
use weir_connectors::{ConnectorError, ConnectorKind};
use weir_pgsem::SqlType;
use weir_planner::streaming_ddl::{
    DeclaredColumn, SinkAction, SourceAction, StreamingDdl, StreamingKind,
};

use super::projection::column_defs;
use super::secrets::Named;
use super::sources::SourceInput;
use super::{Session, StatementResult, command, show::text_rows};
use crate::catalog::model::ColumnDef;
use crate::catalog::streaming::{SinkDef, SourceDef};
use crate::catalog::{Catalog, CatalogChange};
use crate::db::TxnWrites;
use crate::error::ServerError;
use crate::planning::parse_query;

/// What a CREATE SINK reads: `FROM relation` or `AS query [EMIT ON
/// WINDOW CLOSE]`.
struct SinkBody {
    from: Option<Vec<String>>,
    query: Option<String>,
    emit_on_window_close: bool,
}

impl Session {
    pub(super) async fn streaming(
        &mut self,
        ddl: StreamingDdl,
    ) -> Result<StatementResult, ServerError> {
        match ddl {
            StreamingDdl::CreateSource {
                if_not_exists,
                name,
                columns,
                watermark,
                options,
                secrets,
                from,
            } => {
                let input = match from {
                    Some((source, table)) => SourceInput::Table(source, table),
                    None => SourceInput::With((options, secrets)),
                };
                self.create_source(if_not_exists, &name, &columns, watermark, input)
                    .await
            }
            StreamingDdl::CreateSink {
                if_not_exists,
                name,
                from,
                query,
                options,
                secrets,
                emit_on_window_close,
            } => {
                let body = SinkBody {
                    from,
                    query,
                    emit_on_window_close,
                };
                self.create_sink(if_not_exists, &name, body, (options, secrets))
                    .await
            }
            StreamingDdl::CreateDestination(create) => self.create_destination(create).await,
            StreamingDdl::AlterSequence(alter) => self.alter_sequence(alter),
            StreamingDdl::AlterSource { name, action } => self.alter_source(&name, action).await,
            StreamingDdl::Rename {
                kind,
                if_exists,
                name,
                to,
            } => self.rename_relation(kind, if_exists, &name, to),
            StreamingDdl::SetSchema {
                kind,
                if_exists,
                name,
                schema,
            } => self.set_schema(kind, if_exists, &name, schema),
            StreamingDdl::AlterSink { name, action } => self.alter_sink(&name, action).await,
            StreamingDdl::AlterOptions {
                kind,
                name,
                options,
                secrets,
            } => self.alter_options(kind, &name, options, secrets).await,
            StreamingDdl::AlterDestination { name, action } => {
                self.alter_destination(&name, action).await
            }
            StreamingDdl::CreateSecret {
                if_not_exists,
                name,
                value,
            } => self.put_secret(Some(if_not_exists), name, value),
            StreamingDdl::AlterSecret { name, value } => {
                let done = self.put_secret(None, name.clone(), value)?;
                self.reopen_users(Named::Secret(&name)).await?;
                Ok(done)
            }
            StreamingDdl::CreateConnection {
                if_not_exists,
                name,
                kind,
                options,
                secrets,
            } => self.create_connection(if_not_exists, name, kind, options, secrets),
            StreamingDdl::AlterConnection {
                name,
                options,
                secrets,
            } => {
                let done = self.alter_connection(name.clone(), options, secrets)?;
                self.reopen_users(Named::Connection(&name)).await?;
                Ok(done)
            }
            StreamingDdl::DropNamed {
                what,
                if_exists,
                names,
                cascade,
            } => self.drop_named(what, if_exists, names, cascade),
            StreamingDdl::ShowNamed { what } => self.show_named(what),
            StreamingDdl::Drop {
                kind,
                if_exists,
                names,
                cascade,
            } => self.drop_streaming(kind, if_exists, &names, cascade),
            StreamingDdl::Show { kind } => self.show_streaming(kind),
            StreamingDdl::ShowCreate { kind, name } => {
                let (schema, name) = self.split_parts(&name)?;
                let catalog = self.snapshot().catalog.clone();
                let (qualified, sql) = match kind {
                    StreamingKind::Source => catalog
                        .source(&schema, &name)
                        .map(|d| (d.qualified_name(), d.create_statement(&catalog))),
                    StreamingKind::Sink | StreamingKind::Destination => catalog
                        .sink(&schema, &name)
                        .filter(|d| is_kind(d, kind))
                        .map(|d| (d.qualified_name(), d.create_statement())),
                }
                .ok_or_else(|| undefined(kind, &name))?;
                text_rows(&["name", "create_sql"], vec![vec![qualified, sql]])
            }
        }
    }

    /// `[schema.]name` parts as (schema, name), the schema defaulting to
    /// the first of the search path.
    pub(super) fn split_parts(&self, parts: &[String]) -> Result<(String, String), ServerError> {
        match parts {
            [name] => Ok((self.vars.default_schema(), name.clone())),
            [schema, name] => Ok((schema.clone(), name.clone())),
            _ => Err(ServerError::invalid_param(format!(
                "improper qualified name: {}",
                parts.join(".")
            ))),
        }
    }

    async fn create_sink(
        &mut self,
        if_not_exists: bool,
        name: &[String],
        SinkBody {
            from,
            query,
            emit_on_window_close,
        }: SinkBody,
        (options, secrets): ParsedOptions,
    ) -> Result<StatementResult, ServerError> {
        let (schema, name) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if catalog.sink(&schema, &name).is_some() {
            if if_not_exists {
                return Ok(command("CREATE SINK"));
            }
            return Err(ServerError::DuplicateObject(format!("sink \"{name}\"")));
        }
        let (connector_name, given) = split_connector(options, "CREATE SINK")?;
        let connector = weir_connectors::connector(&connector_name, ConnectorKind::Sink)?;
        let super::secrets::ConnectorOptions {
            stored,
            secrets,
            resolved: options,
        } = self.connector_options(connector, &connector_name, given, &secrets)?;
        if let Some(target) = connector.sink_target(&options)
            && let Some(owner) = self.sink_writing(&target, None)
        {
            // Two sinks on one target would each take the other's place.
            return Err(ServerError::DuplicateObject(format!(
                "a sink writing to {target} ({owner})"
            )));
        }
        let from = from.map(|parts| {
            parts
                .iter()
                .map(|p| crate::catalog::model::quote_ident(p))
                .collect::<Vec<_>>()
                .join(".")
        });
        let query_text = match (&from, query) {
            (Some(relation), _) => format!("SELECT * FROM {relation}"),
            (None, Some(q)) => q,
            (None, None) => return Err(ServerError::invalid_param("CREATE SINK needs FROM or AS")),
        };
        let query = parse_query(&query_text)?;
        self.view.start_noting();
        let planned = self
            .plan_context()
            .plan_projection_emitting(&query, &[], emit_on_window_close)
            .await;
        let noted = self.view.take_noted();
        let planned = planned?;
        connector
            .check_sink(&planned.stream.schema, &options, planned.stream.append_only)
            .await?;
        let columns = column_defs(&planned.stream)?;
        let mut reads: Vec<ObjectId> = planned.bindings.iter().map(|b| b.object).collect();
        // Views are planned inline: not among the scans.
        reads.extend(noted.iter().filter(|id| catalog.views.contains_key(id)));
        reads.sort();
        reads.dedup();
        let settings = self.object_settings();
        // `FROM relation` reads all of it, whatever columns it comes to have.
        let query = match from {
            Some(_) => query,
            None => self.stored_query(&query).await,
        };
        let def = SinkDef {
            id: (*catalog).clone().allocate_id(),
            schema,
            name,
            from,
            query: query.to_string(),
            columns,
            reads,
            connector: connector_name,
            options: stored,
            secrets,
            settings,
            destination: None,
            paused: false,
            emit_on_window_close,
        };
        let named = def.name.clone();
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateSink(def)],
            tables: vec![],
        })?;
        self.notice_unbounded_state("sink", &named, &planned.stream.unbounded_state);
        Ok(command("CREATE SINK"))
    }

    fn drop_streaming(
        &mut self,
        kind: StreamingKind,
        if_exists: bool,
        names: &[Vec<String>],
        cascade: bool,
    ) -> Result<StatementResult, ServerError> {
        let catalog = self.snapshot().catalog.clone();
        let mut changes = Vec::new();
        let mut released = Vec::new();
        for parts in names {
            let (schema, name) = self.split_parts(parts)?;
            match kind {
                StreamingKind::Source => match catalog.source(&schema, &name) {
                    Some(def) => {
                        super::sources::drop_source(&catalog, def, cascade, &mut changes)?;
                        // A table of a shared source holds nothing
                        // upstream: its parent's reader restarts without it
                        // (after the commit).
                        if def.parent().is_some() {
                            continue;
                        }
                        match crate::secrets::resolve(
                            &catalog,
                            self.db.secret_key(),
                            &def.connector,
                            &def.options,
                            &def.secrets,
                        ) {
                            Ok(options) => released.push((def.clone(), options)),
                            Err(e) => {
                                tracing::warn!(source = %def.qualified_name(), error = %e, "cannot release a dropped source's upstream resources")
                            }
                        }
                    }
                    None if if_exists => {}
                    None => return Err(undefined(kind, &name)),
                },
                StreamingKind::Sink | StreamingKind::Destination => match catalog
                    .sink(&schema, &name)
                {
                    Some(def) if !is_kind(def, kind) => {
                        let (is, use_) = match kind {
                            StreamingKind::Sink => ("a destination", "DROP DESTINATION"),
                            _ => ("a sink", "DROP SINK"),
                        };
                        return Err(ServerError::Sqlstate {
                            code: "42809",
                            message: format!("\"{}\" is {is}: use {use_}", def.qualified_name()),
                        });
                    }
                    Some(def) => {
                        let change = CatalogChange::DropSink { id: def.id };
                        if !changes.contains(&change) {
                            changes.push(change);
                        }
                    }
                    None if if_exists => {}
                    None => return Err(undefined(kind, &name)),
                },
            }
        }
        self.write(TxnWrites {
            ddl: changes,
            tables: vec![],
        })?;
        for (def, options) in released {
            release_source(def, options);
        }
        Ok(command(match kind {
            StreamingKind::Source => "DROP SOURCE",
            StreamingKind::Sink => "DROP SINK",
            StreamingKind::Destination => "DROP DESTINATION",
        }))
    }

    fn show_streaming(
        &mut self,
        kind: Option<StreamingKind>,
    ) -> Result<StatementResult, ServerError> {
        let catalog = self.snapshot().catalog.clone();
        let status = self.db.runtime().stream_status();
        use crate::system_streaming::source_status;
        let row = |schema: &str, name: &str, connector: &str, state: &str| {
            vec![schema.into(), name.into(), connector.into(), state.into()]
        };
        let mut rows: Vec<Vec<String>> = match kind {
            Some(StreamingKind::Source) => catalog
                .sources
                .values()
                .map(|s| {
                    row(
                        &s.schema,
                        &s.name,
                        &s.connector,
                        source_status(status.sources.get(&s.id)),
                    )
                })
                .collect(),
            Some(kind @ (StreamingKind::Sink | StreamingKind::Destination)) => catalog
                .sinks
                .values()
                .filter(|s| is_kind(s, kind))
                .map(|s| {
                    row(
                        &s.schema,
                        &s.name,
                        &s.connector,
                        crate::system_streaming::destination_status(&catalog, &status, s),
                    )
                })
                .collect(),
            None => {
                drop(status);
                return text_rows(
                    &["name", "kind", "options", "capabilities", "description"],
                    crate::system_streaming::connector_rows(),
                );
            }
        };
        rows.sort();
        text_rows(&["schema", "name", "connector", "status"], rows)
    }

    /// The catalog now and the source named `name` in it.
    pub(super) fn named_source(
        &self,
        name: &[String],
    ) -> Result<(Arc<Catalog>, Arc<SourceDef>), ServerError> {
        let (schema, name) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        let def = catalog
            .source(&schema, &name)
            .cloned()
            .ok_or_else(|| undefined(StreamingKind::Source, &name))?;
        Ok((catalog, def))
    }

    /// The catalog now and the sink named `name` in it.
    pub(super) fn named_sink(
        &self,
        name: &[String],
    ) -> Result<(Arc<Catalog>, Arc<SinkDef>), ServerError> {
        let (schema, name) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        let def = catalog
            .sink(&schema, &name)
            .cloned()
            .ok_or_else(|| undefined(StreamingKind::Sink, &name))?;
        Ok((catalog, def))
    }

    /// `ALTER SOURCE name PAUSE | RESUME | RESET OFFSET`: the catalog says
    /// whether the source is read (so a pause survives restarts), and its
    /// reader is stopped or started again at the position it had; a reset
    /// is the runtime's, made durable by a seal before it returns.
    async fn alter_source(
        &mut self,
        name: &[String],
        action: SourceAction,
    ) -> Result<StatementResult, ServerError> {
        let (catalog, def) = self.named_source(name)?;
        if let Some(parent) = def.parent().and_then(|p| catalog.sources.get(&p)) {
            let action = match action {
                SourceAction::Pause => "PAUSE",
                SourceAction::Resume => "RESUME",
                SourceAction::ResetOffset => "RESET OFFSET",
            };
            return Err(ServerError::Sqlstate {
                code: "42809",
                message: format!(
                    "{} is a table of source {}, whose reader reads all its tables: ALTER SOURCE {} {action}",
                    def.qualified_name(),
                    parent.qualified_name(),
                    parent.qualified_name()
                ),
            });
        }
        if action == SourceAction::ResetOffset {
            return self.reset_source(&def).await;
        }
        let pause = action == SourceAction::Pause;
        if def.paused == pause {
            let state = if def.paused {
                "paused"
            } else {
                crate::system_streaming::source_status(
                    self.db.runtime().stream_status().sources.get(&def.id),
                )
            };
            return Err(ServerError::Sqlstate {
                code: "55000",
                message: format!(
                    "source {} is {state}: {} it does nothing",
                    def.qualified_name(),
                    if pause { "pausing" } else { "resuming" }
                ),
            });
        }
        let mut changed = (*def).clone();
        changed.paused = pause;
        self.replace_source(changed).await
    }

    /// Stores `changed` in place of the source of its id and restarts the
    /// source's reader with it, at the position it had.
    pub(super) async fn replace_source(
        &mut self,
        changed: SourceDef,
    ) -> Result<StatementResult, ServerError> {
        self.write(TxnWrites {
            ddl: vec![CatalogChange::ReplaceSource(changed.clone())],
            tables: vec![],
        })?;
        let read = self.plan_context().source_to_read(&changed)?;
        self.db.runtime().restart_source(read).await;
        Ok(command("ALTER SOURCE"))
    }

    /// `ALTER SINK name PAUSE | RESUME | RESET OFFSET`. PAUSE and
    /// RESUME are recorded in the catalog (so a pause survives restarts)
    /// and done by the runtime, which keeps what a paused sink misses.
    /// RESET OFFSET starts the sink over as one created now would (a new
    /// id, nothing sealed, its target's progress taken over afresh), so it
    /// delivers its input from the beginning again, then its changes; it
    /// leaves a pause as it was, and is refused before anything changes
    /// when the sink could not read that input from the beginning.
    async fn alter_sink(
        &mut self,
        name: &[String],
        action: SinkAction,
    ) -> Result<StatementResult, ServerError> {
        let (catalog, def) = self.named_sink(name)?;
        if def.destination.is_some() {
            let what = match action {
                SinkAction::ResetOffset => "REPAIR refills it",
                SinkAction::Pause => "PAUSE pauses it",
                SinkAction::Resume => "RESUME resumes it",
            };
            return Err(ServerError::Sqlstate {
                code: "42809",
                message: format!(
                    "{} is a destination, not a sink: ALTER DESTINATION {} {what}",
                    def.qualified_name(),
                    def.qualified_name()
                ),
            });
        }
        if action != SinkAction::ResetOffset {
            return self.pause_sink(&def, action == SinkAction::Pause).await;
        }
        let mut reset = (*def).clone();
        reset.id = (*catalog).clone().allocate_id();
        let deployment = self.plan_sink_deployment(&reset).await?;
        self.check_sources_that_cannot_replay("sink", &reset.qualified_name(), &deployment)?;
        // The old sink goes (its deployment and seal entry with it) and
        // the new one takes its place, in one catalog change.
        self.write(TxnWrites {
            ddl: vec![
                CatalogChange::DropSink { id: def.id },
                CatalogChange::CreateSink(reset),
            ],
            tables: vec![],
        })?;
        Ok(command("ALTER SINK"))
    }

    /// `ALTER SOURCE ... RESET OFFSET`: refused for a source that carries
    /// updates and deletes (what reads it would see them twice); else its
    /// next generation, with the options it has. A paused source stays
    /// paused, and reads from the beginning once resumed.
    async fn reset_source(&mut self, def: &SourceDef) -> Result<StatementResult, ServerError> {
        let append_only =
            weir_connectors::connector(&def.connector, weir_connectors::ConnectorKind::Source)
                .is_ok_and(|c| c.spec().capabilities.append_only);
        if !append_only {
            return Err(ServerError::Sqlstate {
                code: "55000",
                message: format!(
                    "source {} carries updates and deletes ({}), so reading it again from the \
                     beginning would apply them twice to what reads it; DROP SOURCE ... CASCADE \
                     and create it and what reads it again to start over",
                    def.qualified_name(),
                    def.connector
                ),
            });
        }
        self.next_source_generation(def, def.clone()).await?;
        self.notice(format!(
            "source {} is read again from the beginning: projections and sinks over it receive its rows again",
            def.qualified_name()
        ));
        Ok(command("ALTER SOURCE"))
    }

    /// Makes `changed` (the source `old`, its options as they are to be)
    /// the source's next generation, which reads its input from the
    /// beginning; what was read before stays in what reads it. The reader
    /// stops first and a seal records everything it read; only then does
    /// the catalog take the new generation. A crash before that seal
    /// leaves the source as it was (the statement failed); a crash after
    /// the catalog write restores every row read before, and since the
    /// generation is sealed with the offsets, the reader starts the input
    /// from the beginning rather than at offsets of the generation before.
    pub(super) async fn next_source_generation(
        &mut self,
        old: &SourceDef,
        mut changed: SourceDef,
    ) -> Result<(), ServerError> {
        let mut stopped = old.clone();
        stopped.paused = true;
        let read = self.plan_context().source_to_read(&stopped)?;
        self.db.runtime().restart_source(read).await;
        let sealed = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            self.db.runtime().await_seal(),
        )
        .await;
        if !matches!(sealed, Ok(Ok(()))) {
            let read = self.plan_context().source_to_read(old)?;
            self.db.runtime().restart_source(read).await;
            return Err(ServerError::Sqlstate {
                code: "58000",
                message: format!(
                    "no checkpoint recorded what source {} read within 60 s (see \
                     weir_catalog.epochs and the server log), so nothing changed: it reads on \
                     as before",
                    old.qualified_name()
                ),
            });
        }
        changed.generation += 1;
        self.replace_source(changed).await.map(drop)
    }

    /// `ALTER SINK ... PAUSE` (`pause`) or `RESUME`.
    async fn pause_sink(
        &mut self,
        def: &SinkDef,
        pause: bool,
    ) -> Result<StatementResult, ServerError> {
        if def.paused == pause {
            let status = self.db.runtime().stream_status();
            let state = sink_state(&status, def.id);
            return Err(ServerError::Sqlstate {
                code: "55000",
                message: format!(
                    "sink {} is {}: {} it does nothing",
                    def.qualified_name(),
                    if def.paused { "paused" } else { state },
                    if pause { "pausing" } else { "resuming" }
                ),
            });
        }
        let mut changed = def.clone();
        changed.paused = pause;
        self.write(TxnWrites {
            ddl: vec![CatalogChange::ReplaceSink(changed)],
            tables: vec![],
        })?;
        self.db.runtime().pause_sink(def.id, pause).await;
        Ok(command("ALTER SINK"))
    }

    /// Plans a committed sink and starts it.
    pub(crate) async fn deploy_sink(&mut self, def: &SinkDef) -> Result<(), ServerError> {
        let deployment = self.plan_sink_deployment(def).await?;
        self.check_sources_that_cannot_replay("sink", &def.qualified_name(), &deployment)?;
        self.db.deploy_projection(deployment).await
    }

    pub(crate) async fn plan_sink_deployment(
        &self,
        def: &SinkDef,
    ) -> Result<weir_engine::runtime::Deployment, ServerError> {
        self.plan_context().sink(def).await
    }
}

/// Whether a catalog sink is of `kind` (a sink, or a destination).
fn is_kind(def: &SinkDef, kind: StreamingKind) -> bool {
    def.destination.is_some() == (kind == StreamingKind::Destination)
}

/// A sink's or destination's state as `weir_catalog` shows it.
pub(super) fn sink_state(
    status: &weir_engine::runtime::StreamStatus,
    id: ObjectId,
) -> &'static str {
    crate::system_streaming::sink_status(status.sinks.get(&id))
}

pub(super) fn undefined(kind: StreamingKind, name: &str) -> ServerError {
    ServerError::Sqlstate {
        code: "42704",
        message: format!(
            "{} \"{name}\" does not exist",
            kind.keyword().to_lowercase()
        ),
    }
}

/// The `connector` option apart from the rest.
/// Option values and `option = SECRET name` pairs, as parsed.
pub(super) type ParsedOptions = (Vec<(String, String)>, Vec<(String, String)>);

pub(super) fn split_connector(
    options: Vec<(String, String)>,
    statement: &str,
) -> Result<(String, BTreeMap<String, String>), ServerError> {
    let mut rest: BTreeMap<String, String> = options.into_iter().collect();
    let connector = rest.remove("connector").ok_or_else(|| {
        ServerError::Connector(ConnectorError::MissingOption {
            connector: "(none)".into(),
            option: "connector".into(),
            help: format!("{statement} ... WITH (connector = '...'); SHOW CONNECTORS lists them"),
        })
    })?;
    Ok((connector, rest))
}

pub(super) fn column_of(c: &DeclaredColumn) -> Result<ColumnDef, ServerError> {
    let data_type = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&c.data_type)
        .and_then(|mut p| p.parse_data_type())
        .map_err(|e| ServerError::Syntax {
            message: e.to_string(),
            position: None,
        })?;
    let sql_type = SqlType::from_sql(&data_type).map_err(ServerError::feature_not_supported)?;
    Ok(ColumnDef {
        name: c.name.clone(),
        sql_type,
        nullable: !c.not_null,
        default: None,
        generated: None,
    })
}

/// Lets go of what a dropped source held outside (a replication slot), in
/// the background: its reader is stopping meanwhile, and a failure is
/// logged with what to drop by hand, never the DROP's error.
pub(super) fn release_source(def: std::sync::Arc<SourceDef>, options: BTreeMap<String, String>) {
    let Ok(connector) = weir_connectors::connector(&def.connector, ConnectorKind::Source) else {
        return;
    };
    tokio::spawn(async move {
        if let Err(e) = connector.release_source(&options).await {
            tracing::warn!(source = %def.qualified_name(), error = %e, "releasing a dropped source's upstream resources failed");
        }
    });
}
