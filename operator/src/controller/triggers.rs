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
//! * a ConsumerPool wakes its groups when its generation (the spec) or its
//!   deletion timestamp changes, when it is created or deleted, never for a
//!   status write ([`PoolChanges`]): the operator writes a pool's status
//!   after its groups' reconciles, and each write woke every group of the
//!   pool (six reconciles per pod event for one group of 20,000 shards,
//!   fifty per write for a pool of fifty groups), though no plan reads it.
//!   A pool that cannot be read wakes them at every change;
//! * a pod wakes its groups unless it is the echo of the operator's own
//!   annotation write: at exactly the version that write produced
//!   ([`OwnWrites`]); the same holds for the document's ConfigMap, whose
//!   echo can arrive before the written document is in the cache. A deleted
//!   object always wakes them.
//!
//! The caches still apply every event: only the wake-up is skipped.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::core::DeserializeGuard;
use kube::runtime::watcher;

use super::observe::documents::DocumentCache;
use super::own_writes::OwnWrites;
use crate::crds::{ConsumerPool, ShardGroup};

/// The predicate of the ShardGroup watch (`predicate_filter`): a reconcile
/// runs when this value changes.
pub fn group_change(group: &DeserializeGuard<ShardGroup>) -> Option<u64> {
    let meta = match &group.0 {
        Ok(group) => &group.metadata,
        // Unreadable: every change may be the fix.
        Err(invalid) => return Some(hash(&invalid.metadata.resource_version)),
    };
    Some(hash(&(
        meta.generation,
        meta.deletion_timestamp.as_ref().map(|t| t.0),
        &meta.finalizers,
    )))
}

/// The ConsumerPool watch's memory of what each pool's groups last planned
/// from (by uid: a pool deleted and created again under its name is new).
#[derive(Debug, Default)]
pub(crate) struct PoolChanges {
    seen: HashMap<String, u64>,
}

impl PoolChanges {
    /// Whether `event` wakes the groups of its pool: a pool seen for the
    /// first time, one whose [`pool_change`] differs from the last seen, or
    /// a deletion; not a write of its status (or of metadata no plan
    /// reads). Errors and the markers of a list pass as they are.
    pub(crate) fn wakes(
        &mut self,
        event: &Result<watcher::Event<DeserializeGuard<ConsumerPool>>, watcher::Error>,
    ) -> bool {
        match event {
            Ok(watcher::Event::Apply(pool) | watcher::Event::InitApply(pool)) => {
                let change = pool_change(pool);
                self.seen.insert(uid(pool), change) != Some(change)
            }
            Ok(watcher::Event::Delete(pool)) => {
                self.seen.remove(&uid(pool));
                true
            }
            _ => true,
        }
    }
}

/// What of a pool its groups plan from: its generation (the spec) and its
/// deletion timestamp; every version of a pool that cannot be read.
fn pool_change(pool: &DeserializeGuard<ConsumerPool>) -> u64 {
    match &pool.0 {
        Ok(pool) => hash(&(
            pool.metadata.generation,
            pool.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        )),
        Err(invalid) => hash(&invalid.metadata.resource_version),
    }
}

fn uid(pool: &DeserializeGuard<ConsumerPool>) -> String {
    let meta = pool.meta();
    meta.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )
    })
}

/// Whether `event` is a ConfigMap update whose document is already known,
/// which wakes no reconcile.
pub(crate) fn known_document_update(
    documents: &DocumentCache,
    event: &Result<watcher::Event<ConfigMap>, watcher::Error>,
) -> bool {
    matches!(event, Ok(watcher::Event::Apply(cm)) if documents.knows(cm))
}

/// Whether `event` is the echo of the operator's own write (to a pod or the
/// document's ConfigMap), which wakes no reconcile. A deletion forgets the
/// object's last write.
pub(crate) fn own_write_echo<K: Resource<DynamicType = ()>>(
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
    use kube::api::ObjectMeta;
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

    #[test]
    fn a_pool_wakes_its_groups_for_its_spec_and_deletion_never_its_status() {
        let pool = |uid: &str, generation: i64, version: &str| {
            let mut pool = crate::crds::fixtures::pool("ns", "p", &[("app", "c")], 0);
            pool.metadata.uid = Some(uid.into());
            pool.metadata.generation = Some(generation);
            pool.metadata.resource_version = Some(version.into());
            DeserializeGuard(Ok(pool))
        };
        let apply = |p| Ok(watcher::Event::Apply(p));
        let mut changes = PoolChanges::default();
        assert!(changes.wakes(&apply(pool("u1", 1, "10"))), "a new pool");
        // Its status written (the generation stays): nothing to plan anew.
        assert!(!changes.wakes(&apply(pool("u1", 1, "11"))));
        assert!(!changes.wakes(&apply(pool("u1", 1, "12"))));
        // A relist that finds it as it was wakes nothing either (the list's
        // completion reconciles every group anyway).
        assert!(!changes.wakes(&Ok(watcher::Event::InitApply(pool("u1", 1, "12")))));
        assert!(
            changes.wakes(&apply(pool("u1", 2, "13"))),
            "its spec changed"
        );
        let mut deleting = pool("u1", 2, "14");
        if let Ok(p) = &mut deleting.0 {
            p.metadata.deletion_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().unwrap()));
        }
        assert!(changes.wakes(&apply(deleting)), "being deleted");
        assert!(changes.wakes(&Ok(watcher::Event::Delete(pool("u1", 2, "15")))));
        // The same name created again is a new pool.
        assert!(changes.wakes(&apply(pool("u2", 1, "16"))));
        assert!(changes.wakes(&Ok(watcher::Event::InitDone)));
    }
}
