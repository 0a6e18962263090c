//! Quotas: how many shards (or standby slots) each eligible pod may hold.
//!
//! `total` units are split over the pods in proportion to their capacity
//! weights, each pod capped (water-filling: a pod whose proportional share
//! exceeds the cap gets the cap and the rest is re-split over the others).
//! Every uncapped pod receives ⌊share⌋ or ⌈share⌉; the ⌈⌉ quotas go first to
//! pods that already hold more than ⌊share⌋ (each such choice saves a move),
//! then to the largest fractional remainder, then by the caller's tie-break
//! key (owners: most recently ready first, then the pod's ring hash).

/// How `total` units split over weighted pods before the ⌈⌉ quotas are
/// dealt: every pod's ⌊share⌋ (or its cap), the remainders that decide who
/// may take one more, and how many such extra units are left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shares {
    /// Per pod: the cap for a capped pod, else ⌊share⌋.
    pub floor: Vec<u64>,
    /// Per pod: the remainder of its share in units of `1 / denominator`
    /// (0 for a capped pod or an integral share: it takes no extra unit).
    pub remainder: Vec<u128>,
    /// The sum of the uncapped pods' weights (0 when every pod is capped).
    pub denominator: u128,
    /// Units left after the floors: one each goes to that many pods with a
    /// remainder (the ⌈⌉ quotas).
    pub extra: u64,
}

impl Shares {
    /// Whether pod `i` may take one of the extra units.
    pub fn may_take_extra(&self, i: usize) -> bool {
        self.remainder[i] > 0
    }
}

/// Splits `total` over pods weighted by `weights`, each at most `cap`
/// (0 = no cap), up to the dealing of the ⌈⌉ quotas ([`Shares`]).
pub fn shares(total: u64, weights: &[u64], cap: u64) -> Shares {
    let n = weights.len();
    let mut floor = vec![0u64; n];
    let mut remainder = vec![0u128; n];
    let mut fixed = vec![false; n];
    let mut remaining = total;
    if cap > 0 {
        loop {
            let wsum: u128 = (0..n)
                .filter(|&i| !fixed[i])
                .map(|i| u128::from(weights[i]))
                .sum();
            if wsum == 0 {
                break;
            }
            let over: Vec<usize> = (0..n)
                .filter(|&i| {
                    !fixed[i]
                        && u128::from(remaining) * u128::from(weights[i]) > u128::from(cap) * wsum
                })
                .collect();
            if over.is_empty() {
                break;
            }
            for i in over {
                fixed[i] = true;
                floor[i] = cap;
                remaining -= cap;
            }
        }
    }
    let denominator: u128 = (0..n)
        .filter(|&i| !fixed[i])
        .map(|i| u128::from(weights[i]))
        .sum();
    if denominator == 0 {
        return Shares {
            floor,
            remainder,
            denominator,
            extra: 0,
        };
    }
    let mut given = 0u64;
    for i in (0..n).filter(|&i| !fixed[i]) {
        let share = u128::from(remaining) * u128::from(weights[i]);
        #[allow(clippy::cast_possible_truncation)] // share / wsum <= remaining, a u64
        let q = (share / denominator) as u64;
        floor[i] = q;
        remainder[i] = share % denominator;
        given += q;
    }
    Shares {
        floor,
        remainder,
        denominator,
        extra: remaining - given,
    }
}

/// Splits `total` over pods weighted by `weights`, each at most `cap`
/// (0 = no cap). `current` is what each pod holds now (to minimise moves) and
/// `tiebreak` a per-pod key, lowest first. Returns one quota per pod; their
/// sum is `min(total, Σ caps)`.
pub fn apportion<K: Ord>(
    total: u64,
    weights: &[u64],
    cap: u64,
    current: &[u64],
    tiebreak: &[K],
) -> Vec<u64> {
    apportion_preferring(total, weights, cap, current, tiebreak, None)
}

/// [`apportion`], where `preferred` (when given) names the pods that take
/// the ⌈⌉ quotas before any other: the pool-wide balance's choice
/// ([`crate::pool`]). Pods it does not name come after, in
/// [`apportion`]'s order.
pub fn apportion_preferring<K: Ord>(
    total: u64,
    weights: &[u64],
    cap: u64,
    current: &[u64],
    tiebreak: &[K],
    preferred: Option<&[bool]>,
) -> Vec<u64> {
    let Shares {
        floor: mut quota,
        remainder: rem,
        extra,
        ..
    } = shares(total, weights, cap);
    // At most one per free pod, so it fits; saturating is never hit.
    let left = usize::try_from(extra).unwrap_or(usize::MAX);
    if left > 0 {
        let unpreferred = |i: usize| preferred.is_some_and(|p| !p[i]);
        let mut candidates: Vec<usize> = (0..weights.len()).filter(|&i| rem[i] > 0).collect();
        // The order is total (the index breaks the last tie), so the `left`
        // first candidates are one set, which a selection finds in linear
        // time: their order among themselves does not matter.
        let first = left.min(candidates.len());
        let order = |&a: &usize, &b: &usize| {
            let gain_a = current[a] > quota[a];
            let gain_b = current[b] > quota[b];
            unpreferred(a)
                .cmp(&unpreferred(b))
                .then(gain_b.cmp(&gain_a))
                .then(rem[b].cmp(&rem[a]))
                .then(tiebreak[a].cmp(&tiebreak[b]))
                .then(a.cmp(&b))
        };
        if first < candidates.len() {
            candidates.select_nth_unstable_by(first, order);
        }
        for &i in &candidates[..first] {
            quota[i] += 1;
        }
    }
    quota
}

#[cfg(test)]
mod tests {
    use super::apportion;

    #[test]
    fn equal_weights_floor_or_ceil() {
        let q = apportion(10, &[1; 4], 0, &[0; 4], &[4, 3, 2, 1]);
        assert_eq!(q.iter().sum::<u64>(), 10);
        assert!(q.iter().all(|&x| x == 2 || x == 3));
        // Ties go by the hash: the two lowest hashes get the ceiling.
        assert_eq!(q, vec![2, 2, 3, 3]);
    }

    #[test]
    fn ceilings_go_to_pods_holding_more() {
        let q = apportion(10, &[1; 4], 0, &[3, 0, 0, 3], &[1, 2, 3, 4]);
        assert_eq!(q, vec![3, 2, 2, 3]);
    }

    #[test]
    fn ties_go_by_the_key_after_holdings_and_remainders() {
        // Nobody holds more than ⌊⌋: the lowest key wins the ⌈⌉.
        let q = apportion(6, &[1; 5], 0, &[1, 1, 1, 1, 0], &[5, 4, 3, 2, 1]);
        assert_eq!(q, vec![1, 1, 1, 1, 2]);
        // A pod already holding the ⌈⌉ keeps it whatever its key.
        let q = apportion(6, &[1; 5], 0, &[2, 1, 1, 1, 0], &[5, 4, 3, 2, 1]);
        assert_eq!(q, vec![2, 1, 1, 1, 1]);
    }

    #[test]
    fn weighted_and_capped() {
        assert_eq!(apportion(10, &[1, 4], 0, &[0, 0], &[0, 0]), vec![2, 8]);
        // Capacity 9 wants 9 of 10 but the cap is 5: the rest spills over.
        assert_eq!(apportion(10, &[1, 9], 5, &[0, 0], &[0, 0]), vec![5, 5]);
        // Not enough room: the sum is the total capacity.
        assert_eq!(
            apportion(10, &[1, 1, 1], 2, &[0; 3], &[0; 3]),
            vec![2, 2, 2]
        );
    }

    #[test]
    fn no_pods() {
        assert!(apportion::<u64>(5, &[], 0, &[], &[]).is_empty());
    }
}
