//! Load-aware balance and the scaling signal: how `balance: throughput`
//! weighs and smooths measured loads and damps moves (`spec.throughput`),
//! and the per-pod target the recommended replica count is computed from
//! (`spec.scaling`), with their defaults and accessors.

use std::time::Duration;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::error::positive;
use super::{POSITIVE_DURATION, SpecError};

/// How `balance: throughput` uses the measured loads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThroughputSpec {
    /// How far, in percent of its fair share, a pod's load may stray before
    /// shards move (1 to 100, default 10). A pod is outside the band only
    /// when it is further out than measurement noise explains.
    #[serde(default = "default_band_percent")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("throughput.bandPercent must be between 1 and 100 (percent of each pod's fair share)"))]
    pub band_percent: u32,
    /// Half-life of the exponential moving average that smooths each
    /// shard's reports: a positive duration, default `30s`.
    #[serde(default = "default_half_life")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(POSITIVE_DURATION).message("throughput.halfLife must be a positive duration such as 30s (units ms, s, m, h)"))]
    pub half_life: String,
    /// Shards moved to restore the band do not move for load again within
    /// this long: after a load rebalance the next waits at least this long.
    /// A positive duration, default `5m`.
    #[serde(default = "default_damping_interval")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(POSITIVE_DURATION).message("throughput.dampingInterval must be a positive duration such as 5m (units ms, s, m, h)"))]
    pub damping_interval: String,
    /// A shard's measurement not refreshed for this long is stale: it keeps
    /// its last value and the group reports it (condition `LoadMeasured`).
    /// A positive duration, default `2m`.
    #[serde(default = "default_stale_after")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(POSITIVE_DURATION).message("throughput.staleAfter must be a positive duration such as 2m (units ms, s, m, h)"))]
    pub stale_after: String,
    /// Largest believable load of one shard, in KB/s (1 KB = 1024 bytes):
    /// a report above it is rejected as absurd. 1 to 10,000,000, default
    /// 102,400 (100 MiB/s; a Kinesis shard reads at most 2 MiB/s per
    /// consumer).
    #[serde(default = "default_max_shard_kbps", rename = "maxShardKBps")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 10000000").message("throughput.maxShardKBps must be between 1 and 10000000 (KB/s)"))]
    pub max_shard_kbps: u64,
}

impl Default for ThroughputSpec {
    fn default() -> Self {
        Self {
            band_percent: default_band_percent(),
            half_life: default_half_life(),
            damping_interval: default_damping_interval(),
            stale_after: default_stale_after(),
            max_shard_kbps: default_max_shard_kbps(),
        }
    }
}

fn default_band_percent() -> u32 {
    10
}
fn default_half_life() -> String {
    "30s".into()
}
fn default_damping_interval() -> String {
    "5m".into()
}
fn default_stale_after() -> String {
    "2m".into()
}
fn default_max_shard_kbps() -> u64 {
    102_400
}

impl ThroughputSpec {
    /// `halfLife` as a duration.
    pub fn half_life(&self) -> Result<Duration, SpecError> {
        positive("throughput.halfLife", &self.half_life)
    }

    /// `dampingInterval` as a duration.
    pub fn damping_interval(&self) -> Result<Duration, SpecError> {
        positive("throughput.dampingInterval", &self.damping_interval)
    }

    /// `staleAfter` as a duration.
    pub fn stale_after(&self) -> Result<Duration, SpecError> {
        positive("throughput.staleAfter", &self.stale_after)
    }

    /// `maxShardKBps` in bytes per second.
    pub fn max_shard_bytes_per_second(&self) -> f64 {
        self.max_shard_kbps as f64 * 1024.0
    }
}

/// The scaling signal: how many pods the group needs, from a target load
/// per pod. The operator does not scale anything itself: it publishes
/// `status.recommendedReplicas` and the metric
/// `shardring_recommended_replicas` for an HPA or KEDA to act on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.targetShardsPerPod) != has(self.targetKBpsPerPod)").message("scaling needs exactly one of targetShardsPerPod and targetKBpsPerPod"),
    validation = Rule::new("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas").message("scaling.minReplicas must not exceed scaling.maxReplicas")
)]
pub struct ScalingSpec {
    /// Readable shards one pod should hold (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("scaling.targetShardsPerPod must be at least 1"))]
    pub target_shards_per_pod: Option<u32>,
    /// Measured load one pod should carry, in KB/s (at least 1).
    #[serde(
        default,
        rename = "targetKBpsPerPod",
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self >= 1").message("scaling.targetKBpsPerPod must be at least 1"))]
    pub target_kbps_per_pod: Option<u64>,
    /// Fewest replicas to recommend (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("scaling.minReplicas must be at least 1"))]
    pub min_replicas: Option<u32>,
    /// Most replicas to recommend (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("scaling.maxReplicas must be at least 1"))]
    pub max_replicas: Option<u32>,
}
