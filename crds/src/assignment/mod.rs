//! The published assignment: the document in ConfigMap `<shardgroup>-assignment`
//! (key `assignment.json`) and the compact per-pod view in the pod annotation
//! `assignment.shardring.io/<shardgroup>`. Field names are the consumer contract,
//! described by the JSON schemas in `crds/schema/` and pinned by the golden files
//! in `crds/tests/golden/`; [`encoding`] turns a document into ConfigMap data.
//!
//! # Consumer contract
//!
//! A consumer reads its pod's annotation (through the downward API) or the
//! ConfigMap (key `assignment.json` in `data`, or gzip-compressed under
//! `assignment.json.gz` in `binaryData` for large groups; see [`encoding::decode`]).
//! It may read a shard only while the shard is in its `active` list at the
//! newest epoch it has seen (and, with a lease table, while it holds the lease);
//! a shard in its `revoking` list must be stopped, checkpointed and released at
//! once. Views with an older epoch than one already seen are ignored. A
//! shard in its `held` list is its own again once it is back (its pool holds
//! shards for returning pods, `identity.stable`): nobody reads it meanwhile,
//! and neither may it until the shard is in `active`.

pub mod encoding;

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use schemars::JsonSchema;
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
/// Largest pod annotation (key plus value) [`PodView::to_checked_annotation`]
/// produces: half of the API server's 256 KiB limit on all of an object's
/// annotations, leaving the rest to the pod's other annotations. About 5,600
/// Kinesis shard ids (23 bytes each in JSON) fit.
pub const MAX_ANNOTATION_BYTES: usize = 128 * 1024;

/// Why a pod's view cannot be published as an annotation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// The view is larger than [`MAX_ANNOTATION_BYTES`].
    #[error(
        "the pod's view is {bytes} bytes, over the {limit}-byte annotation budget: \
         add pods, or read the ConfigMap instead of the annotation"
    )]
    TooLarge {
        /// Key plus value length.
        bytes: usize,
        /// [`MAX_ANNOTATION_BYTES`].
        limit: usize,
    },
}

impl ViewError {
    /// Constant reason for status conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "PodViewTooLarge",
        }
    }
}

/// The whole published assignment of one ShardGroup (ConfigMap
/// `<shardgroup>-assignment`). The `pods` index and the `shards` records
/// describe the same assignment; readers may use either.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentDocument {
    /// Always `shardring.io/v1alpha1` for this shape; a reader refuses other
    /// versions.
    #[schemars(extend("const" = "shardring.io/v1alpha1"))]
    pub api_version: String,
    /// Always `Assignment`.
    #[schemars(extend("const" = "Assignment"))]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// Shards held for this pod's return: nobody reads them; they are active
    /// on it again once it is eligible (within its pool's return window).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
}

impl PodAssignment {
    /// Whether the pod holds nothing: no active, standby, revoking or held
    /// shard.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
            && self.standby.is_empty()
            && self.revoking.is_empty()
            && self.held.is_empty()
    }
}

/// The per-pod annotation `assignment.shardring.io/<shardgroup>`: the pod's
/// entry of the document plus the epoch. A pod may read a shard only while it is
/// in `active` at the newest epoch it has seen (a view with an older epoch is
/// ignored); a shard in `revoking`, or no longer in `active`, must be stopped,
/// checkpointed and released at once. The operator removes the annotation only
/// from a pod that holds nothing, so an absent annotation after a view means no
/// shards. The operator hands a revoked shard to its next owner only after
/// evidence that this pod let go (lease released, pod gone, or drain timeout
/// and lease expiry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// Shards held for this pod while it was away (not Ready, restarting):
    /// not to be read; they come back in `active` once it is eligible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
}

/// State of one shard in the published document.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
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
    /// Held for its owner, which stopped being eligible and may return
    /// (its pool's `identity.returnWithin`): its owner let go, nobody reads
    /// it, and it is active on that owner again once it is back, or moves
    /// when the window (`returnHold.until`) ends.
    Held,
}

/// Inclusive range of the 128-bit hash key space, as decimal strings.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct HashKeyRange {
    /// First hash key of the shard (decimal).
    pub start: String,
    /// Last hash key of the shard (decimal, inclusive).
    pub end: String,
}

/// A move in flight: the shard is revoked from its owner and will go to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Handoff {
    /// Pod that will own the shard once the current owner let go (None: no
    /// eligible pod yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// When the revoke was first published (RFC 3339).
    // Typed, unlike the status times, strictly: a document the operator
    // wrote always holds a valid time; one edited by hand so that it does
    // not is an unreadable document, which the operator treats as a corrupt
    // ConfigMap (it rebuilds the assignment from the pods' annotations, every
    // move in flight restarting its drain) and a consumer as an invalid
    // document. A string field used to restart only that shard's drain.
    pub since: Timestamp,
    /// Epoch of the document that first published the revoke: a release
    /// acknowledgement must name this epoch or a later one (an older one is
    /// about an earlier revoke of the shard). 0 in documents written before
    /// the field existed; the operator then fills in the document's epoch.
    #[serde(default)]
    pub epoch: u64,
    /// With a lease table: the revoked owner's lease counter as the table
    /// showed it when the revoke was published. While the counter still
    /// reads the same, the lease has not been renewed since the revoke, so
    /// its failover counts from the revoke at the latest — also for an
    /// operator started since, which saw no earlier scan of the table.
    /// Absent without a lease table, or when the owner held no lease then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_counter: Option<u64>,
}

/// A hold for a returning owner: since when the owner is away, until when
/// its shard waits, and which pod object left (a returning pod of the same
/// name but another uid is another process, so a revoke in flight is not
/// called off for it without evidence that the first one let go).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReturnHold {
    /// When the owner stopped being eligible (RFC 3339).
    pub since: Timestamp,
    /// When the hold ends and the shard moves (RFC 3339).
    pub until: Timestamp,
    /// The uid of the owner's pod object when it left, when it was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// One shard's entry in the document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// The shard's hash key range, when the source has one. Informational:
    /// left out of documents too large to fit otherwise (see [`encoding`]).
    // Boxed, as is `handoff`: a document holds tens of thousands of records
    // and most have neither, so the record stays small (about half the size
    // inline), and so do the maps a plan builds of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_key_range: Option<Box<HashKeyRange>>,
    /// Present while the shard is `Revoking`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Box<Handoff>>,
    /// The checkpoint the previous owner acknowledged when it released the
    /// shard through the consumer endpoint (sources without a checkpoint
    /// store hand it over this way): the owner resumes after it. Kept while
    /// the shard stays on that owner.
    // A boxed String (one pointer), not a String or a Box<str> (two or
    // three): most records have none (see above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[allow(clippy::box_collection)]
    pub checkpoint: Option<Box<String>>,
    /// Present while the shard waits for its returning owner: `Held`, or
    /// `Revoking` from an owner it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_hold: Option<Box<ReturnHold>>,
}

/// JSON Schema (2020-12) of the ConfigMap document, committed as
/// `crds/schema/assignment.schema.json`.
pub fn document_schema() -> schemars::Schema {
    schemars::schema_for!(AssignmentDocument)
}

/// JSON Schema (2020-12) of the pod annotation, committed as
/// `crds/schema/pod-view.schema.json`.
pub fn pod_view_schema() -> schemars::Schema {
    schemars::schema_for!(PodView)
}

impl AssignmentDocument {
    /// An empty document of `shard_group` (`<namespace>/<name>`) at `epoch`.
    pub fn new(shard_group: impl Into<String>, epoch: u64) -> Self {
        Self {
            api_version: ASSIGNMENT_API_VERSION.to_owned(),
            kind: ASSIGNMENT_KIND.to_owned(),
            shard_group: shard_group.into(),
            epoch,
            pods: BTreeMap::new(),
            shards: BTreeMap::new(),
        }
    }

    /// A document whose `pods` index is derived from `shards`: every pod in
    /// `pods` gets an entry (empty when it holds nothing), an `Active` shard is
    /// active on its owner, a `Revoking` shard is revoking on its owner, and
    /// every standby of an `Active` or `Revoking` shard lists it as standby.
    /// Owners and standbys missing from `pods` get an entry too.
    pub fn from_shards(
        shard_group: impl Into<String>,
        epoch: u64,
        shards: BTreeMap<String, ShardRecord>,
        pods: impl IntoIterator<Item = String>,
    ) -> Self {
        let mut document = Self::new(shard_group, epoch);
        document.pods = pods
            .into_iter()
            .map(|pod| (pod, PodAssignment::default()))
            .collect();
        document.shards = shards;
        document.reindex_pods();
        document
    }

    /// Rebuilds every pod's `active`, `standby` and `revoking` lists from
    /// `shards` (keeping pods that now hold nothing, with empty lists), so the
    /// two views of the document cannot disagree. Lists come out sorted.
    pub fn reindex_pods(&mut self) {
        // Indexed by borrowed names first: one String per pod, not one
        // clone of the owner's name per shard (20,000 at scale).
        let mut index: HashMap<&str, PodAssignment> = self
            .pods
            .keys()
            .map(|pod| (pod.as_str(), PodAssignment::default()))
            .collect();
        for (id, shard) in &self.shards {
            let list: fn(&mut PodAssignment) -> &mut Vec<String> = match shard.state {
                ShardPhase::Active => |p: &mut PodAssignment| &mut p.active,
                ShardPhase::Revoking => |p: &mut PodAssignment| &mut p.revoking,
                ShardPhase::Held => |p: &mut PodAssignment| &mut p.held,
                ShardPhase::Pending | ShardPhase::Complete => continue,
            };
            if let Some(owner) = &shard.owner {
                list(index.entry(owner).or_default()).push(id.clone());
            }
            for standby in &shard.standbys {
                index.entry(standby).or_default().standby.push(id.clone());
            }
        }
        let pods: BTreeMap<String, PodAssignment> = index
            .into_iter()
            .map(|(pod, lists)| (pod.to_owned(), lists))
            .collect();
        self.pods = pods;
    }

    /// The compact view of `pod` for its annotation; empty lists when the pod
    /// holds nothing or is not in the document.
    pub fn pod_view(&self, pod: &str) -> PodView {
        let entry = self.pods.get(pod).cloned().unwrap_or_default();
        PodView {
            epoch: self.epoch,
            active: entry.active,
            standby: entry.standby,
            revoking: entry.revoking,
            held: entry.held,
        }
    }
}

impl PodView {
    /// The annotation value: compact JSON, fields in contract order.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a PodView always serializes")
    }

    /// The annotation value for annotation `key`, or [`ViewError::TooLarge`]
    /// when key and value exceed [`MAX_ANNOTATION_BYTES`] (the API server would
    /// refuse the pod patch once all annotations pass 256 KiB).
    pub fn to_checked_annotation(&self, key: &str) -> Result<String, ViewError> {
        let value = self.to_annotation();
        let bytes = key.len() + value.len();
        if bytes > MAX_ANNOTATION_BYTES {
            return Err(ViewError::TooLarge {
                bytes,
                limit: MAX_ANNOTATION_BYTES,
            });
        }
        Ok(value)
    }

    /// Parses an annotation value written by [`PodView::to_annotation`].
    pub fn from_annotation(value: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_budget_is_enforced() {
        let key = "assignment.shardring.io/orders";
        let shards = |n: usize| {
            (0..n)
                .map(|i| format!("shardId-{i:012}"))
                .collect::<Vec<_>>()
        };
        let fits = PodView {
            epoch: 1,
            active: shards(5_000),
            ..Default::default()
        };
        let value = fits.to_checked_annotation(key).unwrap();
        assert_eq!(PodView::from_annotation(&value).unwrap(), fits);
        let too_big = PodView {
            epoch: 1,
            active: shards(6_000),
            ..Default::default()
        };
        let error = too_big.to_checked_annotation(key).unwrap_err();
        assert_eq!(error.reason(), "PodViewTooLarge");
        assert!(
            matches!(error, ViewError::TooLarge { bytes, limit } if bytes > limit && limit == MAX_ANNOTATION_BYTES)
        );
    }
}
