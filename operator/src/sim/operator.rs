//! The simulated operator around the REAL pure plan step
//! ([`crate::controller::plan::plan`]): it builds an [`Observation`] from the
//! simulated API objects, topology and lease table (with failed and stale
//! reads), runs the plan, and applies the [`Decision`] the way `apply.rs`
//! does — document, then annotations, then status, stopping at the first
//! failed write — with writes that fail or land late. Its memory (last good
//! topology, previous lease scan) is lost when it crashes; only the API
//! objects survive.
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
//! ([`crate::controller::observe::departed`]), fed with every pod object that
//! leaves the API while its watch runs: not while it is down (a crash starts
//! an empty one), nor during a watch gap (a relist).

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use super::rng::Rng;
use super::world::{Checkpoint, Ms, SimPod, World};
use shardring_core::departures::Departure;
use shardring_core::leases::{LeaseSnapshot, LeaseTable};
use shardring_core::observation::{
    LeaseObservation, Observation, PodInfo, Published, TopologyObservation,
};
use shardring_core::plan::{Decision, plan};
use shardring_core::topology::{SourceError, Topology};

use crate::controller::observe::departed::{CAPACITY, Departed};
use crate::crds::consumer_pool::CapacitySpec;
use crate::crds::shard_group::{LeaseTableSpec, PoolRef, ShardSource, StaticSource};
use crate::crds::{
    AssignmentDocument, ConsumerPool, ConsumerPoolSpec, PodView, ShardGroup, ShardGroupSpec,
    ShardGroupStatus, ShardPhase,
};
use crate::engine::{Shard, ShardState};

/// Probabilities of the operator-side faults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// A write fails (the rest of that apply is skipped).
    pub write_fail: f64,
    /// A write times out for the client but lands later: a document write at
    /// any later time if its precondition still holds, an annotation or
    /// status write before the next reconcile.
    pub write_late: f64,
    /// The topology read fails.
    pub topology_fail: f64,
    /// The topology read returns an older snapshot.
    pub topology_stale: f64,
    /// The lease scan fails.
    pub lease_fail: f64,
}

/// Longest delay of a late document write, ms (reconciles run every 0.5–3 s).
const LATE_DOC_MAX_MS: Ms = 60_000;

/// A write the API server will apply later.
#[derive(Debug, Clone)]
enum Write {
    /// The document, conditioned on the ConfigMap version the reconcile read
    /// (`None`: a create, refused once a ConfigMap exists).
    Doc(Box<AssignmentDocument>, Option<u64>),
    Annotation(String, String, Option<PodView>),
    Status(Box<ShardGroupStatus>),
}

/// How often each fault fired.
#[derive(Debug, Clone, Default)]
pub struct FaultCounts {
    /// Failed writes.
    pub writes_failed: u64,
    /// Late writes.
    pub writes_late: u64,
    /// Document writes refused by their precondition (409: the ConfigMap
    /// changed since the reconcile read it), late or not.
    pub writes_refused: u64,
    /// Failed topology reads.
    pub topology_failed: u64,
    /// Stale topology reads.
    pub topology_stale: u64,
    /// Failed lease scans.
    pub lease_failed: u64,
    /// Operator crashes.
    pub crashes: u64,
    /// Pod watch gaps (relists): departures in them are not seen.
    pub watch_gaps: u64,
}

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
    /// The pod watch is relisting until then: departures are not seen.
    watch_gap_until: Option<Ms>,
}

/// Simulated epoch zero.
pub fn ts(ms: Ms) -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid") + SignedDuration::from_millis(ms)
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
        let spec = ShardGroupSpec {
            pool_ref: PoolRef {
                name: "consumers".into(),
            },
            source: ShardSource {
                kinesis: None,
                static_source: Some(StaticSource {
                    count: 1,
                    name_template: "shard-{index}".into(),
                }),
            },
            lease_table: lease_table.then(|| LeaseTableSpec {
                table_name: "app".into(),
                region: None,
                endpoint: None,
            }),
            consumer_name: None,
            standbys: 0,
            balance: Default::default(),
            handoff: crate::crds::shard_group::HandoffSpec {
                drain_timeout: drain.into(),
                lease_failover: failover.into(),
            },
            rebalance: crate::crds::shard_group::RebalanceSpec {
                delay: delay.into(),
                ..Default::default()
            },
            output: Default::default(),
        };
        let mut group = ShardGroup::new("sim", spec);
        group.metadata.namespace = Some("sim".into());
        group.metadata.generation = Some(1);
        let mut pool = ConsumerPool::new(
            "consumers",
            ConsumerPoolSpec {
                selector: Default::default(),
                min_ready_seconds: min_ready,
                capacity: CapacitySpec::default(),
                max_shards_per_pod: None,
                topology_keys: vec![],
            },
        );
        pool.metadata.namespace = Some("sim".into());
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
            watch_gap_until: None,
        }
    }

    /// The operator crashes: memory lost, a new one starts after `down` ms.
    pub fn crash(&mut self, now: Ms, down: Ms) {
        self.last_good = None;
        self.lease_prev = None;
        self.down_until = now + down;
        self.next_reconcile = now + down;
        self.fired.crashes += 1;
        // The new operator's watch lists the pods when it starts: it sees
        // every departure from then on, none before.
        self.departed = Departed::with_limits(retention(), CAPACITY);
        self.departed.listed(ts(self.down_until));
        self.watch_gap_until = None;
    }

    /// The pod watch expires and relists, done at `until`: departures
    /// before then are not seen.
    pub fn watch_gap(&mut self, now: Ms, until: Ms) {
        if now < self.down_until || self.watch_gap_until.is_some() {
            return;
        }
        self.departed
            .record_event(&kube::runtime::watcher::Event::Init, ts(now));
        self.watch_gap_until = Some(until);
        self.fired.watch_gaps += 1;
    }

    /// Time passes for the pod watch: a relist that is due completes.
    pub fn tick(&mut self, now: Ms) {
        if let Some(until) = self.watch_gap_until
            && now >= until
        {
            self.departed.listed(ts(until));
            self.watch_gap_until = None;
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

    /// Lands late writes that are due.
    pub fn land(&mut self, world: &mut World) {
        let now = world.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.late)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.late = later;
        for (_, write) in due {
            self.commit(world, write);
        }
    }

    /// The precondition of a document write planned now: the ConfigMap's
    /// version, `None` when there is none.
    fn doc_base(&self) -> Option<u64> {
        self.doc.as_ref().map(|_| self.doc_version)
    }

    /// A late document write may land while a reconcile runs, after its read
    /// and before its own write (which its precondition then refuses).
    fn land_racing(&mut self, world: &mut World, rng: &mut Rng) {
        let Some(i) = self
            .late
            .iter()
            .position(|(_, w)| matches!(w, Write::Doc(..)))
        else {
            return;
        };
        if rng.chance(0.5) {
            let (_, write) = self.late.remove(i);
            self.commit(world, write);
        }
    }

    /// The topology as the stream and lease table are now.
    pub fn true_topology(world: &World) -> Topology {
        let shards = world
            .stream
            .iter()
            .map(|s| Shard {
                id: s.id.clone(),
                hash_key_range: None,
                parents: s.parents.clone(),
                state: if world.rules.lease_table && world.complete(&s.id) {
                    ShardState::Complete
                } else if s.open {
                    ShardState::Open
                } else {
                    ShardState::Closed
                },
            })
            .collect();
        Topology { shards }
    }

    /// The observation of this reconcile (with read faults).
    pub fn observe(&mut self, world: &World, rng: &mut Rng) -> Observation {
        let now = world.now;
        let truth = Self::true_topology(world);
        let mut error = None;
        if rng.chance(self.faults.topology_fail) {
            self.fired.topology_failed += 1;
            error = Some(SourceError::Throttled("simulated".into()));
        } else if self.last_good.is_some() && rng.chance(self.faults.topology_stale) {
            // A cached read: the topology is not refreshed (it never goes
            // back before what this operator already saw).
            self.fired.topology_stale += 1;
        } else {
            self.last_good = Some((truth, now));
        }
        let topology = TopologyObservation {
            source: "sim".into(),
            last_good: self.last_good.as_ref().map(|(t, _)| t.clone()),
            read_at: self.last_good.as_ref().map(|(_, at)| ts(*at)),
            error,
            ..Default::default()
        };
        let leases = if !world.rules.lease_table {
            LeaseObservation::NotConfigured
        } else if rng.chance(self.faults.lease_fail) {
            self.fired.lease_failed += 1;
            LeaseObservation::Failed("simulated".into())
        } else {
            let table = self.scan(world);
            self.lease_prev = Some(table.clone());
            LeaseObservation::Read(table)
        };
        let mut group = self.group.clone();
        group.status = self.status.clone();
        Observation {
            group,
            pool: Some(self.pool.clone()),
            pods: pod_infos(world),
            topology,
            published: self.doc.clone().map_or(Published::Missing, Published::from),
            leases,
            departed: self.departed.departures("sim", |_| true, ts(now)),
            now: ts(now),
        }
    }

    /// A consistent scan, with counter change times as this operator saw them.
    fn scan(&self, world: &World) -> LeaseTable {
        let now = ts(world.now);
        let leases = world
            .leases
            .iter()
            .map(|(id, row)| {
                let before = self
                    .lease_prev
                    .as_ref()
                    .and_then(|t| t.get(id))
                    .filter(|b| b.counter == row.counter && b.owner == row.owner);
                let snap = LeaseSnapshot {
                    shard_id: id.clone(),
                    owner: row.owner.clone(),
                    counter: row.counter,
                    counter_changed_at: before.map_or(now, |b| b.counter_changed_at),
                    checkpoint: None,
                    sequence_number: None,
                    complete: row.checkpoint == Checkpoint::End,
                    parents: Vec::new(),
                    children: Vec::new(),
                    checkpoint_owner: None,
                };
                (id.clone(), snap)
            })
            .collect();
        LeaseTable {
            leases,
            scanned_at: Some(now),
            items: world.leases.len(),
        }
    }

    /// One reconcile: observe, plan, apply. Returns the decision.
    pub fn reconcile(&mut self, world: &mut World, rng: &mut Rng) -> Decision {
        let base = self.doc_base();
        let obs = self.observe(world, rng);
        let read_error =
            obs.topology.error.is_some() || matches!(obs.leases, LeaseObservation::Failed(_));
        let before: BTreeSet<String> = self
            .doc
            .as_ref()
            .map(|d| d.shards.keys().cloned().collect())
            .unwrap_or_default();
        let decision = plan(&obs);
        if let Some(doc) = &decision.document_write {
            let lost: Vec<&String> = before
                .iter()
                .filter(|s| !doc.shards.contains_key(*s))
                .collect();
            if !lost.is_empty() && read_error {
                world.violate(format!(
                    "a read error shrank the document: {lost:?} dropped"
                ));
            }
        }
        for h in &decision.handoffs {
            self.handoffs.push((
                h.evidence.label(),
                u64::try_from(h.duration.as_millis()).unwrap_or(u64::MAX),
            ));
        }
        self.land_racing(world, rng);
        let mut writes = Vec::new();
        if let Some(doc) = &decision.document_write {
            writes.push(Write::Doc(Box::new(doc.clone()), base));
        }
        for w in &decision.annotation_writes {
            writes.push(Write::Annotation(
                w.pod.clone(),
                w.uid.clone().unwrap_or_default(),
                w.view.clone(),
            ));
        }
        if decision.status_changed {
            writes.push(Write::Status(Box::new(decision.status.clone())));
        }
        for write in writes {
            if rng.chance(self.faults.write_fail) {
                self.fired.writes_failed += 1;
                break;
            }
            if rng.chance(self.faults.write_late) {
                // The client gives up; the server applies it later: a
                // document write at any time (its precondition decides), the
                // others shortly after.
                self.fired.writes_late += 1;
                let delay = match write {
                    Write::Doc(..) => rng.range(1, LATE_DOC_MAX_MS),
                    _ => rng.range(1, 400),
                };
                self.late.push((world.now + delay, write));
                break;
            }
            if !self.commit(world, write) {
                // 409: nothing after the document goes out.
                break;
            }
        }
        let wait = decision.requeue_after.as_millis().min(30_000) as Ms;
        self.next_reconcile = world.now + wait.clamp(500, rng.range(500, 3000));
        decision
    }

    /// Applies one write as the API server would; false when the document's
    /// precondition refused it.
    fn commit(&mut self, world: &mut World, write: Write) -> bool {
        match write {
            Write::Doc(doc, base) => {
                if base != self.doc_base() {
                    self.fired.writes_refused += 1;
                    return false;
                }
                if let Some(current) = &self.doc
                    && doc.epoch <= current.epoch
                {
                    world.violate(format!(
                        "the published epoch went from {} to {}",
                        current.epoch, doc.epoch
                    ));
                }
                for (id, r) in &doc.shards {
                    if r.state != ShardPhase::Active {
                        continue;
                    }
                    if let Some(owner) = &r.owner {
                        let prev = self.last_owner.insert(id.clone(), owner.clone());
                        if prev.is_some_and(|p| &p != owner) {
                            self.moves += 1;
                        }
                    }
                }
                self.doc = Some(*doc);
                self.doc_version += 1;
            }
            Write::Annotation(pod, uid, view) => {
                if let Some(p) = world
                    .pods
                    .iter_mut()
                    .find(|p| p.object && p.name == pod && p.uid == uid)
                {
                    p.annotation = view.map(|v| v.to_annotation());
                }
            }
            Write::Status(status) => self.status = Some(*status),
        }
        true
    }
}

/// The pods as the API shows them.
pub fn pod_infos(world: &World) -> Vec<PodInfo> {
    let mut out: Vec<PodInfo> = world
        .pods
        .iter()
        .filter(|p| p.object)
        .map(|p| PodInfo {
            name: p.name.clone(),
            uid: p.uid.clone(),
            labels: BTreeMap::new(),
            selected: true,
            ready: p.ready_since.is_some(),
            ready_since: p.ready_since.map(ts),
            deletion_timestamp: p.deletion.map(|(at, _)| ts(at)),
            deletion_grace_seconds: p.deletion.map(|(_, g)| g),
            node_name: p.scheduled.then(|| format!("node-{}", p.node)),
            zone: None,
            annotation: p.annotation.clone(),
            containers: p.containers,
            created: Some(ts(p.created)),
            generated_name: p.generated_name,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The departure of `pod`, whose object left the API at `now`, as the
/// watch's DELETED event shows it.
pub fn departure_of(pod: &SimPod, now: Ms) -> Departure {
    Departure {
        uid: pod.uid.clone(),
        at: ts(now),
        containers: pod.containers,
        scheduled: pod.scheduled,
        created: Some(ts(pod.created)),
        generated_name: pod.generated_name,
    }
}

fn retention() -> std::time::Duration {
    std::time::Duration::from_millis(DEPARTED_RETENTION_MS as u64)
}
