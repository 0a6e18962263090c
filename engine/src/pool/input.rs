//! What the pool-wide deal works on: the pool's count-mode groups
//! ([`PoolGroup`], [`PoolInput`]) and what it deals them ([`Ceilings`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::Pod;

/// One count-mode ShardGroup of the pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolGroup {
    /// The group's name (`namespace/name`): the deal's order.
    pub name: String,
    /// Readable shards it assigns.
    pub readable: u64,
    /// Readable shards each pod holds now, by pod name.
    #[serde(default)]
    pub holdings: BTreeMap<String, u64>,
    /// The pods the pool's previous deal gave this group's ⌈⌉ quotas.
    #[serde(default)]
    pub previous: Vec<String>,
    /// When the deal spans pools that share pods: the eligible pods of
    /// this group's own pool, with the capacity that pool gives them (names
    /// not among the input's `pods` are ignored). Absent: every pod of the
    /// input, at its capacity there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<Vec<Pod>>,
    /// Most shards per pod for this group, when its pool's cap differs from
    /// the input's `maxShardsPerPod` (0: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_shards_per_pod: Option<u32>,
    /// Its units are where something else puts them, not where the deal
    /// says (the standby slots of a group whose standbys take every pod
    /// but a shard's owner): its ⌈⌉ pods are its holders, and the other
    /// groups are dealt around them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed: bool,
}

/// Everything one deal needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolInput {
    /// The pool's pods, in any order: the eligible ones (ready, not
    /// terminating) take part, by name, capacity and `readySince`.
    pub pods: Vec<Pod>,
    /// Most shards per pod and group; 0: no cap.
    #[serde(default)]
    pub max_shards_per_pod: u32,
    /// The pool's count-mode groups, in any order.
    pub groups: Vec<PoolGroup>,
}

/// The deal: per group, the pods that take its ⌈⌉ quotas, sorted by name.
pub type Ceilings = BTreeMap<String, Vec<String>>;
