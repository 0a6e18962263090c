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
//! ([`shardring_core::departures`]), fed with every pod object that
//! leaves the API while its watch runs: not while it is down (a crash starts
//! an empty one), nor during a watch gap (a relist).
//!
//! The operator serves one ShardGroup, or several on one pool (pool mode):
//! each [`Group`] has its own objects, memory and next reconcile, and the
//! operator reconciles one group at a time. With several, each reconcile
//! takes its share of the pool's balance from the real
//! [`shardring_core::pool::PoolBook`] (`pool`), which a crash loses too.
//!
//! This module holds what the operator process does (crashes, watch gaps,
//! wake-ups) and its reconcile; `process` the process's state
//! ([`Operator`]), `reconcile` one reconcile's reach that the halves work
//! on, [`group`] one group's objects and memory, `faults` the fault
//! probabilities and counts, `clock` the simulated clock's timestamps,
//! `observe` the observe half, `apply` the apply half and the simulated API
//! server's writes, `pool` the pool's balance and which groups go first,
//! `watch` the watches whose events the operator's real echo bookkeeping
//! judges. A file imports only from the files after it in this order: this
//! one; `observe`, `apply`, `pool`; `reconcile`; `process`; `group`,
//! `faults`, `clock`, `watch`.

mod apply;
mod clock;
mod faults;
pub mod group;
mod observe;
mod pool;
mod process;
mod reconcile;
mod watch;

use std::collections::BTreeSet;

use jiff::Timestamp;

use crate::crds::{AssignmentDocument, fixtures};
use crate::rng::Rng;
use crate::world::{Ms, SimPod, World};
use shardring_core::cycle::{self, cycle};
use shardring_core::departures::{CAPACITY, DepartureMemory};
use shardring_core::load::LoadObservation;
use shardring_core::plan::Decision;
use shardring_core::pool::PoolBook;
use shardring_core::pool::precedence::Precedence;

pub use self::apply::WriteError;
pub use self::clock::{sim_ms, ts};
pub use self::faults::{FaultCounts, Faults};
pub use self::group::{Group, KINESIS_REFRESH, NAMESPACE, WriteCounts};
use self::observe::departure_of;
pub use self::pool::BookAtRest;
pub use self::process::Operator;
use self::reconcile::Reconcile;
pub use self::watch::{Object, Verdicts, Watch, Woken};

/// How long the simulated operator remembers departed pods (shorter than
/// the real operator's, so runs of a few simulated minutes see it expire).
pub const DEPARTED_RETENTION_MS: Ms = 60_000;

impl Operator {
    /// An operator for one group with the given timings.
    pub fn new(
        lease_table: bool,
        drain: &str,
        failover: &str,
        delay: &str,
        min_ready: u32,
    ) -> Self {
        let group = Group::new(NAMESPACE, lease_table, drain, failover, delay);
        Self::of_pool(vec![group], min_ready)
    }

    /// An operator for `groups` on one pool.
    pub fn of_pool(groups: Vec<Group>, min_ready: u32) -> Self {
        Self {
            pool: fixtures::pool(NAMESPACE, "consumers", &[], min_ready),
            groups,
            down_until: 0,
            faults: Faults::default(),
            fired: FaultCounts::default(),
            // The world starts empty: the first operator sees every pod leave.
            departed: DepartureMemory::watched_from(Timestamp::MIN, retention()),
            watch_gap_until: None,
            book: PoolBook::default(),
            precedence: Precedence::default(),
            shares_taken: 0,
            ticket: None,
            watch: Watch::new(0),
        }
    }

    /// Whether a group's last reconcile failed (its retry, up to the core
    /// retry rule's longest backoff away, is still to come) or a write the
    /// client gave up on has yet to land.
    pub fn retry_pending(&self) -> bool {
        self.groups
            .iter()
            .any(|group| group.failures.count() > 0 || !group.late.is_empty())
    }

    /// Whether several groups share the pool (its balance is dealt).
    pub fn pooled(&self) -> bool {
        self.groups.len() > 1
    }

    /// Takes the load reports that arrived (lost while the operator is
    /// down), each through its group's real book's checks and smoothing.
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
        for arrived in due {
            let group = &mut self.groups[arrived.group];
            let limits = LoadObservation::limits(&group.shard_group);
            // Refused reports and readings are counted by the book; a
            // report from a view newer than what this operator published
            // (possible right after a crash) is refused whole.
            let _ = group
                .loads
                .report(&arrived.pod, &arrived.report, &limits, ts(now));
        }
    }

    /// Something the operator watches changed at `now` for group `g` (a
    /// pod, an acknowledged release, its ConfigMap changed by a late write,
    /// its pool's balance asked for it): a reconcile of it within `latency`
    /// ms, unless the operator is down (the restart reconciles everything)
    /// or its pod watch is relisting (the relist's end does).
    pub fn wake(&mut self, g: usize, now: Ms, latency: Ms) {
        if now < self.down_until || self.watch_gap_until.is_some() {
            return;
        }
        let group = &mut self.groups[g];
        group.next_reconcile = group.next_reconcile.min(now + latency);
    }

    /// The watch point of a step: the events on their way reach the
    /// operator (the pods' only once a relist is done; none while it is
    /// down, as a new process lists everything), each judged by its echo
    /// bookkeeping; what they woke. A wrong verdict is a violation.
    pub fn watch_point(&mut self, world: &mut World) -> Woken {
        if world.now < self.down_until {
            self.watch.lost();
            return Woken::default();
        }
        match self.watch.deliver(self.watch_gap_until.is_none()) {
            Ok(woken) => woken,
            Err(violation) => {
                world.violate(violation);
                Woken::default()
            }
        }
    }

    /// A fault on the operator's side at `at` that concerns every group
    /// (see [`Group::last_fault`]).
    pub(crate) fn fault(&mut self, at: Ms) {
        for group in &mut self.groups {
            group.fault(at);
        }
    }

    /// Takes the release acknowledgements that arrived (lost while the
    /// operator is down: the consumer sends them again); the groups that
    /// got any (the endpoint wakes their reconciles).
    pub fn receive_acks(&mut self, world: &mut World) -> BTreeSet<usize> {
        let now = world.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut world.ack_queue)
            .into_iter()
            .partition(|a| a.at <= now);
        world.ack_queue = later;
        let mut acked = BTreeSet::new();
        if now < self.down_until {
            return acked;
        }
        for arrived in due {
            acked.insert(arrived.group);
            self.groups[arrived.group]
                .releases
                .insert(arrived.shard, arrived.ack);
        }
        acked
    }

    /// The operator crashes: memory lost (every group's, the pool's
    /// balance), a new one starts after `down` ms.
    pub fn crash(&mut self, now: Ms, down: Ms) {
        self.down_until = now + down;
        self.fired.crashes += 1;
        for group in &mut self.groups {
            group.forget_memory(self.down_until);
        }
        // The new operator's watch lists the pods when it starts: it sees
        // every departure from then on, none before.
        self.departed = DepartureMemory::with_limits(retention(), CAPACITY);
        self.departed.listed(ts(self.down_until));
        self.watch_gap_until = None;
        self.book = PoolBook::default();
        self.precedence = Precedence::default();
        self.shares_taken = 0;
        self.ticket = None;
        self.watch.restarted();
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

    /// Time passes for the pod watch: a relist that is due completes; and
    /// the ConfigMap cache delivers the documents written until now.
    pub fn tick(&mut self, now: Ms) {
        if let Some(until) = self.watch_gap_until
            && now >= until
        {
            self.departed.listed(ts(until));
            self.watch_gap_until = None;
            // A completed list reconciles every group.
            for group in &mut self.groups {
                group.next_reconcile = group.next_reconcile.min(now);
            }
        }
        if self.pooled() {
            for group in &mut self.groups {
                let cached = group.cached.as_ref().map(|d| d.epoch);
                if group.doc.as_ref().map(|d| d.epoch) != cached {
                    group.cached = group.doc.clone().map(std::sync::Arc::new);
                }
            }
        }
    }

    /// Pod `pod`'s object left the API at `now`: the watch reports it with
    /// its final state, unless the operator is down or relisting.
    pub fn pod_left(&mut self, now: Ms, pod: &SimPod) {
        let watching = now >= self.down_until && self.watch_gap_until.is_none();
        if watching {
            self.departed
                .record(NAMESPACE, &pod.name, departure_of(pod, now));
        }
    }

    /// The group whose reconcile is due at `now` first (its next reconcile
    /// the earliest, the lowest index among equals), unless the operator is
    /// down or `done` says it already reconciled in this step.
    pub fn due(&self, now: Ms, done: &BTreeSet<usize>) -> Option<usize> {
        if now < self.down_until {
            return None;
        }
        (0..self.groups.len())
            .filter(|g| !done.contains(g) && self.groups[*g].next_reconcile <= now)
            .min_by_key(|&g| (self.groups[g].next_reconcile, g))
    }

    /// One reconcile of group `g`: the core's cycle over this operator and
    /// `world`, at the world's time, and the next one scheduled as the
    /// operator's runtime does ([`shardring_core::retry`]): the plan's
    /// requeue after a cycle whose writes all went out, the retry rule's
    /// delay after a failed one (a write refused by its precondition is a
    /// stale read); watch events may bring it forward ([`Self::wake`]). In
    /// pool mode its share of the pool's balance is given back when it
    /// ends, waking whom that concerns. Returns the decision (whether or
    /// not every write went out).
    pub fn reconcile(&mut self, g: usize, world: &mut World, rng: &mut Rng) -> Decision {
        let now = ts(world.now);
        let mut target = Reconcile {
            op: self,
            g,
            world,
            rng,
            read_error: false,
            before: BTreeSet::new(),
        };
        let done = cycle::ready(cycle(&mut target, now));
        let group = &mut self.groups[g];
        let after = match &done.stopped {
            None => {
                if group.failures.count() > 0 {
                    // The end of a streak of failures and their backoff.
                    group.fault(world.now);
                }
                group.failures.succeeded();
                done.decision.requeue_after
            }
            Some(stopped) => {
                let after = group
                    .failures
                    .failed(stopped.error == WriteError::Refused)
                    .after;
                // Kept from acting until its retry, at least.
                group.fault(world.now + Ms::try_from(after.as_millis()).unwrap_or(Ms::MAX / 4));
                after
            }
        };
        // A blocked plan (no eligible pod, no topology) ends no revoke.
        // Without an eligible pod it stays blocked until one is, which a
        // watch event reports (`crate::revokes`); otherwise (a source that
        // could not be read yet) it is kept from acting until it looks
        // again, as after a failed write.
        group.blocked_without_pods = blocked_without_pods(&done.decision);
        if group.blocked_without_pods {
            group.fault(world.now);
        } else if blocked(&done.decision) {
            group.fault(world.now + Ms::try_from(after.as_millis()).unwrap_or(Ms::MAX / 4));
        }
        group.next_reconcile = world.now + Ms::try_from(after.as_millis()).unwrap_or(Ms::MAX / 2);
        let landed_during_reconcile = std::mem::take(&mut group.landed_during_reconcile);
        if landed_during_reconcile {
            let latency = rng.range(10, 300);
            self.wake(g, world.now, latency);
        }
        if std::mem::take(&mut self.groups[g].woken_during_reconcile) {
            let latency = self.watch.latency();
            self.wake(g, world.now, latency);
        }
        let group = &mut self.groups[g];
        // The endpoint's book follows the document in place after the cycle.
        group.loads.sync(group.doc.as_ref());
        // A blocked plan (no pod eligible or waited for, no topology)
        // keeps the document as it is, holds included: nobody reads them.
        if done.stopped.is_none() && !blocked(&done.decision) {
            let planned = done
                .decision
                .document_write
                .as_ref()
                .map(|w| w.document.as_ref());
            // A plan that writes nothing decided on the document it read:
            // when a late write of an earlier plan landed meanwhile, the
            // document now is that plan's (its holds as of then), and the
            // wake-up above brings a plan that is checked on it.
            let current = group.doc.as_ref().filter(|_| !landed_during_reconcile);
            if let Some(doc) = planned.or(current) {
                check_holds(doc, &done.decision, now, world);
            }
        }
        if self.pooled() {
            self.pool_done(g, &done.decision, world.now, rng);
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
