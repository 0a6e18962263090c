//! Pools of several ShardGroups in the simulation: seeds of 2–6 groups on
//! one ConsumerPool (streams and static partitions, some with standbys,
//! some balanced by throughput) with churn, reshards and faults keep every
//! invariant of every group, and once quiet every pod is within one shard
//! of the others over the count groups and within one slot over the
//! groups with standbys, its whole load is within the band, and a further
//! quiet period writes nothing; the worst pool (20 groups of 2
//! shards on 8 pods, all 40 on two pods when planned alone) settles with
//! 5 shards on every pod.

use std::collections::BTreeMap;

use shardring_crds::ShardPhase;
use shardring_sim::operator::{Group, Operator};
use shardring_sim::scenario::{run_until, settle};
use shardring_sim::world::Rules;
use shardring_sim::{self as sim, Sim, SimConfig};

use crate::seeds::assert_clean;

#[test]
fn pool_seeds_keep_every_invariant() {
    let summary = sim::run_pool_seeds(0, 60, SimConfig::default());
    assert_clean(&summary);
    // The churn, reshards and faults really happened, and the standby
    // slots were judged over the pool.
    assert!(summary.events.splits > 0 && summary.events.merges > 0);
    assert!(summary.events.force_deletes > 0 && summary.events.recreated > 0);
    assert!(summary.faults.crashes > 0 && summary.faults.writes_refused > 0);
    assert!(summary.pool.standby_spread_judged > 0, "{:?}", summary.pool);
    // Every verdict of the operator's echo bookkeeping was reached (the
    // groups of a pool write the same pods), and checked: echoes before
    // and after their answers, another writer's change held during a
    // write.
    let w = summary.watch;
    assert!(w.echoes > 0 && w.held > 0 && w.changes > 0, "{w:?}");
    assert!(summary.faults.foreign_writes > 0);
    // The operator's precedence deferred reconciles behind the groups a
    // new deal concerned, and every invariant still held.
    assert!(summary.pool.deferred > 0, "{:?}", summary.pool);
}

#[test]
fn pool_throughput_seeds_keep_every_invariant() {
    let summary = sim::run_pool_load_seeds(0, 20, SimConfig::default());
    assert_clean(&summary);
    assert!(summary.faults.crashes > 0 && summary.events.joins > 0);
}

/// Each pod's active shards over every group's published document.
fn totals(sim: &Sim) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for group in &sim.op.groups {
        let doc = group.doc.as_ref().expect("published");
        for record in doc.shards.values() {
            if record.state == ShardPhase::Active
                && let Some(owner) = &record.owner
            {
                *totals.entry(owner.clone()).or_insert(0) += 1;
            }
        }
    }
    totals
}

#[test]
fn twenty_groups_of_two_shards_on_eight_pods_give_every_pod_five() {
    let rules = Rules {
        failover: 6_000,
        max_refresh: 2_000,
        max_lease_lag: 500,
        acks: true,
    };
    let groups = (0..20)
        .map(|g| Group::new(&format!("g{g:02}"), false, "20s", "6s", "1s"))
        .collect();
    let mut sim = Sim::new(7, rules, Operator::of_pool(groups, 0));
    for g in 0..20 {
        for _ in 0..2 {
            sim.world.add_shard(g, Vec::new());
        }
    }
    // Pods Ready one after another, as a rolling deploy leaves them.
    for _ in 0..8 {
        sim.add_pod();
        run_until(&mut sim, 20, |_| false);
    }
    settle(&mut sim, 2_000);
    run_until(&mut sim, 2_000, |s| {
        totals(s).len() == 8 && totals(s).values().all(|&n| n == 5)
    });
    assert_eq!(sim.world.violation, None);
    let totals = totals(&sim);
    assert_eq!(
        totals.values().copied().collect::<Vec<_>>(),
        vec![5; 8],
        "{totals:?}"
    );
    for group in &sim.op.groups {
        let doc = group.doc.as_ref().expect("published");
        assert!(doc.shards.values().all(|r| r.state == ShardPhase::Active));
        let mut owners: Vec<_> = doc.shards.values().map(|r| r.owner.clone()).collect();
        owners.dedup();
        assert_eq!(owners.len(), 2, "{}: one shard per pod", group.name());
    }
}
