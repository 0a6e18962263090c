//! Observe: the first, read-only step of a reconcile. It gathers everything
//! the pure plan step needs about one ShardGroup from the caches (the group,
//! its pool, the pool's pods as the pod cache's records, the owned
//! ConfigMap's published document) plus what the reconcile read elsewhere
//! ([`Reads`]: the topology, the lease scan, the acknowledged releases and
//! the measured loads) and the current time, into one [`Observation`] (the
//! controller core's type, with the plain data it is made of), built once
//! from all of it. Nothing here writes.
//!
//! The ConfigMap's `metadata.resourceVersion` is read together with its
//! document ([`Stores::published`]): the apply step conditions the next
//! document write on it ([`PublishedVersion`]), so a write can only replace
//! the document this reconcile planned from.
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
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{DeserializeGuard, PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::reflector::{ObjectRef, Store};

pub use shardring_core::load::LoadObservation;
pub use shardring_core::observation::{
    Containers, LeaseObservation, Observation, PodInfo, Published, PublishedVersion, ReleaseAcks,
    TopologyObservation,
};

use self::documents::DocumentCache;
use super::cached_pod::CachedPod;
#[cfg(test)]
use super::cached_pod::{containers_of, has_generated_name};
use super::pod_cache::{PodRecord, PodRecords};
use crate::GroupKey;
use crate::crds::{ConsumerPool, ShardGroup};
use shardring_core::group_state::collect_pods;

pub use shardring_core::group_state::pods::ZONE_LABEL;

/// Reads of the reflector stores the observe step needs.
#[derive(Clone)]
pub struct Stores {
    /// ConsumerPools (a malformed one is held as an error, never stalls the watch).
    pub pools: Store<DeserializeGuard<ConsumerPool>>,
    /// Pods, by namespace.
    pub pods: PodRecords,
    /// Nodes' metadata (zone labels).
    pub nodes: Store<PartialObjectMeta<Node>>,
    /// ConfigMaps managed by shardring.
    pub config_maps: Store<ConfigMap>,
    /// Pods that left the API, fed by the pod watch.
    pub departed: departed::DepartureMemory,
    /// The groups' decoded documents, by their ConfigMaps' resourceVersion.
    pub documents: DocumentCache,
    /// StatefulSets, their replicas only (stable identity: whether a pod
    /// of a name is created again).
    pub stateful_sets: Store<StatefulSet>,
}

/// What a reconcile read for one group outside the reflector stores.
#[derive(Debug, Clone)]
pub struct Reads {
    /// The source read, with the last good topology.
    pub topology: TopologyObservation,
    /// The lease table scan.
    pub leases: LeaseObservation,
    /// The releases consumers acknowledged through the endpoint.
    pub releases: ReleaseAcks,
    /// The shards' measured loads.
    pub loads: LoadObservation,
}

impl Reads {
    /// A source read alone: the lease table unread, no endpoint, nothing
    /// measured.
    pub fn topology(group: &ShardGroup, topology: TopologyObservation) -> Self {
        Self {
            topology,
            leases: LeaseObservation::unread(group),
            releases: ReleaseAcks::default(),
            loads: LoadObservation::default(),
        }
    }
}

impl Stores {
    /// Builds the observation of `group` from the stores, the topology read
    /// result and `now` (no lease scan, endpoint or loads).
    pub fn observe(
        &self,
        group: &ShardGroup,
        topology: TopologyObservation,
        now: Timestamp,
    ) -> Observation {
        self.observe_with_version(group, topology, now).0
    }

    /// [`Stores::observe`], plus the version of the published ConfigMap the
    /// document was decoded from.
    pub fn observe_with_version(
        &self,
        group: &ShardGroup,
        topology: TopologyObservation,
        now: Timestamp,
    ) -> (Observation, PublishedVersion) {
        let (published, version) = self.published(group);
        let reads = Reads::topology(group, topology);
        (self.observation(group, published, reads, now), version)
    }

    /// The group's published document, and the version of the ConfigMap it
    /// was decoded from (one read of the store, so the two always belong
    /// together): what the next document write is conditioned on.
    pub fn published(&self, group: &ShardGroup) -> (Published, PublishedVersion) {
        self.published_in(&GroupKey::of(group), &group.config_map_name())
    }

    /// [`Stores::published`] of the group `key`, whose document is in
    /// ConfigMap `config_map` of its namespace.
    pub(crate) fn published_in(
        &self,
        key: &GroupKey,
        config_map: &str,
    ) -> (Published, PublishedVersion) {
        let config_map = self
            .config_maps
            .get(&ObjectRef::new(config_map).within(&key.namespace));
        // A deleted ConfigMap's last document, when this operator held one,
        // is what its consumers may still act on: the plan rebuilds from it.
        let published = match config_map.as_deref() {
            Some(cm) => self.documents.published(key, cm),
            None => self.documents.missing(key),
        };
        let version = config_map
            .as_deref()
            .map_or(PublishedVersion::Absent, published_version);
        (published, version)
    }

    /// The observation of `group`: what the stores hold of it now, its
    /// `published` document, and what the reconcile read elsewhere.
    pub fn observation(
        &self,
        group: &ShardGroup,
        published: Published,
        reads: Reads,
        now: Timestamp,
    ) -> Observation {
        let namespace = group.namespace().unwrap_or_default();
        let pool = self.pool(&namespace, &group.spec.pool_ref.name);
        let key = group.annotation_key();
        let nodes = &self.nodes;
        let zone_of = |node: &str| -> Option<String> {
            let meta = nodes.get(&ObjectRef::new(node))?;
            meta.labels().get(ZONE_LABEL).cloned()
        };
        let selector = pool.as_ref().map(|p| &p.spec.selector);
        let capacity_label = pool.as_ref().and_then(|p| p.spec.capacity.label.as_deref());
        let selector = selector.map(PodSelector::new);
        let selects = |pod: &PodRecord| {
            selector
                .as_ref()
                .is_some_and(|s| s.matches(Some(&pod.labels)))
        };
        let pods = self.pods.read_namespace(&namespace, |pods| {
            collect_pods(pods, selects, capacity_label, &key, zone_of)
        });
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
        let Reads {
            topology,
            leases,
            releases,
            loads,
        } = reads;
        let stateful_sets = match &pool {
            Some(pool) if pool.spec.identity.as_ref().is_some_and(|i| i.stable) => {
                self.stateful_sets_in(&namespace)
            }
            _ => BTreeMap::new(),
        };
        Observation {
            group: group.clone(),
            pool,
            pods,
            topology,
            published,
            leases,
            departed,
            releases,
            loads,
            now,
            pool_share: Default::default(),
            stateful_sets,
        }
    }

    /// The StatefulSets of `namespace` and their replicas (unset counts as
    /// 1, the API's default).
    pub fn stateful_sets_in(&self, namespace: &str) -> shardring_core::identity::StatefulSets {
        self.stateful_sets
            .state()
            .iter()
            .filter(|set| set.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|set| {
                let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                Some((
                    set.metadata.name.clone()?,
                    u32::try_from(replicas).unwrap_or(0),
                ))
            })
            .collect()
    }
}

impl Stores {
    /// The pods of `namespace` that `pool` selects, as an observation
    /// holds them (without any group's annotation).
    pub fn pool_pods(&self, namespace: &str, pool: &ConsumerPool) -> Vec<PodInfo> {
        let nodes = &self.nodes;
        let zone_of = |node: &str| -> Option<String> {
            let meta = nodes.get(&ObjectRef::new(node))?;
            meta.labels().get(ZONE_LABEL).cloned()
        };
        let capacity_label = pool.spec.capacity.label.as_deref();
        let selector = PodSelector::new(&pool.spec.selector);
        let selects = |pod: &PodRecord| selector.matches(Some(&pod.labels));
        self.pods.read_namespace(namespace, |pods| {
            collect_pods(pods, selects, capacity_label, "", zone_of)
        })
    }

    /// The pool `name` in `namespace`, when it exists and could be read.
    pub fn pool(&self, namespace: &str, name: &str) -> Option<ConsumerPool> {
        let guard = self.pools.get(&ObjectRef::new(name).within(namespace))?;
        guard.0.as_ref().ok().cloned()
    }
}

/// The version of an owned ConfigMap, for the precondition of the next write.
pub(crate) fn published_version(cm: &ConfigMap) -> PublishedVersion {
    cm.metadata
        .resource_version
        .clone()
        .filter(|version| !version.is_empty())
        .map_or(PublishedVersion::Absent, PublishedVersion::At)
}

/// A pool's label selector, evaluated by kube's [`Selector`] (matchLabels
/// and matchExpressions, as the API server evaluates them). An empty selector
/// matches every pod; one the API server would refuse (an unknown operator,
/// `In` without values) matches none.
#[derive(Debug, Clone)]
pub(crate) struct PodSelector(Option<Selector>);

impl PodSelector {
    /// Parses `selector` once, for any number of pods.
    pub(crate) fn new(selector: &LabelSelector) -> Self {
        Self(Selector::try_from(selector.clone()).ok())
    }

    /// Whether a pod with `labels` is selected.
    pub(crate) fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let Some(selector) = &self.0 else {
            return false;
        };
        match labels {
            Some(labels) => selector.matches(labels),
            None => selector.matches(&BTreeMap::new()),
        }
    }
}

/// The ShardGroups a StatefulSet change concerns: those of its namespace
/// whose pool holds shards for returning pods.
pub fn groups_for_stateful_set(
    namespace: &str,
    groups: &[Arc<DeserializeGuard<ShardGroup>>],
    stores: &Stores,
) -> Vec<ObjectRef<DeserializeGuard<ShardGroup>>> {
    groups
        .iter()
        .filter(|guard| {
            guard.0.as_ref().is_ok_and(|g| {
                g.namespace().as_deref() == Some(namespace)
                    && stores
                        .pool(namespace, &g.spec.pool_ref.name)
                        .is_some_and(|p| p.spec.identity.is_some_and(|i| i.stable))
            })
        })
        .map(|g| ObjectRef::from_obj(g.as_ref()))
        .collect()
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
    let in_namespace: Vec<(&Arc<DeserializeGuard<ShardGroup>>, &ShardGroup)> = groups
        .iter()
        .filter_map(|guard| Some((guard, guard.0.as_ref().ok()?)))
        .filter(|(_, g)| g.namespace().as_deref() == Some(namespace))
        .collect();
    // With groups on several pools of the namespace, a change of one pool
    // (its selector, its deletion) can change which pools share pods and
    // are balanced together: every group of the namespace deals again.
    let several = in_namespace
        .windows(2)
        .any(|pair| pair[0].1.spec.pool_ref.name != pair[1].1.spec.pool_ref.name);
    in_namespace
        .into_iter()
        .filter(|(_, g)| several || g.spec.pool_ref.name == pool)
        .map(|(guard, _)| ObjectRef::from_obj(guard.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests;
