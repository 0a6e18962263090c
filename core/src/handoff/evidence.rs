//! Evidence that a revoked owner let a shard go, in the order the protocol
//! checks it (see the list in `mod.rs`): the kubelet's word
//! (`pod_stopped`, with the pod-name reuse rules), the owner's own word
//! (`release_acked`, with the same rules), the lease table (released,
//! or expired after the drain timeout), a graceful deletion with a lease
//! table, and the unfenced drain timeout. It also notes when a timeout may
//! complete a revoke later, so the reconcile looks again then.

use jiff::Timestamp;

use super::clocks::{add, delivered_at};
use super::step_context::{Ctx, Evidence, HandoffResult, Revoke};
use crate::departures::{Departure, Departures};
use crate::observation::{Containers, LeaseObservation, PodInfo, ReleaseAck};

impl Ctx<'_> {
    /// `from`'s lease counter of `shard` in this reconcile's lease scan (the
    /// one a revoke published now records), when `from` holds the lease.
    pub(super) fn lease_counter(&self, from: &str, shard: &str) -> Option<u64> {
        match &self.obs.leases {
            LeaseObservation::Read(table) => table
                .get(shard)
                .filter(|lease| lease.owner.as_deref() == Some(from))
                .map(|lease| lease.counter),
            LeaseObservation::Failed(_) | LeaseObservation::NotConfigured => None,
        }
    }

    /// The checkpoint `from` acknowledged with its release of `shard`,
    /// when that acknowledgement counts for `revoke` (see
    /// [`release_acked`]): it goes to the next owner whichever evidence
    /// completed the handoff — a pod that acknowledged and then exited
    /// may be seen stopped in the same reconcile, and the kubelet's word
    /// (checked first) carries no checkpoint.
    pub(super) fn acked_checkpoint(&self, from: &str, shard: &str, revoke: Revoke) -> Option<&str> {
        let ack = self.obs.releases.acks.get(shard)?;
        let pod = self.pods.get(from).copied();
        release_acked(ack, pod, &self.obs.departed, from, revoke)
            .then_some(ack.checkpoint.as_deref())
            .flatten()
    }

    /// Evidence that `from` let `shard` go, revoked by `revoke`; notes in
    /// `result.next_check` when a timeout may complete it later.
    pub(super) fn evidence(
        &self,
        from: &str,
        shard: &str,
        revoke: Revoke,
        result: &mut HandoffResult,
    ) -> Option<Evidence> {
        let now = self.obs.now;
        let since = revoke.since;
        let pod = self.pods.get(from);
        if pod_stopped(pod.copied(), &self.obs.departed, from, since, now) {
            return Some(Evidence::PodStopped);
        }
        if let Some(ack) = self.obs.releases.acks.get(shard)
            && release_acked(ack, pod.copied(), &self.obs.departed, from, revoke)
        {
            return Some(Evidence::ReleaseAcked);
        }
        // A pod gone after a graceful deletion stopped its containers —
        // unless it was force-deleted while terminating: the API then removes
        // the object at once, still showing the graceful grace period, and
        // the process runs until the kubelet kills it (or its node heals).
        // The operator cannot tell the two apart, so a gone pod is evidence
        // only where the lease fences such a survivor; without a lease table
        // its shards wait for the drain timeout since the revoke (below).
        let fenced = !matches!(self.obs.leases, LeaseObservation::NotConfigured);
        if fenced && pod.is_none() && self.graceful.contains(from) {
            return Some(Evidence::PodGone);
        }
        let drain_due = add(since, self.timing.drain_timeout);
        match &self.obs.leases {
            LeaseObservation::Read(table) => {
                // A scan from before the revoke says nothing about letting go.
                if table.scanned_at.is_none_or(|at| at < since) {
                    return None;
                }
                let Some(lease) = table.get(shard) else {
                    return Some(Evidence::LeaseReleased);
                };
                if lease.owner.as_deref() != Some(from)
                    && lease.checkpoint_owner.as_deref() != Some(from)
                {
                    return Some(Evidence::LeaseReleased);
                }
                // The counter the revoke recorded, unchanged: not renewed
                // since the revoke, whenever this operator first saw it.
                let changed_at = match revoke.lease_counter {
                    Some(counter) if counter == lease.counter => {
                        lease.counter_changed_at.min(since)
                    }
                    _ => lease.counter_changed_at,
                };
                let expiry = add(changed_at, self.timing.lease_failover);
                let due = drain_due.max(expiry);
                if now >= due {
                    return Some(Evidence::LeaseExpired);
                }
                note_due(result, now, due);
                None
            }
            LeaseObservation::Failed(_) => None,
            LeaseObservation::NotConfigured => {
                let delivered = self.drain.get(from).and_then(|d| delivered_at(d, since));
                let clock = match (pod, delivered) {
                    // Its reader was told when its annotation listed the
                    // revoke, whatever its object did since (the revoke's
                    // publication can be long before: the annotation
                    // writes may have failed for a while).
                    (_, Some(delivered)) => delivered,
                    (Some(_), None) => return None,
                    // Gone before the revoke reached it: its process never
                    // learned of it and reads on until the kubelet kills it
                    // (a force deletion: seconds later), so the drain counts
                    // from when it left the API.
                    (None, None) => match left_api_by(&self.obs.departed, from) {
                        Some(left) => left.max(since),
                        // A relist runs: once it ends, the drain counts
                        // from then at the earliest.
                        None => {
                            note_due(result, now, add(now, self.timing.drain_timeout));
                            return None;
                        }
                    },
                };
                let due = add(clock, self.timing.drain_timeout);
                if now >= due {
                    return Some(Evidence::DrainTimeout);
                }
                note_due(result, now, due);
                None
            }
        }
    }
}

/// When pod `from`, absent from the API now, left it at the latest, as far
/// as the departure memory can tell: its remembered departure, if the
/// memory has watched since then (no later pod of the name can have left
/// unseen: rule 4 of [`pod_stopped`]); else the start of the memory's
/// watch (its last list: a pod that left during a relist, or before the
/// operator started, left by then). `None` while a relist runs: nothing
/// bounds it yet. `Timestamp::MIN` without any memory (a caller without a
/// pod watch): nothing to go by but the revoke.
fn left_api_by(departed: &Departures, from: &str) -> Option<Timestamp> {
    let Some(watched_since) = departed.watched_since else {
        return (!departed.relisting).then_some(Timestamp::MIN);
    };
    let seen = departed
        .pods
        .get(from)
        .and_then(|left| left.last())
        .map(|left| left.at)
        .filter(|at| *at >= watched_since);
    Some(seen.unwrap_or(watched_since))
}

/// One pod object the kubelet's word is about: the pod as it is now, or as
/// it was when it left the API.
struct Incarnation {
    containers: Containers,
    scheduled: bool,
    created: Option<Timestamp>,
    generated_name: bool,
}

impl Incarnation {
    fn of_pod(pod: &PodInfo) -> Self {
        Self {
            containers: pod.containers,
            scheduled: pod.node_name.as_deref().is_some_and(|n| !n.is_empty()),
            created: pod.created,
            generated_name: pod.generated_name,
        }
    }

    fn of_departure(d: &Departure) -> Self {
        Self {
            containers: d.containers,
            scheduled: d.scheduled,
            created: d.created,
            generated_name: d.generated_name,
        }
    }

    /// Whether no process of this pod can read a shard revoked at `since`:
    /// its containers are stopped for good, or it never ran anything and
    /// nothing of it can have started before the revoke (a status says
    /// "never ran" also while the kubelet has not reported a start yet: a
    /// pod bound to a node before the revoke may have started then).
    fn let_go(&self, since: Timestamp) -> bool {
        match self.containers {
            Containers::Stopped => true,
            Containers::NeverRan => !self.scheduled || self.created.is_some_and(|c| c > since),
            Containers::Running => false,
        }
    }
}

/// Evidence `pod_stopped`: the kubelet's word that nothing named `from`
/// reads a shard revoked at `since`. `pod` is the pod object of that name,
/// if any; `departed` what the pod watch remembers of the pods that left.
///
/// 1. The latest pod of that name let go ([`Incarnation::let_go`]): the
///    object, or when it is gone the final state of its latest remembered
///    departure (a force deletion leaves one that still says `running`; a
///    departure not seen, e.g. before a restart, is no evidence at all).
/// 2. Every remembered earlier pod of that name let go too: a StatefulSet
///    recreates a force-deleted pod under its name while the old process
///    may still run (the published document names pods, not uids).
/// 3. No earlier pod of that name can have left unseen: its name was
///    generated (never reused), or the memory saw every departure of the
///    retention period (or the pod is older than that).
/// 4. With no object of that name, no later pod of it either: the memory
///    has watched since the latest remembered departure. A StatefulSet
///    recreates the pod under its name, and the new one, force-deleted
///    while the watch relisted, leaves no departure and may still run;
///    the departure remembered is its predecessor's (rule 3's "older than
///    the retention" speaks of pods before the latest, not after it).
fn pod_stopped(
    pod: Option<&PodInfo>,
    departed: &Departures,
    from: &str,
    since: Timestamp,
    now: Timestamp,
) -> bool {
    let earlier = departed.pods.get(from).map_or(&[][..], Vec::as_slice);
    let latest = match pod {
        Some(pod) => Incarnation::of_pod(pod),
        None => match earlier.iter().max_by_key(|d| d.at) {
            Some(d) => {
                let incarnation = Incarnation::of_departure(d);
                let watched_since_it = departed.watched_since.is_some_and(|w| w <= d.at);
                if !incarnation.generated_name && !watched_since_it {
                    return false;
                }
                incarnation
            }
            None => return false,
        },
    };
    latest.let_go(since)
        && earlier
            .iter()
            .all(|d| Incarnation::of_departure(d).let_go(since))
        && (latest.generated_name || departed.covers(latest.created, now))
}

/// Evidence `release_acked`: the owner's word that it stopped reading a
/// shard revoked by `revoke`.
///
/// 1. The acknowledgement is `from`'s, at the revoke's epoch or later (an
///    older one is about an earlier revoke of the shard).
/// 2. It speaks for one pod object (its uid, from the bound token): that
///    must be the pod of that name now, when there is one (a pod recreated
///    under the name is another process).
/// 3. Every remembered other pod of that name let go (a force-deleted
///    StatefulSet pod may still run beside its replacement, and the
///    document names pods, not uids).
///
/// Unlike `pod_stopped`, it does not also need a memory that saw every
/// departure: an earlier pod of the name that left unseen and still runs is
/// a hazard the drain timeout it replaces does not cover either (without a
/// lease table), and one the lease fences (with one). The kubelet's word is
/// about the name, so it must rule out every pod of it; the acknowledgement
/// is about one process, which said it let go.
fn release_acked(
    ack: &ReleaseAck,
    pod: Option<&PodInfo>,
    departed: &Departures,
    from: &str,
    revoke: Revoke,
) -> bool {
    if ack.pod != from || ack.epoch < revoke.epoch {
        return false;
    }
    if pod.is_some_and(|pod| pod.uid != ack.uid) {
        return false;
    }
    departed
        .pods
        .get(from)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter(|d| d.uid != ack.uid)
        .all(|d| Incarnation::of_departure(d).let_go(revoke.since))
}

fn note_due(result: &mut HandoffResult, now: Timestamp, due: Timestamp) {
    let wait = due.duration_since(now).unsigned_abs();
    result.next_check = Some(result.next_check.map_or(wait, |w| w.min(wait)));
}
