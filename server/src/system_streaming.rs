//! The `weir_catalog` tables of streaming objects:
//! - `sources`: every source with its connector, status (`idle` until
//!   something reads it, `running`, `retrying`, `completed`, `failed`),
//!   rows read, offsets per split, largest event time and last error; a
//!   table of a shared source names its parent in `source`;
//! - `sinks`: every sink with its connector, status (`running`,
//!   `backing_off`, `failed`), rows handed to it, rows, epoch and
//!   connector descriptor committed, last error, retries and next retry;
//! - `destinations`: every destination with its identity (kept across
//!   repairs), generation, projection, target, key, status, the epochs it
//!   prepared and committed, its records (created, repairs, accepted
//!   gaps) and last error;
//! - `sink_offsets`: sinks and destinations alike, with what each has
//!   delivered: generation, committed epoch and rows, the connector's
//!   committed descriptor (its offsets), status, error, retries and what
//!   it skipped (`on_error = 'skip'`);
//! - `connectors`: every connector's spec (options and capabilities),
//!   also what `SHOW CONNECTORS` prints;
//! - `secrets`: every secret's name and the id of the key that sealed it
//!   (never a value), and the objects that name it;
//! - `connections`: every connection, its kind and definition (secrets
//!   as `SECRET name`), and the sources and sinks that use it.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field};
use weir_connectors::spec::OptionDefault;

use crate::db::Database;

pub const TABLES: &[&str] = &[
    "connections",
    "connectors",
    "destinations",
    "secrets",
    "sink_offsets",
    "sinks",
    "sources",
];

pub fn fields(name: &str) -> Option<Vec<Field>> {
    let utf8 = |n: &str| Field::new(n, DataType::Utf8, false);
    let opt_utf8 = |n: &str| Field::new(n, DataType::Utf8, true);
    let int8 = |n: &str| Field::new(n, DataType::Int64, false);
    let opt_int8 = |n: &str| Field::new(n, DataType::Int64, true);
    Some(match name {
        "sources" => vec![
            utf8("schema"),
            utf8("name"),
            int8("id"),
            opt_utf8("source"),
            utf8("connector"),
            utf8("status"),
            int8("rows_in"),
            int8("rows_skipped"),
            utf8("offsets"),
            opt_utf8("max_event_time"),
            opt_utf8("watermark"),
            opt_utf8("current_watermark"),
            int8("late_rows"),
            opt_utf8("error"),
            utf8("definition"),
        ],
        "sinks" => vec![
            utf8("schema"),
            utf8("name"),
            int8("id"),
            utf8("connector"),
            utf8("status"),
            int8("rows_out"),
            int8("committed_rows"),
            int8("committed_epoch"),
            opt_utf8("committed_descriptor"),
            opt_utf8("error"),
            int8("retries"),
            opt_utf8("next_retry_at"),
            utf8("definition"),
        ],
        "destinations" => vec![
            utf8("schema"),
            utf8("name"),
            int8("identity"),
            int8("sink_id"),
            int8("generation"),
            utf8("projection"),
            utf8("connector"),
            opt_utf8("target"),
            utf8("key"),
            utf8("status"),
            int8("rows_out"),
            int8("prepared_epoch"),
            int8("committed_epoch"),
            int8("committed_rows"),
            utf8("records"),
            opt_utf8("error"),
            int8("retries"),
            opt_utf8("next_retry_at"),
            utf8("definition"),
        ],
        "connectors" => vec![
            utf8("name"),
            utf8("kind"),
            utf8("options"),
            utf8("capabilities"),
            utf8("description"),
        ],
        "secrets" => vec![utf8("name"), utf8("key_id"), utf8("used_by")],
        "sink_offsets" => vec![
            utf8("schema"),
            utf8("name"),
            utf8("kind"),
            int8("generation"),
            int8("committed_epoch"),
            int8("committed_rows"),
            opt_utf8("offsets"),
            utf8("desired"),
            utf8("status"),
            opt_utf8("error"),
            int8("retries"),
            opt_utf8("next_retry_at"),
            opt_int8("skipped_epochs"),
            opt_int8("skipped_rows"),
            opt_utf8("last_skip_error"),
        ],
        "connections" => vec![
            utf8("name"),
            utf8("kind"),
            utf8("definition"),
            utf8("used_by"),
        ],
        _ => return None,
    })
}

pub fn columns(db: &Database, name: &str) -> Option<Vec<ArrayRef>> {
    let text = |v: Vec<String>| Arc::new(StringArray::from(v)) as ArrayRef;
    let opt_text = |v: Vec<Option<String>>| Arc::new(StringArray::from(v)) as ArrayRef;
    let int = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
    let snapshot = db.snapshot();
    let status = db.runtime().stream_status();
    Some(match name {
        "sources" => {
            let defs: Vec<_> = snapshot.catalog.sources.values().collect();
            let state: Vec<_> = defs
                .iter()
                .map(|d| status.sources.get(&d.id).cloned().unwrap_or_default())
                .collect();
            vec![
                text(defs.iter().map(|d| d.schema.clone()).collect()),
                text(defs.iter().map(|d| d.name.clone()).collect()),
                int(defs.iter().map(|d| d.id.0 as i64).collect()),
                opt_text(
                    defs.iter()
                        .map(|d| {
                            let parent = snapshot.catalog.sources.get(&d.parent()?)?;
                            Some(parent.qualified_name())
                        })
                        .collect(),
                ),
                text(defs.iter().map(|d| d.connector.clone()).collect()),
                text(
                    state
                        .iter()
                        .map(|s| {
                            if s.status.is_empty() {
                                "idle"
                            } else {
                                s.status
                            }
                            .to_string()
                        })
                        .collect(),
                ),
                int(state.iter().map(|s| s.rows_in as i64).collect()),
                int(state.iter().map(|s| s.rows_skipped as i64).collect()),
                text(
                    state
                        .iter()
                        .map(|s| serde_json::to_string(&s.offsets).unwrap_or_default())
                        .collect(),
                ),
                opt_text(
                    state
                        .iter()
                        .map(|s| s.max_event_time.map(format_micros))
                        .collect(),
                ),
                opt_text(
                    defs.iter()
                        .map(|d| {
                            d.watermark
                                .as_ref()
                                .map(|w| format!("{} AS {}", w.column, w.expr))
                        })
                        .collect(),
                ),
                opt_text(
                    state
                        .iter()
                        .map(|s| {
                            s.watermark.map(|w| match w {
                                i64::MAX => "final".to_string(),
                                w => format_micros(w),
                            })
                        })
                        .collect(),
                ),
                int(state.iter().map(|s| s.late_rows as i64).collect()),
                opt_text(state.iter().map(|s| s.error.clone()).collect()),
                text(
                    defs.iter()
                        .map(|d| d.create_statement(&snapshot.catalog))
                        .collect(),
                ),
            ]
        }
        "sinks" => {
            let defs: Vec<_> = snapshot
                .catalog
                .sinks
                .values()
                .filter(|d| d.destination.is_none())
                .collect();
            let state: Vec<_> = defs
                .iter()
                .map(|d| status.sinks.get(&d.id).cloned().unwrap_or_default())
                .collect();
            vec![
                text(defs.iter().map(|d| d.schema.clone()).collect()),
                text(defs.iter().map(|d| d.name.clone()).collect()),
                int(defs.iter().map(|d| d.id.0 as i64).collect()),
                text(defs.iter().map(|d| d.connector.clone()).collect()),
                text(
                    state
                        .iter()
                        .map(|s| sink_status(Some(s)).to_string())
                        .collect(),
                ),
                int(state.iter().map(|s| s.rows_out as i64).collect()),
                int(state.iter().map(|s| s.committed_rows as i64).collect()),
                int(state.iter().map(|s| s.committed_epoch as i64).collect()),
                opt_text(
                    state
                        .iter()
                        .map(|s| s.committed_descriptor.clone())
                        .collect(),
                ),
            ]
            .into_iter()
            .chain(retry_columns(&state))
            .chain([text(defs.iter().map(|d| d.create_statement()).collect())])
            .collect()
        }
        "destinations" => {
            let defs: Vec<_> = snapshot
                .catalog
                .sinks
                .values()
                .filter_map(|d| Some((d, d.destination.as_ref()?)))
                .collect();
            let state: Vec<_> = defs
                .iter()
                .map(|(d, _)| status.sinks.get(&d.id).cloned().unwrap_or_default())
                .collect();
            let target = |d: &crate::catalog::streaming::SinkDef| {
                let connector =
                    weir_connectors::connector(&d.connector, weir_connectors::ConnectorKind::Sink)
                        .ok()?;
                let options = crate::secrets::resolve(
                    &snapshot.catalog,
                    db.secret_key(),
                    &d.connector,
                    &d.options,
                    &d.secrets,
                )
                .ok()?;
                connector.sink_target(&options)
            };
            vec![
                text(defs.iter().map(|(d, _)| d.schema.clone()).collect()),
                text(defs.iter().map(|(d, _)| d.name.clone()).collect()),
                int(defs.iter().map(|(_, x)| x.identity.0 as i64).collect()),
                int(defs.iter().map(|(d, _)| d.id.0 as i64).collect()),
                int(defs.iter().map(|(_, x)| x.generation as i64).collect()),
                text(
                    defs.iter()
                        .map(|(d, _)| d.from.clone().unwrap_or_default())
                        .collect(),
                ),
                text(defs.iter().map(|(d, _)| d.connector.clone()).collect()),
                opt_text(defs.iter().map(|(d, _)| target(d)).collect()),
                text(defs.iter().map(|(_, x)| x.key.join(", ")).collect()),
                text(
                    defs.iter()
                        .map(|(d, _)| destination_status(&snapshot.catalog, &status, d).to_string())
                        .collect(),
                ),
                int(state.iter().map(|s| s.rows_out as i64).collect()),
                int(state.iter().map(|s| s.prepared_epoch as i64).collect()),
                int(state.iter().map(|s| s.committed_epoch as i64).collect()),
                int(state.iter().map(|s| s.committed_rows as i64).collect()),
                text(
                    defs.iter()
                        .map(|(_, x)| serde_json::to_string(&x.records).expect("records serialize"))
                        .collect(),
                ),
            ]
            .into_iter()
            .chain(retry_columns(&state))
            .chain([text(
                defs.iter().map(|(d, _)| d.create_statement()).collect(),
            )])
            .collect()
        }
        "connectors" => {
            let rows = connector_rows();
            (0..5)
                .map(|i| text(rows.iter().map(|r| r[i].clone()).collect()))
                .collect()
        }
        "sink_offsets" => {
            let defs: Vec<_> = snapshot.catalog.sinks.values().collect();
            let state: Vec<_> = defs
                .iter()
                .map(|d| status.sinks.get(&d.id).cloned().unwrap_or_default())
                .collect();
            vec![
                text(defs.iter().map(|d| d.schema.clone()).collect()),
                text(defs.iter().map(|d| d.name.clone()).collect()),
                text(
                    defs.iter()
                        .map(|d| {
                            if d.destination.is_some() {
                                "destination"
                            } else {
                                "sink"
                            }
                            .to_string()
                        })
                        .collect(),
                ),
                int(defs
                    .iter()
                    .map(|d| d.destination.as_ref().map_or(1, |x| x.generation) as i64)
                    .collect()),
                int(state.iter().map(|s| s.committed_epoch as i64).collect()),
                int(state.iter().map(|s| s.committed_rows as i64).collect()),
                opt_text(
                    state
                        .iter()
                        .map(|s| s.committed_descriptor.clone())
                        .collect(),
                ),
                // What the catalog asks for; `status` is what it is.
                text(
                    defs.iter()
                        .map(|d| {
                            if d.paused || d.destination.as_ref().is_some_and(|x| x.paused) {
                                "paused"
                            } else {
                                "running"
                            }
                            .to_string()
                        })
                        .collect(),
                ),
                text(
                    defs.iter()
                        .map(|d| destination_status(&snapshot.catalog, &status, d).to_string())
                        .collect(),
                ),
            ]
            .into_iter()
            .chain(retry_columns(&state))
            .chain(skip_columns(&state))
            .collect()
        }
        "secrets" => {
            let catalog = &snapshot.catalog;
            let secrets: Vec<_> = catalog.secrets.values().collect();
            vec![
                text(secrets.iter().map(|s| s.name.clone()).collect()),
                text(secrets.iter().map(|s| s.value.key_id.clone()).collect()),
                text(
                    secrets
                        .iter()
                        .map(|s| catalog.secret_users(&s.name).join(", "))
                        .collect(),
                ),
            ]
        }
        "connections" => {
            let catalog = &snapshot.catalog;
            let connections: Vec<_> = catalog.connections.values().collect();
            vec![
                text(connections.iter().map(|c| c.name.clone()).collect()),
                text(connections.iter().map(|c| c.kind.clone()).collect()),
                text(connections.iter().map(|c| c.create_statement()).collect()),
                text(
                    connections
                        .iter()
                        .map(|c| catalog.connection_users(&c.name).join(", "))
                        .collect(),
                ),
            ]
        }
        _ => return None,
    })
}

/// A source's status word: `idle` until something reads it.
pub fn source_status(state: Option<&weir_engine::runtime::streams::SourceStatus>) -> &'static str {
    match state.map(|s| s.status) {
        Some(status) if !status.is_empty() => status,
        _ => "idle",
    }
}

/// A sink's or destination's status word: a destination whose projection
/// reads (through any chain of projections) a source that lost changes
/// upstream is `blocked_by_gap`.
pub fn destination_status(
    catalog: &crate::catalog::Catalog,
    status: &weir_engine::runtime::StreamStatus,
    def: &crate::catalog::streaming::SinkDef,
) -> &'static str {
    if def.destination.as_ref().is_some_and(|d| d.paused) {
        return "paused";
    }
    let own = sink_status(status.sinks.get(&def.id));
    if def.destination.is_some()
        && own != "failed"
        && !gapped_sources(catalog, status, &def.reads).is_empty()
    {
        return "blocked_by_gap";
    }
    own
}

/// The sources read by `reads` (directly or through projections) whose
/// status is `gap`.
pub fn gapped_sources(
    catalog: &crate::catalog::Catalog,
    status: &weir_engine::runtime::StreamStatus,
    reads: &[weir_common::ObjectId],
) -> Vec<weir_common::ObjectId> {
    let mut found = Vec::new();
    let mut todo: Vec<weir_common::ObjectId> = reads.to_vec();
    let mut seen = std::collections::HashSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        if catalog.sources.contains_key(&id) {
            if status.sources.get(&id).is_some_and(|s| s.status == "gap") {
                found.push(id);
            }
        } else if let Some(p) = catalog.projections.get(&id) {
            todo.extend(p.reads.iter().copied());
        }
    }
    found.sort();
    found
}

/// A sink's status word: `starting` until its connector is open.
pub fn sink_status(state: Option<&weir_engine::runtime::streams::SinkStatus>) -> &'static str {
    match state.map(|s| s.status) {
        Some(status) if !status.is_empty() => status,
        _ => "starting",
    }
}

/// `error`, `retries`, `next_retry_at` of sinks in `state`, as the sink
/// tables show them.
fn retry_columns(state: &[weir_engine::runtime::streams::SinkStatus]) -> [ArrayRef; 3] {
    [
        Arc::new(StringArray::from(
            state.iter().map(|s| s.error.clone()).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            state.iter().map(|s| s.retries as i64).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            state.iter().map(next_retry_at).collect::<Vec<_>>(),
        )),
    ]
}

/// `skipped_epochs`, `skipped_rows` and `last_skip_error`: NULL for a
/// sink that does not skip.
fn skip_columns(state: &[weir_engine::runtime::streams::SinkStatus]) -> [ArrayRef; 3] {
    let skips = |f: fn(&weir_connectors::Skips) -> i64| {
        Arc::new(Int64Array::from(
            state
                .iter()
                .map(|s| s.skipped.as_ref().map(f))
                .collect::<Vec<_>>(),
        )) as ArrayRef
    };
    [
        skips(|s| s.epochs as i64),
        skips(|s| s.rows as i64),
        Arc::new(StringArray::from(
            state
                .iter()
                .map(|s| s.skipped.as_ref().and_then(|s| s.last_error.clone()))
                .collect::<Vec<_>>(),
        )),
    ]
}

/// When a backing-off sink tries again, as a UTC timestamp.
fn next_retry_at(state: &weir_engine::runtime::streams::SinkStatus) -> Option<String> {
    state.next_retry_ms.map(|ms| format_micros(ms * 1000))
}

fn format_micros(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.naive_utc().to_string())
        .unwrap_or_else(|| us.to_string())
}

/// One row per connector: name, kind, options, capabilities, description.
pub fn connector_rows() -> Vec<Vec<String>> {
    weir_connectors::registry()
        .iter()
        .map(|c| {
            let spec = c.spec();
            let options = spec
                .all_options()
                .map(|o| {
                    let mut s = format!("{} {}", o.name, o.ty.name());
                    if o.required {
                        s.push_str(" required");
                    }
                    match o.default {
                        OptionDefault::Value(v) => s.push_str(&format!(" default {v}")),
                        OptionDefault::CreateTime => s.push_str(" default time of CREATE"),
                        OptionDefault::None => {}
                    }
                    if o.secret {
                        s.push_str(" secret");
                    }
                    if o.tunable {
                        // ALTER ... SET changes it in place.
                        s.push_str(" tunable");
                    }
                    s.push_str(&format!(": {}", o.help));
                    s
                })
                .collect::<Vec<_>>()
                .join("; ");
            let caps = &spec.capabilities;
            let mut capabilities = Vec::new();
            if !caps.read_modes.is_empty() {
                capabilities.push(format!("read modes {}", caps.read_modes.join("/")));
            }
            if spec.kind == weir_connectors::ConnectorKind::Source {
                capabilities.push(
                    if caps.append_only {
                        "append-only"
                    } else {
                        "changes"
                    }
                    .to_string(),
                );
                if caps.replayable {
                    capabilities.push("replayable".into());
                }
            }
            capabilities.push(format!(
                "delivery {}",
                caps.delivery
                    .iter()
                    .map(|d| d.as_str())
                    .collect::<Vec<_>>()
                    .join("/")
            ));
            if caps.skips {
                capabilities.push("skips".into());
            }
            vec![
                spec.name.to_string(),
                spec.kind.as_str().to_string(),
                options,
                capabilities.join(", "),
                spec.help.to_string(),
            ]
        })
        .collect()
}
