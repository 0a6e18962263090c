//! Observe: the first, read-only step of a reconcile. It gathers everything
//! the pure plan step needs about one ShardGroup from the reflector stores
//! (the group, its pool, the pool's pods stripped to what matters, the owned
//! ConfigMap's published document) plus the topology read result and the
//! current time, into one [`Observation`]. Nothing here writes.
//!
//! The ConfigMap's `metadata.resourceVersion` is read together with its
//! document ([`Stores::observe_with_version`]): the apply step conditions the
//! next document write on it ([`PublishedVersion`]), so a write can only
//! replace the document this reconcile planned from.
//!
//! Of each pod's status it keeps what the kubelet said of its containers
//! ([`Containers`]), and from the memory of departed pods ([`departed`]) what
//! the last status of the pods that left the API said: the handoff step's
//! `pod_stopped` evidence reads both.

pub mod departed;
pub mod documents;

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{DeserializeGuard, ObjectMeta, PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::reflector::{ObjectRef, Store};

use self::departed::Departures;
use self::documents::DocumentCache;
use super::cached_pod::{CachedContainerState, CachedContainerStatus, CachedPod};
use crate::crds::{AssignmentDocument, ConsumerPool, ShardGroup};
use crate::lease::LeaseTable;
use crate::source::{SourceError, Topology};

/// Node label that names a node's zone (also read from the pod when present).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Everything the plan step sees of one ShardGroup at one moment.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The ShardGroup: spec, metadata (generation, uid, deletion timestamp)
    /// and its current status.
    pub group: ShardGroup,
    /// Its ConsumerPool; `None` when the pool does not exist.
    pub pool: Option<ConsumerPool>,
    /// Pods the pool selects, plus pods that still carry this group's
    /// annotation (so it can be removed), sorted by name.
    pub pods: Vec<PodInfo>,
    /// The source read result, with the last good topology.
    pub topology: TopologyObservation,
    /// The published document decoded from the owned ConfigMap.
    pub published: Published,
    /// The lease table read result (handoff evidence).
    pub leases: LeaseObservation,
    /// What the pod watch remembers of the pods that left the API (handoff
    /// evidence); empty without a watch (tests, or right after a restart).
    pub departed: Departures,
    /// The time of this observation: the only clock the plan step reads.
    pub now: Timestamp,
}

/// What the lease table said at this reconcile.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum LeaseObservation {
    /// The ShardGroup names no lease table: handoffs rely on pod deletion and
    /// the drain timeout (unfenced).
    #[default]
    NotConfigured,
    /// The latest scan.
    Read(LeaseTable),
    /// The scan failed (or was not made): nothing can be concluded from it,
    /// so no revoke completes through the lease table.
    Failed(String),
}

impl LeaseObservation {
    /// What a controller that has not read the table yet knows: nothing when
    /// the group names a table, else that there is none.
    pub fn unread(group: &ShardGroup) -> Self {
        if group.spec.lease_table.is_some() {
            LeaseObservation::Failed("the lease table has not been read".into())
        } else {
            LeaseObservation::NotConfigured
        }
    }
}

/// What a pod's status says of its containers, as far as a handoff cares:
/// whether a process of this pod may be running. Read from the status the
/// kubelet reports ([`containers_of`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Containers {
    /// A container runs, or ran and may run again, or the status says too
    /// little to tell: nothing is concluded. The default.
    #[default]
    Running,
    /// Every container (init and ephemeral ones included) is `terminated`
    /// and the pod will not start them again: it is terminating (has a
    /// deletion timestamp) or in a terminal phase (`Succeeded`, `Failed`).
    /// The kubelet reports this after it stopped them.
    Stopped,
    /// Phase `Pending` and no container has ever been `running` or
    /// `terminated` (no `lastState` either): as far as the kubelet reported,
    /// nothing of this pod ever started.
    NeverRan,
}

/// What the status of `pod` says of its containers (see [`Containers`]).
pub fn containers_of(pod: &CachedPod) -> Containers {
    let Some(status) = pod.status.as_ref() else {
        return Containers::Running;
    };
    let lists = [
        status.container_statuses.as_deref().unwrap_or_default(),
        status
            .init_container_statuses
            .as_deref()
            .unwrap_or_default(),
        status
            .ephemeral_container_statuses
            .as_deref()
            .unwrap_or_default(),
    ];
    let all = || lists.iter().flat_map(|l| l.iter());
    let phase = status.phase.as_deref();
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let terminal = matches!(phase, Some("Succeeded" | "Failed"));
    let regular = status.container_statuses.as_deref().unwrap_or_default();
    if (terminating || terminal) && !regular.is_empty() && all().all(is_terminated) {
        return Containers::Stopped;
    }
    if phase == Some("Pending") && !all().any(ever_started) {
        return Containers::NeverRan;
    }
    Containers::Running
}

fn is_terminated(status: &CachedContainerStatus) -> bool {
    status
        .state
        .as_ref()
        .is_some_and(|s| s.terminated.is_some())
}

fn ever_started(status: &CachedContainerStatus) -> bool {
    let started = |s: &CachedContainerState| s.running.is_some() || s.terminated.is_some();
    status.state.as_ref().is_some_and(started) || status.last_state.as_ref().is_some_and(started)
}

/// Whether the API server generated the pod's name from
/// `metadata.generateName` (a Deployment's pods): such a name is not reused
/// by a later pod, unlike a StatefulSet's.
pub fn has_generated_name(meta: &ObjectMeta) -> bool {
    match (meta.generate_name.as_deref(), meta.name.as_deref()) {
        (Some(prefix), Some(name)) => !prefix.is_empty() && name.starts_with(prefix),
        _ => false,
    }
}

/// One pod, stripped to what the plan step uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Pod labels (for the capacity label).
    pub labels: BTreeMap<String, String>,
    /// Whether the pool's selector matches it (false: it only carries a stale annotation).
    pub selected: bool,
    /// Whether its `Ready` condition is `True`.
    pub ready: bool,
    /// When its `Ready` condition last changed (with `ready`: ready since then).
    pub ready_since: Option<Timestamp>,
    /// Its deletion timestamp, when it is terminating.
    pub deletion_timestamp: Option<Timestamp>,
    /// Its deletion grace period (0 means force-deleted).
    pub deletion_grace_seconds: Option<i64>,
    /// Node it runs on.
    pub node_name: Option<String>,
    /// Zone: the pod's zone label, else its node's.
    pub zone: Option<String>,
    /// Current value of this group's annotation on the pod.
    pub annotation: Option<String>,
    /// What its status says of its containers.
    pub containers: Containers,
    /// Its creation timestamp.
    pub created: Option<Timestamp>,
    /// Whether its name was generated ([`has_generated_name`]).
    pub generated_name: bool,
}

/// The topology as the controller knows it.
#[derive(Debug, Clone, Default)]
pub struct TopologyObservation {
    /// Short description of the source, e.g. `static:16`.
    pub source: String,
    /// The last topology read successfully (kept across failed reads).
    pub last_good: Option<Topology>,
    /// When `last_good` was first read with its current content.
    pub read_at: Option<Timestamp>,
    /// The error of the latest read, when it failed (the topology is then stale).
    pub error: Option<SourceError>,
    /// When the source was last read successfully (what a stale topology's
    /// age is measured from); `None` when unknown.
    pub confirmed_at: Option<Timestamp>,
    /// [`crate::source::ShardSource::ordering_enforced`]: `Some(false)` when
    /// children are assigned without waiting for their parents (the group
    /// shows `OrderingNotEnforced`), `None` for sources without lineage.
    pub ordering_enforced: Option<bool>,
    /// Parent ids of each child shard, published in the document even when
    /// the engine shards carry no parents (ordering not enforced).
    pub lineage: BTreeMap<String, Vec<String>>,
    /// The source's own next refresh (jittered), replacing the fixed one.
    pub refresh_after: Option<std::time::Duration>,
}

impl TopologyObservation {
    /// Whether the topology shown is older than a failed read.
    pub fn stale(&self) -> bool {
        self.error.is_some()
    }
}

/// The previously published document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Published {
    /// No ConfigMap yet.
    #[default]
    Missing,
    /// The decoded document (shared with the cache of decoded documents:
    /// [`documents`]).
    Document(Arc<AssignmentDocument>),
    /// A ConfigMap exists but its document could not be decoded (the next
    /// publish replaces it; the epoch continues from status).
    Unreadable(String),
}

impl From<AssignmentDocument> for Published {
    fn from(document: AssignmentDocument) -> Self {
        Published::Document(Arc::new(document))
    }
}

impl Published {
    /// The document, when one was decoded.
    pub fn document(&self) -> Option<&AssignmentDocument> {
        match self {
            Published::Document(doc) => Some(doc.as_ref()),
            _ => None,
        }
    }
}

/// The state of the published ConfigMap when it was observed, which the next
/// document write is conditioned on. Kept apart from [`Published`] because
/// the plan step never reads it; only the apply step does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PublishedVersion {
    /// No ConfigMap was seen: the document is created (POST), which fails
    /// with 409 AlreadyExists when another write created it meanwhile. A
    /// ConfigMap without a resourceVersion (never for a stored object) counts
    /// as absent, so it is never overwritten unconditionally.
    #[default]
    Absent,
    /// The ConfigMap's `metadata.resourceVersion`: the document is applied
    /// with it in the body, so the API server refuses the apply (409
    /// Conflict) once the ConfigMap changed since it was read.
    At(String),
}

/// Reads of the reflector stores the observe step needs.
#[derive(Clone)]
pub struct Stores {
    /// ConsumerPools (a malformed one is held as an error, never stalls the watch).
    pub pools: Store<DeserializeGuard<ConsumerPool>>,
    /// Pods (stripped).
    pub pods: Store<CachedPod>,
    /// Nodes' metadata (zone labels).
    pub nodes: Store<PartialObjectMeta<Node>>,
    /// ConfigMaps managed by shardring.
    pub config_maps: Store<ConfigMap>,
    /// Pods that left the API, fed by the pod watch.
    pub departed: departed::Departed,
    /// The decoded documents of the ConfigMaps, by resourceVersion.
    pub documents: DocumentCache,
}

impl Stores {
    /// Builds the observation of `group` from the stores, the topology read
    /// result and `now`.
    pub fn observe(
        &self,
        group: &ShardGroup,
        topology: TopologyObservation,
        now: Timestamp,
    ) -> Observation {
        self.observe_with_version(group, topology, now).0
    }

    /// [`Stores::observe`], plus the version of the published ConfigMap the
    /// document was decoded from (one read of the store, so the two always
    /// belong together): what the next document write is conditioned on.
    pub fn observe_with_version(
        &self,
        group: &ShardGroup,
        topology: TopologyObservation,
        now: Timestamp,
    ) -> (Observation, PublishedVersion) {
        let namespace = group.namespace().unwrap_or_default();
        let pool = self.pool(&namespace, &group.spec.pool_ref.name);
        let key = group.annotation_key();
        let pods = self.pods.state();
        let nodes = &self.nodes;
        let zone_of = |node: &str| -> Option<String> {
            let meta = nodes.get(&ObjectRef::new(node))?;
            meta.labels().get(ZONE_LABEL).cloned()
        };
        let selector = pool.as_ref().map(|p| &p.spec.selector);
        let pods = collect_pods(
            pods.iter().map(|p| p.as_ref()),
            &namespace,
            selector,
            &key,
            zone_of,
        );
        let config_map = self
            .config_maps
            .get(&ObjectRef::new(&group.config_map_name()).within(&namespace));
        let published = config_map
            .as_deref()
            .map_or(Published::Missing, |cm| self.documents.published(cm));
        let version = config_map
            .as_deref()
            .map_or(PublishedVersion::Absent, published_version);
        // Only the departures of pods the published document names matter
        // (every pod, when there is no document to go by).
        let departed = self.departed.departures(
            &namespace,
            |name| {
                published
                    .document()
                    .is_none_or(|doc| doc.pods.contains_key(name))
            },
            now,
        );
        let observation = Observation {
            group: group.clone(),
            pool,
            pods,
            topology,
            published,
            leases: LeaseObservation::unread(group),
            departed,
            now,
        };
        (observation, version)
    }
}

impl Stores {
    /// The pool `name` in `namespace`, when it exists and could be read.
    pub fn pool(&self, namespace: &str, name: &str) -> Option<ConsumerPool> {
        let guard = self.pools.get(&ObjectRef::new(name).within(namespace))?;
        guard.0.as_ref().ok().cloned()
    }
}

/// The version of an owned ConfigMap, for the precondition of the next write.
pub fn published_version(cm: &ConfigMap) -> PublishedVersion {
    cm.metadata
        .resource_version
        .clone()
        .filter(|version| !version.is_empty())
        .map_or(PublishedVersion::Absent, PublishedVersion::At)
}

/// Selects the pods of one group from a namespace's pods: those the selector
/// matches plus those carrying `annotation_key`, stripped to [`PodInfo`] and
/// sorted by name.
pub fn collect_pods<'a>(
    pods: impl Iterator<Item = &'a CachedPod>,
    namespace: &str,
    selector: Option<&LabelSelector>,
    annotation_key: &str,
    zone_of: impl Fn(&str) -> Option<String>,
) -> Vec<PodInfo> {
    let selector = selector.map(PodSelector::new);
    let mut out: Vec<PodInfo> = pods
        .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|pod| {
            let selected = selector
                .as_ref()
                .is_some_and(|s| s.matches(pod.metadata.labels.as_ref()));
            let annotation = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotation_key))
                .cloned();
            (selected || annotation.is_some())
                .then(|| pod_info(pod, selected, annotation, &zone_of))
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn pod_info(
    pod: &CachedPod,
    selected: bool,
    annotation: Option<String>,
    zone_of: &impl Fn(&str) -> Option<String>,
) -> PodInfo {
    let meta: &ObjectMeta = &pod.metadata;
    let ready_condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let labels = meta.labels.clone().unwrap_or_default();
    let zone = labels
        .get(ZONE_LABEL)
        .cloned()
        .or_else(|| node_name.as_deref().and_then(zone_of));
    PodInfo {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        labels,
        selected,
        ready: ready_condition.is_some_and(|c| c.status == "True"),
        ready_since: ready_condition
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0),
        deletion_timestamp: meta.deletion_timestamp.as_ref().map(|t| t.0),
        deletion_grace_seconds: meta.deletion_grace_period_seconds,
        node_name,
        zone,
        annotation,
        containers: containers_of(pod),
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        generated_name: has_generated_name(meta),
    }
}

/// A pool's label selector, evaluated by kube's [`Selector`] (matchLabels
/// and matchExpressions, as the API server evaluates them). An empty selector
/// matches every pod; one the API server would refuse (an unknown operator,
/// `In` without values) matches none.
#[derive(Debug, Clone)]
pub struct PodSelector(Option<Selector>);

impl PodSelector {
    /// Parses `selector` once, for any number of pods.
    pub fn new(selector: &LabelSelector) -> Self {
        Self(Selector::try_from(selector.clone()).ok())
    }

    /// Whether a pod with `labels` is selected.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let Some(selector) = &self.0 else {
            return false;
        };
        match labels {
            Some(labels) => selector.matches(labels),
            None => selector.matches(&BTreeMap::new()),
        }
    }
}

/// The ShardGroups a pod change concerns: groups whose pool selects the pod,
/// and groups whose annotation the pod carries.
pub fn groups_for_pod(
    pod: &CachedPod,
    groups: &[Arc<DeserializeGuard<ShardGroup>>],
    stores: &Stores,
) -> Vec<ObjectRef<DeserializeGuard<ShardGroup>>> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    groups
        .iter()
        .filter(|guard| {
            let Ok(g) = &guard.0 else { return false };
            if g.namespace().as_deref() != Some(namespace.as_str()) {
                return false;
            }
            let carries = pod
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(&g.annotation_key()));
            carries
                || stores
                    .pool(&namespace, &g.spec.pool_ref.name)
                    .is_some_and(|p| {
                        PodSelector::new(&p.spec.selector).matches(pod.metadata.labels.as_ref())
                    })
        })
        .map(|g| ObjectRef::from_obj(g.as_ref()))
        .collect()
}

/// The ShardGroups that reference a pool (by namespace and name).
pub fn groups_for_pool(
    namespace: &str,
    pool: &str,
    groups: &[Arc<DeserializeGuard<ShardGroup>>],
) -> Vec<ObjectRef<DeserializeGuard<ShardGroup>>> {
    groups
        .iter()
        .filter(|guard| {
            guard.0.as_ref().is_ok_and(|g| {
                g.namespace().as_deref() == Some(namespace) && g.spec.pool_ref.name == pool
            })
        })
        .map(|g| ObjectRef::from_obj(g.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus, Pod, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};

    fn running() -> ContainerState {
        ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }
    }

    fn terminated() -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 143,
                reason: Some("Error".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn waiting(reason: &str) -> ContainerState {
        ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn status(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            image: "consumer:1".into(),
            state: Some(state),
            ..Default::default()
        }
    }

    /// A pod in `phase` with container statuses `containers` (and init
    /// container statuses `init`), terminating or not.
    fn pod_with(
        phase: &str,
        terminating: bool,
        containers: Vec<ContainerStatus>,
        init: Vec<ContainerStatus>,
    ) -> CachedPod {
        CachedPod::from(&Pod {
            metadata: ObjectMeta {
                name: Some("consumer-0".into()),
                deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: (!containers.is_empty()).then_some(containers),
                init_container_statuses: (!init.is_empty()).then_some(init),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn a_terminating_pod_whose_containers_all_terminated_is_stopped() {
        let done = vec![
            status("consumer", terminated()),
            status("sidecar", terminated()),
        ];
        let init = vec![status("init", terminated())];
        let pod = pod_with("Running", true, done.clone(), init.clone());
        assert_eq!(containers_of(&pod), Containers::Stopped);
        // The kubelet's terminal phase for a deleted pod, too.
        let pod = pod_with("Failed", true, done.clone(), init.clone());
        assert_eq!(containers_of(&pod), Containers::Stopped);
        // An evicted pod: terminal phase, not deleted yet; never restarted.
        let pod = pod_with("Failed", false, done, init);
        assert_eq!(containers_of(&pod), Containers::Stopped);
    }

    #[test]
    fn a_container_that_may_run_is_running() {
        // Terminating, one container still running (the kubelet is
        // stopping it, or stopped reporting).
        let pod = pod_with(
            "Running",
            true,
            vec![
                status("consumer", terminated()),
                status("sidecar", running()),
            ],
            vec![],
        );
        assert_eq!(containers_of(&pod), Containers::Running);
        // A sidecar (restartable init container) still running.
        let pod = pod_with(
            "Running",
            true,
            vec![status("consumer", terminated())],
            vec![status("proxy", running())],
        );
        assert_eq!(containers_of(&pod), Containers::Running);
        // Not terminating: a terminated container is restarted.
        let pod = pod_with(
            "Running",
            false,
            vec![status("consumer", terminated())],
            vec![],
        );
        assert_eq!(containers_of(&pod), Containers::Running);
        // Marked Failed by the pod garbage collector (its node is gone), the
        // container statuses untouched: nothing says the process stopped.
        let pod = pod_with("Failed", true, vec![status("consumer", running())], vec![]);
        assert_eq!(containers_of(&pod), Containers::Running);
        // Terminating with no container status at all: nothing concluded.
        let pod = pod_with("Running", true, vec![], vec![]);
        assert_eq!(containers_of(&pod), Containers::Running);
        // No status at all.
        let mut pod = pod_with("Running", true, vec![], vec![]);
        pod.status = None;
        assert_eq!(containers_of(&pod), Containers::Running);
    }

    #[test]
    fn a_pending_pod_that_never_started_anything_never_ran() {
        // Unscheduled: no container status yet.
        let pod = pod_with("Pending", false, vec![], vec![]);
        assert_eq!(containers_of(&pod), Containers::NeverRan);
        // Stuck in image pull, terminating or not.
        for terminating in [false, true] {
            let pod = pod_with(
                "Pending",
                terminating,
                vec![status("consumer", waiting("ImagePullBackOff"))],
                vec![status("init", waiting("PodInitializing"))],
            );
            assert_eq!(containers_of(&pod), Containers::NeverRan);
        }
        // Waiting after it ran once (a crash loop): it ran.
        let mut crashed = status("consumer", waiting("CrashLoopBackOff"));
        crashed.last_state = Some(terminated());
        let pod = pod_with("Pending", false, vec![crashed], vec![]);
        assert_eq!(containers_of(&pod), Containers::Running);
        // One container running while another waits for its image: the
        // kubelet reports `Pending`, but something runs.
        let pod = pod_with(
            "Pending",
            false,
            vec![
                status("consumer", running()),
                status("sidecar", waiting("ErrImagePull")),
            ],
            vec![],
        );
        assert_eq!(containers_of(&pod), Containers::Running);
        // An init container that ran (it may have read something).
        let pod = pod_with(
            "Pending",
            false,
            vec![status("consumer", waiting("PodInitializing"))],
            vec![status("init", running())],
        );
        assert_eq!(containers_of(&pod), Containers::Running);
        // `Running` with no statuses is no `Pending`: nothing concluded.
        let pod = pod_with("Running", false, vec![], vec![]);
        assert_eq!(containers_of(&pod), Containers::Running);
    }

    #[test]
    fn pod_info_carries_what_the_evidence_rule_reads() {
        let mut pod = pod_with("Running", true, vec![status("c", terminated())], vec![]);
        pod.metadata.generate_name = Some("consumer-7d9f-".into());
        pod.metadata.name = Some("consumer-7d9f-abcde".into());
        pod.metadata.creation_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let info = pod_info(&pod, true, None, &|_: &str| None);
        assert_eq!(info.containers, Containers::Stopped);
        assert_eq!(info.created, Some(Timestamp::UNIX_EPOCH));
        assert!(info.generated_name);
        // A StatefulSet's pod: its name is its own, and comes back.
        pod.metadata.generate_name = None;
        pod.metadata.name = Some("consumer-0".into());
        assert!(!pod_info(&pod, true, None, &|_: &str| None).generated_name);
        pod.metadata.generate_name = Some("other-".into());
        assert!(!has_generated_name(&pod.metadata));
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_semantics() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "c")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into()]),
                },
                LabelSelectorRequirement {
                    key: "off".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert!(PodSelector::new(&sel).matches(Some(&labels(&[("app", "c"), ("tier", "a")]))));
        assert!(!PodSelector::new(&sel).matches(Some(&labels(&[("app", "c"), ("tier", "b")]))));
        assert!(!PodSelector::new(&sel).matches(Some(&labels(&[
            ("app", "c"),
            ("tier", "a"),
            ("off", "1")
        ]))));
        assert!(!PodSelector::new(&sel).matches(None));
        assert!(PodSelector::new(&LabelSelector::default()).matches(None));
        let refused = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "Near".into(),
                values: None,
            }]),
        };
        assert!(!PodSelector::new(&refused).matches(Some(&labels(&[("tier", "a")]))));
    }
}
