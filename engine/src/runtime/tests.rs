//! The runtime end to end, without a planner: graphs built by hand, table
//! changes by LSN, an in-memory state store whose writes can be held up.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use weir_common::ObjectId;
use weir_storage::state::{Fault, FaultConfig, FaultyStore, OpKind};
use weir_storage::{ObjectStateBackend, StateBackend as _};

use super::*;
use crate::coordinator::EpochReport;
use crate::ops::union::Union;
use crate::testing::{change, render, schema};
use crate::{Graph, Input};

const TABLE: ObjectId = ObjectId(1);
const PROJECTION: ObjectId = ObjectId(2);
const ROWS: &str = "k text";

struct Quiet;

impl RuntimeObserver for Quiet {
    fn epoch(&self, _: &EpochReport) {}
    fn checkpoint(&self, _: Duration, _: u64) {}
    fn checkpoint_failed(&self) {}
}

struct KeepLog;

impl TableLogCompaction for KeepLog {
    fn due(&self, _: u64) -> bool {
        false
    }
    fn compact(&self, _: u64, _: Tables) {}
}

async fn start(state: Arc<ObjectStateBackend>, barrier_interval: Duration) -> Runtime {
    Runtime::start(
        &tokio::runtime::Handle::current(),
        RuntimeConfig {
            barrier_interval,
            observer: Arc::new(Quiet),
            state,
            sealed_epoch: 0,
            last_lsn: 0,
            table_log_id: "log".into(),
            tables: Arc::default(),
            compaction: Box::new(KeepLog),
            sealed_streams: SealedStreams::default(),
        },
    )
}

async fn claim(store: Arc<dyn ObjectStore>, instance: &str) -> Arc<ObjectStateBackend> {
    Arc::new(
        ObjectStateBackend::claim(store, "state", instance)
            .await
            .unwrap(),
    )
}

/// A projection that is its table (a one-input union).
fn copy_of_table() -> Deployment {
    copy_of(PROJECTION, TABLE, ROWS)
}

/// A projection `id` that is its one input `object` of columns `columns`.
fn copy_of(id: ObjectId, object: ObjectId, columns: &str) -> Deployment {
    let mut graph = Graph::new(1);
    graph
        .add(
            Box::new(Union::new(1, schema(columns))),
            vec![Input::Source(0)],
        )
        .unwrap();
    Deployment {
        id,
        fingerprint: crate::state_fingerprint(&graph, &schema(columns)),
        graph,
        sources: vec![SourceBinding {
            object,
            schema: schema(columns),
        }],
        schema: schema(columns),
        tables: HashMap::new(),
        tables_at: 0,
        sources_read: Vec::new(),
        sink: None,
        rebuilt: false,
        table_watermarks: vec![],
    }
}

fn result(runtime: &Runtime) -> Vec<String> {
    let view = runtime.view();
    let mut rows = render(&view.projections[&PROJECTION].result.as_inserts().unwrap());
    rows.sort();
    rows
}

fn write(k: &str) -> Vec<(ObjectId, weir_common::ChangeBatch)> {
    vec![(TABLE, change(ROWS, &format!("{k} +1")))]
}

#[tokio::test]
async fn a_barrier_is_answered_by_the_first_epoch_that_covers_its_target() {
    let state = Arc::new(
        ObjectStateBackend::claim(Arc::new(InMemory::new()), "state", "test")
            .await
            .unwrap(),
    );
    let runtime = Arc::new(start(state, Duration::from_secs(3600)).await);
    runtime.deploy(copy_of_table()).await.unwrap();

    // A read of a session whose write (LSN 2) has not reached the runtime.
    let waiting = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .barrier(BarrierTarget { table_lsn: 2 })
                .await
                .unwrap();
            result(&runtime)
        }
    });
    runtime.changes(1, write("a"), Arc::default()).await;
    runtime
        .barrier(BarrierTarget { table_lsn: 1 })
        .await
        .unwrap();
    assert_eq!(result(&runtime), ["a +1"]);
    // LSN 2 was never sent, so nothing can have answered that barrier.
    assert!(!waiting.is_finished());
    assert_eq!(runtime.covered(), 1);

    runtime.changes(2, write("b"), Arc::default()).await;
    assert_eq!(waiting.await.unwrap(), ["a +1", "b +1"]);
    assert_eq!(runtime.covered(), 2);
}

#[tokio::test]
async fn epochs_go_on_while_a_checkpoint_is_written_and_seals_land_in_order() {
    let store = Arc::new(FaultyStore::new(
        Arc::new(InMemory::new()) as Arc<dyn ObjectStore>,
        FaultConfig::none(),
    ));
    let state = claim(store.clone(), "test").await;
    let runtime = start(state.clone(), Duration::from_millis(1)).await;
    runtime.deploy(copy_of_table()).await.unwrap();
    // The next partial written waits: the checkpoint of the first epoch
    // below cannot seal before it.
    store.push(OpKind::Put, Fault::Delay(Duration::from_secs(3)));
    runtime.changes(1, write("a"), Arc::default()).await;
    runtime
        .barrier(BarrierTarget { table_lsn: 1 })
        .await
        .unwrap();
    let first = runtime.view().epoch.0;
    // Give the loop's timer a chance to start that checkpoint.
    tokio::time::sleep(Duration::from_millis(20)).await;
    runtime.changes(2, write("b"), Arc::default()).await;
    runtime
        .barrier(BarrierTarget { table_lsn: 2 })
        .await
        .unwrap();
    assert!(runtime.view().epoch.0 > first);
    assert_eq!(result(&runtime), ["a +1", "b +1"]);
    let sealed = state.latest_committed_epoch().await.unwrap().unwrap_or(0);
    assert!(
        sealed < first,
        "epoch {first} sealed ({sealed}) before its held-up partial was written"
    );
    // Both epochs get sealed, in order; the latest seal covers LSN 2.
    let mut seen = Vec::new();
    while seen.last().copied().unwrap_or(0) < runtime.view().epoch.0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(epoch) = state.latest_committed_epoch().await.unwrap()
            && seen.last() != Some(&epoch)
        {
            seen.push(epoch);
        }
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let seal = state
        .read_seal(*seen.last().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seal.source_offsets.get(checkpoints::TABLE_LOG_OFFSET),
        Some(&"2".to_string())
    );
}

#[tokio::test]
async fn chains_compacted_in_the_background_restore_the_same_result() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let state = claim(store.clone(), "test").await;
    // A checkpoint at every epoch, so chains come due within the test.
    let runtime = start(state.clone(), Duration::from_millis(1)).await;
    runtime.deploy(copy_of_table()).await.unwrap();
    let mut lsn = 0;
    let mut compacted = false;
    for round in 0..400u64 {
        lsn += 1;
        // Inserts, and removals of rows written earlier: merged chains
        // must drop what a later delta removed.
        // Enough rows that most vnodes change in every epoch.
        let mut rows: Vec<String> = (0..300).map(|i| format!("r{round}_{i} +1")).collect();
        if round > 0 {
            rows.extend(
                (0..300)
                    .step_by(3)
                    .map(|i| format!("r{}_{i} -1", round - 1)),
            );
        }
        let rows = rows.join("; ");
        runtime
            .changes(lsn, vec![(TABLE, change(ROWS, &rows))], Arc::default())
            .await;
        runtime
            .barrier(BarrierTarget { table_lsn: lsn })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        if let Some(epoch) = state.latest_committed_epoch().await.unwrap() {
            let seal = state.read_seal(epoch).await.unwrap().unwrap();
            compacted |= seal.vnodes.values().any(|chain| {
                // Merged chains are written as `c...` batch objects.
                let name = chain[0].path.rsplit('/').next().unwrap_or("");
                name.starts_with('c')
            });
        }
        if compacted && round >= 100 {
            break;
        }
    }
    assert!(compacted, "no compaction was sealed in 400 epochs");
    let expected = result(&runtime);
    // Wait for a seal that covers the last write.
    let sealed = loop {
        let epoch = state.latest_committed_epoch().await.unwrap().unwrap();
        let seal = state.read_seal(epoch).await.unwrap().unwrap();
        if seal.source_offsets.get(checkpoints::TABLE_LOG_OFFSET) == Some(&lsn.to_string()) {
            break epoch;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let chains = state
        .read_seal(sealed)
        .await
        .unwrap()
        .unwrap()
        .vnodes
        .clone();
    assert!(
        chains
            .values()
            .all(|chain| chain.len() <= 1 + 2 * checkpoints::MAX_DELTAS),
        "chains stay bounded: {:?}",
        chains.values().map(Vec::len).max()
    );

    // Other processes take over the store and restore from that seal: one
    // reading the chains when it restores, one that started reading them
    // early.
    drop(runtime);
    for (round, prefetch) in [false, true].into_iter().enumerate() {
        let state = claim(store.clone(), &format!("test-{}", round + 2)).await;
        let prefetched = prefetch.then(|| ChainPrefetch::start(state.clone(), sealed));
        let restored = start(state, Duration::from_secs(3600)).await;
        restored
            .restore(Restore {
                epoch: sealed,
                deployments: vec![copy_of_table()],
                replay: Vec::new(),
                prefetched,
            })
            .await
            .unwrap();
        assert_eq!(result(&restored), expected, "prefetched: {prefetch}");
    }
}

/// A deployment's tables are as of a commit that may still be on its way
/// from the table log's reader: it waits for that commit, so the commit's
/// rows are counted once (from the backfill), not again as a change.
#[tokio::test]
async fn a_deployment_waits_for_the_commit_its_tables_are_as_of() {
    let state = Arc::new(
        ObjectStateBackend::claim(Arc::new(InMemory::new()), "state", "test")
            .await
            .unwrap(),
    );
    let runtime = start(state, Duration::from_secs(3600)).await;
    let mut table = crate::TableState::new(schema(ROWS), vec![0]).unwrap();
    table.apply(&change(ROWS, "a +1")).unwrap();
    for round in 0..20 {
        let lsn = round + 1;
        runtime.changes(lsn, write("a"), Arc::default()).await;
        let mut deployment = copy_of_table();
        deployment.tables.insert(
            TABLE,
            TableContents {
                state: table.clone(),
                user_columns: 1,
            },
        );
        deployment.tables_at = lsn;
        runtime.deploy(deployment).await.unwrap();
        runtime
            .barrier(BarrierTarget { table_lsn: lsn })
            .await
            .unwrap();
        assert_eq!(result(&runtime), ["a +1"], "round {round}");
        runtime.drop_projection(PROJECTION).await;
    }
}

const SOURCE: ObjectId = ObjectId(3);
const LATE: ObjectId = ObjectId(4);
const SOURCE_ROWS: &str = "k int";

/// A `datagen` source of the ten rows 1..=10, declared replayable or not.
fn ten_rows(replayable: bool) -> SourceToRead {
    SourceToRead {
        generation: 0,
        watermark: None,
        paused: false,
        tables: Vec::new(),
        id: SOURCE,
        name: "public.ten".into(),
        connector: "datagen".into(),
        options: [("max_rows", "10"), ("fields.k.kind", "sequence")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        schema: schema(SOURCE_ROWS),
        replayable,
    }
}

/// A projection `id` that is the source `source`.
fn copy_of_source(id: ObjectId, source: SourceToRead) -> Deployment {
    Deployment {
        sources_read: vec![source],
        ..copy_of(id, SOURCE, SOURCE_ROWS)
    }
}

fn row_count(runtime: &Runtime, id: ObjectId) -> usize {
    runtime.view().projections[&id].result.row_count() as usize
}

/// Waits (up to 5 s) until projection `id` holds `rows` rows; the caller
/// asserts what it holds then.
async fn until_rows(runtime: &Runtime, id: ObjectId, rows: usize) {
    for _ in 0..500 {
        if row_count(runtime, id) == rows {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The rows a projection created after a source's ten rows were read
/// holds: backfilled when the source can replay, none when it cannot.
async fn late_projection_rows(replayable: bool) -> usize {
    let state = claim(Arc::new(InMemory::new()), "test").await;
    let runtime = Arc::new(start(state, Duration::from_millis(20)).await);
    runtime
        .deploy(copy_of_source(PROJECTION, ten_rows(replayable)))
        .await
        .unwrap();
    until_rows(&runtime, PROJECTION, 10).await;
    assert_eq!(row_count(&runtime, PROJECTION), 10);
    runtime
        .deploy(copy_of_source(LATE, ten_rows(replayable)))
        .await
        .unwrap();
    row_count(&runtime, LATE)
}

#[tokio::test]
async fn a_late_projection_over_a_source_that_cannot_replay_starts_at_the_readers_position() {
    assert_eq!(late_projection_rows(true).await, 10);
    assert_eq!(late_projection_rows(false).await, 0);
}

/// A start from a seal that covered the source's first six rows, with
/// the projection over it rebuilt (its state was not restored).
async fn rebuilt_after_a_seal(replayable: bool) -> Arc<Runtime> {
    let state = claim(Arc::new(InMemory::new()), "test").await;
    let mut sealed = SealedStreams {
        epoch: 1,
        ..Default::default()
    };
    sealed
        .offsets
        .insert(SOURCE, [("0".to_string(), "6".to_string())].into());
    let runtime = Runtime::start(
        &tokio::runtime::Handle::current(),
        RuntimeConfig {
            barrier_interval: Duration::from_millis(20),
            observer: Arc::new(Quiet),
            state,
            sealed_epoch: 1,
            last_lsn: 0,
            table_log_id: "log".into(),
            tables: Arc::default(),
            compaction: Box::new(KeepLog),
            sealed_streams: sealed,
        },
    );
    runtime
        .deploy(Deployment {
            rebuilt: true,
            ..copy_of_source(PROJECTION, ten_rows(replayable))
        })
        .await
        .unwrap();
    Arc::new(runtime)
}

#[tokio::test]
async fn a_rebuilt_projection_over_a_source_that_cannot_replay_is_failed_not_partial() {
    // Replayable: rows 1..=6 are read again, then the reader goes on.
    let runtime = rebuilt_after_a_seal(true).await;
    until_rows(&runtime, PROJECTION, 10).await;
    assert_eq!(row_count(&runtime, PROJECTION), 10);

    let runtime = rebuilt_after_a_seal(false).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let view = runtime.view();
    let projection = &view.projections[&PROJECTION];
    let failure = projection.failure.as_deref().unwrap_or_default();
    assert!(failure.contains("public.ten cannot replay"), "{failure}");
    assert_eq!(projection.result.row_count(), 0);

    // A projection over the failed one is failed too, not built empty.
    let over = Deployment {
        rebuilt: true,
        ..copy_of(LATE, PROJECTION, SOURCE_ROWS)
    };
    runtime.deploy(over).await.unwrap();
    let failure = runtime.view().projections[&LATE].failure.clone();
    assert!(
        failure.is_some_and(|f| f.contains("a projection it reads failed")),
        "the projection over a failed one must fail"
    );
}

/// A source's next generation (the server's RESET OFFSET, or options that
/// name another input): its reader stopped, a seal awaited, then started
/// under the new generation, which reads from the beginning although the
/// seal holds the old generation's offsets.
#[tokio::test]
async fn a_source_of_a_new_generation_is_read_again_from_the_beginning() {
    let state = claim(Arc::new(InMemory::new()), "test").await;
    let runtime = Arc::new(start(state.clone(), Duration::from_millis(20)).await);
    runtime
        .deploy(copy_of_source(PROJECTION, ten_rows(true)))
        .await
        .unwrap();
    until_rows(&runtime, PROJECTION, 10).await;
    let before = state.latest_committed_epoch().await.unwrap().unwrap_or(0);
    runtime
        .restart_source(SourceToRead {
            paused: true,
            ..ten_rows(true)
        })
        .await;
    runtime.await_seal().await.unwrap();
    // Returned after a seal taken since.
    let sealed = state.latest_committed_epoch().await.unwrap().unwrap();
    assert!(sealed > before, "{sealed} > {before}");
    // Restarted as it was: it resumes where it was, nothing more.
    runtime.restart_source(ten_rows(true)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(row_count(&runtime, PROJECTION), 10);
    // Under the next generation: read again from the beginning, once.
    runtime
        .restart_source(SourceToRead {
            generation: 1,
            ..ten_rows(true)
        })
        .await;
    until_rows(&runtime, PROJECTION, 20).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(row_count(&runtime, PROJECTION), 20);
}

/// The relation of the one table `ten_rows` covers when it is declared
/// to cover tables: datagen's one split is "0".
const TABLE_OF_SOURCE: ObjectId = ObjectId(0);

/// `ten_rows` as a source that covers one table, relation
/// [`TABLE_OF_SOURCE`], which its rows feed instead of the source.
fn ten_rows_of_a_table(replayable: bool) -> SourceToRead {
    SourceToRead {
        generation: 0,
        tables: vec![TableToRead {
            id: TABLE_OF_SOURCE,
            name: "public.ten_table".into(),
            upstream: "public.ten".into(),
            schema: schema(SOURCE_ROWS),
            gaps_accepted: 0,
            watermark: None,
        }],
        ..ten_rows(replayable)
    }
}

#[tokio::test]
async fn a_split_named_after_a_relation_feeds_that_relation_not_its_source() {
    let state = claim(Arc::new(InMemory::new()), "test").await;
    let runtime = Arc::new(start(state, Duration::from_millis(20)).await);
    let over_table = |id| Deployment {
        sources_read: vec![ten_rows_of_a_table(true)],
        ..copy_of(id, TABLE_OF_SOURCE, SOURCE_ROWS)
    };
    runtime.deploy(over_table(PROJECTION)).await.unwrap();
    runtime
        .deploy(Deployment {
            sources_read: vec![ten_rows_of_a_table(true)],
            ..copy_of(LATE, SOURCE, SOURCE_ROWS)
        })
        .await
        .unwrap();
    until_rows(&runtime, PROJECTION, 10).await;
    assert_eq!(row_count(&runtime, PROJECTION), 10);
    assert_eq!(row_count(&runtime, LATE), 0);
    {
        let status = runtime.stream_status();
        let table = &status.sources[&TABLE_OF_SOURCE];
        assert_eq!(table.rows_in, 10);
        assert_eq!(table.offsets.get("0").map(String::as_str), Some("10"));
        assert_eq!(status.sources[&SOURCE].rows_in, 10);
    }
    // Every split ended: the table is complete with its source.
    for _ in 0..500 {
        if runtime.stream_status().sources[&TABLE_OF_SOURCE].status == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        runtime.stream_status().sources[&TABLE_OF_SOURCE].status,
        "completed"
    );
    // A projection over the table deployed later is backfilled with its
    // rows, read again from the source.
    const BACKFILLED: ObjectId = ObjectId(5);
    runtime.deploy(over_table(BACKFILLED)).await.unwrap();
    assert_eq!(row_count(&runtime, BACKFILLED), 10);
}

/// A sink whose writes take longer than a barrier interval: checkpoints
/// go on without it, and once the source is done and it has caught up,
/// a seal records its last pre-commit and it commits every row, though
/// no rows come after to close another epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sink_commits_everything_once_its_input_stops() {
    let state = claim(Arc::new(InMemory::new()), "test").await;
    let runtime = Arc::new(start(state, Duration::from_millis(20)).await);
    let sink = crate::runtime::streams::SinkToOpen {
        name: "public.slow".into(),
        connector: "blackhole".into(),
        options: [("write_delay".to_string(), "150ms".to_string())].into(),
        schema: schema(SOURCE_ROWS),
        paused: false,
    };
    runtime
        .deploy(Deployment {
            sink: Some(sink),
            ..copy_of_source(PROJECTION, ten_rows(true))
        })
        .await
        .unwrap();
    let committed = || {
        runtime
            .stream_status()
            .sinks
            .get(&PROJECTION)
            .map(|s| (s.status, s.committed_rows))
    };
    for _ in 0..500 {
        if committed() == Some(("running", 10)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(committed(), Some(("running", 10)));
}
