//! Property tests: every rule of the engine over random inputs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use shardring_engine::{
    Balance, HashKeyRange, PlanInput, PlanOutput, Pod, Previous, Rebalance, Shard, ShardState,
    model::range_weight,
};

use crate::common::*;

/// Random pods: some not ready, some terminating, capacities 1..=cap_max,
/// zones a..c and nodes.
pub(crate) fn arb_pods(max: usize, cap_max: u32) -> impl Strategy<Value = Vec<Pod>> {
    prop::collection::vec((any::<u8>(), 1..=cap_max, 0..3u8, 0..6u8), 1..=max).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (flags, capacity, zone, node))| Pod {
                ready: flags % 7 != 0,
                terminating: flags % 11 == 0,
                capacity,
                zone: Some(format!("zone-{zone}")),
                node: Some(format!("node-{zone}-{node}")),
                ..pod(&format!("pod-{i}"))
            })
            .collect()
    })
}

/// A random previous owner per shard among `pods` plus a vanished pod.
pub(crate) fn arb_previous(
    shards: usize,
    pods: usize,
) -> impl Strategy<Value = Vec<Option<usize>>> {
    prop::collection::vec(prop::option::weighted(0.8, 0..=pods), shards)
}

pub(crate) fn apply_previous(inp: &mut PlanInput, owners: &[Option<usize>]) {
    for (shard, owner) in inp.shards.iter().zip(owners) {
        if let Some(o) = owner {
            let name = inp
                .pods
                .get(*o)
                .map_or("vanished".to_owned(), |p| p.name.clone());
            Arc::make_mut(&mut inp.previous).insert(shard.id.clone(), Previous::Owner(name));
        }
    }
}

fn eligible(inp: &PlanInput) -> BTreeMap<&str, &Pod> {
    inp.pods
        .iter()
        .filter(|p| p.ready && !p.terminating)
        .map(|p| (p.name.as_str(), p))
        .collect()
}

/// Checks what every output must satisfy: owners and standbys are eligible
/// and distinct, loads add up, no readable shard is dropped.
pub(crate) fn check_consistent(inp: &PlanInput, out: &PlanOutput) {
    let ok = eligible(inp);
    let mut counted: BTreeMap<&str, u64> = BTreeMap::new();
    for (id, a) in out.assignment.iter() {
        if let Some(owner) = &a.owner {
            assert!(
                ok.contains_key(owner.as_str()),
                "{id} owned by ineligible {owner}"
            );
            *counted.entry(owner).or_default() += 1;
        }
        let set: BTreeSet<&String> = a.standbys.iter().collect();
        assert_eq!(set.len(), a.standbys.len(), "duplicate standbys for {id}");
        for s in &a.standbys {
            assert!(ok.contains_key(s.as_str()));
            assert_ne!(Some(s), a.owner.as_ref());
        }
    }
    for (pod, load) in &out.loads {
        assert_eq!(counted.get(pod.as_str()).copied().unwrap_or(0), *load);
    }
    assert_eq!(out.loads.len(), ok.len());
    for id in out.pending.iter().chain(&out.unassigned) {
        assert_eq!(out.assignment[id].owner, None);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Count mode: every pod holds ⌊S·c/C⌋ or ⌈S·c/C⌉, from any previous state.
    #[test]
    fn balance_weighted(
        s in 0..400usize,
        pods in arb_pods(24, 4),
        prev in arb_previous(400, 24),
    ) {
        let mut inp = input(shards(s), pods);
        apply_previous(&mut inp, &prev[..s]);
        let out = run(&inp);
        check_consistent(&inp, &out);
        let ok = eligible(&inp);
        let total: u64 = ok.values().map(|p| u64::from(p.capacity)).sum();
        if ok.is_empty() {
            prop_assert_eq!(out.unassigned.len(), s);
        }
        for (name, p) in &ok {
            prop_assert!(out.unassigned.is_empty());
            let share = s as u64 * u64::from(p.capacity);
            let load = out.loads[*name];
            // ⌊share/total⌋ ≤ load ≤ ⌈share/total⌉ without dividing.
            prop_assert!(load * total < share + total && (load + 1) * total > share, "{name}: {load} of {s}");
        }
    }

    /// Equal capacities: max − min ≤ 1 and moves equal the lower bound from
    /// any previous state (orphans plus excess over quota).
    #[test]
    fn lower_bound_from_any_previous(
        s in 0..600usize,
        p in 1..40usize,
        prev in arb_previous(600, 40),
    ) {
        let mut inp = input(shards(s), pods(p));
        apply_previous(&mut inp, &prev[..s]);
        let out = run(&inp);
        check_consistent(&inp, &out);
        prop_assert!(spread(&out) <= 1);
        prop_assert_eq!(out.moves, lower_bound(&inp.previous, &out));
    }

    /// Output does not depend on the order of shards, pods or previous.
    #[test]
    fn order_independent(
        s in 0..200usize,
        pods in arb_pods(16, 3),
        prev in arb_previous(200, 16),
        standbys in 0..3u32,
        ranged in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut inp = input(if ranged { ranged_shards(s.max(1)) } else { shards(s) }, pods);
        inp.options.standbys = standbys;
        inp.options.balance = if ranged { Balance::HashRange } else { Balance::Count };
        let n = inp.shards.len();
        apply_previous(&mut inp, &prev[..n]);
        let out = run(&inp);
        check_consistent(&inp, &out);
        let mut shuffled = inp.clone();
        shuffle(Arc::make_mut(&mut shuffled.shards).as_mut_slice(), seed);
        shuffle(&mut shuffled.pods, seed.rotate_left(17));
        prop_assert_eq!(&run(&shuffled), &out);
        // Re-planning from the result moves no owner; standbys that a
        // topology conflict pushed over their quota settle within one re-plan.
        let mut again = inp.clone();
        again.previous = previous_of(&out);
        let second = run(&again);
        prop_assert_eq!(second.moves, 0);
        let owners = |o: &PlanOutput| o.assignment.iter().map(|(k, a)| (k.clone(), a.owner.clone())).collect::<Vec<_>>();
        prop_assert_eq!(owners(&second), owners(&out));
        again.previous = previous_of(&second);
        let third = run(&again);
        prop_assert_eq!(third.assignment, second.assignment);
    }

    /// Children wait for every parent; complete shards drop out; unknown
    /// parents count as complete.
    #[test]
    fn pending_children(states in prop::collection::vec((0..3u8, prop::option::of(0..40usize)), 1..40), p in 1..6usize) {
        let mut ss = shards(states.len());
        for (i, (state, parent)) in states.iter().enumerate() {
            ss[i].state = [ShardState::Open, ShardState::Closed, ShardState::Complete][*state as usize];
            if let Some(parent) = parent {
                ss[i].parents = vec![format!("shardId-{parent:012}")];
            }
        }
        let inp = input(ss.clone(), pods(p));
        let out = run(&inp);
        check_consistent(&inp, &out);
        let state_of: BTreeMap<&str, ShardState> = ss.iter().map(|s| (s.id.as_str(), s.state)).collect();
        for s in &ss {
            let waiting = s.parents.iter().any(|parent| {
                state_of.get(parent.as_str()).is_some_and(|st| *st != ShardState::Complete)
            });
            match (s.state, waiting) {
                (ShardState::Complete, _) => prop_assert!(!out.assignment.contains_key(&s.id)),
                (_, true) => {
                    prop_assert!(out.pending.contains(&s.id));
                    prop_assert_eq!(&out.assignment[&s.id].owner, &None);
                }
                (_, false) => prop_assert!(out.assignment[&s.id].owner.is_some()),
            }
        }
        prop_assert!(spread(&out) <= 1);
    }

    /// requiredOnly: shards on eligible pods stay; only orphans and new
    /// shards are placed, onto pods under quota.
    #[test]
    fn required_only(
        s in 0..300usize,
        pods in arb_pods(16, 1),
        prev in arb_previous(300, 16),
    ) {
        let mut inp = with_rebalance(input(shards(s), pods), Rebalance::RequiredOnly);
        apply_previous(&mut inp, &prev[..s]);
        let out = run(&inp);
        check_consistent(&inp, &out);
        let ok = eligible(&inp);
        let mut orphans = 0;
        for (id, prev) in inp.previous.iter() {
            if ok.contains_key(prev.owner()) {
                prop_assert_eq!(out.assignment[id].owner.as_deref(), Some(prev.owner()));
            } else if !ok.is_empty() {
                orphans += 1;
            }
        }
        prop_assert_eq!(out.moves, orphans);
        prop_assert_eq!(out.optional_moves(), 0);
    }

    /// maxShardsPerPod caps every load; what does not fit is unassigned.
    #[test]
    fn caps(s in 0..200usize, p in 1..12usize, cap in 1..30u32, prev in arb_previous(200, 12)) {
        let mut inp = input(shards(s), pods(p));
        inp.options.max_shards_per_pod = cap;
        apply_previous(&mut inp, &prev[..s]);
        let out = run(&inp);
        check_consistent(&inp, &out);
        prop_assert!(out.loads.values().all(|&l| l <= u64::from(cap)));
        let room = p as u64 * u64::from(cap);
        prop_assert_eq!(out.unassigned.len() as u64, (s as u64).saturating_sub(room));
        prop_assert!(spread(&out) <= 1);
    }

    /// Optional-move budget: never more optional moves than allowed, all
    /// required moves still made.
    #[test]
    fn optional_budget(s in 0..300usize, p in 1..20usize, budget in 0..20u32, prev in arb_previous(300, 20)) {
        let mut inp = input(shards(s), pods(p));
        inp.options.max_optional_moves = Some(budget);
        apply_previous(&mut inp, &prev[..s]);
        let out = run(&inp);
        check_consistent(&inp, &out);
        prop_assert!(out.optional_moves() <= u64::from(budget));
        let orphans = inp.previous.values().filter(|v| !out.loads.contains_key(v.owner())).count() as u64;
        prop_assert_eq!(out.required_moves(), orphans);
    }

    /// Standbys: min(N, P−1) per shard, never the owner, in another zone
    /// whenever enough pods in other zones exist.
    #[test]
    fn standbys(s in 1..150usize, pods in arb_pods(12, 2), n in 1..4u32) {
        let mut inp = input(shards(s), pods);
        inp.options.standbys = n;
        let out = run(&inp);
        check_consistent(&inp, &out);
        let ok = eligible(&inp);
        let k = (n as usize).min(ok.len().saturating_sub(1));
        for a in out.assignment.values() {
            let Some(owner) = &a.owner else { continue };
            prop_assert_eq!(a.standbys.len(), k);
            let zone = &ok[owner.as_str()].zone;
            let others = ok.values().filter(|p| &p.zone != zone).count();
            if others >= k {
                for sb in &a.standbys {
                    prop_assert_ne!(&ok[sb.as_str()].zone, zone);
                }
            }
        }
    }

    /// hashRange: no pod exceeds its fair share of the key space by more than
    /// the largest shard, from any previous state.
    #[test]
    fn hash_range_bound(cuts in prop::collection::btree_set(any::<u128>(), 0..80), p in 1..12usize, prev in arb_previous(81, 12)) {
        let mut bounds: Vec<u128> = cuts.into_iter().filter(|&c| c > 0).collect();
        bounds.insert(0, 0);
        let ss: Vec<Shard> = bounds
            .iter()
            .enumerate()
            .map(|(i, &start)| Shard {
                hash_key_range: Some(HashKeyRange {
                    start: start.to_string(),
                    end: bounds.get(i + 1).map_or(u128::MAX, |n| n - 1).to_string(),
                }),
                ..shard(&format!("shardId-{i:012}"))
            })
            .collect();
        let weight: BTreeMap<String, u128> = ss
            .iter()
            .map(|s| {
                let r = s.hash_key_range.as_ref().unwrap();
                (s.id.clone(), u128::from(range_weight(&r.start, &r.end).unwrap()))
            })
            .collect();
        let n = ss.len();
        let mut inp = with_balance(input(ss, pods(p)), Balance::HashRange);
        apply_previous(&mut inp, &prev[..n]);
        let out = run(&inp);
        check_consistent(&inp, &out);
        prop_assert!(out.unassigned.is_empty());
        let total: u128 = weight.values().sum();
        let largest = weight.values().max().copied().unwrap_or(0);
        let mut held: BTreeMap<&str, u128> = BTreeMap::new();
        for (id, a) in out.assignment.iter() {
            *held.entry(a.owner.as_deref().unwrap()).or_default() += weight[id];
        }
        for w in held.values() {
            // w ≤ W/P + largest, scaled by P to stay integral.
            prop_assert!(w * p as u128 <= total + largest * p as u128);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// From a balanced assignment, one pod joining or one leaving moves
    /// exactly the lower bound (S up to 4,096, P up to 64).
    #[test]
    fn plus_minus_one_pod(s in 0..4096usize, p in 2..64usize, leave in any::<prop::sample::Index>()) {
        let mut inp = input(shards(s), pods(p));
        let first = run(&inp);
        inp.previous = previous_of(&first);

        let mut grown = inp.clone();
        grown.pods.push(pod("pod-joining"));
        let out = run(&grown);
        prop_assert!(spread(&out) <= 1);
        prop_assert_eq!(out.moves, lower_bound(&grown.previous, &out));
        // Joining: exactly the new pod's share moves, all of it optional.
        prop_assert_eq!(out.moves, out.loads["pod-joining"]);
        prop_assert_eq!(out.required_moves(), 0);

        let mut shrunk = inp;
        let gone = shrunk.pods.remove(leave.index(p)).name;
        let out = run(&shrunk);
        prop_assert!(spread(&out) <= 1);
        prop_assert_eq!(out.moves, lower_bound(&shrunk.previous, &out));
        // Leaving: only the departed pod's shards move.
        prop_assert_eq!(out.moves, first.loads[&gone]);
    }
}

pub(crate) fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(i, usize::try_from(x % (i as u64 + 1)).expect("below i + 1"));
    }
}
