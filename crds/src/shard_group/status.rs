//! The observed state of a ShardGroup: what the operator last published
//! (epoch, counts, load, conditions) and the handoff and pacing bookkeeping a
//! restarted operator resumes from.
//!
//! Times are typed (`jiff::Timestamp`, written as RFC 3339 strings exactly as
//! before) and read leniently: a time that does not parse reads as absent,
//! as the controller treated it when these fields were strings, instead of
//! failing the whole object (see `lenient.rs`).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::lenient;
use super::move_log::MoveLogEntry;

/// Observed state of a ShardGroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardGroupStatus {
    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Epoch of the published assignment (increases with every published change).
    #[serde(default)]
    pub epoch: u64,
    /// Short description of the source for `kubectl get`, e.g. `kinesis:orders`
    /// or `static:16`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Shard counts.
    #[serde(default)]
    pub shards: ShardCounts,
    /// Pod counts of the pool.
    #[serde(default)]
    pub pods: PodCounts,
    /// Fewest and most shards on one eligible pod, as `min/max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<String>,
    /// Fewest shards on one eligible pod.
    #[serde(default)]
    pub min_load: u64,
    /// Most shards on one eligible pod.
    #[serde(default)]
    pub max_load: u64,
    /// Shards being handed over right now.
    #[serde(default)]
    pub moves_in_flight: u64,
    /// Moves made within the current rebalance window: the move budget's
    /// log, one entry per reconcile that moved shards, `<RFC 3339 time> <count>`
    /// (required moves are logged too and use up the budget; only optional
    /// moves wait for it).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient::move_log"
    )]
    pub move_log: Vec<MoveLogEntry>,
    /// Optional moves the budget still allows in the current window; absent
    /// without `rebalance.maxMovesPerWindow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_budget_remaining: Option<u64>,
    /// When the set of eligible pods last changed (RFC 3339): optional moves
    /// wait `rebalance.delay` after it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::time"
    )]
    pub last_pod_change: Option<Timestamp>,
    /// Digest of the eligible pod set at `lastPodChange`, so a restarted
    /// operator can tell whether the pod set changed while it was away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_set_digest: Option<String>,
    /// Pods seen terminating with a grace period above zero that still hold
    /// revoking shards: once such a pod is gone from the API, it has stopped,
    /// which completes its handoffs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graceful_pods: Vec<String>,
    /// Per pod holding revoking shards: when its annotation was first seen
    /// listing all of them as `revoking` (RFC 3339). Without a lease table the
    /// drain timeout is counted from this time.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "lenient::times"
    )]
    pub drain_started: BTreeMap<String, Timestamp>,
    /// Per pod holding revoking shards: each time its annotation was first
    /// seen listing every revoke published before then (RFC 3339, oldest
    /// first; kept while a revoke in flight counts from it). Without a lease
    /// table a revoke's drain timeout counts from the first of these at or
    /// after its publication, so a pod given more revokes does not hold
    /// back the older ones' timeouts. `drainStarted` is the last of these.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "lenient::time_lists"
    )]
    pub drain_deliveries: BTreeMap<String, Vec<Timestamp>>,
    /// When the oldest revoke still in flight was published (RFC 3339).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::time"
    )]
    pub oldest_revoke: Option<Timestamp>,
    /// When the topology was last read successfully (RFC 3339).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::time"
    )]
    pub last_topology_time: Option<Timestamp>,
    /// When the first hold for a returning pod ends (RFC 3339): its shards
    /// move then unless the pod is back (`shards.held` counts them).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::time"
    )]
    pub held_until: Option<Timestamp>,
    /// `balance: throughput`: how the measured load lies and when shards
    /// last moved for it (in a pool balanced by throughput, each pod's
    /// load over every throughput group of the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<ThroughputStatus>,
    /// The pool-wide balance this group is part of: absent when it is
    /// planned alone (the only group of its kind on its pool's pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_balance: Option<PoolBalanceStatus>,
    /// With `spec.scaling`: the replicas the group needs for its target load
    /// per pod (also the metric `shardring_recommended_replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_replicas: Option<u32>,
    /// The last handoffs completed, newest first, at most
    /// [`RECENT_HANDOFFS`]: which shard went from which pod to which, what
    /// showed the previous owner let go, and how long it took (what
    /// `kubectl shardring why` shows; Events cannot, since the API
    /// aggregates repeated Events of one reason under the first one's
    /// note).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient::entries"
    )]
    pub recent_handoffs: Vec<HandoffRecord>,
    /// Standard conditions: Ready, Balanced, Progressing, Degraded (and
    /// LoadMeasured with `balance: throughput`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// How many completed handoffs `status.recentHandoffs` keeps.
pub const RECENT_HANDOFFS: usize = 16;

/// One completed handoff in `status.recentHandoffs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffRecord {
    /// The shard.
    pub shard: String,
    /// Its previous owner.
    pub from: String,
    /// Its new owner (absent: no eligible pod had room; it is unassigned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// What showed the previous owner let go: `pod_stopped`,
    /// `release_acked`, `lease_released`, `pod_gone`, `lease_expired` or
    /// `drain_timeout` (docs/handoff.md).
    pub evidence: String,
    /// From the revoke to the activation, milliseconds.
    pub millis: u64,
    /// When the shard was activated on its new owner (RFC 3339).
    pub completed: Timestamp,
}

/// The pool-wide balance a ShardGroup is part of: the pods of its pool
/// (and of pools that select some of the same pods) serve several groups,
/// and the balance that counts is over everything a pod serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolBalanceStatus {
    /// The ConsumerPools whose pods are balanced together: the group's own
    /// and every pool that shares a pod with it, sorted.
    pub pools: Vec<String>,
    /// The groups balanced together with this one by its balance mode,
    /// this one included: `count` groups have their ⌈⌉ quotas dealt
    /// together (each pod within one shard of its share of them all);
    /// `throughput` groups move their shards for each pod's whole load.
    /// 1 when the group is balanced alone by its mode (its standby slots
    /// may still be dealt with others).
    pub groups: u32,
    /// The groups whose standby slots are dealt together with this one's
    /// (each pod within one slot of its share of them all), this one
    /// included; 0 when its slots are spread alone.
    #[serde(default)]
    pub standby_groups: u32,
}

/// How the measured load of a `balance: throughput` group lies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThroughputStatus {
    /// Least and most load on one eligible pod ÷ its fair share, as
    /// `0.95/1.07` (1.00 is exactly the fair share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<String>,
    /// The group's measured load in KB/s (an unmeasured shard counts as the
    /// mean of the measured ones).
    #[serde(default, rename = "totalKBps")]
    pub total_kbps: u64,
    /// Pods outside the band by more than measurement noise explains after
    /// the last plan (the moves allowed could not bring them back).
    #[serde(default)]
    pub out_of_band_pods: u32,
    /// Readable shards with a measurement refreshed within `staleAfter`.
    #[serde(default)]
    pub measured_shards: u64,
    /// Readable shards never measured (they weigh the mean).
    #[serde(default)]
    pub unmeasured_shards: u64,
    /// Readable shards whose measurement is older than `staleAfter` (they
    /// keep their last value).
    #[serde(default)]
    pub stale_shards: u64,
    /// Load reports refused (negative, absurd, stale, not the owner's)
    /// since this operator started leading.
    #[serde(default)]
    pub rejected_reports: u64,
    /// When shards last moved (RFC 3339): to bring pods back into the band,
    /// or off a pod that left or is over `maxShardsPerPod`. The next move
    /// for load waits `throughput.dampingInterval` after it, unless the
    /// eligible pods change.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::time"
    )]
    pub last_rebalance: Option<Timestamp>,
    /// When pods were first seen outside the band since the last time all
    /// were inside (RFC 3339): shards move for load only once pods have
    /// stayed outside for three half-lives of the smoothing.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::time"
    )]
    pub out_of_band_since: Option<Timestamp>,
}

/// Shard counts of a ShardGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardCounts {
    /// Readable shards (open, or closed with complete parents).
    #[serde(default)]
    pub total: u64,
    /// Open shards.
    #[serde(default)]
    pub open: u64,
    /// Closed shards still to be read to their end.
    #[serde(default)]
    pub closed: u64,
    /// Children waiting for their parents to complete.
    #[serde(default)]
    pub pending: u64,
    /// Readable shards with no owner (no eligible pod had room).
    #[serde(default)]
    pub unassigned: u64,
    /// Readable shards held for a pod that may return (its pool's
    /// `identity`): unread until it is back or the hold ends.
    #[serde(default)]
    pub held: u64,
}

/// Pod counts of a ShardGroup's pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodCounts {
    /// Pods the pool's selector matches.
    #[serde(default)]
    pub selected: u64,
    /// Pods ready for minReadySeconds and not terminating: they receive shards.
    #[serde(default)]
    pub eligible: u64,
}
