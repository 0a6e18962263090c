//! Fair shares and the band around them.
//!
//! A pod's fair share is the total load in proportion to its capacity —
//! unless it holds a shard heavier than that share. A shard cannot be
//! split, so such a pod can do no better than that shard alone: its fair
//! share is that shard's weight, and the rest of the load is shared over
//! the other pods by capacity (water-filling, repeated while the share of
//! the rest drops below another pod's heaviest shard).
//!
//! The band: a pod is outside it when its load is further from its fair
//! share than `band` × fair share **plus** [`TRIGGER_SIGMAS`] standard
//! errors of its measured load (the square root of the summed squared noise
//! of its shards). A repair aims for a narrower target, `band` × fair share
//! minus [`SETTLE_SIGMAS`] standard errors (but at least half the band), so
//! a pod it settles is that many standard errors inside the edge: noise
//! would have to move it by eight standard errors to trigger another repair,
//! and a pod it did not touch (inside the band) by five.

use super::Placement;

/// How many standard errors of a pod's measured load it must be outside the
/// band by before shards move (for Gaussian noise, about 3 in 10 million
/// readings of a pod sitting exactly at the band's edge).
pub const TRIGGER_SIGMAS: f64 = 5.0;

/// How many standard errors inside the band a repair brings a pod it
/// touches, and how much worse than it reads a repair counts the load of
/// the pod at the other end of a move.
pub const SETTLE_SIGMAS: f64 = 2.0;

/// The fair shares and band of one placement.
pub(crate) struct Gauge {
    /// Each pod's fair share.
    pub(crate) fair: Vec<f64>,
    /// Each pod's standard error of load.
    pub(crate) sigma: Vec<f64>,
    /// The band, a fraction of the fair share.
    band: f64,
}

impl Gauge {
    /// Measures `placement` against `band` (a fraction, e.g. 0.1).
    pub(crate) fn new(placement: &Placement<'_, '_>, band: f64) -> Self {
        let heaviest: Vec<f64> = placement
            .members
            .iter()
            .map(|list| {
                list.iter()
                    .map(|&s| placement.weight(s))
                    .fold(0.0, f64::max)
            })
            .collect();
        Self {
            fair: shares(&placement.load, &heaviest, &placement.capacity),
            sigma: placement.var.iter().map(|v| v.sqrt()).collect(),
            band,
        }
    }

    /// Half-width of pod `e`'s band.
    fn tolerance(&self, e: usize) -> f64 {
        self.band * self.fair[e]
    }

    /// Whether pod `e` at `load` is outside its band by more than its noise explains.
    pub(crate) fn outside(&self, e: usize, load: f64) -> bool {
        (load - self.fair[e]).abs() > self.tolerance(e) + TRIGGER_SIGMAS * self.sigma[e]
    }

    /// Pods outside their band (by more than their noise explains).
    pub(crate) fn outside_count(&self, placement: &Placement<'_, '_>) -> u32 {
        let outside = (0..self.fair.len())
            .filter(|&e| self.outside(e, placement.load[e]))
            .count();
        u32::try_from(outside).unwrap_or(u32::MAX)
    }

    /// How far from its fair share a repair brings pod `e`.
    pub(crate) fn target(&self, e: usize) -> f64 {
        let tolerance = self.tolerance(e);
        (tolerance - SETTLE_SIGMAS * self.sigma[e]).max(tolerance / 2.0)
    }

    /// How much of pod `e`'s load at `load` lies beyond its target.
    pub(crate) fn violation(&self, e: usize, load: f64) -> f64 {
        ((load - self.fair[e]).abs() - self.target(e)).max(0.0)
    }

    /// How much pod `e` at `load` could take before it passes its target.
    pub(crate) fn room(&self, e: usize, load: f64) -> f64 {
        self.fair[e] + self.target(e) - load
    }
}

/// Water-filled fair shares of pods with loads `load`, heaviest shards
/// `heaviest` and capacities `capacity`: pods whose heaviest shard exceeds
/// their share of what the others leave get that shard's weight; the rest
/// share the remainder by capacity.
pub fn shares(load: &[f64], heaviest: &[f64], capacity: &[f64]) -> Vec<f64> {
    let total: f64 = load.iter().sum();
    let mut order: Vec<usize> = (0..load.len()).collect();
    // Heaviest shard per unit of capacity, highest first: once one pod's
    // heaviest shard fits its share, every later pod's does too.
    order.sort_by(|&a, &b| {
        (heaviest[b] / capacity[b])
            .total_cmp(&(heaviest[a] / capacity[a]))
            .then(a.cmp(&b))
    });
    let mut dedicated = vec![false; load.len()];
    let (mut rest, mut rest_capacity) = (total, capacity.iter().sum::<f64>());
    for &e in &order {
        if rest_capacity <= capacity[e] || heaviest[e] * rest_capacity <= rest * capacity[e] {
            break;
        }
        dedicated[e] = true;
        rest -= heaviest[e];
        rest_capacity -= capacity[e];
    }
    let per_capacity = if rest_capacity > 0.0 {
        rest.max(0.0) / rest_capacity
    } else {
        0.0
    };
    (0..load.len())
        .map(|e| {
            if dedicated[e] {
                heaviest[e]
            } else {
                per_capacity * capacity[e]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::shares;

    #[test]
    fn equal_shares_without_a_giant() {
        assert_eq!(
            shares(&[6.0, 2.0, 4.0], &[3.0, 2.0, 1.0], &[1.0; 3]),
            vec![4.0; 3]
        );
        // By capacity.
        assert_eq!(
            shares(&[6.0, 6.0], &[1.0, 1.0], &[1.0, 2.0]),
            vec![4.0, 8.0]
        );
    }

    #[test]
    fn a_giant_shard_is_its_pods_share_and_the_rest_is_shared() {
        // 10 + 1 + 1 over three pods: the giant's pod gets 10, the others 1.
        assert_eq!(
            shares(&[10.0, 1.0, 1.0], &[10.0, 1.0, 1.0], &[1.0; 3]),
            vec![10.0, 1.0, 1.0]
        );
        // Two giants, and the rest drops below the second once the first
        // is taken out: 12, 5 and 3 over three pods.
        assert_eq!(
            shares(&[12.0, 5.0, 3.0], &[12.0, 5.0, 1.0], &[1.0; 3]),
            vec![12.0, 5.0, 3.0]
        );
        // The last pod is never dedicated: it takes what is left.
        assert_eq!(shares(&[9.0], &[9.0], &[1.0]), vec![9.0]);
    }
}
