//! The `ConsumerPool` custom resource: which pods consume, when a new pod may
//! receive shards, and how much each pod can take. Its CEL rules refuse an
//! empty selector (which would select every pod in the namespace) and
//! non-positive capacities; `identity` (holds for returning pods) lives in
//! its own file.

mod identity;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub use self::identity::IdentitySpec;

/// CEL: a label key (qualified name: optional DNS prefix and `/`, then a name of at most 63 characters).
const LABEL_KEY: &str = "size(self) <= 317 && self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')";

/// The pods of a consumer workload that share the shards of ShardGroups.
// Clippy reads the repeated `type_ = ...` of the printcolumn(...) lists as
// duplicated attributes; they are arguments of separate columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "shardring.io",
    version = "v1alpha1",
    kind = "ConsumerPool",
    namespaced,
    shortname = "cpool",
    category = "shardring",
    status = "ConsumerPoolStatus",
    doc = "A ConsumerPool selects the pods of a consumer workload; ShardGroups that reference it spread their shards over its ready pods.",
    printcolumn(
        name = "Pods",
        type_ = "integer",
        json_path = ".status.pods",
        description = "Pods the selector matches"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyPods",
        description = "Of those, pods that are Ready"
    ),
    printcolumn(
        name = "Groups",
        type_ = "integer",
        json_path = ".status.groups",
        description = "ShardGroups that reference the pool"
    ),
    printcolumn(
        name = "Shards",
        type_ = "integer",
        json_path = ".status.shards",
        description = "Shards active on the pool's pods, over all its groups"
    ),
    printcolumn(
        name = "Min",
        type_ = "integer",
        json_path = ".status.fewestShardsPerPod",
        description = "Fewest shards one Ready pod reads, over all the pool's groups"
    ),
    printcolumn(
        name = "Max",
        type_ = "integer",
        json_path = ".status.mostShardsPerPod",
        description = "Most shards one Ready pod reads, over all the pool's groups"
    ),
    printcolumn(
        name = "Load",
        type_ = "string",
        json_path = ".status.loadSpread",
        description = "Least/most load on one pod over the throughput groups ÷ its fair share"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerPoolSpec {
    /// Label selector of the consumer pods (same namespace). Must not be empty:
    /// an empty selector would select every pod in the namespace.
    #[x_kube(validation = Rule::new("(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)").message("selector must set matchLabels or matchExpressions: an empty selector would select every pod in the namespace"))]
    pub selector: LabelSelector,
    /// Seconds a pod must have been Ready before it receives shards, 0 to
    /// 3600; default 0.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self <= 3600").message("minReadySeconds must be between 0 and 3600"))]
    pub min_ready_seconds: u32,
    /// Capacity weight of each pod.
    #[serde(default)]
    pub capacity: CapacitySpec,
    /// Most shards one pod may hold (at least 1); unset means no cap. Shards
    /// beyond the pool's total cap stay unassigned and are reported in status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("maxShardsPerPod must be at least 1; omit it for no cap"))]
    pub max_shards_per_pod: Option<u32>,
    /// Node label keys used to spread standbys away from owners, most
    /// important first (at most 8). Default: zone, then hostname.
    #[serde(default = "default_topology_keys")]
    #[x_kube(validation = Rule::new("size(self) <= 8").message("topologyKeys may list at most 8 label keys"))]
    #[x_kube(validation = Rule::new(format!("self.all(k, {})", LABEL_KEY.replace("self", "k"))).message("every topologyKeys entry must be a label key such as topology.kubernetes.io/zone"))]
    #[schemars(length(max = 8), inner(length(max = 317)))]
    pub topology_keys: Vec<String>,
    /// Stable identity: hold the shards of a pod that may return (a
    /// container restart, a StatefulSet's rolling restart) instead of
    /// moving them. Off unless `identity.stable` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentitySpec>,
}

/// Capacity weight of the pool's pods: a pod of weight 2 takes twice the
/// shards of a pod of weight 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySpec {
    /// Weight of a pod without the capacity label, 1 to 1000; default 1.
    #[serde(default = "default_capacity")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 1000").message("capacity.default must be between 1 and 1000"))]
    pub default: u32,
    /// Pod label whose value (an integer 1 to 1000) overrides the default
    /// weight; pods with a missing or invalid value get the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    #[x_kube(validation = Rule::new(LABEL_KEY).message("capacity.label must be a label key such as shardring.io/capacity"))]
    pub label: Option<String>,
}

impl Default for CapacitySpec {
    fn default() -> Self {
        Self {
            default: default_capacity(),
            label: None,
        }
    }
}

impl CapacitySpec {
    /// Capacity of a pod given its labels: the label's value when it is an
    /// integer in 1..=1000, else the default.
    pub fn weight_of(&self, labels: &std::collections::BTreeMap<String, String>) -> u32 {
        self.label
            .as_ref()
            .and_then(|key| labels.get(key))
            .and_then(|value| value.trim().parse::<u32>().ok())
            .filter(|weight| (1..=1000).contains(weight))
            .unwrap_or(self.default)
    }
}

impl ConsumerPoolSpec {
    /// `minReadySeconds` as a duration.
    pub fn min_ready(&self) -> Duration {
        Duration::from_secs(u64::from(self.min_ready_seconds))
    }
}

/// Observed state of a ConsumerPool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// ShardGroups that reference the pool.
    #[serde(default)]
    pub groups: u64,
    /// Shards active on the pool's pods, over all its groups (as their
    /// published documents say).
    #[serde(default)]
    pub shards: u64,
    /// Fewest shards one Ready pod of the pool reads over all its groups
    /// (count-mode groups are balanced over the pool: within one shard of
    /// `mostShardsPerPod` with equal capacities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fewest_shards_per_pod: Option<u64>,
    /// Most shards one Ready pod of the pool reads over all its groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub most_shards_per_pod: Option<u64>,
    /// With `balance: throughput` groups: the least and most load on one
    /// eligible pod over all of them ÷ its fair share of their load, as
    /// `0.95/1.07`, as the latest plan of one of them saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_spread: Option<String>,
    /// Other pools that select some of the same pods: their groups are
    /// balanced together with this pool's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balanced_with: Vec<String>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn default_capacity() -> u32 {
    1
}
fn default_topology_keys() -> Vec<String> {
    vec![
        "topology.kubernetes.io/zone".into(),
        "kubernetes.io/hostname".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_label_overrides_default_when_valid() {
        let capacity = CapacitySpec {
            default: 2,
            label: Some("shardring.io/capacity".into()),
        };
        let labels = |v: &str| {
            [("shardring.io/capacity".to_owned(), v.to_owned())]
                .into_iter()
                .collect()
        };
        assert_eq!(capacity.weight_of(&labels("4")), 4);
        assert_eq!(capacity.weight_of(&labels("0")), 2);
        assert_eq!(capacity.weight_of(&labels("x")), 2);
        assert_eq!(capacity.weight_of(&labels("1001")), 2);
        assert_eq!(capacity.weight_of(&Default::default()), 2);
    }
}
