//! Load in the simulated world (groups balanced by throughput only): each
//! shard's true rate, which shifts now and then; consumers that report what
//! they read of each such group every second or so, with ±5 % noise, at the
//! epoch of the group's view they act on, through a lossy, late channel to
//! the operator's endpoint.
//! All of it draws from its own random stream, so a run without load draws
//! exactly what it drew before.

use std::collections::BTreeMap;

use shardring_crds::endpoint::{LoadReport, ShardRate};

use super::{Ms, World};
use crate::rng::Rng;

/// Measurement noise: a reading is the true rate × (1 ± this), uniform.
pub const NOISE: f64 = 0.05;

/// A load report on its way to the endpoint.
#[derive(Debug, Clone)]
pub struct ReportInFlight {
    /// When it arrives.
    pub at: Ms,
    /// The group (index) whose shards it reports.
    pub group: usize,
    /// The reporting pod.
    pub pod: String,
    /// What it says.
    pub report: LoadReport,
}

/// The world's load.
#[derive(Debug, Clone)]
pub struct WorldLoads {
    /// The groups (indexes) whose consumers report their load: those
    /// balanced by throughput.
    pub reporting: Vec<usize>,
    /// True bytes per second per shard (assigned when first needed).
    pub rates: BTreeMap<String, f64>,
    /// Reports on their way.
    pub queue: Vec<ReportInFlight>,
    /// When each consumer process (by instance) reports next.
    next_report: BTreeMap<u64, Ms>,
    /// The load's own randomness.
    pub rng: Rng,
    /// Load shifts made.
    pub shifts: u64,
}

impl WorldLoads {
    /// Load for a run of `seed`, reported by the consumers of `reporting`.
    pub fn new(seed: u64, reporting: Vec<usize>) -> Self {
        Self {
            reporting,
            rates: BTreeMap::new(),
            queue: Vec::new(),
            next_report: BTreeMap::new(),
            rng: Rng::new(seed ^ 0x10ad_10ad_10ad_10ad),
            shifts: 0,
        }
    }

    /// Shard `shard`'s true rate (a new shard gets one between 0.5 and 1.5
    /// MB/s).
    pub fn rate(&mut self, shard: &str) -> f64 {
        if let Some(&rate) = self.rates.get(shard) {
            return rate;
        }
        let rate = 1_000_000.0 * (0.5 + self.rng.below(1001) as f64 / 1000.0);
        self.rates.insert(shard.to_owned(), rate);
        rate
    }

    /// A reading of `shard`.
    fn reading(&mut self, shard: &str) -> f64 {
        let rate = self.rate(shard);
        let unit = self.rng.below(2001) as f64 / 1000.0 - 1.0;
        rate * (1.0 + NOISE * unit)
    }

    /// Shifts one shard's load: × 2 or ÷ 2.
    pub fn shift(&mut self, shards: &[String]) {
        let Some(shard) = self.rng.pick(shards).cloned() else {
            return;
        };
        let factor = if self.rng.chance(0.5) { 2.0 } else { 0.5 };
        let rate = self.rate(&shard) * factor;
        self.rates.insert(shard, rate);
        self.shifts += 1;
    }
}

impl World {
    /// Every live consumer reports what it reads, about once a second (a
    /// few reports are lost, each arrives after its own delay).
    pub fn report_loads(&mut self) {
        let now = self.now;
        let Some(mut loads) = self.loads.take() else {
            return;
        };
        for pod in self.pods.iter().filter(|p| p.process.is_some()) {
            let c = pod.process.as_ref().expect("a process");
            let due = loads.next_report.entry(c.instance).or_insert(now);
            if *due > now {
                continue;
            }
            *due = now + loads.rng.range(800, 1200);
            for &group in &loads.reporting.clone() {
                let shards = c
                    .reading
                    .keys()
                    .filter(|shard| {
                        self.stream
                            .iter()
                            .any(|s| &s.id == *shard && s.group == group)
                    })
                    .map(|shard| ShardRate {
                        shard: shard.clone(),
                        bytes_per_second: loads.reading(shard),
                        records_per_second: 0.0,
                    })
                    .collect();
                if loads.rng.chance(0.05) {
                    continue;
                }
                let delay = loads.rng.range(5, 400);
                loads.queue.push(ReportInFlight {
                    at: now + delay,
                    group,
                    pod: pod.name.clone(),
                    report: LoadReport {
                        epoch: c.views[group].epoch,
                        shards,
                    },
                });
            }
        }
        self.loads = Some(loads);
    }
}
