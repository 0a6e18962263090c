//! Which watch events wake a ShardGroup's reconcile, beyond the mapping of
//! pods and pools to their groups (see [`super::observe`]).
//!
//! Every reconcile of a large group costs tens of milliseconds, and one that
//! runs while an event arrives delays that event's publish. So the
//! operator's own writes do not wake a reconcile where they cannot change
//! its outcome:
//!
//! * a ShardGroup wakes its reconcile when its generation (the spec), its
//!   deletion timestamp or its finalizers change, never for a status write
//!   (only the operator writes status, and every reconcile reads the latest
//!   one from the cache). A ShardGroup that cannot be read wakes it at every
//!   change, so a fix is seen at once;
//! * an owned ConfigMap wakes it unless it is at a version whose document is
//!   already known ([`DocumentCache::knows`]): the operator's own write, or
//!   one a reconcile already read. A deletion always wakes it (the document
//!   is rebuilt);
//! * a ConsumerPool wakes its groups when it appears (a relist delivers it
//!   again), is deleted, or its generation (the spec), labels, annotations
//!   or deletion timestamp change ([`PoolChanges`]), never for a status
//!   write: the operator writes the pool's status after a group's writes,
//!   and on a pool of many groups each of those writes woke every group of
//!   the pool, a round of reconciles that change nothing, in the middle of
//!   the pod event's own (no decision reads the pool's status). A pool that
//!   cannot be read wakes them at every change;
//! * a pod wakes its groups unless it is the echo of the operator's own
//!   annotation write: at exactly the version that write produced
//!   ([`OwnWrites`]); the same holds for the document's ConfigMap, whose
//!   echo can arrive before the written document is in the cache. An
//!   update that arrives while a write to its object is on its way is held
//!   until the write's answer tells whether it was the echo (the watch can
//!   beat the answer); one that was not wakes the groups then. A deleted
//!   object always wakes them;
//! * nor does a pod update that leaves the pod's record in the cache as it
//!   was ([`PodRecords::apply_watcher_event`]): kubelet's status writes
//!   around a start, a readiness gate's condition, another tool's
//!   annotation. The record is every fact a decision reads of a pod, so a
//!   reconcile woken by such an update could only decide again what the
//!   last one did (the simulation wakes on the same rule).
//!
//! The caches still apply every event: only the wake-up is skipped.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use shardring_core::echoes::Verdict;

use super::observe::documents::DocumentCache;
use super::own_writes::OwnWrites;
#[cfg(doc)]
use super::pod_cache::PodRecords;
use crate::crds::{ConsumerPool, ShardGroup};

/// The predicate of the ShardGroup watch (`predicate_filter`): a reconcile
/// runs when this value changes.
pub fn group_change(group: &DeserializeGuard<ShardGroup>) -> Option<u64> {
    Some(wake_value(group, |meta| {
        hash(&(
            meta.generation,
            meta.deletion_timestamp.as_ref().map(|t| t.0),
            &meta.finalizers,
        ))
    }))
}

/// What wakes the reconciles of `object`'s kind: `of_readable` of its
/// metadata, or, when it cannot be read, its version (every change may be
/// the fix).
fn wake_value<K>(object: &DeserializeGuard<K>, of_readable: impl FnOnce(&ObjectMeta) -> u64) -> u64
where
    K: kube::Resource,
{
    match &object.0 {
        Ok(readable) => of_readable(readable.meta()),
        Err(invalid) => hash(&invalid.metadata.resource_version),
    }
}

/// Whether `event` is a ConfigMap update whose document is already known,
/// which wakes no reconcile.
pub(crate) fn known_document_update(
    documents: &DocumentCache,
    event: &Result<watcher::Event<ConfigMap>, watcher::Error>,
) -> bool {
    matches!(event, Ok(watcher::Event::Apply(cm)) if documents.knows(cm))
}

/// Whether `event` is the echo of the operator's own write to the
/// document's ConfigMap, or an event of it held while such a write is on
/// its way (judged when that write lands, see [`OwnWrites::begin`]):
/// either wakes no reconcile now. A deletion forgets the object's writes.
pub(crate) fn own_write_echo_or_held(
    own: &OwnWrites,
    event: &Result<watcher::Event<ConfigMap>, watcher::Error>,
) -> bool {
    match event {
        Ok(watcher::Event::Apply(config_map)) => own.judge(config_map) != Verdict::Change,
        _ => own_write_echo(own, event),
    }
}

/// Whether `event` updates an object that one of the operator's writes is
/// on its way to, and so is held until that write lands (see
/// [`OwnWrites::begin`]): asked after [`own_write_echo`] said no.
pub(crate) fn held_for_own_write<K: kube::Resource<DynamicType = ()>>(
    own: &OwnWrites,
    event: &Result<watcher::Event<K>, watcher::Error>,
) -> bool {
    matches!(event, Ok(watcher::Event::Apply(object)) if own.holds_while_in_flight(object))
}

/// Whether `event` is the echo of the operator's own write (to a pod or the
/// document's ConfigMap), which wakes no reconcile. A deletion forgets the
/// object's last write.
pub(crate) fn own_write_echo<K: kube::Resource<DynamicType = ()>>(
    own: &OwnWrites,
    event: &Result<watcher::Event<K>, watcher::Error>,
) -> bool {
    match event {
        Ok(watcher::Event::Apply(pod)) => own.is_echo(pod),
        Ok(watcher::Event::Delete(pod)) => {
            own.forget(pod);
            false
        }
        _ => false,
    }
}

/// The filter of the ConsumerPool watch's events (before they map to
/// groups): what each pool's wake-up value ([`pool_change`]) was when it
/// last woke them.
#[derive(Debug, Default)]
pub(crate) struct PoolChanges {
    woke_at: HashMap<ObjectRef<DeserializeGuard<ConsumerPool>>, u64>,
}

impl PoolChanges {
    /// Whether `event` wakes the groups of its pool: a deletion and a
    /// relist always do, an update when its wake-up value changed.
    pub(crate) fn wakes(
        &mut self,
        event: &Result<watcher::Event<DeserializeGuard<ConsumerPool>>, watcher::Error>,
    ) -> bool {
        match event {
            Ok(watcher::Event::Apply(pool)) => {
                let value = pool_change(pool);
                self.woke_at.insert(ObjectRef::from_obj(pool), value) != Some(value)
            }
            Ok(watcher::Event::InitApply(pool)) => {
                self.woke_at
                    .insert(ObjectRef::from_obj(pool), pool_change(pool));
                true
            }
            Ok(watcher::Event::Delete(pool)) => {
                self.woke_at.remove(&ObjectRef::from_obj(pool));
                true
            }
            _ => true,
        }
    }
}

/// What a pool's groups are woken by: its spec (generation), labels,
/// annotations and deletion; every change of a pool that cannot be read.
fn pool_change(pool: &DeserializeGuard<ConsumerPool>) -> u64 {
    wake_value(pool, |meta| {
        hash(&(
            meta.generation,
            &meta.labels,
            &meta.annotations,
            meta.deletion_timestamp.as_ref().map(|t| t.0),
        ))
    })
}

fn hash(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GroupKey;
    use crate::controller::apply::GROUP_LABEL;
    use crate::crds::shard_group::{PoolRef, ShardSource, StaticSource};
    use crate::crds::{AssignmentDocument, ShardGroupSpec, ShardGroupStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::sync::Arc;

    fn group() -> ShardGroup {
        let mut group = ShardGroup::new(
            "g",
            ShardGroupSpec {
                pool_ref: PoolRef { name: "p".into() },
                source: ShardSource::Static(StaticSource {
                    count: 4,
                    name_template: "s-{index}".into(),
                }),
                lease_table: None,
                consumer_name: None,
                standbys: 0,
                balance: Default::default(),
                throughput: None,
                scaling: None,
                handoff: Default::default(),
                rebalance: Default::default(),
                output: Default::default(),
            },
        );
        group.metadata.generation = Some(1);
        group.metadata.resource_version = Some("10".into());
        group
    }

    fn change(g: &ShardGroup) -> Option<u64> {
        group_change(&DeserializeGuard(Ok(g.clone())))
    }

    #[test]
    fn a_status_write_wakes_no_reconcile_and_spec_deletion_finalizers_do() {
        let before = group();
        let mut status_only = before.clone();
        status_only.status = Some(ShardGroupStatus {
            epoch: 9,
            ..Default::default()
        });
        status_only.metadata.resource_version = Some("11".into());
        assert_eq!(change(&before), change(&status_only));

        let mut spec = before.clone();
        spec.metadata.generation = Some(2);
        let mut finalized = before.clone();
        finalized.metadata.finalizers = Some(vec!["shardring.io/cleanup".into()]);
        let mut deleted = before.clone();
        deleted.metadata.deletion_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().unwrap()));
        for other in [spec, finalized, deleted] {
            assert_ne!(change(&before), change(&other), "{:?}", other.metadata);
        }
    }

    #[test]
    fn a_pool_status_write_wakes_no_group_and_its_spec_labels_deletion_relist_do() {
        use crate::crds::ConsumerPoolStatus;
        use crate::crds::fixtures;
        let mut pool = fixtures::pool("ns", "p", &[], 0);
        pool.metadata.generation = Some(1);
        pool.metadata.resource_version = Some("5".into());
        let event = |pool: &ConsumerPool, kind: fn(_) -> watcher::Event<_>| {
            Ok(kind(DeserializeGuard(Ok(pool.clone()))))
        };
        let mut changes = PoolChanges::default();
        assert!(
            changes.wakes(&event(&pool, watcher::Event::Apply)),
            "first seen"
        );

        let mut status_only = pool;
        status_only.status = Some(ConsumerPoolStatus {
            pods: 7,
            ..Default::default()
        });
        status_only.metadata.resource_version = Some("6".into());
        assert!(!changes.wakes(&event(&status_only, watcher::Event::Apply)));

        let mut spec = status_only;
        spec.metadata.generation = Some(2);
        assert!(changes.wakes(&event(&spec, watcher::Event::Apply)));
        assert!(
            !changes.wakes(&event(&spec, watcher::Event::Apply)),
            "the same again"
        );
        let mut labelled = spec;
        labelled.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
        assert!(changes.wakes(&event(&labelled, watcher::Event::Apply)));
        let mut deleting = labelled.clone();
        deleting.metadata.deletion_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().unwrap()));
        assert!(changes.wakes(&event(&deleting, watcher::Event::Apply)));

        // A relist and a deletion always wake; after the deletion the same
        // pool created again is new.
        assert!(changes.wakes(&event(&labelled, watcher::Event::InitApply)));
        assert!(changes.wakes(&event(&labelled, watcher::Event::Delete)));
        assert!(changes.wakes(&event(&labelled, watcher::Event::Apply)));
    }

    #[test]
    fn an_unreadable_pool_wakes_its_groups_at_every_change() {
        let invalid = |version: &str| {
            let object: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "shardring.io/v1alpha1",
                "kind": "ConsumerPool",
                "metadata": {"namespace": "ns", "name": "p", "resourceVersion": version, "generation": 1},
                "spec": {"selector": 3},
            }))
            .unwrap();
            let guard: DeserializeGuard<ConsumerPool> =
                serde_json::from_value(serde_json::to_value(object).unwrap()).unwrap();
            assert!(guard.0.is_err(), "a pool the operator cannot read");
            Ok(watcher::Event::Apply(guard))
        };
        let mut changes = PoolChanges::default();
        assert!(changes.wakes(&invalid("5")));
        assert!(changes.wakes(&invalid("6")));
    }

    fn config_map(version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("g-assignment".into()),
                resource_version: Some(version.into()),
                labels: Some([(GROUP_LABEL.to_owned(), "g".to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_a_known_document_update_is_quiet() {
        let documents = DocumentCache::default();
        let doc = Arc::new(AssignmentDocument::new("ns/g", 1));
        documents.remember(&GroupKey::new("ns", "g"), "g-assignment", "7".into(), doc);
        let apply = |v: &str| Ok(watcher::Event::Apply(config_map(v)));
        assert!(known_document_update(&documents, &apply("7")));
        assert!(!known_document_update(&documents, &apply("8")));
        let deleted = Ok(watcher::Event::Delete(config_map("7")));
        assert!(!known_document_update(&documents, &deleted));
    }

    #[test]
    fn only_the_echo_of_an_own_write_is_quiet_and_a_deletion_forgets_it() {
        let own = OwnWrites::default();
        own.record(&config_map("7"));
        let apply = |v: &str| Ok(watcher::Event::Apply(config_map(v)));
        assert!(!own_write_echo(&own, &apply("6")));
        assert!(own_write_echo(&own, &apply("7")));
        // A relist delivers every object again: it wakes the groups.
        assert!(!own_write_echo(
            &own,
            &Ok(watcher::Event::InitApply(config_map("7")))
        ));
        own.record(&config_map("9"));
        let deleted = Ok(watcher::Event::Delete(config_map("9")));
        assert!(!own_write_echo(&own, &deleted));
        assert!(!own_write_echo(&own, &apply("9")));
    }
}
