//! Property tests of the protocol model: two leaders, random interleavings of
//! their store steps, a slow deposed leader, gaps and pruning.

use proptest::prelude::*;
use weir_storage::PartialKind;
use weir_storage::state::SealKind;
use weir_storage::state::model::{Action, Model};

fn action() -> impl Strategy<Value = Action> {
    let leader = 0..2usize;
    prop_oneof![
        1 => leader.clone().prop_map(Action::Claim),
        3 => (leader.clone(), 0..3u32, prop::bool::weighted(0.3)).prop_map(|(leader, vnode, snap)| {
            Action::Write {
                leader,
                vnode,
                kind: if snap { PartialKind::Snapshot } else { PartialKind::Delta },
            }
        }),
        2 => leader.clone().prop_map(Action::Seal),
        8 => leader.clone().prop_map(Action::Step),
        1 => leader.clone().prop_map(Action::Skip),
        1 => (leader, 0..3u64).prop_map(|(leader, keep)| Action::Prune { leader, keep }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn two_leaders_never_break_the_seal_invariants(actions in prop::collection::vec(action(), 1..300)) {
        let mut model = Model::new(2);
        for (i, a) in actions.iter().enumerate() {
            model.apply(a);
            if let Err(violation) = model.store.check() {
                prop_assert!(false, "after step {i} ({a:?}): {violation}");
            }
        }
    }
}

/// The interleaving the fence exists for, spelled out: `node-0` has listed
/// the seals and is about to seal when `node-1` claims and takes over.
#[test]
fn a_slow_leader_loses_to_the_takeover() {
    let mut m = Model::new(2);
    m.apply(&Action::Claim(0));
    // List claims, claim, list seals, put the takeover, see it is the top.
    for _ in 0..5 {
        m.apply(&Action::Step(0));
    }
    assert_eq!(m.leaders[0].generation, 1);
    m.apply(&Action::Write {
        leader: 0,
        vnode: 0,
        kind: PartialKind::Snapshot,
    });
    m.apply(&Action::Seal(0));
    m.apply(&Action::Step(0)); // fence check passes
    m.apply(&Action::Step(0)); // lists seals: latest is its own takeover
    m.apply(&Action::Claim(1));
    for _ in 0..4 {
        m.apply(&Action::Step(1));
    }
    assert_eq!(m.leaders[1].generation, 2);
    m.apply(&Action::Step(0)); // its put hits the takeover seal
    assert!(m.leaders[0].deposed);
    let kinds: Vec<_> = m
        .store
        .seals
        .values()
        .map(|s| (s.epoch, s.kind, s.generation))
        .collect();
    assert_eq!(
        kinds,
        vec![(0, SealKind::Takeover, 1), (1, SealKind::Takeover, 2)]
    );
    m.store.check().unwrap();
}

/// A takeover lists the store, then the old leader seals two gap slots and a
/// prune empties the slot the takeover is about to take: its put succeeds,
/// but below the latest seal, where it fences no one. It must look at the top
/// again and take the slot above it, so the old leader's next put loses.
#[test]
fn a_takeover_into_a_pruned_hole_moves_to_the_top() {
    let mut m = Model::new(2);
    m.apply(&Action::Claim(1));
    for _ in 0..5 {
        m.apply(&Action::Step(1));
    }
    assert_eq!(m.leaders[1].generation, 1);
    m.apply(&Action::Skip(1));
    m.apply(&Action::Skip(1));
    m.apply(&Action::Seal(1));
    m.apply(&Action::Step(1)); // fence check passes
    m.apply(&Action::Claim(0));
    m.apply(&Action::Step(0)); // lists the claims
    m.apply(&Action::Step(0)); // claims generation 2
    m.apply(&Action::Step(0)); // lists seals: the latest is 0, so it aims at 1
    assert_eq!(m.leaders[0].generation, 2);
    m.apply(&Action::Step(1)); // lists seals: the latest is 0, target 3
    m.apply(&Action::Step(1)); // gap seal 1
    m.apply(&Action::Step(1)); // gap seal 2
    m.apply(&Action::Prune { leader: 0, keep: 0 }); // leaves only seal 2
    m.apply(&Action::Step(0)); // its takeover fills the hole at 1
    m.apply(&Action::Step(0)); // sees seal 2 above it
    m.apply(&Action::Step(0)); // takes slot 3
    m.apply(&Action::Step(1)); // the old leader's put at 3 loses
    assert!(m.leaders[1].deposed);
    let top = m.store.seals.values().last().unwrap();
    assert_eq!(
        (top.epoch, top.kind, top.generation),
        (3, SealKind::Takeover, 2)
    );
    m.store.check().unwrap();
}
