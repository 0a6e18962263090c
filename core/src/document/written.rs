//! Which pods' annotations a plan found written for their lists, kept for
//! the next plan of the same group: a pod whose annotation is, byte for
//! byte, the text found written for its lists in the published document,
//! and whose lists the next document does not change, is written for them
//! still, without serializing its lists again (at 5,000 pods that
//! comparison was a quarter of a no-op plan).
//!
//! Exact, not hashed: the texts themselves are kept (an annotation is
//! anyone's to write, so a hash of it could be forged to match), and the
//! lists are known unchanged only by the document they were read from
//! (held weakly: the same address is the same document) and the pods the
//! next document's changes name.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use crate::crds::AssignmentDocument;

/// The annotation texts found written for their pods' lists in one
/// document.
#[derive(Debug, Clone, Default)]
pub struct WrittenAnnotations {
    /// The document whose lists the texts were found written for.
    of: Weak<AssignmentDocument>,
    /// Pod name -> its annotation text, and the plan that last found it.
    texts: HashMap<String, (String, u64)>,
    /// Plans that looked (numbers `texts`' entries, to drop pods gone).
    plans: u64,
}

/// What a plan may take from [`WrittenAnnotations`]: the texts found
/// written in the published document, for pods outside `changed` (the pods
/// whose lists the next document may change, sorted).
pub(crate) struct Lookup<'a> {
    written: &'a mut WrittenAnnotations,
    usable: bool,
    changed: &'a [String],
}

impl WrittenAnnotations {
    /// How many pods' texts are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// Starts a plan's comparison of annotations against the lists of the
    /// next document, which is `published` with the lists of `changed`
    /// pods (at most) changed, or `None` when which pods changed is not
    /// known (a document built afresh).
    pub(crate) fn lookup<'a>(
        &'a mut self,
        published: Option<&Arc<AssignmentDocument>>,
        changed: Option<&'a [String]>,
    ) -> Lookup<'a> {
        let usable = changed.is_some()
            && published.is_some_and(|doc| std::ptr::eq(self.of.as_ptr(), Arc::as_ptr(doc)));
        if !usable {
            self.texts.clear();
        }
        self.plans += 1;
        Lookup {
            written: self,
            usable,
            changed: changed.unwrap_or_default(),
        }
    }

    /// The document the texts were last found written for (the next
    /// document, once the plan that compared them built it; nothing when
    /// it was not published).
    pub(crate) fn found_in(&mut self, doc: Option<&Arc<AssignmentDocument>>) {
        self.of = doc.map_or_else(Weak::new, Arc::downgrade);
        if self.of.strong_count() == 0 {
            self.texts.clear();
        }
    }
}

impl Lookup<'_> {
    /// Whether `pod`'s annotation `text` was found written for its lists,
    /// which the next document keeps as they were.
    pub(crate) fn still_written(&mut self, pod: &str, text: &str) -> bool {
        if !self.usable
            || self
                .changed
                .binary_search_by(|p| p.as_str().cmp(pod))
                .is_ok()
        {
            return false;
        }
        let plan = self.written.plans;
        match self.written.texts.get_mut(pod) {
            Some((kept, seen)) if kept == text => {
                *seen = plan;
                true
            }
            _ => false,
        }
    }

    /// Notes that `pod`'s annotation `text` is written for its lists in
    /// the next document.
    pub(crate) fn found(&mut self, pod: &str, text: &str) {
        let plan = self.written.plans;
        match self.written.texts.get_mut(pod) {
            Some((kept, seen)) => {
                if kept != text {
                    text.clone_into(kept);
                }
                *seen = plan;
            }
            None => {
                self.written
                    .texts
                    .insert(pod.to_owned(), (text.to_owned(), plan));
            }
        }
    }
}

impl Drop for Lookup<'_> {
    /// Forgets the pods this plan did not find written (gone, changed, or
    /// no longer annotated).
    fn drop(&mut self) {
        let plan = self.written.plans;
        self.written.texts.retain(|_, (_, seen)| *seen == plan);
    }
}
