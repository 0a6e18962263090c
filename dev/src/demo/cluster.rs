//! The demo's in-process cluster: the objects a Kubernetes API server would
//! hold for one ShardGroup (the group with its status, its ConsumerPool, the
//! pool's pods, the published document) kept as plain data, plus the kubelet
//! duties the demo needs: a pod's consumer process is started with the pod
//! (its status shows the container running), receives SIGTERM when the pod
//! is deleted gracefully, is killed when the grace period runs out; once the
//! process has exited the status shows the container terminated, and only
//! after that does the pod object disappear. A kill -9 with a force
//! deletion removes the object at once, its status still `running`. A
//! pod's consumer is a process or, in the static act, a task of this
//! process ([`PodProcess`]); kubelet treats both alike. The
//! controller's reconcile is the core's cycle over [`Cluster::reconcile`]:
//! it observes the cluster (with the memory of departed pods its pod watch
//! would keep) and writes to it in the operator's order, projecting each
//! pod's annotation into its downward-API file, the way kubelet does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::ObjectMeta;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::consumers::ConsumerProcess;
use shardring_core::departures::{DepartureMemory, RETENTION};
use shardring_core::group_state::PodRecord;
use shardring_core::observation::Containers;

use shardring_crds::consumer_pool::ConsumerPoolSpec;
use shardring_crds::shard_group::{
    HandoffSpec, KinesisSource, LeaseTableSpec, PoolRef, RebalanceSpec, ShardGroupSpec,
    ShardSource, StaticSource,
};
use shardring_crds::{AssignmentDocument, ConsumerPool, ShardGroup};

pub mod reconcile;

/// Namespace of every demo object.
pub(crate) const NAMESPACE: &str = "default";
/// Label every consumer pod carries (the pool selects it).
pub(crate) const APP_LABEL: (&str, &str) = ("app", "orders");

/// Timing of the demo's ShardGroup, scaled by `--duration-scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupTiming {
    /// `handoff.drainTimeout`.
    pub drain_timeout: Duration,
    /// `handoff.leaseFailover` (also the consumers' failover).
    pub lease_failover: Duration,
    /// `rebalance.delay`.
    pub rebalance_delay: Duration,
}

/// What kubelet runs for a pod: a consumer process, or a consumer task in
/// this process (the static act's pods, whose graceful stop is a
/// cancelled token where a process gets SIGTERM).
#[derive(Debug)]
pub enum PodProcess {
    /// A reference-consumer process.
    Child(ConsumerProcess),
    /// A task of this process.
    Task {
        /// Cancelled on a graceful deletion.
        shutdown: CancellationToken,
        /// The consumer's task.
        handle: JoinHandle<()>,
    },
}

impl From<ConsumerProcess> for PodProcess {
    fn from(process: ConsumerProcess) -> Self {
        Self::Child(process)
    }
}

impl PodProcess {
    /// Asks for a graceful stop (SIGTERM, or the task's shutdown).
    fn terminate(&self) {
        match self {
            Self::Child(process) => process.terminate(),
            Self::Task { shutdown, .. } => shutdown.cancel(),
        }
    }

    /// Stops it at once (SIGKILL, or aborting the task).
    fn kill(&mut self) {
        match self {
            Self::Child(process) => {
                process.kill();
                let _ = process.wait();
            }
            Self::Task { handle, .. } => handle.abort(),
        }
    }

    /// How it ended, once it has.
    fn exited(&mut self) -> Option<String> {
        match self {
            Self::Child(process) => process.exited().map(|status| status.to_string()),
            Self::Task { handle, .. } => handle.is_finished().then(|| "task ended".to_owned()),
        }
    }
}

/// One pod object and the process kubelet runs for it.
#[derive(Debug)]
pub struct DemoPod {
    /// The pod object, as the operator's pod cache records it (the core
    /// translates it into what the plan step sees).
    pub record: PodRecord,
    /// The downward-API annotations file its consumer reads.
    pub annotations_file: PathBuf,
    /// Its consumer's record log.
    pub record_log: PathBuf,
    /// Its consumer (`None` once reaped).
    pub process: Option<PodProcess>,
    /// When kubelet gives up on a graceful stop and kills the process.
    pub kill_at: Option<Instant>,
}

/// The in-process API objects of the demo's ShardGroup.
#[derive(Debug)]
pub struct Cluster {
    /// The ShardGroup, with the status the controller last wrote.
    pub group: ShardGroup,
    /// Its ConsumerPool.
    pub pool: ConsumerPool,
    /// Pods by name.
    pub pods: BTreeMap<String, DemoPod>,
    /// The published document (the ConfigMap's content), shared with the
    /// plan that wrote it, as the operator's cache keeps the document it
    /// wrote (the group's plan memory knows it by that).
    pub published: Option<Arc<AssignmentDocument>>,
    /// Record logs of every pod that ever ran, deleted ones included.
    pub record_logs: Vec<PathBuf>,
    /// The controller's memory of departed pods (what its pod watch saw
    /// leave; a restarted controller starts a new one).
    pub departed: DepartureMemory,
    /// The StatefulSets whose pods the cluster's pods are, by name, with
    /// their replicas (empty until the story makes its pods a set's).
    pub stateful_sets: shardring_core::identity::StatefulSets,
    dir: PathBuf,
    next_uid: u64,
}

/// The StatefulSet of `sets` whose pods are named like `pod` (`<set>-<n>`).
fn set_of(sets: &shardring_core::identity::StatefulSets, pod: &str) -> Option<String> {
    sets.keys()
        .find(|set| {
            pod.strip_prefix(set.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .cloned()
}

/// Formats a Go duration string (`1500ms`) for the spec.
fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

impl Cluster {
    /// A cluster holding the ShardGroup `name` on `stream` with lease table
    /// `table` and an empty pool; files go under `dir`.
    pub fn new(name: &str, stream: &str, table: &str, timing: GroupTiming, dir: &Path) -> Self {
        let source = ShardSource::Kinesis(KinesisSource {
            stream_name: Some(stream.to_owned()),
            stream_arn: None,
            region: Some(super::REGION.to_owned()),
            endpoint: None,
            refresh_interval: "1s".to_owned(),
        });
        let table = LeaseTableSpec {
            table_name: table.to_owned(),
            region: None,
            endpoint: None,
        };
        Self::with_source(name, source, Some(table), timing, dir)
    }

    /// A cluster holding the ShardGroup `name` with a static source of
    /// `count` partitions named by `template` and no lease table.
    pub fn new_static(
        name: &str,
        count: u32,
        template: &str,
        timing: GroupTiming,
        dir: &Path,
    ) -> Self {
        let source = ShardSource::Static(StaticSource {
            count,
            name_template: template.to_owned(),
        });
        Self::with_source(name, source, None, timing, dir)
    }

    /// A cluster holding the ShardGroup `name` with `source` (and
    /// `lease_table`); files go under `dir`.
    pub(crate) fn with_source(
        name: &str,
        source: ShardSource,
        lease_table: Option<LeaseTableSpec>,
        timing: GroupTiming,
        dir: &Path,
    ) -> Self {
        let spec = ShardGroupSpec {
            pool_ref: PoolRef {
                name: APP_LABEL.1.to_owned(),
            },
            source,
            lease_table,
            consumer_name: None,
            standbys: 0,
            balance: Default::default(),
            throughput: None,
            scaling: None,
            handoff: HandoffSpec {
                drain_timeout: go_duration(timing.drain_timeout),
                lease_failover: go_duration(timing.lease_failover),
            },
            rebalance: RebalanceSpec {
                delay: go_duration(timing.rebalance_delay),
                ..RebalanceSpec::default()
            },
            output: Default::default(),
        };
        let mut group = ShardGroup::new(name, spec);
        group.metadata.namespace = Some(NAMESPACE.to_owned());
        group.metadata.uid = Some("demo-shardgroup".to_owned());
        group.metadata.generation = Some(1);
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([(
                APP_LABEL.0.to_owned(),
                APP_LABEL.1.to_owned(),
            )])),
            match_expressions: None,
        };
        let mut pool = ConsumerPool::new(
            APP_LABEL.1,
            ConsumerPoolSpec {
                selector,
                min_ready_seconds: 0,
                capacity: Default::default(),
                max_shards_per_pod: None,
                topology_keys: Vec::new(),
                identity: None,
            },
        );
        pool.metadata = ObjectMeta {
            name: Some(APP_LABEL.1.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        };
        Self {
            group,
            pool,
            pods: BTreeMap::new(),
            published: None,
            record_logs: Vec::new(),
            // The cluster starts empty: the controller sees every pod leave.
            departed: DepartureMemory::watched_from(Timestamp::MIN, RETENTION),
            stateful_sets: BTreeMap::new(),
            dir: dir.to_path_buf(),
            next_uid: 1,
        }
    }

    /// The pool holds the shards of a returning pod for `window`
    /// (`identity.stable`), and the pods named `<set>-<n>` are StatefulSet
    /// `set`'s, of `replicas` pods: such a pod deleted and created again
    /// under its name keeps its shards.
    pub fn hold_for_returning(&mut self, set: &str, replicas: u32, window: Duration) {
        self.pool.spec.identity = Some(shardring_crds::consumer_pool::IdentitySpec {
            stable: true,
            return_within: go_duration(window),
        });
        self.stateful_sets.insert(set.to_owned(), replicas);
        for pod in self.pods.values_mut() {
            pod.record.stateful_set = set_of(&self.stateful_sets, &pod.record.name);
        }
    }

    /// Where pod `name`'s files live.
    pub(crate) fn pod_dir(&self, name: &str) -> PathBuf {
        self.dir.join("pods").join(name)
    }

    /// The uid of the next pod created.
    pub(crate) fn next_uid(&mut self) -> String {
        let uid = format!("uid-{}", self.next_uid);
        self.next_uid += 1;
        uid
    }

    /// Adds a Ready pod running `process` (created by the caller with the
    /// files of [`Self::pod_dir`]).
    pub(crate) fn add_pod(
        &mut self,
        name: &str,
        annotations_file: PathBuf,
        record_log: PathBuf,
        process: impl Into<PodProcess>,
        now: Timestamp,
    ) {
        let uid = self.next_uid();
        self.add_pod_as(name, uid, annotations_file, record_log, process, now);
    }

    /// [`Self::add_pod`] with the uid given (from [`Self::next_uid`]: the
    /// pod's token names it before the pod exists).
    pub(crate) fn add_pod_as(
        &mut self,
        name: &str,
        uid: String,
        annotations_file: PathBuf,
        record_log: PathBuf,
        process: impl Into<PodProcess>,
        now: Timestamp,
    ) {
        self.record_logs.push(record_log.clone());
        let record = PodRecord {
            name: name.to_owned(),
            uid,
            labels: Arc::new(BTreeMap::from([(
                APP_LABEL.0.to_owned(),
                APP_LABEL.1.to_owned(),
            )])),
            ready: true,
            ready_since: Some(now),
            node_name: Some("demo-node".to_owned()),
            // Every demo pod runs on this machine: the endpoint's peer-IP
            // check sees its consumer connect from here.
            ip: Some(std::net::Ipv4Addr::LOCALHOST.into()),
            containers: Containers::Running,
            created: Some(now),
            stateful_set: set_of(&self.stateful_sets, name),
            ..PodRecord::default()
        };
        self.pods.insert(
            name.to_owned(),
            DemoPod {
                record,
                annotations_file,
                record_log,
                process: Some(process.into()),
                kill_at: None,
            },
        );
    }

    /// Deletes pod `name` gracefully with `grace`: it gets a deletion
    /// timestamp, its process gets SIGTERM, and it is killed when `grace`
    /// runs out. Returns whether the pod existed.
    pub fn delete_pod(&mut self, name: &str, grace: Duration, now: Timestamp) -> bool {
        let Some(pod) = self.pods.get_mut(name) else {
            return false;
        };
        if pod.record.deletion_timestamp.is_some() {
            return true;
        }
        pod.record.deletion_timestamp = Some(now);
        pod.record.deletion_grace_seconds =
            Some(i64::try_from(grace.as_secs().max(1)).unwrap_or(i64::MAX));
        pod.kill_at = Some(Instant::now() + grace);
        if let Some(process) = &pod.process {
            process.terminate();
        }
        true
    }

    /// kill -9 of pod `name`'s process and a force delete of its object:
    /// the object is gone at once, with no deletion timestamp ever shown and
    /// its status still saying `running` (the controller's watch sees that
    /// final state). Returns whether the pod existed.
    pub fn force_delete(&mut self, name: &str) -> bool {
        let Some(mut pod) = self.pods.remove(name) else {
            return false;
        };
        self.departed
            .record(NAMESPACE, name, pod.record.departure(Timestamp::now()));
        if let Some(mut process) = pod.process.take() {
            process.kill();
        }
        true
    }

    /// Sends signal `signal` (`STOP`, `CONT`, ...) to pod `name`'s process.
    /// Returns whether the pod has a running process.
    pub fn signal(&mut self, name: &str, signal: &str) -> bool {
        match self.pods.get(name).and_then(|p| p.process.as_ref()) {
            Some(PodProcess::Child(process)) => {
                process.signal(signal);
                true
            }
            _ => false,
        }
    }

    /// Kubelet: kills processes whose grace period ran out; when the process
    /// of a terminating pod has exited, reports its container terminated,
    /// and removes the object at the next call (so a controller that plans
    /// in between sees that status). Returns the removed pods and pods whose
    /// process died while not terminating.
    pub fn reap(&mut self) -> Reaped {
        let mut reaped = Reaped::default();
        let now = Instant::now();
        let mut gone = Vec::new();
        for (name, pod) in &mut self.pods {
            let Some(process) = &mut pod.process else {
                // Terminating with nothing running: the status shows the
                // container terminated first, the object goes at the call
                // after.
                if pod.record.deletion_timestamp.is_some() {
                    if pod.record.containers == Containers::Stopped {
                        gone.push(name.clone());
                    } else {
                        pod.record.containers = Containers::Stopped;
                    }
                }
                continue;
            };
            if pod.kill_at.is_some_and(|at| now >= at) {
                process.kill();
                reaped.killed.push(name.clone());
            }
            if let Some(status) = process.exited() {
                if pod.record.deletion_timestamp.is_some() {
                    pod.record.containers = Containers::Stopped;
                } else {
                    reaped.crashed.push((name.clone(), status));
                }
                pod.process = None;
            }
        }
        let at = Timestamp::now();
        for name in gone {
            if let Some(pod) = self.pods.remove(&name) {
                self.departed
                    .record(NAMESPACE, &name, pod.record.departure(at));
                reaped.removed.push(name);
            }
        }
        reaped
    }

    /// Names of pods that are not terminating, sorted.
    pub(crate) fn live_pods(&self) -> Vec<String> {
        self.pods
            .values()
            .filter(|p| p.record.deletion_timestamp.is_none())
            .map(|p| p.record.name.clone())
            .collect()
    }

    /// Deletes every pod gracefully with `grace` ([`Cluster::delete_pod`]).
    pub fn delete_all(&mut self, grace: Duration, now: Timestamp) {
        let names: Vec<String> = self.pods.keys().cloned().collect();
        for name in names {
            self.delete_pod(&name, grace, now);
        }
    }

    /// Whether every consumer process (or task) has ended.
    pub fn all_exited(&mut self) -> bool {
        self.pods
            .values_mut()
            .filter_map(|pod| pod.process.as_mut())
            .all(|process| process.exited().is_some())
    }

    /// Kills every consumer process now and waits for them (cleanup).
    pub fn kill_all(&mut self) {
        for pod in self.pods.values_mut() {
            if let Some(mut process) = pod.process.take() {
                process.kill();
            }
        }
    }
}

/// What [`Cluster::reap`] found.
#[derive(Debug, Default)]
pub struct Reaped {
    /// Terminating pods whose process exited: their objects are gone.
    pub removed: Vec<String>,
    /// Pods whose grace period ran out: their process was killed.
    pub killed: Vec<String>,
    /// Pods whose process exited without being asked to.
    pub crashed: Vec<(String, String)>,
}
