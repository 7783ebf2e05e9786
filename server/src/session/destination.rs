//! `CREATE DESTINATION` and `ALTER DESTINATION ... REPAIR | ACCEPT GAP`.
//!
//! A destination is a sink with an identity: the catalog keeps it as a
//! [`SinkDef`] whose `destination` is set, so it is planned, deployed,
//! sealed and restored exactly as a sink is (`SELECT * FROM projection`,
//! filled from the projection's contents at the epoch it starts, then
//! kept current by the changes after it). What it adds:
//! - a `KEY`: the target is an upsert mirror, one row per key;
//! - a generation: `REPAIR` replaces the sink by a fresh one (new id,
//!   nothing sealed) of the next generation, which truncates the target
//!   and refills it in its first commit, so a reader of the target sees
//!   the old generation until the new one is complete;
//! - records: its history (created, repairs, accepted gaps), shown in
//!   `weir_catalog.destinations` with the runtime's prepared and committed
//!   epochs;
//! - gaps: a source upstream (through any chain of projections) that lost
//!   changes leaves the destination `blocked_by_gap`; `ACCEPT GAP` records
//!   the gap, counts it on each such source and restarts its reader, which
//!   goes on past it (a `postgres-cdc` source with a new slot).

use std::collections::BTreeMap;

use weir_connectors::ConnectorKind;
use weir_planner::streaming_ddl::{CreateDestination, DestinationAction, StreamingKind};

use super::{Session, StatementResult, command};
use crate::catalog::CatalogChange;
use crate::catalog::streaming::{DestinationDef, DestinationRecord, SinkDef};
use crate::db::TxnWrites;
use crate::error::ServerError;

/// The connectors a destination can write into.
const INTO: &[&str] = &["postgres"];
/// Options a destination fixes itself, refused in `INTO (...)`.
const IMPLIED: &[&str] = &["mode", "key", "format", "on_existing"];
/// What `WITH (...)` of a destination takes: `on_existing`, and the
/// options every sink takes (delivery, recovery).
const WITH_OPTIONS: &[&str] = &[
    "on_existing",
    "delivery",
    "on_error",
    "dead_letter",
    "group_size",
    "group_max_wait",
    "restart_min_backoff",
    "restart_max_backoff",
    "restart_random_factor",
    "restart_max",
    "restart_window",
];

impl Session {
    pub(super) async fn create_destination(
        &mut self,
        create: CreateDestination,
    ) -> Result<StatementResult, ServerError> {
        let (schema, name) = self.split_parts(&create.name)?;
        let catalog = self.snapshot().catalog.clone();
        if !catalog.schemas.contains(&schema) {
            return Err(ServerError::UndefinedSchema(schema));
        }
        if let Some(existing) = catalog.sink(&schema, &name) {
            if create.if_not_exists && existing.destination.is_some() {
                return Ok(command("CREATE DESTINATION"));
            }
            let what = if existing.destination.is_some() {
                "destination"
            } else {
                "sink"
            };
            return Err(ServerError::DuplicateObject(format!("{what} \"{name}\"")));
        }
        let (from_schema, from_name) = self.split_parts(&create.from)?;
        let Some(projection) = catalog.projection(&from_schema, &from_name).cloned() else {
            let what = if catalog.relation_exists(&from_schema, &from_name) {
                "is not a projection"
            } else {
                "does not exist"
            };
            return Err(ServerError::Sqlstate {
                code: if what == "does not exist" {
                    "42P01"
                } else {
                    "42809"
                },
                message: format!(
                    "destination {name} copies a projection, and \"{}\" {what} (CREATE PROJECTION p AS SELECT ... first)",
                    create.from.join(".")
                ),
            });
        };
        if !INTO.contains(&create.into.as_str()) {
            return Err(ServerError::feature_not_supported(format!(
                "a destination INTO {} (destinations write INTO {} so far; CREATE SINK writes to the other connectors)",
                create.into,
                INTO.join(", ")
            )));
        }
        if let Some((option, _)) = create
            .options
            .iter()
            .find(|(k, _)| IMPLIED.contains(&k.as_str()))
        {
            return Err(ServerError::invalid_param(format!(
                "option \"{option}\" is not an INTO option of a destination: a destination is always an upsert by its KEY (...); on_existing goes in WITH (...)"
            )));
        }
        let mut with = BTreeMap::new();
        for (option, value) in create.with {
            if !WITH_OPTIONS.contains(&option.as_str()) {
                return Err(ServerError::invalid_param(format!(
                    "option \"{option}\" is not valid in a destination's WITH (...) (valid options: {})",
                    WITH_OPTIONS.join(", ")
                )));
            }
            if option == "on_existing" && !["error", "truncate"].contains(&value.as_str()) {
                return Err(ServerError::invalid_param(format!(
                    "on_existing = '{value}': a destination takes 'error' (refuse a target that holds rows) or 'truncate' (empty it when the destination first fills it)"
                )));
            }
            with.insert(option, value);
        }
        let columns = &projection.columns;
        let mut key: Vec<String> = Vec::new();
        for column in &create.key {
            if !columns.iter().any(|c| &c.name == column) {
                return Err(ServerError::Sqlstate {
                    code: "42703",
                    message: format!(
                        "KEY column \"{column}\" is not a column of projection {} (its columns: {})",
                        projection.qualified_name(),
                        columns
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
            if key.contains(column) {
                return Err(ServerError::invalid_param(format!(
                    "KEY names column \"{column}\" twice"
                )));
            }
            key.push(column.clone());
        }
        let connector = weir_connectors::connector(&create.into, ConnectorKind::Sink)?;
        let given: BTreeMap<String, String> = create.options.into_iter().collect();
        let super::secrets::ConnectorOptions {
            stored,
            secrets,
            resolved,
        } = self.connector_options(connector, &create.into, given, &create.secrets)?;
        let destination = DestinationDef {
            identity: (*catalog).clone().allocate_id(),
            generation: 1,
            key,
            with,
            records: vec![record(1, "created", String::new())],
            paused: false,
        };
        // The WITH options every sink takes are checked as a sink's are.
        let mut checked = resolved.clone();
        checked.extend(
            destination
                .with
                .iter()
                .filter(|(k, _)| *k != "on_existing")
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        connector
            .spec()
            .validate(&checked, weir_connectors::now_millis())?;
        let options = destination.connector_options(resolved);
        if let Some(target) = connector.sink_target(&options)
            && let Some(owner) = self.sink_writing(&target, None)
        {
            return Err(ServerError::DuplicateObject(format!(
                "a sink writing to {target} ({owner})"
            )));
        }
        let schema_ref = projection.arrow_schema();
        connector.check_sink(&schema_ref, &options, false).await?;
        let from = [&projection.schema, &projection.name]
            .iter()
            .map(|p| crate::catalog::model::quote_ident(p))
            .collect::<Vec<_>>()
            .join(".");
        let settings = self.object_settings();
        let def = SinkDef {
            id: destination.identity,
            schema,
            name,
            query: format!("SELECT * FROM {from}"),
            from: Some(from),
            columns: columns.clone(),
            reads: vec![projection.id],
            connector: create.into,
            options: stored,
            secrets,
            settings,
            destination: Some(destination),
            paused: false,
            emit_on_window_close: false,
        };
        self.write(TxnWrites {
            ddl: vec![CatalogChange::CreateSink(def)],
            tables: vec![],
        })?;
        Ok(command("CREATE DESTINATION"))
    }

    pub(super) async fn alter_destination(
        &mut self,
        name: &[String],
        action: DestinationAction,
    ) -> Result<StatementResult, ServerError> {
        let (schema, name) = self.split_parts(name)?;
        let catalog = self.snapshot().catalog.clone();
        let def = catalog
            .sink(&schema, &name)
            .filter(|d| d.destination.is_some())
            .cloned()
            .ok_or_else(|| super::streaming::undefined(StreamingKind::Destination, &name))?;
        let mut destination = def.destination.clone().expect("filtered on destinations");
        let gapped: Vec<_> = {
            let status = self.db.runtime().stream_status();
            crate::system_streaming::gapped_sources(&catalog, &status, &def.reads)
                .into_iter()
                .filter_map(|id| {
                    let source = catalog.sources.get(&id)?.clone();
                    let error = status.sources.get(&id)?.error.clone().unwrap_or_default();
                    Some((source, error))
                })
                .collect()
        };
        if destination.paused != (action == DestinationAction::Resume) {
            let refused = match action {
                DestinationAction::Resume => Some("is not paused"),
                DestinationAction::Pause => Some("is paused already"),
                DestinationAction::Repair => Some("is paused (RESUME refills it)"),
                DestinationAction::AcceptGap => None,
            };
            if let Some(state) = refused {
                return Err(ServerError::Sqlstate {
                    code: "55000",
                    message: format!("destination {} {state}", def.qualified_name()),
                });
            }
        }
        match action {
            DestinationAction::Pause => {
                // What is staged commits with the next seal: wait for it,
                // so the target is left at an epoch boundary, whole.
                self.db.flush().await?;
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                loop {
                    let settled = self
                        .db
                        .runtime()
                        .stream_status()
                        .sinks
                        .get(&def.id)
                        .is_none_or(|s| {
                            s.status != "running" || s.committed_epoch >= s.handed_epoch
                        });
                    if settled || std::time::Instant::now() > deadline {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                destination.paused = true;
                let generation = destination.generation;
                destination
                    .records
                    .push(record(generation, "paused", String::new()));
                let mut paused = (*def).clone();
                paused.destination = Some(destination);
                self.write(TxnWrites {
                    ddl: vec![CatalogChange::ReplaceSink(paused)],
                    tables: vec![],
                })?;
                self.db.runtime().drop_projection(def.id).await;
                Ok(command("ALTER DESTINATION"))
            }
            DestinationAction::Resume => {
                // The changes made while it was paused were not kept: the
                // target is refilled from the projection, as REPAIR does.
                destination.paused = false;
                destination.generation += 1;
                let generation = destination.generation;
                destination.records.push(record(
                    generation,
                    "resumed",
                    format!("refilled as generation {generation}"),
                ));
                let mut resumed = (*def).clone();
                resumed.id = (*catalog).clone().allocate_id();
                resumed.destination = Some(destination);
                self.write(TxnWrites {
                    ddl: vec![
                        CatalogChange::DropSink { id: def.id },
                        CatalogChange::CreateSink(resumed),
                    ],
                    tables: vec![],
                })?;
                Ok(command("ALTER DESTINATION"))
            }
            DestinationAction::Repair if !gapped.is_empty() => Err(ServerError::Sqlstate {
                code: "55000",
                message: format!(
                    "destination {} is blocked by a gap: source {} lost changes upstream, so its projection cannot be refilled from it; ALTER DESTINATION {} ACCEPT GAP goes on without them (or DROP SOURCE ... CASCADE and create the source and what reads it again to read the table anew)",
                    def.qualified_name(),
                    gapped[0].0.qualified_name(),
                    def.qualified_name()
                ),
            }),
            DestinationAction::AcceptGap if !gapped.is_empty() => {
                let mut changes = Vec::new();
                let mut sources = Vec::new();
                for (source, error) in &gapped {
                    let mut accepted = (**source).clone();
                    accepted.gaps_accepted += 1;
                    destination.records.push(record(
                        destination.generation,
                        "gap_accepted",
                        format!("source {}: {error}", source.qualified_name()),
                    ));
                    changes.push(CatalogChange::ReplaceSource(accepted.clone()));
                    sources.push(accepted);
                    // A table of a shared source whose slot lost changes:
                    // the shared source's gap is accepted too, once.
                    let parent_gapped = source.parent().filter(|p| {
                        !sources.iter().any(|s| s.id == *p)
                            && self
                                .db
                                .runtime()
                                .stream_status()
                                .sources
                                .get(p)
                                .is_some_and(|s| s.status == "gap")
                    });
                    if let Some(parent) = parent_gapped.and_then(|p| catalog.sources.get(&p)) {
                        let mut accepted = (**parent).clone();
                        accepted.gaps_accepted += 1;
                        changes.push(CatalogChange::ReplaceSource(accepted.clone()));
                        sources.push(accepted);
                    }
                }
                let mut replaced = (*def).clone();
                replaced.destination = Some(destination);
                changes.push(CatalogChange::ReplaceSink(replaced));
                self.write(TxnWrites {
                    ddl: changes,
                    tables: vec![],
                })?;
                // The tables of a shared source have one reader between
                // them: it restarts once.
                let mut restarted = Vec::new();
                for source in &sources {
                    let read = self.plan_context().source_to_read(source)?;
                    if !restarted.contains(&read.id) {
                        restarted.push(read.id);
                        self.db.runtime().restart_source(read).await;
                    }
                }
                Ok(command("ALTER DESTINATION"))
            }
            DestinationAction::Repair => {
                let status = self.db.runtime().stream_status();
                let error = status.sinks.get(&def.id).and_then(|s| s.error.clone());
                drop(status);
                destination.generation += 1;
                let detail = match error {
                    Some(e) => format!("generation {} failed: {e}", destination.generation - 1),
                    None => format!(
                        "generation {} refilled on request",
                        destination.generation - 1
                    ),
                };
                let generation = destination.generation;
                destination
                    .records
                    .push(record(generation, "repair", detail));
                let mut repaired = (*def).clone();
                repaired.id = (*catalog).clone().allocate_id();
                repaired.destination = Some(destination);
                // The old sink goes (its deployment and seal entry with
                // it) and a fresh one of the next generation takes its
                // place, in one catalog change.
                self.write(TxnWrites {
                    ddl: vec![
                        CatalogChange::DropSink { id: def.id },
                        CatalogChange::CreateSink(repaired),
                    ],
                    tables: vec![],
                })?;
                Ok(command("ALTER DESTINATION"))
            }
            DestinationAction::AcceptGap => Err(ServerError::Sqlstate {
                code: "55000",
                message: format!(
                    "destination {} has no gap to accept: it is {} (a gap is recorded when a source upstream loses changes; ALTER DESTINATION ... REPAIR refills it instead)",
                    def.qualified_name(),
                    super::streaming::sink_state(&self.db.runtime().stream_status(), def.id)
                ),
            }),
        }
    }

    /// The sink or destination (other than `except`) that writes `target`,
    /// as `sink name` or `destination name`.
    pub(super) fn sink_writing(
        &self,
        target: &str,
        except: Option<weir_common::ObjectId>,
    ) -> Option<String> {
        let catalog = self.snapshot().catalog.clone();
        let key = self.db.secret_key().clone();
        catalog
            .sinks
            .values()
            .filter(|s| Some(s.id) != except)
            .find(|s| {
                let Ok(connector) = weir_connectors::connector(&s.connector, ConnectorKind::Sink)
                else {
                    return false;
                };
                crate::secrets::resolve(&catalog, &key, &s.connector, &s.options, &s.secrets)
                    .ok()
                    .and_then(|o| connector.sink_target(&o))
                    .as_deref()
                    == Some(target)
            })
            .map(|s| {
                let kind = if s.destination.is_some() {
                    "destination"
                } else {
                    "sink"
                };
                format!("{kind} {}", s.qualified_name())
            })
    }
}

fn record(generation: u64, event: &str, detail: String) -> DestinationRecord {
    DestinationRecord {
        at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        generation,
        event: event.into(),
        detail,
    }
}
