//! The `ShardGroup` custom resource: what is consumed (a Kinesis stream or a
//! static set of partition queues), by which `ConsumerPool`, and how shards are
//! balanced, handed over and published.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a ShardGroup consumes and how its shards are spread over the pool's pods.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "shardring.io",
    version = "v1alpha1",
    kind = "ShardGroup",
    namespaced,
    shortname = "sg",
    status = "ShardGroupStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ShardGroupSpec {
    /// The ConsumerPool (same namespace) whose pods read this group's shards.
    pub pool_ref: PoolRef,
    /// Where the shards come from: exactly one of `kinesis` or `static`.
    pub source: ShardSource,
    /// Optional KCL-format DynamoDB lease table used as evidence of handoff and
    /// shard completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_table: Option<LeaseTableSpec>,
    /// Name hashed with each shard id to order candidate pods; defaults to the
    /// ShardGroup's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_name: Option<String>,
    /// Backup pods per shard (warm standbys), never the owner.
    #[serde(default)]
    pub standbys: u32,
    /// What is balanced: shard `count` or `hashRange` (share of the key space).
    #[serde(default)]
    pub balance: BalanceMode,
    /// How shards move between pods.
    #[serde(default)]
    pub handoff: HandoffSpec,
    /// How optional (balancing) moves are paced.
    #[serde(default)]
    pub rebalance: RebalanceSpec,
    /// Names of the published outputs.
    #[serde(default)]
    pub output: OutputSpec,
}

/// Reference to a ConsumerPool in the ShardGroup's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    /// Name of the ConsumerPool.
    pub name: String,
}

/// The source of shards: exactly one field is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardSource {
    /// An AWS Kinesis data stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinesis: Option<KinesisSource>,
    /// A fixed number of named partitions (RabbitMQ queues, SQS queues, ...).
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_source: Option<StaticSource>,
}

/// A Kinesis data stream, read with ListShards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KinesisSource {
    /// Stream name; set this or `streamARN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_name: Option<String>,
    /// Stream ARN; set this or `streamName`.
    #[serde(default, rename = "streamARN", skip_serializing_if = "Option::is_none")]
    pub stream_arn: Option<String>,
    /// AWS region; defaults to the operator's region from the default AWS chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Endpoint URL override, for VPC endpoints and local emulators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// How often the shard list is refreshed (jittered), e.g. `30s`.
    #[serde(default = "default_refresh_interval")]
    pub refresh_interval: String,
}

/// A fixed set of partitions named from a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticSource {
    /// Number of partitions (at least 1).
    pub count: u32,
    /// Name of each partition; `{index}` is replaced by 0..count-1.
    #[serde(default = "default_name_template")]
    pub name_template: String,
}

/// A DynamoDB lease table in the KCL format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseTableSpec {
    /// Table name (the KCL application name by default).
    pub table_name: String,
    /// AWS region; defaults to the Kinesis source's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Endpoint URL override, for VPC endpoints and local emulators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// What the balance rule weighs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BalanceMode {
    /// Every pod holds ⌊S/P⌋ or ⌈S/P⌉ shards (weighted by capacity).
    #[default]
    Count,
    /// Weight is each shard's share of the 128-bit hash key space.
    HashRange,
}

/// How a shard is handed from one pod to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffSpec {
    /// How long a revoked pod may take to stop, checkpoint and release, e.g. `60s`.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: String,
    /// Lease failover time: a lease whose counter has not changed for this
    /// long is expired, e.g. `10s` (the KCL default).
    #[serde(default = "default_lease_failover")]
    pub lease_failover: String,
}

impl Default for HandoffSpec {
    fn default() -> Self {
        Self { drain_timeout: default_drain_timeout(), lease_failover: default_lease_failover() }
    }
}

/// Pacing of optional moves (balancing onto pods that just became eligible).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceSpec {
    /// Wait this long after the last pod change before optional moves, e.g. `30s`.
    #[serde(default = "default_rebalance_delay")]
    pub delay: String,
    /// Most optional moves per `window`; unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_moves_per_window: Option<u32>,
    /// Length of the sliding window for `maxMovesPerWindow`, e.g. `1m`.
    #[serde(default = "default_rebalance_window")]
    pub window: String,
}

impl Default for RebalanceSpec {
    fn default() -> Self {
        Self { delay: default_rebalance_delay(), max_moves_per_window: None, window: default_rebalance_window() }
    }
}

/// Names of the published outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputSpec {
    /// Pod annotation key; defaults to `assignment.shardring.io/<shardgroup>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_key: Option<String>,
    /// ConfigMap name; defaults to `<shardgroup>-assignment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
}

/// Observed state of a ShardGroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardGroupStatus {
    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Epoch of the published assignment.
    #[serde(default)]
    pub epoch: u64,
    /// Short description of the source for `kubectl get`, e.g. `kinesis:orders`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Shards that are readable now (open or closed, parents complete).
    #[serde(default)]
    pub shards: ShardCounts,
    /// Pods of the pool.
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
    /// Optional moves made within the current rebalance window (the move budget's log).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub move_log: Vec<String>,
    /// When the topology was last read successfully (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_topology_time: Option<String>,
    /// Standard conditions: Ready, Balanced, Progressing, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Shard counts of a ShardGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardCounts {
    /// Readable shards (open or closed with complete parents).
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

fn default_refresh_interval() -> String {
    "30s".into()
}
fn default_name_template() -> String {
    "partition-{index}".into()
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
