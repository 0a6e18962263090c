//! The demo's control loop: every tick it observes the stream and the lease
//! table through the real Kinesis source, builds the controller's
//! [`Observation`](shardring_core::Observation) from the in-process
//! cluster and runs the controller core's cycle ([`shardring_core::cycle()`],
//! the operator's: the real plan step, then the writes in the operator's
//! order: document, pod annotations projected into the consumers' files,
//! status). It also plays kubelet (reaping
//! pods whose consumer exited) and turns every published change into move
//! log lines and a per-pod table. With the consumer endpoint (the static
//! act) each cycle also takes its acknowledged releases into the
//! observation and serves the pods' views as its last step, through the
//! operator's own `endpoint_sync`.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::cluster::{Cluster, DemoPod};
use super::report::{self, MoveEvent, MoveKind};
use shardring::controller::ControllerMetrics;
use shardring::endpoint::EndpointState;
use shardring::source::TopologySource;
use shardring::source::kinesis::{KinesisObservation, KinesisTopologySource};
use shardring_core::cycle::{self, cycle};
use shardring_core::group_state::{TopologyMemory, TopologyRead};
use shardring_core::leases::LeaseTable;
use shardring_core::observation::{LeaseObservation, TopologyObservation};
use shardring_core::plan::{Decision, DocumentWrite, PlanMemory};
use shardring_core::topology::{SourceError, Topology};
use shardring_crds::{AssignmentDocument, ShardPhase};

/// The state the control loop and the story share.
#[derive(Debug)]
pub struct Shared {
    /// The in-process cluster.
    pub cluster: Cluster,
    /// The last good topology read (engine shards with lifecycle states),
    /// kept as the operator keeps it.
    pub topology: TopologyMemory,
    /// The last lease snapshot.
    pub leases: Option<LeaseTable>,
    /// When the published document last changed.
    pub published_at: Option<Timestamp>,
    /// Every move the controller published, in order.
    pub moves: Vec<MoveEvent>,
    /// The story's current phase (moves are counted per phase).
    pub phase: &'static str,
    /// Consumers that died without being asked to, and other problems.
    pub problems: Vec<String>,
    /// Plans run.
    pub plans: u64,
    /// The consumer endpoint the cycle publishes views into, if any.
    pub endpoint: Option<CycleEndpoint>,
    /// What the controller's plans keep between them (a restarted
    /// controller starts a new one).
    pub plan_memory: PlanMemory,
    source_name: String,
}

/// The consumer endpoint a demo cycle feeds, with the controller metrics
/// its publish step observes (release-to-activation latency).
pub struct CycleEndpoint {
    /// The endpoint's views, releases and CA.
    pub state: EndpointState,
    metrics: ControllerMetrics,
}

impl std::fmt::Debug for CycleEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleEndpoint").finish_non_exhaustive()
    }
}

impl CycleEndpoint {
    /// Feeds `state`.
    pub fn new(state: EndpointState) -> Self {
        Self {
            state,
            metrics: ControllerMetrics::default(),
        }
    }
}

impl Shared {
    /// Shared state around `cluster`.
    pub fn new(cluster: Cluster, source_name: String) -> Self {
        Self {
            cluster,
            topology: TopologyMemory::default(),
            leases: None,
            published_at: None,
            moves: Vec::new(),
            phase: "start",
            problems: Vec::new(),
            plans: 0,
            endpoint: None,
            plan_memory: PlanMemory::default(),
            source_name,
        }
    }

    /// One reconcile at `now` with the source's read result, then kubelet's
    /// turn. Pods are reaped after the plan, so the controller sees every
    /// deleted pod terminating at least once, as its watch would (and the
    /// terminated status of its container before it is gone).
    pub fn reconcile(&mut self, observed: Result<KinesisObservation, SourceError>, now: Timestamp) {
        let (topology, leases) = self.kinesis_reads(observed, now);
        self.plan_and_apply(topology, leases, now);
        self.kubelet();
    }

    /// [`Self::reconcile`] with what the operator's `Sources` read (the last
    /// good topology kept across failed reads), without a lease table.
    pub fn reconcile_observed(&mut self, topology: TopologyObservation, now: Timestamp) {
        self.plan_and_apply(topology, LeaseObservation::NotConfigured, now);
        self.kubelet();
    }

    /// [`Self::reconcile`] of a fixed topology (a static source, whose read
    /// never fails) without a lease table.
    pub fn reconcile_fixed(&mut self, topology: &Topology, now: Timestamp) {
        let read = TopologyRead::Read(topology.clone());
        let error = self.topology.apply(read, now);
        let topology = self.topology.observation(self.source_name.clone(), error);
        self.plan_and_apply(topology, LeaseObservation::NotConfigured, now);
        self.kubelet();
    }

    fn kubelet(&mut self) {
        let reaped = self.cluster.reap();
        for name in &reaped.killed {
            println!("  kubelet: {name} did not stop within its grace period: killed");
        }
        for name in &reaped.removed {
            println!("  kubelet: {name} exited; its pod object is gone");
        }
        for (name, status) in reaped.crashed {
            let problem = format!("consumer {name} exited unexpectedly ({status})");
            println!("  {problem}");
            self.problems.push(problem);
        }
    }

    /// The topology and lease observations of a Kinesis read.
    fn kinesis_reads(
        &mut self,
        observed: Result<KinesisObservation, SourceError>,
        now: Timestamp,
    ) -> (TopologyObservation, LeaseObservation) {
        let (read, leases) = match observed {
            Ok(observation) => {
                let topology = Topology {
                    shards: observation.lifecycle.shards.into(),
                };
                let read = match observation.stale {
                    None => TopologyRead::Read(topology),
                    Some(error) => TopologyRead::Stale(topology, error),
                };
                let leases = match (observation.leases, observation.lease_error) {
                    (Some(table), _) => {
                        self.leases = Some(table.clone());
                        LeaseObservation::Read(table)
                    }
                    (None, Some(error)) => LeaseObservation::Failed(error.to_string()),
                    (None, None) => LeaseObservation::Failed("no lease snapshot".into()),
                };
                (read, leases)
            }
            Err(error) => (
                TopologyRead::Failed(error),
                LeaseObservation::Failed("the source read failed".into()),
            ),
        };
        let error = self.topology.apply(read, now);
        let topology = self.topology.observation(self.source_name.clone(), error);
        (topology, leases)
    }

    fn plan_and_apply(
        &mut self,
        topology: TopologyObservation,
        leases: LeaseObservation,
        now: Timestamp,
    ) {
        let previous = self.cluster.published.clone();
        let mut reconcile = self
            .cluster
            .reconcile(topology, leases)
            .with_endpoint(self.endpoint.as_ref().map(|e| (&e.state, &e.metrics)))
            .with_plan_memory(&mut self.plan_memory);
        let done = cycle::ready(cycle(&mut reconcile, now));
        self.plans += 1;
        let decision = match done.into_result() {
            Ok((decision, _)) => decision,
            Err(error) => {
                self.problems
                    .push(format!("applying epoch failed: {error}"));
                return;
            }
        };
        if let Some(DocumentWrite { document: doc, .. }) = &decision.document_write {
            self.published_at = Some(now);
            let events = diff(
                previous.as_deref(),
                doc,
                &decision,
                &self.cluster.pods,
                self.phase,
            );
            for event in &events {
                println!("{}", report::move_line(event));
            }
            self.moves.extend(events);
            println!("{}", report::pod_table(doc, &self.cluster));
        }
    }

    /// Whether the published assignment is settled: every readable shard is
    /// active on a live pod, nothing is revoking or pending, and a lease
    /// scan taken after the last publish shows each active shard's lease
    /// held by its published owner.
    pub fn settled(&self) -> bool {
        let none = LeaseTable::default();
        let leases = match (&self.leases, self.cluster.group.spec.lease_table.is_some()) {
            (Some(leases), _) => leases,
            // Without a lease table there is nothing to scan.
            (None, false) => &none,
            (None, true) => return false,
        };
        let (Some(doc), Some(published_at)) = (&self.cluster.published, self.published_at) else {
            return false;
        };
        let leased = self.cluster.group.spec.lease_table.is_some();
        if leased && leases.scanned_at.is_none_or(|at| at <= published_at) {
            return false;
        }
        let live = self.cluster.live_pods();
        doc.shards.iter().all(|(id, record)| match record.state {
            ShardPhase::Complete => true,
            ShardPhase::Revoking | ShardPhase::Pending | ShardPhase::Held => false,
            ShardPhase::Active => record.owner.as_ref().is_some_and(|owner| {
                live.contains(owner)
                    && (!leased
                        || leases
                            .get(id)
                            .is_some_and(|lease| lease.owner.as_ref() == Some(owner)))
            }),
        })
    }

    /// Most minus fewest active shards over live pods.
    pub(crate) fn load_spread(&self) -> usize {
        let Some(doc) = &self.cluster.published else {
            return usize::MAX;
        };
        let loads: Vec<usize> = self
            .cluster
            .live_pods()
            .iter()
            .map(|pod| doc.pods.get(pod).map_or(0, |p| p.active.len()))
            .collect();
        let max = loads.iter().copied().max().unwrap_or(0);
        let min = loads.iter().copied().min().unwrap_or(0);
        max - min
    }

    /// Revokes started in `phase` (the moves decided then).
    pub fn revokes_in(&self, phase: &str) -> u64 {
        self.moves
            .iter()
            .filter(|e| e.phase == phase && matches!(e.kind, MoveKind::Revoked { .. }))
            .count() as u64
    }

    /// Completed handoffs per phase.
    pub fn handoffs_by_phase(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for event in &self.moves {
            if matches!(event.kind, MoveKind::HandedOver { .. }) {
                *out.entry(event.phase).or_insert(0) += 1;
            }
        }
        out
    }
}

/// The move log entries of one publish: revokes started, handoffs
/// completed, shards placed and shards finished.
fn diff(
    previous: Option<&AssignmentDocument>,
    doc: &AssignmentDocument,
    decision: &Decision,
    pods: &BTreeMap<String, DemoPod>,
    phase: &'static str,
) -> Vec<MoveEvent> {
    let mut events = Vec::new();
    for (id, record) in &doc.shards {
        let before = previous.and_then(|p| p.shards.get(id));
        let event = |from: Option<String>, to: Option<String>, kind: MoveKind| MoveEvent {
            epoch: doc.epoch,
            shard: id.clone(),
            from,
            to,
            kind,
            phase,
        };
        let before_state = before.map(|b| b.state);
        match (before_state, record.state) {
            (Some(ShardPhase::Active), ShardPhase::Revoking) => {
                let from = record.owner.clone();
                let pod = from
                    .as_ref()
                    .and_then(|name| pods.get(name))
                    .map(|p| &p.record);
                let reason = match pod {
                    None => "required: pod gone",
                    Some(p) if p.deletion_timestamp.is_some() => "required: pod terminating",
                    Some(_) => "optional: rebalance",
                };
                let to = record.handoff.as_ref().and_then(|h| h.to.clone());
                events.push(event(from, to, MoveKind::Revoked { reason }));
            }
            (Some(ShardPhase::Revoking), ShardPhase::Active) => {
                let from = before.and_then(|b| b.owner.clone());
                let completed = decision.handoffs.iter().find(|h| &h.shard == id);
                events.push(event(
                    from,
                    record.owner.clone(),
                    MoveKind::HandedOver {
                        evidence: completed.map_or("-", |c| c.evidence.label()),
                        after: completed.map_or(Duration::ZERO, |c| c.duration),
                    },
                ));
            }
            (None | Some(ShardPhase::Pending), ShardPhase::Active) => {
                let reason = if before_state == Some(ShardPhase::Pending) {
                    "parents complete"
                } else if record.parents.is_empty() {
                    "new shard"
                } else {
                    "new child shard"
                };
                events.push(event(
                    None,
                    record.owner.clone(),
                    MoveKind::Placed { reason },
                ));
            }
            (None, ShardPhase::Pending) => {
                events.push(event(None, None, MoveKind::Pending));
            }
            (Some(ShardPhase::Active | ShardPhase::Revoking), ShardPhase::Complete) => {
                events.push(event(
                    before.and_then(|b| b.owner.clone()),
                    None,
                    MoveKind::Finished,
                ));
            }
            _ => {}
        }
    }
    events
}

/// Runs the control loop every `tick` until `stop`.
pub async fn run(
    shared: Arc<Mutex<Shared>>,
    source: Arc<KinesisTopologySource>,
    tick: Duration,
    stop: CancellationToken,
) {
    let mut next = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next.into()) => {}
        }
        next = Instant::now() + tick;
        let now = Timestamp::now();
        let observed = source.observe_or_last(now).await;
        let mut state = shared.lock();
        state.reconcile(observed, now);
    }
}

/// The source's description, as status shows it.
pub fn describe(source: &KinesisTopologySource) -> String {
    source.describe()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::cluster::GroupTiming;
    use crate::demo::consumers::ConsumerProcess;
    use shardring_engine::{Shard, ShardState};

    fn pod_process() -> ConsumerProcess {
        // A stand-in consumer that exits at once on SIGTERM.
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("run sleep");
        ConsumerProcess::from_child(child)
    }

    fn add(shared: &mut Shared, name: &str) {
        let dir = shared.cluster.pod_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        shared.cluster.add_pod(
            name,
            dir.join("annotations"),
            dir.join("records.jsonl"),
            pod_process(),
            Timestamp::now(),
        );
    }

    fn failed_read() -> Result<KinesisObservation, SourceError> {
        Err(SourceError::Other("no stream in this test".into()))
    }

    /// The cluster model with the real plan step: placement, a graceful
    /// deletion revokes at once, the pod object goes when its process exits,
    /// and only then is the shard handed over (pod gone after a graceful
    /// deletion is the evidence; the lease table is not readable here).
    #[test]
    fn graceful_deletion_hands_shards_over_after_the_pod_is_gone() {
        let dir = std::env::temp_dir().join(format!(
            "shardring-demo-cluster-{}-{}",
            std::process::id(),
            Timestamp::now().as_nanosecond()
        ));
        let timing = GroupTiming {
            drain_timeout: Duration::from_secs(60),
            lease_failover: Duration::from_secs(10),
            rebalance_delay: Duration::from_secs(0),
        };
        let cluster = Cluster::new("orders", "orders", "leases", timing, &dir);
        let mut shared = Shared::new(cluster, "kinesis:orders".into());
        let read = TopologyRead::Read(Topology {
            shards: (0..4)
                .map(|i| Shard {
                    id: format!("shardId-00000000000{i}"),
                    hash_key_range: None,
                    parents: Vec::new(),
                    state: ShardState::Open,
                })
                .collect::<Vec<_>>()
                .into(),
        });
        shared.topology.apply(read, Timestamp::now());
        add(&mut shared, "a");
        add(&mut shared, "b");
        shared.reconcile(failed_read(), Timestamp::now());
        let doc = shared.cluster.published.clone().expect("published");
        assert_eq!(doc.epoch, 1);
        assert_eq!(doc.pods["a"].active.len() + doc.pods["b"].active.len(), 4);
        // Each pod's downward-API file carries its view.
        let text = std::fs::read_to_string(dir.join("pods/a/annotations")).unwrap();
        let view =
            shardring_consumer::view::parse::view_from_annotations_file(&text, "default/orders")
                .unwrap()
                .unwrap();
        assert_eq!(view.active, doc.pods["a"].active);

        let a_shards = doc.pods["a"].active.clone();
        assert!(
            shared
                .cluster
                .delete_pod("a", Duration::from_secs(30), Timestamp::now())
        );
        shared.reconcile(failed_read(), Timestamp::now());
        let doc = shared.cluster.published.clone().unwrap();
        assert_eq!(doc.pods["a"].revoking, a_shards, "revoked at once");
        assert!(doc.pods["b"].active.iter().all(|s| !a_shards.contains(s)));
        assert!(!shared.settled());

        // `sleep` exits on SIGTERM; the status shows its container
        // terminated before the pod object goes: the handoff completes on
        // the kubelet's word.
        let deadline = Instant::now() + Duration::from_secs(10);
        while shared.cluster.pods.contains_key("a") {
            assert!(Instant::now() < deadline, "pod a was not reaped");
            std::thread::sleep(Duration::from_millis(20));
            shared.reconcile(failed_read(), Timestamp::now());
        }
        shared.reconcile(failed_read(), Timestamp::now());
        let doc = shared.cluster.published.clone().unwrap();
        assert_eq!(doc.pods["b"].active.len(), 4);
        let handed: Vec<_> = shared
            .moves
            .iter()
            .filter(|m| {
                matches!(
                    m.kind,
                    MoveKind::HandedOver {
                        evidence: "pod_stopped",
                        ..
                    }
                )
            })
            .map(|m| m.shard.clone())
            .collect();
        assert_eq!(handed, a_shards);
        assert_eq!(
            shared.handoffs_by_phase().get("start"),
            Some(&a_shards.len())
        );
        assert!(shared.problems.is_empty());
        shared.cluster.kill_all();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
