//! Pool-wide balance: several count-mode groups on one pool, each planned by
//! `plan` with the ⌈⌉ quotas the pool's deal gives it (`pool::deal`), as the
//! operator plans them.

use std::collections::BTreeMap;

use proptest::prelude::*;
use shardring_engine::pool;
use shardring_engine::{PlanInput, PlanOptions, PlanOutput, Pod, Previous, Rebalance, plan};

use crate::common::shards;

/// A pool: its groups (name, shard count), their last outputs, and a choice
/// of planning them together or each alone.
struct Pool {
    groups: Vec<(String, usize)>,
    outputs: BTreeMap<String, PlanOutput>,
    together: bool,
}

fn ready_pod(name: &str, ready_since: i64, capacity: u32) -> Pod {
    Pod {
        name: name.to_owned(),
        ready: true,
        terminating: false,
        capacity,
        zone: None,
        node: None,
        ready_since: Some(ready_since),
    }
}

/// Seconds since some epoch for the `n`th pod to become Ready, a minute apart.
fn minute(n: usize) -> i64 {
    i64::try_from(n).expect("a small number") * 60
}

/// Pods `p-0..n` that became Ready a minute apart (as a rolling deploy
/// leaves them: the highest index is the youngest).
fn staggered(n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| ready_pod(&format!("p-{i}"), minute(i), 1))
        .collect()
}

fn previous_of(output: Option<&PlanOutput>) -> BTreeMap<String, Previous> {
    output.map_or_else(BTreeMap::new, |out| {
        out.assignment
            .iter()
            .filter_map(|(id, a)| a.owner.clone().map(|o| (id.clone(), Previous::Owner(o))))
            .collect()
    })
}

impl Pool {
    fn new(groups: &[(&str, usize)], together: bool) -> Self {
        Self {
            groups: groups.iter().map(|&(n, s)| (n.to_owned(), s)).collect(),
            outputs: BTreeMap::new(),
            together,
        }
    }

    fn input(&self, name: &str, count: usize, pods: &[Pod]) -> PlanInput {
        PlanInput {
            options: PlanOptions {
                consumer_name: name.to_owned(),
                ..PlanOptions::default()
            },
            shards: shards(count).into(),
            pods: pods.to_vec(),
            previous: previous_of(self.outputs.get(name)).into(),
            ..PlanInput::default()
        }
    }

    /// Plans every group on `pods`; returns the moves made.
    fn plan(&mut self, pods: &[Pod]) -> u64 {
        self.plan_with(pods, Rebalance::All)
    }

    /// [`Self::plan`] with only the moves `rebalance` allows.
    fn plan_with(&mut self, pods: &[Pod], rebalance: Rebalance) -> u64 {
        let inputs: BTreeMap<String, PlanInput> = self
            .groups
            .iter()
            .map(|(name, count)| {
                let mut input = self.input(name, *count, pods);
                input.options.rebalance = rebalance;
                (name.clone(), input)
            })
            .collect();
        let outputs = if self.together {
            pool::plan_together(&inputs).expect("plan")
        } else {
            inputs
                .iter()
                .map(|(name, input)| (name.clone(), plan(input).expect("plan")))
                .collect()
        };
        let moves = outputs.values().map(|out| out.moves).sum();
        self.outputs = outputs;
        moves
    }

    /// Each pod's active shards over every group.
    fn totals(&self) -> BTreeMap<String, u64> {
        pool::totals(&self.outputs)
    }

    fn spread(&self) -> (u64, u64) {
        let totals = self.totals();
        (
            totals.values().copied().min().unwrap_or(0),
            totals.values().copied().max().unwrap_or(0),
        )
    }

    fn assert_groups_balanced(&self) {
        for (name, out) in &self.outputs {
            let min = out.loads.values().min().copied().unwrap_or(0);
            let max = out.loads.values().max().copied().unwrap_or(0);
            assert!(max - min <= 1, "{name}: {:?}", out.loads);
        }
    }
}

fn named(groups: usize, shards: usize) -> Vec<(String, usize)> {
    (0..groups)
        .map(|g| (format!("ns/g-{g:02}"), shards))
        .collect()
}

fn pool_of(groups: &[(String, usize)], together: bool) -> Pool {
    let borrowed: Vec<(&str, usize)> = groups.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    Pool::new(&borrowed, together)
}

/// The issue's four pools on pods Ready a minute apart: planned alone the
/// extras of every group land on the youngest pods; planned together every
/// pod is within one shard of the pool's share, every group within one of
/// its own.
#[test]
fn the_pools_of_the_issue_are_balanced_over_every_group() {
    for (groups, each, pods, alone_spread) in [
        (20, 2, 8, (0, 20)),
        (10, 4, 3, (10, 20)),
        (6, 3, 4, (0, 6)),
        (12, 16, 5, (36, 48)),
    ] {
        let names = named(groups, each);
        let mut alone = pool_of(&names, false);
        alone.plan(&staggered(pods));
        assert_eq!(
            alone.spread(),
            alone_spread,
            "{groups} x {each} on {pods}, alone"
        );

        let mut together = pool_of(&names, true);
        together.plan(&staggered(pods));
        let (min, max) = together.spread();
        assert!(
            max - min <= 1,
            "{groups} x {each} on {pods}: {:?}",
            together.totals()
        );
        together.assert_groups_balanced();
        // At rest: a second plan moves nothing.
        assert_eq!(together.plan(&staggered(pods)), 0);
    }
}

/// From the skewed state per-group planning leaves, one pool-wide plan
/// moves only the extras that must move to balance the pool.
#[test]
fn a_skewed_pool_is_rebalanced_with_the_fewest_moves() {
    let names = named(20, 2);
    let mut pool = pool_of(&names, false);
    pool.plan(&staggered(8));
    pool.together = true;
    // 40 extras on two pods, 5 each is the share: 30 must move.
    assert_eq!(pool.plan(&staggered(8)), 30);
    assert_eq!(pool.spread(), (5, 5));
}

/// A pod that joins takes exactly its floors and its ⌊share⌋ of the
/// extras; a pod that leaves moves only its own shards.
#[test]
fn joins_move_the_lower_bound_and_leaves_only_the_pods_shards() {
    for (groups, each, pods) in [(20, 2, 8), (12, 16, 5), (6, 3, 4), (10, 4, 3), (7, 9, 6)] {
        let names = named(groups, each);
        let mut pool = pool_of(&names, true);
        let mut fleet = staggered(pods);
        pool.plan(&fleet);

        fleet.push(ready_pod("p-new", minute(pods), 1));
        let moves = pool.plan(&fleet);
        let total = (groups * each) as u64;
        let bound = total / (pods as u64 + 1);
        assert_eq!(moves, pool.totals()["p-new"], "{groups} x {each} on {pods}");
        assert_eq!(moves, bound, "{groups} x {each} on {pods} + 1");
        let (min, max) = pool.spread();
        assert!(max - min <= 1, "{:?}", pool.totals());
        pool.assert_groups_balanced();

        let leaving = fleet.remove(0);
        let held = pool.totals()[&leaving.name];
        assert_eq!(pool.plan(&fleet), held, "{groups} x {each}: leave");
        let (min, max) = pool.spread();
        assert!(max - min <= 1, "{:?}", pool.totals());
        pool.assert_groups_balanced();
    }
}

/// A surge rolling deploy (one new pod up, then the oldest removed, pod by
/// pod, faster than the rebalance delay: only required moves until the
/// roll is done, then one rebalance) moves each shard of every group
/// exactly once, and leaves the pool balanced.
#[test]
fn a_surge_rolling_deploy_moves_each_shard_of_the_pool_once() {
    for (groups, each, pods) in [(20, 2, 8), (12, 16, 5), (6, 3, 4), (10, 4, 3), (50, 20, 20)] {
        let names = named(groups, each);
        let mut pool = pool_of(&names, true);
        let mut fleet = staggered(pods);
        pool.plan(&fleet);
        let mut moves = 0;
        for step in 0..pods {
            fleet.push(ready_pod(&format!("q-{step}"), 10_000 + minute(step), 1));
            moves += pool.plan_with(&fleet, Rebalance::RequiredOnly);
            fleet.remove(0);
            moves += pool.plan_with(&fleet, Rebalance::RequiredOnly);
        }
        moves += pool.plan(&fleet);
        let (min, max) = pool.spread();
        assert!(max - min <= 1, "{:?}", pool.totals());
        pool.assert_groups_balanced();
        let total = (groups * each) as u64;
        assert_eq!(
            moves, total,
            "{groups} x {each} on {pods}: {moves} moves of {total} shards"
        );
    }
}

/// With capacities every pod's total is within one shard of its weighted
/// share of the pool, and every group's quotas are its own ⌊⌋ or ⌈⌉.
#[test]
fn capacities_weigh_the_pool_share() {
    let names = named(9, 5);
    let mut pool = pool_of(&names, true);
    let fleet: Vec<Pod> = [1, 2, 3, 4]
        .into_iter()
        .enumerate()
        .map(|(i, capacity)| ready_pod(&format!("p-{i}"), minute(i), capacity))
        .collect();
    pool.plan(&fleet);
    let totals = pool.totals();
    for pod in &fleet {
        let share = 45.0 * f64::from(pod.capacity) / 10.0;
        let got = totals[&pod.name] as f64;
        assert!((got - share).abs() < 1.0, "{}: {got} vs {share}", pod.name);
    }
    assert_eq!(pool.plan(&fleet), 0);
}

fn fleet_strategy() -> impl Strategy<Value = Vec<Pod>> {
    proptest::collection::vec((1u32..=3, 0i64..100), 1..10).prop_map(|pods| {
        pods.into_iter()
            .enumerate()
            .map(|(i, (capacity, ready))| ready_pod(&format!("p-{i}"), ready, capacity))
            .collect()
    })
}

proptest! {
    /// Over random pools, from random earlier assignments (planned alone on
    /// another fleet), one pool-wide plan gives every pod a total within
    /// one shard of its weighted share and every group its own ⌊⌋ or ⌈⌉
    /// quotas, and a second plan changes nothing.
    #[test]
    fn every_pool_is_balanced_at_once_and_at_rest(
        sizes in proptest::collection::vec(0usize..30, 1..8),
        before in fleet_strategy(),
        after in fleet_strategy(),
    ) {
        let names: Vec<(String, usize)> =
            sizes.iter().enumerate().map(|(g, &s)| (format!("ns/g-{g}"), s)).collect();
        let mut pool = pool_of(&names, false);
        pool.plan(&before);
        pool.together = true;
        pool.plan(&after);
        let weight: u32 = after.iter().map(|p| p.capacity).sum();
        let total: usize = sizes.iter().sum();
        let totals = pool.totals();
        for pod in &after {
            let share = total as f64 * f64::from(pod.capacity) / f64::from(weight);
            let got = totals.get(&pod.name).copied().unwrap_or(0) as f64;
            prop_assert!((got - share).abs() < 1.0 + 1e-9, "{}: {} vs {}", pod.name, got, share);
        }
        for (name, out) in &pool.outputs {
            let count = names.iter().find(|(n, _)| n == name).map_or(0, |(_, s)| *s);
            for pod in &after {
                let units = count as u64 * u64::from(pod.capacity);
                let (floor, weight) = (units / u64::from(weight), u64::from(weight));
                let ceil = floor + u64::from(!units.is_multiple_of(weight));
                let got = out.loads.get(&pod.name).copied().unwrap_or(0);
                prop_assert!(got == floor || got == ceil, "{name} {}: {got} vs {floor}..{ceil}", pod.name);
            }
        }
        prop_assert_eq!(pool.plan(&after), 0);
    }
}

/// A pod that goes and comes back under the same name (a StatefulSet's
/// ordinal) on a pool several groups share: its shards move to the others
/// and, when it is back, it takes the fewest that bring it to its share;
/// the pool is balanced at each step and at rest nothing moves.
#[test]
fn a_pod_back_under_its_name_takes_its_share_again() {
    for (groups, each, pods) in [(20, 2, 8), (12, 16, 5), (7, 9, 6)] {
        let names = named(groups, each);
        let mut pool = pool_of(&names, true);
        let mut fleet = staggered(pods);
        pool.plan(&fleet);
        let back = fleet.remove(pods / 2);
        let held = pool.totals()[&back.name];
        assert_eq!(pool.plan(&fleet), held, "{groups} x {each}: gone");
        fleet.push(ready_pod(&back.name, 1_000_000, 1));
        let moves = pool.plan(&fleet);
        let total = (groups * each) as u64;
        assert_eq!(moves, total / pods as u64, "{groups} x {each}: back");
        assert_eq!(moves, pool.totals()[&back.name]);
        let (min, max) = pool.spread();
        assert!(max - min <= 1, "{:?}", pool.totals());
        pool.assert_groups_balanced();
        assert_eq!(pool.plan(&fleet), 0);
    }
}

/// Each pod's standby slots over every group's plan.
fn standby_totals(outputs: &BTreeMap<String, PlanOutput>) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for out in outputs.values() {
        for pod in out.assignment.values().flat_map(|a| &a.standbys) {
            *totals.entry(pod.clone()).or_insert(0) += 1;
        }
    }
    totals
}

fn spread_of(totals: &BTreeMap<String, u64>, pods: &[Pod]) -> (u64, u64) {
    let count = |pod: &Pod| totals.get(&pod.name).copied().unwrap_or(0);
    (
        pods.iter().map(count).min().unwrap_or(0),
        pods.iter().map(count).max().unwrap_or(0),
    )
}

/// Standby slots are dealt over the pool as the ⌈⌉ quotas are: 20 groups
/// of 2 shards with one standby each on 8 pods give every pod 5 slots (5
/// active shards, 5 standby slots); planned alone, the slots of every group
/// go by each group's own tie-breaks and pile up. At rest nothing changes.
#[test]
fn standby_slots_are_balanced_over_the_pool() {
    let pods = staggered(8);
    let inputs = |outputs: &BTreeMap<String, PlanOutput>| -> BTreeMap<String, PlanInput> {
        (0..20)
            .map(|g| {
                let name = format!("ns/g-{g:02}");
                let input = PlanInput {
                    options: PlanOptions {
                        consumer_name: name.clone(),
                        standbys: 1,
                        ..PlanOptions::default()
                    },
                    shards: shards(2).into(),
                    pods: pods.clone(),
                    previous: outputs
                        .get(&name)
                        .map(crate::common::previous_of)
                        .unwrap_or_default(),
                    ..PlanInput::default()
                };
                (name, input)
            })
            .collect()
    };
    let alone: BTreeMap<String, PlanOutput> = inputs(&BTreeMap::new())
        .into_iter()
        .map(|(name, input)| (name, plan(&input).expect("plan")))
        .collect();
    let (min, max) = spread_of(&standby_totals(&alone), &pods);
    assert!(max - min > 1, "alone: {min}..{max}");

    let together = pool::plan_together(&inputs(&BTreeMap::new())).expect("plan");
    assert_eq!(spread_of(&standby_totals(&together), &pods), (5, 5));
    assert_eq!(spread_of(&pool::totals(&together), &pods), (5, 5));
    for out in together.values() {
        for a in out.assignment.values() {
            assert_eq!(a.standbys.len(), 1);
            assert!(!a.standbys.contains(a.owner.as_ref().expect("an owner")));
        }
    }
    // From the skewed state planned alone, one pool-wide plan balances the
    // slots; then the pool is at rest.
    let rebalanced = pool::plan_together(&inputs(&alone)).expect("plan");
    assert_eq!(spread_of(&standby_totals(&rebalanced), &pods), (5, 5));
    let again = pool::plan_together(&inputs(&rebalanced)).expect("plan");
    for (name, out) in &again {
        assert_eq!(out.assignment, rebalanced[name].assignment, "{name}");
        assert_eq!(out.moves, 0, "{name}");
    }
}

/// Two pools that share pods (A selects p-0..p-3, B p-2..p-5) form one
/// balance: each group splits its shards over its own pool's pods only
/// (max − min ≤ 1 there, nothing on the other pool's pods), and each pod's
/// total over both pools' groups is within one shard of the sum of its
/// shares of every group it serves.
#[test]
fn pools_that_share_pods_are_dealt_as_one() {
    let all = staggered(6);
    let pool_a: Vec<Pod> = all[..4].to_vec();
    let pool_b: Vec<Pod> = all[2..].to_vec();
    let groups: Vec<(String, &[Pod], usize)> = (0..10)
        .map(|g| {
            let pods: &[Pod] = if g % 2 == 0 { &pool_a } else { &pool_b };
            (format!("ns/g-{g}"), pods, 3 + g % 3)
        })
        .collect();
    let input = pool::PoolInput {
        pods: all,
        max_shards_per_pod: 0,
        groups: groups
            .iter()
            .map(|(name, pods, count)| pool::PoolGroup {
                name: name.clone(),
                readable: *count as u64,
                pods: Some(pods.to_vec()),
                ..pool::PoolGroup::default()
            })
            .collect(),
    };
    let ceilings = pool::deal(&input);
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut shares: BTreeMap<String, f64> = BTreeMap::new();
    for (name, pods, count) in &groups {
        let out = plan(&PlanInput {
            options: PlanOptions {
                consumer_name: name.clone(),
                ..PlanOptions::default()
            },
            shards: shards(*count).into(),
            pods: pods.to_vec(),
            ceilings: ceilings.get(name).cloned(),
            ..PlanInput::default()
        })
        .expect("plan");
        let loads: Vec<u64> = pods.iter().map(|p| out.loads[&p.name]).collect();
        let (min, max) = (loads.iter().min(), loads.iter().max());
        assert!(
            max.zip(min).is_some_and(|(a, b)| a - b <= 1),
            "{name}: {loads:?}"
        );
        for pod in *pods {
            *totals.entry(pod.name.clone()).or_insert(0) += out.loads[&pod.name];
            *shares.entry(pod.name.clone()).or_insert(0.0) += *count as f64 / pods.len() as f64;
        }
    }
    for (pod, share) in &shares {
        let got = totals[pod] as f64;
        assert!(
            (got - share).abs() < 1.0,
            "{pod}: {got} vs {share} ({totals:?})"
        );
    }
}
