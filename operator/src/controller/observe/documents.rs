//! The decoded published documents, one per owned ConfigMap, kept while the
//! ConfigMap's `metadata.resourceVersion` is unchanged.
//!
//! Why: every reconcile reads the group's published document, and at 20,000
//! shards inflating and parsing it costs tens of milliseconds and several
//! megabytes each time, although it changes only when the operator itself
//! publishes. A stored object's resourceVersion changes with every write, so
//! a document decoded at a version is the document of that version; after
//! its own write the operator remembers the document it wrote at the version
//! the API server answered (when the stored content is exactly what it sent),
//! so the next reconcile decodes nothing at all.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use k8s_openapi::api::core::v1::ConfigMap;

use super::Published;
use crate::crds::AssignmentDocument;
use shardring_core::codec;

/// Decoded documents by ConfigMap (namespace, name). Cheap to clone: clones
/// share one cache.
#[derive(Clone, Default)]
pub struct DocumentCache {
    entries: Arc<Mutex<HashMap<(String, String), Entry>>>,
}

struct Entry {
    version: String,
    document: Arc<AssignmentDocument>,
}

impl DocumentCache {
    /// The document of `config_map`: the cached one when it was decoded (or
    /// written) at the ConfigMap's current resourceVersion, else decoded now
    /// and kept. An unreadable document is never kept.
    pub fn published(&self, config_map: &ConfigMap) -> Published {
        let key = key_of(config_map);
        let version = config_map
            .metadata
            .resource_version
            .as_deref()
            .filter(|v| !v.is_empty());
        if let Some(version) = version
            && let Some(entry) = self.entries.lock().get(&key)
            && entry.version == version
        {
            return Published::Document(entry.document.clone());
        }
        // Decoded outside the lock: other groups' reconciles go on meanwhile.
        match codec::decode(config_map) {
            Ok(document) => {
                let document = Arc::new(document);
                if let Some(version) = version {
                    self.entries.lock().insert(
                        key,
                        Entry {
                            version: version.to_owned(),
                            document: document.clone(),
                        },
                    );
                }
                Published::Document(document)
            }
            Err(error) => {
                self.entries.lock().remove(&key);
                Published::Unreadable(error.to_string())
            }
        }
    }

    /// Whether the document of `config_map` at its current resourceVersion
    /// is known (decoded or written by this operator).
    pub fn knows(&self, config_map: &ConfigMap) -> bool {
        let version = config_map.metadata.resource_version.as_deref();
        version.is_some_and(|v| !v.is_empty())
            && self
                .entries
                .lock()
                .get(&key_of(config_map))
                .is_some_and(|entry| Some(entry.version.as_str()) == version)
    }

    /// Remembers that the ConfigMap `namespace/name` holds `document` at
    /// `version` (the operator's own write, as the API server stored it).
    pub(crate) fn remember(
        &self,
        namespace: &str,
        name: &str,
        version: String,
        document: Arc<AssignmentDocument>,
    ) {
        self.entries.lock().insert(
            (namespace.to_owned(), name.to_owned()),
            Entry { version, document },
        );
    }

    /// Forgets the document of `namespace/name` (its ShardGroup is gone).
    pub(crate) fn forget(&self, namespace: &str, name: &str) {
        self.entries
            .lock()
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
}

fn key_of(config_map: &ConfigMap) -> (String, String) {
    (
        config_map.metadata.namespace.clone().unwrap_or_default(),
        config_map.metadata.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crds::ShardRecord;
    use kube::api::ObjectMeta;

    fn document(epoch: u64) -> AssignmentDocument {
        let mut doc = AssignmentDocument::new("ns/g", epoch);
        doc.shards.insert(
            "s-0".into(),
            ShardRecord {
                owner: Some("p".into()),
                ..Default::default()
            },
        );
        doc.reindex_pods();
        doc
    }

    fn config_map(doc: &AssignmentDocument, version: &str) -> ConfigMap {
        let encoded = codec::encode(doc).unwrap();
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("g-assignment".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            data: Some(encoded.data),
            binary_data: Some(encoded.binary_data),
            ..Default::default()
        }
    }

    fn kept(cache: &DocumentCache) -> usize {
        cache.entries.lock().len()
    }

    fn shared(published: &Published) -> Arc<AssignmentDocument> {
        match published {
            Published::Document(doc) => doc.clone(),
            other => panic!("expected a document, got {other:?}"),
        }
    }

    #[test]
    fn a_version_is_decoded_once_and_a_new_version_again() {
        let cache = DocumentCache::default();
        let first = shared(&cache.published(&config_map(&document(3), "10")));
        let again = shared(&cache.published(&config_map(&document(3), "10")));
        assert!(Arc::ptr_eq(&first, &again), "same version, same document");
        let next = shared(&cache.published(&config_map(&document(4), "11")));
        assert_eq!(next.epoch, 4);
        assert_eq!(kept(&cache), 1);
    }

    #[test]
    fn the_operators_own_write_is_remembered_at_its_version() {
        let cache = DocumentCache::default();
        let written = Arc::new(document(7));
        cache.remember("ns", "g-assignment", "42".into(), written.clone());
        // Whatever the ConfigMap at that version carries, the remembered
        // document is what was written there (nothing is decoded).
        let seen = shared(&cache.published(&config_map(&document(7), "42")));
        assert!(Arc::ptr_eq(&seen, &written));
        // Another version is decoded from the ConfigMap itself.
        let later = shared(&cache.published(&config_map(&document(8), "43")));
        assert_eq!(later.epoch, 8);
    }

    #[test]
    fn an_unreadable_document_is_reported_and_not_kept() {
        let cache = DocumentCache::default();
        cache.published(&config_map(&document(1), "5"));
        let mut broken = config_map(&document(2), "6");
        broken.data = Some([("assignment.json".to_owned(), "{".to_owned())].into());
        broken.binary_data = None;
        assert!(matches!(cache.published(&broken), Published::Unreadable(_)));
        assert_eq!(kept(&cache), 0);
        cache.published(&config_map(&document(1), "5"));
        cache.forget("ns", "g-assignment");
        assert_eq!(kept(&cache), 0);
    }
}
