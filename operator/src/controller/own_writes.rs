//! The object versions the operator's own writes produced (pod annotations,
//! the document's ConfigMap), so that their watch echoes wake no reconcile.
//!
//! Why: every write comes back through a watch as a modified object, and
//! that event maps to the object's ShardGroup. At 5,000 pods a reconcile
//! costs tens of milliseconds, and the echo of a churn event's own writes
//! was a second, no-op reconcile that the next event had to wait behind. A
//! watch event whose object is at exactly the resourceVersion the API server
//! returned for the operator's write is that write: nothing else changed in
//! it (every other change has its own version, and its own event, which
//! still wakes the group). It is remembered as soon as the write returns,
//! because the echo can arrive while the rest of the reconcile's writes are
//! still going out. The caches apply the echo as any event; only the
//! wake-up is skipped (see `triggers`).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use kube::{Resource, ResourceExt};

/// (kind, namespace, name) of a written object.
type Key = (String, String, String);

/// The version of each object's last write by this operator. Holds at most
/// one entry per object written: an entry goes when its echo arrives, when
/// the object is deleted, or when a newer write replaces it. Cheap to clone:
/// clones share one memory.
#[derive(Debug, Clone, Default)]
pub struct OwnWrites {
    versions: Arc<Mutex<HashMap<Key, String>>>,
}

impl OwnWrites {
    /// Remembers `written`, the object as the API server answered a write.
    pub fn record<K: Resource<DynamicType = ()>>(&self, written: &K) {
        if let (Some(key), Some(version)) = (key_of(written), written.resource_version()) {
            self.versions.lock().insert(key, version);
        }
    }

    /// Whether `object` is exactly what the operator's last write to it left
    /// (its echo); the entry is spent by the answer yes.
    pub(crate) fn is_echo<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let (Some(key), Some(version)) = (key_of(object), object.resource_version()) else {
            return false;
        };
        let mut versions = self.versions.lock();
        if versions.get(&key) == Some(&version) {
            versions.remove(&key);
            return true;
        }
        false
    }

    /// Forgets `object` (deleted: a same-named successor starts afresh).
    pub(crate) fn forget<K: Resource<DynamicType = ()>>(&self, object: &K) {
        if let Some(key) = key_of(object) {
            self.versions.lock().remove(&key);
        }
    }

    /// Objects with a write whose echo has not arrived yet.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.versions.lock().len()
    }
}

fn key_of<K: Resource<DynamicType = ()>>(object: &K) -> Option<Key> {
    Some((
        K::kind(&()).into_owned(),
        object.namespace()?,
        object.meta().name.clone()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::CachedPod;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn meta(name: &str, version: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some(version.into()),
            ..Default::default()
        }
    }

    fn pod(name: &str, version: &str) -> CachedPod {
        CachedPod {
            metadata: meta(name, version),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_exact_version_written_is_an_echo_and_only_once() {
        let own = OwnWrites::default();
        own.record(&pod("a", "10"));
        // Another change to the pod (before or after the write) is no echo.
        assert!(!own.is_echo(&pod("a", "9")));
        assert!(!own.is_echo(&pod("b", "10")));
        // Nor is another kind of object of the same name and version.
        let config_map = ConfigMap {
            metadata: meta("a", "10"),
            ..Default::default()
        };
        assert!(!own.is_echo(&config_map));
        assert!(own.is_echo(&pod("a", "10")));
        // Seen once: a relist at the same version wakes the group again.
        assert!(!own.is_echo(&pod("a", "10")));
        assert_eq!(own.pending(), 0);
    }

    #[test]
    fn a_newer_write_replaces_the_older_and_a_deletion_forgets() {
        let own = OwnWrites::default();
        own.record(&pod("a", "10"));
        own.record(&pod("a", "12"));
        assert!(!own.is_echo(&pod("a", "10")));
        assert_eq!(own.pending(), 1);
        own.forget(&pod("a", "12"));
        assert_eq!(own.pending(), 0);
        assert!(!own.is_echo(&pod("a", "12")));
    }
}
