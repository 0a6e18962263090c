//! Planned-event scenarios measured in the simulation: a rolling deploy
//! (surge one new pod, wait until it is eligible, delete one old pod
//! gracefully, wait until it is gone) without faults, counting how often
//! each shard changed owner and how long each handoff took.

use super::operator::Operator;
use super::world::Rules;
use super::{Sim, percentile};

/// What a rolling deploy cost.
#[derive(Debug, Clone)]
pub struct RollingDeploy {
    /// Pods replaced.
    pub pods: usize,
    /// Shards.
    pub shards: usize,
    /// Owner changes of active shards during the deploy.
    pub moves: u64,
    /// Handoff durations (ms), sorted.
    pub handoffs: Vec<u64>,
    /// Simulated duration of the deploy (ms).
    pub duration_ms: i64,
    /// First invariant violation, if any.
    pub violation: Option<String>,
}

impl RollingDeploy {
    /// Moves per shard.
    pub fn moves_per_shard(&self) -> f64 {
        self.moves as f64 / self.shards.max(1) as f64
    }
    /// Handoff duration percentile (ms).
    pub fn handoff_percentile(&self, p: f64) -> u64 {
        percentile(&mut self.handoffs.clone(), p)
    }
}

/// Replaces `pods` pods one by one over `shards` shards (with a lease table,
/// no faults) and measures the moves.
pub fn rolling_deploy(seed: u64, pods: usize, shards: usize) -> RollingDeploy {
    let rules = Rules {
        failover: 10_000,
        max_refresh: 2_000,
        max_lease_lag: 500,
        acks: false,
    };
    let op = Operator::new(true, "60s", "10s", "30s", 5);
    let mut sim = Sim::new(seed, rules, op);
    for _ in 0..shards {
        sim.world.add_shard(0, Vec::new());
    }
    let old: Vec<String> = (0..pods).map(|_| sim.add_pod()).collect();
    settle(&mut sim, 600);
    let start = sim.world.now;
    sim.op.groups[0].moves = 0;
    sim.op.groups[0].handoffs.clear();
    for name in &old {
        let new = sim.add_pod();
        // maxSurge 1: wait until the new pod is Ready for minReadySeconds.
        run_until(&mut sim, 400, |s| {
            s.world
                .pods
                .iter()
                .any(|p| p.name == new && p.ready_since.is_some_and(|r| s.world.now - r >= 5_000))
        });
        let i = sim
            .world
            .pods
            .iter()
            .position(|p| &p.name == name)
            .expect("old pod");
        sim.delete_gracefully(i, 90);
        run_until(&mut sim, 2_000, |s| !s.world.pods[i].object);
    }
    settle(&mut sim, 2_000);
    let mut handoffs: Vec<u64> = sim.op.groups[0]
        .handoffs
        .iter()
        .map(|(_, ms)| *ms)
        .collect();
    handoffs.sort_unstable();
    RollingDeploy {
        pods,
        shards,
        moves: sim.op.groups[0].moves,
        handoffs,
        duration_ms: sim.world.now - start,
        violation: sim.world.violation.clone(),
    }
}

/// Steps `sim` until `done` holds (or a violation, or `max_steps` steps).
pub fn run_until(sim: &mut Sim, max_steps: u32, done: impl Fn(&Sim) -> bool) {
    for _ in 0..max_steps {
        if done(sim) || sim.world.violation.is_some() {
            return;
        }
        sim.step();
    }
}

/// Runs until no handoff is in flight and every active shard is read (and
/// at least a minute passed since the start).
pub fn settle(sim: &mut Sim, max_steps: u32) {
    run_until(sim, max_steps, |s| {
        let Some(doc) = &s.op.groups[0].doc else {
            return false;
        };
        let quiet = doc
            .shards
            .values()
            .all(|r| r.state != crate::crds::ShardPhase::Revoking);
        let read: usize = s
            .world
            .pods
            .iter()
            .filter_map(|p| p.process.as_ref())
            .map(|c| c.reading.len())
            .sum();
        quiet && read == doc.shards.len() && s.world.now > 60_000
    });
}
