//! The simulated world of the load benchmark: shards with true loads
//! (Zipf-skewed, optionally drifting, optionally shifted), readings with
//! ±5 % uniform noise drawn from a fixed seed (every strategy sees the same
//! readings), and how an assignment is judged: max/mean and max/fair (the
//! water-filled fair share, which gives a pod holding a shard heavier than
//! the mean that shard alone), whether every pod is within the band, and
//! the lower bound of moves back into it.

use shardring::engine::hash::mix;
use shardring::engine::throughput::fair_shares;

/// Seconds between readings (and plans).
pub const STEP_SECONDS: u64 = 10;
/// Measurement noise: readings are the true load × (1 ± this), uniform.
pub const NOISE: f64 = 0.05;
/// The band: ±10 % of each pod's fair share.
pub const BAND: f64 = 0.10;

/// Zipf(`s`) loads over `n` shards (the k-th heaviest ∝ 1/k^s), dealt in a
/// scrambled order, summing to `total` bytes/s.
pub fn zipf(n: usize, s: f64, total: f64) -> Vec<f64> {
    let raw: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let sum: f64 = raw.iter().sum();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| mix(i as u64 + 0x9e37));
    let mut out = vec![0.0; n];
    for (rank, &at) in order.iter().enumerate() {
        out[at] = raw[rank] / sum * total;
    }
    out
}

/// A uniform number in [−1, 1] from a seed.
pub fn unit(seed: u64) -> f64 {
    let bits = mix(seed) >> 11;
    (bits as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// The true loads over time.
#[derive(Clone)]
pub struct Loads {
    /// Loads at the start, bytes/s.
    pub base: Vec<f64>,
    /// Slow drift: each shard's load × (1 + amplitude · sin(2π t / period + phase)).
    pub drift: Option<(f64, f64)>,
    /// Factor per shard (a load shift).
    pub factor: Vec<f64>,
}

impl Loads {
    pub fn new(base: Vec<f64>) -> Self {
        let n = base.len();
        Self {
            base,
            drift: None,
            factor: vec![1.0; n],
        }
    }

    /// Shard `s`'s true load at second `t`.
    pub fn at(&self, s: usize, t: u64) -> f64 {
        let mut load = self.base[s] * self.factor[s];
        if let Some((amplitude, period)) = self.drift {
            let phase = (unit(s as u64 ^ 0xd21f7) + 1.0) * std::f64::consts::PI;
            let angle = 2.0 * std::f64::consts::PI * t as f64 / period + phase;
            load *= 1.0 + amplitude * angle.sin();
        }
        load
    }

    /// All true loads at second `t`.
    pub fn all(&self, t: u64) -> Vec<f64> {
        (0..self.base.len()).map(|s| self.at(s, t)).collect()
    }

    /// The reading of shard `s` at second `t` (`stream` separates the
    /// readings of different meters: lease throughput, worker CPU).
    pub fn reading(&self, s: usize, t: u64, stream: u64) -> f64 {
        let seed = (t / STEP_SECONDS) << 24 ^ (s as u64) << 4 ^ stream;
        self.at(s, t) * (1.0 + NOISE * unit(seed))
    }
}

/// How an assignment carries the true loads.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// Most pod load ÷ mean pod load.
    pub max_over_mean: f64,
    /// Most pod load ÷ its water-filled fair share.
    pub max_over_fair: f64,
    /// Least pod load ÷ its water-filled fair share.
    pub min_over_fair: f64,
    /// Pods over / under the band (around the water-filled fair share).
    pub over: usize,
    pub under: usize,
    /// Each pod's load ÷ its fair share.
    pub ratios: Vec<f64>,
    /// Each pod's load and fair share.
    pub load: Vec<f64>,
    pub fair: Vec<f64>,
}

impl Judgement {
    /// Whether every pod is inside the band.
    pub fn in_band(&self) -> bool {
        self.over == 0 && self.under == 0
    }

    /// Pods above `high` and below `low` (load ÷ fair share).
    pub fn outside(&self, low: f64, high: f64) -> (usize, usize) {
        let eps = 1e-9;
        (
            self.ratios.iter().filter(|&&r| r > high + eps).count(),
            self.ratios.iter().filter(|&&r| r < low - eps).count(),
        )
    }

    /// The fewest moves that bring every pod inside [`low`, `high`] (load ÷
    /// fair share) from `owners` at `loads`: a pod over must give at least
    /// the fewest of its shards that cover its excess (its heaviest first,
    /// but never the shard its fair share is made of), a pod under must take
    /// at least one, and one move serves one of each.
    pub fn lower_bound(&self, owners: &[usize], loads: &[f64], low: f64, high: f64) -> usize {
        let eps = 1e-9;
        let (mut give, mut under) = (0, 0);
        for (p, &ratio) in self.ratios.iter().enumerate() {
            if ratio < low - eps {
                under += 1;
                continue;
            }
            if ratio <= high + eps {
                continue;
            }
            let mut held: Vec<f64> = (0..owners.len())
                .filter(|&s| owners[s] == p)
                .map(|s| loads[s])
                .collect();
            held.sort_by(|a, b| b.total_cmp(a));
            let dedicated = held.first().is_some_and(|&h| h >= self.fair[p] - eps);
            let mut excess = self.load[p] - self.fair[p] * high;
            for w in held.into_iter().skip(usize::from(dedicated)) {
                if excess <= eps {
                    break;
                }
                excess -= w;
                give += 1;
            }
        }
        give.max(under)
    }
}

/// Judges `owners` (shard → pod) over `pods` pods at true `loads`.
pub fn judge(owners: &[usize], pods: usize, loads: &[f64]) -> Judgement {
    let mut load = vec![0.0; pods];
    let mut heaviest = vec![0.0f64; pods];
    for (s, &p) in owners.iter().enumerate() {
        load[p] += loads[s];
        heaviest[p] = heaviest[p].max(loads[s]);
    }
    let fair = fair_shares(&load, &heaviest, &vec![1.0; pods]);
    let mean = load.iter().sum::<f64>() / pods as f64;
    let max = load.iter().copied().fold(0.0, f64::max);
    let ratios: Vec<f64> = load.iter().zip(&fair).map(|(l, f)| l / f).collect();
    Judgement {
        max_over_mean: max / mean,
        max_over_fair: ratios.iter().copied().fold(0.0, f64::max),
        min_over_fair: ratios.iter().copied().fold(f64::MAX, f64::min),
        over: ratios.iter().filter(|&&r| r > 1.0 + BAND).count(),
        under: ratios.iter().filter(|&&r| r < 1.0 - BAND).count(),
        ratios,
        load,
        fair,
    }
}

/// The lower bound of max/mean over any assignment: the mean itself, or
/// the heaviest shard when it alone is heavier.
pub fn best_max_over_mean(loads: &[f64], pods: usize) -> f64 {
    let mean = loads.iter().sum::<f64>() / pods as f64;
    loads.iter().copied().fold(mean, f64::max) / mean
}
