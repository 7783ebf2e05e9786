//! The `StateBackend` conformance suite: every case takes a fresh fixture
//! (store + root) from a factory, so it runs unchanged on memory, local disk
//! and S3.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use weir_storage::state::SealKind;
use weir_storage::{
    ObjectStateBackend, PartialKind, SealExtras, SealOutcome, StateBackend, StateBackendError,
};

/// Where one case keeps its state. `_dir` keeps a temporary directory alive.
pub struct Fixture {
    pub store: Arc<dyn ObjectStore>,
    pub root: String,
    pub _dir: Option<Arc<tempfile::TempDir>>,
}

/// Run every case, each on a fresh fixture; `epochs` sizes the steady-load case.
pub async fn run_suite(name: &str, epochs: u64, factory: &dyn Fn() -> Fixture) {
    macro_rules! case {
        ($f:ident $(, $arg:expr)*) => {{
            eprintln!("[{name}] {}", stringify!($f));
            $f(factory() $(, $arg)*).await;
        }};
    }
    case!(idempotent_and_conflicting_writes);
    case!(seals_build_chains_and_read_back);
    case!(authoritative_version_fences_writes);
    case!(second_claim_fences_the_first);
    case!(concurrent_seals_have_one_winner);
    case!(pruning_keeps_what_seals_name_and_bounds_objects, epochs);
    case!(reopening_gives_the_same_answers);
    case!(corruption_is_detected);
    case!(compactions_replace_what_they_merged);
    case!(batched_partials_seal_restore_and_prune);
    case!(batched_compactions_stay_wanted_until_each_is_sealed_or_forgotten);
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn claim(f: &Fixture, instance: &str) -> ObjectStateBackend {
    ObjectStateBackend::claim(f.store.clone(), &f.root, instance)
        .await
        .unwrap()
}

fn key(f: &Fixture, name: &str) -> Path {
    Path::from(format!("{}/{name}", f.root))
}

/// Every object under the fixture's root.
async fn objects(f: &Fixture) -> Vec<String> {
    let prefix = Path::from(f.root.as_str());
    let metas: Vec<_> = f.store.list(Some(&prefix)).try_collect().await.unwrap();
    metas.into_iter().map(|m| m.location.to_string()).collect()
}

async fn object_bytes(f: &Fixture, path: &Path) -> Vec<u8> {
    let object = f.store.get(path).await.unwrap();
    object.bytes().await.unwrap().to_vec()
}

async fn idempotent_and_conflicting_writes(f: Fixture) {
    let be = claim(&f, "host:1:a").await;
    let v = be.authoritative_version();
    be.write_partial(0, 1, v, b("x")).await.unwrap();
    be.write_partial(0, 1, v, b("x")).await.unwrap();
    let err = be.write_partial(0, 1, v, b("y")).await.unwrap_err();
    assert!(
        matches!(&err, StateBackendError::Serialization(m) if m.contains("conflicting rewrite")),
        "{err}"
    );
    // Same payload, other kind: a different blob, so also a conflict.
    let err = be
        .write_partial_kind(0, 1, v, PartialKind::Snapshot, b("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, StateBackendError::Serialization(_)), "{err}");
    // Unsealed: the writer reads its own blob back.
    assert_eq!(be.read_partial(0, 1).await.unwrap(), Some(b("x")));
    assert_eq!(be.read_partial(1, 1).await.unwrap(), None);
    assert!(be.epoch_complete(1, &[0]).await.unwrap());
    // Replaying the write after the seal is still fine.
    be.write_partial(0, 1, v, b("x")).await.unwrap();
    assert_eq!(be.read_partial(0, 1).await.unwrap(), Some(b("x")));
}

async fn seals_build_chains_and_read_back(f: Fixture) {
    let be = claim(&f, "node-a").await;
    let v = be.generation();
    // The claim on an empty store took slot 0 with a takeover seal.
    assert_eq!(be.latest_committed_epoch().await.unwrap(), Some(0));

    be.write_partial_kind(0, 1, v, PartialKind::Snapshot, b("s1"))
        .await
        .unwrap();
    be.write_partial(1, 1, v, b("d1")).await.unwrap();
    let extras = SealExtras {
        source_offsets: BTreeMap::from([("kafka:t/0".into(), "42".into())]),
        sink_descriptors: BTreeMap::from([("sink".into(), "txn-1".into())]),
        compactions: Vec::new(),
    };
    let SealOutcome::Sealed(m1) = be.seal_epoch(1, &[0, 1], extras.clone()).await.unwrap() else {
        panic!("epoch 1 not sealed");
    };
    assert_eq!(
        (m1.epoch, m1.kind, m1.committer.as_str()),
        (1, SealKind::Epoch, "node-a")
    );
    assert_eq!((m1.generation, m1.bytes_written), (v, 4));
    assert_eq!(m1.source_offsets, extras.source_offsets);

    be.write_partial(0, 2, v, b("d2")).await.unwrap();
    assert!(
        !be.epoch_complete(2, &[0, 1]).await.unwrap(),
        "vnode 1 has no partial"
    );
    assert!(be.epoch_complete(2, &[0]).await.unwrap());
    be.write_partial_kind(0, 3, v, PartialKind::Snapshot, b("s3"))
        .await
        .unwrap();
    assert!(be.epoch_complete(3, &[0]).await.unwrap());

    let snap = |s| (PartialKind::Snapshot, b(s));
    let delta = |s| (PartialKind::Delta, b(s));
    assert_eq!(
        be.restore_chain(0, 2).await.unwrap(),
        vec![snap("s1"), delta("d2")]
    );
    assert_eq!(be.restore_chain(0, 3).await.unwrap(), vec![snap("s3")]);
    assert_eq!(be.restore_chain(1, 3).await.unwrap(), vec![delta("d1")]);
    assert_eq!(be.restore_chain(7, 3).await.unwrap(), vec![]);
    assert!(matches!(
        be.restore_chain(0, 9).await,
        Err(StateBackendError::NotFound { epoch: 9, .. })
    ));
    assert_eq!(be.read_partial(0, 2).await.unwrap(), Some(b("d2")));
    assert_eq!(
        be.read_partial(1, 2).await.unwrap(),
        None,
        "vnode 1 unchanged in 2"
    );
    let stats = be.chain_stats(0).await.unwrap().unwrap();
    assert_eq!(
        (stats.sealed_epoch, stats.snapshot_epoch, stats.delta_count),
        (3, Some(3), 0)
    );
    let stats = be.chain_stats(1).await.unwrap().unwrap();
    assert_eq!(
        (stats.snapshot_epoch, stats.delta_count, stats.delta_bytes),
        (None, 1, 2)
    );

    // Retrying a seal is idempotent; sealing behind the latest or into a
    // marker slot is not possible.
    assert!(matches!(
        be.seal_epoch(3, &[0], SealExtras::default()).await.unwrap(),
        SealOutcome::AlreadySealed(_)
    ));
    be.write_partial(0, 0, v, b("zero")).await.unwrap();
    assert!(matches!(
        be.seal_epoch(0, &[0], SealExtras::default()).await,
        Err(StateBackendError::SealOrder { epoch: 0, .. })
    ));

    // Skipping epochs fills the gap with marker seals carrying the chain.
    be.write_partial(0, 6, v, b("d6")).await.unwrap();
    assert!(be.epoch_complete(6, &[0]).await.unwrap());
    let seals = be.list_seals().await.unwrap();
    let kinds: Vec<_> = seals.iter().map(|m| (m.epoch, m.kind)).collect();
    use SealKind::*;
    assert_eq!(
        kinds,
        vec![
            (0, Takeover),
            (1, Epoch),
            (2, Epoch),
            (3, Epoch),
            (4, Gap),
            (5, Gap),
            (6, Epoch)
        ]
    );
    assert_eq!(seals[4].vnodes, seals[3].vnodes);
    assert_eq!(seals[4].source_offsets, seals[3].source_offsets);
    assert_eq!(
        be.restore_chain(0, 6).await.unwrap(),
        vec![snap("s3"), delta("d6")]
    );
    assert_eq!(
        be.read_seal(1).await.unwrap().unwrap().sink_descriptors,
        extras.sink_descriptors
    );
}

async fn authoritative_version_fences_writes(f: Fixture) {
    let be = claim(&f, "node-a").await;
    let g = be.generation();
    assert_eq!(be.authoritative_version(), g);
    be.set_authoritative_version(g + 5);
    be.set_authoritative_version(g + 1); // monotonic: ignored
    assert_eq!(be.authoritative_version(), g + 5);
    let err = be.write_partial(0, 1, g, b("x")).await.unwrap_err();
    assert!(
        matches!(err, StateBackendError::StaleVersion { caller, authoritative } if caller == g && authoritative == g + 5),
        "{err}"
    );
    assert!(err.is_fenced() && !err.is_retryable());
    be.write_partial(0, 1, g + 5, b("x")).await.unwrap();
    be.write_partial(0, 1, g + 6, b("x")).await.unwrap();
    let sealed = be.seal_epoch(1, &[0], SealExtras::default()).await.unwrap();
    let SealOutcome::Sealed(m) = sealed else {
        panic!()
    };
    assert_eq!(m.assignment_version, g + 5);

    let reader = ObjectStateBackend::reader(f.store.clone(), &f.root);
    assert!(matches!(
        reader.write_partial(0, 2, 99, b("x")).await,
        Err(StateBackendError::ReadOnly)
    ));
}

async fn second_claim_fences_the_first(f: Fixture) {
    let a = claim(&f, "node-a").await;
    a.write_partial_kind(0, 1, a.generation(), PartialKind::Snapshot, b("a1"))
        .await
        .unwrap();
    assert!(a.epoch_complete(1, &[0]).await.unwrap());
    // A slow partial of `a` for epoch 2 lands before `b` claims.
    a.write_partial(0, 2, a.generation(), b("a2"))
        .await
        .unwrap();

    let bk = claim(&f, "node-b").await;
    assert!(bk.generation() > a.generation());
    let takeover = bk.read_seal(2).await.unwrap().unwrap();
    assert_eq!(
        (takeover.kind, takeover.committer.as_str()),
        (SealKind::Takeover, "node-b")
    );
    assert_eq!(
        bk.restore_chain(0, 2).await.unwrap(),
        vec![(PartialKind::Snapshot, b("a1"))]
    );

    for epoch in [2, 3] {
        let err = a.epoch_complete(epoch, &[0]).await.unwrap_err();
        assert!(err.is_fenced(), "epoch {epoch}: {err}");
    }
    // Once fenced, `a` refuses writes without asking the store.
    let err = a
        .write_partial(0, 3, a.generation(), b("a3"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StateBackendError::StaleVersion { .. }),
        "{err}"
    );
    assert!(a.prune_before(3).await.unwrap_err().is_fenced());

    bk.write_partial(0, 3, bk.generation(), b("b3"))
        .await
        .unwrap();
    assert!(bk.epoch_complete(3, &[0]).await.unwrap());
    assert_eq!(
        bk.restore_chain(0, 3).await.unwrap(),
        vec![
            (PartialKind::Snapshot, b("a1")),
            (PartialKind::Delta, b("b3"))
        ]
    );
    // Only sealed state is trusted: `a`'s blob of epoch 2 is not epoch 2's.
    assert_eq!(bk.read_partial(0, 2).await.unwrap(), None);
}

async fn concurrent_seals_have_one_winner(f: Fixture) {
    // Two writers that both believe they hold generation 1: only the
    // create-only seal decides.
    let a = ObjectStateBackend::open_unclaimed(f.store.clone(), &f.root, "node-a", 1);
    let c = ObjectStateBackend::open_unclaimed(f.store.clone(), &f.root, "node-c", 1);
    for epoch in 1..=6u64 {
        a.write_partial(0, epoch, 1, b(&format!("a{epoch}")))
            .await
            .unwrap();
        c.write_partial(0, epoch, 1, b(&format!("c{epoch}")))
            .await
            .unwrap();
        let (ra, rc) = tokio::join!(a.epoch_complete(epoch, &[0]), c.epoch_complete(epoch, &[0]));
        let (winner, loser_err, loser) = match (ra, rc) {
            (Ok(true), Err(e)) => ("node-a", e, "node-c"),
            (Err(e), Ok(true)) => ("node-c", e, "node-a"),
            other => panic!("epoch {epoch}: expected exactly one winner, got {other:?}"),
        };
        match loser_err {
            StateBackendError::SplitBrainCommit { committer, self_id } => {
                assert_eq!((committer.as_str(), self_id.as_str()), (winner, loser));
            }
            e => panic!("epoch {epoch}: loser got {e}"),
        }
        let seal = a.read_seal(epoch).await.unwrap().unwrap();
        assert_eq!(seal.committer, winner);
        let want = format!("{}{epoch}", &winner[5..]);
        assert_eq!(a.read_partial(0, epoch).await.unwrap(), Some(b(&want)));
    }
}

async fn pruning_keeps_what_seals_name_and_bounds_objects(f: Fixture, epochs: u64) {
    const K: u64 = 5;
    const VNODES: u32 = 4;
    // A deposed writer keeps leaving garbage for a while.
    let zombie = claim(&f, "zombie").await;
    let be = claim(&f, "leader").await;
    let start = be.latest_committed_epoch().await.unwrap().unwrap() + 1;
    let mut expected: BTreeMap<u32, Vec<(PartialKind, Bytes)>> = BTreeMap::new();
    let mut most = 0;
    for epoch in start..start + epochs {
        for vnode in 0..VNODES {
            let payload = b(&format!("v{vnode}e{epoch}"));
            let stats = be.chain_stats(vnode).await.unwrap();
            // The engine's rule: snapshot every K epochs of deltas.
            let kind = match stats {
                Some(s) if s.snapshot_epoch.is_some() && (s.delta_count as u64) < K - 1 => {
                    PartialKind::Delta
                }
                _ => PartialKind::Snapshot,
            };
            be.write_partial_kind(vnode, epoch, be.generation(), kind, payload.clone())
                .await
                .unwrap();
            let chain = expected.entry(vnode).or_default();
            if kind == PartialKind::Snapshot {
                chain.clear();
            }
            chain.push((kind, payload));
        }
        if epoch < start + 10 {
            zombie
                .write_partial(0, epoch + 1, zombie.generation(), b("garbage"))
                .await
                .unwrap();
        }
        let vnodes: Vec<u32> = (0..VNODES).collect();
        assert!(be.epoch_complete(epoch, &vnodes).await.unwrap());
        be.prune_before(epoch).await.unwrap();
        let count = objects(&f).await.len();
        most = most.max(count);
        if epoch % 25 == 0 {
            for vnode in 0..VNODES {
                assert_eq!(
                    be.restore_chain(vnode, epoch).await.unwrap(),
                    expected[&vnode]
                );
            }
        }
    }
    // 2 fence entries + the latest seal + at most K blobs per vnode's chain
    // (+ the zombie's blobs at epochs `epoch` and `epoch + 1`, not below
    // `before` yet, while it is still writing).
    let bound = 2 + 1 + (VNODES as usize) * (K as usize) + 2;
    assert!(
        most <= bound,
        "{most} objects > {bound}: {:#?}",
        objects(&f).await
    );
    let last = start + epochs - 1;
    assert_eq!(be.list_seals().await.unwrap().len(), 1);
    for vnode in 0..VNODES {
        assert_eq!(
            be.restore_chain(vnode, last).await.unwrap(),
            expected[&vnode]
        );
    }
    let leftovers: Vec<_> = objects(&f)
        .await
        .into_iter()
        .filter(|o| o.contains("zombie"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "zombie garbage survived: {leftovers:?}"
    );
}

/// A chain merged in the background replaces the blobs it merged at the
/// next seal, survives pruning while it waits for that seal, and is
/// dropped when a snapshot reset the chain in between.
async fn compactions_replace_what_they_merged(f: Fixture) {
    let be = claim(&f, "node-a").await;
    let g = be.generation();
    let snap = |s| (PartialKind::Snapshot, b(s));
    let delta = |s| (PartialKind::Delta, b(s));
    let seal = |epoch, vnodes: &'static [u32], compactions| {
        let be = &be;
        async move {
            let extras = SealExtras {
                compactions,
                ..SealExtras::default()
            };
            let outcome = be.seal_epoch(epoch, vnodes, extras).await.unwrap();
            assert!(outcome.is_sealed(), "epoch {epoch}: {outcome:?}");
        }
    };
    be.write_partial_kind(0, 1, g, PartialKind::Snapshot, b("s1"))
        .await
        .unwrap();
    be.write_partial_kind(1, 1, g, PartialKind::Snapshot, b("t1"))
        .await
        .unwrap();
    seal(1, &[0, 1], vec![]).await;
    be.write_partial(0, 2, g, b("d2")).await.unwrap();
    be.write_partial(1, 2, g, b("u2")).await.unwrap();
    seal(2, &[0, 1], vec![]).await;

    // Merge both chains as of epoch 2.
    let mut compactions = Vec::new();
    for (vnode, merged) in [(0, "m0"), (1, "m1")] {
        let chain: Vec<_> = be
            .chain_blobs(vnode, 2)
            .await
            .unwrap()
            .into_iter()
            .map(|(entry, _)| entry)
            .collect();
        assert_eq!(chain.len(), 2);
        compactions.push(
            be.write_compaction(vnode, 2, &chain, b(merged))
                .await
                .unwrap(),
        );
    }
    // Writing the same merge again is fine, other bytes are not.
    let chain0: Vec<_> = be.read_seal(2).await.unwrap().unwrap().vnodes[&0].clone();
    assert_eq!(
        be.write_compaction(0, 2, &chain0, b("m0")).await.unwrap(),
        compactions[0]
    );
    assert!(
        be.write_compaction(0, 2, &chain0, b("other"))
            .await
            .is_err()
    );

    // Epoch 3: vnode 0 gets a delta, vnode 1 a snapshot that resets its
    // chain before the compaction lands. Pruning meanwhile keeps both
    // compacted blobs, though their epoch is old and no seal names them.
    be.write_partial(0, 3, g, b("d3")).await.unwrap();
    be.write_partial_kind(1, 3, g, PartialKind::Snapshot, b("t3"))
        .await
        .unwrap();
    seal(3, &[0, 1], vec![]).await;
    be.prune_before(3).await.unwrap();
    let names = objects(&f).await;
    for c in &compactions {
        assert!(
            names.iter().any(|n| n.ends_with(&c.entry.path)),
            "{} was pruned before its seal: {names:?}",
            c.entry.path
        );
    }

    be.write_partial(0, 4, g, b("d4")).await.unwrap();
    seal(4, &[0], compactions.clone()).await;
    let sealed = be.read_seal(4).await.unwrap().unwrap();
    assert_eq!(sealed.vnodes[&0][0], compactions[0].entry);
    assert_eq!(sealed.bytes_written, 2 + 2, "d4 and m0; m1 did not apply");
    assert_eq!(
        be.restore_chain(0, 4).await.unwrap(),
        vec![snap("m0"), delta("d3"), delta("d4")]
    );
    assert_eq!(be.restore_chain(1, 4).await.unwrap(), vec![snap("t3")]);
    // The chain before the compaction still reads as it was.
    assert_eq!(
        be.restore_chain(0, 3).await.unwrap(),
        vec![snap("s1"), delta("d2"), delta("d3")]
    );

    // The compaction that no longer applies is garbage once forgotten;
    // the one sealed stays, and what it replaced goes.
    be.forget_compaction(&compactions[1]);
    be.write_partial(0, 5, g, b("d5")).await.unwrap();
    seal(5, &[0], vec![]).await;
    be.prune_before(5).await.unwrap();
    let names = objects(&f).await;
    assert!(
        names
            .iter()
            .any(|n| n.ends_with(&compactions[0].entry.path))
    );
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(&compactions[1].entry.path)),
        "{names:?}"
    );
    assert_eq!(
        be.restore_chain(0, 5).await.unwrap(),
        vec![snap("m0"), delta("d3"), delta("d4"), delta("d5")]
    );
    assert!(
        !names
            .iter()
            .any(|n| n.contains("/e00000000000000000001/v00000-")),
        "s1 is no longer named by any seal: {names:?}"
    );
}

async fn reopening_gives_the_same_answers(f: Fixture) {
    let be = claim(&f, "node-a").await;
    let g = be.generation();
    for epoch in 1..=4u64 {
        let kind = if epoch == 1 {
            PartialKind::Snapshot
        } else {
            PartialKind::Delta
        };
        for vnode in 0..2 {
            be.write_partial_kind(vnode, epoch, g, kind, b(&format!("{vnode}/{epoch}")))
                .await
                .unwrap();
        }
        assert!(be.epoch_complete(epoch, &[0, 1]).await.unwrap());
    }
    let latest = be.latest_committed_epoch().await.unwrap();
    let chains = [
        be.restore_chain(0, 4).await.unwrap(),
        be.restore_chain(1, 4).await.unwrap(),
    ];
    let stats = be.chain_stats(0).await.unwrap();
    let seal = be.read_seal(4).await.unwrap().unwrap();
    drop(be);

    let reader = ObjectStateBackend::reader(f.store.clone(), &f.root);
    assert_eq!(reader.latest_committed_epoch().await.unwrap(), latest);
    assert_eq!(reader.restore_chain(0, 4).await.unwrap(), chains[0]);
    assert_eq!(reader.restore_chain(1, 4).await.unwrap(), chains[1]);
    assert_eq!(reader.chain_stats(0).await.unwrap(), stats);
    assert_eq!(reader.read_seal(4).await.unwrap().unwrap(), seal);

    // A restarted leader claims anew: its takeover seal carries the state.
    let again = claim(&f, "node-a").await;
    assert!(again.generation() > g);
    assert_eq!(again.latest_committed_epoch().await.unwrap(), Some(5));
    assert_eq!(again.restore_chain(0, 5).await.unwrap(), chains[0]);
    assert_eq!(again.restore_chain(1, 4).await.unwrap(), chains[1]);
}

/// The partials of an epoch written together share one object; each
/// vnode's chain reads back only its own frame, a retry is idempotent, a
/// damaged frame fails only its vnode, and pruning deletes a shared object
/// once no retained seal names any frame of it.
async fn batched_partials_seal_restore_and_prune(f: Fixture) {
    let be = claim(&f, "node-a").await;
    let v = be.generation();
    let partials_in = |objects: Vec<String>| {
        objects
            .into_iter()
            .filter(|o| o.contains("/partials/"))
            .collect::<Vec<_>>()
    };
    let first = vec![
        (0, PartialKind::Snapshot, b("s0")),
        (1, PartialKind::Snapshot, b("s1-longer")),
        (2, PartialKind::Delta, b("d2")),
    ];
    be.write_partials(1, v, &first).await.unwrap();
    be.write_partials(1, v, &first).await.unwrap();
    let mut other = first.clone();
    other[2].2 = b("D2");
    let err = be.write_partials(1, v, &other).await.unwrap_err();
    assert!(
        matches!(&err, StateBackendError::Serialization(m) if m.contains("conflicting rewrite")),
        "{err}"
    );
    // Before the seal, the writer reads its own partials out of the batch.
    assert_eq!(be.read_partial(1, 1).await.unwrap(), Some(b("s1-longer")));
    assert_eq!(be.read_partial(3, 1).await.unwrap(), None);
    assert!(be.epoch_complete(1, &[0, 1, 2]).await.unwrap());
    // Asked again after the seal: still complete, though the batch's
    // entries are no longer held in memory.
    assert!(be.epoch_complete(1, &[0, 1, 2]).await.unwrap());
    assert_eq!(partials_in(objects(&f).await).len(), 1);
    let seal = be.read_seal(1).await.unwrap().unwrap();
    let offsets: Vec<u64> = (0..3).map(|v| seal.vnodes[&v][0].offset).collect();
    assert_eq!(
        offsets,
        vec![0, 22, 51],
        "frames are 20 bytes of header + payload"
    );

    be.write_partials(2, v, &[(1, PartialKind::Delta, b("x"))])
        .await
        .unwrap();
    assert!(be.epoch_complete(2, &[1]).await.unwrap());
    let snap = |s| (PartialKind::Snapshot, b(s));
    let delta = |s| (PartialKind::Delta, b(s));
    let want = [
        vec![snap("s0")],
        vec![snap("s1-longer"), delta("x")],
        vec![delta("d2")],
    ];
    // A reader of its own reads the offsets from the stored seal.
    let reader = ObjectStateBackend::reader(f.store.clone(), &f.root);
    for (vnode, chain) in want.iter().enumerate() {
        assert_eq!(&be.restore_chain(vnode as u32, 2).await.unwrap(), chain);
        assert_eq!(&reader.restore_chain(vnode as u32, 2).await.unwrap(), chain);
    }

    // Damage vnode 1's frame in the shared object: only vnode 1 fails.
    let shared = key(&f, &seal.vnodes[&1][0].path);
    let mut object = object_bytes(&f, &shared).await;
    object[22 + 20] ^= 0x20;
    f.store
        .put(&shared, PutPayload::from(object.clone()))
        .await
        .unwrap();
    let err = be.restore_chain(1, 2).await.unwrap_err();
    assert!(
        matches!(&err, StateBackendError::Serialization(m) if m.contains("CRC")),
        "{err}"
    );
    assert_eq!(be.restore_chain(0, 2).await.unwrap(), want[0]);
    assert_eq!(be.restore_chain(2, 2).await.unwrap(), want[2]);
    object[22 + 20] ^= 0x20;
    f.store
        .put(&shared, PutPayload::from(object))
        .await
        .unwrap();

    // A snapshot of every vnode: nothing names epochs 1 and 2 any more.
    let third: Vec<_> = (0..3)
        .map(|vnode| (vnode, PartialKind::Snapshot, b(&format!("t{vnode}"))))
        .collect();
    be.write_partials(3, v, &third).await.unwrap();
    assert!(be.epoch_complete(3, &[0, 1, 2]).await.unwrap());
    be.prune_before(3).await.unwrap();
    let left = partials_in(objects(&f).await);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains("/e00000000000000000003/"), "{left:?}");
    for vnode in 0..3u32 {
        assert_eq!(
            be.restore_chain(vnode, 3).await.unwrap(),
            vec![(PartialKind::Snapshot, b(&format!("t{vnode}")))]
        );
    }
}

/// Merged chains written together share an object; forgetting one of them
/// (it no longer applies) must not let a prune take the object while the
/// others still wait for their seal.
async fn batched_compactions_stay_wanted_until_each_is_sealed_or_forgotten(f: Fixture) {
    let be = claim(&f, "node-a").await;
    let g = be.generation();
    let vnodes = [0u32, 1, 2];
    let write = |epoch: u64, kind: PartialKind, vs: Vec<u32>| {
        let parts: Vec<_> = vs
            .iter()
            .map(|v| (*v, kind, b(&format!("{v}@{epoch}"))))
            .collect();
        let be = &be;
        async move {
            be.write_partials(epoch, g, &parts).await.unwrap();
            assert!(be.epoch_complete(epoch, &vs).await.unwrap());
        }
    };
    write(1, PartialKind::Snapshot, vnodes.to_vec()).await;
    write(2, PartialKind::Delta, vnodes.to_vec()).await;
    let mut items = Vec::new();
    for v in vnodes {
        let chain: Vec<_> = be.chain_blobs(v, 2).await.unwrap();
        assert_eq!(chain.len(), 2);
        let entries = chain.into_iter().map(|(e, _)| e).collect();
        items.push((v, entries, b(&format!("m{v}"))));
    }
    let compactions = be.write_compactions(2, items.clone()).await.unwrap();
    assert_eq!(be.write_compactions(2, items).await.unwrap(), compactions);
    let path = compactions[0].entry.path.clone();
    assert!(compactions.iter().all(|c| c.entry.path == path));

    // Vnode 1's chain is reset by a snapshot: its compaction will not
    // apply and is forgotten; the other two still wait for a seal.
    write(3, PartialKind::Snapshot, vec![1]).await;
    be.forget_compaction(&compactions[1]);
    be.prune_before(3).await.unwrap();
    let names = objects(&f).await;
    assert!(
        names.iter().any(|n| n.ends_with(&path)),
        "{path} was pruned while two of its compactions wait: {names:?}"
    );
    write(4, PartialKind::Delta, vec![0]).await;
    let extras = SealExtras {
        compactions: vec![compactions[0].clone(), compactions[2].clone()],
        ..SealExtras::default()
    };
    be.write_partials(5, g, &[(2, PartialKind::Delta, b("2@5"))])
        .await
        .unwrap();
    assert!(be.seal_epoch(5, &[2], extras).await.unwrap().is_sealed());
    be.prune_before(5).await.unwrap();
    let snap = |s: &str| (PartialKind::Snapshot, b(s));
    let delta = |s: &str| (PartialKind::Delta, b(s));
    assert_eq!(
        be.restore_chain(0, 5).await.unwrap(),
        vec![snap("m0"), delta("0@4")]
    );
    assert_eq!(be.restore_chain(1, 5).await.unwrap(), vec![snap("1@3")]);
    assert_eq!(
        be.restore_chain(2, 5).await.unwrap(),
        vec![snap("m2"), delta("2@5")]
    );
}

async fn corruption_is_detected(f: Fixture) {
    let be = claim(&f, "node-a").await;
    be.write_partial_kind(0, 1, be.generation(), PartialKind::Snapshot, b("hello"))
        .await
        .unwrap();
    assert!(be.epoch_complete(1, &[0]).await.unwrap());
    let seal = be.read_seal(1).await.unwrap().unwrap();
    let path = key(&f, &seal.vnodes[&0][0].path);
    let mut blob = object_bytes(&f, &path).await;
    *blob.last_mut().unwrap() ^= 0x20; // "hellO"
    f.store.put(&path, PutPayload::from(blob)).await.unwrap();
    for err in [
        be.restore_chain(0, 1).await.unwrap_err(),
        be.read_partial(0, 1).await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, StateBackendError::Serialization(m) if m.contains("CRC")),
            "{err}"
        );
    }
}

#[tokio::test]
async fn memory() {
    run_suite("memory", 200, &|| Fixture {
        store: Arc::new(object_store::memory::InMemory::new()),
        root: "state".into(),
        _dir: None,
    })
    .await;
}

#[tokio::test]
async fn local_filesystem() {
    run_suite("fs", 200, &|| {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/data", dir.path().display());
        let (store, root) = weir_storage::state::store_from_url(&url).unwrap();
        assert_eq!(root, "");
        Fixture {
            store,
            root: "state".into(),
            _dir: Some(Arc::new(dir)),
        }
    })
    .await;
}

#[tokio::test]
async fn store_urls() {
    let (_, root) = weir_storage::state::store_from_url("memory://a/b/").unwrap();
    assert_eq!(root, "a/b");
    for bad in ["nope", "file://relative", "gs://bucket", "s3://"] {
        let r = weir_storage::state::store_from_url(bad);
        assert!(matches!(r, Err(StateBackendError::Config(_))), "{bad}");
    }
    assert!(matches!(
        weir_storage::state::store_from_url_with("memory://", [("aws_endpoint", "x")]),
        Err(StateBackendError::Config(_))
    ));
}
