//! Deterministic simulation of the whole handoff protocol around the REAL
//! controller core. One seed drives an in-process model ([`world`]) of pods
//! (join, become ready, graceful termination, kill -9, force deletion, node
//! partitions), the stream (records, splits, merges), the lease table
//! (lagging writes, expiries) and consumers that follow the contract with
//! random delays, plus the operator ([`operator`]) with crashes, failed and
//! late writes (a late document write lands at any later time, only while
//! its resourceVersion precondition holds), failed and stale topology reads
//! and failed lease scans, pod watch gaps. The
//! operator plans with [`crate::controller::plan::plan`], exactly what
//! `shardring run` executes.
//!
//! Checked at every step: never two consumers reading one shard, never a
//! child read before its parents completed, no record skipped, never a
//! document shrunk by a read error, never a published epoch that does not
//! increase. After the faults stop and the system goes
//! quiet: every readable shard has exactly one owner that reads it, the load
//! is balanced within one shard, no handoff is in flight and planning again
//! changes nothing.
//!
//! Time only moves in the simulation; the same seed replays the same run.

pub mod explore;
pub mod operator;
pub mod rng;
pub mod scenario;
pub mod world;

use std::collections::BTreeMap;

pub use scenario::{RollingDeploy, rolling_deploy};

use self::operator::{FaultCounts, Faults, Operator};
use self::rng::Rng;
use self::world::{Ms, Rules, SimPod, StreamShard, World};
use shardring_core::observation::Containers;

/// How a run is shaped.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// Steps with faults (each 100–600 ms of simulated time).
    pub steps: u32,
    /// Quiet steps afterwards, before the final checks.
    pub quiet_steps: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            steps: 300,
            quiet_steps: 400,
        }
    }
}

/// Pod and stream events injected in a run.
#[derive(Debug, Clone, Default)]
pub struct EventCounts {
    /// Pods added.
    pub joins: u64,
    /// Graceful deletions.
    pub graceful_deletes: u64,
    /// Processes killed with SIGKILL.
    pub kills: u64,
    /// Force deletions (grace 0).
    pub force_deletes: u64,
    /// Node partitions.
    pub partitions: u64,
    /// Shard splits.
    pub splits: u64,
    /// Shard merges.
    pub merges: u64,
    /// Pods created unscheduled (bound to a node later, or never).
    pub unscheduled: u64,
    /// StatefulSet pods recreated under the name of one that was removed.
    pub recreated: u64,
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Whether the run used a lease table.
    pub lease_table: bool,
    /// The first invariant violation, if any.
    pub violation: Option<String>,
    /// Handoff durations (ms) by evidence.
    pub handoffs: Vec<(&'static str, u64)>,
    /// Pod and stream events.
    pub events: EventCounts,
    /// Operator-side faults.
    pub faults: FaultCounts,
    /// Records read, and read again.
    pub records: (u64, u64),
}

/// Runs one seed.
pub fn run_seed(seed: u64, config: SimConfig) -> SeedOutcome {
    let mut rng = Rng::new(seed);
    let lease_table = rng.chance(0.7);
    let rules = Rules {
        lease_table,
        failover: 6_000,
        max_refresh: 3_000,
        max_lease_lag: 2_000,
    };
    let mut world = World::new(rules);
    let min_ready = u32::try_from(rng.below(3)).expect("below 3");
    let statefulset = rng.chance(0.3);
    let mut op = Operator::new(lease_table, "20s", "6s", "5s", min_ready);
    op.faults = Faults {
        write_fail: 0.05,
        write_late: 0.05,
        topology_fail: 0.05,
        topology_stale: 0.1,
        lease_fail: 0.05,
    };
    let mut sim = Sim {
        world,
        op,
        rng,
        events: EventCounts::default(),
        next_pod: 0,
        next_shard: 0,
        next_uid: 0,
        statefulset,
        recreate: 0.5,
    };
    let shards = sim.rng.range(3, 8);
    for _ in 0..shards {
        sim.add_shard(Vec::new());
    }
    for _ in 0..sim.rng.range(2, 4) {
        sim.add_pod();
    }
    for _ in 0..config.steps {
        sim.inject();
        sim.step();
        if sim.world.violation.is_some() {
            break;
        }
    }
    sim.op.faults = Faults::default();
    // Every pod gets a node (a pod that stays unscheduled would keep the
    // quiet checks from ever seeing its share placed).
    let now = sim.world.now;
    for pod in sim
        .world
        .pods
        .iter_mut()
        .filter(|p| p.object && !p.scheduled)
    {
        pod.scheduled = true;
        pod.start_at = Some(now + 500);
    }
    // The quiet phase starts from a pool with at least two pods.
    let live = sim
        .world
        .pods
        .iter()
        .filter(|p| p.object && p.deletion.is_none())
        .count();
    for _ in live..2 {
        sim.add_pod();
    }
    for node in sim.world.nodes.iter_mut() {
        *node = None;
    }
    for _ in 0..config.quiet_steps {
        if sim.world.violation.is_some() {
            break;
        }
        sim.step();
    }
    // The quiet checks judge a settled system: a document published in the
    // last moments of the quiet phase (a drain-timeout handoff ends late) has
    // not been seen by its consumers yet. Keep stepping, within a bound, until
    // the published epoch has held for longer than a consumer's refresh.
    let settle = 2 * sim.world.rules.max_refresh;
    let mut epoch = published_epoch(&sim);
    let mut held_since = sim.world.now;
    for _ in 0..config.quiet_steps {
        if sim.world.violation.is_some() || sim.world.now - held_since > settle {
            break;
        }
        sim.step();
        let now_epoch = published_epoch(&sim);
        if now_epoch != epoch {
            epoch = now_epoch;
            held_since = sim.world.now;
        }
    }
    if sim.world.violation.is_none() {
        sim.check_quiet();
    }
    world = sim.world;
    SeedOutcome {
        seed,
        lease_table,
        violation: world.violation,
        handoffs: sim.op.handoffs,
        events: sim.events,
        faults: sim.op.fired,
        records: (world.counts.records_read, world.counts.records_repeated),
    }
}

/// One simulated system.
pub struct Sim {
    /// Everything but the operator.
    pub world: World,
    /// The operator and the API objects.
    pub op: Operator,
    /// The run's randomness.
    pub rng: Rng,
    /// Events injected.
    pub events: EventCounts,
    next_pod: u32,
    next_shard: u32,
    next_uid: u32,
    /// The pods are a StatefulSet's: fixed names, and a pod removed after
    /// a graceful deletion may come back under its name (as a new pod).
    /// Otherwise a Deployment's: generated names, never reused.
    pub statefulset: bool,
    /// How likely a StatefulSet pod removed after a graceful deletion comes
    /// back under its name.
    pub recreate: f64,
}

/// How a new pod starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodStart {
    /// Bound to a node at once; its process starts within 2 s.
    Soon,
    /// Bound to a node at once; its process starts after this many ms (a
    /// slow image pull).
    After(Ms),
    /// Not bound to a node (the scheduler finds no room): it never starts
    /// until it is.
    Unscheduled,
}

impl Sim {
    /// A system with no pods or shards.
    pub fn new(seed: u64, rules: Rules, op: Operator) -> Self {
        Self {
            world: World::new(rules),
            op,
            rng: Rng::new(seed),
            events: EventCounts::default(),
            next_pod: 0,
            next_shard: 0,
            next_uid: 0,
            statefulset: false,
            recreate: 0.0,
        }
    }

    /// Adds a shard with `parents`.
    pub fn add_shard(&mut self, parents: Vec<String>) -> String {
        let id = format!("shard-{:03}", self.next_shard);
        self.next_shard += 1;
        self.world.stream.push(StreamShard {
            id: id.clone(),
            parents,
            records: 0,
            open: true,
        });
        id
    }

    /// Adds a pod; its process starts shortly.
    pub fn add_pod(&mut self) -> String {
        let n = self.next_pod;
        self.next_pod += 1;
        let name = format!("pod-{n:02}");
        self.spawn_pod(name.clone(), PodStart::Soon);
        name
    }

    /// Creates pod `name` (a new pod, with a new uid, even when the name was
    /// used before), starting as `start`; returns its index.
    pub fn spawn_pod(&mut self, name: String, start: PodStart) -> usize {
        assert!(
            !self.world.pods.iter().any(|p| p.object && p.name == name),
            "a pod object named {name} exists"
        );
        let uid = format!("uid-{}", self.next_uid);
        self.next_uid += 1;
        let node = self.rng.index(self.world.nodes.len());
        let now = self.world.now;
        let start_at = match start {
            PodStart::Soon => Some(now + self.rng.range(200, 2_000)),
            PodStart::After(ms) => Some(now + ms),
            PodStart::Unscheduled => None,
        };
        self.world.pods.push(SimPod {
            name,
            uid,
            node,
            ready_since: None,
            deletion: None,
            object: true,
            annotation: None,
            process: None,
            start_at,
            kill_at: None,
            containers: Containers::NeverRan,
            scheduled: start != PodStart::Unscheduled,
            started_once: false,
            created: now,
            generated_name: !self.statefulset,
        });
        self.events.joins += 1;
        if start == PodStart::Unscheduled {
            self.events.unscheduled += 1;
        }
        self.world.pods.len() - 1
    }

    /// Starts the graceful deletion of pod `i`. A pod not bound to a node
    /// is removed by the API server at once (no kubelet has to stop it).
    pub fn delete_gracefully(&mut self, i: usize, grace_s: i64) {
        let now = self.world.now;
        let pod = &mut self.world.pods[i];
        pod.deletion = Some((now, grace_s));
        pod.kill_at = Some(now + grace_s * 1000);
        pod.start_at = None;
        if let Some(c) = pod.process.as_mut() {
            c.terminating = true;
        }
        self.events.graceful_deletes += 1;
        if !self.world.pods[i].scheduled {
            self.remove_object(i, true);
        }
    }

    /// kill -9 of pod `i`'s process (if any) and a force deletion of its
    /// object: gone at once, its last status as it was. Its process dies
    /// within `linger` ms (its kubelet notices), or when its node heals.
    pub fn force_delete(&mut self, i: usize, linger: Ms) {
        let now = self.world.now;
        let cut = self.world.partitioned(self.world.pods[i].node);
        let pod = &mut self.world.pods[i];
        pod.start_at = None;
        if !cut {
            pod.kill_at = Some(now + linger);
        }
        self.events.force_deletes += 1;
        self.remove_object(i, false);
    }

    /// Pod `i`'s object leaves the API (the operator's watch sees its final
    /// state). After a graceful deletion a StatefulSet recreates the pod
    /// under its name, sometimes.
    fn remove_object(&mut self, i: usize, graceful: bool) {
        let now = self.world.now;
        self.world.pods[i].object = false;
        self.op.pod_left(now, &self.world.pods[i]);
        if graceful && self.statefulset && self.rng.chance(self.recreate) {
            let start = self.random_start();
            let name = self.world.pods[i].name.clone();
            self.spawn_pod(name, start);
            self.events.recreated += 1;
        }
    }

    /// How a pod the simulation adds starts: mostly soon, sometimes after a
    /// slow image pull, sometimes not scheduled for a while.
    fn random_start(&mut self) -> PodStart {
        let roll = self.rng.below(100);
        if roll < 10 {
            PodStart::Unscheduled
        } else if roll < 20 {
            PodStart::After(self.rng.range(10_000, 40_000))
        } else {
            PodStart::Soon
        }
    }

    /// Injects random faults and events.
    fn inject(&mut self) {
        let rng = &mut self.rng;
        let w = &mut self.world;
        let live: Vec<usize> = (0..w.pods.len())
            .filter(|&i| w.pods[i].object && w.pods[i].deletion.is_none())
            .collect();
        if live.len() < 6 && rng.chance(0.02) {
            let n = self.next_pod;
            self.next_pod += 1;
            let start = self.random_start();
            self.spawn_pod(format!("pod-{n:02}"), start);
            return;
        }
        let rng = &mut self.rng;
        if live.len() >= 2 && rng.chance(0.012) {
            let i = *rng.pick(&live).expect("live");
            let grace = rng.range(5, 30);
            self.delete_gracefully(i, grace);
            return;
        }
        let w = &mut self.world;
        if rng.chance(0.006) {
            let running: Vec<usize> = (0..w.pods.len())
                .filter(|&i| w.pods[i].process.is_some())
                .collect();
            if let Some(&i) = rng.pick(&running) {
                w.pods[i].kill_at = Some(w.now);
                self.events.kills += 1;
            }
        }
        if rng.chance(0.004) {
            let objects: Vec<usize> = (0..w.pods.len()).filter(|&i| w.pods[i].object).collect();
            if objects.len() >= 2
                && let Some(&i) = rng.pick(&objects)
            {
                // Its kubelet notices the deletion and kills the process
                // within a second or two, or, slow, after up to 10 s.
                let linger = if rng.chance(0.3) {
                    rng.range(2_000, 10_000)
                } else {
                    rng.range(0, 2_000)
                };
                self.force_delete(i, linger);
            }
        }
        let rng = &mut self.rng;
        let w = &mut self.world;
        // The scheduler finds room for an unscheduled pod.
        let now = w.now;
        for pod in w.pods.iter_mut().filter(|p| p.object && !p.scheduled) {
            if pod.deletion.is_none() && rng.chance(0.01) {
                pod.scheduled = true;
                pod.start_at = Some(now + rng.range(200, 2_000));
            }
        }
        if rng.chance(0.003) {
            let until = now + rng.range(1_000, 20_000);
            self.op.watch_gap(now, until);
        }
        let rng = &mut self.rng;
        let w = &mut self.world;
        if w.rules.lease_table && rng.chance(0.004) {
            let n = rng.index(w.nodes.len());
            w.nodes[n] = Some(w.now + rng.range(5_000, 60_000));
            self.events.partitions += 1;
        }
        if w.rules.lease_table && rng.chance(0.006) {
            let open: Vec<usize> = (0..w.stream.len()).filter(|&i| w.stream[i].open).collect();
            if open.len() >= 2 && (open.len() >= 10 || rng.chance(0.5)) {
                let a = open[rng.index(open.len())];
                let b = open[(open.iter().position(|&x| x == a).expect("in") + 1) % open.len()];
                w.stream[a].open = false;
                w.stream[b].open = false;
                let parents = vec![w.stream[a].id.clone(), w.stream[b].id.clone()];
                self.add_shard(parents);
                self.events.merges += 1;
            } else if let Some(&a) = rng.pick(&open) {
                w.stream[a].open = false;
                let parent = vec![w.stream[a].id.clone()];
                self.add_shard(parent.clone());
                self.add_shard(parent);
                self.events.splits += 1;
            }
        }
        if self.rng.chance(0.004) {
            let down = self.rng.range(1_000, 15_000);
            self.op.crash(self.world.now, down);
        }
    }

    /// Advances time by one step and runs everything once.
    pub fn step(&mut self) {
        let dt: Ms = self.rng.range(100, 600);
        self.world.now += dt;
        self.op.tick(self.world.now);
        self.op.land(&mut self.world);
        self.world.land_lease_writes();
        self.lifecycle();
        for s in self.world.stream.iter_mut().filter(|s| s.open) {
            s.records += self.rng.below(4);
        }
        self.world.run_consumers(&mut self.rng);
        if self.world.now >= self.op.down_until && self.world.now >= self.op.next_reconcile {
            self.op.reconcile(&mut self.world, &mut self.rng);
        }
    }

    /// Kubelet and node-controller behaviour.
    fn lifecycle(&mut self) {
        let now = self.world.now;
        for i in 0..self.world.pods.len() {
            let cut = self.world.partitioned(self.world.pods[i].node);
            let cut_long =
                self.world.nodes[self.world.pods[i].node].is_some_and(|u| u > now) && cut;
            let pod = &self.world.pods[i];
            // Kill when due (grace deadline, exit, SIGKILL, or a force
            // deletion the kubelet noticed).
            if pod.kill_at.is_some_and(|k| k <= now) {
                let pod = &mut self.world.pods[i];
                pod.kill_at = None;
                pod.process = None;
                pod.ready_since = None;
                if pod.deletion.is_none() && pod.object {
                    pod.start_at = Some(now + self.rng.range(1_000, 4_000));
                }
            }
            // The kubelet removes a deleted pod once its process is gone and
            // it reported its final status (containers terminated, or never
            // started); the operator may or may not see that status first.
            let pod = &self.world.pods[i];
            if pod.deletion.is_some()
                && pod.process.is_none()
                && pod.object
                && !cut
                && pod.containers == pod.true_containers()
                && self.rng.chance(0.5)
            {
                self.remove_object(i, true);
            }
            // A force-deleted pod on a healed node is killed.
            let pod = &self.world.pods[i];
            if !pod.object && pod.process.is_some() && pod.kill_at.is_none() && !cut {
                self.world.pods[i].kill_at = Some(now + 500);
            }
            let pod = &self.world.pods[i];
            if pod.start_at.is_some_and(|s| s <= now) && pod.object && pod.scheduled && !cut {
                let process = self.world.new_process(&mut self.rng);
                let pod = &mut self.world.pods[i];
                pod.process = Some(process);
                pod.start_at = None;
                pod.started_once = true;
            }
            // The kubelet reports what runs (and readiness with it), late,
            // and only while its node reaches the API.
            let pod = &self.world.pods[i];
            if !cut && pod.object && pod.scheduled && self.rng.chance(0.7) {
                let pod = &mut self.world.pods[i];
                pod.containers = pod.true_containers();
                if pod.process.is_some() && pod.deletion.is_none() && pod.ready_since.is_none() {
                    pod.ready_since = Some(now);
                }
            }
            // The node controller marks pods of a lost node NotReady.
            if cut_long
                && self.world.pods[i]
                    .ready_since
                    .is_some_and(|r| now - r > 40_000)
            {
                self.world.pods[i].ready_since = None;
            }
        }
    }

    /// The checks once the system went quiet.
    fn check_quiet(&mut self) {
        let Some(doc) = self.op.doc.clone() else {
            self.world.violate("no document after quiescence".into());
            return;
        };
        let min_ready = i64::from(self.op.pool.spec.min_ready_seconds) * 1000;
        let eligible: Vec<String> = self
            .world
            .pods
            .iter()
            .filter(|p| p.object && p.deletion.is_none())
            .filter(|p| {
                p.ready_since
                    .is_some_and(|r| self.world.now - r >= min_ready)
            })
            .map(|p| p.name.clone())
            .collect();
        let mut loads: BTreeMap<&str, u64> = eligible.iter().map(|p| (p.as_str(), 0)).collect();
        for s in &self.world.stream {
            if self.world.rules.lease_table && self.world.complete(&s.id) {
                continue;
            }
            let parents_done =
                !self.world.rules.lease_table || s.parents.iter().all(|p| self.world.complete(p));
            if !parents_done {
                continue;
            }
            let Some(r) = doc.shards.get(&s.id) else {
                self.world
                    .violate(format!("quiet: {} missing from the document", s.id));
                return;
            };
            let owner = match (&r.state, &r.owner) {
                (crate::crds::ShardPhase::Active, Some(o)) if loads.contains_key(o.as_str()) => o,
                _ => {
                    self.world.violate(format!(
                        "quiet: {} is {:?} on {:?} (handoff {:?}), not active on an eligible pod {:?}; lease {:?}",
                        s.id,
                        r.state,
                        r.owner,
                        r.handoff,
                        loads.keys().collect::<Vec<_>>(),
                        self.world.leases.get(&s.id)
                    ));
                    return;
                }
            };
            *loads.get_mut(owner.as_str()).expect("eligible") += 1;
            let read = self.world.pods.iter().any(|p| {
                &p.name == owner
                    && p.process
                        .as_ref()
                        .is_some_and(|c| c.reading.contains_key(&s.id))
            });
            if !read {
                let pod = self.world.pods.iter().find(|p| &p.name == owner);
                let process = pod.and_then(|p| p.process.as_ref()).map(|c| {
                    format!(
                        "view epoch {} active {:?}, reading {:?}",
                        c.view.epoch,
                        c.view.active,
                        c.reading.keys().collect::<Vec<_>>()
                    )
                });
                let what = format!(
                    "quiet: {} owned by {owner} (document epoch {}) but nobody reads it; process: {process:?}; annotation: {:?}; lease: {:?}",
                    s.id,
                    doc.epoch,
                    pod.and_then(|p| p.annotation.clone()),
                    self.world.leases.get(&s.id)
                );
                self.world.violate(what);
                return;
            }
        }
        let (min, max) = (
            loads.values().min().copied().unwrap_or(0),
            loads.values().max().copied().unwrap_or(0),
        );
        if max > min + 1 {
            self.world
                .violate(format!("quiet: unbalanced loads {loads:?}"));
            return;
        }
        let obs = self.op.observe(&self.world, &mut self.rng);
        let again = shardring_core::plan(&obs);
        if again.document_write.is_some() || again.moves != (0, 0) {
            self.world
                .violate("quiet: planning again still changes the document".into());
        }
    }
}

/// The result of many seeds.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Failing seeds with their first violation.
    pub failures: Vec<(u64, String)>,
    /// Seeds with a lease table.
    pub with_lease_table: u64,
    /// Handoff durations (ms) by evidence, over every seed.
    pub handoffs: BTreeMap<&'static str, Vec<u64>>,
    /// Events over every seed.
    pub events: EventCounts,
    /// Faults over every seed.
    pub faults: FaultCounts,
    /// Records read and read again.
    pub records: (u64, u64),
}

impl Summary {
    /// Adds one seed's outcome.
    pub fn add(&mut self, o: SeedOutcome) {
        self.seeds += 1;
        if let Some(v) = o.violation {
            self.failures.push((o.seed, v));
        }
        self.with_lease_table += u64::from(o.lease_table);
        for (label, ms) in o.handoffs {
            self.handoffs.entry(label).or_default().push(ms);
        }
        let e = &mut self.events;
        e.joins += o.events.joins;
        e.graceful_deletes += o.events.graceful_deletes;
        e.kills += o.events.kills;
        e.force_deletes += o.events.force_deletes;
        e.partitions += o.events.partitions;
        e.splits += o.events.splits;
        e.merges += o.events.merges;
        e.unscheduled += o.events.unscheduled;
        e.recreated += o.events.recreated;
        let f = &mut self.faults;
        f.writes_failed += o.faults.writes_failed;
        f.writes_late += o.faults.writes_late;
        f.writes_refused += o.faults.writes_refused;
        f.topology_failed += o.faults.topology_failed;
        f.topology_stale += o.faults.topology_stale;
        f.lease_failed += o.faults.lease_failed;
        f.crashes += o.faults.crashes;
        f.watch_gaps += o.faults.watch_gaps;
        self.records.0 += o.records.0;
        self.records.1 += o.records.1;
    }
}

/// Runs seeds `first..first + count`.
pub fn run_seeds(first: u64, count: u64, config: SimConfig) -> Summary {
    let mut summary = Summary::default();
    for seed in first..first + count {
        summary.add(run_seed(seed, config));
    }
    summary
}

/// Epoch of the document the simulated operator last published (0 before any).
fn published_epoch(sim: &Sim) -> u64 {
    sim.op.doc.as_ref().map_or(0, |doc| doc.epoch)
}

/// The `p`-th percentile (0–100) of `values` (sorted in place).
pub fn percentile(values: &mut [u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    // A float-to-int cast saturates, and the rank is clamped to the slice below.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[rank.min(values.len() - 1)]
}
