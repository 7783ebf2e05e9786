//! The backend over a fault-injecting store: failed calls, calls that land
//! but report failure, latency, short listings. A seal happens fully or not
//! at all, a retry succeeds, and sealed state read back is never wrong.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use weir_storage::state::{Fault, FaultConfig, FaultyStore, OpKind};
use weir_storage::{ObjectStateBackend, PartialKind, SealExtras, StateBackend, StateBackendError};

const ROOT: &str = "state";

/// Retry a call while it fails with a retryable error.
async fn retry<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StateBackendError>>,
{
    for _ in 0..200 {
        match call().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() => continue,
            Err(e) => panic!("{what}: non-retryable {e}"),
        }
    }
    panic!("{what}: still failing after 200 attempts");
}

/// What a clean reader of the real store sees of `epoch` must be all of it
/// (every vnode's chain as expected) or nothing.
async fn check_all_or_nothing(
    clean: &Arc<dyn ObjectStore>,
    epoch: u64,
    expected: &BTreeMap<u32, Vec<(PartialKind, Bytes)>>,
) -> bool {
    let reader = ObjectStateBackend::reader(clean.clone(), ROOT);
    if reader.read_seal(epoch).await.unwrap().is_none() {
        return false;
    }
    for (vnode, chain) in expected {
        assert_eq!(
            &reader.restore_chain(*vnode, epoch).await.unwrap(),
            chain,
            "epoch {epoch}"
        );
    }
    true
}

async fn run_seed(seed: u64) -> u64 {
    let clean: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = FaultyStore::new(
        clean.clone(),
        FaultConfig {
            seed,
            fail_rate: 0.15,
            fail_after_rate: 0.15,
            truncate_list_rate: 0.1,
            max_delay: Duration::from_micros(300),
        },
    );
    let store: Arc<dyn ObjectStore> = Arc::new(faulty.clone());
    let be = retry("claim", || {
        ObjectStateBackend::claim(store.clone(), ROOT, "node-a")
    })
    .await;
    let first = retry("latest", || be.latest_committed_epoch())
        .await
        .unwrap()
        + 1;
    let mut expected: BTreeMap<u32, Vec<(PartialKind, Bytes)>> = BTreeMap::new();
    for epoch in first..first + 25 {
        let mut next = expected.clone();
        for vnode in 0..3u32 {
            let kind = if epoch % 4 == 1 {
                PartialKind::Snapshot
            } else {
                PartialKind::Delta
            };
            let payload = Bytes::from(format!("{seed}/{vnode}/{epoch}"));
            retry("write", || {
                be.write_partial_kind(vnode, epoch, be.generation(), kind, payload.clone())
            })
            .await;
            let chain = next.entry(vnode).or_default();
            if kind == PartialKind::Snapshot {
                chain.clear();
            }
            chain.push((kind, payload));
        }
        // Seal, checking after every failed attempt that the epoch is sealed
        // completely or not at all.
        loop {
            match be
                .seal_epoch(epoch, &[0, 1, 2], SealExtras::default())
                .await
            {
                Ok(outcome) => {
                    assert!(outcome.is_sealed(), "epoch {epoch}: {outcome:?}");
                    break;
                }
                Err(e) if e.is_retryable() => {
                    check_all_or_nothing(&clean, epoch, &next).await;
                }
                Err(e) => panic!("seed {seed} epoch {epoch}: {e}"),
            }
        }
        assert!(check_all_or_nothing(&clean, epoch, &next).await);
        expected = next;
        if epoch % 5 == 0 {
            retry("prune", || be.prune_before(epoch)).await;
            assert!(check_all_or_nothing(&clean, epoch, &expected).await);
        }
        // Reads through the faulty store are right or fail, never wrong.
        for (vnode, chain) in &expected {
            if let Ok(got) = be.restore_chain(*vnode, epoch).await {
                assert_eq!(&got, chain);
            }
        }
    }
    faulty.injected()
}

#[tokio::test]
async fn seals_are_all_or_nothing_under_random_faults() {
    let mut injected = 0;
    for seed in 0..12 {
        injected += run_seed(seed).await;
    }
    assert!(injected > 100, "only {injected} faults injected");
}

#[tokio::test]
async fn a_lost_seal_acknowledgement_is_retried_idempotently() {
    let clean: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = FaultyStore::new(clean.clone(), FaultConfig::none());
    let store: Arc<dyn ObjectStore> = Arc::new(faulty.clone());
    let be = ObjectStateBackend::claim(store, ROOT, "node-a")
        .await
        .unwrap();
    be.write_partial(0, 1, be.generation(), Bytes::from_static(b"d1"))
        .await
        .unwrap();
    // The seal lands, but its answer is lost.
    faulty.push(OpKind::Put, Fault::FailAfter);
    let err = be.epoch_complete(1, &[0]).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(be.epoch_complete(1, &[0]).await.unwrap());
    // A timeout before the put reaches the store leaves nothing behind.
    be.write_partial(0, 2, be.generation(), Bytes::from_static(b"d2"))
        .await
        .unwrap();
    faulty.push(OpKind::Put, Fault::Timeout(Duration::from_millis(5)));
    assert!(be.epoch_complete(2, &[0]).await.unwrap_err().is_retryable());
    let reader = ObjectStateBackend::reader(clean, ROOT);
    assert_eq!(reader.latest_committed_epoch().await.unwrap(), Some(1));
    assert!(be.epoch_complete(2, &[0]).await.unwrap());
    assert_eq!(reader.latest_committed_epoch().await.unwrap(), Some(2));
}

#[tokio::test]
async fn a_deposed_leader_with_stale_listings_cannot_seal() {
    let clean: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = FaultyStore::new(clean.clone(), FaultConfig::none());
    let a = ObjectStateBackend::claim(Arc::new(faulty.clone()), ROOT, "node-a")
        .await
        .unwrap();
    let b = ObjectStateBackend::claim(clean.clone(), ROOT, "node-b")
        .await
        .unwrap();
    a.write_partial(0, 1, a.generation(), Bytes::from_static(b"a1"))
        .await
        .unwrap();
    // `a` misses both `b`'s claim and `b`'s takeover seal in its listings:
    // the create-only seal slot still stops it.
    faulty.push(OpKind::List, Fault::TruncateList(0));
    faulty.push(OpKind::List, Fault::TruncateList(0));
    let err = a.epoch_complete(1, &[0]).await.unwrap_err();
    assert!(
        matches!(&err, StateBackendError::SplitBrainCommit { committer, .. } if committer == "node-b"),
        "{err}"
    );
    let seal = b.read_seal(1).await.unwrap().unwrap();
    assert_eq!(seal.committer, "node-b");
}
