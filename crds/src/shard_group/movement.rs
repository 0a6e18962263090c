//! How shards move: the handoff settings (drain timeout, lease failover),
//! the pacing of optional moves (rebalance delay and move budget) and the
//! hold of a group's first publish (initial delay), with their defaults
//! and the accessors that turn them into durations.

use std::time::Duration;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::error::positive;
use super::{DURATION, POSITIVE_DURATION, SpecError};
use crate::duration::parse_duration;

/// How a shard is handed from one pod to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffSpec {
    /// How long a revoked pod may take to stop, checkpoint and release before
    /// the shard may go to its new owner anyway (once its lease expired): a
    /// positive duration, default `60s`.
    #[serde(default = "default_drain_timeout")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(POSITIVE_DURATION).message("handoff.drainTimeout must be a positive duration such as 60s or 2m (units ms, s, m, h)"))]
    pub drain_timeout: String,
    /// Lease failover time: a lease whose counter has not changed for this
    /// long is expired. A positive duration, default `10s` (the KCL default).
    #[serde(default = "default_lease_failover")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(POSITIVE_DURATION).message("handoff.leaseFailover must be a positive duration such as 10s (units ms, s, m, h)"))]
    pub lease_failover: String,
}

impl Default for HandoffSpec {
    fn default() -> Self {
        Self {
            drain_timeout: default_drain_timeout(),
            lease_failover: default_lease_failover(),
        }
    }
}

/// Pacing of optional moves (balancing onto pods that just became eligible).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceSpec {
    /// Wait this long after the last pod change before optional moves, so a
    /// rolling deploy moves each shard about once: a duration (`0s` allowed),
    /// default `30s`.
    #[serde(default = "default_rebalance_delay")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(DURATION).message("rebalance.delay must be a duration such as 30s, 1m or 0s (units ms, s, m, h)"))]
    pub delay: String,
    /// Most optional moves per `window` (at least 1); unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("rebalance.maxMovesPerWindow must be at least 1; omit it for no limit"))]
    pub max_moves_per_window: Option<u32>,
    /// Length of the sliding window for `maxMovesPerWindow`: a positive
    /// duration, default `1m`.
    #[serde(default = "default_rebalance_window")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(POSITIVE_DURATION).message("rebalance.window must be a positive duration such as 1m (units ms, s, m, h)"))]
    pub window: String,
    /// The first publish of a group (no assignment published yet) waits
    /// for pods that are Ready but not yet past the pool's
    /// `minReadySeconds`, so pods started together land in one balanced
    /// assignment instead of being balanced onto, paced, one move at a
    /// time; it waits at most this long after the first pod became
    /// eligible (Kafka's `group.initial.rebalance.delay.ms`). A duration,
    /// `0s` publishes at once; default `5s`.
    #[serde(default = "default_initial_delay")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(DURATION).message("rebalance.initialDelay must be a duration such as 5s or 0s (units ms, s, m, h)"))]
    pub initial_delay: String,
}

impl Default for RebalanceSpec {
    fn default() -> Self {
        Self {
            delay: default_rebalance_delay(),
            max_moves_per_window: None,
            window: default_rebalance_window(),
            initial_delay: default_initial_delay(),
        }
    }
}

fn default_drain_timeout() -> String {
    "60s".into()
}
fn default_lease_failover() -> String {
    "10s".into()
}
fn default_rebalance_delay() -> String {
    "30s".into()
}
fn default_rebalance_window() -> String {
    "1m".into()
}
fn default_initial_delay() -> String {
    "5s".into()
}

impl HandoffSpec {
    /// `drainTimeout` as a duration.
    pub fn drain_timeout(&self) -> Result<Duration, SpecError> {
        positive("handoff.drainTimeout", &self.drain_timeout)
    }

    /// `leaseFailover` as a duration.
    pub fn lease_failover(&self) -> Result<Duration, SpecError> {
        positive("handoff.leaseFailover", &self.lease_failover)
    }
}

impl RebalanceSpec {
    /// `delay` as a duration (may be zero).
    pub fn delay(&self) -> Result<Duration, SpecError> {
        parse_duration(&self.delay).map_err(|source| SpecError {
            field: "rebalance.delay",
            source,
        })
    }

    /// `window` as a duration.
    pub fn window(&self) -> Result<Duration, SpecError> {
        positive("rebalance.window", &self.window)
    }

    /// `initialDelay` as a duration (may be zero).
    pub fn initial_delay(&self) -> Result<Duration, SpecError> {
        parse_duration(&self.initial_delay).map_err(|source| SpecError {
            field: "rebalance.initialDelay",
            source,
        })
    }
}
