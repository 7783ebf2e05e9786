//! `weir_catalog`: Weir's own system tables.
//!
//! Each table is computed from the database when a query reads it:
//! - `tables`: every table with its key, column count and row count.
//! - `backends`: each backend with resource, generation, capabilities and
//!   readiness (ARCHITECTURE.md §7, "Readiness").
//! - `sessions`: the open connections.
//! - `projections`: every projection with its query, status, the last epoch
//!   it applied and its row count at the latest epoch.
//! - `epochs`: the retained seals of the state backend (epoch, kind, when,
//!   committer, generation, bytes written; the duration for seals this
//!   process wrote).
//! - `checkpoints`: per projection and vnode holding state of it, its chain
//!   there (snapshot epoch, deltas, bytes, last epoch written) as this
//!   process checkpointed it, with the latest seal naming the projection
//!   and its state fingerprint.
//! - `vnodes`: per vnode, its chain at the latest seal (snapshot epoch,
//!   deltas, bytes).
//! - `operator_state`: per projection operator that keeps state, its live
//!   entries and bytes (not the projection's own rows), walked when read.
//! - `sources`, `sinks`, `connectors`: see [`crate::system_streaming`].

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;
use weir_storage::StateBackend as _;

use weir_engine::runtime::checkpoints::ObjectChain;

use crate::db::Database;

const TABLES: &[&str] = &[
    "backends",
    "checkpoints",
    "epochs",
    "operator_state",
    "projections",
    "sessions",
    "tables",
    "vnodes",
];

#[derive(Debug)]
pub struct SystemSchema {
    db: Arc<Database>,
}

impl SystemSchema {
    pub fn new(db: Arc<Database>) -> Self {
        Self { db }
    }

    pub fn table_names_sorted(&self) -> Vec<String> {
        let mut names: Vec<String> = TABLES
            .iter()
            .chain(crate::system_streaming::TABLES)
            .map(|s| s.to_string())
            .collect();
        names.sort();
        names
    }

    pub fn table_schema(&self, name: &str) -> Option<SchemaRef> {
        let utf8 = |n: &str| Field::new(n, DataType::Utf8, false);
        let int8 = |n: &str| Field::new(n, DataType::Int64, false);
        let fields = match name {
            "tables" => vec![
                utf8("schema"),
                utf8("name"),
                int8("id"),
                utf8("primary_key"),
                int8("columns"),
                int8("rows"),
                utf8("definition"),
            ],
            "backends" => vec![
                utf8("resource"),
                int8("generation"),
                utf8("capabilities"),
                utf8("readiness"),
            ],
            "sessions" => vec![int8("backends")],
            "epochs" => vec![
                int8("epoch"),
                utf8("kind"),
                Field::new(
                    "sealed_at",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    false,
                ),
                utf8("committer"),
                int8("generation"),
                int8("bytes_written"),
                Field::new("duration_ms", DataType::Float64, true),
                utf8("table_log_lsn"),
            ],
            "checkpoints" => vec![
                utf8("schema"),
                utf8("name"),
                int8("id"),
                int8("vnode"),
                int8("snapshot_epoch"),
                int8("deltas"),
                int8("snapshot_bytes"),
                int8("delta_bytes"),
                int8("last_written_epoch"),
                Field::new("sealed_epoch", DataType::Int64, true),
                Field::new("fingerprint", DataType::Utf8, true),
            ],
            "vnodes" => vec![
                int8("vnode"),
                int8("sealed_epoch"),
                Field::new("snapshot_epoch", DataType::Int64, true),
                int8("deltas"),
                int8("snapshot_bytes"),
                int8("delta_bytes"),
            ],
            "operator_state" => vec![
                utf8("schema"),
                utf8("projection"),
                int8("id"),
                int8("node"),
                utf8("operator"),
                int8("entries"),
                int8("bytes"),
            ],
            "projections" => vec![
                utf8("schema"),
                utf8("name"),
                int8("id"),
                utf8("definition"),
                utf8("status"),
                int8("last_epoch"),
                int8("rows"),
                int8("rows_in"),
                int8("rows_out"),
                int8("late_rows"),
            ],
            other => crate::system_streaming::fields(other)?,
        };
        Some(Arc::new(Schema::new(fields)))
    }

    async fn build(&self, name: &str) -> DfResult<Option<RecordBatch>> {
        let Some(schema) = self.table_schema(name) else {
            return Ok(None);
        };
        let text = |v: Vec<String>| Arc::new(StringArray::from(v)) as ArrayRef;
        let int = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let columns: Vec<ArrayRef> = match name {
            "tables" => {
                let snapshot = self.db.snapshot();
                let defs: Vec<_> = snapshot.catalog.tables.values().collect();
                vec![
                    text(defs.iter().map(|d| d.schema.clone()).collect()),
                    text(defs.iter().map(|d| d.name.clone()).collect()),
                    int(defs.iter().map(|d| d.id.0 as i64).collect()),
                    text(defs.iter().map(|d| d.primary_key.join(", ")).collect()),
                    int(defs.iter().map(|d| d.columns.len() as i64).collect()),
                    int(defs
                        .iter()
                        .map(|d| snapshot.tables.get(&d.id).map_or(0, |s| s.len() as i64))
                        .collect()),
                    text(
                        defs.iter()
                            .map(|d| d.create_statement(&snapshot.catalog))
                            .collect(),
                    ),
                ]
            }
            "backends" => {
                // The catalog and the table log are replayed before the
                // listeners open; projections are restored after.
                let state_readiness = if self.db.runtime().fenced().is_some() {
                    "fenced"
                } else if self.db.is_recovered() {
                    "ready"
                } else {
                    "restoring"
                };
                let data_dir = self.db.config().data_dir.display().to_string();
                vec![
                    text(vec![
                        format!("catalog:file://{data_dir}/catalog"),
                        format!("table-log:file://{data_dir}/tablelog"),
                        format!("state:{}", self.db.config().state_url()),
                    ]),
                    int(vec![1, 1, self.db.state().generation() as i64]),
                    text(vec![
                        "create-only-append,expected-revision".into(),
                        "group-commit,fsync".into(),
                        "per-vnode-partials,create-only-seals,generation-fence".into(),
                    ]),
                    text(vec!["ready".into(), "ready".into(), state_readiness.into()]),
                ]
            }
            "sessions" => vec![int(vec![self.db.backend_count() as i64])],
            "projections" => {
                let snapshot = self.db.snapshot();
                let defs: Vec<_> = snapshot.catalog.projections.values().collect();
                let view = |id| snapshot.projections.projections.get(id);
                let stat = |f: &dyn Fn(&weir_engine::ProjectionView) -> u64| {
                    int(defs
                        .iter()
                        .map(|d| view(&d.id).map_or(0, |v| f(v) as i64))
                        .collect())
                };
                vec![
                    text(defs.iter().map(|d| d.schema.clone()).collect()),
                    text(defs.iter().map(|d| d.name.clone()).collect()),
                    int(defs.iter().map(|d| d.id.0 as i64).collect()),
                    text(defs.iter().map(|d| d.create_statement()).collect()),
                    text(
                        defs.iter()
                            .map(|d| snapshot.projection_status(d.id))
                            .collect(),
                    ),
                    stat(&|v| v.last_epoch.0),
                    stat(&|v| v.result.row_count()),
                    stat(&|v| v.rows_in),
                    stat(&|v| v.rows_out),
                    stat(&|v| v.late_rows),
                ]
            }
            "epochs" => self.epochs().await?,
            "checkpoints" => self.checkpoints().await?,
            "vnodes" => self.vnodes().await?,
            "operator_state" => self.operator_state().await?,
            other => match crate::system_streaming::columns(&self.db, other) {
                Some(columns) => columns,
                None => return Ok(None),
            },
        };
        Ok(Some(RecordBatch::try_new(schema, columns)?))
    }

    /// Each projection operator's live state: entries and bytes, walked
    /// when asked (the projection's own rows are not in it).
    async fn operator_state(&self) -> DfResult<Vec<ArrayRef>> {
        let states = self
            .db
            .runtime()
            .operator_state()
            .await
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let snapshot = self.db.snapshot();
        // A sink's query (`CREATE SINK ... AS`) is a graph too.
        let named = |id: &weir_common::ObjectId| -> (String, String) {
            if let Some(d) = snapshot.catalog.projections.get(id) {
                (d.schema.clone(), d.name.clone())
            } else if let Some(d) = snapshot.catalog.sinks.get(id) {
                (d.schema.clone(), d.name.clone())
            } else {
                (String::new(), String::new())
            }
        };
        Ok(vec![
            Arc::new(StringArray::from_iter_values(
                states.iter().map(|(id, _)| named(id).0),
            )),
            Arc::new(StringArray::from_iter_values(
                states.iter().map(|(id, _)| named(id).1),
            )),
            Arc::new(Int64Array::from_iter_values(
                states.iter().map(|(id, _)| id.0 as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                states.iter().map(|(_, n)| i64::from(n.node)),
            )),
            Arc::new(StringArray::from_iter_values(
                states.iter().map(|(_, n)| n.operator),
            )),
            Arc::new(Int64Array::from_iter_values(
                states.iter().map(|(_, n)| n.entries as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                states.iter().map(|(_, n)| n.bytes as i64),
            )),
        ])
    }

    async fn epochs(&self) -> DfResult<Vec<ArrayRef>> {
        let seals = self.db.state().list_seals().await.map_err(external)?;
        let log = self.db.runtime().checkpoint_log();
        Ok(vec![
            Arc::new(Int64Array::from_iter_values(
                seals.iter().map(|m| m.epoch as i64),
            )),
            Arc::new(StringArray::from_iter_values(
                seals.iter().map(|m| format!("{:?}", m.kind).to_lowercase()),
            )),
            Arc::new(
                TimestampMillisecondArray::from_iter_values(
                    seals.iter().map(|m| m.sealed_at_ms as i64),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from_iter_values(
                seals.iter().map(|m| m.committer.clone()),
            )),
            Arc::new(Int64Array::from_iter_values(
                seals.iter().map(|m| m.generation as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                seals.iter().map(|m| m.bytes_written as i64),
            )),
            Arc::new(Float64Array::from_iter(seals.iter().map(|m| {
                log.durations
                    .get(&m.epoch)
                    .map(|d| d.as_secs_f64() * 1000.0)
            }))),
            Arc::new(StringArray::from_iter_values(seals.iter().map(|m| {
                m.source_offsets
                    .get(weir_engine::runtime::checkpoints::TABLE_LOG_OFFSET)
                    .cloned()
                    .unwrap_or_default()
            }))),
        ])
    }

    /// One row per (projection or sink, vnode) holding state of it, as this
    /// process checkpointed it (its first checkpoint snapshots every vnode).
    async fn checkpoints(&self) -> DfResult<Vec<ArrayRef>> {
        let latest = self.latest_seal().await?;
        let snapshot = self.db.snapshot();
        let log = self.db.runtime().checkpoint_log();
        // Projections and sinks (a sink's graph keeps state too).
        let owner = |id: &weir_common::ObjectId| -> Option<Owner> {
            let catalog = &snapshot.catalog;
            match (catalog.projections.get(id), catalog.sinks.get(id)) {
                (Some(p), _) => Some(Owner {
                    id: p.id,
                    schema: p.schema.clone(),
                    name: p.name.clone(),
                }),
                (None, Some(s)) => Some(Owner {
                    id: s.id,
                    schema: s.schema.clone(),
                    name: s.name.clone(),
                }),
                (None, None) => None,
            }
        };
        let mut rows: Vec<(Owner, u32, ObjectChain)> = log
            .chains
            .iter()
            .filter_map(|((id, vnode), chain)| Some((owner(id)?, *vnode, chain.clone())))
            .collect();
        rows.sort_by_key(|(def, vnode, _)| (def.id, *vnode));
        let fingerprint = |id| {
            latest.as_ref().and_then(|m| {
                m.source_offsets
                    .get(&weir_engine::runtime::checkpoints::projection_key(id))
                    .cloned()
            })
        };
        let int = |f: &dyn Fn(&ObjectChain) -> u64| {
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|(_, _, c)| f(c) as i64),
            )) as ArrayRef
        };
        Ok(vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(d, _, _)| d.schema.clone()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(d, _, _)| d.name.clone()),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|(d, _, _)| d.id.0 as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|(_, v, _)| *v as i64),
            )),
            int(&|c| c.snapshot_epoch),
            int(&|c| c.deltas as u64),
            int(&|c| c.snapshot_bytes),
            int(&|c| c.delta_bytes),
            int(&|c| c.last_written_epoch),
            Arc::new(Int64Array::from_iter(rows.iter().map(|(d, _, _)| {
                fingerprint(d.id).and(latest.as_ref().map(|m| m.epoch as i64))
            }))),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|(d, _, _)| fingerprint(d.id)),
            )),
        ])
    }

    async fn vnodes(&self) -> DfResult<Vec<ArrayRef>> {
        let latest = self.latest_seal().await?;
        let mut rows: Vec<(u32, u64, Option<u64>, u64, u64, u64)> = Vec::new();
        if let Some(seal) = &latest {
            for (vnode, chain) in &seal.vnodes {
                let mut row = (*vnode, seal.epoch, None, 0, 0, 0);
                for entry in chain {
                    match entry.kind {
                        weir_storage::PartialKind::Snapshot => {
                            row.2 = Some(entry.epoch);
                            row.4 += entry.len;
                        }
                        weir_storage::PartialKind::Delta => {
                            row.3 += 1;
                            row.5 += entry.len;
                        }
                    }
                }
                rows.push(row);
            }
        }
        let int = |f: &dyn Fn(&(u32, u64, Option<u64>, u64, u64, u64)) -> u64| {
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| f(r) as i64),
            )) as ArrayRef
        };
        Ok(vec![
            int(&|r| r.0 as u64),
            int(&|r| r.1),
            Arc::new(Int64Array::from_iter(
                rows.iter().map(|r| r.2.map(|e| e as i64)),
            )),
            int(&|r| r.3),
            int(&|r| r.4),
            int(&|r| r.5),
        ])
    }

    async fn latest_seal(&self) -> DfResult<Option<Arc<weir_storage::SealManifest>>> {
        let state = self.db.state();
        let Some(epoch) = state.latest_committed_epoch().await.map_err(external)? else {
            return Ok(None);
        };
        state.read_seal(epoch).await.map_err(external)
    }
}

/// The object a checkpoint chain belongs to.
struct Owner {
    id: weir_common::ObjectId,
    schema: String,
    name: String,
}

fn external(e: weir_storage::StateBackendError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(e))
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        self.table_names_sorted()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(batch) = self.build(name).await? else {
            return Ok(None);
        };
        Ok(Some(Arc::new(MemTable::try_new(
            batch.schema(),
            vec![vec![batch]],
        )?)))
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.contains(&name) || crate::system_streaming::TABLES.contains(&name)
    }
}
