//! The timing rules of the protocol and the clocks the status keeps for it:
//! the spec's drain timeout and lease failover, the pods known to be
//! terminating gracefully, and each revoke's drain clock (when its pod's
//! annotation was first seen listing it, or, for a group that publishes no
//! annotations, when it was published in the document).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::crds::{AssignmentDocument, PodView, ShardGroupStatus};
use crate::observation::PodInfo;

/// The timing rules of the protocol, from the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// `handoff.drainTimeout`.
    pub drain_timeout: Duration,
    /// `handoff.leaseFailover`.
    pub lease_failover: Duration,
}

/// `t + d`, saturating at the end of time.
pub(super) fn add(t: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Pods known to be terminating gracefully: those remembered in status (not
/// force-deleted since) plus those terminating now with a grace period above
/// zero. A pod seen with grace period 0 was force-deleted: it may still run.
pub(super) fn graceful_pods(remembered: &[String], pods: &[PodInfo]) -> BTreeSet<String> {
    let mut set: BTreeSet<String> = remembered.iter().cloned().collect();
    for pod in pods {
        match (pod.deletion_timestamp, pod.deletion_grace_seconds) {
            (Some(_), Some(grace)) if grace > 0 => {
                set.insert(pod.name.clone());
            }
            (Some(_), Some(_)) => {
                set.remove(&pod.name);
            }
            // A deletion timestamp without a grace period is the default grace.
            (Some(_), None) => {
                set.insert(pod.name.clone());
            }
            (None, _) => {
                // Not terminating (a pod of the same name came back): forget it.
                set.remove(&pod.name);
            }
        }
    }
    set
}

/// Per pod holding revoking shards: the times its revokes were delivered
/// (oldest first). A revoke's drain timeout counts from the first of them
/// at or after its publication ([`delivered_at`]).
pub(super) type Deliveries = BTreeMap<String, Vec<Timestamp>>;

/// The drain deliveries the status kept; a status written before they were
/// kept has each pod's one clock (`drainStarted`), which covered every
/// revoke of the pod.
pub(super) fn remembered_deliveries(status: &ShardGroupStatus) -> Deliveries {
    let mut deliveries = status.drain_deliveries.clone();
    for (pod, started) in &status.drain_started {
        deliveries
            .entry(pod.clone())
            .or_insert_with(|| vec![*started]);
    }
    deliveries
}

/// When the revoke published at `since` to a pod with `deliveries` reached
/// its reader: the first delivery at or after it; `None` while none did.
pub(super) fn delivered_at(deliveries: &[Timestamp], since: Timestamp) -> Option<Timestamp> {
    deliveries.iter().copied().find(|t| *t >= since)
}

/// Drain clocks: per pod that holds revoking shards in the published
/// document, each time its annotation was first seen listing every revoke
/// published before then (kept while a revoke in flight counts from it,
/// even while the pod's object is away or new). Each revoke counts from its
/// own delivery, so revokes added to a pod later do not start the older
/// ones' clocks again: a pod given a revoke every few seconds (throughput
/// rebalancing, a move budget handing out its moves) would otherwise never
/// reach a drain timeout. Without annotations (`annotations` false) the
/// document is the only delivery there is: a revoke is delivered when it is
/// published in it. `remembered` is what the status kept.
pub(super) fn drain_clocks(
    remembered: &Deliveries,
    published: Option<&AssignmentDocument>,
    pods: &BTreeMap<&str, &PodInfo>,
    annotations: bool,
    now: Timestamp,
) -> Deliveries {
    let Some(doc) = published else {
        return BTreeMap::new();
    };
    let mut clocks = BTreeMap::new();
    for (name, entry) in &doc.pods {
        if entry.revoking.is_empty() {
            continue;
        }
        let mut published_at: Vec<Timestamp> = entry
            .revoking
            .iter()
            .filter_map(|s| doc.shards.get(s)?.handoff.as_ref())
            .map(|h| h.since.min(now))
            .collect();
        published_at.sort_unstable();
        published_at.dedup();
        if !annotations {
            clocks.insert(name.clone(), published_at);
            continue;
        }
        let mut deliveries: Vec<Timestamp> = remembered
            .get(name)
            .map(|list| list.iter().copied().filter(|t| *t <= now).collect())
            .unwrap_or_default();
        // Once the pod's annotation listed a revoke, its reader was told:
        // that revoke's clock runs from then, whatever the pod's object
        // does next. A pod deleted and created again under its name (a
        // StatefulSet's) is absent for a moment and then carries a fresh
        // annotation; forgetting the clock there restarted it when the new
        // pod's annotation was written, so the old reader's drain timeout
        // ran late by the whole gap.
        let latest = published_at.last().copied();
        let all_delivered = latest.is_some_and(|r| deliveries.last().is_some_and(|t| *t >= r));
        if !all_delivered && annotation_lists(pods.get(name.as_str()).copied(), &entry.revoking) {
            deliveries.push(now);
        }
        // Keep the deliveries some revoke in flight counts from.
        let mut kept: Vec<Timestamp> = published_at
            .iter()
            .filter_map(|since| delivered_at(&deliveries, *since))
            .collect();
        kept.dedup();
        if !kept.is_empty() {
            clocks.insert(name.clone(), kept);
        }
    }
    clocks
}

/// Whether `pod`'s annotation lists every shard of `revoking` as revoking
/// (and none of them active).
fn annotation_lists(pod: Option<&PodInfo>, revoking: &[String]) -> bool {
    let view = pod
        .and_then(|p| p.annotation.as_deref())
        .and_then(|a| PodView::from_annotation(a).ok());
    view.is_some_and(|v| {
        revoking
            .iter()
            .all(|s| v.revoking.contains(s) && !v.active.contains(s))
    })
}
