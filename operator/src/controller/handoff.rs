//! The handoff step: the two-phase move protocol. It turns the engine's
//! owners into the per-shard records of the published document, given the
//! previous records (with their `state` and `handoff`), what was observed of
//! the pods and the lease table, and the observation's time.
//!
//! Per shard the protocol state is `Active{owner}`, `Revoking{owner, to,
//! since}` or `Pending`/`Complete`. Moving a shard from A to B first
//! publishes it in A's `revoking` list (and nowhere as active); only when
//! there is evidence that A let go is it published `active` on B, at a higher
//! epoch. Evidence, strongest first ([`Evidence`]):
//!
//! 1. the lease table (scanned after the revoke) shows A no longer holds the
//!    lease: owner changed or cleared and `checkpointOwner` is not A;
//! 2. with a lease table: A's pod is gone from the API after a graceful
//!    deletion (A was seen terminating with a grace period above zero and not
//!    force-deleted since): the kubelet removes such a pod only after its
//!    containers stopped. A force deletion of a terminating pod removes the
//!    object at once and cannot be told apart, so this is trusted only where
//!    the lease fences a process that outlived its pod object;
//! 3. with a lease table: the drain timeout passed since the revoke AND A's
//!    lease expired (counter unchanged for the lease failover time);
//! 4. without a lease table (unfenced, see `docs/handoff.md`): the drain
//!    timeout passed since A's annotation was first seen listing the shard as
//!    revoking, or since the revoke when A's pod is gone.
//!
//! A failed lease read is never evidence. All the state this needs lives in
//! the published document (`state`, `handoff.to`, `handoff.since`) and the
//! status (`gracefulPods`, `drainStarted`), so a restarted operator resumes
//! every move where it was.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::observe::{LeaseObservation, Observation, PodInfo};
use crate::crds::{
    AssignmentDocument, Handoff, HashKeyRange, PodView, ShardGroupStatus, ShardPhase, ShardRecord,
};
use crate::engine::{PlanOutput, Previous, ShardState};
use crate::source::Topology;

/// Progressing reason while handoffs run without a lease table (the weaker,
/// unfenced guarantee: see `docs/handoff.md`).
pub const HANDOFF_UNFENCED: &str = "HandoffUnfenced";

/// Why a revoked owner is known to have let a shard go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Evidence {
    /// The lease table shows the owner no longer holds the shard's lease.
    LeaseReleased,
    /// The owner's pod is gone after a graceful deletion.
    PodGone,
    /// The drain timeout passed and the owner's lease expired.
    LeaseExpired,
    /// No lease table: the drain timeout passed (unfenced).
    DrainTimeout,
}

impl Evidence {
    /// Label for metrics and Events.
    pub fn label(self) -> &'static str {
        match self {
            Evidence::LeaseReleased => "lease_released",
            Evidence::PodGone => "pod_gone",
            Evidence::LeaseExpired => "lease_expired",
            Evidence::DrainTimeout => "drain_timeout",
        }
    }
}

/// A handoff that completed in this plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The shard.
    pub shard: String,
    /// Its previous owner.
    pub from: String,
    /// Its new owner (`None`: no eligible pod had room).
    pub to: Option<String>,
    /// What showed the previous owner let go.
    pub evidence: Evidence,
    /// Time from the revoke to now.
    pub duration: Duration,
}

/// Handoff and pacing bookkeeping kept in the ShardGroup status so a restart
/// resumes it (see the status fields of the same names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtocolStatus {
    /// The move budget's log, `<RFC 3339> <count>` per reconcile that moved shards.
    pub move_log: Vec<String>,
    /// Optional moves the budget still allows in the window.
    pub move_budget_remaining: Option<u64>,
    /// When the eligible pod set last changed.
    pub last_pod_change: Option<String>,
    /// Digest of the eligible pod set.
    pub pod_set_digest: Option<String>,
    /// Pods seen terminating gracefully that hold revoking shards.
    pub graceful_pods: Vec<String>,
    /// Per pod: when its annotation was first seen listing all its revoking shards.
    pub drain_started: BTreeMap<String, String>,
    /// When the oldest revoke in flight was published.
    pub oldest_revoke: Option<String>,
    /// Whether handoffs run without a lease table (weaker guarantee). Not
    /// persisted: recomputed from the spec on every plan.
    pub unfenced: bool,
}

impl ProtocolStatus {
    /// The bookkeeping stored in `status`.
    pub fn from_status(status: &ShardGroupStatus) -> Self {
        Self {
            move_log: status.move_log.clone(),
            move_budget_remaining: status.move_budget_remaining,
            last_pod_change: status.last_pod_change.clone(),
            pod_set_digest: status.pod_set_digest.clone(),
            graceful_pods: status.graceful_pods.clone(),
            drain_started: status.drain_started.clone(),
            oldest_revoke: status.oldest_revoke.clone(),
            unfenced: false,
        }
    }
}

/// The timing rules of the protocol, from the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `handoff.drainTimeout`.
    pub drain_timeout: Duration,
    /// `handoff.leaseFailover`.
    pub lease_failover: Duration,
}

/// The result of the handoff step.
#[derive(Debug, Clone, Default)]
pub struct HandoffResult {
    /// The shard records to publish.
    pub records: BTreeMap<String, ShardRecord>,
    /// Handoffs completed in this plan.
    pub completed: Vec<Completed>,
    /// Revokes started in this plan.
    pub revokes_started: u64,
    /// Pods seen terminating gracefully that still hold revoking shards.
    pub graceful_pods: Vec<String>,
    /// Drain clocks per pod holding revoking shards.
    pub drain_started: BTreeMap<String, String>,
    /// When the oldest revoke in flight was published.
    pub oldest_revoke: Option<Timestamp>,
    /// How long until some revoke in flight may complete by a timeout, if any.
    pub next_check: Option<Duration>,
}

/// The engine's view of the previous assignment: an `Active` shard is on its
/// owner; a `Revoking` shard is on its destination (so the engine neither
/// re-plans nor re-counts a move already decided), or unplaced when it has
/// none yet.
pub fn engine_previous(published: Option<&AssignmentDocument>) -> BTreeMap<String, Previous> {
    let Some(doc) = published else {
        return BTreeMap::new();
    };
    doc.shards
        .iter()
        .filter_map(|(id, r)| {
            let owner = match r.state {
                ShardPhase::Active => r.owner.clone()?,
                ShardPhase::Revoking => r.handoff.as_ref()?.to.clone()?,
                ShardPhase::Pending | ShardPhase::Complete => return None,
            };
            let prev = if r.standbys.is_empty() {
                Previous::Owner(owner)
            } else {
                Previous::Full {
                    owner,
                    standbys: r.standbys.clone(),
                }
            };
            Some((id.clone(), prev))
        })
        .collect()
}

/// Runs the handoff step for one plan.
pub fn step(
    obs: &Observation,
    timing: Timing,
    topology: &Topology,
    output: &PlanOutput,
    published: Option<&AssignmentDocument>,
) -> HandoffResult {
    let now = obs.now;
    let current = obs.group.status.clone().unwrap_or_default();
    let pods: BTreeMap<&str, &PodInfo> = obs.pods.iter().map(|p| (p.name.as_str(), p)).collect();
    let graceful = graceful_pods(&current.graceful_pods, &obs.pods);
    let drain = drain_clocks(&current.drain_started, published, &pods, now);
    let ctx = Ctx {
        obs,
        timing,
        pods: &pods,
        graceful: &graceful,
        drain: &drain,
    };
    let pending: BTreeSet<&str> = output.pending.iter().map(String::as_str).collect();
    let mut result = HandoffResult::default();
    for shard in &topology.shards {
        let mut record = ShardRecord {
            parents: shard.parents.clone(),
            hash_key_range: shard.hash_key_range.as_ref().map(|r| HashKeyRange {
                start: r.start.clone(),
                end: r.end.clone(),
            }),
            ..Default::default()
        };
        if shard.state == ShardState::Complete {
            record.state = ShardPhase::Complete;
        } else if pending.contains(shard.id.as_str()) {
            record.state = ShardPhase::Pending;
        } else {
            let target = output.assignment.get(&shard.id);
            let owner = target.and_then(|a| a.owner.clone());
            let standbys = target.map(|a| a.standbys.clone()).unwrap_or_default();
            let previous = published.and_then(|d| d.shards.get(&shard.id));
            ctx.place(
                &shard.id,
                previous,
                owner,
                standbys,
                &mut record,
                &mut result,
            );
        }
        result.records.insert(shard.id.clone(), record);
    }
    // Keep only the bookkeeping of pods that still hold revoking shards.
    let holders: BTreeSet<&str> = result
        .records
        .values()
        .filter(|r| r.state == ShardPhase::Revoking)
        .filter_map(|r| r.owner.as_deref())
        .collect();
    result.graceful_pods = graceful
        .into_iter()
        .filter(|p| holders.contains(p.as_str()))
        .collect();
    result.drain_started = drain
        .into_iter()
        .filter(|(p, _)| holders.contains(p.as_str()))
        .map(|(p, t)| (p, t.to_string()))
        .collect();
    result.oldest_revoke = result
        .records
        .values()
        .filter_map(|r| r.handoff.as_ref())
        .filter_map(|h| h.since.parse::<Timestamp>().ok())
        .min();
    result
}

struct Ctx<'a> {
    obs: &'a Observation,
    timing: Timing,
    pods: &'a BTreeMap<&'a str, &'a PodInfo>,
    graceful: &'a BTreeSet<String>,
    drain: &'a BTreeMap<String, Timestamp>,
}

impl Ctx<'_> {
    /// Fills `record` for a readable shard the engine placed on `owner`.
    fn place(
        &self,
        id: &str,
        previous: Option<&ShardRecord>,
        owner: Option<String>,
        standbys: Vec<String>,
        record: &mut ShardRecord,
        result: &mut HandoffResult,
    ) {
        let now = self.obs.now;
        let held = previous.and_then(|p| match p.state {
            ShardPhase::Active | ShardPhase::Revoking => p.owner.clone().map(|o| (o, p)),
            ShardPhase::Pending | ShardPhase::Complete => None,
        });
        let Some((from, prev)) = held else {
            // Nobody reads it: publish it active at once.
            record.state = ShardPhase::Active;
            record.owner = owner;
            record.standbys = standbys;
            return;
        };
        if owner.as_deref() == Some(from.as_str()) {
            // Stays (or a revoke is called off: its owner is wanted again and
            // nobody else was given the shard).
            record.state = ShardPhase::Active;
            record.owner = owner;
            record.standbys = standbys;
            return;
        }
        let since = match (&prev.state, &prev.handoff) {
            (ShardPhase::Revoking, Some(h)) => h.since.parse::<Timestamp>().unwrap_or(now),
            (ShardPhase::Revoking, None) => now,
            _ => {
                result.revokes_started += 1;
                now
            }
        };
        if prev.state == ShardPhase::Revoking
            && let Some(evidence) = self.evidence(&from, id, since, result)
        {
            result.completed.push(Completed {
                shard: id.to_owned(),
                from,
                to: owner.clone(),
                evidence,
                duration: now.duration_since(since).unsigned_abs(),
            });
            record.state = ShardPhase::Active;
            record.owner = owner;
            record.standbys = standbys;
            return;
        }
        record.state = ShardPhase::Revoking;
        record.standbys = standbys.into_iter().filter(|s| *s != from).collect();
        record.owner = Some(from);
        record.handoff = Some(Handoff {
            to: owner,
            since: since.to_string(),
        });
    }

    /// Evidence that `from` let `shard` go, revoked at `since`; notes in
    /// `result.next_check` when a timeout may complete it later.
    fn evidence(
        &self,
        from: &str,
        shard: &str,
        since: Timestamp,
        result: &mut HandoffResult,
    ) -> Option<Evidence> {
        let now = self.obs.now;
        let pod = self.pods.get(from);
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
                let expiry = add(lease.counter_changed_at, self.timing.lease_failover);
                let due = drain_due.max(expiry);
                if now >= due {
                    return Some(Evidence::LeaseExpired);
                }
                note_due(result, now, due);
                None
            }
            LeaseObservation::Failed(_) => None,
            LeaseObservation::NotConfigured => {
                let clock = if pod.is_some() {
                    *self.drain.get(from)?
                } else {
                    since
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

fn note_due(result: &mut HandoffResult, now: Timestamp, due: Timestamp) {
    let wait = due.duration_since(now).unsigned_abs();
    result.next_check = Some(result.next_check.map_or(wait, |w| w.min(wait)));
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Pods known to be terminating gracefully: those remembered in status (not
/// force-deleted since) plus those terminating now with a grace period above
/// zero. A pod seen with grace period 0 was force-deleted: it may still run.
fn graceful_pods(remembered: &[String], pods: &[PodInfo]) -> BTreeSet<String> {
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
/// revoking. A pod whose annotation misses one has no clock (yet).
fn drain_clocks(
    remembered: &BTreeMap<String, String>,
    published: Option<&AssignmentDocument>,
    pods: &BTreeMap<&str, &PodInfo>,
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
            // A clock set before one of the revokes was published does not
            // cover it: the pod's list grew since, so its clock starts now.
            let latest_revoke = entry
                .revoking
                .iter()
                .filter_map(|s| doc.shards.get(s)?.handoff.as_ref())
                .filter_map(|h| h.since.parse::<Timestamp>().ok())
                .max();
            let clock = remembered
                .get(name)
                .and_then(|t| t.parse::<Timestamp>().ok())
                .filter(|t| latest_revoke.is_none_or(|r| *t >= r) && *t <= now)
                .unwrap_or(now);
            clocks.insert(name.clone(), clock);
        }
    }
    clocks
}

/// When the published document is missing or unreadable, the assignment the
/// pods are acting on is rebuilt from their annotations, so a deleted or
/// corrupt ConfigMap never hands a shard to a second pod while its owner
/// still reads it. A shard listed `active` by several pods goes to the view
/// with the highest epoch; one only in `revoking` lists stays revoking (its
/// drain starts over). `None` when the document was read, or no pod carries
/// a view.
pub fn recover_previous(obs: &Observation) -> Option<AssignmentDocument> {
    if obs.published.document().is_some() {
        return None;
    }
    let mut active: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut revoking: BTreeMap<String, String> = BTreeMap::new();
    for pod in &obs.pods {
        let Some(view) = pod
            .annotation
            .as_deref()
            .and_then(|a| PodView::from_annotation(a).ok())
        else {
            continue;
        };
        for shard in view.active {
            let newer = active.get(&shard).is_none_or(|(e, _)| view.epoch > *e);
            if newer {
                active.insert(shard, (view.epoch, pod.name.clone()));
            }
        }
        for shard in view.revoking {
            revoking.entry(shard).or_insert_with(|| pod.name.clone());
        }
    }
    if active.is_empty() && revoking.is_empty() {
        return None;
    }
    let now = obs.now.to_string();
    let mut shards: BTreeMap<String, ShardRecord> = revoking
        .into_iter()
        .map(|(id, owner)| {
            let record = ShardRecord {
                owner: Some(owner),
                state: ShardPhase::Revoking,
                handoff: Some(Handoff {
                    to: None,
                    since: now.clone(),
                }),
                ..Default::default()
            };
            (id, record)
        })
        .collect();
    for (id, (_, owner)) in active {
        shards.insert(
            id,
            ShardRecord {
                owner: Some(owner),
                state: ShardPhase::Active,
                ..Default::default()
            },
        );
    }
    Some(AssignmentDocument::from_shards(
        obs.group.qualified_name(),
        0,
        shards,
        std::iter::empty(),
    ))
}
