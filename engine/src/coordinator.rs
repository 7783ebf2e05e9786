//! [`Coordinator`]: the single owner of every deployed projection.
//!
//! Table changes arrive between barriers and wait in `pending`. A barrier
//! ([`Coordinator::run_epoch`]) consolidates each table's pending change and
//! steps every projection's graph once, in deployment order, so a projection
//! that reads another sees that projection's change of the same epoch. The
//! result of the epoch is an [`EpochView`]: every projection's result at
//! that epoch, an immutable value readers share.
//!
//! Invariants the owner relies on:
//! - deployment order is a topological order: a projection is deployed after
//!   the projections it reads (the catalog cannot express anything else);
//! - [`Coordinator::deploy`] runs with nothing pending, so the backfill (the
//!   full contents of its inputs) and the changes after it meet exactly;
//! - a projection whose step fails keeps its last result and is marked
//!   failed, and so is everything reading it; other projections go on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Epoch, ObjectId};

use crate::EngineError;
use crate::graph::{Graph, NodeStep};
use crate::materialized::Materialized;
use crate::rows::{concat_changes, consolidate, empty_change};

/// A source of a projection: what it reads and in which columns.
#[derive(Debug, Clone)]
pub struct SourceBinding {
    pub object: ObjectId,
    pub schema: SchemaRef,
}

/// What readers see of one projection at one epoch.
#[derive(Debug, Clone)]
pub struct ProjectionView {
    pub result: Materialized,
    /// Why the projection stopped, if it did.
    pub failure: Option<String>,
    /// The last epoch whose change this projection has applied.
    pub last_epoch: Epoch,
    pub rows_in: u64,
    pub rows_out: u64,
}

/// Every projection's result at one epoch.
#[derive(Debug, Clone, Default)]
pub struct EpochView {
    pub epoch: Epoch,
    pub projections: HashMap<ObjectId, ProjectionView>,
}

/// What one epoch did, for metrics.
#[derive(Debug, Clone, Default)]
pub struct EpochReport {
    pub epoch: Epoch,
    pub rows_in: u64,
    pub rows_out: u64,
    pub duration: Duration,
    /// Projections that failed in this epoch, with the error.
    pub failed: Vec<(ObjectId, String)>,
    /// Per projection that stepped: each node's rows in and out.
    pub operators: Vec<(ObjectId, Vec<NodeStep>)>,
}

struct Deployed {
    id: ObjectId,
    graph: Graph,
    sources: Vec<SourceBinding>,
}

pub struct Coordinator {
    epoch: Epoch,
    pending: HashMap<ObjectId, Vec<ChangeBatch>>,
    pending_rows: usize,
    deployed: Vec<Deployed>,
    view: Arc<EpochView>,
}

impl Default for Coordinator {
    fn default() -> Self {
        Self::new()
    }
}

impl Coordinator {
    pub fn new() -> Self {
        Self {
            epoch: Epoch(0),
            pending: HashMap::new(),
            pending_rows: 0,
            deployed: Vec::new(),
            view: Arc::new(EpochView::default()),
        }
    }

    /// The latest completed epoch's results.
    pub fn view(&self) -> Arc<EpochView> {
        self.view.clone()
    }

    /// Rows waiting for the next barrier.
    pub fn pending_rows(&self) -> usize {
        self.pending_rows
    }

    /// Whether any projection reads `object`; changes of other tables need
    /// not be kept.
    pub fn is_read(&self, object: ObjectId) -> bool {
        self.deployed
            .iter()
            .any(|d| d.sources.iter().any(|s| s.object == object))
    }

    /// Queues a table's change (in the columns projections read) for the
    /// next epoch.
    pub fn push(&mut self, table: ObjectId, change: ChangeBatch) {
        if change.is_empty() || !self.is_read(table) {
            return;
        }
        self.pending_rows += change.num_rows();
        self.pending.entry(table).or_default().push(change);
    }

    /// Closes the current epoch: steps every projection with its inputs'
    /// consolidated changes and publishes the new view.
    pub fn run_epoch(&mut self) -> Result<EpochReport, EngineError> {
        let started = Instant::now();
        let epoch = Epoch(self.epoch.0 + 1);
        let mut tables: HashMap<ObjectId, ChangeBatch> = HashMap::new();
        for (table, changes) in std::mem::take(&mut self.pending) {
            let schema = changes[0].schema();
            tables.insert(table, consolidate(&concat_changes(&schema, &changes)?)?);
        }
        self.pending_rows = 0;

        let mut view = (*self.view).clone();
        view.epoch = epoch;
        let mut report = EpochReport {
            epoch,
            ..Default::default()
        };
        let mut outputs: HashMap<ObjectId, ChangeBatch> = HashMap::new();
        for deployed in &mut self.deployed {
            let projection = view
                .projections
                .get_mut(&deployed.id)
                .expect("every deployed projection has a view");
            if projection.failure.is_some() {
                continue;
            }
            let mut upstream_failure = None;
            let inputs: Vec<ChangeBatch> = deployed
                .sources
                .iter()
                .map(|s| {
                    if let Some(failed) = report.failed.iter().find(|(id, _)| *id == s.object) {
                        upstream_failure = Some(failed.1.clone());
                    }
                    tables
                        .get(&s.object)
                        .or_else(|| outputs.get(&s.object))
                        .cloned()
                        .unwrap_or_else(|| empty_change(&s.schema))
                })
                .collect();
            let rows_in: u64 = inputs.iter().map(|c| c.num_rows() as u64).sum();
            let stepped = match upstream_failure {
                Some(e) => Err(format!("a projection it reads failed: {e}")),
                // Operators are functions of their input change: no change
                // in, no change out (constants emitted theirs at deploy).
                None if rows_in == 0 => {
                    projection.last_epoch = epoch;
                    continue;
                }
                None => deployed.graph.step(&inputs).map_err(|e| e.to_string()),
            };
            let applied = stepped.and_then(|out| {
                let mut result = projection.result.clone();
                result.apply(&out).map_err(|e| e.to_string())?;
                Ok((out, result))
            });
            match applied {
                Ok((out, result)) => {
                    projection.result = result;
                    projection.last_epoch = epoch;
                    projection.rows_in += rows_in;
                    projection.rows_out += out.num_rows() as u64;
                    report.rows_in += rows_in;
                    report.rows_out += out.num_rows() as u64;
                    report
                        .operators
                        .push((deployed.id, deployed.graph.last_step().to_vec()));
                    outputs.insert(deployed.id, out);
                }
                Err(e) => {
                    projection.failure = Some(e.clone());
                    report.failed.push((deployed.id, e));
                }
            }
        }
        self.epoch = epoch;
        self.view = Arc::new(view);
        report.duration = started.elapsed();
        Ok(report)
    }

    /// Starts maintaining a projection: steps `graph` once with the full
    /// contents of its sources (tables from `table_contents`, projections
    /// from their current result) and publishes the result at the current
    /// epoch. Call it with nothing pending (right after [`Self::run_epoch`]).
    pub fn deploy(
        &mut self,
        id: ObjectId,
        mut graph: Graph,
        sources: Vec<SourceBinding>,
        output_schema: SchemaRef,
        table_contents: &dyn Fn(ObjectId) -> Result<Option<ChangeBatch>, EngineError>,
    ) -> Result<(), EngineError> {
        if self.pending_rows > 0 {
            return Err(EngineError::Invariant {
                operator: "coordinator",
                message: "deploy with changes pending".into(),
            });
        }
        let mut backfill = Vec::with_capacity(sources.len());
        for source in &sources {
            let contents = match self.view.projections.get(&source.object) {
                Some(upstream) => match &upstream.failure {
                    Some(e) => {
                        return Err(EngineError::Invariant {
                            operator: "coordinator",
                            message: format!("it reads a failed projection: {e}"),
                        });
                    }
                    None => upstream.result.as_inserts()?,
                },
                None => table_contents(source.object)?
                    .unwrap_or_else(|| empty_change(&source.schema)),
            };
            backfill.push(contents);
        }
        let out = graph.step(&backfill)?;
        let mut result = Materialized::new(output_schema)?;
        result.apply(&out)?;
        let rows_in = backfill.iter().map(|c| c.num_rows() as u64).sum();
        let mut view = (*self.view).clone();
        view.projections.insert(
            id,
            ProjectionView {
                result,
                failure: None,
                last_epoch: self.epoch,
                rows_in,
                rows_out: out.num_rows() as u64,
            },
        );
        self.view = Arc::new(view);
        self.deployed.push(Deployed { id, graph, sources });
        Ok(())
    }

    /// Stops maintaining a projection and forgets its result.
    pub fn drop_projection(&mut self, id: ObjectId) {
        self.deployed.retain(|d| d.id != id);
        let mut view = (*self.view).clone();
        view.projections.remove(&id);
        self.view = Arc::new(view);
        let read: Vec<ObjectId> = self.pending.keys().copied().collect();
        for table in read {
            if !self.is_read(table)
                && let Some(dropped) = self.pending.remove(&table)
            {
                self.pending_rows -= dropped.iter().map(ChangeBatch::num_rows).sum::<usize>();
            }
        }
    }
}
