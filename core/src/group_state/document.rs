//! The published document of one group as last read or written, at the
//! version of the object that holds it (a ConfigMap's resourceVersion), fed
//! by events: [`DocumentMemory::apply`] when the document at a version is
//! known (decoded from a read, or the adapter's own write as the API server
//! stored it), [`DocumentMemory::delete`] when the document at the current
//! version cannot be read, [`DocumentMemory::reset`] when the adapter's
//! memory is lost.
//!
//! Why: every reconcile reads the group's published document, and at
//! 20,000 shards decoding it costs tens of milliseconds and several
//! megabytes each time, although it changes only when the operator itself
//! publishes. A stored object's version changes with every write, so a
//! document decoded at a version is the document of that version; after
//! its own write the operator knows the document at the version the API
//! server answered, so the next reconcile decodes nothing. And a deleted
//! object's last document is what its consumers may still act on: the plan
//! rebuilds from it ([`Published::Deleted`]).

use std::sync::Arc;

use crate::crds::AssignmentDocument;
use crate::observation::Published;

/// The document known at one version of the object that holds it.
#[derive(Debug, Clone, PartialEq)]
struct KnownDocument {
    /// The object's name (a group's ConfigMap can be renamed by its spec).
    object: String,
    version: String,
    document: Arc<AssignmentDocument>,
}

/// One group's published document as last read or written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocumentMemory {
    known: Option<KnownDocument>,
}

impl DocumentMemory {
    /// The document of object `object` at `version`, when it is the one
    /// known (`None`: it must be read and decoded).
    pub fn at(&self, object: &str, version: &str) -> Option<Arc<AssignmentDocument>> {
        let known = self.known.as_ref()?;
        (known.object == object && known.version == version).then(|| known.document.clone())
    }

    /// Object `object` holds `document` at `version`.
    pub fn apply(&mut self, object: &str, version: String, document: Arc<AssignmentDocument>) {
        self.known = Some(KnownDocument {
            object: object.to_owned(),
            version,
            document,
        });
    }

    /// The document at the object's current version cannot be read: what
    /// was known of an older version no longer stands.
    pub fn delete(&mut self) {
        self.known = None;
    }

    /// Forgets what was known.
    pub fn reset(&mut self) {
        self.known = None;
    }

    /// The latest document known, whatever its version.
    pub fn latest(&self) -> Option<Arc<AssignmentDocument>> {
        Some(self.known.as_ref()?.document.clone())
    }

    /// What the plan step sees of the document of `object`, read at
    /// `version` (`None`: the object has no version, its document is not
    /// kept), `decoded` as read (an unreadable one carries why).
    pub fn decoded(
        &mut self,
        object: &str,
        version: Option<&str>,
        decoded: Result<AssignmentDocument, String>,
    ) -> Published {
        match decoded {
            Ok(document) => {
                let document = Arc::new(document);
                if let Some(version) = version {
                    self.apply(object, version.to_owned(), document.clone());
                }
                Published::Document(document)
            }
            Err(error) => {
                self.delete();
                Published::Unreadable(error)
            }
        }
    }

    /// What the plan step sees when the object is gone: its last document
    /// known, else nothing published yet.
    pub fn missing(&self) -> Published {
        self.latest().map_or(Published::Missing, Published::Deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(epoch: u64) -> AssignmentDocument {
        AssignmentDocument::new("ns/g", epoch)
    }

    fn shared(published: &Published) -> Arc<AssignmentDocument> {
        match published {
            Published::Document(doc) => doc.clone(),
            other => panic!("expected a document, got {other:?}"),
        }
    }

    #[test]
    fn a_document_is_known_at_its_version_of_its_object_only() {
        let mut memory = DocumentMemory::default();
        let read = shared(&memory.decoded("g-assignment", Some("10"), Ok(document(3))));
        let known = memory.at("g-assignment", "10").expect("kept");
        assert!(Arc::ptr_eq(&read, &known));
        assert!(memory.at("g-assignment", "11").is_none());
        assert!(memory.at("renamed", "10").is_none());
        // An object without a version is read, not kept.
        let mut unversioned = DocumentMemory::default();
        unversioned.decoded("g-assignment", None, Ok(document(3)));
        assert!(unversioned.latest().is_none());
    }

    #[test]
    fn an_own_write_is_known_at_the_version_it_was_stored_at() {
        let mut memory = DocumentMemory::default();
        memory.decoded("g-assignment", Some("10"), Ok(document(3)));
        let written = Arc::new(document(4));
        memory.apply("g-assignment", "12".into(), written.clone());
        let known = memory.at("g-assignment", "12").expect("written");
        assert!(Arc::ptr_eq(&known, &written));
        assert!(memory.at("g-assignment", "10").is_none());
    }

    #[test]
    fn an_unreadable_document_is_forgotten_and_a_deleted_objects_last_stays() {
        let mut memory = DocumentMemory::default();
        memory.decoded("g-assignment", Some("5"), Ok(document(1)));
        assert!(matches!(memory.missing(), Published::Deleted(doc) if doc.epoch == 1));
        let unreadable = memory.decoded("g-assignment", Some("6"), Err("bad".into()));
        assert_eq!(unreadable, Published::Unreadable("bad".into()));
        assert!(memory.latest().is_none());
        assert_eq!(memory.missing(), Published::Missing);
        memory.decoded("g-assignment", Some("7"), Ok(document(2)));
        memory.reset();
        assert_eq!(memory, DocumentMemory::default());
    }
}
