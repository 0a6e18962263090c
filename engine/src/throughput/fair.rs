//! Fair shares and the band around them.
//!
//! A pod's fair share is the total load in proportion to its capacity —
//! unless a shard is heavier than that share on the largest pod that could
//! carry it. A shard cannot be split, so that pod can do no better than
//! that shard alone: its fair share is that shard's weight, and the rest of
//! the load is shared over the other pods by capacity (water-filling,
//! repeated while the share of the rest drops below the next heaviest shard
//! on the next largest pod; see [`shares`]). A giant shard on a small pod
//! is not that pod's share: the pod is judged by its capacity, so the
//! giant moves to a large pod.
//!
//! The band: a pod is outside it when its load is further from its fair
//! share than `band` × fair share **plus** [`TRIGGER_SIGMAS`] standard
//! errors of its measured load (the square root of the summed squared noise
//! of its shards). A repair aims for a narrower target, `band` × fair share
//! minus [`SETTLE_SIGMAS`] standard errors (but at least half the band), so
//! a pod it settles is that many standard errors inside the edge: noise
//! would have to move it by eight standard errors to trigger another repair,
//! and a pod it did not touch (inside the band) by five.
//!
//! A shift of a shard's load is not noise: a pod that recent shifts pushed
//! further from its fair share than it was before them ([`pushed`]: its
//! load and the fair shares recomputed without the shifts) is outside as
//! soon as it is past the repair's target — no noise margin, and where a
//! repair would settle it, so a pod truly just past the edge is not left
//! there for reading a standard error better than it is. Otherwise a pod
//! that a doubled shard or a risen fair share left just past the edge
//! would stay there, its excess smaller than the margin that keeps noise
//! from moving shards.

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
    /// Pods that recent load shifts pushed away from their fair share.
    pushed: Vec<bool>,
}

impl Gauge {
    /// Measures `placement` against `band` (a fraction, e.g. 0.1).
    pub(crate) fn new(placement: &Placement<'_, '_>, band: f64) -> Self {
        let heaviest = placement.heaviest(|s| placement.weight(s));
        Self {
            fair: shares(&placement.load, &heaviest, &placement.capacity),
            sigma: placement.var.iter().map(|v| v.sqrt()).collect(),
            band,
            pushed: placement.pushed.clone(),
        }
    }

    /// Half-width of pod `e`'s band.
    fn tolerance(&self, e: usize) -> f64 {
        self.band * self.fair[e]
    }

    /// Whether pod `e` at `load` is outside its band by more than its
    /// noise explains — or, pushed toward its edge by a shift, past its
    /// target.
    pub(crate) fn outside(&self, e: usize, load: f64) -> bool {
        if self.pushed[e] {
            return self.violation(e, load) > self.slack(e);
        }
        (load - self.fair[e]).abs() > self.tolerance(e) + TRIGGER_SIGMAS * self.sigma[e]
    }

    /// How far beyond its target pod `e` may read before a repair takes it
    /// on: [`SETTLE_SIGMAS`] standard errors (a pod a repair settled is not
    /// taken again for noise alone), rounding only for a pod a shift pushed.
    pub(crate) fn slack(&self, e: usize) -> f64 {
        if self.pushed[e] {
            1e-9 * (self.fair[e] + 1.0)
        } else {
            SETTLE_SIGMAS * self.sigma[e]
        }
    }

    /// The pod furthest beyond its target among those `excluded` leaves
    /// out, if one is beyond it by more than its noise explains (or a
    /// shift pushed it there) and by more than `epsilon`; ties to the
    /// lowest index.
    pub(crate) fn worst(
        &self,
        placement: &Placement<'_, '_>,
        epsilon: f64,
        excluded: &[bool],
    ) -> Option<usize> {
        (0..self.fair.len())
            .filter(|&e| !excluded[e])
            .map(|e| (self.violation(e, placement.load[e]), e))
            .filter(|&(v, e)| v > epsilon.max(self.slack(e)))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, e)| e)
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

/// Which pods the shifts of their shards' loads (and the fair shares
/// those shifts moved) left further from their fair share, relative to
/// it, than they were without them. None when no shard shifted.
pub(crate) fn pushed(placement: &Placement<'_, '_>) -> Vec<bool> {
    let pods = placement.members.len();
    let shift = |s: u32| placement.model.shards[s as usize].shift as f64;
    if !placement.members.iter().flatten().any(|&s| shift(s) != 0.0) {
        return vec![false; pods];
    }
    let before: Vec<f64> = placement
        .members
        .iter()
        .zip(&placement.load)
        .map(|(list, &load)| load - list.iter().map(|&s| shift(s)).sum::<f64>())
        .collect();
    let fair_now = shares(
        &placement.load,
        &placement.heaviest(|s| placement.weight(s)),
        &placement.capacity,
    );
    let fair_before = shares(
        &before,
        &placement.heaviest(|s| (placement.weight(s) - shift(s)).max(0.0)),
        &placement.capacity,
    );
    let off = |load: f64, fair: f64| {
        if fair > 0.0 {
            (load - fair).abs() / fair
        } else {
            load.abs()
        }
    };
    (0..pods)
        .map(|e| off(placement.load[e], fair_now[e]) > off(before[e], fair_before[e]) + 1e-12)
        .collect()
}

/// Water-filled fair shares of pods with loads `load`, heaviest shards
/// `heaviest` and capacities `capacity`. A shard cannot be split, so a
/// shard heavier than the share of the pod best able to carry it (the
/// largest capacity left) is that pod's whole share, and the rest is shared
/// by capacity over the other pods: the pods' heaviest shards, heaviest
/// first, are set against the pods by capacity, largest first (ties: the
/// pod already holding the heavier shard), while the shard exceeds that
/// pod's share of what is left. So a giant shard on a small pod is not its
/// share: that pod is judged by its capacity, and the giant belongs on the
/// largest pod. With equal capacities each giant's holder is its pod.
pub fn shares(load: &[f64], heaviest: &[f64], capacity: &[f64]) -> Vec<f64> {
    let total: f64 = load.iter().sum();
    let mut giants: Vec<f64> = heaviest.to_vec();
    giants.sort_by(|a, b| b.total_cmp(a));
    let mut order: Vec<usize> = (0..load.len()).collect();
    order.sort_by(|&a, &b| {
        capacity[b]
            .total_cmp(&capacity[a])
            .then(heaviest[b].total_cmp(&heaviest[a]))
            .then(a.cmp(&b))
    });
    let mut dedicated: Vec<Option<f64>> = vec![None; load.len()];
    let (mut rest, mut rest_capacity) = (total, capacity.iter().sum::<f64>());
    for (&e, &giant) in order.iter().zip(&giants) {
        if rest_capacity <= capacity[e] || giant * rest_capacity <= rest * capacity[e] {
            break;
        }
        dedicated[e] = Some(giant);
        rest -= giant;
        rest_capacity -= capacity[e];
    }
    let per_capacity = if rest_capacity > 0.0 {
        rest.max(0.0) / rest_capacity
    } else {
        0.0
    };
    (0..load.len())
        .map(|e| dedicated[e].unwrap_or(per_capacity * capacity[e]))
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

    #[test]
    fn a_giant_on_a_small_pod_belongs_on_the_largest() {
        // 8 + 1 + 1 on capacities 1, 1, 4, the giant on the first pod: the
        // capacity-4 pod's share is the giant (8 > 4/6 of 10), the others
        // share the 2 left: the giant's holder reads 8 against a share of 1.
        assert_eq!(
            shares(&[8.0, 1.0, 1.0], &[8.0, 1.0, 1.0], &[1.0, 1.0, 4.0]),
            vec![1.0, 1.0, 8.0]
        );
        // Not a giant for the largest pod (3 < 4/6 of 10 by capacity): all by
        // capacity, so the capacity-1 pod holding 3 is over its share.
        assert_eq!(
            shares(&[3.0, 3.0, 4.0], &[3.0, 1.0, 1.0], &[1.0, 1.0, 4.0]),
            vec![10.0 / 6.0, 10.0 / 6.0, 40.0 / 6.0]
        );
    }
}
