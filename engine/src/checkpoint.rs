//! Incremental checkpoints of every deployed projection, split into vnodes.
//!
//! Every stateful operator and every projection's result keep their state
//! as keyed entries ([`StateEntry`], see [`crate::Operator`]). A checkpoint
//! gathers entries of all projections and groups them by vnode
//! ([`vnode_of`]): [`Coordinator::checkpoint_changes`] drains the entries that
//! changed in the epoch (a *delta*), [`Coordinator::checkpoint_full`] takes
//! every entry (a *snapshot*). Each vnode's [`VnodeState`] is encoded into
//! one partial blob of the state backend (`weir-storage`'s
//! `write_partial(vnode, epoch, ..)`).
//!
//! Restore: deploy every projection with [`Coordinator::deploy_for_restore`]
//! (in deployment order, no backfill), feed each vnode's chain (its latest
//! snapshot, then its deltas in epoch order) to
//! [`Coordinator::restore_vnode`], then [`Coordinator::finish_restore`] at the
//! chain's epoch publishes the restored results and lets epochs run again.
//! Vnodes are independent: their chains may be applied in any interleaving,
//! as long as each chain is applied in order.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use weir_common::{Epoch, ObjectId};

use crate::EngineError;
use crate::coordinator::{Coordinator, Deployed, ProjectionView, SourceBinding};
use crate::graph::Graph;
use crate::materialized::Materialized;
use crate::operator::{StateEntry, split_state_key};
use crate::outbox::OUTBOX_NODE;
use crate::vnode_state::VnodeState;

/// Vnodes per deployment. Fixed (ARCHITECTURE.md §2: stored with the
/// catalog, never changed in place) because the vnode of every entry
/// already written depends on it; 256 is enough to spread state over many
/// nodes later and few enough that a per-vnode blob per epoch stays cheap
/// (only vnodes with changes write one).
pub const VNODES: u32 = 256;

/// The node number of a projection's result ([`Materialized`]) in
/// checkpoints: no graph has that many nodes.
pub const RESULT_NODE: u32 = u32::MAX;

/// The vnode of one state entry of `node` of projection `object`: CRC-32
/// (IEEE, as `crc32fast` computes it) over the object id (u64 LE), the node
/// (u32 LE) and the key's distribution key ([`crate::operator::state_key`];
/// the whole key if it is not of that layout), modulo [`VNODES`]. CRC-32 is
/// a fixed, specified function, so the vnode of an entry never changes
/// across builds or platforms; hashing only the distribution key keeps all
/// state of one group (or join key, or partition) in one vnode.
pub fn vnode_of(object: ObjectId, node: u32, key: &[u8]) -> u32 {
    let distribution = split_state_key(key).map_or(key, |k| k.distribution);
    Vnodes::new(object, node).of(distribution)
}

/// [`vnode_of`] for many distribution keys of one node of one projection:
/// the (object, node) prefix is hashed once. What [`crate::ops::parallel`]
/// routes rows by, so a row goes to the worker owning its state's vnode.
#[derive(Clone)]
pub struct Vnodes(crc32fast::Hasher);

impl Vnodes {
    pub fn new(object: ObjectId, node: u32) -> Self {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&object.0.to_le_bytes());
        hasher.update(&node.to_le_bytes());
        Self(hasher)
    }

    /// The vnode of state whose distribution key is `distribution`.
    pub fn of(&self, distribution: &[u8]) -> u32 {
        let mut hasher = self.0.clone();
        hasher.update(distribution);
        hasher.finalize() % VNODES
    }
}

/// What a projection's checkpointed state is only valid for: its graph's
/// structure (per node, in order: [`crate::Operator::structure`] and its
/// inputs) and its output schema, under this state format. A restore uses
/// a projection's state only if the fingerprint stored with it equals the
/// one of the graph planned now; a build that plans the query differently
/// (other nodes, other expressions, other state layouts) rebuilds the
/// projection from its inputs instead of misreading state, while a change
/// to how EXPLAIN prints a plan does not. CRC-32 of the text, like
/// [`vnode_of`], so it is stable across builds; the text's length is part
/// of it.
pub fn state_fingerprint(graph: &crate::Graph, schema: &arrow::datatypes::Schema) -> String {
    let mut hasher = crc32fast::Hasher::new();
    let mut len = 0usize;
    let mut add = |text: &str| {
        hasher.update(text.as_bytes());
        hasher.update(b"\n");
        len += text.len() + 1;
    };
    add(std::str::from_utf8(&crate::vnode_state::MAGIC).unwrap_or_default());
    for (structure, inputs) in graph.structure() {
        add(&format!("{structure} <- {inputs:?}"));
    }
    add(&crate::operator::schema_text(schema));
    format!("{:08x}-{len}", hasher.finalize())
}

/// Appends `entries` of `node` of `object` to their vnodes.
fn add_entries(
    vnodes: &mut BTreeMap<u32, VnodeState>,
    object: ObjectId,
    node: u32,
    entries: Vec<StateEntry>,
) {
    // The (object, node) prefix of the hash once, not per entry.
    let of = Vnodes::new(object, node);
    for entry in entries {
        let key: &[u8] = &entry.key;
        let vnode = of.of(split_state_key(key).map_or(key, |k| k.distribution));
        vnodes
            .entry(vnode)
            .or_default()
            .entries
            .push((object, node, entry));
    }
}

impl Coordinator {
    /// Drains what changed since the last call (or since deploy or restore)
    /// in every projection's operators and result, per vnode; only vnodes
    /// with changes appear. Costs O(changed entries). Call it after
    /// [`Coordinator::run_epoch`] to get that epoch's delta.
    ///
    /// Failed projections are skipped (their changes stay undrained): their
    /// graph may be half stepped, so their state is not worth restoring; the
    /// owner rebuilds a failed projection from its inputs.
    ///
    /// On an error some changes may already be drained: the next checkpoint
    /// must then be a full one ([`Self::checkpoint_full`]).
    pub fn checkpoint_changes(&mut self) -> Result<BTreeMap<u32, VnodeState>, EngineError> {
        self.refuse_while_restoring("checkpoint")?;
        let mut vnodes = BTreeMap::new();
        let view = Arc::make_mut(&mut self.view);
        for deployed in &mut self.deployed {
            let Some(projection) = view.projections.get_mut(&deployed.id) else {
                continue;
            };
            if projection.failure.is_some() {
                continue;
            }
            for (node, entries) in deployed.graph.take_state_changes()? {
                add_entries(&mut vnodes, deployed.id, node, entries);
            }
            let result = projection.result.take_state_changes();
            add_entries(&mut vnodes, deployed.id, RESULT_NODE, result);
        }
        for (sink, entry) in self.outboxes.take_changes()? {
            add_entries(&mut vnodes, sink, OUTBOX_NODE, vec![entry]);
        }
        Ok(vnodes)
    }

    /// Every entry of every (not failed) projection, per vnode: a full
    /// snapshot. Leaves the change records alone, so a caller that writes a
    /// snapshot for some vnodes and deltas for the others takes both
    /// ([`Self::checkpoint_changes`] first) and drops the deltas of the
    /// snapshot vnodes. Costs O(all state): the runtime takes one only on its
    /// first checkpoint and after a failed one.
    pub fn checkpoint_full(&self) -> Result<BTreeMap<u32, VnodeState>, EngineError> {
        self.refuse_while_restoring("checkpoint")?;
        let mut vnodes = BTreeMap::new();
        for deployed in &self.deployed {
            let Some(projection) = self.view.projections.get(&deployed.id) else {
                continue;
            };
            if projection.failure.is_some() {
                continue;
            }
            for (node, entries) in deployed.graph.state_entries()? {
                add_entries(&mut vnodes, deployed.id, node, entries);
            }
            let result = projection.result.state_entries();
            add_entries(&mut vnodes, deployed.id, RESULT_NODE, result);
        }
        for (sink, entry) in self.outboxes.entries()? {
            add_entries(&mut vnodes, sink, OUTBOX_NODE, vec![entry]);
        }
        Ok(vnodes)
    }

    /// Deploys a projection whose state will come from a checkpoint
    /// ([`Self::restore_vnode`]) instead of a backfill. It is invisible to
    /// readers, and epochs refuse to run, until [`Self::finish_restore`].
    /// Same order as [`Coordinator::deploy`]: after what it reads.
    pub fn deploy_for_restore(
        &mut self,
        id: ObjectId,
        mut graph: Graph,
        sources: Vec<SourceBinding>,
        output_schema: SchemaRef,
    ) -> Result<(), EngineError> {
        if self.pending_rows > 0 {
            return Err(EngineError::Invariant {
                operator: "coordinator",
                message: "deploy with changes pending".into(),
            });
        }
        graph.place(id)?;
        let result = Materialized::new(output_schema)?;
        self.deployed.push(Deployed {
            id,
            graph,
            sources,
            restoring: Some(result),
            emitting: false,
            input_watermarks: Vec::new(),
        });
        Ok(())
    }

    /// Applies one checkpoint of one vnode (a snapshot, or a delta after
    /// the vnode's earlier chain) to the projections being restored.
    /// Entries of projections not deployed (dropped since) are skipped; an
    /// entry for a projection that is live, not restoring, is an error. On
    /// an error the projections are partly restored: drop and redeploy them.
    /// The state is taken by value so its entries move into the
    /// operators instead of being copied.
    pub fn restore_vnode(&mut self, state: VnodeState) -> Result<(), EngineError> {
        let mut entries = state.entries.into_iter().peekable();
        while let Some((object, node, first)) = entries.next() {
            let mut run = vec![first];
            while let Some((_, _, entry)) = entries.next_if(|(o, n, _)| (*o, *n) == (object, node))
            {
                run.push(entry);
            }
            let Some(deployed) = self.deployed.iter_mut().find(|d| d.id == object) else {
                continue;
            };
            let Some(result) = &mut deployed.restoring else {
                return Err(EngineError::Invariant {
                    operator: "coordinator",
                    message: format!("checkpoint state for live projection {object}"),
                });
            };
            if node == OUTBOX_NODE {
                self.outboxes.apply(object, &run)?;
            } else if node == RESULT_NODE {
                result.apply_state_entries(&run)?;
            } else {
                deployed.graph.apply_state_entries(node, &run)?;
            }
        }
        Ok(())
    }

    /// Ends a restore at `epoch` (the epoch of the chains applied): every
    /// restored projection's result is published as of `epoch`, and the next
    /// [`Coordinator::run_epoch`] is `epoch + 1`.
    pub fn finish_restore(&mut self, epoch: Epoch) -> Result<(), EngineError> {
        if self.pending_rows > 0 || epoch < self.epoch {
            return Err(EngineError::Invariant {
                operator: "coordinator",
                message: format!(
                    "finish restore at epoch {epoch} from epoch {} with {} rows pending",
                    self.epoch, self.pending_rows
                ),
            });
        }
        let mut view = (*self.view).clone();
        for deployed in &mut self.deployed {
            if let Some(result) = deployed.restoring.take() {
                let projection = ProjectionView {
                    result,
                    failure: None,
                    last_epoch: epoch,
                    rows_in: 0,
                    rows_out: 0,
                    late_rows: 0,
                };
                view.projections.insert(deployed.id, projection);
            }
        }
        view.epoch = epoch;
        self.epoch = epoch;
        self.view = Arc::new(view);
        Ok(())
    }

    /// Refuses `what` while projections await [`Self::finish_restore`].
    pub(crate) fn refuse_while_restoring(&self, what: &str) -> Result<(), EngineError> {
        match self.deployed.iter().find(|d| d.restoring.is_some()) {
            None => Ok(()),
            Some(d) => Err(EngineError::Invariant {
                operator: "coordinator",
                message: format!("cannot {what}: projection {} is being restored", d.id),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;
    use weir_common::ChangeBatch;

    use bytes::Bytes;

    use super::*;
    use crate::graph::Input;
    use crate::operator::state_key;
    use crate::ops::aggregate::{Aggregate, AggregateCall};
    use crate::ops::join::{Join, JoinKind, JoinSpec};
    use crate::ops::top_n::{Numbering, TopN, TopNSpec};
    use crate::testing::{RandomInput, Rng, change, render, schema};

    #[test]
    fn vnodes_are_crc32_of_object_node_and_distribution_key() {
        // Pinned with Python's zlib.crc32 over the same little-endian bytes,
        // so the function can never drift.
        let key = state_key(1, b"abc", b"some row");
        assert_eq!(vnode_of(ObjectId(7), 2, &key), 4);
        assert_eq!(
            vnode_of(ObjectId(7), RESULT_NODE, &state_key(0, &[], &[])),
            3
        );
        // Only the distribution key counts: a group's state stays together.
        assert_eq!(
            vnode_of(ObjectId(7), 2, &state_key(2, b"abc", &[])),
            vnode_of(ObjectId(7), 2, &key)
        );
    }

    const T: &str = "k text, x int";
    const P2: &str = "k text, s int, c int";
    const TABLE: ObjectId = ObjectId(1);

    fn sum_and_count() -> Vec<AggregateCall> {
        let input = schema(T);
        [(sum_udaf(), "s"), (count_udaf(), "c")]
            .into_iter()
            .map(|(udaf, name)| AggregateCall {
                function: Arc::new(
                    AggregateExprBuilder::new(udaf, vec![col("x", &input).unwrap()])
                        .schema(input.clone())
                        .alias(name)
                        .build()
                        .unwrap(),
                ),
                filter: None,
            })
            .collect()
    }

    /// `make()`, or `workers` instances of it behind a [`Parallel`].
    fn sharded(
        workers: usize,
        make: impl Fn() -> Box<dyn crate::ops::parallel::Keyed>,
    ) -> Box<dyn crate::Operator> {
        if workers == 1 {
            return make();
        }
        let instances = (0..workers).map(|_| make()).collect();
        Box::new(crate::ops::parallel::Parallel::new(instances).unwrap())
    }

    /// 2: `SELECT k, sum(x) s, count(x) c FROM t GROUP BY k`;
    /// 3: the two largest `s` of 2, numbered;
    /// 4: `t JOIN 2 USING (k)`.
    /// The aggregate and the join split over `workers`.
    fn projections(workers: usize) -> Vec<(ObjectId, Graph, Vec<SourceBinding>, SchemaRef)> {
        let (t, p2) = (schema(T), schema(P2));
        let bind = |object, schema: &SchemaRef| SourceBinding {
            object,
            schema: schema.clone(),
        };
        let mut two = Graph::new(1);
        let group_by = vec![col("k", &t).unwrap()];
        let agg = sharded(workers, || {
            let agg = Aggregate::new(t.clone(), group_by.clone(), sum_and_count(), p2.clone());
            Box::new(agg.unwrap())
        });
        two.add(agg, vec![Input::Source(0)]).unwrap();

        let three_schema = schema("k text, s int, c int, n int");
        let mut three = Graph::new(1);
        let top = TopN::new(TopNSpec {
            input_schema: p2.clone(),
            partition_by: vec![],
            order_by: vec![(col("s", &p2).unwrap(), Default::default())],
            offset: 0,
            limit: 2,
            numbering: Numbering::RowNumber,
            output_schema: three_schema.clone(),
        })
        .unwrap();
        three.add(Box::new(top), vec![Input::Source(0)]).unwrap();

        let four_schema = schema("k text, x int, k2 text, s int, c int");
        let mut four = Graph::new(2);
        let join = sharded(workers, || {
            let join = Join::new(JoinSpec {
                kind: JoinKind::Left,
                left_schema: t.clone(),
                right_schema: p2.clone(),
                on: vec![(col("k", &t).unwrap(), col("k", &p2).unwrap())],
                residual: None,
                output_schema: four_schema.clone(),
            });
            Box::new(join.unwrap())
        });
        four.add(join, vec![Input::Source(0), Input::Source(1)])
            .unwrap();
        vec![
            (ObjectId(2), two, vec![bind(TABLE, &t)], p2.clone()),
            (
                ObjectId(3),
                three,
                vec![bind(ObjectId(2), &p2)],
                three_schema,
            ),
            (
                ObjectId(4),
                four,
                vec![bind(TABLE, &t), bind(ObjectId(2), &p2)],
                four_schema,
            ),
        ]
    }

    fn results(coordinator: &Coordinator) -> BTreeMap<ObjectId, (Vec<String>, u64)> {
        let view = coordinator.view();
        view.projections
            .iter()
            .map(|(id, p)| {
                let rows = render(&p.result.as_inserts().unwrap());
                (*id, (rows, p.result.row_count()))
            })
            .collect()
    }

    fn encoded(vnodes: BTreeMap<u32, VnodeState>) -> BTreeMap<u32, Bytes> {
        vnodes.into_iter().map(|(v, s)| (v, s.encode())).collect()
    }

    /// Deltas come out in no particular order within a vnode.
    fn sorted(mut vnodes: BTreeMap<u32, VnodeState>) -> BTreeMap<u32, VnodeState> {
        for state in vnodes.values_mut() {
            state.entries.sort();
        }
        vnodes
    }

    fn all_entries(c: &Coordinator) -> Vec<(u32, VnodeState)> {
        c.checkpoint_full().unwrap().into_iter().collect()
    }

    /// With the same worker count, and with checkpoints taken with one
    /// worker count restored into another: the state and its checkpoints do
    /// not depend on it.
    #[test]
    fn a_restored_coordinator_equals_the_original_and_goes_on_alike() {
        for (from, to) in [(1, 1), (1, 3), (3, 1), (2, 2)] {
            restore_and_go_on(from, to);
        }
    }

    fn restore_and_go_on(from: usize, to: usize) {
        for seed in 0..6 {
            let mut rng = Rng::new(seed);
            let mut input = RandomInput::new(T, &[&["a", "b", "c", "null"], &["1", "2", "5"]]);
            let mut original = Coordinator::new();
            let nothing = |_: ObjectId| -> Result<Option<ChangeBatch>, EngineError> { Ok(None) };
            for (id, graph, sources, schema) in projections(from) {
                original
                    .deploy(id, graph, sources, schema, &nothing)
                    .unwrap();
            }
            let (epochs, snapshot_at) = (10u64, 1 + rng.below(8) as u64);
            let mut snapshot = BTreeMap::new();
            let mut deltas = Vec::new();
            for epoch in 1..=epochs {
                original.push(TABLE, input.next(&mut rng));
                original.run_epoch().unwrap();
                let delta = encoded(original.checkpoint_changes().unwrap());
                if epoch == snapshot_at {
                    snapshot = encoded(original.checkpoint_full().unwrap());
                } else if epoch > snapshot_at {
                    deltas.push(delta);
                }
            }

            let mut restored = Coordinator::new();
            for (id, graph, sources, schema) in projections(to) {
                restored
                    .deploy_for_restore(id, graph, sources, schema)
                    .unwrap();
            }
            assert!(restored.run_epoch().is_err(), "epochs wait for the restore");
            // Each vnode's chain in order: its snapshot, then its deltas.
            for vnode in 0..VNODES {
                let chain = snapshot
                    .get(&vnode)
                    .into_iter()
                    .chain(deltas.iter().filter_map(|d| d.get(&vnode)));
                for blob in chain {
                    restored
                        .restore_vnode(VnodeState::decode(blob).unwrap())
                        .unwrap();
                }
            }
            restored.finish_restore(Epoch(epochs)).unwrap();
            assert_eq!(restored.view().epoch, original.view().epoch);
            assert_eq!(
                results(&restored),
                results(&original),
                "seed {seed} {from}->{to}"
            );
            assert!(restored.checkpoint_changes().unwrap().is_empty());
            assert_eq!(all_entries(&restored), all_entries(&original));

            for _ in 0..5 {
                let next = input.next(&mut rng);
                for c in [&mut original, &mut restored] {
                    c.push(TABLE, next.clone());
                    assert!(c.run_epoch().unwrap().failed.is_empty());
                }
                assert_eq!(results(&restored), results(&original), "seed {seed}");
                assert_eq!(
                    sorted(restored.checkpoint_changes().unwrap()),
                    sorted(original.checkpoint_changes().unwrap())
                );
            }
        }
    }

    #[test]
    fn entries_of_dropped_projections_are_skipped_and_live_ones_refused() {
        let mut coordinator = Coordinator::new();
        let (id, graph, sources, schema) = projections(1).remove(0);
        coordinator
            .deploy_for_restore(id, graph, sources, schema)
            .unwrap();
        let dropped = VnodeState {
            entries: vec![(ObjectId(99), 0, StateEntry::set(vec![1], vec![2]))],
        };
        coordinator.restore_vnode(dropped).unwrap();
        coordinator.finish_restore(Epoch(3)).unwrap();
        assert_eq!(coordinator.view().projections[&id].last_epoch, Epoch(3));
        let live = VnodeState {
            entries: vec![(id, 0, StateEntry::set(vec![1], vec![2]))],
        };
        assert!(coordinator.restore_vnode(live).is_err());
    }

    #[test]
    fn an_epoch_writes_state_in_proportion_to_its_change() {
        // 10 000 groups; one epoch updates a row in each of 3 groups.
        let rows: Vec<String> = (0..10_000).map(|g| format!("g{g} 1 +1")).collect();
        let contents = change(T, &rows.join("; "));
        let backfill = |_: ObjectId| Ok(Some(contents.clone()));
        let mut coordinator = Coordinator::new();
        let (id, graph, sources, schema) = projections(1).remove(0);
        coordinator
            .deploy(id, graph, sources, schema, &backfill)
            .unwrap();
        let deployed: usize = coordinator
            .checkpoint_changes()
            .unwrap()
            .values()
            .map(|v| v.entries.len())
            .sum();
        assert!(deployed > 30_000, "{deployed}");

        coordinator.push(
            TABLE,
            change(
                T,
                "g1 1 -1; g1 2 +1; g20 1 -1; g20 2 +1; g300 1 -1; g300 2 +1",
            ),
        );
        coordinator.run_epoch().unwrap();
        let delta = coordinator.checkpoint_changes().unwrap();
        let entries: usize = delta.values().map(|v| v.entries.len()).sum();
        // Per group: the aggregate's accumulators and output row, the old
        // and the new result row.
        assert_eq!(entries, 3 * (2 + 2));
        let bytes: usize = delta.values().map(|v| v.encode().len()).sum();
        assert!(bytes < 2_000, "{bytes} bytes");
        assert!(delta.len() <= 15);
    }
}
