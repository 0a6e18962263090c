//! The timing rules of the protocol and the clocks the status keeps for it:
//! the spec's drain timeout and lease failover, the pods known to be
//! terminating gracefully, and each revoked pod's drain clock (when its
//! annotation was first seen listing all its revoking shards, or, for a
//! group that publishes no annotations, when its latest revoke was
//! published in the document).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::crds::{AssignmentDocument, PodView};
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

/// Drain clocks: per pod that holds revoking shards in the published
/// document, when its annotation was first seen listing all of them as
/// revoking (kept from then on, while no revoke is added, even while the
/// pod's object is away or new). A pod whose annotation misses one has no
/// clock (yet). Without
/// annotations (`annotations` false) the document is the only delivery
/// there is: the clock starts when the latest revoke was published in it.
pub(super) fn drain_clocks(
    remembered: &BTreeMap<String, Timestamp>,
    published: Option<&AssignmentDocument>,
    pods: &BTreeMap<&str, &PodInfo>,
    annotations: bool,
    now: Timestamp,
) -> BTreeMap<String, Timestamp> {
    let Some(doc) = published else {
        return BTreeMap::new();
    };
    let mut clocks = BTreeMap::new();
    for (name, entry) in &doc.pods {
        if entry.revoking.is_empty() {
            continue;
        }
        // A clock set before one of the revokes was published does not
        // cover it: the pod's list grew since, so its clock starts again.
        let latest_revoke = entry
            .revoking
            .iter()
            .filter_map(|s| doc.shards.get(s)?.handoff.as_ref())
            .map(|h| h.since)
            .max();
        if !annotations {
            clocks.insert(
                name.clone(),
                latest_revoke.filter(|r| *r <= now).unwrap_or(now),
            );
            continue;
        }
        // Once the pod's annotation listed every revoke, its reader was
        // told: the clock runs from then, whatever the pod's object does
        // next. A pod deleted and created again under its name (a
        // StatefulSet's) is absent for a moment and then carries a fresh
        // annotation; forgetting the clock there restarted it when the new
        // pod's annotation was written, so the old reader's drain timeout
        // ran late by the whole gap.
        if let Some(clock) = remembered
            .get(name)
            .copied()
            .filter(|t| latest_revoke.is_none_or(|r| *t >= r) && *t <= now)
        {
            clocks.insert(name.clone(), clock);
            continue;
        }
        let Some(pod) = pods.get(name.as_str()) else {
            continue;
        };
        let view = pod
            .annotation
            .as_deref()
            .and_then(|a| PodView::from_annotation(a).ok());
        let delivered = view.is_some_and(|v| {
            entry
                .revoking
                .iter()
                .all(|s| v.revoking.contains(s) && !v.active.contains(s))
        });
        if delivered {
            clocks.insert(name.clone(), now);
        }
    }
    clocks
}
