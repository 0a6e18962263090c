//! The controller's side of the consumer endpoint: what a reconcile's
//! observe step takes from it (the acknowledged releases and the measured
//! loads) and what the cycle's last step serves through it
//! ([`shardring_core::cycle::Apply::serve`]: each pod's view as the cycle
//! left its annotation, the revokes of the published document, and the
//! endpoint's CA in a ConfigMap of the group's namespace). The views are
//! published only after a cycle wrote everything: the endpoint never serves
//! a view ahead of the document and annotations.
//! Who may ask is also judged from the pod cache ([`StorePods`]), which
//! knows a pod's readiness and IP before a cycle does.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use shardring_core::handoff::Evidence;
use shardring_core::load::LoadObservation;
use shardring_core::observation::{LeaseObservation, Observation, ReleaseAcks};
use shardring_core::plan::Decision;
use shardring_crds::AssignmentDocument;
use shardring_crds::endpoint::{CA_CONFIGMAP_KEY, CA_CONFIGMAP_NAME};

use super::apply::{MANAGED_BY, MANAGED_BY_LABEL, MANAGER};
use super::metrics::ControllerMetrics;
use super::observe::{PodSelector, Stores};
use super::own_writes::OwnWrites;
use crate::GroupKey;
use crate::crds::ShardGroup;
use crate::endpoint::directory::{FreshPod, PodCache};
use crate::endpoint::{EndpointState, PodSync};

/// The endpoint's view of the operator's pod cache: a pod is a member of a
/// group as a cycle would observe it now (the group's pool selects it, or
/// it carries the group's annotation).
pub(crate) struct StorePods {
    stores: Stores,
    groups: Store<DeserializeGuard<ShardGroup>>,
}

impl StorePods {
    /// Members judged from `stores` and the groups in `groups`.
    pub(crate) fn new(stores: Stores, groups: Store<DeserializeGuard<ShardGroup>>) -> Self {
        Self { stores, groups }
    }
}

impl std::fmt::Debug for StorePods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorePods").finish_non_exhaustive()
    }
}

impl PodCache for StorePods {
    fn member(&self, group: &GroupKey, name: &str) -> Option<FreshPod> {
        let guard = self
            .groups
            .get(&ObjectRef::new(&group.name).within(&group.namespace))?;
        let shard_group = guard.0.as_ref().ok()?;
        let pod = self.stores.pods.get(&group.namespace, name)?;
        let carries = pod.annotation(&shard_group.annotation_key()).is_some();
        let member = carries
            || self
                .stores
                .pool(&group.namespace, &shard_group.spec.pool_ref.name)
                .is_some_and(|pool| {
                    PodSelector::new(&pool.spec.selector).matches(Some(pod.labels.as_ref()))
                });
        member.then_some(FreshPod {
            uid: pod.uid,
            ip: pod.ip,
        })
    }
}

/// One pod as the observe step saw it, kept for the endpoint.
#[derive(Debug, Clone)]
pub(crate) struct SeenPod {
    name: String,
    uid: String,
    ip: Option<IpAddr>,
    annotation: Option<String>,
}

/// What the observe step saw that the endpoint needs after the cycle.
#[derive(Debug, Clone)]
pub struct EndpointSeen {
    key: GroupKey,
    /// The pods, when the group's views are served (`None`: no pod asked).
    pods: Option<Vec<SeenPod>>,
    published: Option<Arc<AssignmentDocument>>,
    acks: ReleaseAcks,
}

/// The measured loads of a group that uses them, after feeding `loads` the
/// lease table's throughput `leases` holds; notes a group that does not
/// (its reports are refused as such) and observes nothing for it.
pub fn observe_loads(
    loads: &crate::endpoint::Loads,
    group: &ShardGroup,
    published: Option<&AssignmentDocument>,
    leases: &LeaseObservation,
    now: Timestamp,
) -> LoadObservation {
    let key = GroupKey::of(group);
    if !shardring_core::load::uses_loads(&group.spec) {
        loads.not_used(&key);
        return LoadObservation::default();
    }
    loads.observe(&key, published, LoadObservation::limits(group), leases, now)
}

/// The releases of `group` the consumers acknowledged.
pub fn observe_releases(endpoint: &EndpointState, group: &ShardGroup) -> ReleaseAcks {
    endpoint.releases.observe(&GroupKey::of(group))
}

/// What the endpoint needs of `observation` after the cycle.
pub fn seen(endpoint: &EndpointState, observation: &Observation) -> EndpointSeen {
    let key = GroupKey::of(&observation.group);
    let served = endpoint.directory.is_wanted(&key);
    EndpointSeen {
        pods: served.then(|| {
            observation
                .pods
                .iter()
                .map(|p| SeenPod {
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    ip: p.ip,
                    annotation: p.annotation.clone(),
                })
                .collect()
        }),
        published: match &observation.published {
            shardring_core::observation::Published::Document(doc) => Some(Arc::clone(doc)),
            _ => None,
        },
        acks: observation.releases.clone(),
        key,
    }
}

/// After a cycle that wrote everything it decided: each pod's view as its
/// annotation now reads, the revokes of the document now published, and the
/// time from each acknowledged release to this activation (`now`).
pub fn publish(
    endpoint: &EndpointState,
    metrics: &ControllerMetrics,
    seen: &EndpointSeen,
    decision: &Decision,
    document_written: bool,
    now: Timestamp,
) {
    let written: HashMap<&str, Option<String>> = match &seen.pods {
        Some(_) => decision
            .annotation_writes
            .iter()
            .map(|w| (w.pod.as_str(), w.view.as_ref().map(|v| v.to_annotation())))
            .collect(),
        None => HashMap::new(),
    };
    let document = match (&decision.document_write, document_written) {
        (Some(write), true) => Some(&*write.document),
        _ => seen.published.as_deref(),
    };
    match &seen.pods {
        Some(pods) => {
            endpoint.directory.sync_group(
                &seen.key,
                document,
                pods.iter().map(|p| PodSync {
                    name: &p.name,
                    uid: &p.uid,
                    ip: p.ip,
                    annotation: match written.get(p.name.as_str()) {
                        Some(annotation) => annotation.as_deref(),
                        None => p.annotation.as_deref(),
                    },
                }),
            );
        }
        None => endpoint.directory.note_known(&seen.key),
    }
    endpoint.releases.sync_group(&seen.key, document);
    // Load reports are checked against the ownership consumers now see.
    endpoint.loads.sync(&seen.key, document);
    for handoff in &decision.handoffs {
        if handoff.evidence != Evidence::ReleaseAcked {
            continue;
        }
        if let Some(ack) = seen.acks.acks.get(&handoff.shard) {
            let latency = now.duration_since(ack.at).as_secs_f64().max(0.0);
            metrics.release_ack_activation.observe(latency);
        }
    }
}

/// The endpoint's CA in a ConfigMap of every namespace that has ShardGroups
/// (`shardring-endpoint-ca`, key `ca.crt`), kept true against the
/// ConfigMap cache rather than a memory of past writes: one that is
/// missing (deleted, or its namespace deleted and created again), holds
/// another CA or lacks an owner reference to one of the namespace's
/// ShardGroups is written again. The owner references make the garbage
/// collector remove it once its namespace has no ShardGroup left (the
/// admission policy lets the operator write it only so owned), and make
/// its deletion wake those groups' reconciles, which write it back.
///
/// Writes the CA into `namespace`'s ConfigMap unless the cached one
/// (`config_maps`) already holds it, owned by every group of `groups` there,
/// or this operator's last write of it has not come back through the watch
/// (the cache lags it: two reconciles in a row wrote it twice): then
/// `Some`, how long until the caller should look again. Best effort: a
/// failure is logged and retried at the next reconcile of a group there.
pub(crate) async fn ensure_ca(
    client: &Client,
    endpoint: &EndpointState,
    namespace: &str,
    groups: &Store<DeserializeGuard<ShardGroup>>,
    config_maps: &Store<ConfigMap>,
    own: &OwnWrites,
) -> Option<std::time::Duration> {
    let ca = endpoint.ca.borrow().clone()?;
    let owners = ca_owners(groups, namespace);
    if owners.is_empty() {
        // The group store has not seen the namespace's groups yet.
        return None;
    }
    let cached = config_maps.get(&ObjectRef::new(CA_CONFIGMAP_NAME).within(namespace));
    if cached.is_some_and(|cm| holds_ca(&cm, &ca, &owners)) {
        return None;
    }
    if let Some(left) = own.awaits_echo::<ConfigMap>(namespace, CA_CONFIGMAP_NAME) {
        // The cache has not shown this operator's last write yet: what it
        // holds is older than that write, no reason to write again. Or the
        // echo came before the write's answer was recorded, and the cache
        // holds a later edit: the caller looks again once the echo is no
        // longer awaited (the echo's arrival is no trigger).
        return Some(left);
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CA_CONFIGMAP_NAME,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": owners,
        },
        "data": {CA_CONFIGMAP_KEY: &*ca},
    });
    let params = PatchParams::apply(MANAGER).force();
    match api
        .patch(CA_CONFIGMAP_NAME, &params, &Patch::Apply(&body))
        .await
    {
        // Its echo is not a change that needs a reconcile.
        Ok(written) => own.record(&written),
        Err(error) => {
            tracing::warn!(%namespace, %error, "cannot publish the consumer endpoint's CA");
        }
    }
    None
}

/// An owner reference (not a controller one) to every readable ShardGroup
/// of `namespace`, ordered by name.
fn ca_owners(groups: &Store<DeserializeGuard<ShardGroup>>, namespace: &str) -> Vec<OwnerReference> {
    let mut owners: Vec<OwnerReference> = groups
        .state()
        .iter()
        .filter_map(|guard| guard.0.as_ref().ok())
        .filter(|group| group.namespace().as_deref() == Some(namespace))
        .filter_map(|group| {
            let mut owner = group.controller_owner_ref(&())?;
            owner.controller = None;
            owner.block_owner_deletion = None;
            Some(owner)
        })
        .collect();
    owners.sort_by(|a, b| a.name.cmp(&b.name));
    owners
}

/// Whether `cm` holds `ca`, carries the managed-by label (the watch selects
/// on it) and is owned by every one of `owners`.
fn holds_ca(cm: &ConfigMap, ca: &str, owners: &[OwnerReference]) -> bool {
    let data = cm.data.as_ref().and_then(|d| d.get(CA_CONFIGMAP_KEY));
    let labelled = cm
        .labels()
        .get(MANAGED_BY_LABEL)
        .is_some_and(|v| v == MANAGED_BY);
    let held: Vec<&str> = cm
        .owner_references()
        .iter()
        .map(|r| r.uid.as_str())
        .collect();
    data.is_some_and(|d| d == ca)
        && labelled
        && owners.iter().all(|o| held.contains(&o.uid.as_str()))
}
