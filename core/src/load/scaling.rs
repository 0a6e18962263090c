//! The scaling signal: how many pods a group needs for `spec.scaling`'s
//! target per pod — readable shards ÷ `targetShardsPerPod`, or measured
//! KB/s ÷ `targetKBpsPerPod`, rounded up — clamped to `minReplicas`
//! (default 1) and `maxReplicas`. More pods than readable shards would
//! leave pods idle, so the count never exceeds the shards (unless
//! `minReplicas` asks for more).

use crate::crds::shard_group::ScalingSpec;

/// What the recommendation is computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demand {
    /// Readable shards.
    pub shards: u64,
    /// Measured load, KB/s.
    pub kbps: f64,
}

/// The replicas `spec` recommends for `demand`.
pub fn recommended_replicas(spec: &ScalingSpec, demand: Demand) -> u32 {
    let needed = match (spec.target_shards_per_pod, spec.target_kbps_per_pod) {
        (Some(per_pod), _) => demand.shards.div_ceil(u64::from(per_pod.max(1))),
        (None, Some(per_pod)) => whole_ceil(demand.kbps / per_pod.max(1) as f64),
        (None, None) => 1,
    };
    let needed = needed.min(demand.shards.max(1));
    let min = spec.min_replicas.unwrap_or(1).max(1);
    let max = spec.max_replicas.unwrap_or(u32::MAX).max(min);
    u32::try_from(needed).unwrap_or(u32::MAX).clamp(min, max)
}

/// `x` rounded up to a whole count (0 for a negative or non-number `x`,
/// saturating above `u64::MAX`).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to u64's range first
fn whole_ceil(x: f64) -> u64 {
    if x.is_nan() {
        return 0;
    }
    x.ceil().clamp(0.0, u64::MAX as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(per_pod: u32, min: Option<u32>, max: Option<u32>) -> ScalingSpec {
        ScalingSpec {
            target_shards_per_pod: Some(per_pod),
            min_replicas: min,
            max_replicas: max,
            ..ScalingSpec::default()
        }
    }

    fn kbps(per_pod: u64, min: Option<u32>, max: Option<u32>) -> ScalingSpec {
        ScalingSpec {
            target_kbps_per_pod: Some(per_pod),
            min_replicas: min,
            max_replicas: max,
            ..ScalingSpec::default()
        }
    }

    #[test]
    fn recommended_replicas_table() {
        // (spec, shards, KB/s, expected)
        let cases = [
            (shards(8, None, None), 64, 0.0, 8),
            (shards(8, None, None), 65, 0.0, 9),
            (shards(8, None, None), 1, 0.0, 1),
            (shards(8, None, None), 0, 0.0, 1),
            (shards(1, None, None), 20, 0.0, 20),
            (shards(8, Some(3), None), 8, 0.0, 3),
            (shards(8, None, Some(4)), 64, 0.0, 4),
            (shards(8, Some(10), Some(10)), 64, 0.0, 10),
            // minReplicas above the shard count still wins.
            (shards(8, Some(5), None), 2, 0.0, 5),
            (kbps(1000, None, None), 16, 4500.0, 5),
            (kbps(1000, None, None), 16, 4000.0, 4),
            (kbps(1000, None, None), 16, 4000.1, 5),
            (kbps(1000, None, None), 16, 0.0, 1),
            // Never more pods than shards.
            (kbps(1000, None, None), 3, 9000.0, 3),
            (kbps(1000, Some(2), Some(6)), 64, 100_000.0, 6),
            (kbps(1000, Some(2), Some(6)), 64, 10.0, 2),
            (kbps(1000, None, None), 64, f64::NAN, 1),
        ];
        for (spec, shards, kbps, expected) in cases {
            assert_eq!(
                recommended_replicas(&spec, Demand { shards, kbps }),
                expected,
                "{spec:?} shards {shards} kbps {kbps}"
            );
        }
    }
}
