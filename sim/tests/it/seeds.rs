//! The deterministic simulation over many seeds: zero invariant violations
//! (never two readers, parents before children, no record skipped, no
//! shrink from a read error, quiet state owned, read and balanced), the same
//! seed gives the same run, and a rolling deploy moves each shard about once.

use shardring_sim::{self as sim, SimConfig};

/// Fails with the first violation when any seed of `summary` broke an
/// invariant.
pub(crate) fn assert_clean(summary: &sim::Summary) {
    assert!(
        summary.failures.is_empty(),
        "{} of {} seeds violated an invariant; first: {:?}",
        summary.failures.len(),
        summary.seeds,
        summary.failures.first()
    );
}

#[test]
fn a_thousand_seeds_keep_every_invariant() {
    let summary = sim::run_seeds(0, 1_000, SimConfig::default());
    assert_clean(&summary);
    // The faults really happened.
    assert!(summary.with_lease_table > 500 && summary.with_lease_table < 1_000);
    assert!(summary.events.kills > 0 && summary.events.force_deletes > 0);
    assert!(summary.events.partitions > 0 && summary.events.splits > 0);
    assert!(summary.faults.crashes > 0 && summary.faults.writes_late > 0);
    let w = summary.watch;
    assert!(w.echoes > 0 && w.held > 0 && w.changes > 0, "{w:?}");
    assert!(summary.faults.foreign_writes > 0);
    assert!(summary.handoffs.contains_key("lease_released"));
    assert!(summary.handoffs.contains_key("pod_gone"));
    assert!(summary.handoffs.contains_key("pod_stopped"));
    assert!(summary.events.unscheduled > 0 && summary.events.recreated > 0);
    assert!(summary.faults.watch_gaps > 0);
    // Holds for returning StatefulSet pods: some came back, some expired.
    assert!(
        summary.events.holds_returned > 0 && summary.events.holds_expired > 0,
        "{:?}",
        summary.events
    );
}

#[test]
fn a_seed_replays_exactly() {
    let a = sim::run_seed(4242, SimConfig::default());
    let b = sim::run_seed(4242, SimConfig::default());
    assert_eq!(a.handoffs, b.handoffs);
    assert_eq!(a.records, b.records);
    assert_eq!(a.violation, b.violation);
}

#[test]
fn a_rolling_deploy_moves_each_shard_about_once() {
    let deploy = sim::rolling_deploy(1, 10, 100);
    assert_eq!(deploy.violation, None);
    assert!(
        deploy.moves_per_shard() <= 1.1,
        "{} moves over {} shards",
        deploy.moves,
        deploy.shards
    );
    assert!(deploy.moves >= 100, "every old pod's shards had to move");
}

#[test]
#[ignore = "long soak: 100,000 seeds, run with --ignored"]
fn a_hundred_thousand_seeds_keep_every_invariant() {
    let summary = sim::run_seeds(0, 100_000, SimConfig::default());
    assert_clean(&summary);
}
