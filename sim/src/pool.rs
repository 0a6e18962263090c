//! Pool mode: several ShardGroups on one ConsumerPool, whose pods consume
//! them all, with the churn, reshards and faults of every seed, and the
//! real pool-wide balance the operator runs (the
//! [`PoolBook`](shardring_core::pool::PoolBook) each group's reconcile
//! takes its share from, see [`crate::operator`]).
//!
//! A seed draws 2–6 groups, each with a Kinesis stream and its lease table
//! or static partitions, half with standbys; balanced by count, or, in the
//! throughput variant, at least two balanced by throughput (with load in
//! the world) beside some by count; its pods on three nodes, or on one.
//!
//! Checked beyond every group's own invariants and quiet checks (planning
//! again changes nothing, also for a new leader whose book starts empty):
//! once quiet, every eligible pod's active shards over the count groups
//! are within one of each other's (equal capacities: within one shard of
//! its share), its standby slots over the groups with standbys too, every
//! pod's whole load over the throughput groups is within the band (each
//! throughput group's plan judges it with its peers' load, see
//! [`crate::load`]); and a further quiet period writes nothing for a
//! count group (a throughput group's status reports its measurements, and
//! it is held to the load checks again after it).

use std::collections::BTreeMap;

pub use crate::counts::PoolNotes;
use crate::crds::shard_group::ShardSource;
use crate::load::balance_by_throughput;
use crate::operator::{BookAtRest, Group, Operator, WriteCounts};
use crate::rng::Rng;
use crate::run::{
    FAULTS, SeedOutcome, SimConfig, Summary, drive, finish, hold_for_returning_pods, rules,
};
use crate::sim::Sim;
use crate::world::loads::WorldLoads;

/// Steps of the further quiet period in which nothing may be written
/// (each 100–600 ms of simulated time).
const REST_STEPS: u32 = 100;

/// Runs one pool seed balanced by count.
pub fn run_pool_seed(seed: u64, config: SimConfig) -> SeedOutcome {
    run(seed, false, config)
}

/// Runs pool seeds `first..first + count` balanced by count.
pub fn run_pool_seeds(first: u64, count: u64, config: SimConfig) -> Summary {
    Summary::of(first..first + count, |seed| run_pool_seed(seed, config))
}

/// Runs one pool seed with groups balanced by throughput.
pub fn run_pool_load_seed(seed: u64, config: SimConfig) -> SeedOutcome {
    run(seed, true, config)
}

/// Runs pool seeds `first..first + count` with groups balanced by
/// throughput.
pub fn run_pool_load_seeds(first: u64, count: u64, config: SimConfig) -> Summary {
    Summary::of(first..first + count, |seed| {
        run_pool_load_seed(seed, config)
    })
}

fn run(seed: u64, throughput: bool, config: SimConfig) -> SeedOutcome {
    finish(seed, drive_pool(seed, throughput, config))
}

/// Runs pool seed `seed` (with groups balanced by throughput or not) to
/// its end and returns the system as it ended: to look closer at a
/// failure.
pub fn drive_pool(seed: u64, throughput: bool, config: SimConfig) -> Sim {
    let mut sim = drive(setup(seed, throughput), config);
    if sim.world.violation.is_none() {
        sim.check_rest();
    }
    sim
}

/// The system of one pool seed: its groups (sources, modes, standbys,
/// shards), its pool and first pods.
fn setup(seed: u64, throughput: bool) -> Sim {
    let mut rng = Rng::new(seed);
    let min_ready = u32::try_from(rng.below(3)).expect("below 3");
    let statefulset = rng.chance(0.3);
    let count = rng.range(2, 6);
    let mut groups = Vec::new();
    let mut shards = Vec::new();
    for k in 0..count {
        let lease_table = rng.chance(0.5);
        let mut group = Group::new(&format!("g{k}"), lease_table, "20s", "6s", "5s");
        // The throughput variant: at least two groups by throughput.
        let measured = throughput && (k < 2 || rng.chance(0.5));
        if measured {
            balance_by_throughput(&mut group);
        }
        if rng.chance(0.5) {
            group.shard_group.spec.standbys = u32::try_from(rng.range(1, 2)).expect("1 or 2");
        }
        let n = if measured {
            rng.range(8, 16)
        } else {
            rng.range(1, 8)
        };
        if let ShardSource::Static(partitions) = &mut group.shard_group.spec.source {
            partitions.count = u32::try_from(n).expect("a few");
        }
        groups.push(group);
        shards.push(n);
    }
    let mut op = Operator::of_pool(groups, min_ready);
    op.faults = FAULTS;
    hold_for_returning_pods(&mut op, seed, statefulset);
    let reporting: Vec<usize> = (0..op.groups.len())
        .filter(|&g| op.groups[g].shard_group.spec.balance.weighs_load())
        .collect();
    // Three pools in ten run on one node: the standbys' places are then
    // the deal's alone (elsewhere a standby avoids its owner's node).
    let one_node = rng.chance(0.3);
    let mut sim = Sim::new(seed, rules(seed), op);
    if one_node {
        sim.world.nodes.truncate(1);
    }
    sim.rng = rng;
    sim.statefulset = statefulset;
    sim.recreate = 0.5;
    if !reporting.is_empty() {
        sim.world.loads = Some(WorldLoads::new(seed, reporting));
    }
    for (g, n) in shards.into_iter().enumerate() {
        for _ in 0..n {
            sim.world.add_shard(g, Vec::new());
        }
    }
    for _ in 0..sim.rng.range(2, 4) {
        sim.add_pod();
    }
    sim
}

impl Sim {
    /// The pool-wide checks once the system went quiet: the count groups'
    /// active shards and the standby slots of the groups with standbys,
    /// each over every eligible pod (equal capacities: max − min ≤ 1).
    pub(crate) fn check_pool_quiet(&mut self) {
        let mut active: BTreeMap<String, u64> = BTreeMap::new();
        let mut standby: BTreeMap<String, u64> = self
            .eligible_since()
            .map(|(p, _)| (p.name.clone(), 0))
            .collect();
        for g in 0..self.op.groups.len() {
            if !self.by_throughput(g) {
                let per_pod = match self.active_per_pod(g) {
                    Ok(per_pod) => per_pod,
                    Err(what) => {
                        self.world.violate(what);
                        return;
                    }
                };
                for (pod, n) in per_pod {
                    *active.entry(pod).or_insert(0) += n;
                }
            }
            let doc = self.op.groups[g].doc.as_ref().expect("checked per group");
            for pod in doc.shards.values().flat_map(|r| &r.standbys) {
                if let Some(slots) = standby.get_mut(pod) {
                    *slots += 1;
                }
            }
        }
        let judged = self.standbys_dealt() && self.standby_rows_attainable();
        self.pool_notes.standby_spread_judged = u64::from(judged);
        if let Some(what) =
            spread_over_one("active shards over the count groups", &active).or_else(|| {
                judged
                    .then(|| spread_over_one("standby slots", &standby))
                    .flatten()
            })
        {
            self.world.violate(format!("quiet: pool: {what}"));
        }
    }

    /// A further quiet period writes nothing for a group balanced by count:
    /// no document, no annotation, no status beyond its move budget's log
    /// ([`WriteCounts::statuses_beyond_move_log`]). A group balanced by
    /// throughput reports its measurements in its status (load figures, a
    /// pod that noise carries across the band's edge for a moment), and
    /// moves shards when a pod stays outside the band beyond its noise
    /// for the confirmation (and only then: `check_load_move_at_rest`):
    /// its writes are counted, and it is held to the load checks again at
    /// the end (no flapping, the band holds).
    fn check_rest(&mut self) {
        let before: Vec<WriteCounts> = self.op.groups.iter().map(|g| g.writes).collect();
        self.resting = true;
        for _ in 0..REST_STEPS {
            self.step();
            if self.world.violation.is_some() {
                return;
            }
        }
        self.resting = false;
        for (g, before) in before.iter().enumerate() {
            let after = self.op.groups[g].writes;
            let wrote = (
                after.documents - before.documents,
                after.annotations - before.annotations,
                after.statuses_beyond_move_log - before.statuses_beyond_move_log,
            );
            if self.by_throughput(g) {
                self.pool_notes.measured_documents_at_rest += wrote.0;
                self.pool_notes.measured_statuses_at_rest += wrote.2;
                let again = self
                    .op
                    .plan_at_rest(g, BookAtRest::Kept, &self.world, &mut self.rng);
                self.check_load_quiet(g, again.status.throughput.clone());
            } else if wrote != (0, 0, 0) {
                let label = self.label(g);
                self.world.violate(format!(
                    "at rest: {label}{} document, {} annotation and {} status writes in {REST_STEPS} quiet steps after convergence",
                    wrote.0, wrote.1, wrote.2
                ));
            }
            if self.world.violation.is_some() {
                return;
            }
        }
    }
}

/// `what` per pod, said, when its most and fewest differ by more than one.
fn spread_over_one(what: &str, per_pod: &BTreeMap<String, u64>) -> Option<String> {
    let min = per_pod.values().min().copied().unwrap_or(0);
    let max = per_pod.values().max().copied().unwrap_or(0);
    (max > min + 1).then(|| format!("unbalanced {what}: {per_pod:?}"))
}
