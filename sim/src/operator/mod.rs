//! The simulated operator around the REAL controller core: each reconcile is
//! the core's cycle ([`shardring_core::cycle()`]), the one the operator runs,
//! with in-memory implementations of its two halves: `observe` builds the
//! [`Observation`](shardring_core::Observation) from the simulated API
//! objects, topology and lease table (with failed and stale reads), `apply`
//! writes to the simulated API server, with writes that fail or land late.
//! The cycle orders the writes (document, then annotations, then status) and
//! stops at the first failed one. Its memory (last good topology, previous
//! lease scan) is lost when it crashes; only the API objects survive.
//!
//! The document write carries the precondition of the real one: the version
//! of the ConfigMap the reconcile read (or "none yet" for the create). The
//! simulated API server refuses it, as a 409, when the ConfigMap changed
//! since; a refused write stops the apply like a failed one. A document write
//! the client gave up on lands at any later time (up to a minute, across any
//! number of reconciles, crashes and leader changes, or while a reconcile
//! runs between its read and its write) — only if its precondition still
//! holds. Late annotation and status writes (no resourceVersion precondition)
//! still land before the next reconcile.
//!
//! Its memory also holds the real memory of departed pods
//! ([`shardring_core::departed`]), fed with every pod object that
//! leaves the API while its watch runs: not while it is down (a crash starts
//! an empty one), nor during a watch gap (a relist).
//!
//! This module holds the operator process (its memory, crashes, watch gaps)
//! and its reconcile; `faults` the fault probabilities and counts,
//! `observe` the observe half, `apply` the apply half and the simulated API
//! server's writes.

mod apply;
mod faults;
mod observe;

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use crate::crds::shard_group::{KinesisSource, ShardSource};
use crate::crds::{AssignmentDocument, ConsumerPool, ShardGroup, ShardGroupStatus, fixtures};
use crate::rng::Rng;
use crate::world::{Ms, SimPod, World};
use shardring_core::cycle::{self, cycle};
use shardring_core::departed::{CAPACITY, Departed};
use shardring_core::leases::LeaseTable;
use shardring_core::load::{LoadBook, LoadObservation};
use shardring_core::observation::ReleaseAck;
use shardring_core::plan::{Decision, PlanMemory};
use shardring_core::retry::Failures;
use shardring_core::topology::Topology;

use self::apply::Write;
pub use self::apply::WriteError;
pub use self::faults::{FaultCounts, Faults};
pub use self::observe::{departure_of, pod_infos};

/// How long the simulated operator remembers departed pods (shorter than
/// the real operator's, so runs of a few simulated minutes see it expire).
pub const DEPARTED_RETENTION_MS: Ms = 60_000;

/// The API server's objects plus the operator process.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The ShardGroup (spec; its status is `status`).
    pub group: ShardGroup,
    /// The pool.
    pub pool: ConsumerPool,
    /// The published document (ConfigMap).
    pub doc: Option<AssignmentDocument>,
    /// The ConfigMap's resourceVersion: bumped by every document write that lands.
    pub doc_version: u64,
    /// The ShardGroup status.
    pub status: Option<ShardGroupStatus>,
    late: Vec<(Ms, Write)>,
    last_good: Option<(Topology, Ms)>,
    lease_prev: Option<LeaseTable>,
    /// Not running until then (crashed, a new leader takes over).
    pub down_until: Ms,
    /// Next reconcile.
    pub next_reconcile: Ms,
    /// Fault probabilities.
    pub faults: Faults,
    /// Fault counts.
    pub fired: FaultCounts,
    /// Handoff durations (ms) by evidence label.
    pub handoffs: Vec<(&'static str, u64)>,
    /// Owner changes of active shards.
    pub moves: u64,
    last_owner: BTreeMap<String, String>,
    /// The memory of departed pods (lost in a crash).
    pub departed: Departed,
    /// The release acknowledgements the endpoint holds, unvalidated: the
    /// core's rule alone must keep them safe (lost in a crash).
    pub releases: BTreeMap<String, ReleaseAck>,
    /// The pod watch is relisting until then: departures are not seen.
    watch_gap_until: Option<Ms>,
    /// A late document write landed while a reconcile ran: its ConfigMap
    /// watch event wakes the next one.
    landed_during_reconcile: bool,
    /// Failed reconciles in a row: the runtime's retry rule
    /// ([`shardring_core::retry`]) schedules the next one from them.
    failures: Failures,
    /// The latest time anything kept the operator from doing its part on
    /// time: it was down, a write failed, landed late or was refused (until
    /// the next clean reconcile: its retries back off), a read failed or was
    /// stale, its pod watch relisted, a node was cut off, or its plan was
    /// blocked (no eligible pod to take a shard, no topology). The bound on
    /// a revoke counts from the revoke or from this, whichever is later
    /// (`crate::revokes`).
    pub last_fault: Ms,
    /// The last plan was blocked because no pod was eligible
    /// (`NoReadyPods`): it stays blocked, without a reconcile, for as long
    /// as none is (a pod's eligibility wakes one).
    pub blocked_without_pods: bool,
    /// The load book the endpoint keeps: the consumers' load reports,
    /// checked and smoothed (lost in a crash).
    pub loads: LoadBook,
    /// When each shard's revoke started (a move decided), in landed
    /// documents.
    pub revokes: Vec<(Ms, String)>,
    /// When the eligible pod set changed, as the landed statuses say.
    pub pod_changes: Vec<Ms>,
    /// The plan memory the operator keeps per group (lost in a crash).
    plan_memory: PlanMemory,
}

/// The source read every this often by the simulated groups with a lease
/// table (Kinesis streams, which split and merge): the refresh that polls
/// for new shards and completed parents.
pub const KINESIS_REFRESH: &str = "5s";

/// Simulated epoch zero.
pub fn ts(ms: Ms) -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid") + SignedDuration::from_millis(ms)
}

/// The simulated time of `t` (the inverse of [`ts`]).
pub fn sim_ms(t: Timestamp) -> Ms {
    t.as_millisecond() - ts(0).as_millisecond()
}

impl Operator {
    /// An operator for a group with the given timings.
    pub fn new(
        lease_table: bool,
        drain: &str,
        failover: &str,
        delay: &str,
        min_ready: u32,
    ) -> Self {
        let mut group = fixtures::static_group("sim", "sim", "consumers", 1, "shard-{index}");
        if lease_table {
            // A Kinesis stream with its KCL lease table (the world's stream
            // splits and merges); without one, static partitions.
            group.spec.source = ShardSource {
                kinesis: Some(KinesisSource {
                    stream_name: Some("sim".into()),
                    stream_arn: None,
                    region: Some("us-east-1".into()),
                    endpoint: None,
                    refresh_interval: KINESIS_REFRESH.into(),
                }),
                static_source: None,
            };
            group.spec.lease_table = Some(fixtures::lease_table("app"));
        }
        group.spec.handoff = fixtures::handoff(drain, failover);
        group.spec.rebalance = fixtures::rebalance(delay);
        let pool = fixtures::pool("sim", "consumers", &[], min_ready);
        Self {
            group,
            pool,
            doc: None,
            doc_version: 0,
            status: None,
            late: Vec::new(),
            last_good: None,
            lease_prev: None,
            down_until: 0,
            next_reconcile: 0,
            faults: Faults::default(),
            fired: FaultCounts::default(),
            handoffs: Vec::new(),
            moves: 0,
            last_owner: BTreeMap::new(),
            // The world starts empty: the first operator sees every pod leave.
            departed: Departed::watched_from(Timestamp::MIN, retention()),
            releases: BTreeMap::new(),
            watch_gap_until: None,
            landed_during_reconcile: false,
            failures: Failures::default(),
            last_fault: Ms::MIN,
            blocked_without_pods: false,
            loads: LoadBook::default(),
            revokes: Vec::new(),
            pod_changes: Vec::new(),
            plan_memory: PlanMemory::default(),
        }
    }

    /// Takes the load reports that arrived (lost while the operator is
    /// down), through the real book's checks and smoothing.
    pub fn receive_loads(&mut self, world: &mut World) {
        let now = world.now;
        let Some(loads) = world.loads.as_mut() else {
            return;
        };
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut loads.queue)
            .into_iter()
            .partition(|r| r.at <= now);
        loads.queue = later;
        if now < self.down_until {
            return;
        }
        let limits = LoadObservation::limits(&self.group);
        for arrived in due {
            // Refused reports and readings are counted by the book; a
            // report from a view newer than what this operator published
            // (possible right after a crash) is refused whole.
            let _ = self
                .loads
                .report(&arrived.pod, &arrived.report, &limits, ts(now));
        }
    }

    /// Something the operator watches changed at `now` (a pod, an
    /// acknowledged release, the ConfigMap changed by a late write): its
    /// watch wakes a reconcile within `latency` ms, unless it is down (the
    /// restart reconciles everything) or relisting (the relist's end does).
    pub fn watch_event(&mut self, now: Ms, latency: Ms) {
        if now < self.down_until || self.watch_gap_until.is_some() {
            return;
        }
        self.next_reconcile = self.next_reconcile.min(now + latency);
    }

    /// A fault on the operator's side at `at` (see [`Self::last_fault`]).
    pub(crate) fn fault(&mut self, at: Ms) {
        self.last_fault = self.last_fault.max(at);
    }

    /// Takes the release acknowledgements that arrived (lost while the
    /// operator is down: the consumer sends them again); true when any did
    /// (the endpoint wakes the group's reconcile).
    pub fn receive_acks(&mut self, world: &mut World) -> bool {
        let now = world.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut world.ack_queue)
            .into_iter()
            .partition(|a| a.at <= now);
        world.ack_queue = later;
        if now < self.down_until || due.is_empty() {
            return false;
        }
        for arrived in due {
            self.releases.insert(arrived.shard, arrived.ack);
        }
        true
    }

    /// The operator crashes: memory lost, a new one starts after `down` ms.
    pub fn crash(&mut self, now: Ms, down: Ms) {
        self.last_good = None;
        self.lease_prev = None;
        self.blocked_without_pods = false;
        self.down_until = now + down;
        self.next_reconcile = now + down;
        self.fired.crashes += 1;
        self.failures = Failures::default();
        self.fault(self.down_until);
        // The new operator's watch lists the pods when it starts: it sees
        // every departure from then on, none before.
        self.departed = Departed::with_limits(retention(), CAPACITY);
        self.departed.listed(ts(self.down_until));
        self.releases.clear();
        self.loads = LoadBook::default();
        self.watch_gap_until = None;
        self.plan_memory = PlanMemory::default();
    }

    /// The pod watch expires and relists, done at `until`: departures
    /// before then are not seen.
    pub fn watch_gap(&mut self, now: Ms, until: Ms) {
        if now < self.down_until || self.watch_gap_until.is_some() {
            return;
        }
        self.departed.relisting();
        self.watch_gap_until = Some(until);
        self.fired.watch_gaps += 1;
        self.fault(until);
    }

    /// Time passes for the pod watch: a relist that is due completes.
    pub fn tick(&mut self, now: Ms) {
        if let Some(until) = self.watch_gap_until
            && now >= until
        {
            self.departed.listed(ts(until));
            self.watch_gap_until = None;
            // A completed list reconciles every group.
            self.next_reconcile = self.next_reconcile.min(now);
        }
    }

    /// Pod `pod`'s object left the API at `now`: the watch reports it with
    /// its final state, unless the operator is down or relisting.
    pub fn pod_left(&mut self, now: Ms, pod: &SimPod) {
        let watching = now >= self.down_until && self.watch_gap_until.is_none();
        if watching {
            self.departed
                .record("sim", &pod.name, departure_of(pod, now));
        }
    }

    /// One reconcile: the core's cycle over this operator and `world`, at
    /// the world's time, and the next one scheduled as the operator's
    /// runtime does ([`shardring_core::retry`]): the plan's requeue after a
    /// cycle whose writes all went out, the retry rule's delay after a
    /// failed one (a write refused by its precondition is a stale read);
    /// watch events may bring it forward ([`Self::watch_event`]). Returns
    /// the decision (whether or not every write went out).
    pub fn reconcile(&mut self, world: &mut World, rng: &mut Rng) -> Decision {
        let now = ts(world.now);
        let mut target = Reconcile {
            op: self,
            world,
            rng,
            read_error: false,
            before: BTreeSet::new(),
        };
        let done = cycle::ready(cycle(&mut target, now));
        let after = match &done.stopped {
            None => {
                if self.failures.count() > 0 {
                    // The end of a streak of failures and their backoff.
                    self.fault(world.now);
                }
                self.failures.succeeded();
                done.decision.requeue_after
            }
            Some(stopped) => {
                let after = self
                    .failures
                    .failed(stopped.error == WriteError::Refused)
                    .after;
                // Kept from acting until its retry, at least.
                self.fault(world.now + Ms::try_from(after.as_millis()).unwrap_or(Ms::MAX / 4));
                after
            }
        };
        // A blocked plan (no eligible pod, no topology) ends no revoke.
        // Without an eligible pod it stays blocked until one is, which a
        // watch event reports (`crate::revokes`); otherwise (a source that
        // could not be read yet) it is kept from acting until it looks
        // again, as after a failed write.
        self.blocked_without_pods = blocked_without_pods(&done.decision);
        if self.blocked_without_pods {
            self.fault(world.now);
        } else if blocked(&done.decision) {
            self.fault(world.now + Ms::try_from(after.as_millis()).unwrap_or(Ms::MAX / 4));
        }
        self.next_reconcile = world.now + Ms::try_from(after.as_millis()).unwrap_or(Ms::MAX / 2);
        if std::mem::take(&mut self.landed_during_reconcile) {
            let latency = rng.range(10, 300);
            self.watch_event(world.now, latency);
        }
        // The endpoint's book follows the document in place after the cycle.
        self.loads.sync(self.doc.as_ref());
        // A blocked plan (no pod eligible or waited for, no topology)
        // keeps the document as it is, holds included: nobody reads them.
        if done.stopped.is_none() && !blocked(&done.decision) {
            let planned = done
                .decision
                .document_write
                .as_ref()
                .map(|w| w.document.as_ref());
            if let Some(doc) = planned.or(self.doc.as_ref()) {
                check_holds(doc, &done.decision, now, world);
            }
        }
        done.decision
    }
}

/// A hold for a returning pod never outlives its window: a plan at or after
/// a hold's end no longer holds the shard, and a plan that holds one looks
/// again by its end.
fn check_holds(doc: &AssignmentDocument, decision: &Decision, now: Timestamp, world: &mut World) {
    let mut earliest: Option<Timestamp> = None;
    for (id, record) in &doc.shards {
        let Some(hold) = record.return_hold.as_deref() else {
            continue;
        };
        // A revoke whose pod is back under its name keeps the record of its
        // hold (the uid it was revoked from) until the evidence: not a hold.
        if record.state != crate::crds::ShardPhase::Held {
            continue;
        }
        if hold.until <= now {
            world.violate(format!(
                "{id} is still held for {:?} at {now}, after its hold ended at {}",
                record.owner, hold.until
            ));
            return;
        }
        earliest = Some(earliest.map_or(hold.until, |e| e.min(hold.until)));
    }
    if let Some(until) = earliest {
        let due = until.duration_since(now).unsigned_abs().max(MIN_LOOK);
        if decision.requeue_after > due {
            world.violate(format!(
                "a hold ends at {until} but the next reconcile is in {:?}",
                decision.requeue_after
            ));
        }
    }
}

/// The shortest requeue a plan asks for (its timers' floor).
const MIN_LOOK: std::time::Duration = std::time::Duration::from_millis(100);

/// One reconcile's reach: the operator, the world it runs in and the run's
/// randomness, for the cycle's observe and apply halves; with what the
/// observe half saw that the checks of the decision need.
struct Reconcile<'a> {
    op: &'a mut Operator,
    world: &'a mut World,
    rng: &'a mut Rng,
    /// The topology read or the lease scan failed.
    read_error: bool,
    /// The shards of the document the reconcile read.
    before: BTreeSet<String>,
}

/// Whether a decision is blocked because no pod is eligible.
fn blocked_without_pods(decision: &Decision) -> bool {
    use shardring_core::conditions::{self, READY, reason};
    conditions::find(&decision.status.conditions, READY)
        .is_some_and(|c| c.status == "False" && c.reason == reason::NO_READY_PODS)
}

/// Whether a decision keeps the assignment as it is because a problem
/// blocks the plan (no eligible pod, no topology, ...): no revoke can end.
fn blocked(decision: &Decision) -> bool {
    use shardring_core::conditions::{self, READY, reason};
    conditions::find(&decision.status.conditions, READY)
        .is_some_and(|c| c.status == "False" && c.reason != reason::FIRST_PUBLISH_HELD)
}

fn retention() -> std::time::Duration {
    std::time::Duration::from_millis(DEPARTED_RETENTION_MS as u64)
}
