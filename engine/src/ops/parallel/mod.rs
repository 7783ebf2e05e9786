//! [`Parallel`]: one keyed operator (aggregate, join, top-N) run as W
//! instances, the *workers*, each owning the state of a disjoint set of
//! keys, stepped on W threads.
//!
//! A keyed operator ([`Keyed`]) keeps all state of one group, join key or
//! partition under that key, its *distribution key*
//! ([`crate::operator::state_key`]), and what it outputs for a key depends
//! on that key's state and input rows only. So the state splits by key
//! without changing the answer: worker `w` owns the keys whose vnode
//! ([`crate::checkpoint::vnode_of`], of this projection and node) is `w`
//! modulo W. A step
//!
//! 1. computes every input row's distribution key (through the operator's
//!    own [`Keyed::distribution_keys`], so the key logic exists once) and
//!    its owner, each worker taking a row range of every input;
//! 2. gives each worker the rows it owns (a subset of a settled change is
//!    settled) and steps the W workers, each on its own thread; a
//!    worker without rows still steps, with empty changes, so every
//!    instance sees one step per epoch as [`Operator`] promises;
//! 3. concatenates their outputs in worker order, so the output is the same
//!    rows in the same order whatever the threads' timing.
//!
//! The concatenation is settled because each worker's output is, and rows
//! of different workers are never equal: every output row carries its
//! distribution key (an aggregate's group columns, a top-N's input row,
//! a join's key side), and a key belongs to one worker. The one exception
//! is declared by [`Keyed::keys_in_output`] (a full outer join, see
//! [`crate::ops::join`]); its concatenation is settled again.
//!
//! State: entries are taken from every worker (on threads for a full
//! snapshot and after a threaded step) and merged in key order, so they are
//! the same list a single instance would give (checkpoints do not depend on
//! W); entries applied on restore go to the owner of their distribution
//! key. [`Operator::structure`] is the instance's, so a checkpoint taken
//! with one worker count restores into another. An entry with an empty
//! distribution key (the aggregate's `started` flag) is kept by every
//! worker alike: the owner's copy is the one reported.
//!
//! Threads are scoped (`std::thread::scope`) per step rather than a pool:
//! no thread outlives the step, nothing is shared between graphs, and an
//! epoch's few spawns cost microseconds against its milliseconds. Small
//! steps (fewer than [`PARALLEL_ROWS`] input rows) run the same routing on
//! the calling thread, where a spawn would cost more than the work. A
//! panic inside a worker is caught on its thread and returned as an error,
//! which poisons the graph as any failed step does ([`crate::Graph`]).

#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;

use arrow::array::{AsArray, RecordBatch, UInt32Array};
use arrow::compute::{take, take_record_batch};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, ObjectId};

use crate::EngineError;
use crate::checkpoint::Vnodes;
use crate::operator::{Operator, StateEntry, parse_state_key, split_state_key};
use crate::rows::{concat_changes, empty_change, settle};
use crate::watermark::Watermarks;

/// Input rows of a step below which the workers step one after another on
/// the calling thread: spawning costs more than such a step.
pub const PARALLEL_ROWS: usize = 4096;

/// A worker thread's stack: operators evaluate DataFusion expressions,
/// which recurse over deep expression trees.
const WORKER_STACK_BYTES: usize = 8 << 20;

/// An operator whose state is partitioned by a distribution key, so that
/// instances owning disjoint keys together behave as one ([`Parallel`]).
/// `Sync` because workers compute routing keys and take their state
/// through shared references, on threads.
pub trait Keyed: Operator + Sync {
    /// Whether the state is split by key at all: false when all of it is
    /// one key's (an aggregate without GROUP BY, a top-N without PARTITION
    /// BY, a join without equi keys) or when the output for one key depends
    /// on others (`NOT IN`). Such an operator is never wrapped.
    fn shardable(&self) -> bool;

    /// Per row of `rows`, a change of input `input`, the distribution key
    /// of the state that row updates: exactly the `distribution` bytes of
    /// the operator's state keys. A row that keeps no state (a join row
    /// with a NULL key) gets bytes that depend on the row alone. Only
    /// called when [`Self::shardable`]; must not change the operator.
    fn distribution_keys(
        &self,
        input: usize,
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError>;

    /// Whether every output row carries its distribution key, so that rows
    /// output for different keys are never equal and the outputs of
    /// instances owning disjoint keys need no consolidation together.
    fn keys_in_output(&self) -> bool {
        true
    }
}

const _: Option<&dyn Keyed> = None;

/// [`Keyed::distribution_keys`] of an operator that is not shardable.
pub(crate) fn not_shardable(operator: &'static str) -> EngineError {
    EngineError::Invariant {
        operator,
        message: "its state is not split by key, so it cannot be sharded".into(),
    }
}

/// W instances of one keyed operator, each owning the keys whose vnode is
/// its index modulo W; see the module doc.
pub struct Parallel {
    workers: Vec<Box<dyn Keyed>>,
    /// Where the state lives ([`Operator::place`]), and its vnode hasher.
    placement: (ObjectId, u32),
    vnodes: Vnodes,
    /// Set once a worker may hold state: the placement is fixed from then.
    used: bool,
    /// Steps with fewer input rows run on the calling thread.
    parallel_rows: usize,
    /// Whether the last step ran on threads: then so does taking the
    /// changes it made (a full snapshot always does).
    threaded_step: bool,
}

impl Parallel {
    /// Wraps `workers`, fresh instances of one operator (equal
    /// [`Operator::structure`]), each owning a share of the keys.
    pub fn new(workers: Vec<Box<dyn Keyed>>) -> Result<Self, EngineError> {
        let Some(first) = workers.first() else {
            return Err(EngineError::Invariant {
                operator: "parallel",
                message: "no workers".into(),
            });
        };
        let (name, structure) = (first.name(), first.structure());
        if !first.shardable() {
            return Err(not_shardable(name));
        }
        if workers.iter().any(|w| w.structure() != structure) {
            return Err(EngineError::Invariant {
                operator: name,
                message: "workers of different operators".into(),
            });
        }
        let placement = (ObjectId(0), 0);
        Ok(Self {
            workers,
            vnodes: Vnodes::new(placement.0, placement.1),
            placement,
            used: false,
            parallel_rows: PARALLEL_ROWS,
            threaded_step: false,
        })
    }

    /// Steps with fewer input rows than `rows` run on the calling thread
    /// (tests use 0 to run every step on threads).
    pub fn with_parallel_rows(mut self, rows: usize) -> Self {
        self.parallel_rows = rows;
        self
    }

    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    fn instance_name(&self) -> &'static str {
        self.workers[0].name()
    }

    /// The worker owning state under `distribution`.
    fn owner(&self, distribution: &[u8]) -> usize {
        self.vnodes.of(distribution) as usize % self.workers.len()
    }

    /// Per input, the owner of each row. Worker `w` computes the keys of
    /// the `w`th row range of every input.
    fn owners(&self, inputs: &[ChangeBatch], threads: bool) -> Result<Vec<Vec<u32>>, EngineError> {
        let n = self.workers.len();
        let vnodes = &self.vnodes;
        let ranges = run_each(&self.workers, threads, |w, worker| {
            inputs
                .iter()
                .enumerate()
                .map(|(i, input)| {
                    let rows = input.num_rows();
                    let (start, end) = (rows * w / n, rows * (w + 1) / n);
                    if start == end {
                        return Ok(Vec::new());
                    }
                    let keys =
                        worker.distribution_keys(i, &input.rows().slice(start, end - start))?;
                    Ok(keys
                        .iter()
                        .map(|key| (vnodes.of(key.as_ref()) as usize % n) as u32)
                        .collect())
                })
                .collect::<Result<Vec<Vec<u32>>, EngineError>>()
        });
        let mut owners: Vec<Vec<u32>> = inputs
            .iter()
            .map(|c| Vec::with_capacity(c.num_rows()))
            .collect();
        for range in ranges {
            for (owners, part) in owners.iter_mut().zip(range?) {
                owners.extend(part);
            }
        }
        Ok(owners)
    }
}

/// The rows of `input` whose owner is `worker`.
fn select(input: &ChangeBatch, owners: &[u32], worker: usize) -> Result<ChangeBatch, EngineError> {
    let mine = UInt32Array::from_iter_values(
        owners
            .iter()
            .enumerate()
            .filter(|&(_, &owner)| owner as usize == worker)
            .map(|(row, _)| row as u32),
    );
    if mine.len() == input.num_rows() {
        return Ok(input.clone());
    }
    if mine.is_empty() {
        return Ok(empty_change(&input.schema()));
    }
    let weights = take(input.weights(), &mine, None)?
        .as_primitive::<arrow::datatypes::Int64Type>()
        .clone();
    Ok(ChangeBatch::new(
        take_record_batch(input.rows(), &mine)?,
        weights,
    )?)
}

/// Runs `task(w, item)` for every item (a worker, by `&mut` or `&`) and
/// returns the results in item order: on scoped threads when `threads`
/// (the calling thread takes item 0), else one after another on the
/// calling thread. A panicking task becomes an error of that item, as
/// [`crate::Graph::step`] reports one.
fn run_each<T: Send, R: Send>(
    items: impl IntoIterator<Item = T>,
    threads: bool,
    task: impl Fn(usize, T) -> Result<R, EngineError> + Sync,
) -> Vec<Result<R, EngineError>> {
    let items: Vec<T> = items.into_iter().collect();
    let guarded = |w: usize, item: T| -> Result<R, EngineError> {
        std::panic::catch_unwind(AssertUnwindSafe(|| task(w, item))).unwrap_or_else(|panic| {
            Err(EngineError::Invariant {
                operator: "parallel",
                message: format!(
                    "worker {w} panicked: {}",
                    crate::graph::panic_message(panic.as_ref())
                ),
            })
        })
    };
    if !threads || items.len() < 2 {
        return items
            .into_iter()
            .enumerate()
            .map(|(w, item)| guarded(w, item))
            .collect();
    }
    let guarded = &guarded;
    std::thread::scope(|scope| {
        let mut items = items.into_iter().enumerate();
        let Some((_, first)) = items.next() else {
            return Vec::new();
        };
        let spawned: Vec<_> = items
            .map(|(w, item)| {
                std::thread::Builder::new()
                    .name(format!("weir-worker-{w}"))
                    .stack_size(WORKER_STACK_BYTES)
                    .spawn_scoped(scope, move || guarded(w, item))
            })
            .collect();
        let mut results = vec![guarded(0, first)];
        for handle in spawned {
            results.push(match handle {
                // The task catches its panics, so joining cannot fail.
                Ok(handle) => handle.join().unwrap_or_else(|_| {
                    Err(EngineError::Invariant {
                        operator: "parallel",
                        message: "a worker thread died".into(),
                    })
                }),
                Err(e) => Err(EngineError::Invariant {
                    operator: "parallel",
                    message: format!("cannot start a worker thread: {e}"),
                }),
            });
        }
        results
    })
}

impl Parallel {
    /// `entries` of worker `w` that it owns. Entries under the empty
    /// distribution key are kept by every worker alike (the aggregate's
    /// `started` flag); only the owner's copy is kept. Any other entry
    /// belongs to its worker by construction (rows and restored entries are
    /// routed by the same keys); debug builds check it.
    fn owned(&self, w: usize, mut entries: Vec<StateEntry>) -> Vec<StateEntry> {
        let owns_empty = self.owner(&[]) == w;
        entries.retain(|entry| {
            let Some(key) = split_state_key(&entry.key) else {
                return true;
            };
            debug_assert!(
                key.distribution.is_empty() || self.owner(key.distribution) == w,
                "worker {w} holds state of a key it does not own"
            );
            owns_empty || !key.distribution.is_empty()
        });
        entries
    }

    /// Every worker's owned entries: what one instance holding all keys
    /// would report. Sorted for a snapshot (`in_order`), so that equal
    /// states snapshot to equal bytes whatever the worker count; a delta
    /// is in no particular order (see `operator::take_changed`).
    fn gather(
        &self,
        per_worker: Vec<Result<Vec<StateEntry>, EngineError>>,
        in_order: bool,
    ) -> Result<Vec<StateEntry>, EngineError> {
        let mut all = Vec::new();
        for (w, entries) in per_worker.into_iter().enumerate() {
            all.extend(self.owned(w, entries?));
        }
        if in_order {
            all.sort();
        }
        Ok(all)
    }
}

impl Operator for Parallel {
    fn name(&self) -> &'static str {
        self.instance_name()
    }

    fn output_schema(&self) -> SchemaRef {
        self.workers[0].output_schema()
    }

    /// The instance's: state does not depend on the number of workers.
    fn structure(&self) -> String {
        self.workers[0].structure()
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        self.used = true;
        let rows: usize = inputs.iter().map(ChangeBatch::num_rows).sum();
        let threads = rows > 0 && rows >= self.parallel_rows;
        self.threaded_step = threads;
        let owners = self.owners(inputs, threads)?;
        let outputs = run_each(&mut self.workers, threads, |w, worker| {
            let mine = inputs
                .iter()
                .zip(&owners)
                .map(|(input, owners)| select(input, owners, w))
                .collect::<Result<Vec<_>, EngineError>>()?;
            worker.step(&mine)
        });
        let outputs = outputs.into_iter().collect::<Result<Vec<_>, _>>()?;
        let out = concat_changes(&self.output_schema(), &outputs)?;
        if self.workers[0].keys_in_output() {
            Ok(out)
        } else {
            settle(out)
        }
    }

    /// Every worker sees the same watermarks; their outputs' agree.
    fn watermarks(&mut self, inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        let mut out = Watermarks::none();
        for (w, worker) in self.workers.iter_mut().enumerate() {
            let theirs = worker.watermarks(inputs)?;
            if w == 0 {
                out = theirs;
            }
        }
        Ok(out)
    }

    fn take_late_rows(&mut self) -> u64 {
        self.workers.iter_mut().map(|w| w.take_late_rows()).sum()
    }

    fn place(&mut self, object: ObjectId, node: u32) -> Result<(), EngineError> {
        if self.placement == (object, node) {
            return Ok(());
        }
        if self.used {
            return Err(EngineError::Invariant {
                operator: self.instance_name(),
                message: format!(
                    "moved to node {node} of {object} after its workers took state as node {} of {}",
                    self.placement.1, self.placement.0
                ),
            });
        }
        for worker in &mut self.workers {
            worker.place(object, node)?;
        }
        self.placement = (object, node);
        self.vnodes = Vnodes::new(object, node);
        Ok(())
    }

    /// On an error, workers before the failing one have cleared their
    /// record, as [`crate::Graph::take_state_changes`] says of nodes.
    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let taken = run_each(&mut self.workers, self.threaded_step, |_, w| {
            w.take_state_changes()
        });
        self.gather(taken, false)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        self.gather(
            run_each(&self.workers, true, |_, w| w.state_entries()),
            true,
        )
    }

    /// Each entry goes to the owner of its distribution key, in order.
    /// On an error some workers may have applied theirs (a restore that
    /// fails is redeployed, see [`crate::Coordinator::restore_vnode`]).
    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.used = true;
        let mut routed: Vec<Vec<StateEntry>> = vec![Vec::new(); self.workers.len()];
        for entry in entries {
            let key = parse_state_key(self.instance_name(), &entry.key)?;
            if key.distribution.is_empty() {
                // Kept by every worker alike (a flag, a watermark).
                routed.iter_mut().for_each(|r| r.push(entry.clone()));
            } else {
                routed[self.owner(key.distribution)].push(entry.clone());
            }
        }
        let threads = entries.len() >= self.parallel_rows;
        let pairs = self.workers.iter_mut().zip(routed);
        run_each(pairs, threads, |_, (worker, entries)| {
            worker.apply_state_entries(&entries)
        })
        .into_iter()
        .collect()
    }
}
