//! The load the groups of a pool put on each pod (throughput mode): what a
//! throughput group's plan counts of its peers (`PlanInput::pool_load`).
//!
//! Each group's share is summed from its assignment (each readable shard
//! on the pod that reads it, or will once its handoff ends) and its
//! measured loads; an unmeasured shard weighs the mean of the group's
//! measured ones, as the engine weighs it. A group with nothing measured
//! adds nothing: its shards would weigh 1 byte per second each against
//! measured bytes, so it is balanced by count alone until it is measured.

use std::collections::BTreeMap;

use crate::types::{PEER_SHARDS, PodLoad, ShardLoad};

/// One pod's load from one group, summed exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Sum {
    rate: u64,
    /// Summed squared noise.
    variance: u128,
    /// The heaviest shards' rates, heaviest first, at most [`PEER_SHARDS`].
    heaviest: Vec<u64>,
}

impl Sum {
    fn add(&mut self, rate: u64, noise: u64) {
        self.rate = self.rate.saturating_add(rate);
        self.variance += u128::from(noise) * u128::from(noise);
        let at = self.heaviest.partition_point(|&r| r >= rate);
        if at < PEER_SHARDS {
            self.heaviest.insert(at, rate);
            self.heaviest.truncate(PEER_SHARDS);
        }
    }

    fn merge(&mut self, other: &Sum) {
        self.rate = self.rate.saturating_add(other.rate);
        self.variance += other.variance;
        self.heaviest.extend_from_slice(&other.heaviest);
        self.heaviest.sort_unstable_by(|a, b| b.cmp(a));
        self.heaviest.truncate(PEER_SHARDS);
    }

    fn pod_load(&self) -> PodLoad {
        PodLoad {
            rate: self.rate,
            noise: u64::try_from(self.variance.isqrt()).unwrap_or(u64::MAX),
            heaviest: self.heaviest.first().copied().unwrap_or(0),
            shards: self.heaviest.clone(),
        }
    }
}

/// Every throughput group's load per pod, by group name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolLoads {
    groups: BTreeMap<String, BTreeMap<String, Sum>>,
}

impl PoolLoads {
    /// Adds (or replaces) group `name` whose readable shards are read by
    /// the pods `owners` gives (shard id, pod), weighed by `loads` (shard
    /// id → its measured load: the group's own shards only). Returns
    /// whether the group is measured (`loads` is not empty); a group that
    /// is not adds nothing.
    pub fn add<'a>(
        &mut self,
        name: &str,
        owners: impl IntoIterator<Item = (&'a str, &'a str)>,
        loads: &BTreeMap<String, ShardLoad>,
    ) -> bool {
        let sum: u128 = loads.values().map(|l| u128::from(l.rate)).sum();
        let Some(mean) = u128::try_from(loads.len())
            .ok()
            .and_then(|n| sum.checked_div(n))
        else {
            self.groups.remove(name);
            return false;
        };
        let mean = u64::try_from(mean).unwrap_or(u64::MAX);
        let mut pods: BTreeMap<String, Sum> = BTreeMap::new();
        for (shard, pod) in owners {
            let (rate, noise) = loads.get(shard).map_or((mean, 0), |l| (l.rate, l.noise));
            pods.entry(pod.to_owned()).or_default().add(rate, noise);
        }
        self.groups.insert(name.to_owned(), pods);
        true
    }

    /// The load every group but `name` puts on each pod.
    pub fn others(&self, name: &str) -> BTreeMap<String, PodLoad> {
        let mut sums: BTreeMap<&str, Sum> = BTreeMap::new();
        for (group, pods) in &self.groups {
            if group == name {
                continue;
            }
            for (pod, sum) in pods {
                sums.entry(pod.as_str()).or_default().merge(sum);
            }
        }
        sums.into_iter()
            .map(|(pod, sum)| (pod.to_owned(), sum.pod_load()))
            .collect()
    }

    /// Each pod's whole load over every group.
    pub fn totals(&self) -> BTreeMap<String, PodLoad> {
        self.others("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(rate: u64, noise: u64) -> ShardLoad {
        ShardLoad {
            rate,
            noise,
            shift: 0,
        }
    }

    #[test]
    fn peers_sum_and_a_group_is_left_out_of_its_own_load() {
        let mut pool = PoolLoads::default();
        let a = BTreeMap::from([
            ("s1".to_owned(), load(300, 30)),
            ("s2".to_owned(), load(100, 40)),
        ]);
        assert!(pool.add("a", [("s1", "p"), ("s2", "q")], &a));
        // b: s3 measured, s4 weighs the mean of b's measured shards (50).
        let b = BTreeMap::from([("s3".to_owned(), load(50, 0))]);
        assert!(pool.add("b", [("s3", "p"), ("s4", "p")], &b));
        let others = pool.others("b");
        assert_eq!(
            others["p"],
            PodLoad {
                rate: 300,
                noise: 30,
                heaviest: 300,
                shards: vec![300],
            }
        );
        assert_eq!(
            others["q"],
            PodLoad {
                rate: 100,
                noise: 40,
                heaviest: 100,
                shards: vec![100],
            }
        );
        let totals = pool.totals();
        assert_eq!(
            totals["p"],
            PodLoad {
                rate: 400,
                noise: 30,
                heaviest: 300,
                shards: vec![300, 50, 50],
            }
        );
        // A group with nothing measured adds nothing, and replaces what it
        // added before.
        assert!(!pool.add("a", [("s1", "p")], &BTreeMap::new()));
        assert_eq!(pool.totals()["p"].rate, 100);
    }

    /// A pod lists only its heaviest shards of the others, heaviest first.
    #[test]
    fn a_pod_lists_the_others_heaviest_shards_only() {
        let mut pool = PoolLoads::default();
        let count = PEER_SHARDS as u64 + 4;
        let ids: Vec<String> = (0..count).map(|i| format!("s{i}")).collect();
        let loads = ids
            .iter()
            .zip(1..)
            .map(|(id, rate)| (id.clone(), load(rate, 0)))
            .collect();
        assert!(pool.add("a", ids.iter().map(|id| (id.as_str(), "p")), &loads));
        let p = &pool.others("b")["p"];
        let expected: Vec<u64> = (5..=count).rev().collect();
        assert_eq!(p.shards, expected);
        assert_eq!(p.heaviest, count);
        assert_eq!(p.rate, count * (count + 1) / 2);
    }
}
