//! A one-time picture of a namespace, for read-only tools (`kubectl
//! shardring`): the operator's own stores filled from one list of each kind
//! instead of watches, and observations built from them by the same code a
//! reconcile runs ([`Stores::observation`], the pool's deal). Nothing here
//! writes to the cluster.
//!
//! What a snapshot cannot see as the operator does: the source (a Kinesis
//! group's topology is taken from its published document, which lists
//! every shard the operator last read), the lease table, the releases and
//! loads consumers reported at the endpoint (the leader's memory), and the
//! pods that already left (the pod watch's memory).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use shardring_core::observation::{Observation, Published, TopologyObservation};
use shardring_core::topology::Topology;

use super::apply::{MANAGED_BY, MANAGED_BY_LABEL};
use super::cached_pod::CachedPod;
use super::observe::documents::DocumentCache;
use super::observe::{Reads, Stores};
use super::pod_cache::PodRecords;
use super::pools::Pools;
use crate::GroupKey;
use crate::crds::{AssignmentDocument, ConsumerPool, ShardGroup, ShardPhase};
use crate::engine::{Shard, ShardState};

/// The namespace's ShardGroups, ConsumerPools, pods, StatefulSets and
/// assignment ConfigMaps, as one list of each returned them.
pub struct Snapshot {
    namespace: String,
    groups: Vec<ShardGroup>,
    pools: Vec<ConsumerPool>,
    pods: Vec<Pod>,
    stores: Stores,
    group_store: Store<DeserializeGuard<ShardGroup>>,
    now: Timestamp,
}

/// Fills a reflector store with `objects`, as a watch's initial list would.
fn store_of<K>(objects: impl IntoIterator<Item = K>) -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

impl Snapshot {
    /// Lists what the operator watches in `namespace` (ConfigMaps: the ones
    /// it manages), at `now`.
    ///
    /// # Errors
    /// A list the API server refused (the caller's RBAC, a missing CRD).
    pub async fn list(
        client: &Client,
        namespace: &str,
        now: Timestamp,
    ) -> Result<Self, kube::Error> {
        let all = ListParams::default();
        let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace)
            .list(&all)
            .await?
            .items;
        let pools = Api::<ConsumerPool>::namespaced(client.clone(), namespace)
            .list(&all)
            .await?
            .items;
        let pods = Api::<Pod>::namespaced(client.clone(), namespace)
            .list(&all)
            .await?
            .items;
        let managed = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
        let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .list(&managed)
            .await?
            .items;
        let stateful_sets = Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .list(&all)
            .await?
            .items;
        Ok(Self::from_objects(
            namespace,
            groups,
            pools,
            pods,
            config_maps,
            stateful_sets,
            now,
        ))
    }

    /// A snapshot of the given objects of `namespace` at `now`.
    pub fn from_objects(
        namespace: &str,
        groups: Vec<ShardGroup>,
        pools: Vec<ConsumerPool>,
        pods: Vec<Pod>,
        config_maps: Vec<ConfigMap>,
        stateful_sets: Vec<StatefulSet>,
        now: Timestamp,
    ) -> Self {
        let pod_cache = PodRecords::default();
        pod_cache.apply_watcher_event(&watcher::Event::Init);
        for pod in &pods {
            pod_cache.apply_watcher_event(&watcher::Event::InitApply(CachedPod::from(pod)));
        }
        pod_cache.apply_watcher_event(&watcher::Event::InitDone);
        let stores = Stores {
            pools: store_of(pools.iter().cloned().map(|p| DeserializeGuard(Ok(p)))),
            pods: pod_cache,
            nodes: store_of(std::iter::empty()),
            config_maps: store_of(config_maps),
            departed: Default::default(),
            documents: DocumentCache::default(),
            stateful_sets: store_of(stateful_sets),
        };
        let group_store = store_of(groups.iter().cloned().map(|g| DeserializeGuard(Ok(g))));
        Self {
            namespace: namespace.to_owned(),
            groups,
            pools,
            pods,
            stores,
            group_store,
            now,
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Its ShardGroups, by name.
    pub fn groups(&self) -> &[ShardGroup] {
        &self.groups
    }

    /// Its ConsumerPools, by name.
    pub fn pools(&self) -> &[ConsumerPool] {
        &self.pools
    }

    /// Its pods.
    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// When it was taken.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The ShardGroup `name`.
    pub fn group(&self, name: &str) -> Option<&ShardGroup> {
        self.groups.iter().find(|g| g.name_any() == name)
    }

    /// The groups that reference pool `pool`.
    pub fn groups_of(&self, pool: &str) -> Vec<&ShardGroup> {
        self.groups
            .iter()
            .filter(|g| g.spec.pool_ref.name == pool)
            .collect()
    }

    /// `group`'s published document, when it has a readable one (after
    /// [`Snapshot::publish`], the one published there).
    pub fn document(&self, group: &ShardGroup) -> Option<Arc<AssignmentDocument>> {
        match self.stores.published(group).0 {
            Published::Document(doc) => Some(doc),
            Published::Deleted(_) | Published::Missing | Published::Unreadable(_) => None,
        }
    }

    /// The observation a reconcile of `group` would start from, the pool's
    /// deal included: with the topology [`topology`] makes of its source
    /// and document, and nothing read from the lease table or the
    /// endpoint.
    pub fn observation(&self, group: &ShardGroup) -> Observation {
        let (published, _) = self.stores.published(group);
        let topology = topology(group, published.document(), self.now);
        let reads = Reads::topology(group, topology);
        let mut observation = self.stores.observation(group, published, reads, self.now);
        // A what-if moves no shard for load: nobody's loads are read.
        let loads = crate::endpoint::Loads::default();
        Pools::new(self.group_store.clone()).deal_into(&self.stores, &loads, &mut observation);
        observation
    }

    /// The stores, for [`super::what_if`].
    pub(super) fn stores(&self) -> &Stores {
        &self.stores
    }

    /// Replaces the pods of the snapshot (the what-if's scaled pool), as
    /// a watch's relist would.
    pub(super) fn replace_pods(&mut self, pods: Vec<Pod>) {
        self.stores.pods.apply_watcher_event(&watcher::Event::Init);
        for pod in &pods {
            self.stores
                .pods
                .apply_watcher_event(&watcher::Event::InitApply(CachedPod::from(pod)));
        }
        self.stores
            .pods
            .apply_watcher_event(&watcher::Event::InitDone);
        self.pods = pods;
    }

    /// Replaces the StatefulSet of `set`'s name (the what-if's scaled
    /// set).
    pub(super) fn replace_stateful_set(&mut self, set: StatefulSet) {
        let name = set.name_any();
        let mut sets: Vec<StatefulSet> = self
            .stores
            .stateful_sets
            .state()
            .iter()
            .filter(|s| s.name_any() != name)
            .map(|s| (**s).clone())
            .collect();
        sets.push(set);
        self.stores.stateful_sets = store_of(sets);
    }

    /// Takes `document` as `group`'s published one from now on (the what-if
    /// planning its groups one after another, as a peer's write is seen by
    /// the next group's deal): its ConfigMap in the store gets a version of
    /// its own, at which the document cache knows `document`, as it knows
    /// the operator's own writes, so nothing decodes or replaces it.
    pub(super) fn publish(&mut self, group: &ShardGroup, document: Arc<AssignmentDocument>) {
        let key = GroupKey::of(group);
        let name = group.config_map_name();
        let version = format!("what-if-{}", document.epoch);
        let mut config_maps: Vec<ConfigMap> = Vec::new();
        let mut written = None;
        for cm in self.stores.config_maps.state() {
            if cm.name_any() == name && cm.namespace().as_deref() == Some(&key.namespace) {
                written = Some((*cm).clone());
            } else {
                config_maps.push((*cm).clone());
            }
        }
        let mut written = written.unwrap_or_else(|| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(key.namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        });
        written.metadata.resource_version = Some(version.clone());
        config_maps.push(written);
        self.stores.config_maps = store_of(config_maps);
        self.stores
            .documents
            .remember(&key, &name, version, document);
    }
}

/// The topology of `group` without reading its source: the partitions its
/// spec names (a static source), or every shard `document` lists (with its
/// parents and hash key range; a shard another lists as a parent is closed;
/// a complete one stays complete), which is what the operator read last.
/// `None` when a group whose source must be read has published nothing yet.
pub fn topology(
    group: &ShardGroup,
    document: Option<&AssignmentDocument>,
    now: Timestamp,
) -> TopologyObservation {
    let named = group.spec.source.named_partitions();
    let from_spec = named.is_some();
    let topology = match named {
        Some(names) => Some(Topology::of_partitions(names)),
        None => document.map(document_topology),
    };
    let lineage: BTreeMap<String, Vec<String>> = document
        .map(|doc| {
            doc.shards
                .iter()
                .filter(|(_, r)| !r.parents.is_empty())
                .map(|(id, r)| (id.clone(), r.parents.clone()))
                .collect()
        })
        .unwrap_or_default();
    TopologyObservation {
        source: if from_spec {
            group.spec.source.summary()
        } else {
            "published document".into()
        },
        last_good: topology.map(Arc::new),
        read_at: Some(now),
        confirmed_at: Some(now),
        ordering_enforced: group
            .spec
            .source
            .has_lineage()
            .then(|| group.spec.lease_table.is_some()),
        lineage,
        ..Default::default()
    }
}

/// The shards `document` lists, as a source would list them.
fn document_topology(document: &AssignmentDocument) -> Topology {
    let parents: std::collections::BTreeSet<&str> = document
        .shards
        .values()
        .flat_map(|r| r.parents.iter().map(String::as_str))
        .collect();
    let shards = document
        .shards
        .iter()
        .map(|(id, record)| Shard {
            id: id.clone(),
            hash_key_range: record
                .hash_key_range
                .as_deref()
                .map(|r| crate::engine::HashKeyRange {
                    start: r.start.clone(),
                    end: r.end.clone(),
                }),
            parents: record.parents.clone(),
            state: if record.state == ShardPhase::Complete {
                ShardState::Complete
            } else if parents.contains(id.as_str()) {
                ShardState::Closed
            } else {
                ShardState::Open
            },
        })
        .collect::<Vec<_>>()
        .into();
    Topology { shards }
}
