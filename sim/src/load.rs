//! Seeds balanced by throughput: the same faults and events as every seed,
//! plus load — each shard with its own rate, readings with ±5 % noise that
//! consumers report about once a second through a lossy, late channel, and
//! now and then a shard whose load doubles or halves — fed through the real
//! load book (the endpoint's checks and smoothing) to the real plan step.
//!
//! Checked beyond the invariants of every seed: after the system goes quiet
//! no shard is moved twice within the damping interval unless the eligible
//! pods changed in between (noise alone never moves one back and forth), and
//! the band holds: no pod is outside it by more than its noise explains for
//! longer than the plan takes to confirm the reading and act on it.

use shardring_core::conditions;
use shardring_core::load::CONFIRM_HALF_LIVES;

use crate::band_reachable::band_reachable;
use crate::crds::shard_group::{BalanceMode, ThroughputSpec, ThroughputStatus};
use crate::operator::{Group, sim_ms};
use crate::run::{SeedOutcome, SimConfig, Summary, drive, finish, setup};
use crate::sim::Sim;
use crate::world::Ms;
use crate::world::loads::WorldLoads;

/// The damping interval of the simulated groups (the sim's minutes are short).
pub const DAMPING_MS: Ms = 20_000;

/// The load half-life of the simulated groups, ms.
const HALF_LIFE_MS: Ms = 2_000;

/// How long a pod must read outside the band before its shards move, ms.
const CONFIRM_MS: Ms = HALF_LIFE_MS * CONFIRM_HALF_LIVES as Ms;

/// Runs one seed balanced by throughput.
pub fn run_load_seed(seed: u64, config: SimConfig) -> SeedOutcome {
    finish(seed, drive(setup(seed, true), config))
}

/// Runs seeds `first..first + count` balanced by throughput.
pub fn run_load_seeds(first: u64, count: u64, config: SimConfig) -> Summary {
    Summary::of(first..first + count, |seed| run_load_seed(seed, config))
}

/// Makes `sim`'s one group balance by throughput, on the simulation's time
/// scale, with load in the world.
pub fn by_throughput(sim: &mut Sim, seed: u64) {
    balance_by_throughput(&mut sim.op.groups[0]);
    sim.world.loads = Some(WorldLoads::new(seed, vec![0]));
}

/// Makes `group` balance by throughput, on the simulation's time scale.
pub fn balance_by_throughput(group: &mut Group) {
    let spec = &mut group.shard_group.spec;
    spec.balance = BalanceMode::Throughput;
    spec.throughput = Some(ThroughputSpec {
        half_life: format!("{HALF_LIFE_MS}ms"),
        damping_interval: format!("{}ms", DAMPING_MS),
        stale_after: "10s".into(),
        ..ThroughputSpec::default()
    });
}

impl Sim {
    /// Whether group `g` balances by throughput.
    pub fn by_throughput(&self, g: usize) -> bool {
        self.op.groups[g].shard_group.spec.balance.weighs_load()
    }

    /// Now and then a shard's load doubles or halves (from the load's own
    /// randomness: a seed without load draws nothing here).
    pub(crate) fn inject_load(&mut self) {
        let Some(loads) = self.world.loads.as_mut() else {
            return;
        };
        if loads.rng.chance(0.01) {
            let open: Vec<String> = self
                .world
                .stream
                .iter()
                .filter(|s| s.open && loads.reporting.contains(&s.group))
                .map(|s| s.id.clone())
                .collect();
            loads.shift(&open);
        }
    }

    /// The load checks of group `g` once the system went quiet: no
    /// flapping, and the band holds (`throughput` as a plan made now sees
    /// it: in pool mode, of each pod's whole load over the pool's
    /// throughput groups).
    ///
    /// A pod that noise carries across the trigger's edge (the band plus
    /// its noise margin) now and then reads outside without being there:
    /// the confirmation keeps its shards from moving until the reading
    /// persists. So the band is broken only by pods outside for longer
    /// than the confirmation and a damping interval, plus a reconcile: by
    /// then the plan had to act on them.
    pub(crate) fn check_load_quiet(&mut self, g: usize, throughput: Option<ThroughputStatus>) {
        let since = self.quiet_since.unwrap_or(0);
        let label = self.label(g);
        let group = &self.op.groups[g];
        // In decision order: a late document lands after later decisions.
        let mut revokes: Vec<&(Ms, String)> = group
            .revokes
            .iter()
            .filter(|(at, _)| *at >= since)
            .collect();
        revokes.sort();
        let mut last: std::collections::BTreeMap<&str, Ms> = Default::default();
        for (at, shard) in revokes {
            if let Some(&before) = last.get(shard.as_str())
                && at - before < DAMPING_MS
                && !group
                    .pod_changes
                    .iter()
                    .any(|&change| change > before && change <= *at)
            {
                self.world.violate(format!(
                    "quiet: {shard} moved at {before} ms and again at {at} ms, within the damping interval, with no pod change in between"
                ));
                return;
            }
            last.insert(shard, *at);
        }
        let Some(throughput) = throughput else {
            self.world.violate(format!(
                "quiet: {label}no throughput status after quiescence"
            ));
            return;
        };
        if throughput.out_of_band_pods == 0 {
            return;
        }
        let outside_for = throughput
            .out_of_band_since
            .map_or(0, |t| self.world.now - sim_ms(t));
        let acts_within = CONFIRM_MS + DAMPING_MS + self.world.rules.max_refresh;
        if outside_for <= acts_within {
            return;
        }
        if self.band_reachable(g) == Some(false) {
            // No placement of these loads meets the band: a pod is outside
            // for good whatever the plan does (see `band_reachable`).
            self.pool_notes.band_unreachable += 1;
            return;
        }
        self.world.violate(format!(
            "quiet: {label}{} pods outside the band for {outside_for} ms (load ÷ fair share {:?})",
            throughput.out_of_band_pods, throughput.spread
        ));
    }

    /// Whether any placement of the true loads of the throughput groups'
    /// readable shards on the eligible pods meets group `g`'s band (`None`:
    /// cannot tell).
    fn band_reachable(&self, g: usize) -> Option<bool> {
        let loads = self.world.loads.as_ref()?;
        let rates = self
            .world
            .stream
            .iter()
            .filter(|s| loads.reporting.contains(&s.group) && self.world.to_be_read(s))
            .map(|s| loads.rates.get(&s.id).copied())
            .collect::<Option<Vec<f64>>>()?;
        let band = f64::from(
            self.op.groups[g]
                .shard_group
                .throughput_settings()
                .band_percent,
        ) / 100.0;
        band_reachable(&rates, self.eligible_since().count(), band)
    }

    /// When group `g`'s published status says pods are outside the band
    /// beyond their noise since (`None`: they are not, or it balances by
    /// count).
    pub(crate) fn out_of_band_since(&self, g: usize) -> Option<Ms> {
        let status = self.op.groups[g].status.as_ref()?;
        status.throughput.as_ref()?.out_of_band_since.map(sim_ms)
    }

    /// At rest (pool mode), a group balanced by throughput moves shards
    /// for load only once pods were outside the band beyond their noise
    /// for the confirmation (`since`: from when, as the status the
    /// reconcile read says): noise alone moves nothing.
    pub(crate) fn check_load_move_at_rest(
        &mut self,
        g: usize,
        since: Option<Ms>,
        decision: &shardring_core::plan::Decision,
    ) {
        let confirmed = since.is_some_and(|at| self.world.now - at >= CONFIRM_MS);
        if self.by_throughput(g) && decision.moves.optional > 0 && !confirmed {
            let label = self.label(g);
            self.world.violate(format!(
                "at rest: {label}moved {} shards for load with nothing confirmed outside the band (outside since {since:?})",
                decision.moves.optional
            ));
        }
    }

    /// Whether the published status of a group balanced by throughput
    /// shows pods outside the band, or a load measurement missing (the
    /// quiet phase waits for both).
    pub fn load_unsettled(&self) -> bool {
        (0..self.op.groups.len()).any(|g| self.group_load_unsettled(g))
    }

    fn group_load_unsettled(&self, g: usize) -> bool {
        if !self.by_throughput(g) {
            return false;
        }
        let Some(status) = &self.op.groups[g].status else {
            return true;
        };
        let measured = conditions::find(&status.conditions, conditions::LOAD_MEASURED)
            .is_some_and(|c| c.status == "True");
        !measured
            || status
                .throughput
                .as_ref()
                .is_none_or(|t| t.out_of_band_pods > 0)
    }
}
