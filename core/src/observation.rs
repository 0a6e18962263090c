//! What the plan step sees of one ShardGroup at one moment: the
//! [`Observation`] and the plain data it is made of (the pods stripped to
//! [`PodInfo`], the topology read result, the published document, the lease
//! table read result, the departed pods). The operator's observe step builds
//! it from its reflector stores and sources; the simulation and the demo
//! build it from their worlds. Nothing here reads anything: it is data.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use shardring_crds::{AssignmentDocument, ConsumerPool, ShardGroup};

pub use crate::containers::Containers;
use crate::departures::Departures;
use crate::leases::LeaseTable;
use crate::topology::{SourceError, Topology};

/// Everything the plan step sees of one ShardGroup at one moment.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The ShardGroup: spec, metadata (generation, uid, deletion timestamp)
    /// and its current status.
    pub group: ShardGroup,
    /// Its ConsumerPool; `None` when the pool does not exist.
    pub pool: Option<ConsumerPool>,
    /// Pods the pool selects, plus pods that still carry this group's
    /// annotation (so it can be removed), sorted by name.
    pub pods: Vec<PodInfo>,
    /// The source read result, with the last good topology.
    pub topology: TopologyObservation,
    /// The published document decoded from the owned ConfigMap.
    pub published: Published,
    /// The lease table read result (handoff evidence).
    pub leases: LeaseObservation,
    /// What the pod watch remembers of the pods that left the API (handoff
    /// evidence); empty without a watch (tests, or right after a restart).
    pub departed: Departures,
    /// Releases the consumers acknowledged through the endpoint (handoff
    /// evidence); empty without an endpoint.
    pub releases: ReleaseAcks,
    /// The shards' measured loads (`balance: throughput` and the scaling
    /// signal); empty when nothing was measured.
    pub loads: crate::load::LoadObservation,
    /// The time of this observation: the only clock the plan step reads.
    pub now: Timestamp,
    /// What the group takes from the balance of the pods it shares with
    /// other groups (the observe step asks the pool's
    /// [`crate::pool::PoolBook`]); the default: planned alone.
    pub pool_share: crate::pool::PoolShare,
    /// The StatefulSets of the group's namespace and their replicas (stable
    /// identity: whether a pod of a name will be created again); empty
    /// when the pool holds nothing for returning pods.
    pub stateful_sets: crate::identity::StatefulSets,
}

/// A consumer's acknowledgement that it stopped reading a revoked shard,
/// as the endpoint recorded it after checking the caller's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseAck {
    /// The pod that let go.
    pub pod: String,
    /// Its uid (from its bound token): the acknowledgement speaks for that
    /// pod object only, not for an earlier pod of the same name.
    pub uid: String,
    /// The epoch of the view that listed the shard as revoking.
    pub epoch: u64,
    /// The last checkpoint the pod wrote, if the source has one.
    pub checkpoint: Option<String>,
    /// When the endpoint recorded it.
    pub at: Timestamp,
}

/// The acknowledged releases of one group, by shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseAcks {
    /// Shard id → the acknowledgement of its revoked owner.
    pub acks: BTreeMap<String, ReleaseAck>,
}

/// What the lease table said at this reconcile.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum LeaseObservation {
    /// The ShardGroup names no lease table: handoffs rely on pod deletion and
    /// the drain timeout (unfenced).
    #[default]
    NotConfigured,
    /// The latest scan.
    Read(LeaseTable),
    /// The scan failed (or was not made): nothing can be concluded from it,
    /// so no revoke completes through the lease table.
    Failed(String),
}

impl LeaseObservation {
    /// What a controller that has not read the table yet knows: nothing when
    /// the group names a table, else that there is none.
    pub fn unread(group: &ShardGroup) -> Self {
        if group.spec.lease_table.is_some() {
            LeaseObservation::Failed("the lease table has not been read".into())
        } else {
            LeaseObservation::NotConfigured
        }
    }
}

/// One pod, stripped to what the plan step uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// The pod labels the plan reads: the pool's capacity label (the
    /// operator's observe step keeps no other).
    pub labels: BTreeMap<String, String>,
    /// Whether the pool's selector matches it (false: it only carries a stale annotation).
    pub selected: bool,
    /// Whether its `Ready` condition is `True`.
    pub ready: bool,
    /// When its `Ready` condition last changed (with `ready`: ready since then).
    pub ready_since: Option<Timestamp>,
    /// Its deletion timestamp, when it is terminating.
    pub deletion_timestamp: Option<Timestamp>,
    /// Its deletion grace period (0 means force-deleted).
    pub deletion_grace_seconds: Option<i64>,
    /// Node it runs on.
    pub node_name: Option<String>,
    /// Zone: the pod's zone label, else its node's.
    pub zone: Option<String>,
    /// Current value of this group's annotation on the pod.
    pub annotation: Option<String>,
    /// What its status says of its containers.
    pub containers: Containers,
    /// Its creation timestamp.
    pub created: Option<Timestamp>,
    /// Whether the API server generated its name from
    /// `metadata.generateName` (a Deployment's pods): such a name is not
    /// reused by a later pod, unlike a StatefulSet's.
    pub generated_name: bool,
    /// Its IP (`status.podIP`), once it has one: the consumer endpoint
    /// checks that callers come from it.
    pub ip: Option<std::net::IpAddr>,
    /// The StatefulSet that controls it (its controller owner reference),
    /// if any: a pod of its name returns while its ordinal is below the
    /// set's replicas.
    pub stateful_set: Option<String>,
}

/// The topology as the controller knows it.
#[derive(Debug, Clone, Default)]
pub struct TopologyObservation {
    /// Short description of the source, e.g. `static:16`.
    pub source: String,
    /// The last topology read successfully (kept across failed reads).
    pub last_good: Option<Arc<Topology>>,
    /// When `last_good` was first read with its current content.
    pub read_at: Option<Timestamp>,
    /// The error of the latest read, when it failed (the topology is then stale).
    pub error: Option<SourceError>,
    /// When the source was last read successfully (what a stale topology's
    /// age is measured from); `None` when unknown.
    pub confirmed_at: Option<Timestamp>,
    /// What the source says of ordering: `Some(false)` when
    /// children are assigned without waiting for their parents (the group
    /// shows `OrderingNotEnforced`), `None` for sources without lineage.
    pub ordering_enforced: Option<bool>,
    /// Parent ids of each child shard, published in the document even when
    /// the engine shards carry no parents (ordering not enforced).
    pub lineage: BTreeMap<String, Vec<String>>,
    /// The source's own next refresh (jittered), replacing the fixed one.
    pub refresh_after: Option<Duration>,
}

impl TopologyObservation {
    /// Whether the topology shown is older than a failed read.
    pub fn stale(&self) -> bool {
        self.error.is_some()
    }
}

/// The previously published document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Published {
    /// No ConfigMap yet.
    #[default]
    Missing,
    /// The decoded document (shared with the operator's cache of decoded
    /// documents).
    Document(Arc<AssignmentDocument>),
    /// A ConfigMap exists but its document could not be decoded (the next
    /// publish replaces it; the epoch continues from status).
    Unreadable(String),
    /// The ConfigMap is gone, and this is the last document the operator
    /// held of it (written or decoded): what consumers that read it may
    /// still act on. The next publish creates the ConfigMap again.
    Deleted(Arc<AssignmentDocument>),
}

impl From<AssignmentDocument> for Published {
    fn from(document: AssignmentDocument) -> Self {
        Published::Document(Arc::new(document))
    }
}

impl From<Arc<AssignmentDocument>> for Published {
    fn from(document: Arc<AssignmentDocument>) -> Self {
        Published::Document(document)
    }
}

impl Published {
    /// The document, when one was decoded.
    pub fn document(&self) -> Option<&AssignmentDocument> {
        self.shared_document().map(Arc::as_ref)
    }

    /// [`Published::document`], as shared.
    pub fn shared_document(&self) -> Option<&Arc<AssignmentDocument>> {
        match self {
            Published::Document(doc) => Some(doc),
            _ => None,
        }
    }
}

/// The state of the published ConfigMap when it was observed, which the next
/// document write is conditioned on. Kept apart from [`Published`] because
/// the plan step never reads it; only the apply step does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PublishedVersion {
    /// No ConfigMap was seen: the document is created (POST), which fails
    /// with 409 AlreadyExists when another write created it meanwhile. A
    /// ConfigMap without a resourceVersion (never for a stored object) counts
    /// as absent, so it is never overwritten unconditionally.
    #[default]
    Absent,
    /// The ConfigMap's `metadata.resourceVersion`: the document is applied
    /// with it in the body, so the API server refuses the apply (409
    /// Conflict) once the ConfigMap changed since it was read.
    At(String),
}
