//! The kubelet's word as handoff evidence in the simulation: a pod whose
//! kubelet reported its containers stopped (before removing it) hands its
//! shards over without waiting for the drain timeout; a force-deleted pod,
//! whose last status still says running, waits for it, also when a
//! StatefulSet recreates it under its name and the new pod never starts.
//! Without a lease table (drain timeout 20 s), where the drain timeout is
//! the only other evidence.

use shardring_crds::ShardPhase;
use shardring_sim::operator::Operator;
use shardring_sim::scenario::{run_until, settle};
use shardring_sim::world::Rules;
use shardring_sim::{PodStart, Sim};

const DRAIN_MS: u64 = 20_000;

/// Three pods over six shards, settled, without a lease table.
fn settled(seed: u64, statefulset: bool) -> Sim {
    let rules = Rules {
        failover: 6_000,
        max_refresh: 2_000,
        max_lease_lag: 500,
        acks: false,
    };
    let op = Operator::new(false, "20s", "6s", "5s", 0);
    let mut sim = Sim::new(seed, rules, op);
    sim.statefulset = statefulset;
    for _ in 0..6 {
        sim.world.add_shard(0, Vec::new());
    }
    for _ in 0..3 {
        sim.add_pod();
    }
    settle(&mut sim, 2_000);
    assert_eq!(sim.world.violation, None);
    sim.op.groups[0].handoffs.clear();
    sim
}

/// Shards `pod` owns (active) in the published document.
fn owned(sim: &Sim, pod: &str) -> usize {
    let doc = sim.op.groups[0].doc.as_ref().expect("a document");
    doc.shards
        .values()
        .filter(|r| r.owner.as_deref() == Some(pod))
        .filter(|r| matches!(r.state, ShardPhase::Active | ShardPhase::Revoking))
        .count()
}

/// Runs until `pod` owns nothing (at most 200 s), then returns the
/// handoffs that completed meanwhile.
fn hand_over(sim: &mut Sim, pod: &str) -> Vec<(&'static str, u64)> {
    run_until(sim, 600, |s| owned(s, pod) == 0);
    assert_eq!(owned(sim, pod), 0, "{pod} still owns shards");
    assert_eq!(sim.world.violation, None);
    std::mem::take(&mut sim.op.groups[0].handoffs)
}

fn index(sim: &Sim, pod: &str) -> usize {
    sim.world
        .pods
        .iter()
        .position(|p| p.object && p.name == pod)
        .expect("the pod object")
}

#[test]
fn stopped_pods_hand_over_at_once_and_force_deleted_ones_wait_for_the_drain_timeout() {
    for seed in 0..10 {
        let mut sim = settled(seed, false);
        // Graceful deletion: the consumer stops when revoked and exits, the
        // kubelet reports the container terminated, then removes the pod.
        let i = index(&sim, "pod-00");
        assert_eq!(owned(&sim, "pod-00"), 2);
        sim.delete_gracefully(i, 30);
        let graceful = hand_over(&mut sim, "pod-00");
        assert_eq!(graceful.len(), 2, "seed {seed}: {graceful:?}");
        for (evidence, ms) in &graceful {
            assert_eq!(*evidence, "pod_stopped", "seed {seed}: {graceful:?}");
            assert!(*ms < DRAIN_MS / 2, "seed {seed}: {graceful:?}");
        }
        // kill -9 and a force deletion: the object is gone at once, its
        // status still `running`, and the process dies 10 s later (a slow
        // kubelet). Only the drain timeout completes the handoff.
        let i = index(&sim, "pod-01");
        let shards = owned(&sim, "pod-01");
        sim.force_delete(i, 10_000);
        let forced = hand_over(&mut sim, "pod-01");
        assert_eq!(forced.len(), shards, "seed {seed}: {forced:?}");
        for (evidence, ms) in &forced {
            assert_eq!(*evidence, "drain_timeout", "seed {seed}: {forced:?}");
            assert!(*ms >= DRAIN_MS, "seed {seed}: {forced:?}");
        }
    }
}

#[test]
fn a_statefulset_pod_recreated_under_its_name_counts_only_after_a_confirmed_stop() {
    for seed in 0..10 {
        // Deleted gracefully, then recreated under its name but never
        // scheduled: the new pod never ran, the old one stopped.
        let mut sim = settled(seed, true);
        let i = index(&sim, "pod-00");
        sim.delete_gracefully(i, 30);
        run_until(&mut sim, 600, |s| !s.world.pods[i].object);
        sim.spawn_pod("pod-00".into(), PodStart::Unscheduled);
        let graceful = hand_over(&mut sim, "pod-00");
        assert!(
            graceful
                .iter()
                .all(|(e, ms)| *e == "pod_stopped" && *ms < DRAIN_MS),
            "seed {seed}: {graceful:?}"
        );
        // Force-deleted while running (its process lives 10 s more),
        // recreated at once, never scheduled: the new pod never ran, but
        // the old process may still read, so the drain timeout it is.
        let i = index(&sim, "pod-01");
        sim.force_delete(i, 10_000);
        sim.spawn_pod("pod-01".into(), PodStart::Unscheduled);
        let forced = hand_over(&mut sim, "pod-01");
        assert!(!forced.is_empty());
        assert!(
            forced
                .iter()
                .all(|(e, ms)| *e == "drain_timeout" && *ms >= DRAIN_MS),
            "seed {seed}: {forced:?}"
        );
    }
}

#[test]
fn after_a_restart_a_reused_name_waits_for_the_old_rules() {
    for seed in 0..5 {
        // The operator restarts right after a force deletion: its new memory
        // never saw the old pod leave, so the recreated pod's "never ran"
        // proves nothing about it.
        let mut sim = settled(seed, true);
        let i = index(&sim, "pod-00");
        let now = sim.world.now;
        sim.force_delete(i, 10_000);
        sim.op.crash(now, 1_000);
        sim.spawn_pod("pod-00".into(), PodStart::Unscheduled);
        let forced = hand_over(&mut sim, "pod-00");
        assert!(!forced.is_empty());
        assert!(
            forced
                .iter()
                .all(|(e, ms)| *e == "drain_timeout" && *ms >= DRAIN_MS),
            "seed {seed}: {forced:?}"
        );
    }
}
