//! The simulated system ([`Sim`]): the world, the operator and the run's
//! randomness, with the pod operations a workload controller and a user
//! make (add, delete gracefully, force delete, recreate), and one step of
//! time ([`Sim::step`]): late writes land, the kubelet and node controller
//! act, records arrive, consumers run and the operator reconciles each
//! group whose reconcile is due, one at a time.

use std::collections::BTreeMap;

use crate::counts::{EventCounts, PoolNotes};
use crate::operator::{Object, Operator, Watch};
use crate::rng::Rng;
use crate::world::{Ms, Rules, SimPod, Source, World};
use shardring_core::observation::Containers;

/// One simulated system.
pub struct Sim {
    /// Everything but the operator.
    pub world: World,
    /// The operator and the API objects.
    pub op: Operator,
    /// The run's randomness.
    pub rng: Rng,
    /// The choices among the groups of a pool (which group's stream
    /// reshards, ...) draw from their own stream, so a run of one group
    /// draws exactly what it drew before there were pools.
    pub(crate) pool_rng: Rng,
    /// Events injected.
    pub events: EventCounts,
    pub(crate) next_pod: u32,
    pub(crate) next_uid: u32,
    /// The pods are a StatefulSet's: fixed names, and a pod removed after
    /// a graceful deletion may come back under its name (as a new pod).
    /// Otherwise a Deployment's: generated names, never reused.
    pub statefulset: bool,
    /// How likely a StatefulSet pod removed after a graceful deletion comes
    /// back under its name.
    pub recreate: f64,
    /// The pods as the API server last reported them to the pod watch
    /// (the operator's own annotation writes aside, which report
    /// themselves), by name: a change is an event of its pod.
    pub(crate) watched: BTreeMap<String, WatchedPod>,
    /// When the quiet phase began (faults and events stopped).
    pub quiet_since: Option<Ms>,
    /// Pool mode: what the standby checks judged and let pass.
    pub pool_notes: PoolNotes,
    /// Pool mode: the further quiet period after convergence runs, in
    /// which nothing may move without a confirmed reason.
    pub(crate) resting: bool,
}

/// Longest step of simulated time (ms).
pub const MAX_STEP_MS: Ms = 600;

/// Longest a watch event takes to start a reconcile (ms).
const WATCH_LATENCY_MS: Ms = 300;

/// What the pod watch reports of a pod: every field of its object but the
/// annotations the operator writes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatchedPod {
    uid: String,
    ready_since: Option<Ms>,
    deletion: Option<(Ms, i64)>,
    containers: Containers,
    scheduled: bool,
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
    /// A system with no pods or shards, with a source for each of `op`'s
    /// groups (its shard ids prefixed with the group's name when there are
    /// several).
    pub fn new(seed: u64, rules: Rules, mut op: Operator) -> Self {
        // The watch draws from a stream of its own, so the run's main
        // stream is drawn as it would be without it.
        op.watch = Watch::new(seed ^ 0x3A7C_3A7C_3A7C_3A7C);
        let pooled = op.pooled();
        let sources = op
            .groups
            .iter()
            .map(|g| {
                let prefix = if pooled {
                    format!("{}-", g.shard_group.metadata.name.as_deref().unwrap_or("g"))
                } else {
                    String::new()
                };
                Source::new(g.lease_table(), prefix)
            })
            .collect();
        Self {
            world: World::new(rules, sources),
            op,
            rng: Rng::new(seed),
            pool_rng: Rng::new(seed ^ 0x9001_9001_9001_9001),
            events: EventCounts::default(),
            next_pod: 0,
            next_uid: 0,
            statefulset: false,
            recreate: 0.0,
            watched: BTreeMap::new(),
            quiet_since: None,
            pool_notes: Default::default(),
            resting: false,
        }
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
            annotations: Default::default(),
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
    /// within `linger` ms (its kubelet notices), or when its node heals;
    /// a graceful deletion's deadline the kubelet keeps already still
    /// holds (a force deletion never lets a process run longer).
    pub fn force_delete(&mut self, i: usize, linger: Ms) {
        let now = self.world.now;
        let cut = self.world.partitioned(self.world.pods[i].node);
        let pod = &mut self.world.pods[i];
        pod.start_at = None;
        if !cut {
            let noticed = now + linger;
            pod.kill_at = Some(pod.kill_at.map_or(noticed, |due| due.min(noticed)));
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

    /// When each pod that is eligible now (its object there, not
    /// terminating, Ready for the pool's `minReadySeconds`) became so.
    pub(crate) fn eligible_since(&self) -> impl Iterator<Item = (&SimPod, Ms)> {
        let min_ready = i64::from(self.op.pool.spec.min_ready_seconds) * 1000;
        let now = self.world.now;
        self.world
            .pods
            .iter()
            .filter(|p| p.object && p.deletion.is_none())
            .filter_map(move |p| {
                let at = p.ready_since? + min_ready;
                (at <= now).then_some((p, at))
            })
    }

    /// How a pod the simulation adds starts: mostly soon, sometimes after a
    /// slow image pull, sometimes not scheduled for a while.
    pub(crate) fn random_start(&mut self) -> PodStart {
        let roll = self.rng.below(100);
        if roll < 10 {
            PodStart::Unscheduled
        } else if roll < 20 {
            PodStart::After(self.rng.range(10_000, 40_000))
        } else {
            PodStart::Soon
        }
    }

    /// Advances time by one step and runs everything once: the operator
    /// reconciles each group when its runtime would (its requeue or retry,
    /// brought forward by watch events and its pool's balance), one at a
    /// time, earliest due first, and the bound on revokes is checked.
    pub fn step(&mut self) {
        let dt: Ms = self.rng.range(100, MAX_STEP_MS);
        self.world.now += dt;
        let now = self.world.now;
        self.op.tick(now);
        self.op.land(&mut self.world);
        let acked = self.op.receive_acks(&mut self.world);
        self.world.land_lease_writes();
        self.lifecycle();
        for s in self.world.stream.iter_mut().filter(|s| s.open) {
            s.records += self.rng.below(4);
        }
        self.world.run_consumers(&mut self.rng);
        self.world.report_loads();
        self.op.receive_loads(&mut self.world);
        // The pods' changes since the last watch point, then every event
        // on its way reaches the operator: a pod's change wakes every
        // group; a group's ConfigMap and its endpoint's acknowledgements
        // wake that group.
        self.report_pod_changes();
        let woken = self.op.watch_point(&mut self.world);
        for g in 0..self.op.groups.len() {
            if woken.pods || woken.documents.contains(&g) || acked.contains(&g) {
                let latency = self.rng.range(10, WATCH_LATENCY_MS);
                self.op.wake(g, now, latency);
            }
        }
        if (0..self.world.nodes.len()).any(|n| self.world.partitioned(n)) {
            self.op.fault(now);
        }
        let mut reconciled = std::collections::BTreeSet::new();
        while let Some(g) = self.op.due(now, &reconciled) {
            reconciled.insert(g);
            if self.op.defers(g, now) {
                self.pool_notes.deferred += 1;
                continue;
            }
            let out_of_band_since = self.resting.then(|| self.out_of_band_since(g));
            let decision = self.op.reconcile(g, &mut self.world, &mut self.rng);
            if let Some(since) = out_of_band_since {
                self.check_load_move_at_rest(g, since, &decision);
            }
            for end in &decision.holds_ended {
                if end.returned {
                    self.events.holds_returned += 1;
                } else {
                    self.events.holds_expired += 1;
                }
            }
        }
        self.check_revokes();
    }

    /// The pod objects as the pod watch reports them.
    fn watched_pods(&self) -> BTreeMap<String, WatchedPod> {
        self.world
            .pods
            .iter()
            .filter(|p| p.object)
            .map(|p| {
                let watched = WatchedPod {
                    uid: p.uid.clone(),
                    ready_since: p.ready_since,
                    deletion: p.deletion,
                    containers: p.containers,
                    scheduled: p.scheduled,
                };
                (p.name.clone(), watched)
            })
            .collect()
    }

    /// Reports each pod that changed since the last watch point to the
    /// operator's pod watch, as an event at a version of its own: a pod
    /// gone (or replaced by another of its name) as a deletion.
    fn report_pod_changes(&mut self) {
        let watched = self.watched_pods();
        let before = std::mem::take(&mut self.watched);
        for (name, pod) in &before {
            if watched.get(name).is_none_or(|now| now.uid != pod.uid) {
                let version = self.world.next_version();
                self.op
                    .watch
                    .deleted(Object::Pod(name.clone()), &pod.uid, version);
            }
        }
        for (name, pod) in &watched {
            if before.get(name) != Some(pod) {
                let version = self.world.next_version();
                self.op.watch.changed(Object::Pod(name.clone()), version);
            }
        }
        self.watched = watched;
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
}
