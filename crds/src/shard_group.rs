//! The `ShardGroup` custom resource: what is consumed (a Kinesis stream or a
//! static set of partition queues), by which `ConsumerPool`, and how shards are
//! balanced, handed over and published. The schema carries the CEL rules that
//! keep invalid specs out of the API server (see `tests/it/cel.rs`); the typed
//! accessors at the bottom turn validated strings into values so the controller
//! never parses spec text itself.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::assignment::{ANNOTATION_PREFIX, CONFIGMAP_SUFFIX};
use crate::duration::{DurationError, parse_duration, parse_positive_duration};

/// CEL: a positive Go-style duration (`30s`, `1m30s`, `250ms`).
const POSITIVE_DURATION: &str =
    "self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')";
/// CEL: a Go-style duration that may be zero.
const DURATION: &str = "self.matches('^([0-9]+(ms|s|m|h))+$')";
/// CEL: an endpoint URL.
const ENDPOINT_URL: &str = "self.matches('^https?://[^\\\\s/]+(/.*)?$')";
/// CEL: an AWS region name.
const REGION: &str = "self.matches('^[a-z]{2}(-[a-z]+)+-[0-9]+$')";

/// What a ShardGroup consumes and how its shards are spread over the pool's pods.
// Clippy reads the repeated `type_ = ...` of the printcolumn(...) lists as
// duplicated attributes; they are arguments of separate columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "shardring.io",
    version = "v1alpha1",
    kind = "ShardGroup",
    namespaced,
    shortname = "sg",
    category = "shardring",
    status = "ShardGroupStatus",
    doc = "A ShardGroup assigns the shards of one Kinesis stream (or a static set of partition queues) to the ready pods of a ConsumerPool, balanced and sticky, and publishes the result in ConfigMap <name>-assignment and in each pod's annotation assignment.shardring.io/<name>.",
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source", description = "Where the shards come from"),
    printcolumn(name = "Shards", type_ = "integer", json_path = ".status.shards.total", description = "Readable shards"),
    printcolumn(name = "Pods", type_ = "integer", json_path = ".status.pods.eligible", description = "Pods that receive shards"),
    printcolumn(name = "Load", type_ = "string", json_path = ".status.load", description = "Fewest/most shards on one pod"),
    printcolumn(name = "Moves", type_ = "integer", json_path = ".status.movesInFlight", description = "Shards being handed over"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the assignment is published and current"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 63").message("ShardGroup name must be at most 63 characters: it is the name part of the pod annotation key assignment.shardring.io/<name>")
)]
#[serde(rename_all = "camelCase")]
pub struct ShardGroupSpec {
    /// The ConsumerPool (same namespace) whose pods read this group's shards.
    /// May be changed: every shard then moves to the new pool's pods through the
    /// normal two-phase handoff.
    pub pool_ref: PoolRef,
    /// Where the shards come from: exactly one of `kinesis` or `static`. The
    /// kind of source, and a Kinesis stream, cannot be changed after creation.
    pub source: ShardSource,
    /// Optional KCL-format DynamoDB lease table, used as evidence that a pod has
    /// released a shard and that a parent shard is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_table: Option<LeaseTableSpec>,
    /// Name hashed with each shard id to order candidate pods (1 to 253
    /// characters); defaults to the ShardGroup's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("size(self) >= 1 && size(self) <= 253").message("consumerName must be 1 to 253 characters; omit it to use the ShardGroup's name"))]
    pub consumer_name: Option<String>,
    /// Backup pods per shard (warm standbys), never the owner: 0 to 5, default 0.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self <= 5").message("standbys must be between 0 and 5"))]
    pub standbys: u32,
    /// What is balanced: shard `count` (default) or `hashRange` (each shard
    /// weighs its share of the 128-bit hash key space).
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    /// Name of the ConsumerPool.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("size(self) <= 253 && self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("poolRef.name must be the name of a ConsumerPool in this namespace (lowercase letters, digits, '-' and '.')"))]
    pub name: String,
}

/// The source of shards: exactly one field is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.kinesis) != has(self.static)").message("set exactly one of source.kinesis or source.static"),
    validation = Rule::new("has(self.kinesis) == has(oldSelf.kinesis)").message("the source type (kinesis or static) cannot be changed; create a new ShardGroup instead")
)]
pub struct ShardSource {
    /// An AWS Kinesis data stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinesis: Option<KinesisSource>,
    /// A fixed number of named partitions (RabbitMQ queues, SQS queues, ...).
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_source: Option<StaticSource>,
}

/// A Kinesis data stream, read with ListShards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.streamName) != has(self.streamARN)").message("set exactly one of kinesis.streamName or kinesis.streamARN"),
    validation = Rule::new("(has(self.streamName) ? self.streamName : '') == (has(oldSelf.streamName) ? oldSelf.streamName : '') && (has(self.streamARN) ? self.streamARN : '') == (has(oldSelf.streamARN) ? oldSelf.streamARN : '')").message("the stream cannot be changed (shard ids repeat across streams, so leases and the published assignment cannot carry over); create a new ShardGroup instead")
)]
pub struct KinesisSource {
    /// Stream name (1 to 128 of `a-z A-Z 0-9 _ . -`); set this or `streamARN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z0-9_.-]{1,128}$')").message("kinesis.streamName must be 1 to 128 characters of a-z, A-Z, 0-9, '_', '.', '-'"))]
    pub stream_name: Option<String>,
    /// Stream ARN, `arn:aws:kinesis:<region>:<account>:stream/<name>`; set this
    /// or `streamName`.
    #[serde(default, rename = "streamARN", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("size(self) <= 2048 && self.matches('^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:stream/[a-zA-Z0-9_.-]{1,128}$')").message("kinesis.streamARN must look like arn:aws:kinesis:us-east-1:123456789012:stream/my-stream"))]
    pub stream_arn: Option<String>,
    /// AWS region, e.g. `us-east-1`; defaults to the region in the stream ARN,
    /// else the operator's region from the default AWS chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(REGION).message("kinesis.region must be an AWS region such as us-east-1"))]
    pub region: Option<String>,
    /// Endpoint URL override (`http://` or `https://`), for VPC endpoints and
    /// local emulators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(ENDPOINT_URL).message("kinesis.endpoint must be an http:// or https:// URL"))]
    pub endpoint: Option<String>,
    /// How often the shard list is refreshed (jittered): a duration of at least
    /// 1s such as `30s` (the default) or `1m`.
    #[serde(default = "default_refresh_interval")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) >= duration('1s')").message("kinesis.refreshInterval must be a duration of at least 1s, such as 30s or 1m"))]
    pub refresh_interval: String,
}

/// A fixed set of partitions named from a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticSource {
    /// Number of partitions, 1 to 100000. May be changed: new partitions are
    /// assigned, removed ones are revoked.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100000").message("static.count must be between 1 and 100000"))]
    pub count: u32,
    /// Name of each partition; `{index}` is replaced by 0..count-1 and must
    /// appear (at most 200 characters). Default `partition-{index}`.
    #[serde(default = "default_name_template")]
    #[schemars(length(max = 200))]
    #[x_kube(validation = Rule::new("size(self) <= 200 && self.contains('{index}')").message("static.nameTemplate must contain {index} (replaced by 0..count-1), e.g. orders-{index}, and be at most 200 characters"))]
    pub name_template: String,
}

/// A DynamoDB lease table in the KCL format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseTableSpec {
    /// Table name (the KCL application name by default): 3 to 255 of
    /// `a-z A-Z 0-9 _ . -`.
    #[schemars(length(max = 255))]
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z0-9_.-]{3,255}$')").message("leaseTable.tableName must be a DynamoDB table name: 3 to 255 characters of a-z, A-Z, 0-9, '_', '.', '-'"))]
    pub table_name: String,
    /// AWS region; defaults to the Kinesis source's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(REGION).message("leaseTable.region must be an AWS region such as us-east-1"))]
    pub region: Option<String>,
    /// Endpoint URL override (`http://` or `https://`), for VPC endpoints and
    /// local emulators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(ENDPOINT_URL).message("leaseTable.endpoint must be an http:// or https:// URL"))]
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
}

impl Default for RebalanceSpec {
    fn default() -> Self {
        Self {
            delay: default_rebalance_delay(),
            max_moves_per_window: None,
            window: default_rebalance_window(),
        }
    }
}

/// Names of the published outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputSpec {
    /// Pod annotation key holding each pod's view, a qualified name such as
    /// `example.com/shards`; defaults to `assignment.shardring.io/<shardgroup>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    #[x_kube(validation = Rule::new("size(self) <= 317 && self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')").message("output.annotationKey must be a qualified name: an optional DNS prefix and '/', then 1 to 63 of A-Z, a-z, 0-9, '-', '_', '.' starting and ending alphanumeric, e.g. example.com/shards"))]
    pub annotation_key: Option<String>,
    /// ConfigMap name (a DNS subdomain); defaults to `<shardgroup>-assignment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("size(self) <= 253 && self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("output.configMapName must be a DNS subdomain: lowercase letters, digits, '-' and '.', at most 253 characters"))]
    pub config_map_name: Option<String>,
}

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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub move_log: Vec<String>,
    /// Optional moves the budget still allows in the current window; absent
    /// without `rebalance.maxMovesPerWindow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_budget_remaining: Option<u64>,
    /// When the set of eligible pods last changed (RFC 3339): optional moves
    /// wait `rebalance.delay` after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_change: Option<String>,
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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drain_started: BTreeMap<String, String>,
    /// When the oldest revoke still in flight was published (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_revoke: Option<String>,
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

/// A spec field whose text could not be turned into a value. The CEL rules
/// refuse such specs at admission; this guards objects stored before a rule
/// existed, so the controller reports them instead of guessing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.{field}: {source}")]
pub struct SpecError {
    /// JSON path of the field below `spec`, e.g. `handoff.drainTimeout`.
    pub field: &'static str,
    /// What was wrong with its value.
    pub source: DurationError,
}

fn positive(field: &'static str, text: &str) -> Result<Duration, SpecError> {
    parse_positive_duration(text).map_err(|source| SpecError { field, source })
}

impl KinesisSource {
    /// `refreshInterval` as a duration.
    pub fn refresh_interval(&self) -> Result<Duration, SpecError> {
        positive("source.kinesis.refreshInterval", &self.refresh_interval)
    }

    /// The stream name: `streamName`, else the name part of `streamARN`.
    pub fn stream_name(&self) -> Option<&str> {
        self.stream_name.as_deref().or_else(|| {
            self.stream_arn
                .as_deref()?
                .rsplit_once(":stream/")
                .map(|(_, name)| name)
        })
    }

    /// The region: `region`, else the region field of `streamARN`.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref().or_else(|| {
            self.stream_arn
                .as_deref()?
                .split(':')
                .nth(3)
                .filter(|r| !r.is_empty())
        })
    }
}

impl StaticSource {
    /// Name of partition `index`: the template with `{index}` replaced.
    pub fn partition_name(&self, index: u32) -> String {
        self.name_template.replace("{index}", &index.to_string())
    }

    /// Names of all `count` partitions, in index order.
    pub fn partition_names(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.count).map(|index| self.partition_name(index))
    }
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
}

impl ShardSource {
    /// Short description for the `Source` printer column: `kinesis:<stream>`
    /// or `static:<count>`.
    pub fn summary(&self) -> String {
        match (&self.kinesis, &self.static_source) {
            (Some(kinesis), _) => format!("kinesis:{}", kinesis.stream_name().unwrap_or("?")),
            (None, Some(fixed)) => format!("static:{}", fixed.count),
            (None, None) => "none".to_owned(),
        }
    }
}

impl ShardGroup {
    /// Name of the ConfigMap holding the full document: `spec.output.configMapName`,
    /// else `<name>-assignment`.
    pub fn config_map_name(&self) -> String {
        self.spec
            .output
            .config_map_name
            .clone()
            .unwrap_or_else(|| format!("{}{CONFIGMAP_SUFFIX}", self.name_any()))
    }

    /// Pod annotation key holding each pod's view: `spec.output.annotationKey`,
    /// else `assignment.shardring.io/<name>`.
    pub fn annotation_key(&self) -> String {
        self.spec
            .output
            .annotation_key
            .clone()
            .unwrap_or_else(|| format!("{ANNOTATION_PREFIX}{}", self.name_any()))
    }

    /// Name hashed with each shard id: `spec.consumerName`, else the ShardGroup's name.
    pub fn consumer_name(&self) -> String {
        self.spec
            .consumer_name
            .clone()
            .unwrap_or_else(|| self.name_any())
    }

    /// `<namespace>/<name>`, the `shardGroup` field of the published document.
    pub fn qualified_name(&self) -> String {
        format!(
            "{}/{}",
            self.namespace().unwrap_or_default(),
            self.name_any()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(spec: serde_json::Value) -> ShardGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn defaults_fill_an_empty_spec() {
        let group = group(
            serde_json::json!({"poolRef": {"name": "p"}, "source": {"static": {"count": 2}}}),
        );
        let spec = &group.spec;
        assert_eq!(spec.standbys, 0);
        assert_eq!(spec.balance, BalanceMode::Count);
        assert_eq!(spec.handoff.drain_timeout(), Ok(Duration::from_secs(60)));
        assert_eq!(spec.handoff.lease_failover(), Ok(Duration::from_secs(10)));
        assert_eq!(spec.rebalance.delay(), Ok(Duration::from_secs(30)));
        assert_eq!(spec.rebalance.window(), Ok(Duration::from_secs(60)));
        let source = spec.source.static_source.as_ref().unwrap();
        assert_eq!(
            source.partition_names().collect::<Vec<_>>(),
            ["partition-0", "partition-1"]
        );
        assert_eq!(spec.source.summary(), "static:2");
    }

    #[test]
    fn output_names_default_from_the_group_name() {
        let plain = group(
            serde_json::json!({"poolRef": {"name": "p"}, "source": {"static": {"count": 1}}}),
        );
        assert_eq!(plain.config_map_name(), "orders-assignment");
        assert_eq!(plain.annotation_key(), "assignment.shardring.io/orders");
        assert_eq!(plain.consumer_name(), "orders");
        assert_eq!(plain.qualified_name(), "shop/orders");
        let custom = group(serde_json::json!({
            "poolRef": {"name": "p"}, "source": {"static": {"count": 1}}, "consumerName": "orders-app",
            "output": {"annotationKey": "example.com/shards", "configMapName": "orders-shards"}
        }));
        assert_eq!(custom.config_map_name(), "orders-shards");
        assert_eq!(custom.annotation_key(), "example.com/shards");
        assert_eq!(custom.consumer_name(), "orders-app");
    }

    #[test]
    fn kinesis_name_and_region_come_from_the_arn() {
        let by_arn = KinesisSource {
            stream_arn: Some("arn:aws:kinesis:eu-west-1:123456789012:stream/clicks".into()),
            ..Default::default()
        };
        assert_eq!(by_arn.stream_name(), Some("clicks"));
        assert_eq!(by_arn.region(), Some("eu-west-1"));
        let explicit = KinesisSource {
            region: Some("us-east-2".into()),
            ..by_arn
        };
        assert_eq!(explicit.region(), Some("us-east-2"));
        let by_name = KinesisSource {
            stream_name: Some("orders".into()),
            ..Default::default()
        };
        assert_eq!(
            (by_name.stream_name(), by_name.region()),
            (Some("orders"), None)
        );
        let source = ShardSource {
            kinesis: Some(by_name),
            static_source: None,
        };
        assert_eq!(source.summary(), "kinesis:orders");
    }

    #[test]
    fn accessors_report_the_field_of_a_bad_duration() {
        let handoff = HandoffSpec {
            drain_timeout: "0s".into(),
            lease_failover: "ten".into(),
        };
        let error = handoff.drain_timeout().unwrap_err();
        assert_eq!(error.field, "handoff.drainTimeout");
        assert_eq!(
            error.to_string(),
            "spec.handoff.drainTimeout: duration \"0s\" must be greater than zero"
        );
        assert_eq!(
            handoff.lease_failover().unwrap_err().field,
            "handoff.leaseFailover"
        );
        let rebalance = RebalanceSpec {
            delay: "0s".into(),
            ..Default::default()
        };
        assert_eq!(rebalance.delay(), Ok(Duration::ZERO));
    }
}
