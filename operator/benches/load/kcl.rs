//! A KCL 3.x-style reassigner, written here from the rule the KCL publishes
//! (its `VarianceBasedLeaseAssignmentDecider`, `WorkerMetricStats` and
//! `LeaseStatsRecorder`, defaults of `WorkerUtilizationAwareAssignmentConfig`):
//!
//! * each lease's `throughputKBps` is an exponential average (α 0.5) of its
//!   readings; each worker's metric (CPU, proportional to the load it
//!   carries, read with the same ±5 % noise) another (α 0.5), reported
//!   every 30 s;
//! * the leader's assignment runs every failover time (10 s) and balances
//!   variance every third run;
//! * balancing: the fleet average of the metric; if any worker is outside
//!   ±10 % of it, take from every worker at or above +10 % (or the busiest,
//!   if none is) `assigned throughput × (metric − average) ÷ metric × 60 %`
//!   (the dampening), in leases picked in random order, skipping any that
//!   would overshoot the amount (and taking the lightest if none fits:
//!   `allowThroughputOvershoot`);
//! * each lease goes to the worker with the most room below the average
//!   (`(average − metric) ÷ metric`), whose metric is extrapolated by the
//!   lease's share; the taking stops for a worker once the receiver would
//!   pass the average.

use shardring::engine::hash::mix;

use crate::strategies::Strategy;
use crate::world::{Loads, NOISE, unit};

const REBALANCE_THRESHOLD: f64 = 0.10;
const DAMPENING: f64 = 0.60;
const EMA_ALPHA: f64 = 0.5;
const LAM_EVERY: u64 = 10;
const VARIANCE_EVERY_NTH_LAM: u64 = 3;
const METRIC_REPORT_EVERY: u64 = 30;

#[derive(Clone)]
pub struct Kcl {
    owners: Vec<usize>,
    pods: usize,
    /// Each lease's throughputKBps (its EMA).
    lease_tp: Vec<Option<f64>>,
    /// Each worker's metric (its EMA), as last reported.
    metric: Vec<Option<f64>>,
    lam_runs: u64,
    rng: u64,
}

impl Kcl {
    pub fn new(start: Vec<usize>, pods: usize) -> Self {
        let n = start.len();
        Self {
            owners: start,
            pods,
            lease_tp: vec![None; n],
            metric: vec![None; pods],
            lam_runs: 0,
            rng: 0x5eed,
        }
    }

    fn shuffle(&mut self, items: &mut [usize]) {
        for i in (1..items.len()).rev() {
            self.rng = mix(self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15));
            let j = usize::try_from(self.rng % (i as u64 + 1)).expect("below i + 1");
            items.swap(i, j);
        }
    }

    fn balance(&mut self) {
        let Some(metric): Option<Vec<f64>> = self.metric.iter().copied().collect() else {
            return;
        };
        let workers = self.pods as f64;
        let average = metric.iter().sum::<f64>() / workers;
        let (upper, lower) = (
            average * (1.0 + REBALANCE_THRESHOLD),
            average * (1.0 - REBALANCE_THRESHOLD),
        );
        if !metric.iter().any(|&m| m > upper || m < lower) {
            return;
        }
        let tp = |s: usize, lease_tp: &[Option<f64>]| lease_tp[s].unwrap_or(0.0);
        let assigned: Vec<f64> = (0..self.pods)
            .map(|w| {
                (0..self.owners.len())
                    .filter(|&s| self.owners[s] == w)
                    .map(|s| tp(s, &self.lease_tp))
                    .sum()
            })
            .collect();
        let total_tp: f64 = assigned.iter().sum();
        let average_tp = total_tp / workers;
        let target_leases = (self.owners.len() / self.pods).max(1) as f64;
        let mut from: Vec<usize> = (0..self.pods).filter(|&w| metric[w] >= upper).collect();
        if from.is_empty() {
            let busiest = (0..self.pods)
                .max_by(|&a, &b| metric[a].total_cmp(&metric[b]))
                .expect("workers");
            from.push(busiest);
        }
        let mut take: Vec<(usize, f64)> = from
            .iter()
            .map(|&w| {
                (
                    w,
                    assigned[w] * (metric[w] - average) / metric[w] * DAMPENING,
                )
            })
            .collect();
        take.sort_by(|a, b| b.1.total_cmp(&a.1));
        // The assignable workers, by room to the average; extrapolated as
        // leases land on them.
        let mut extrapolated = metric;
        let room = |m: f64| if m == 0.0 { 1.0 } else { (average - m) / m };
        let mut queue: Vec<usize> = (0..self.pods).collect();
        for (worker, amount) in take {
            let mut leases: Vec<usize> = (0..self.owners.len())
                .filter(|&s| self.owners[s] == worker)
                .collect();
            if leases.is_empty() {
                continue;
            }
            let chosen: Vec<usize> = if assigned[worker] == 0.0 {
                vec![leases[0]]
            } else {
                self.shuffle(&mut leases);
                let mut remaining = amount;
                let mut picked = Vec::new();
                for &s in &leases {
                    if remaining - tp(s, &self.lease_tp) <= 0.0 {
                        continue;
                    }
                    remaining -= tp(s, &self.lease_tp);
                    picked.push(s);
                }
                if picked.is_empty() {
                    let lightest = leases
                        .iter()
                        .copied()
                        .min_by(|&a, &b| tp(a, &self.lease_tp).total_cmp(&tp(b, &self.lease_tp)));
                    picked.extend(lightest);
                }
                picked
            };
            for s in chosen {
                queue.sort_by(|&a, &b| {
                    room(extrapolated[b])
                        .total_cmp(&room(extrapolated[a]))
                        .then(a.cmp(&b))
                });
                let Some(&to) = queue.first() else { break };
                let increase = |m: f64| {
                    if average_tp > 0.0 {
                        m + tp(s, &self.lease_tp) * average / average_tp
                    } else {
                        m + average / target_leases
                    }
                };
                if increase(extrapolated[to]) > average {
                    // The receiver leaves the queue for this run.
                    queue.remove(0);
                    break;
                }
                if to == self.owners[s] {
                    continue;
                }
                extrapolated[to] = increase(extrapolated[to]);
                self.owners[s] = to;
            }
        }
    }
}

impl Strategy for Kcl {
    fn name(&self) -> &'static str {
        "kcl-3.x-style"
    }

    fn step(&mut self, t: u64, loads: &Loads) {
        for (s, tp) in self.lease_tp.iter_mut().enumerate() {
            let reading = loads.reading(s, t, 2);
            *tp = Some(tp.map_or(reading, |v| v + EMA_ALPHA * (reading - v)));
        }
        if t.is_multiple_of(METRIC_REPORT_EVERY) {
            for w in 0..self.pods {
                let carried: f64 = (0..self.owners.len())
                    .filter(|&s| self.owners[s] == w)
                    .map(|s| loads.at(s, t))
                    .sum();
                let reading = carried * (1.0 + NOISE * unit(t << 20 ^ w as u64 ^ 0xc0));
                let m = &mut self.metric[w];
                *m = Some(m.map_or(reading, |v| v + EMA_ALPHA * (reading - v)));
            }
        }
        if t.is_multiple_of(LAM_EVERY) && t > 0 {
            if self.lam_runs.is_multiple_of(VARIANCE_EVERY_NTH_LAM) {
                self.balance();
            }
            self.lam_runs += 1;
        }
    }

    fn owners(&self) -> &[usize] {
        &self.owners
    }

    fn boxed(&self) -> Box<dyn Strategy> {
        Box::new(self.clone())
    }
}
