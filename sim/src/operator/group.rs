//! One ShardGroup of the simulated operator ([`Group`]): its API objects
//! (the ShardGroup, the published document and its version, the status,
//! writes that will land late, each a `Write`), the operator's memory of it
//! (last good topology, previous lease scan, plan memory, the endpoint's
//! release acknowledgements and load book, its failures in a row, when it
//! reconciles next; all lost in a crash) and what the checks count of it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::crds::shard_group::{KinesisSource, ShardSource};
use crate::crds::{AssignmentDocument, PodView, ShardGroup, ShardGroupStatus, fixtures};
use crate::world::Ms;
use shardring_core::group_state::{DocumentMemory, TopologyMemory};
use shardring_core::leases::LeaseTable;
use shardring_core::load::LoadBook;
use shardring_core::observation::ReleaseAck;
use shardring_core::observation::{Published, PublishedVersion};
use shardring_core::plan::PlanMemory;
use shardring_core::retry::Failures;

/// The namespace of the simulated objects.
pub const NAMESPACE: &str = "sim";

/// The source read every this often by the simulated groups with a lease
/// table (Kinesis streams, which split and merge): the refresh that polls
/// for new shards and completed parents.
pub const KINESIS_REFRESH: &str = "5s";

/// One ShardGroup: its API objects and the operator's memory of it.
#[derive(Debug, Clone)]
pub struct Group {
    /// The ShardGroup (spec; its status is `status`).
    pub shard_group: ShardGroup,
    /// The published document (ConfigMap).
    pub doc: Option<AssignmentDocument>,
    /// The ConfigMap's resourceVersion: bumped by every document write that lands.
    pub doc_version: u64,
    /// The ShardGroup status.
    pub status: Option<ShardGroupStatus>,
    pub(super) late: Vec<(Ms, Write)>,
    /// The last good topology the operator read (lost in a crash).
    pub(super) topology: TopologyMemory,
    pub(super) lease_prev: Option<LeaseTable>,
    /// Next reconcile.
    pub next_reconcile: Ms,
    /// Handoff durations (ms) by evidence label.
    pub handoffs: Vec<(&'static str, u64)>,
    /// Owner changes of active shards.
    pub moves: u64,
    pub(super) last_owner: BTreeMap<String, String>,
    /// The release acknowledgements the endpoint holds, unvalidated: the
    /// core's rule alone must keep them safe (lost in a crash).
    pub releases: BTreeMap<String, ReleaseAck>,
    /// A late document write landed while a reconcile ran: its ConfigMap
    /// watch event wakes the next one.
    pub(super) landed_during_reconcile: bool,
    /// An event held while one of its reconcile's writes was on its way
    /// was a change: it wakes the next reconcile.
    pub(super) woken_during_reconcile: bool,
    /// Failed reconciles in a row: the runtime's retry rule
    /// ([`shardring_core::retry`]) schedules the next one from them.
    pub(super) failures: Failures,
    /// The latest time anything kept the operator from doing its part for
    /// this group on time: it was down, a write failed, landed late or was
    /// refused (until the next clean reconcile: its retries back off), a
    /// read failed or was stale, its pod watch relisted, a node was cut
    /// off, or the plan was blocked (no eligible pod to take a shard, no
    /// topology). The bound on a revoke counts from the revoke or from
    /// this, whichever is later (`crate::revokes`).
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
    pub(super) plan_memory: PlanMemory,
    /// The document this operator last wrote (a write that went through)
    /// or read of the group, at its ConfigMap's version: the operator's
    /// own memory of it (lost in a crash).
    pub(super) document: DocumentMemory,
    /// The document as the operator's ConfigMap cache holds it: the
    /// published one as of the start of the step (its watch delivers a
    /// write a step later).
    pub(super) cached: Option<Arc<AssignmentDocument>>,
    /// Writes that landed, by kind.
    pub writes: WriteCounts,
}

/// How many writes of each kind landed at the simulated API server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Document (ConfigMap) writes.
    pub documents: u64,
    /// Pod annotation writes.
    pub annotations: u64,
    /// Status writes.
    pub statuses: u64,
    /// Status writes that changed more than the move budget's log (moves
    /// leave it as its window passes, at the next reconcile).
    pub statuses_beyond_move_log: u64,
}

/// A write the API server will apply later.
#[derive(Debug, Clone)]
pub(super) enum Write {
    /// The document, conditioned on the ConfigMap version the reconcile read
    /// (`Absent`: a create, refused once a ConfigMap exists).
    Doc(Box<AssignmentDocument>, PublishedVersion),
    Annotation(String, String, Option<PodView>),
    Status(Box<ShardGroupStatus>),
}

impl Group {
    /// Group `name` of the simulated namespace on pool `consumers`, with a
    /// Kinesis stream and its lease table or static partitions, and the
    /// given timings.
    pub fn new(name: &str, lease_table: bool, drain: &str, failover: &str, delay: &str) -> Self {
        let mut group = fixtures::static_group(NAMESPACE, name, "consumers", 1, "shard-{index}");
        if lease_table {
            // A Kinesis stream with its KCL lease table (the world's stream
            // splits and merges); without one, static partitions.
            group.spec.source = ShardSource::Kinesis(KinesisSource {
                stream_name: Some(name.into()),
                stream_arn: None,
                region: Some("us-east-1".into()),
                endpoint: None,
                refresh_interval: KINESIS_REFRESH.into(),
            });
            group.spec.lease_table = Some(fixtures::lease_table("app"));
        }
        group.spec.handoff = fixtures::handoff(drain, failover);
        group.spec.rebalance = fixtures::rebalance(delay);
        Self {
            shard_group: group,
            doc: None,
            doc_version: 0,
            status: None,
            late: Vec::new(),
            topology: TopologyMemory::default(),
            lease_prev: None,
            next_reconcile: 0,
            handoffs: Vec::new(),
            moves: 0,
            last_owner: BTreeMap::new(),
            releases: BTreeMap::new(),
            landed_during_reconcile: false,
            woken_during_reconcile: false,
            failures: Failures::default(),
            last_fault: Ms::MIN,
            blocked_without_pods: false,
            loads: LoadBook::default(),
            revokes: Vec::new(),
            pod_changes: Vec::new(),
            plan_memory: PlanMemory::default(),
            document: DocumentMemory::default(),
            cached: None,
            writes: WriteCounts::default(),
        }
    }

    /// `namespace/name`, as the pool's balance names the group.
    pub fn name(&self) -> String {
        self.shard_group.qualified_name()
    }

    /// Whether its consumers take leases from a lease table.
    pub fn lease_table(&self) -> bool {
        self.shard_group.spec.lease_table.is_some()
    }

    /// A fault on the operator's side at `at` (see [`Self::last_fault`]).
    pub(crate) fn fault(&mut self, at: Ms) {
        self.last_fault = self.last_fault.max(at);
    }

    /// The operator crashed: its memory of this group is lost, and the new
    /// one reconciles it when it starts at `up`.
    pub(super) fn forget_memory(&mut self, up: Ms) {
        self.topology.reset();
        self.lease_prev = None;
        self.blocked_without_pods = false;
        self.next_reconcile = up;
        self.failures = Failures::default();
        self.fault(up);
        self.releases.clear();
        self.loads = LoadBook::default();
        self.plan_memory = PlanMemory::default();
        self.document.reset();
    }

    /// The freshest document the operator knows of this group: of its
    /// document table's and the ConfigMap cache's, the higher epoch (as the
    /// operator's pools take a peer's: epochs only grow).
    pub(crate) fn freshest(&self) -> Option<Arc<AssignmentDocument>> {
        match (self.document.latest(), &self.cached) {
            (Some(table), Some(cached)) if cached.epoch > table.epoch => Some(cached.clone()),
            (Some(table), _) => Some(table),
            (None, cached) => cached.clone(),
        }
    }

    /// The published document as this operator's reconcile reads it: the
    /// one it knows at the ConfigMap's version, else the ConfigMap's
    /// (the simulated API server holds it decoded), kept at that version.
    pub(super) fn read_document(&mut self) -> Published {
        let name = self.shard_group.config_map_name();
        let Some(doc) = &self.doc else {
            return self.document.missing();
        };
        let version = self.doc_version.to_string();
        match self.document.at(&name, &version) {
            Some(known) => Published::Document(known),
            None => self
                .document
                .decoded(&name, Some(&version), Ok(doc.clone())),
        }
    }

    /// This operator's own document write went through: the ConfigMap
    /// holds `document` at its new version.
    pub(super) fn wrote_document(&mut self, document: Arc<AssignmentDocument>) {
        let name = self.shard_group.config_map_name();
        self.document
            .apply(&name, self.doc_version.to_string(), document);
    }
}
