//! Assembles the published document from shard records, decides whether it
//! changed (the epoch moves only then), and derives each pod's annotation view
//! and the minimal set of annotation writes.
//!
//! A pod's view keeps the epoch at which its lists last changed: a pod whose
//! shards did not change keeps its annotation (and its older epoch), so a
//! churn event writes only the pods it affects. Epochs a pod sees still only
//! grow, which is all the consumer contract needs.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use crate::crds::assignment::ViewError;
use crate::crds::{AssignmentDocument, PodAssignment, PodView, ShardRecord};

use crate::observation::PodInfo;

/// One pod annotation to write: the new view, or `None` to remove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationWrite {
    /// Pod name.
    pub pod: String,
    /// Pod uid, sent as a precondition so a same-named replacement pod is
    /// never written with a view meant for its predecessor.
    pub uid: Option<String>,
    /// The view to publish; `None` removes the annotation.
    pub view: Option<PodView>,
}

/// The next document: `previous` itself (borrowed: nothing to write) when the
/// content is unchanged, else the new content at `base_epoch + 1`.
///
/// `base_epoch` is the highest epoch known (the previous document's and the
/// status's), so a deleted or unreadable ConfigMap never makes the epoch go back.
pub fn next_document<'a>(
    shard_group: String,
    shards: BTreeMap<String, ShardRecord>,
    previous: Option<&'a AssignmentDocument>,
    base_epoch: u64,
) -> Cow<'a, AssignmentDocument> {
    let mut doc =
        AssignmentDocument::from_shards(shard_group, base_epoch + 1, shards, std::iter::empty());
    if let Some(prev) = previous
        && prev.shard_group == doc.shard_group
        && prev.api_version == doc.api_version
        && prev.kind == doc.kind
        && prev.shards == doc.shards
        && prev.pods == doc.pods
    {
        return Cow::Borrowed(prev);
    }
    // Pods that hold nothing are left out of the document.
    doc.pods.retain(|_, p| !p.is_empty());
    Cow::Owned(doc)
}

/// Adds each child's parents from the source's `lineage` to records that
/// carry none: without a lease table the engine shards have no parents (so
/// children are placed at once), but consumers still see the lineage.
pub fn add_lineage(
    shards: &mut BTreeMap<String, ShardRecord>,
    lineage: &BTreeMap<String, Vec<String>>,
) {
    for (id, parents) in lineage {
        if let Some(record) = shards.get_mut(id)
            && record.parents.is_empty()
        {
            record.parents = parents.clone();
        }
    }
}

/// A pod whose view cannot be published as annotation `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oversized {
    /// Pod name.
    pub pod: String,
    /// Why ([`ViewError::TooLarge`]).
    pub error: ViewError,
}

/// The annotation writes that bring every pod to `doc`: pods whose lists
/// differ from their current annotation get a view at `doc.epoch`; pods with
/// no shards in `doc` (or no longer selected) lose the annotation.
///
/// A view over the annotation budget for `key` is not written (the API
/// server would refuse the whole pod patch); it is returned in the second
/// list so the status can say so, and every other pod still gets its view.
pub fn annotation_writes(
    doc: &AssignmentDocument,
    pods: &[PodInfo],
    key: &str,
) -> (Vec<AnnotationWrite>, Vec<Oversized>) {
    let mut writes = Vec::new();
    let mut oversized = Vec::new();
    // Hashed once: a lookup per pod in the sorted map compared names a
    // dozen times each (most of this function at 5,000 pods).
    let lists_of: HashMap<&str, &PodAssignment> = doc
        .pods
        .iter()
        .map(|(name, lists)| (name.as_str(), lists))
        .collect();
    for pod in pods {
        // A pod that left the pool keeps its view while it still has shards
        // to give back: it must see the revoke to stop reading them.
        let wanted = lists_of
            .get(pod.name.as_str())
            .copied()
            .filter(|entry| pod.selected || !entry.revoking.is_empty());
        let current = pod
            .annotation
            .as_deref()
            .map(serde_json::from_str::<CurrentLists<'_>>);
        match (wanted, current) {
            (None, None) => {}
            (None, Some(_)) => writes.push(AnnotationWrite {
                pod: pod.name.clone(),
                uid: uid(pod),
                view: None,
            }),
            (Some(lists), Some(Ok(view)))
                if same(&view.active, &lists.active)
                    && same(&view.standby, &lists.standby)
                    && same(&view.revoking, &lists.revoking)
                    && same(&view.held, &lists.held) => {}
            (Some(lists), _) => {
                let view = PodView {
                    epoch: doc.epoch,
                    active: lists.active.clone(),
                    standby: lists.standby.clone(),
                    revoking: lists.revoking.clone(),
                    held: lists.held.clone(),
                };
                match view.to_checked_annotation(key) {
                    Ok(_) => writes.push(AnnotationWrite {
                        pod: pod.name.clone(),
                        uid: uid(pod),
                        view: Some(view),
                    }),
                    Err(error) => oversized.push(Oversized {
                        pod: pod.name.clone(),
                        error,
                    }),
                }
            }
        }
    }
    (writes, oversized)
}

/// The writes that take `key` off every pod still carrying it: a group
/// that publishes no pod annotations (`spec.output.podAnnotations: false`)
/// leaves none behind from when it did.
pub fn annotation_removals(pods: &[PodInfo]) -> (Vec<AnnotationWrite>, Vec<Oversized>) {
    let writes = pods
        .iter()
        .filter(|pod| pod.annotation.is_some())
        .map(|pod| AnnotationWrite {
            pod: pod.name.clone(),
            uid: uid(pod),
            view: None,
        })
        .collect();
    (writes, Vec::new())
}

/// The lists of a pod's current annotation, borrowed from its text where
/// they need no unescaping: every reconcile compares all of them, and at
/// 5,000 pods owned copies were a tenth of a no-op plan.
#[derive(Deserialize)]
struct CurrentLists<'a> {
    /// Required, as in [`PodView`]: a view without its epoch is rewritten.
    #[serde(rename = "epoch")]
    _epoch: u64,
    #[serde(default, borrow)]
    active: Vec<Cow<'a, str>>,
    #[serde(default, borrow)]
    standby: Vec<Cow<'a, str>>,
    #[serde(default, borrow)]
    revoking: Vec<Cow<'a, str>>,
    #[serde(default, borrow)]
    held: Vec<Cow<'a, str>>,
}

fn same(current: &[Cow<'_, str>], wanted: &[String]) -> bool {
    current.len() == wanted.len() && current.iter().zip(wanted).all(|(c, w)| c == w)
}

fn uid(pod: &PodInfo) -> Option<String> {
    Some(pod.uid.clone()).filter(|u| !u.is_empty())
}
