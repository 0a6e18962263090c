//! Whether any placement at all puts every pod inside the load band: the
//! premise of the load check once the system is quiet ([`crate::load`]).
//!
//! Shards cannot be split, so some loads admit no placement within the
//! band. Seed 962984958 (pool, by throughput) ends with six pods and twelve
//! shards of 180–1,458 kB/s over a fair share of 2,063: any two of the six
//! heaviest (1,206 and up) on one pod are past +10 %, so each of the six
//! pods holds one of them, and the six lighter shards cannot fill all six
//! pods when one of them (180) is far too small to fill a pod's gap alone.
//! A pod is then outside the band for good, whatever the plan does, and
//! the check must not count that against it. So the check first asks this
//! module, and holds the plan to the band only where some placement meets
//! it (or where this cannot tell).
//!
//! Exact, by depth-first search over the shards, heaviest first, with the
//! usual cuts (a pod past the band's top is never filled further; pods at
//! equal load are tried once; the shards left must be able to lift every
//! pod to the band's floor), within a budget of search nodes: past it, or
//! when a shard is heavier than the fair share (the engine's fair shares
//! are then water-filled per placement, which this does not model), the
//! answer is "cannot tell". Pods are taken at equal capacity, as the
//! simulation's are.

/// Search nodes tried before giving up ("cannot tell").
const BUDGET: u64 = 2_000_000;

/// Whether some placement of shards weighing `rates` on `pods` pods of
/// equal capacity puts every pod within `band` (a fraction, e.g. 0.1) of
/// the fair share: `Some(true)` or `Some(false)`, or `None` when it cannot
/// tell (a shard heavier than the fair share, or the search's budget
/// spent).
pub fn band_reachable(rates: &[f64], pods: usize, band: f64) -> Option<bool> {
    if pods == 0 {
        return None;
    }
    let total: f64 = rates.iter().sum();
    let fair = total / pods as f64;
    let mut shards = rates.to_vec();
    shards.sort_by(|a, b| b.total_cmp(a));
    if shards.first().is_some_and(|&heaviest| heaviest > fair) {
        return None;
    }
    let mut search = Search {
        shards: &shards,
        low: fair * (1.0 - band),
        high: fair * (1.0 + band),
        loads: vec![0.0; pods],
        // The weight of the shards from each index on.
        left: shards
            .iter()
            .rev()
            .scan(0.0, |sum, rate| {
                *sum += rate;
                Some(*sum)
            })
            .collect::<Vec<f64>>()
            .into_iter()
            .rev()
            .chain([0.0])
            .collect(),
        nodes: 0,
    };
    search.place(0)
}

struct Search<'a> {
    shards: &'a [f64],
    low: f64,
    high: f64,
    loads: Vec<f64>,
    left: Vec<f64>,
    nodes: u64,
}

impl Search<'_> {
    /// Whether shards `next..` can be placed with every pod ending within
    /// the band (`None`: the budget ran out).
    fn place(&mut self, next: usize) -> Option<bool> {
        self.nodes += 1;
        if self.nodes > BUDGET {
            return None;
        }
        let short: f64 = self.loads.iter().map(|l| (self.low - l).max(0.0)).sum();
        if short > self.left[next] + 1e-9 {
            return Some(false);
        }
        let Some(&rate) = self.shards.get(next) else {
            return Some(true);
        };
        let mut tried: Vec<f64> = Vec::new();
        for pod in 0..self.loads.len() {
            let load = self.loads[pod];
            if load + rate > self.high || tried.contains(&load) {
                continue;
            }
            tried.push(load);
            self.loads[pod] += rate;
            let found = self.place(next + 1);
            self.loads[pod] = load;
            if found != Some(false) {
                return found;
            }
        }
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 962984958's twelve shards (kB/s) at rest on six pods.
    const SEED_962984958: [f64; 12] = [
        1458.0, 180.0, 910.0, 1212.0, 945.0, 1271.0, 1381.0, 642.0, 968.0, 1206.0, 845.0, 1358.0,
    ];

    #[test]
    fn the_seeds_shards_fit_no_band_under_a_sixth() {
        assert_eq!(band_reachable(&SEED_962984958, 6, 0.10), Some(false));
        assert_eq!(band_reachable(&SEED_962984958, 6, 0.15), Some(false));
        // Two of the heaviest on one pod: 1,206 + 1,212 is 1.17 of the share.
        assert_eq!(band_reachable(&SEED_962984958, 6, 0.30), Some(true));
    }

    #[test]
    fn shards_that_pair_up_fit_the_band() {
        // Pairs of 6 + 4 on each of three pods, in any order given.
        assert_eq!(
            band_reachable(&[4.0, 6.0, 6.0, 4.0, 6.0, 4.0], 3, 0.10),
            Some(true)
        );
        // One pod's pair 7 + 3: still exactly the share.
        assert_eq!(band_reachable(&[7.0, 3.0, 5.0, 5.0], 2, 0.0), Some(true));
        // 7 + 5 against 5 + 3 is 12 against 8: 0.2 from the share of 10.
        assert_eq!(band_reachable(&[7.0, 5.0, 5.0, 3.0], 2, 0.19), Some(true));
        assert_eq!(band_reachable(&[8.0, 5.0, 4.0, 3.0], 2, 0.0), Some(false));
    }

    #[test]
    fn a_shard_heavier_than_the_share_or_no_pod_cannot_tell() {
        assert_eq!(band_reachable(&[9.0, 1.0, 1.0], 2, 0.10), None);
        assert_eq!(band_reachable(&[1.0], 0, 0.10), None);
    }

    #[test]
    fn a_search_past_its_budget_cannot_tell() {
        // 40 shards of nearly equal weight on 7 pods, no placement within
        // a band too narrow for any: the search runs out first.
        let rates: Vec<f64> = (0..40).map(|i| 1000.0 + f64::from(i) * 0.37).collect();
        assert_eq!(band_reachable(&rates, 7, 0.0001), None);
    }
}
