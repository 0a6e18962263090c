//! The resource itself: the `ShardGroup` kind with its CRD attributes
//! (printer columns, short name, the name-length rule), its top-level spec,
//! the reference to its ConsumerPool, the balance mode, the names of the
//! published outputs, and the accessors that fill in their defaults.

use kube::{CustomResource, KubeSchema, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    HandoffSpec, LeaseTableSpec, RebalanceSpec, ScalingSpec, ShardGroupStatus, ShardSource,
    ThroughputSpec,
};
use crate::assignment::{ANNOTATION_PREFIX, CONFIGMAP_SUFFIX};

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
    doc = "A ShardGroup assigns the shards of one Kinesis stream (or a static set of partition queues, or the queues of a RabbitMQ virtual host) to the ready pods of a ConsumerPool, balanced and sticky, and publishes the result in ConfigMap <name>-assignment and in each pod's annotation assignment.shardring.io/<name>.",
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source", description = "Where the shards come from"),
    printcolumn(name = "Shards", type_ = "integer", json_path = ".status.shards.total", description = "Readable shards"),
    printcolumn(name = "Pods", type_ = "integer", json_path = ".status.pods.eligible", description = "Pods that receive shards"),
    printcolumn(name = "Load", type_ = "string", json_path = ".status.load", description = "Fewest/most shards on one pod"),
    printcolumn(name = "Moves", type_ = "integer", json_path = ".status.movesInFlight", description = "Shards being handed over"),
    printcolumn(name = "Held", type_ = "integer", json_path = ".status.shards.held", description = "Shards held for a returning pod (unread), until .status.heldUntil"),
    printcolumn(name = "Held-Until", type_ = "date", json_path = ".status.heldUntil", description = "When the first hold for a returning pod ends"),
    printcolumn(name = "Spread", type_ = "string", json_path = ".status.throughput.spread", description = "balance: throughput: least/most load on one pod ÷ its fair share"),
    printcolumn(name = "Recommended", type_ = "integer", json_path = ".status.recommendedReplicas", description = "Replicas spec.scaling asks for"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the assignment is published and current"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 63").message("ShardGroup name must be at most 63 characters: it is the name part of the pod annotation key assignment.shardring.io/<name>")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.throughput) || (has(self.balance) && self.balance == 'throughput')").message("spec.throughput applies only with balance: throughput; remove it or set balance: throughput"),
    validation = Rule::new("!has(self.leaseTable) || !has(self.source.rabbitmq)").message("spec.leaseTable is the KCL lease table of a Kinesis stream; a rabbitmq source has none: remove it")
)]
pub struct ShardGroupSpec {
    /// The ConsumerPool (same namespace) whose pods read this group's shards.
    /// May be changed: every shard then moves to the new pool's pods through the
    /// normal two-phase handoff.
    pub pool_ref: PoolRef,
    /// Where the shards come from: exactly one of `kinesis`, `static` or
    /// `rabbitmq`. The kind of source, a Kinesis stream and a RabbitMQ
    /// virtual host cannot be changed after creation.
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
    /// What is balanced: shard `count` (default), `hashRange` (each shard
    /// weighs its share of the 128-bit hash key space) or `throughput` (each
    /// shard weighs its measured load, see `throughput`).
    #[serde(default)]
    pub balance: BalanceMode,
    /// How `balance: throughput` weighs, smooths and damps (defaults apply
    /// when absent); only with `balance: throughput`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<ThroughputSpec>,
    /// The scaling signal: a target load per pod from which the status's
    /// `recommendedReplicas` (and the metric an HPA or KEDA reads) is
    /// computed. Absent: no recommendation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<ScalingSpec>,
    /// How shards move between pods.
    #[serde(default)]
    pub handoff: HandoffSpec,
    /// How optional (balancing) moves are paced, and how long a group's first
    /// publish waits for pods about to become eligible.
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

/// What the balance rule weighs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BalanceMode {
    /// Every pod holds ⌊S/P⌋ or ⌈S/P⌉ shards (weighted by capacity).
    #[default]
    Count,
    /// Weight is each shard's share of the 128-bit hash key space.
    HashRange,
    /// Weight is each shard's measured load (consumer reports through the
    /// endpoint, or the KCL lease table's `throughputKBps`): every pod is
    /// kept within a band around its fair share.
    Throughput,
}

impl BalanceMode {
    /// Whether each shard weighs its measured load (`throughput`): the group
    /// reads its shards' loads, is planned with the load its pool's other
    /// such groups put on each pod, and its pool reports the load spread.
    pub const fn weighs_load(self) -> bool {
        match self {
            Self::Throughput => true,
            Self::Count | Self::HashRange => false,
        }
    }

    /// Whether every shard weighs the same (`count`), so the pool's deal
    /// gives each pod a quota of the group's shards (⌊S/P⌋ or ⌈S/P⌉).
    pub const fn counts_shards(self) -> bool {
        match self {
            Self::Count => true,
            Self::HashRange | Self::Throughput => false,
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
    /// Whether each pod's view is also published as its annotation
    /// (default `true`). With `false` the operator writes no pod for this
    /// group (it removes annotations it wrote before): consumers read the
    /// ConfigMap or the endpoint, and an install whose groups all set it
    /// needs no `patch` on Pods outside its own namespace (chart value
    /// `rbac.podAnnotations: false`). Without a lease table, a revoke's
    /// drain timeout then counts from its publish in the document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<bool>,
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

    /// Whether each pod's view is published as its annotation
    /// (`spec.output.podAnnotations`, default `true`).
    pub fn publishes_pod_annotations(&self) -> bool {
        self.spec.output.pod_annotations.unwrap_or(true)
    }

    /// Name hashed with each shard id: `spec.consumerName`, else the ShardGroup's name.
    pub fn consumer_name(&self) -> String {
        self.spec
            .consumer_name
            .clone()
            .unwrap_or_else(|| self.name_any())
    }

    /// The throughput settings: `spec.throughput`, else the defaults.
    pub fn throughput_settings(&self) -> ThroughputSpec {
        self.spec.throughput.clone().unwrap_or_default()
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
