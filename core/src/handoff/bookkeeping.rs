//! The handoff and pacing bookkeeping the ShardGroup status keeps, so a
//! restarted operator resumes every move and the pacing where they were.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::crds::ShardGroupStatus;
use crate::crds::shard_group::MoveLogEntry;

/// Handoff and pacing bookkeeping kept in the ShardGroup status so a restart
/// resumes it (see the status fields of the same names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProtocolStatus {
    /// The move budget's log, one entry per reconcile that moved shards.
    pub move_log: Vec<MoveLogEntry>,
    /// Optional moves the budget still allows in the window.
    pub move_budget_remaining: Option<u64>,
    /// When the eligible pod set last changed.
    pub last_pod_change: Option<Timestamp>,
    /// Digest of the eligible pod set.
    pub pod_set_digest: Option<String>,
    /// Pods seen terminating gracefully that hold revoking shards.
    pub graceful_pods: Vec<String>,
    /// Per pod: when its revokes were delivered (its annotation first seen
    /// listing them), oldest first.
    pub drain_deliveries: BTreeMap<String, Vec<Timestamp>>,
    /// When the oldest revoke in flight was published.
    pub oldest_revoke: Option<Timestamp>,
    /// Whether handoffs run without a lease table (weaker guarantee). Not
    /// persisted: recomputed from the spec on every plan.
    pub unfenced: bool,
}

impl ProtocolStatus {
    /// The bookkeeping stored in `status`.
    pub(crate) fn from_status(status: &ShardGroupStatus) -> Self {
        Self {
            move_log: status.move_log.clone(),
            move_budget_remaining: status.move_budget_remaining,
            last_pod_change: status.last_pod_change,
            pod_set_digest: status.pod_set_digest.clone(),
            graceful_pods: status.graceful_pods.clone(),
            drain_deliveries: super::clocks::remembered_deliveries(status),
            oldest_revoke: status.oldest_revoke,
            unfenced: false,
        }
    }
}
