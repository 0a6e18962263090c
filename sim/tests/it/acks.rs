//! Release acknowledgements as handoff evidence in the simulation: a planned
//! move (a pod joins, shards are taken from pods that keep running) without
//! a lease table waits for the drain timeout unless the old owner
//! acknowledges the release at the endpoint; with acknowledgements (some
//! lost, each late) every move completes on the owner's word in a few
//! seconds, and no shard ever has two readers.

use shardring_sim::Sim;
use shardring_sim::operator::Operator;
use shardring_sim::scenario::{run_until, settle};
use shardring_sim::world::Rules;

const DRAIN_MS: u64 = 20_000;

/// Three pods over six shards without a lease table, settled, then a
/// fourth pod joins; returns the handoffs of the moves to it.
fn join(seed: u64, acks: bool) -> Vec<(&'static str, u64)> {
    let rules = Rules {
        failover: 6_000,
        max_refresh: 2_000,
        max_lease_lag: 500,
        acks,
    };
    let op = Operator::new(false, "20s", "6s", "5s", 0);
    let mut sim = Sim::new(seed, rules, op);
    for _ in 0..6 {
        sim.world.add_shard(0, Vec::new());
    }
    for _ in 0..3 {
        sim.add_pod();
    }
    settle(&mut sim, 2_000);
    sim.op.groups[0].handoffs.clear();
    sim.add_pod();
    run_until(&mut sim, 1_000, |s| !s.op.groups[0].handoffs.is_empty());
    assert_eq!(sim.world.violation, None, "seed {seed}");
    sim.op.groups[0].handoffs.clone()
}

#[test]
fn planned_moves_complete_on_the_owners_word_instead_of_the_drain_timeout() {
    for seed in 0..10 {
        let acked = join(seed, true);
        assert!(!acked.is_empty(), "seed {seed}: {acked:?}");
        for (evidence, ms) in &acked {
            assert_eq!(*evidence, "release_acked", "seed {seed}: {acked:?}");
            assert!(*ms < DRAIN_MS / 4, "seed {seed}: {acked:?}");
        }
        let waited = join(seed, false);
        for (evidence, ms) in &waited {
            assert_eq!(*evidence, "drain_timeout", "seed {seed}: {waited:?}");
            assert!(*ms >= DRAIN_MS, "seed {seed}: {waited:?}");
        }
    }
}
