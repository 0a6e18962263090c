//! The pod cache: every watched pod as a compact [`PodRecord`], by
//! namespace, fed by the pod watch's events.
//!
//! Why not a reflector store of the decoded pods: a [`CachedPod`] is a
//! k8s-openapi `ObjectMeta` of a dozen optional fields plus labels and
//! annotations maps, keyed by an `ObjectRef` of four strings. A record keeps
//! what the observe step reads, each fact derived once from the pod as the
//! watch delivered it (what its container statuses say, whether it is
//! Ready and since when), the labels shared by every pod with the same label
//! set (the pods of one ReplicaSet have the same labels), and only
//! shardring's annotations (its prefix, and the custom keys of
//! `spec.output.annotationKey` the ShardGroup watch hands the cache), in a
//! short list. And a reconcile reads its own namespace's pods only, where a
//! store of all pods made every reconcile of 1,000 groups walk all 50,000.
//! (What it saves in peak memory is measured by `apiserver_scale`; see
//! docs/benchmarks.md.)
//!
//! A relist (the watch's `Init` … `InitDone`) fills a new set while reads
//! still see the old one, then replaces it, as a reflector store does.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;

use kube::runtime::watcher;
pub use shardring_core::group_state::pods::{Labels, PodRecord};

use super::cached_pod::{CachedPod, containers_of, has_generated_name};
use crate::crds::assignment::ANNOTATION_PREFIX;

// The record of one pod (the core's, which the simulation and the demo
// fill from their own pods) from a pod as the watch delivered it.
impl PodRecords {
    /// The record of a pod as the watch delivered it, its label set taken
    /// from `labels`, keeping the annotations `keep` names.
    fn record(pod: &CachedPod, labels: &mut LabelSets, keep: &KeptAnnotations) -> PodRecord {
        let meta = &pod.metadata;
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let mut annotations: Vec<(String, String)> = meta
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| keep.keeps(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        annotations.shrink_to_fit();
        PodRecord {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            labels: labels.intern(meta.labels.as_ref()),
            annotations,
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            deletion_timestamp: meta.deletion_timestamp.as_ref().map(|t| t.0),
            deletion_grace_seconds: meta.deletion_grace_period_seconds,
            generated_name: has_generated_name(meta),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            ready: ready.is_some_and(|c| c.status == "True"),
            ready_since: ready
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0),
            containers: containers_of(pod),
            ip: pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok()),
            stateful_set: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && o.kind == "StatefulSet")
                .map(|o| o.name.clone()),
        }
    }
}

impl From<&CachedPod> for PodRecord {
    /// The record of one pod, with a label set of its own and the
    /// annotations under shardring's prefix.
    fn from(pod: &CachedPod) -> Self {
        PodRecords::record(pod, &mut LabelSets::default(), &KeptAnnotations::default())
    }
}

/// Which annotations a record keeps: those under shardring's prefix, and the
/// custom keys ShardGroups publish their views under.
#[derive(Debug, Default)]
struct KeptAnnotations {
    custom: BTreeSet<String>,
}

impl KeptAnnotations {
    fn keeps(&self, key: &str) -> bool {
        key.starts_with(ANNOTATION_PREFIX) || self.custom.contains(key)
    }
}

/// Pods by namespace, then by name.
type Namespaces = HashMap<String, BTreeMap<String, PodRecord>>;

/// The pod cache. Cheap to clone: clones share one cache.
#[derive(Debug, Clone, Default)]
pub struct PodRecords {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    live: Namespaces,
    /// The set a relist is filling, until its `InitDone`.
    relist: Option<Namespaces>,
    labels: LabelSets,
    keep: KeptAnnotations,
}

impl PodRecords {
    /// Keeps, besides shardring's own, the annotations named `keys` (the
    /// ShardGroups' custom `spec.output.annotationKey`s) of the pods seen
    /// from now on (a pod already cached gets them with its next event).
    pub fn keep_annotations(&self, keys: BTreeSet<String>) {
        // Nearly every ShardGroup event (the operator's own status writes
        // among them) leaves the keys as they were: the write lock, which
        // holds off every reconcile's pod read, only for a real change.
        if self.inner.read().keep.custom == keys {
            return;
        }
        self.inner.write().keep.custom = keys;
    }

    /// Applies one watch event, as a reflector store does, and says whether
    /// it changed what a reconcile reads of its pod: an update of a pod
    /// whose record comes out as cached (a condition, phase or field no
    /// decision reads, another tool's annotation) did not; an update that
    /// changed the record, a deletion and a relist's pods did.
    pub fn apply_watcher_event(&self, event: &watcher::Event<CachedPod>) -> bool {
        let mut inner = self.inner.write();
        let inner = &mut *inner;
        match event {
            watcher::Event::Apply(pod) => {
                let record = Self::record(pod, &mut inner.labels, &inner.keep);
                insert(&mut inner.live, pod, record)
            }
            watcher::Event::Delete(pod) => {
                let (namespace, name) = key_of(pod);
                if let Some(pods) = inner.live.get_mut(namespace) {
                    pods.remove(name);
                    if pods.is_empty() {
                        inner.live.remove(namespace);
                    }
                }
                inner.labels.forget_unused();
                true
            }
            watcher::Event::Init => {
                inner.relist = Some(Namespaces::new());
                true
            }
            watcher::Event::InitApply(pod) => {
                let record = Self::record(pod, &mut inner.labels, &inner.keep);
                insert(inner.relist.get_or_insert_default(), pod, record);
                true
            }
            watcher::Event::InitDone => {
                if let Some(listed) = inner.relist.take() {
                    inner.live = listed;
                    inner.labels.forget_unused();
                }
                true
            }
        }
    }

    /// `read` over the pods of `namespace`, in name order, while the cache
    /// holds still.
    pub fn read_namespace<R>(
        &self,
        namespace: &str,
        read: impl FnOnce(&mut dyn Iterator<Item = &PodRecord>) -> R,
    ) -> R {
        let inner = self.inner.read();
        // An iterator that knows its length, so the reader can size its
        // output once (5,000 pods grown by doubling were a tenth of the
        // observe step's time, in copies).
        let none = BTreeMap::new();
        let mut pods = inner.live.get(namespace).unwrap_or(&none).values();
        read(&mut pods)
    }

    /// The record of pod `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<PodRecord> {
        let inner = self.inner.read();
        inner.live.get(namespace)?.get(name).cloned()
    }

    /// Pods cached.
    pub fn len(&self) -> usize {
        let inner = self.inner.read();
        inner.live.values().map(BTreeMap::len).sum()
    }

    /// Whether no pod is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct label sets held.
    #[cfg(test)]
    fn label_sets(&self) -> usize {
        self.inner.read().labels.sets.len()
    }
}

fn key_of(pod: &CachedPod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Puts `record` in `pod`'s place; whether it differs from the one there.
fn insert(namespaces: &mut Namespaces, pod: &CachedPod, record: PodRecord) -> bool {
    let (namespace, name) = key_of(pod);
    let pods = match namespaces.get_mut(namespace) {
        Some(pods) => pods,
        None => namespaces.entry(namespace.to_owned()).or_default(),
    };
    match pods.get_mut(name) {
        Some(slot) if *slot == record => false,
        Some(slot) => {
            *slot = record;
            true
        }
        None => {
            pods.insert(name.to_owned(), record);
            true
        }
    }
}

/// The distinct label sets of the cached pods.
#[derive(Debug, Default)]
struct LabelSets {
    sets: HashSet<Labels>,
    /// Sets held after the last sweep: the next sweep waits until twice as
    /// many, so sweeping costs a constant per event on average.
    swept_at: usize,
}

impl LabelSets {
    /// The shared set equal to `labels` (an empty one when `None`).
    fn intern(&mut self, labels: Option<&BTreeMap<String, String>>) -> Labels {
        let empty = BTreeMap::new();
        let labels = labels.unwrap_or(&empty);
        if let Some(shared) = self.sets.get(labels) {
            return shared.clone();
        }
        let shared = Arc::new(labels.clone());
        self.sets.insert(shared.clone());
        if self.sets.len() > 2 * self.swept_at.max(64) {
            self.forget_unused();
        }
        shared
    }

    /// Drops the sets no record holds any more.
    fn forget_unused(&mut self) {
        if self.sets.len() <= 2 * self.swept_at.max(64) {
            return;
        }
        self.sets.retain(|set| Arc::strong_count(set) > 1);
        self.swept_at = self.sets.len();
    }
}

#[cfg(test)]
mod tests;
