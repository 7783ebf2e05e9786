//! Checkpoints through a fault-injecting store: failed, lost-acknowledgement
//! and delayed puts, failed reads and short listings. Epochs keep running;
//! a failed checkpoint is followed by a full one; and every seal that lands
//! restores, into a fresh coordinator, exactly the state the live one had
//! when it sealed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use weir_common::{ChangeBatch, Epoch, ObjectId};
use weir_engine::{Coordinator, Graph, SourceBinding, VNODES, VnodeState};
use weir_storage::ObjectStateBackend;
use weir_storage::StateBackend as _;
use weir_storage::state::{Fault, FaultConfig, FaultyStore, OpKind};

use crate::metrics::Metrics;
use weir_engine::runtime::checkpoints::{ATTEMPTS, CheckpointLog, Checkpointer};

const TABLE: ObjectId = ObjectId(1);
const PROJECTION: ObjectId = ObjectId(2);
const QUERY: &str = "SELECT k, sum(x) AS s, count(*) AS n, max(x) AS hi FROM t GROUP BY k";

fn table_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("x", DataType::Int64, true),
    ]))
}

/// The projection's graph, planned afresh (graphs are not cloneable).
async fn planned() -> (Graph, Vec<SourceBinding>, SchemaRef) {
    let ctx = SessionContext::new();
    let table = MemTable::try_new(table_schema(), vec![vec![]]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    let plan = ctx.state().create_logical_plan(QUERY).await.unwrap();
    // Two workers, so the faults also hit state split over workers.
    let options = weir_planner::LowerOptions {
        workers: 2,
        ..Default::default()
    };
    let stream = weir_planner::lower(
        &plan,
        &ctx.state(),
        &|_| weir_planner::ScannedRelation::default(),
        &options,
    )
    .unwrap();
    let sources = stream
        .sources
        .iter()
        .map(|s| SourceBinding {
            object: TABLE,
            schema: s.schema.clone(),
        })
        .collect();
    (stream.graph, sources, stream.schema)
}

fn rows(k: &[&str], x: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        table_schema(),
        vec![
            Arc::new(StringArray::from(k.to_vec())),
            Arc::new(Int64Array::from(x.to_vec())),
        ],
    )
    .unwrap()
}

/// The projection's rows, rendered and sorted.
fn result(coordinator: &Coordinator) -> Vec<String> {
    let view = coordinator.view();
    let batches = view.projections[&PROJECTION].result.batches().unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// Restores the latest seal of `store` (read without faults) into a fresh
/// coordinator.
async fn restore_latest(store: Arc<dyn ObjectStore>) -> (u64, Coordinator) {
    let reader = ObjectStateBackend::reader(store, "state");
    let epoch = reader.latest_committed_epoch().await.unwrap().unwrap();
    let mut fresh = Coordinator::new();
    let (graph, sources, schema) = planned().await;
    fresh
        .deploy_for_restore(PROJECTION, graph, sources, schema)
        .unwrap();
    for vnode in 0..VNODES {
        for (_, bytes) in reader.restore_chain(vnode, epoch).await.unwrap() {
            fresh
                .restore_vnode(VnodeState::decode(&bytes).unwrap())
                .unwrap();
        }
    }
    fresh.finish_restore(Epoch(epoch)).unwrap();
    (epoch, fresh)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_seal_through_a_faulty_store_restores_exactly_the_sealed_state() {
    let clean: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultyStore::new(
        clean.clone(),
        FaultConfig {
            seed: 11,
            fail_rate: 0.15,
            fail_after_rate: 0.05,
            truncate_list_rate: 0.1,
            max_delay: Duration::from_millis(1),
        },
    ));
    let backend = loop {
        // Claiming goes through the faults too; a failed claim is retried.
        match ObjectStateBackend::claim(faulty.clone(), "state", "test").await {
            Ok(b) => break Arc::new(b),
            Err(e) => assert!(!e.is_fenced(), "{e}"),
        }
    };
    let mut checkpointer = Checkpointer::new(
        backend,
        "log".into(),
        Arc::new(parking_lot::Mutex::new(CheckpointLog::default())),
    );
    let metrics = Metrics::default();
    let fingerprints = HashMap::from([(PROJECTION, "fingerprint".to_string())]);

    let mut live = Coordinator::new();
    let (graph, sources, schema) = planned().await;
    live.deploy(PROJECTION, graph, sources, schema, &|_| Ok(None))
        .unwrap();

    let keys = ["a", "b", "c", "d", "e", "f", "g"];
    // (k, x) rows currently in the table, so retractions retract real rows.
    let mut table: Vec<(&str, i64)> = Vec::new();
    let mut rng = 0x1234_5678_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut sealed, mut failed, mut forced) = (0, 0, 0u64);
    for step in 1..=120u64 {
        let mut inserts: (Vec<&str>, Vec<i64>) = (vec![], vec![]);
        let mut retractions: (Vec<&str>, Vec<i64>) = (vec![], vec![]);
        for _ in 0..1 + next() % 6 {
            if !table.is_empty() && next() % 3 == 0 {
                let (k, x) = table.swap_remove((next() % table.len() as u64) as usize);
                retractions.0.push(k);
                retractions.1.push(x);
            } else {
                let row = (keys[(next() % 7) as usize], (next() % 100) as i64);
                table.push(row);
                inserts.0.push(row.0);
                inserts.1.push(row.1);
            }
        }
        live.push(TABLE, ChangeBatch::inserts(rows(&inserts.0, &inserts.1)));
        live.push(
            TABLE,
            ChangeBatch::retractions(rows(&retractions.0, &retractions.1)),
        );
        live.run_epoch().unwrap();
        if step % 20 == 10 {
            // Random faults are mostly absorbed by the checkpointer's
            // retries, so some checkpoints are made to fail outright: every
            // attempt at the epoch's first put fails.
            for _ in 0..ATTEMPTS {
                faulty.push(OpKind::Put, Fault::Fail);
            }
            forced += 1;
        }
        // The loop's three steps, run back to back.
        let pending = checkpointer.prepare(
            &mut live,
            step,
            &fingerprints,
            Duration::ZERO,
            &metrics,
            &mut weir_engine::runtime::streams::Streams::detached(),
        );
        if let Some(pending) = pending {
            checkpointer.finish(pending.write().await, &metrics);
        }
        assert!(checkpointer.fenced().is_none());
        if checkpointer.last_sealed_lsn() != Some(step) {
            failed += 1;
            continue;
        }
        sealed += 1;
        let (epoch, restored) = restore_latest(clean.clone()).await;
        assert_eq!(
            epoch,
            live.view().epoch.0,
            "step {step}: the latest seal is this epoch"
        );
        assert_eq!(
            result(&restored),
            result(&live),
            "step {step}: the state restored from epoch {epoch} differs from the live state"
        );
    }
    assert!(sealed >= 40, "only {sealed} of 120 checkpoints sealed");
    eprintln!("{sealed} checkpoints sealed, {failed} failed");
    assert!(
        failed >= forced,
        "only {failed} checkpoints failed, {forced} were made to fail"
    );
    let random = faulty.injected() - forced * u64::from(ATTEMPTS);
    assert!(
        random >= 20,
        "only {random} random faults were injected: the rates did not bite"
    );
}
