//! The handoff step: the two-phase move protocol. It turns the engine's
//! owners into the per-shard records of the published document, given the
//! previous records (with their `state` and `handoff`), what was observed of
//! the pods and the lease table, and the observation's time.
//!
//! Per shard the protocol state is `Active{owner}`, `Revoking{owner, to,
//! since}` or `Pending`/`Complete`. Moving a shard from A to B first
//! publishes it in A's `revoking` list (and nowhere as active); only when
//! there is evidence that A let go is it published `active` on B, at a higher
//! epoch. Evidence, checked in this order ([`Evidence`]):
//!
//! 1. the kubelet's word (`pod_stopped`, with or without a lease table):
//!    every pod named A that may have read the shard has stopped, or never
//!    started. The pod object A (or, once it is gone, its final state in the
//!    memory of departed pods) shows every container `terminated` while
//!    terminating, which the kubelet reports only after it stopped them; or
//!    it never ran anything and cannot have started before the revoke (not
//!    bound to a node, or created after the revoke); and no earlier pod of
//!    the same name (a StatefulSet's pod recreated) can still run. A force
//!    deletion or a node that stopped reporting leaves a status that still
//!    says `running`: neither is ever this evidence;
//! 2. the lease table (scanned after the revoke) shows A no longer holds the
//!    lease: owner changed or cleared and `checkpointOwner` is not A;
//! 3. with a lease table: A's pod is gone from the API after a graceful
//!    deletion (A was seen terminating with a grace period above zero and not
//!    force-deleted since): the kubelet removes such a pod only after its
//!    containers stopped. A force deletion of a terminating pod removes the
//!    object at once and cannot be told apart, so this is trusted only where
//!    the lease fences a process that outlived its pod object;
//! 4. with a lease table: the drain timeout passed since the revoke AND A's
//!    lease expired (counter unchanged for the lease failover time);
//! 5. without a lease table (unfenced, see `docs/handoff.md`): the drain
//!    timeout passed since A's annotation was first seen listing the shard as
//!    revoking, or since the revoke when A's pod is gone.
//!
//! A failed lease read is never evidence. All the state this needs lives in
//! the published document (`state`, `handoff.to`, `handoff.since`) and the
//! status (`gracefulPods`, `drainStarted`), so a restarted operator resumes
//! every move where it was; only rule 1 also reads the operator's memory of
//! departed pods, and without it falls back to the others.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::observe::departed::{Departure, Departures};
use super::observe::{Containers, LeaseObservation, Observation, PodInfo};
use crate::crds::shard_group::MoveLogEntry;
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
    /// The kubelet reported the owner's containers stopped (or never
    /// started), and no earlier pod of its name can still run.
    PodStopped,
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
            Evidence::PodStopped => "pod_stopped",
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
    /// Per pod: when its annotation was first seen listing all its revoking shards.
    pub drain_started: BTreeMap<String, Timestamp>,
    /// When the oldest revoke in flight was published.
    pub oldest_revoke: Option<Timestamp>,
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
            last_pod_change: status.last_pod_change,
            pod_set_digest: status.pod_set_digest.clone(),
            graceful_pods: status.graceful_pods.clone(),
            drain_started: status.drain_started.clone(),
            oldest_revoke: status.oldest_revoke,
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
    pub drain_started: BTreeMap<String, Timestamp>,
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
        .collect();
    result.oldest_revoke = result
        .records
        .values()
        .filter_map(|r| r.handoff.as_ref())
        .map(|h| h.since)
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
            (ShardPhase::Revoking, Some(h)) => h.since,
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
        record.handoff = Some(Handoff { to: owner, since });
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
        if pod_stopped(pod.copied(), &self.obs.departed, from, since, now) {
            return Some(Evidence::PodStopped);
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
            Some(d) => Incarnation::of_departure(d),
            None => return false,
        },
    };
    latest.let_go(since)
        && earlier
            .iter()
            .all(|d| Incarnation::of_departure(d).let_go(since))
        && (latest.generated_name || departed.covers(latest.created, now))
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
    remembered: &BTreeMap<String, Timestamp>,
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
                .map(|h| h.since)
                .max();
            let clock = remembered
                .get(name)
                .copied()
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
    let now = obs.now;
    let mut shards: BTreeMap<String, ShardRecord> = revoking
        .into_iter()
        .map(|(id, owner)| {
            let record = ShardRecord {
                owner: Some(owner),
                state: ShardPhase::Revoking,
                handoff: Some(Handoff {
                    to: None,
                    since: now,
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

#[cfg(test)]
mod tests {
    //! Evidence `pod_stopped` through the real plan step: each case the
    //! kubelet's word proves (the handoff completes at once, long before any
    //! drain timeout or lease expiry), and each it must not be trusted for
    //! (nothing completes), with and without a lease table.

    use jiff::SignedDuration;

    use super::*;
    use crate::controller::observe::Published;
    use crate::controller::plan::{Decision, plan};
    use crate::controller::{Observation, TopologyObservation};
    use crate::crds::consumer_pool::CapacitySpec;
    use crate::crds::shard_group::{LeaseTableSpec, PoolRef, ShardSource, StaticSource};
    use crate::crds::{ConsumerPool, ConsumerPoolSpec, ShardGroup, ShardGroupSpec};
    use crate::lease::{LeaseSnapshot, LeaseTable};

    /// When pod `a` is deleted and its shards revoked.
    fn t0() -> Timestamp {
        "2026-11-21T12:00:00Z".parse().unwrap()
    }

    fn secs(s: i64) -> SignedDuration {
        SignedDuration::from_secs(s)
    }

    fn pod(name: &str) -> PodInfo {
        PodInfo {
            name: name.into(),
            uid: format!("uid-{name}"),
            selected: true,
            ready: true,
            ready_since: Some(t0() - secs(3_600)),
            node_name: Some("node-1".into()),
            containers: Containers::Running,
            created: Some(t0() - secs(3_600)),
            generated_name: true,
            ..Default::default()
        }
    }

    /// Pods `a` and `b` holding two shards each, settled an hour before t0
    /// (drain timeout 30 s, lease failover 10 s, lease table or not).
    fn settled(lease_table: bool) -> Observation {
        let spec = ShardGroupSpec {
            pool_ref: PoolRef {
                name: "consumers".into(),
            },
            source: ShardSource {
                kinesis: None,
                static_source: Some(StaticSource {
                    count: 4,
                    name_template: "orders-{index}".into(),
                }),
            },
            lease_table: lease_table.then(|| LeaseTableSpec {
                table_name: "orders-app".into(),
                region: None,
                endpoint: None,
            }),
            consumer_name: None,
            standbys: 0,
            balance: Default::default(),
            handoff: crate::crds::shard_group::HandoffSpec {
                drain_timeout: "30s".into(),
                lease_failover: "10s".into(),
            },
            rebalance: Default::default(),
            output: Default::default(),
        };
        let mut group = ShardGroup::new("orders", spec);
        group.metadata.namespace = Some("prod".into());
        group.metadata.generation = Some(1);
        let mut pool = ConsumerPool::new(
            "consumers",
            ConsumerPoolSpec {
                selector: Default::default(),
                min_ready_seconds: 0,
                capacity: CapacitySpec::default(),
                max_shards_per_pod: None,
                topology_keys: vec![],
            },
        );
        pool.metadata.namespace = Some("prod".into());
        let source = crate::source::StaticSource::new(StaticSource {
            count: 4,
            name_template: "orders-{index}".into(),
        });
        let mut obs = Observation {
            group,
            pool: Some(pool),
            pods: vec![pod("a"), pod("b")],
            topology: TopologyObservation {
                source: "static:4".into(),
                last_good: Some(source.topology()),
                read_at: Some(t0() - secs(3_600)),
                ..Default::default()
            },
            published: Published::Missing,
            leases: LeaseObservation::unread_for(lease_table),
            departed: Departures::default(),
            now: t0() - secs(3_600),
        };
        obs = settle(obs);
        obs.leases = leases(&obs, lease_table);
        obs
    }

    impl LeaseObservation {
        fn unread_for(lease_table: bool) -> Self {
            if lease_table {
                LeaseObservation::Failed("not read".into())
            } else {
                LeaseObservation::NotConfigured
            }
        }
    }

    /// The lease table with every owner still holding and renewing its
    /// leases (a process that let go would have released them): only the
    /// kubelet's word can complete a handoff now.
    fn leases(obs: &Observation, lease_table: bool) -> LeaseObservation {
        if !lease_table {
            return LeaseObservation::NotConfigured;
        }
        let doc = obs.published.document().expect("published");
        let leases = doc
            .shards
            .iter()
            .map(|(id, r)| {
                let snapshot = LeaseSnapshot {
                    shard_id: id.clone(),
                    owner: r.owner.clone(),
                    counter: 7,
                    counter_changed_at: obs.now,
                    checkpoint: None,
                    sequence_number: None,
                    complete: false,
                    parents: Vec::new(),
                    children: Vec::new(),
                    checkpoint_owner: None,
                };
                (id.clone(), snapshot)
            })
            .collect();
        LeaseObservation::Read(LeaseTable {
            leases,
            scanned_at: Some(obs.now),
            items: doc.shards.len(),
        })
    }

    fn settle(mut obs: Observation) -> Observation {
        let decision = plan(&obs);
        if let Some(doc) = decision.document_write.clone() {
            obs.published = Published::from(doc);
        }
        for write in &decision.annotation_writes {
            if let Some(pod) = obs.pods.iter_mut().find(|p| p.name == write.pod) {
                pod.annotation = write.view.as_ref().map(|v| v.to_annotation());
            }
        }
        obs.group.status = Some(decision.status);
        obs
    }

    /// `a` gets its deletion timestamp at t0 (status still running): its two
    /// shards are revoked at t0. Returns the observation one second later.
    fn a_revoked(lease_table: bool) -> Observation {
        let mut obs = settled(lease_table);
        obs.now = t0();
        obs.pods[0].deletion_timestamp = Some(t0());
        obs.pods[0].deletion_grace_seconds = Some(30);
        let mut obs = settle(obs);
        let revoking = obs
            .published
            .document()
            .unwrap()
            .shards
            .values()
            .filter(|r| r.state == ShardPhase::Revoking)
            .count();
        assert_eq!(revoking, 2, "a's shards are revoked at t0");
        obs.now = t0() + secs(1);
        obs.leases = leases(&obs, lease_table);
        obs
    }

    /// `a` turns NotReady at t0 (no deletion seen): its two shards are
    /// revoked at t0. Returns the observation one second later.
    fn a_not_ready(lease_table: bool) -> Observation {
        let mut obs = settled(lease_table);
        obs.now = t0();
        obs.pods[0].ready = false;
        let mut obs = settle(obs);
        obs.now = t0() + secs(1);
        obs.leases = leases(&obs, lease_table);
        obs
    }

    fn evidence(decision: &Decision) -> Vec<Evidence> {
        decision.handoffs.iter().map(|h| h.evidence).collect()
    }

    fn departure(containers: Containers) -> Departure {
        Departure {
            uid: "uid-a".into(),
            at: t0() + secs(1),
            containers,
            scheduled: true,
            created: Some(t0() - secs(3_600)),
            generated_name: true,
        }
    }

    /// The memory of a watch running for a day that saw `departures` of `a`.
    fn remembered(departures: Vec<Departure>) -> Departures {
        Departures {
            watched_since: Some(t0() - secs(86_400)),
            pods: BTreeMap::from([("a".to_owned(), departures)]),
            ..Default::default()
        }
    }

    /// Both modes: with a lease table (whose leases `a` still holds) and
    /// without one (the drain timeout is 29 s away).
    fn both(check: impl Fn(bool)) {
        check(true);
        check(false);
    }

    #[test]
    fn terminating_with_every_container_terminated_is_pod_stopped() {
        both(|lease_table| {
            let mut obs = a_revoked(lease_table);
            obs.pods[0].containers = Containers::Stopped;
            let d = plan(&obs);
            assert_eq!(evidence(&d), [Evidence::PodStopped; 2], "{lease_table}");
            assert!(d.handoffs.iter().all(|h| h.to.as_deref() == Some("b")));
            assert_eq!(d.handoffs[0].duration, Duration::from_secs(1));
            // Even while the lease table cannot be read.
            if lease_table {
                obs.leases = LeaseObservation::Failed("throttled".into());
                assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
            }
        });
    }

    #[test]
    fn a_pod_that_never_ran_is_pod_stopped() {
        both(|lease_table| {
            // Not bound to a node: no kubelet ever ran anything of it.
            let mut obs = a_revoked(lease_table);
            obs.pods[0].containers = Containers::NeverRan;
            obs.pods[0].node_name = None;
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
            // Bound, but created after the revoke: whatever it started saw
            // the revoke.
            obs.pods[0].node_name = Some("node-1".into());
            obs.pods[0].created = Some(t0() + secs(1));
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        });
    }

    #[test]
    fn a_bound_pod_that_reported_nothing_since_before_the_revoke_is_not() {
        both(|lease_table| {
            // Its kubelet may have started it and not reported it yet.
            let mut obs = a_revoked(lease_table);
            obs.pods[0].containers = Containers::NeverRan;
            assert_eq!(evidence(&plan(&obs)), []);
        });
    }

    #[test]
    fn gone_with_a_stopped_final_state_is_pod_stopped() {
        both(|lease_table| {
            let mut obs = a_revoked(lease_table);
            obs.pods.remove(0);
            obs.departed = remembered(vec![departure(Containers::Stopped)]);
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
            // So is one that never ran and was never bound to a node.
            let mut never = departure(Containers::NeverRan);
            never.scheduled = false;
            obs.departed = remembered(vec![never]);
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        });
    }

    #[test]
    fn gone_after_a_force_deletion_waits_for_the_old_rules() {
        both(|lease_table| {
            // Force-deleted while running (never seen terminating): the
            // final status still says running.
            let mut obs = a_not_ready(lease_table);
            obs.pods.remove(0);
            obs.departed = remembered(vec![departure(Containers::Running)]);
            assert_eq!(evidence(&plan(&obs)), [], "{lease_table}");
            // The old rules still apply: with a lease table the drain
            // timeout and the lease expired; without one the drain timeout
            // since the revoke.
            obs.now = t0() + secs(30);
            let expected = if lease_table {
                obs.leases = leases(&obs, lease_table);
                if let LeaseObservation::Read(table) = &mut obs.leases {
                    for lease in table.leases.values_mut() {
                        lease.counter_changed_at = t0();
                    }
                }
                Evidence::LeaseExpired
            } else {
                Evidence::DrainTimeout
            };
            assert_eq!(evidence(&plan(&obs)), [expected; 2]);
        });
    }

    #[test]
    fn gone_unseen_is_no_evidence() {
        both(|lease_table| {
            // A restarted operator: the departure happened before its watch
            // listed the pods, so nothing says how the pod left.
            let mut obs = a_not_ready(lease_table);
            obs.pods.remove(0);
            obs.departed = Departures {
                watched_since: Some(t0() + secs(1)),
                ..Default::default()
            };
            assert_eq!(evidence(&plan(&obs)), []);
            // Nor does a departure the memory already forgot.
            obs.departed = remembered(Vec::new());
            assert_eq!(evidence(&plan(&obs)), []);
        });
    }

    #[test]
    fn a_node_that_stopped_reporting_is_no_evidence() {
        both(|lease_table| {
            // Terminating, and its status still says running (its kubelet
            // cannot reach the API, or has not stopped the process yet).
            let mut obs = a_revoked(lease_table);
            obs.pods[0].ready = false;
            obs.now = t0() + secs(29);
            obs.leases = leases(&obs, lease_table);
            assert_eq!(evidence(&plan(&obs)), []);
            // A restarting container is not stopped either: only a
            // terminating pod's terminated containers are.
            let mut restarting = a_revoked(lease_table);
            restarting.pods[0].deletion_timestamp = None;
            restarting.pods[0].ready = false;
            restarting.pods[0].containers = Containers::Running;
            assert_eq!(evidence(&plan(&restarting)), []);
        });
    }

    #[test]
    fn an_earlier_pod_of_the_same_name_that_may_still_run_blocks_it() {
        both(|lease_table| {
            // A StatefulSet pod force-deleted while running, recreated under
            // its name, not scheduled yet: the new pod never ran, the old
            // process may still read.
            let mut obs = a_revoked(lease_table);
            obs.pods[0] = PodInfo {
                uid: "uid-a-2".into(),
                ready: false,
                ready_since: None,
                node_name: None,
                containers: Containers::NeverRan,
                created: Some(t0() + secs(1)),
                generated_name: false,
                ..pod("a")
            };
            let mut old = departure(Containers::Running);
            old.generated_name = false;
            obs.departed = remembered(vec![old.clone()]);
            assert_eq!(evidence(&plan(&obs)), []);
            // The same after a graceful deletion the kubelet confirmed.
            old.containers = Containers::Stopped;
            obs.departed = remembered(vec![old]);
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        });
    }

    #[test]
    fn a_reused_name_needs_a_memory_that_saw_every_recent_departure() {
        both(|lease_table| {
            // The StatefulSet pod again, its predecessor's departure not
            // remembered: a watch that started a minute ago may have missed
            // it; one that watched longer than its retention did not (or
            // the departure was long enough ago to be over).
            let mut obs = a_revoked(lease_table);
            obs.pods[0].containers = Containers::Stopped;
            obs.pods[0].generated_name = false;
            obs.pods[0].created = Some(t0() - secs(60));
            obs.departed.watched_since = Some(t0() - secs(60));
            assert_eq!(evidence(&plan(&obs)), []);
            obs.departed.watched_since = None;
            assert_eq!(evidence(&plan(&obs)), []);
            obs.departed.watched_since = Some(t0() - secs(601));
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
            obs.departed.watched_since = None;
            obs.pods[0].created = Some(t0() - secs(601));
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
            // A generated name is never reused: no memory needed.
            obs.pods[0].created = Some(t0() - secs(60));
            obs.pods[0].generated_name = true;
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        });
    }

    #[test]
    fn pod_stopped_has_its_metrics_label() {
        assert_eq!(Evidence::PodStopped.label(), "pod_stopped");
    }
}
