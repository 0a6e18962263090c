//! Status conditions of a ShardGroup: the four condition types, their constant
//! reasons, and the helper that keeps `lastTransitionTime` stable while a
//! condition's status does not change (so an unchanged world writes nothing).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition type: the assignment is published and current.
pub const READY: &str = "Ready";
/// Condition type: every readable shard has an owner and the load is within the balance rule.
pub const BALANCED: &str = "Balanced";
/// Condition type: shards are being handed over.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: something keeps the group from its desired state.
pub const DEGRADED: &str = "Degraded";

/// Condition type, shown only with `balance: throughput`: whether every
/// readable shard's load is measured (and no reading was refused lately).
pub const LOAD_MEASURED: &str = "LoadMeasured";

/// Condition type, shown only for sources whose shards have lineage:
/// True when children of split or merged shards are assigned without waiting
/// for their parents to be read to the end (no lease table). A separate,
/// abnormal-true condition type rather than a Degraded reason, because it is
/// a standing property of the spec, not a fault: it must stay visible while
/// Degraded reports (and clears) transient problems such as a stale topology.
/// Kubernetes API conventions allow such condition types as long as the
/// condition is always present (True or False) once it applies.
pub const ORDERING_NOT_ENFORCED: &str = "OrderingNotEnforced";

/// The message of the `OrderingNotEnforced` condition.
pub const ORDERING_NOT_ENFORCED_MESSAGE: &str = "no lease table is configured, so shardring cannot see when a parent \
     shard has been read to its end: children of split or merged shards are assigned at once and records for a key may \
     be read out of order across a reshard; set spec.leaseTable to the KCL application's lease table to hold children \
     until their parents are complete";

/// Reasons, constant strings shared by conditions, Events and metrics.
pub mod reason {
    /// The assignment is published for the current pods and topology.
    pub const PUBLISHED: &str = "Published";
    /// The group's first publish waits for pods about to pass
    /// `minReadySeconds` (`rebalance.initialDelay`).
    pub const FIRST_PUBLISH_HELD: &str = "FirstPublishHeld";
    /// The ConsumerPool named by `spec.poolRef` does not exist.
    pub const POOL_NOT_FOUND: &str = "PoolNotFound";
    /// A ConsumerPool's Ready=True: some pod it selects is eligible.
    pub const SERVING: &str = "Serving";
    /// The pool selects no pod that is Ready for `minReadySeconds`.
    pub const NO_READY_PODS: &str = "NoReadyPods";
    /// A spec field could not be interpreted.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The engine refused the input.
    pub const PLAN_FAILED: &str = "PlanFailed";
    /// The document does not fit in one ConfigMap (the API crate's
    /// `EncodeError::reason()` for that case).
    pub const DOCUMENT_TOO_LARGE: &str = "AssignmentTooLarge";
    /// No topology has been read yet.
    pub const TOPOLOGY_UNKNOWN: &str = "TopologyUnknown";
    /// Load is within the balance rule and every readable shard has an owner.
    pub const BALANCED: &str = "Balanced";
    /// Some readable shards have no owner (every pod is at `maxShardsPerPod`).
    pub const UNASSIGNED_SHARDS: &str = "UnassignedShards";
    /// No plan was made this time (see Ready).
    pub const NOT_PLANNED: &str = "NotPlanned";
    /// Shards are being handed over.
    pub const HANDOFF_IN_PROGRESS: &str = "HandoffInProgress";
    /// Shards are held, unread, for pods that may return (ConsumerPool
    /// `identity`).
    pub const WAITING_FOR_RETURN: &str = "WaitingForReturn";
    /// A hold for a returning pod ended without it: its shards moved (Event
    /// reason).
    pub const HOLD_EXPIRED: &str = "HoldExpired";
    /// No shard is being handed over.
    pub const STABLE: &str = "Stable";
    /// Nothing is wrong.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// Degraded cleared (Event reason).
    pub const RECOVERED: &str = "Recovered";
    /// OrderingNotEnforced=True: no `spec.leaseTable`, parent completion
    /// cannot be observed.
    pub const NO_LEASE_TABLE: &str = "NoLeaseTable";
    /// OrderingNotEnforced=False: children wait for their parents, as the
    /// lease table shows them complete.
    pub const LEASE_TABLE_CONFIGURED: &str = "LeaseTableConfigured";
    /// Balanced=False with `balance: throughput`: pods are outside the band
    /// and the moves allowed now (damping, budget, delay) cannot bring them back.
    pub const OUT_OF_BAND: &str = "OutOfBand";
    /// Balanced=False: optional moves wait for the move budget
    /// (`rebalance.maxMovesPerWindow`); more are allowed as the window
    /// slides.
    pub const MOVES_DEFERRED: &str = "MovesDeferred";
    /// LoadMeasured=True: every readable shard's load is measured.
    pub const MEASURED: &str = "Measured";
    /// LoadMeasured=False: some shards have no load measurement yet.
    pub const LOAD_UNMEASURED: &str = "LoadUnmeasured";
    /// LoadMeasured=False: some shards' measurements are older than `staleAfter`.
    pub const LOAD_STALE: &str = "LoadStale";
    /// LoadMeasured=False: load readings were refused within `staleAfter`.
    pub const LOAD_REPORTS_REJECTED: &str = "LoadReportsRejected";
    /// Warning Event: load readings were refused since the last reconcile.
    pub const LOAD_REPORT_REJECTED: &str = "LoadReportRejected";
    /// Normal Event: shards moved to bring pods back into the band.
    pub const LOAD_REBALANCED: &str = "LoadRebalanced";
    /// Some pod's view exceeds the annotation budget (the API crate's
    /// `ViewError::reason()`); that pod's annotation is not written.
    pub const POD_VIEW_TOO_LARGE: &str = "PodViewTooLarge";
}

/// Builds condition `type_`, keeping the previous `lastTransitionTime` when
/// the status is unchanged.
pub(crate) fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
    previous: &[Condition],
) -> Condition {
    let status = if status { "True" } else { "False" }.to_owned();
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The condition of `type_` in `conditions`, if any.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}
