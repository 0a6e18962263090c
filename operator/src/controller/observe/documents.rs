//! The decoded published documents, one per owned ConfigMap, kept while the
//! ConfigMap's `metadata.resourceVersion` is unchanged: each group's is the
//! core's [`DocumentMemory`] (the simulation feeds the same one; why it is
//! kept is said there), in the group's state. This module reads the
//! ConfigMaps and decodes them (outside the table's lock), and names the
//! group a ConfigMap belongs to.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;

use super::Published;
use crate::GroupKey;
use crate::controller::apply::GROUP_LABEL;
use crate::controller::groups::GroupTable;
use crate::crds::AssignmentDocument;
use shardring_core::codec;
use shardring_core::group_state::DocumentMemory;

/// The decoded published documents, each its group's
/// [`GroupState::document`](crate::controller::groups::GroupState). Cheap
/// to clone: clones share one table.
#[derive(Clone, Default)]
pub struct DocumentCache {
    groups: GroupTable,
}

impl DocumentCache {
    /// The table the documents are kept in.
    pub(crate) fn table(&self) -> &GroupTable {
        &self.groups
    }

    /// The document of `group`'s `config_map`: the cached one when it was
    /// decoded (or written) at the ConfigMap's current resourceVersion, else
    /// decoded now and kept. An unreadable document is never kept.
    pub fn published(&self, group: &GroupKey, config_map: &ConfigMap) -> Published {
        let name = config_map.metadata.name.as_deref().unwrap_or_default();
        let version = config_map
            .metadata
            .resource_version
            .as_deref()
            .filter(|v| !v.is_empty());
        if let Some(version) = version
            && let Some(known) = self.known(group, name, version)
        {
            return Published::Document(known);
        }
        // Decoded outside the lock: other groups' reconciles go on meanwhile.
        let decoded = codec::decode(config_map).map_err(|error| error.to_string());
        let mut groups = self.groups.lock();
        // Only a document kept makes a group's state (as an own write does).
        let memory = if decoded.is_ok() && version.is_some() {
            Some(&mut groups.entry(group.clone()).or_default().document)
        } else {
            groups.get_mut(group).map(|state| &mut state.document)
        };
        match memory {
            Some(memory) => memory.decoded(name, version, decoded),
            None => DocumentMemory::default().decoded(name, version, decoded),
        }
    }

    /// Whether the document of `config_map` at its current resourceVersion
    /// is known (decoded or written by this operator). The group is the one
    /// the ConfigMap's group label (or controller owner reference) names.
    pub fn knows(&self, config_map: &ConfigMap) -> bool {
        let meta = &config_map.metadata;
        let version = meta.resource_version.as_deref().filter(|v| !v.is_empty());
        let (Some(version), Some(group)) = (version, group_of(config_map)) else {
            return false;
        };
        self.known(&group, meta.name.as_deref().unwrap_or_default(), version)
            .is_some()
    }

    /// Remembers that `group`'s ConfigMap `config_map` holds `document` at
    /// `version` (the operator's own write, as the API server stored it).
    pub(crate) fn remember(
        &self,
        group: &GroupKey,
        config_map: &str,
        version: String,
        document: Arc<AssignmentDocument>,
    ) {
        self.groups
            .lock()
            .entry(group.clone())
            .or_default()
            .document
            .apply(config_map, version, document);
    }

    /// The latest document known of `group` (written by this operator or
    /// decoded), whatever the ConfigMap's version in the cache.
    pub(crate) fn latest(&self, group: &GroupKey) -> Option<Arc<AssignmentDocument>> {
        self.groups.lock().get(group)?.document.latest()
    }

    /// What the plan step sees of `group`'s document when its ConfigMap
    /// is gone: the last document known, else nothing published yet.
    pub(crate) fn missing(&self, group: &GroupKey) -> Published {
        let groups = self.groups.lock();
        groups
            .get(group)
            .map_or(Published::Missing, |state| state.document.missing())
    }

    fn known(
        &self,
        group: &GroupKey,
        config_map: &str,
        version: &str,
    ) -> Option<Arc<AssignmentDocument>> {
        self.groups
            .lock()
            .get(group)?
            .document
            .at(config_map, version)
    }
}

/// The group a shardring ConfigMap belongs to: the one its group label
/// names, else its controller owner reference.
fn group_of(config_map: &ConfigMap) -> Option<GroupKey> {
    let meta = &config_map.metadata;
    let name = meta
        .labels
        .as_ref()
        .and_then(|labels| labels.get(GROUP_LABEL).cloned())
        .or_else(|| {
            meta.owner_references
                .iter()
                .flatten()
                .find(|owner| owner.controller == Some(true) && owner.kind == "ShardGroup")
                .map(|owner| owner.name.clone())
        })?;
    Some(GroupKey::new(
        meta.namespace.clone().unwrap_or_default(),
        name,
    ))
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

    fn group() -> GroupKey {
        GroupKey::new("ns", "g")
    }

    fn config_map(doc: &AssignmentDocument, version: &str) -> ConfigMap {
        let encoded = codec::encode(doc).unwrap();
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("g-assignment".into()),
                labels: Some([(GROUP_LABEL.to_owned(), "g".to_owned())].into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            data: Some(encoded.data),
            binary_data: Some(encoded.binary_data),
            ..Default::default()
        }
    }

    fn kept(cache: &DocumentCache) -> usize {
        let groups = cache.groups.lock();
        groups
            .values()
            .filter(|state| state.document.latest().is_some())
            .count()
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
        let first = shared(&cache.published(&group(), &config_map(&document(3), "10")));
        let again = shared(&cache.published(&group(), &config_map(&document(3), "10")));
        assert!(Arc::ptr_eq(&first, &again), "same version, same document");
        let next = shared(&cache.published(&group(), &config_map(&document(4), "11")));
        assert_eq!(next.epoch, 4);
        assert_eq!(kept(&cache), 1);
    }

    #[test]
    fn the_operators_own_write_is_remembered_at_its_version() {
        let cache = DocumentCache::default();
        let written = Arc::new(document(7));
        cache.remember(&group(), "g-assignment", "42".into(), written.clone());
        // Whatever the ConfigMap at that version carries, the remembered
        // document is what was written there (nothing is decoded).
        let seen = shared(&cache.published(&group(), &config_map(&document(7), "42")));
        assert!(Arc::ptr_eq(&seen, &written));
        // Another version is decoded from the ConfigMap itself.
        let later = shared(&cache.published(&group(), &config_map(&document(8), "43")));
        assert_eq!(later.epoch, 8);
    }

    #[test]
    fn an_unreadable_document_is_reported_and_not_kept() {
        let cache = DocumentCache::default();
        cache.published(&group(), &config_map(&document(1), "5"));
        let mut broken = config_map(&document(2), "6");
        broken.data = Some([("assignment.json".to_owned(), "{".to_owned())].into());
        broken.binary_data = None;
        assert!(matches!(
            cache.published(&group(), &broken),
            Published::Unreadable(_)
        ));
        assert_eq!(kept(&cache), 0);
        let cm = config_map(&document(1), "5");
        cache.published(&group(), &cm);
        assert!(cache.knows(&cm));
    }
}
