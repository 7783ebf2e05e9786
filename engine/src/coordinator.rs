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
//!
//! Checkpoints and restore of the projections' state are in
//! [`crate::checkpoint`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Epoch, ObjectId};

use crate::EngineError;
use crate::graph::{Graph, NodeStep};
use crate::materialized::Materialized;
use crate::rows::{concat_changes, conform_by_name, empty_change, settle};
use crate::watermark::Watermarks;

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
    /// Input rows its operators dropped as late (behind a watermark),
    /// since this process started.
    pub late_rows: u64,
}

/// Every projection's result at one epoch.
#[derive(Debug, Clone, Default)]
pub struct EpochView {
    pub epoch: Epoch,
    /// The epoch's time: what `now()` was for its temporal filters
    /// (microseconds since the Unix epoch, UTC).
    pub time: i64,
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
    /// The epoch's output change of every emitting deployment (a sink's
    /// graph) that produced one; see [`Coordinator::deploy_emitting`].
    pub emitted: Vec<(ObjectId, ChangeBatch)>,
}

pub(crate) struct Deployed {
    pub(crate) id: ObjectId,
    pub(crate) graph: Graph,
    pub(crate) sources: Vec<SourceBinding>,
    /// The result being restored from a checkpoint
    /// ([`crate::checkpoint`]); the projection has no view until it is done.
    pub(crate) restoring: Option<Materialized>,
    /// Whether its output leaves each epoch (a sink) instead of being kept
    /// as its result: its result stays empty.
    pub(crate) emitting: bool,
    /// Its inputs' watermarks at its last step: a step is due when they
    /// move, even without rows (windows close on time alone).
    pub(crate) input_watermarks: Vec<Watermarks>,
}

pub struct Coordinator {
    pub(crate) epoch: Epoch,
    pending: HashMap<ObjectId, Vec<ChangeBatch>>,
    pub(crate) pending_rows: usize,
    pub(crate) deployed: Vec<Deployed>,
    pub(crate) view: Arc<EpochView>,
    /// What each sink has not delivered, checkpointed with the state.
    pub(crate) outboxes: crate::outbox::Outboxes,
    /// The watermarks of every relation that has them: sources' as the
    /// runtime sets them ([`Self::set_watermarks`]), projections' as
    /// their graphs derive them each epoch.
    watermarks: HashMap<ObjectId, Watermarks>,
    /// The next epoch's time ([`Self::set_time`]); the wall clock if never set.
    time: Option<i64>,
}

/// The wall clock, in microseconds since the Unix epoch.
pub fn wall_clock_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros().min(i64::MAX as u128) as i64)
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
            outboxes: Default::default(),
            watermarks: HashMap::new(),
            time: None,
        }
    }

    /// Sets the time of the next epoch (and deploy): what `now()` is for
    /// temporal filters. Never moves back: an earlier time is ignored. The
    /// runtime sets the wall clock; tests inject their own.
    pub fn set_time(&mut self, now: i64) {
        self.time = Some(self.time.map_or(now, |t| t.max(now)));
    }

    fn now(&self) -> i64 {
        self.time.unwrap_or_else(wall_clock_micros)
    }

    /// Every live projection's operator state, node by node
    /// ([`Graph::state_sizes`]; O(state)).
    pub fn operator_state(&self) -> Result<Vec<(ObjectId, crate::graph::NodeState)>, EngineError> {
        let mut out = Vec::new();
        for deployed in &self.deployed {
            let live = self
                .view
                .projections
                .get(&deployed.id)
                .is_some_and(|p| p.failure.is_none());
            if live && deployed.restoring.is_none() {
                for node in deployed.graph.state_sizes()? {
                    out.push((deployed.id, node));
                }
            }
        }
        Ok(out)
    }

    /// The earliest time at which a projection's result changes with no
    /// input (a temporal filter's row appearing or expiring): an epoch
    /// should close then even if nothing else happened.
    pub fn next_due(&self) -> Option<i64> {
        self.deployed
            .iter()
            .filter(|d| {
                self.view
                    .projections
                    .get(&d.id)
                    .is_some_and(|p| p.failure.is_none())
            })
            .filter_map(|d| d.graph.next_due())
            .min()
    }

    /// Numbers the next epoch after `epoch`: epochs up to it were taken by
    /// earlier runs (their seals are in the state store).
    pub fn resume_after(&mut self, epoch: Epoch) {
        if self.epoch.0 < epoch.0 {
            self.epoch = epoch;
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

    /// Sets a source relation's watermarks for the next epoch (in its
    /// columns): what the rows pushed so far allow.
    pub fn set_watermarks(&mut self, relation: ObjectId, watermarks: Watermarks) {
        self.watermarks.insert(relation, watermarks);
    }

    /// A relation's watermarks as of the latest epoch.
    pub fn watermarks(&self, relation: ObjectId) -> Option<&Watermarks> {
        self.watermarks.get(&relation)
    }

    /// Closes the current epoch: steps every projection with its inputs'
    /// settled changes ([`settle`]) and publishes the new view.
    pub fn run_epoch(&mut self) -> Result<EpochReport, EngineError> {
        self.refuse_while_restoring("run an epoch")?;
        let started = Instant::now();
        let epoch = Epoch(self.epoch.0 + 1);
        let mut tables: HashMap<ObjectId, ChangeBatch> = HashMap::new();
        // Changes of a table whose columns changed during the epoch (ALTER
        // TABLE): concatenated per reader, in the columns it reads.
        let mut relaid: HashMap<ObjectId, Vec<ChangeBatch>> = HashMap::new();
        for (table, changes) in std::mem::take(&mut self.pending) {
            let schema = changes[0].schema();
            if changes.iter().all(|c| c.schema() == schema) {
                tables.insert(table, settle(concat_changes(&schema, &changes)?)?);
            } else {
                relaid.insert(table, changes);
            }
        }
        self.pending_rows = 0;

        let now = self.now();
        let mut view = (*self.view).clone();
        view.epoch = epoch;
        view.time = now;
        let mut report = EpochReport {
            epoch,
            ..Default::default()
        };
        let mut outputs: HashMap<ObjectId, ChangeBatch> = HashMap::new();
        for deployed in &mut self.deployed {
            if view.projections[&deployed.id].failure.is_some() {
                continue;
            }
            // A projection whose input failed (in this epoch or before)
            // cannot be kept equal to its query either.
            let upstream_failure = deployed.sources.iter().find_map(|s| {
                view.projections
                    .get(&s.object)
                    .and_then(|upstream| upstream.failure.clone())
            });
            let inputs: Vec<ChangeBatch> = deployed
                .sources
                .iter()
                .map(|s| {
                    if let Some(changes) = relaid.get(&s.object) {
                        let changes: Vec<&ChangeBatch> = changes.iter().collect();
                        return settle(conform_by_name(&changes, &s.schema)?);
                    }
                    match tables.get(&s.object).or_else(|| outputs.get(&s.object)) {
                        Some(change) if change.schema() != s.schema => {
                            conform_by_name(&[change], &s.schema)
                        }
                        Some(change) => Ok(change.clone()),
                        None => Ok(empty_change(&s.schema)),
                    }
                })
                .collect::<Result<_, EngineError>>()?;
            let projection = view
                .projections
                .get_mut(&deployed.id)
                .expect("every deployed projection has a view");
            let rows_in: u64 = inputs.iter().map(|c| c.num_rows() as u64).sum();
            let marks: Vec<Watermarks> = deployed
                .sources
                .iter()
                .map(|s| self.watermarks.get(&s.object).cloned().unwrap_or_default())
                .collect();
            let moved = marks.iter().enumerate().any(|(i, now)| {
                now.advanced_from(
                    &deployed
                        .input_watermarks
                        .get(i)
                        .cloned()
                        .unwrap_or_default(),
                )
            });
            let due = deployed.graph.next_due().is_some_and(|t| t <= now);
            deployed.graph.advance_time(now);
            let stepped = match upstream_failure {
                Some(e) => Err(format!("a projection it reads failed: {e}")),
                // Operators are functions of their input change, their
                // watermarks and (temporal filters) the time: none moved,
                // nothing out (constants emitted theirs at deploy).
                None if rows_in == 0 && !moved && !due => {
                    projection.last_epoch = epoch;
                    continue;
                }
                None => deployed
                    .graph
                    .step_at(&inputs, &marks)
                    .map_err(|e| e.to_string()),
            };
            deployed.input_watermarks = marks;
            let emitting = deployed.emitting;
            let applied = stepped.and_then(|out| {
                let mut result = projection.result.clone();
                if !emitting {
                    result.apply(&out).map_err(|e| e.to_string())?;
                }
                Ok((out, result))
            });
            match applied {
                Ok((out, result)) => {
                    projection.result = result;
                    projection.last_epoch = epoch;
                    projection.rows_in += rows_in;
                    projection.rows_out += out.num_rows() as u64;
                    projection.late_rows += deployed
                        .graph
                        .last_step()
                        .iter()
                        .map(|n| n.late_rows)
                        .sum::<u64>();
                    report.rows_in += rows_in;
                    report.rows_out += out.num_rows() as u64;
                    report
                        .operators
                        .push((deployed.id, deployed.graph.last_step().to_vec()));
                    let out_marks = deployed.graph.output_watermarks();
                    if !out_marks.is_empty() {
                        self.watermarks.insert(deployed.id, out_marks);
                    }
                    if emitting {
                        if !out.is_empty() {
                            report.emitted.push((deployed.id, out));
                        }
                    } else {
                        outputs.insert(deployed.id, out);
                    }
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
        graph: Graph,
        sources: Vec<SourceBinding>,
        output_schema: SchemaRef,
        table_contents: &dyn Fn(ObjectId) -> Result<Option<ChangeBatch>, EngineError>,
    ) -> Result<(), EngineError> {
        self.deploy_as(id, graph, sources, output_schema, table_contents, false)
            .map(drop)
    }

    /// Like [`Self::deploy`], for a graph whose output leaves the engine (a
    /// sink): no result is kept; the backfill's output is returned, and
    /// each epoch's output is in [`EpochReport::emitted`].
    pub fn deploy_emitting(
        &mut self,
        id: ObjectId,
        graph: Graph,
        sources: Vec<SourceBinding>,
        output_schema: SchemaRef,
        table_contents: &dyn Fn(ObjectId) -> Result<Option<ChangeBatch>, EngineError>,
    ) -> Result<ChangeBatch, EngineError> {
        self.deploy_as(id, graph, sources, output_schema, table_contents, true)
    }

    fn deploy_as(
        &mut self,
        id: ObjectId,
        mut graph: Graph,
        sources: Vec<SourceBinding>,
        output_schema: SchemaRef,
        table_contents: &dyn Fn(ObjectId) -> Result<Option<ChangeBatch>, EngineError>,
        emitting: bool,
    ) -> Result<ChangeBatch, EngineError> {
        if self.pending_rows > 0 {
            return Err(EngineError::Invariant {
                operator: "coordinator",
                message: "deploy with changes pending".into(),
            });
        }
        graph.place(id)?;
        let mut backfill = Vec::with_capacity(sources.len());
        for source in &sources {
            if self
                .deployed
                .iter()
                .any(|d| d.id == source.object && d.restoring.is_some())
            {
                return Err(EngineError::Invariant {
                    operator: "coordinator",
                    message: format!("it reads {}, which is being restored", source.object),
                });
            }
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
                None => {
                    table_contents(source.object)?.unwrap_or_else(|| empty_change(&source.schema))
                }
            };
            backfill.push(contents);
        }
        // With the watermarks its inputs have now: what they have closed
        // is closed for it from the start (the backfill is never late).
        let marks: Vec<Watermarks> = sources
            .iter()
            .map(|s| self.watermarks.get(&s.object).cloned().unwrap_or_default())
            .collect();
        let now = self.now();
        graph.advance_time(now);
        let out = graph.step_at(&backfill, &marks)?;
        let mut result = Materialized::new(output_schema)?;
        if !emitting {
            result.apply(&out)?;
        }
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
                late_rows: 0,
            },
        );
        self.view = Arc::new(view);
        self.deployed.push(Deployed {
            id,
            graph,
            sources,
            restoring: None,
            emitting,
            input_watermarks: marks,
        });
        Ok(out)
    }

    /// Publishes a projection that cannot be maintained as failed with
    /// `reason`, with an empty result and no graph: reading it gives the
    /// reason, projections over it fail too, and nothing of it is
    /// checkpointed. [`Self::drop_projection`] removes it.
    pub fn deploy_failed(
        &mut self,
        id: ObjectId,
        output_schema: SchemaRef,
        reason: String,
    ) -> Result<(), EngineError> {
        let mut view = (*self.view).clone();
        view.projections.insert(
            id,
            ProjectionView {
                result: Materialized::new(output_schema)?,
                failure: Some(reason),
                last_epoch: self.epoch,
                rows_in: 0,
                rows_out: 0,
                late_rows: 0,
            },
        );
        self.view = Arc::new(view);
        Ok(())
    }

    /// Makes a deployment (restored with
    /// [`Self::deploy_for_restore`]) emit its output instead of keeping it.
    pub fn set_emitting(&mut self, id: ObjectId) {
        if let Some(d) = self.deployed.iter_mut().find(|d| d.id == id) {
            d.emitting = true;
        }
    }

    /// Marks every projection failed (after a step panicked, when no graph
    /// can be trusted to be consistent with its result any more).
    pub fn fail_all(&mut self, reason: &str) {
        self.pending.clear();
        self.pending_rows = 0;
        let mut view = (*self.view).clone();
        for projection in view.projections.values_mut() {
            projection.failure.get_or_insert_with(|| reason.to_string());
        }
        self.view = Arc::new(view);
    }

    /// Sink deployment `sink` keeps exactly `epochs` of its output in the
    /// checkpointed state until it has delivered them
    /// ([`crate::outbox`]).
    pub fn keep_undelivered(&mut self, sink: ObjectId, epochs: &[(u64, ChangeBatch)]) {
        self.outboxes.keep(sink, epochs);
    }

    /// The epochs sink deployment `sink` keeps undelivered (as restored
    /// from a checkpoint, or kept since), oldest first.
    pub fn undelivered(&self, sink: ObjectId) -> Vec<(u64, ChangeBatch)> {
        self.outboxes.kept(sink)
    }

    /// Stops maintaining a projection and forgets its result.
    pub fn drop_projection(&mut self, id: ObjectId) {
        self.deployed.retain(|d| d.id != id);
        self.outboxes.forget(id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Input;
    use crate::ops::union::Union;
    use crate::testing::{change, render, schema};

    /// Fails on any row whose first column is `boom`; passes the rest on.
    struct FailOnBoom(SchemaRef);

    impl crate::Operator for FailOnBoom {
        fn name(&self) -> &'static str {
            "fail_on_boom"
        }
        fn output_schema(&self) -> SchemaRef {
            self.0.clone()
        }
        fn structure(&self) -> String {
            "fail_on_boom".into()
        }
        fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
            if render(&inputs[0]).iter().any(|l| l.starts_with("boom")) {
                return Err(EngineError::Invariant {
                    operator: "fail_on_boom",
                    message: "boom".into(),
                });
            }
            Ok(inputs[0].clone())
        }
        fn snapshot(&self) -> Result<Vec<u8>, EngineError> {
            Ok(Vec::new())
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), EngineError> {
            Ok(())
        }
    }

    fn passthrough(source: usize) -> Graph {
        let mut graph = Graph::new(1);
        graph
            .add(
                Box::new(FailOnBoom(schema("k text"))),
                vec![Input::Source(source)],
            )
            .unwrap();
        graph
    }

    fn rows(view: &EpochView, id: u64) -> Vec<String> {
        let result = &view.projections[&ObjectId(id)].result;
        render(&result.as_inserts().unwrap())
    }

    #[test]
    fn epochs_feed_tables_then_projections_in_order_and_failures_spread() {
        let table = ObjectId(1);
        let k = schema("k text");
        let mut coordinator = Coordinator::new();
        let backfill = |_: ObjectId| Ok(Some(change("k text", "a +1")));
        let bind = |object| {
            vec![SourceBinding {
                object,
                schema: k.clone(),
            }]
        };
        coordinator
            .deploy(
                ObjectId(2),
                passthrough(0),
                bind(table),
                k.clone(),
                &backfill,
            )
            .unwrap();
        // Projection 3 reads projection 2 (and unions it with itself).
        let mut doubled = Graph::new(1);
        doubled
            .add(
                Box::new(Union::new(2, k.clone())),
                vec![Input::Source(0), Input::Source(0)],
            )
            .unwrap();
        coordinator
            .deploy(
                ObjectId(3),
                doubled,
                bind(ObjectId(2)),
                k.clone(),
                &backfill,
            )
            .unwrap();
        assert_eq!(rows(&coordinator.view(), 3), vec!["a +2"]);

        // Changes wait for the barrier; an update undone within the epoch
        // changes nothing.
        coordinator.push(table, change("k text", "b +1; a -1"));
        coordinator.push(table, change("k text", "a +1"));
        coordinator.push(ObjectId(99), change("k text", "ignored +1"));
        assert_eq!(rows(&coordinator.view(), 2), vec!["a +1"]);
        let report = coordinator.run_epoch().unwrap();
        assert_eq!(report.epoch, Epoch(1));
        let view = coordinator.view();
        assert_eq!(rows(&view, 2), vec!["a +1", "b +1"]);
        assert_eq!(rows(&view, 3), vec!["a +2", "b +2"]);

        // A failing step keeps the last result, marks the projection and
        // everything reading it failed, and later epochs skip them.
        coordinator.push(table, change("k text", "boom +1"));
        let report = coordinator.run_epoch().unwrap();
        assert_eq!(report.failed.len(), 2);
        let view = coordinator.view();
        assert!(view.projections[&ObjectId(2)].failure.is_some());
        assert!(view.projections[&ObjectId(3)].failure.is_some());
        assert_eq!(rows(&view, 3), vec!["a +2", "b +2"]);
        coordinator.push(table, change("k text", "c +1"));
        assert!(coordinator.run_epoch().unwrap().failed.is_empty());

        coordinator.drop_projection(ObjectId(3));
        coordinator.drop_projection(ObjectId(2));
        assert!(coordinator.view().projections.is_empty());
        coordinator.push(table, change("k text", "d +1"));
        assert_eq!(
            coordinator.pending_rows(),
            0,
            "nothing reads the table any more"
        );
    }
}
