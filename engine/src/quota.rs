//! Quotas: how many shards (or standby slots) each eligible pod may hold.
//!
//! `total` units are split over the pods in proportion to their capacity
//! weights, each pod capped (water-filling: a pod whose proportional share
//! exceeds the cap gets the cap and the rest is re-split over the others).
//! Every uncapped pod receives ⌊share⌋ or ⌈share⌉; the ⌈⌉ quotas go first to
//! pods that already hold more than ⌊share⌋ (each such choice saves a move),
//! then to the largest fractional remainder, then by the caller's tie-break
//! key (owners: most recently ready first, then the pod's ring hash).

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
    let n = weights.len();
    let mut quota = vec![0u64; n];
    let mut fixed = vec![false; n];
    let mut remaining = total;
    if n == 0 {
        return quota;
    }
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
                quota[i] = cap;
                remaining -= cap;
            }
        }
    }
    let free: Vec<usize> = (0..n).filter(|&i| !fixed[i]).collect();
    let wsum: u128 = free.iter().map(|&i| u128::from(weights[i])).sum();
    if wsum == 0 {
        return quota;
    }
    let mut rem = vec![0u128; n];
    let mut given = 0u64;
    for &i in &free {
        let share = u128::from(remaining) * u128::from(weights[i]);
        #[allow(clippy::cast_possible_truncation)] // share / wsum <= remaining, a u64
        let q = (share / wsum) as u64;
        quota[i] = q;
        rem[i] = share % wsum;
        given += quota[i];
    }
    // At most one per free pod, so it fits; saturating is never hit.
    let left = usize::try_from(remaining - given).unwrap_or(usize::MAX);
    if left > 0 {
        let mut candidates: Vec<usize> = free.into_iter().filter(|&i| rem[i] > 0).collect();
        candidates.sort_unstable_by(|&a, &b| {
            let gain_a = current[a] > quota[a];
            let gain_b = current[b] > quota[b];
            gain_b
                .cmp(&gain_a)
                .then(rem[b].cmp(&rem[a]))
                .then(tiebreak[a].cmp(&tiebreak[b]))
                .then(a.cmp(&b))
        });
        for &i in candidates.iter().take(left) {
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
