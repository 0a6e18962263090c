//! The `ConsumerPool` custom resource: which pods consume, when a new pod may
//! receive shards, and how much each pod can take.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The pods of a consumer workload that share the shards of ShardGroups.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "shardring.io",
    version = "v1alpha1",
    kind = "ConsumerPool",
    namespaced,
    shortname = "cpool",
    status = "ConsumerPoolStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerPoolSpec {
    /// Label selector of the consumer pods (same namespace).
    pub selector: LabelSelector,
    /// Seconds a pod must have been Ready before it receives shards.
    #[serde(default)]
    pub min_ready_seconds: u32,
    /// Capacity weight of each pod.
    #[serde(default)]
    pub capacity: CapacitySpec,
    /// Most shards one pod may hold; unset means no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_shards_per_pod: Option<u32>,
    /// Node label keys used to spread standbys away from owners, most important first.
    #[serde(default = "default_topology_keys")]
    pub topology_keys: Vec<String>,
}

/// Capacity weight of the pool's pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySpec {
    /// Weight of a pod without the capacity label (at least 1).
    #[serde(default = "default_capacity")]
    pub default: u32,
    /// Pod label whose positive integer value overrides the default weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Default for CapacitySpec {
    fn default() -> Self {
        Self { default: default_capacity(), label: None }
    }
}

/// Observed state of a ConsumerPool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerPoolStatus {
    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods the selector matches.
    #[serde(default)]
    pub pods: u64,
    /// Of those, pods that are Ready.
    #[serde(default)]
    pub ready_pods: u64,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn default_capacity() -> u32 {
    1
}
fn default_topology_keys() -> Vec<String> {
    vec!["topology.kubernetes.io/zone".into(), "kubernetes.io/hostname".into()]
}
