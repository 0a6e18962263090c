//! The published assignment: the document in ConfigMap `<shardgroup>-assignment`
//! (key `assignment.json`) and the compact per-pod view in the pod annotation
//! `assignment.shardring.io/<shardgroup>`. Field names are the consumer contract.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `apiVersion` of the assignment document and the per-pod view.
pub const ASSIGNMENT_API_VERSION: &str = "shardring.io/v1alpha1";
/// `kind` of the assignment document.
pub const ASSIGNMENT_KIND: &str = "Assignment";
/// Prefix of the per-pod annotation key; the ShardGroup name follows it.
pub const ANNOTATION_PREFIX: &str = "assignment.shardring.io/";
/// Key of the JSON document inside the ConfigMap's `data`.
pub const CONFIGMAP_KEY: &str = "assignment.json";
/// Key of the gzip-compressed JSON document inside the ConfigMap's
/// `binaryData`, used instead of [`CONFIGMAP_KEY`] when the plain document is large.
pub const CONFIGMAP_GZIP_KEY: &str = "assignment.json.gz";
/// Suffix of the default ConfigMap name: `<shardgroup>-assignment`.
pub const CONFIGMAP_SUFFIX: &str = "-assignment";

/// The whole published assignment of one ShardGroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentDocument {
    /// Always `shardring.io/v1alpha1` for this shape.
    pub api_version: String,
    /// Always `Assignment`.
    pub kind: String,
    /// `<namespace>/<name>` of the ShardGroup that published it.
    pub shard_group: String,
    /// Monotonic version: every published change increases it.
    pub epoch: u64,
    /// Per pod: the shards it must read, back up, and stop reading.
    #[serde(default)]
    pub pods: BTreeMap<String, PodAssignment>,
    /// Per shard: owner, state, standbys, parents, hash key range, handoff.
    #[serde(default)]
    pub shards: BTreeMap<String, ShardRecord>,
}

/// One pod's shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAssignment {
    /// Shards this pod may read now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<String>,
    /// Shards this pod backs up (warm standby); it must not read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standby: Vec<String>,
    /// Shards this pod must stop reading at once: checkpoint and release.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revoking: Vec<String>,
}

/// The per-pod annotation: the pod's entry plus the epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    /// Epoch of the assignment document this view was cut from.
    pub epoch: u64,
    /// Shards this pod may read now.
    #[serde(default)]
    pub active: Vec<String>,
    /// Shards this pod backs up; it must not read them.
    #[serde(default)]
    pub standby: Vec<String>,
    /// Shards this pod must stop reading at once.
    #[serde(default)]
    pub revoking: Vec<String>,
}

/// State of one shard in the published document.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum ShardPhase {
    /// Read by its owner.
    #[default]
    Active,
    /// Its owner must stop; a new owner gets it once the old one let go.
    Revoking,
    /// Waiting for its parents to complete; nobody reads it.
    Pending,
    /// Read to its end; nobody needs to read it again.
    Complete,
}

/// Inclusive range of the 128-bit hash key space, as decimal strings.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HashKeyRange {
    /// First hash key of the shard (decimal).
    pub start: String,
    /// Last hash key of the shard (decimal, inclusive).
    pub end: String,
}

/// A move in flight: the shard is revoked from its owner and will go to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handoff {
    /// Pod that will own the shard once the current owner let go (None: no
    /// eligible pod yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// When the revoke was first published (RFC 3339).
    pub since: String,
}

/// One shard's entry in the document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardRecord {
    /// Pod that reads it (or is being revoked from it); absent when pending or unassigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Lifecycle and handoff state.
    #[serde(default)]
    pub state: ShardPhase,
    /// Backup pods, never the owner.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standbys: Vec<String>,
    /// Parent shards (split or merge); they must complete before this one is read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
    /// The shard's hash key range, when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_key_range: Option<HashKeyRange>,
    /// Present while the shard is `Revoking`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
}
