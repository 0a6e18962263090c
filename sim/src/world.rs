//! The simulated world outside the operator: pods and their consumer
//! processes, nodes that can be partitioned, each ShardGroup's source (a
//! stream's shards, or static partitions, and their records) and the lease
//! table (with lagging writes). A pod's process consumes every group of its
//! pool, each by the group's annotation. Consumers follow the contract:
//! they act only on the newest view they have seen, read only `active`
//! shards, take a lease before reading (with a lease table), stop, checkpoint
//! and release as soon as a shard is no longer active, fence themselves when
//! they cannot renew, and read records in order from the last checkpoint.
//!
//! Each pod's status is what its kubelet last reported: its containers
//! ([`Containers`]) and readiness, updated only while its node reaches the
//! API, and late (a step or more after the process started or stopped).
//!
//! The invariants on readers are checked as records are read: never two
//! readers of one shard, never a child before its parents completed, never a
//! record skipped. This module holds the world's state; `consumers` the
//! consumers' behaviour and those checks; [`loads`] the shards' load and
//! the consumers' load reports (`balance: throughput` runs only).

use std::collections::BTreeMap;

mod consumers;
pub mod loads;

use super::rng::Rng;
use crate::crds::PodView;
use shardring_core::observation::{Containers, ReleaseAck};

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

/// One shard of a group's stream (or one of its static partitions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamShard {
    /// Shard id (unique over every group's source).
    pub id: String,
    /// The group whose source it is (its index).
    pub group: usize,
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
    /// The newest view of each group seen (by the group's index).
    pub views: Vec<PodView>,
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
    /// Each group's annotation on the object (by the group's index).
    pub annotations: BTreeMap<usize, String>,
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

/// The world's timing rules (match the ShardGroup specs of the run).
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Lease failover, ms.
    pub failover: Ms,
    /// Longest delay before a consumer notices a new annotation, ms.
    pub max_refresh: Ms,
    /// Longest lag of a lease write, ms.
    pub max_lease_lag: Ms,
    /// Consumers acknowledge releases at the operator's endpoint.
    pub acks: bool,
}

/// One ShardGroup's source in the world (by the group's index): its
/// shards, in [`World::stream`] tagged with that index, are read under
/// leases from its KCL lease table (a Kinesis stream, which splits and
/// merges), or, without one, as static partitions with a checkpoint store.
/// The groups' shard ids never collide, so one table of lease rows and one
/// check of readers serve them all.
#[derive(Debug, Clone)]
pub struct Source {
    /// Its consumers take leases, and its operator reads the lease table.
    pub lease_table: bool,
    /// What its shard ids start with.
    pub prefix: String,
    /// Shards created so far (the next id's number).
    created: u32,
}

impl Source {
    /// A source whose shard ids start with `prefix`.
    pub fn new(lease_table: bool, prefix: impl Into<String>) -> Self {
        Self {
            lease_table,
            prefix: prefix.into(),
            created: 0,
        }
    }
}

/// A release acknowledgement on its way to the endpoint.
#[derive(Debug, Clone)]
pub struct AckInFlight {
    /// When it arrives.
    pub at: Ms,
    /// The group (index) whose endpoint route it is sent to.
    pub group: usize,
    /// The shard released.
    pub shard: String,
    /// What the endpoint records.
    pub ack: ReleaseAck,
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
    /// Each group's source (by the group's index).
    pub sources: Vec<Source>,
    /// The shards of every group's source.
    pub stream: Vec<StreamShard>,
    /// Lease rows (of every group's lease table or checkpoint store).
    pub leases: BTreeMap<String, LeaseRow>,
    /// Lagging lease writes.
    pub lease_queue: Vec<LeaseWrite>,
    /// Release acknowledgements on their way to the operator's endpoint.
    pub ack_queue: Vec<AckInFlight>,
    /// Highest record read per shard (exclusive).
    pub high_water: BTreeMap<String, u64>,
    /// First invariant violation.
    pub violation: Option<String>,
    /// Counters.
    pub counts: Counts,
    /// Load (`balance: throughput` runs only).
    pub loads: Option<loads::WorldLoads>,
    next_instance: u64,
    /// The API server's last resourceVersion (of its pods).
    resource_version: u64,
}

impl World {
    /// An empty world of the groups whose sources are `sources`.
    pub fn new(rules: Rules, sources: Vec<Source>) -> Self {
        Self {
            now: 0,
            rules,
            pods: Vec::new(),
            nodes: vec![None; 3],
            sources,
            stream: Vec::new(),
            leases: BTreeMap::new(),
            lease_queue: Vec::new(),
            ack_queue: Vec::new(),
            high_water: BTreeMap::new(),
            violation: None,
            counts: Counts::default(),
            loads: None,
            next_instance: 0,
            resource_version: 0,
        }
    }

    /// Records the first violation.
    pub fn violate(&mut self, what: String) {
        if self.violation.is_none() {
            self.violation = Some(format!("t={}ms: {what}", self.now));
        }
    }

    /// Adds a shard with `parents` to `group`'s source; its id.
    pub fn add_shard(&mut self, group: usize, parents: Vec<String>) -> String {
        let source = &mut self.sources[group];
        let id = format!("{}shard-{:03}", source.prefix, source.created);
        source.created += 1;
        self.stream.push(StreamShard {
            id: id.clone(),
            group,
            parents,
            records: 0,
            open: true,
        });
        id
    }

    /// The group (index) whose source has `shard`.
    pub fn group_of(&self, shard: &str) -> Option<usize> {
        self.stream.iter().find(|s| s.id == shard).map(|s| s.group)
    }

    /// Whether `shard` is read under a lease (its group has a lease table).
    pub fn leased(&self, shard: &str) -> bool {
        self.group_of(shard)
            .is_some_and(|g| self.sources[g].lease_table)
    }

    /// Whether any group has a lease table.
    pub fn any_lease_table(&self) -> bool {
        self.sources.iter().any(|s| s.lease_table)
    }

    /// Whether node `n` is cut off.
    pub fn partitioned(&self, node: usize) -> bool {
        self.nodes[node].is_some_and(|until| until > self.now)
    }

    /// The resourceVersion of the next change to a pod (one counter for
    /// all, as the API server's: a pod recreated under a name never
    /// repeats a version of the pod before it).
    pub fn next_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    /// A fresh process.
    pub fn new_process(&mut self, rng: &mut Rng) -> Consumer {
        self.next_instance += 1;
        Consumer {
            instance: self.next_instance,
            views: vec![PodView::default(); self.sources.len()],
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

    /// Whether `shard` is one a consumer must read once the system is
    /// quiet: with a lease table, not read to its end and its parents read
    /// to theirs; without one, every shard.
    pub fn to_be_read(&self, shard: &StreamShard) -> bool {
        !self.sources[shard.group].lease_table
            || (!self.complete(&shard.id) && shard.parents.iter().all(|p| self.complete(p)))
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
}
