//! The simulated world outside the operator: pods and their consumer
//! processes, nodes that can be partitioned, the stream's shards and records,
//! and the lease table (with lagging writes). Consumers follow the contract:
//! they act only on the newest view they have seen, read only `active`
//! shards, take a lease before reading (with a lease table), stop, checkpoint
//! and release as soon as a shard is no longer active, fence themselves when
//! they cannot renew, and read records in order from the last checkpoint.
//!
//! Each pod's status is what its kubelet last reported: its containers
//! ([`Containers`]) and readiness, updated only while its node reaches the
//! API, and late (a step or more after the process started or stopped).
//!
//! The invariants on readers are checked here, as records are read:
//! never two readers of one shard, never a child before its parents
//! completed, never a record skipped.

use std::collections::{BTreeMap, BTreeSet};

use super::rng::Rng;
use crate::crds::PodView;
use shardring_core::observation::Containers;

/// Milliseconds of simulated time.
pub type Ms = i64;

/// A checkpoint in the lease table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpoint {
    /// Next record to read.
    At(u64),
    /// `SHARD_END`: read to its end.
    End,
}

/// One lease row (KCL format reduced to what matters here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// Worker (pod name) holding it.
    pub owner: Option<String>,
    /// Lease counter, bumped by every take and renewal.
    pub counter: u64,
    /// When the counter last changed (true time).
    pub changed: Ms,
    /// Checkpoint.
    pub checkpoint: Checkpoint,
}

/// A lagging lease write (checkpoint and release), conditional on the
/// writer still owning the lease when it lands.
#[derive(Debug, Clone)]
pub struct LeaseWrite {
    /// When it lands.
    pub at: Ms,
    /// Shard.
    pub shard: String,
    /// Writer.
    pub owner: String,
    /// Checkpoint to store.
    pub checkpoint: Checkpoint,
    /// Whether it releases the lease.
    pub release: bool,
    /// The lease counter when the write was issued: a release is
    /// conditional on it (as KCL's conditional update on `leaseCounter`), so
    /// it fails once the lease was taken again, even by the same worker.
    pub counter: u64,
}

/// One shard of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamShard {
    /// Shard id.
    pub id: String,
    /// Parents.
    pub parents: Vec<String>,
    /// Records written so far.
    pub records: u64,
    /// Still receiving records.
    pub open: bool,
}

/// What one consumer is reading.
#[derive(Debug, Clone)]
pub struct Reading {
    /// Next record.
    pub pos: u64,
    /// Last successful lease renewal.
    pub renewed: Ms,
}

/// A consumer process (its memory is lost when it dies).
#[derive(Debug, Clone)]
pub struct Consumer {
    /// Unique per process instance.
    pub instance: u64,
    /// Newest view seen.
    pub view: PodView,
    /// Shards being read.
    pub reading: BTreeMap<String, Reading>,
    /// When it next looks at its annotation.
    pub next_refresh: Ms,
    /// When it next renews its leases.
    pub next_renew: Ms,
    /// Got SIGTERM.
    pub terminating: bool,
}

/// A pod: the API object and the process on its node.
#[derive(Debug, Clone)]
pub struct SimPod {
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
    /// Node index.
    pub node: usize,
    /// Ready since (API view).
    pub ready_since: Option<Ms>,
    /// Deletion timestamp and grace seconds.
    pub deletion: Option<(Ms, i64)>,
    /// The API object exists.
    pub object: bool,
    /// Annotation value on the object.
    pub annotation: Option<String>,
    /// The process, when running.
    pub process: Option<Consumer>,
    /// When a (re)started process comes up.
    pub start_at: Option<Ms>,
    /// When the kubelet kills the process (grace deadline or force deletion).
    pub kill_at: Option<Ms>,
    /// What the pod's status says of its containers: what the kubelet last
    /// reported (it lags, and stops while the node is cut off).
    pub containers: Containers,
    /// Bound to a node (`spec.nodeName`); an unscheduled pod never starts.
    pub scheduled: bool,
    /// Whether a process of this pod ever started (the truth, which the
    /// status reports late).
    pub started_once: bool,
    /// Creation time.
    pub created: Ms,
    /// Whether the API server generated its name (a Deployment's pod);
    /// `false`: a StatefulSet's, whose name a later pod takes again.
    pub generated_name: bool,
}

impl SimPod {
    /// What the kubelet would report of the containers now.
    pub fn true_containers(&self) -> Containers {
        match (&self.process, self.started_once) {
            (Some(_), _) => Containers::Running,
            (None, false) => Containers::NeverRan,
            // Stopped for good only once the pod is terminating; otherwise
            // the kubelet restarts it (the status says it ran and will again).
            (None, true) if self.deletion.is_some() => Containers::Stopped,
            (None, true) => Containers::Running,
        }
    }
}

/// The world's timing rules (match the ShardGroup spec of the run).
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// With a lease table (consumers take leases, the operator reads it).
    pub lease_table: bool,
    /// Lease failover, ms.
    pub failover: Ms,
    /// Longest delay before a consumer notices a new annotation, ms.
    pub max_refresh: Ms,
    /// Longest lag of a lease write, ms.
    pub max_lease_lag: Ms,
}

/// Counters of what happened.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Records read (with repeats).
    pub records_read: u64,
    /// Records read again after a move or crash.
    pub records_repeated: u64,
}

/// The world.
#[derive(Debug, Clone)]
pub struct World {
    /// Simulated time.
    pub now: Ms,
    /// Rules.
    pub rules: Rules,
    /// Pods, including deleted ones whose process may still run.
    pub pods: Vec<SimPod>,
    /// Nodes: partitioned until.
    pub nodes: Vec<Option<Ms>>,
    /// The stream.
    pub stream: Vec<StreamShard>,
    /// Lease table.
    pub leases: BTreeMap<String, LeaseRow>,
    /// Lagging lease writes.
    pub lease_queue: Vec<LeaseWrite>,
    /// Highest record read per shard (exclusive).
    pub high_water: BTreeMap<String, u64>,
    /// First invariant violation.
    pub violation: Option<String>,
    /// Counters.
    pub counts: Counts,
    next_instance: u64,
}

impl World {
    /// An empty world.
    pub fn new(rules: Rules) -> Self {
        Self {
            now: 0,
            rules,
            pods: Vec::new(),
            nodes: vec![None; 3],
            stream: Vec::new(),
            leases: BTreeMap::new(),
            lease_queue: Vec::new(),
            high_water: BTreeMap::new(),
            violation: None,
            counts: Counts::default(),
            next_instance: 0,
        }
    }

    /// Records the first violation.
    pub fn violate(&mut self, what: String) {
        if self.violation.is_none() {
            self.violation = Some(format!("t={}ms: {what}", self.now));
        }
    }

    /// Whether node `n` is cut off.
    pub fn partitioned(&self, node: usize) -> bool {
        self.nodes[node].is_some_and(|until| until > self.now)
    }

    /// A fresh process.
    pub fn new_process(&mut self, rng: &mut Rng) -> Consumer {
        self.next_instance += 1;
        Consumer {
            instance: self.next_instance,
            view: PodView::default(),
            reading: BTreeMap::new(),
            next_refresh: self.now,
            next_renew: self.now + rng.range(500, 1500),
            terminating: false,
        }
    }

    /// Whether a shard's checkpoint is `SHARD_END`.
    pub fn complete(&self, shard: &str) -> bool {
        self.leases
            .get(shard)
            .is_some_and(|l| l.checkpoint == Checkpoint::End)
    }

    /// Lands the lease writes that are due (conditional on ownership).
    pub fn land_lease_writes(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.lease_queue)
            .into_iter()
            .partition(|w| w.at <= now);
        self.lease_queue = later;
        for w in due {
            let Some(row) = self.leases.get_mut(&w.shard) else {
                continue;
            };
            if row.owner.as_deref() != Some(w.owner.as_str()) {
                continue; // KCL checkpoints are conditional on the lease.
            }
            if w.release && row.counter != w.counter {
                // Taken again since (a re-acquire after a fenced stop): the
                // late release must not free a lease that is being read.
                continue;
            }
            if row.checkpoint != Checkpoint::End {
                row.checkpoint = w.checkpoint;
            }
            if w.release {
                row.owner = None;
                row.counter += 1;
                row.changed = now;
            }
        }
    }

    /// Runs every live consumer process once.
    pub fn run_consumers(&mut self, rng: &mut Rng) {
        for i in 0..self.pods.len() {
            if self.pods[i].process.is_some() {
                self.run_consumer(i, rng);
            }
        }
        self.check_readers();
    }

    fn run_consumer(&mut self, i: usize, rng: &mut Rng) {
        let now = self.now;
        let rules = self.rules;
        let cut = self.partitioned(self.pods[i].node);
        let name = self.pods[i].name.clone();
        let mut c = self.pods[i].process.take().expect("a process");
        // 1. Look at the annotation (not when cut off from the API).
        if now >= c.next_refresh && !cut {
            c.next_refresh = now + rng.range(100, rules.max_refresh);
            match self.pods[i].annotation.as_deref() {
                Some(a) => {
                    if let Ok(view) = PodView::from_annotation(a)
                        && view.epoch >= c.view.epoch
                    {
                        c.view = view;
                    }
                }
                // No annotation: this pod has no shards (it left the
                // assignment), whatever it saw before.
                None => {
                    c.view.active.clear();
                    c.view.revoking.clear();
                }
            }
        }
        // 2. Stop what is no longer active (and fence on failed renewals).
        let active: BTreeSet<String> = c.view.active.iter().cloned().collect();
        let stale: Vec<String> = c
            .reading
            .iter()
            .filter(|(s, r)| {
                !active.contains(*s) || (rules.lease_table && now - r.renewed >= rules.failover / 2)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in stale {
            let r = c.reading.remove(&shard).expect("reading");
            self.stop(&name, &shard, Checkpoint::At(r.pos), rng, cut);
        }
        // 3. Renew leases.
        if rules.lease_table && now >= c.next_renew && !cut {
            c.next_renew = now + rng.range(500, 1500);
            let mut lost = Vec::new();
            for (shard, r) in c.reading.iter_mut() {
                match self.leases.get_mut(shard) {
                    Some(row) if row.owner.as_deref() == Some(name.as_str()) => {
                        row.counter += 1;
                        row.changed = now;
                        r.renewed = now;
                    }
                    _ => lost.push(shard.clone()),
                }
            }
            for shard in lost {
                c.reading.remove(&shard);
            }
        }
        // 4. Start active shards (not while terminating and nothing active).
        for shard in &c.view.active {
            if c.reading.contains_key(shard) || !self.stream.iter().any(|s| &s.id == shard) {
                continue;
            }
            if let Some(pos) = self.acquire(&name, shard, cut) {
                self.check_parents(shard);
                c.reading
                    .insert(shard.clone(), Reading { pos, renewed: now });
            }
        }
        // 5. Read some records, in order.
        let shards: Vec<String> = c.reading.keys().cloned().collect();
        for shard in shards {
            let Some(s) = self.stream.iter().find(|s| s.id == shard).cloned() else {
                continue;
            };
            let r = c.reading.get_mut(&shard).expect("reading");
            let to = (r.pos + rng.range(0, 5).unsigned_abs()).min(s.records);
            if to > r.pos {
                let from = r.pos;
                r.pos = to;
                self.read(&shard, from, to);
            }
            if !s.open && r.pos >= s.records {
                // Shard end: checkpoint SHARD_END and let go.
                c.reading.remove(&shard);
                self.stop(&name, &shard, Checkpoint::End, rng, cut);
            } else if rng.chance(0.1) {
                let pos = c.reading[&shard].pos;
                self.checkpoint(&name, &shard, Checkpoint::At(pos), rng, cut);
            }
        }
        // 6. A terminating consumer exits once it holds nothing.
        let done = c.terminating && c.reading.is_empty() && c.view.active.is_empty();
        if done {
            self.pods[i].kill_at = Some(now);
        }
        self.pods[i].process = Some(c);
    }

    /// Takes the lease (or, without a lease table, just reads the
    /// checkpoint); the position to read from, or `None`.
    fn acquire(&mut self, me: &str, shard: &str, cut: bool) -> Option<u64> {
        let now = self.now;
        let rules = self.rules;
        let row = self.leases.entry(shard.to_owned()).or_insert(LeaseRow {
            owner: None,
            counter: 0,
            changed: now,
            checkpoint: Checkpoint::At(0),
        });
        let pos = match row.checkpoint {
            Checkpoint::End => return None,
            Checkpoint::At(p) => p,
        };
        if !rules.lease_table {
            return Some(pos);
        }
        if cut {
            return None;
        }
        let free = row.owner.is_none()
            || row.owner.as_deref() == Some(me)
            || now - row.changed >= rules.failover;
        if !free {
            return None;
        }
        row.owner = Some(me.to_owned());
        row.counter += 1;
        row.changed = now;
        Some(pos)
    }

    fn checkpoint(&mut self, me: &str, shard: &str, cp: Checkpoint, rng: &mut Rng, cut: bool) {
        self.write_lease(me, shard, cp, false, rng, cut);
    }

    fn stop(&mut self, me: &str, shard: &str, cp: Checkpoint, rng: &mut Rng, cut: bool) {
        self.write_lease(me, shard, cp, true, rng, cut);
    }

    fn write_lease(
        &mut self,
        me: &str,
        shard: &str,
        cp: Checkpoint,
        release: bool,
        rng: &mut Rng,
        cut: bool,
    ) {
        if !self.rules.lease_table {
            // The checkpoint store without leases: written at once.
            if let Some(row) = self.leases.get_mut(shard)
                && row.checkpoint != Checkpoint::End
            {
                row.checkpoint = cp;
            }
            return;
        }
        if cut {
            return; // DynamoDB unreachable: the write is lost.
        }
        let at = self.now + rng.range(0, self.rules.max_lease_lag);
        let counter = self.leases.get(shard).map_or(0, |row| row.counter);
        self.lease_queue.push(LeaseWrite {
            counter,
            at,
            shard: shard.to_owned(),
            owner: me.to_owned(),
            checkpoint: cp,
            release,
        });
    }

    /// Records `from..to` of `shard` as read; checks nothing was skipped.
    fn read(&mut self, shard: &str, from: u64, to: u64) {
        let high = self.high_water.get(shard).copied().unwrap_or(0);
        if from > high {
            self.violate(format!(
                "records {high}..{from} of {shard} skipped (read resumed at {from})"
            ));
        }
        self.counts.records_read += to - from;
        self.counts.records_repeated += high.min(to).saturating_sub(from);
        self.high_water.insert(shard.to_owned(), high.max(to));
    }

    fn check_parents(&mut self, shard: &str) {
        let parents = self
            .stream
            .iter()
            .find(|s| s.id == shard)
            .map(|s| s.parents.clone())
            .unwrap_or_default();
        for p in parents {
            if !self.complete(&p) {
                self.violate(format!(
                    "child {shard} read before its parent {p} completed"
                ));
            }
        }
    }

    /// Never two processes reading one shard.
    fn check_readers(&mut self) {
        let mut readers: BTreeMap<&str, &str> = BTreeMap::new();
        let mut clash = None;
        for pod in &self.pods {
            let Some(c) = &pod.process else { continue };
            for shard in c.reading.keys() {
                if let Some(other) = readers.insert(shard, &pod.name) {
                    clash = Some(format!("{shard} read by {other} and {} at once", pod.name));
                }
            }
        }
        if let Some(what) = clash {
            self.violate(what);
        }
    }
}
