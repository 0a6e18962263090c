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

use std::sync::{Arc, Weak};

use crate::crds::AssignmentDocument;

/// The annotation texts found written for their pods' lists in one
/// document.
#[derive(Debug, Clone, Default)]
pub struct WrittenAnnotations {
    /// The document whose lists the texts were found written for.
    of: Weak<AssignmentDocument>,
    /// Per pod, sorted by name: its annotation text and the plan that
    /// last found it. Sorted, not hashed: a plan asks for its pods in name
    /// order, so each is found at the entry after the last one found.
    texts: Vec<Written>,
    /// Plans that looked (numbers `texts`' entries, to drop pods gone).
    plans: u64,
}

#[derive(Debug, Clone)]
struct Written {
    pod: String,
    text: String,
    seen: u64,
}

/// What a plan may take from [`WrittenAnnotations`]: the texts found
/// written in the published document, for pods outside `changed` (the pods
/// whose lists the next document may change, sorted).
pub(crate) struct Lookup<'a> {
    written: &'a mut WrittenAnnotations,
    usable: bool,
    changed: &'a [String],
    /// Where the next pod is looked for first: after the last one asked.
    next: usize,
    /// Pods found written that have no entry yet, entered once the plan
    /// is done (in name order, as the plan asked).
    added: Vec<Written>,
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
            next: 0,
            added: Vec::new(),
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
    /// The entry of `pod`, or where it would go; the next pod is looked
    /// for after it.
    fn entry(&mut self, pod: &str) -> Result<usize, usize> {
        let texts = &self.written.texts;
        let at = match texts.get(self.next) {
            Some(entry) if entry.pod == pod => Ok(self.next),
            _ => texts.binary_search_by(|entry| entry.pod.as_str().cmp(pod)),
        };
        self.next = match at {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        at
    }

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
        match self.entry(pod) {
            Ok(i) if self.written.texts[i].text == text => {
                self.written.texts[i].seen = plan;
                true
            }
            _ => false,
        }
    }

    /// Notes that `pod`'s annotation `text` is written for its lists in
    /// the next document.
    pub(crate) fn found(&mut self, pod: &str, text: &str) {
        let plan = self.written.plans;
        match self.entry(pod) {
            Ok(i) => {
                let entry = &mut self.written.texts[i];
                if entry.text != text {
                    text.clone_into(&mut entry.text);
                }
                entry.seen = plan;
            }
            Err(_) => self.added.push(Written {
                pod: pod.to_owned(),
                text: text.to_owned(),
                seen: plan,
            }),
        }
    }
}

impl Drop for Lookup<'_> {
    /// Forgets the pods this plan did not find written (gone, changed, or
    /// no longer annotated), and enters the pods it found written anew.
    fn drop(&mut self) {
        let plan = self.written.plans;
        let texts = &mut self.written.texts;
        texts.retain(|entry| entry.seen == plan);
        if !self.added.is_empty() {
            texts.append(&mut self.added);
            // Two sorted runs (the kept entries, the added ones): the sort
            // merges them. A pod asked twice keeps one entry.
            texts.sort_by(|a, b| a.pod.cmp(&b.pod));
            texts.dedup_by(|later, earlier| later.pod == earlier.pod);
        }
    }
}
