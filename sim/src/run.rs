//! Running seeds: one seed end to end ([`run_seed`]: the faulty phase, the
//! quiet phase, settling, the final checks), many seeds ([`run_seeds`]) and
//! what they add up to ([`Summary`]).

use std::collections::BTreeMap;

pub use crate::counts::EventCounts;
use crate::counts::PoolNotes;
use crate::operator::{FaultCounts, Faults, Operator, Verdicts};
use crate::rng::Rng;
use crate::sim::Sim;
use crate::world::{Ms, Rules};

/// How a run is shaped.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// Steps with faults (each 100–600 ms of simulated time).
    pub steps: u32,
    /// Quiet steps afterwards, before the final checks.
    pub quiet_steps: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            steps: 300,
            quiet_steps: 400,
        }
    }
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Whether the run used a lease table (any of its groups).
    pub lease_table: bool,
    /// The first invariant violation, if any.
    pub violation: Option<String>,
    /// Handoff durations (ms) by evidence.
    pub handoffs: Vec<(&'static str, u64)>,
    /// Pod and stream events.
    pub events: EventCounts,
    /// Operator-side faults.
    pub faults: FaultCounts,
    /// Records read, and read again.
    pub records: (u64, u64),
    /// Pool mode: what the standby checks judged and let pass.
    pub pool: PoolNotes,
    /// How the operator's echo bookkeeping judged its watch events.
    pub watch: Verdicts,
}

/// The return window of the seeds that hold for returning pods: shorter
/// than most recreations take in the world, so holds both end with the pod
/// back and expire.
pub const HOLD_WINDOW: &str = "15s";

/// Runs one seed.
pub fn run_seed(seed: u64, config: SimConfig) -> SeedOutcome {
    let sim = setup(seed, false);
    finish(seed, drive(sim, config))
}

/// The system of one seed: the group (balanced by count, or by throughput
/// with load in the world), its timings, its shards and first pods.
pub(crate) fn setup(seed: u64, throughput: bool) -> Sim {
    let mut rng = Rng::new(seed);
    let lease_table = rng.chance(0.7);
    let min_ready = u32::try_from(rng.below(3)).expect("below 3");
    let statefulset = rng.chance(0.3);
    let mut op = Operator::new(lease_table, "20s", "6s", "5s", min_ready);
    op.faults = FAULTS;
    hold_for_returning_pods(&mut op, seed, statefulset);
    let mut sim = Sim::new(seed, rules(seed), op);
    sim.rng = rng;
    sim.statefulset = statefulset;
    sim.recreate = 0.5;
    if throughput {
        crate::load::by_throughput(&mut sim, seed);
    }
    let shards = if throughput {
        sim.rng.range(24, 40)
    } else {
        sim.rng.range(3, 8)
    };
    for _ in 0..shards {
        sim.world.add_shard(0, Vec::new());
    }
    for _ in 0..sim.rng.range(2, 4) {
        sim.add_pod();
    }
    sim
}

/// The world's rules of seed `seed`. Half the seeds acknowledge releases
/// at the endpoint (derived from the seed, so the random stream of the
/// others is unchanged).
pub(crate) fn rules(seed: u64) -> Rules {
    Rules {
        failover: 6_000,
        max_refresh: 3_000,
        max_lease_lag: 2_000,
        acks: seed % 2 == 1,
    }
}

/// The operator-side faults of the faulty phase.
pub(crate) const FAULTS: Faults = Faults {
    write_fail: 0.05,
    write_late: 0.05,
    topology_fail: 0.05,
    topology_stale: 0.1,
    lease_fail: 0.05,
    foreign_write: 0.05,
};

/// Half the StatefulSet seeds hold a departed pod's shards for its return
/// (ConsumerPool identity; derived from the seed, so the random stream is
/// unchanged): holds that end with the pod back, and holds that expire (a
/// pod not recreated, or recreated late).
pub(crate) fn hold_for_returning_pods(op: &mut Operator, seed: u64, statefulset: bool) {
    if statefulset && (seed / 2).is_multiple_of(2) {
        op.pool.spec.identity = Some(shardring_crds::consumer_pool::IdentitySpec {
            stable: true,
            return_within: HOLD_WINDOW.into(),
        });
    }
}

/// Runs the faulty phase, the quiet phase and the settling of `sim`, then
/// the quiet checks; returns the system as it ended.
pub(crate) fn drive(mut sim: Sim, config: SimConfig) -> Sim {
    for _ in 0..config.steps {
        sim.inject();
        sim.inject_load();
        sim.step();
        if sim.world.violation.is_some() {
            break;
        }
    }
    sim.op.faults = Faults::default();
    // Every pod gets a node (a pod that stays unscheduled would keep the
    // quiet checks from ever seeing its share placed).
    let now = sim.world.now;
    for pod in sim
        .world
        .pods
        .iter_mut()
        .filter(|p| p.object && !p.scheduled)
    {
        pod.scheduled = true;
        pod.start_at = Some(now + 500);
    }
    // The quiet phase starts from a pool with at least two pods.
    let live = sim
        .world
        .pods
        .iter()
        .filter(|p| p.object && p.deletion.is_none())
        .count();
    for _ in live..2 {
        sim.add_pod();
    }
    for node in sim.world.nodes.iter_mut() {
        *node = None;
    }
    sim.quiet_since = Some(sim.world.now);
    for _ in 0..config.quiet_steps {
        if sim.world.violation.is_some() {
            break;
        }
        sim.step();
    }
    // The quiet checks judge a settled system: a document published in the
    // last moments of the quiet phase (a drain-timeout handoff ends late) has
    // not been seen by its consumers yet, and a move begun late in it (by
    // throughput, once an out-of-band reading is confirmed) is still in
    // flight. Keep stepping, within a bound, until no handoff is in flight
    // and the published epoch has held for longer than a consumer's refresh.
    // A group whose last write failed before the quiet phase is retried
    // after its backoff, up to the retry rule's longest: the bound waits
    // for that retry too (an API brownout that ends in a quiet cluster
    // leaves nothing else to wake the group), and what that retry decides
    // gets a quiet phase of its own.
    let settle = 2 * sim.world.rules.max_refresh;
    let mut epoch = published_epochs(&sim);
    let mut held_since = sim.world.now;
    let longest_retry =
        Ms::try_from(shardring_core::retry::BACKOFF_MAX.as_millis()).unwrap_or(Ms::MAX);
    let retried_by = sim.world.now + longest_retry + settle;
    let mut steps = 0;
    let mut retried_at: Option<Ms> = None;
    loop {
        let now = sim.world.now;
        let waiting_for_retry = now <= retried_by
            && (sim.op.retry_pending() || retried_at.is_some_and(|at| now - at <= settle));
        if sim.world.violation.is_some()
            || (steps >= config.quiet_steps && !waiting_for_retry)
            || (sim.world.now - held_since > settle
                && !handoffs_in_flight(&sim)
                && !sim.load_unsettled()
                && !sim.op.retry_pending())
        {
            break;
        }
        steps += 1;
        let retry_was_pending = sim.op.retry_pending();
        sim.step();
        let now_epoch = published_epochs(&sim);
        // A retry that went through may have written what the consumers
        // still have to see.
        let retried = retry_was_pending && !sim.op.retry_pending();
        if retried {
            retried_at = Some(sim.world.now);
            // What the retry decided (optional moves after the rebalance
            // delay, their drain) gets as long to settle as the quiet
            // phase gave everything else: the retry is the system's last
            // event.
            steps = 0;
        }
        if now_epoch != epoch || retried {
            epoch = now_epoch;
            held_since = sim.world.now;
        }
    }
    if sim.world.violation.is_none() {
        sim.check_quiet();
    }
    sim
}

/// The outcome of a driven system.
pub(crate) fn finish(seed: u64, sim: Sim) -> SeedOutcome {
    let world = sim.world;
    SeedOutcome {
        seed,
        lease_table: world.any_lease_table(),
        violation: world.violation,
        handoffs: sim.op.groups.into_iter().flat_map(|g| g.handoffs).collect(),
        events: sim.events,
        faults: sim.op.fired,
        records: (world.counts.records_read, world.counts.records_repeated),
        pool: sim.pool_notes,
        watch: sim.op.watch.verdicts,
    }
}

/// The result of many seeds.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Failing seeds with their first violation.
    pub failures: Vec<(u64, String)>,
    /// Seeds with a lease table.
    pub with_lease_table: u64,
    /// Handoff durations (ms) by evidence, over every seed.
    pub handoffs: BTreeMap<&'static str, Vec<u64>>,
    /// Events over every seed.
    pub events: EventCounts,
    /// Faults over every seed.
    pub faults: FaultCounts,
    /// Records read and read again.
    pub records: (u64, u64),
    /// Pool mode: what the standby checks judged and let pass.
    pub pool: PoolNotes,
    /// How the watch events were judged, over every seed.
    pub watch: Verdicts,
}

impl Summary {
    /// The summary of `run` over `seeds`.
    pub fn of(seeds: std::ops::Range<u64>, run: impl Fn(u64) -> SeedOutcome) -> Self {
        let mut summary = Self::default();
        for seed in seeds {
            summary.add(run(seed));
        }
        summary
    }

    /// Adds one seed's outcome.
    pub fn add(&mut self, o: SeedOutcome) {
        self.seeds += 1;
        if let Some(v) = o.violation {
            self.failures.push((o.seed, v));
        }
        self.with_lease_table += u64::from(o.lease_table);
        for (label, ms) in o.handoffs {
            self.handoffs.entry(label).or_default().push(ms);
        }
        let e = &mut self.events;
        e.joins += o.events.joins;
        e.graceful_deletes += o.events.graceful_deletes;
        e.kills += o.events.kills;
        e.force_deletes += o.events.force_deletes;
        e.partitions += o.events.partitions;
        e.splits += o.events.splits;
        e.merges += o.events.merges;
        e.unscheduled += o.events.unscheduled;
        e.recreated += o.events.recreated;
        e.holds_returned += o.events.holds_returned;
        e.holds_expired += o.events.holds_expired;
        let f = &mut self.faults;
        f.writes_failed += o.faults.writes_failed;
        f.writes_late += o.faults.writes_late;
        f.writes_refused += o.faults.writes_refused;
        f.topology_failed += o.faults.topology_failed;
        f.topology_stale += o.faults.topology_stale;
        f.lease_failed += o.faults.lease_failed;
        f.crashes += o.faults.crashes;
        f.watch_gaps += o.faults.watch_gaps;
        f.foreign_writes += o.faults.foreign_writes;
        self.pool.add(&o.pool);
        self.watch.add(o.watch);
        self.records.0 += o.records.0;
        self.records.1 += o.records.1;
    }
}

/// Runs seeds `first..first + count`.
pub fn run_seeds(first: u64, count: u64, config: SimConfig) -> Summary {
    Summary::of(first..first + count, |seed| run_seed(seed, config))
}

/// Epoch of the document the simulated operator last published, per
/// group (0 before any).
fn published_epochs(sim: &Sim) -> Vec<u64> {
    let epoch = |g: &crate::operator::Group| g.doc.as_ref().map_or(0, |doc| doc.epoch);
    sim.op.groups.iter().map(epoch).collect()
}

/// Whether a published document has a shard revoking (a shard held for
/// its returning owner is `Held`, not revoking).
fn handoffs_in_flight(sim: &Sim) -> bool {
    sim.op.groups.iter().any(|g| {
        g.doc.as_ref().is_some_and(|doc| {
            doc.shards
                .values()
                .any(|r| r.state == crate::crds::ShardPhase::Revoking)
        })
    })
}

/// The `p`-th percentile (0–100) of `values` (sorted in place).
pub fn percentile(values: &mut [u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    // A float-to-int cast saturates, and the rank is clamped to the slice below.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[rank.min(values.len() - 1)]
}
