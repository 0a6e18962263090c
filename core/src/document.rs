//! Assembles the published document from shard records, decides whether it
//! changed (the epoch moves only then), and derives each pod's annotation view
//! and the minimal set of annotation writes.
//!
//! A record the plan leaves as published comes borrowed from the published
//! document ([`NextRecord::Kept`]): at 20,000 shards a pod event must not
//! cost a copy and a comparison of every record, only what it changed.
//!
//! A pod's view keeps the epoch at which its lists last changed: a pod whose
//! shards did not change keeps its annotation (and its older epoch), so a
//! churn event writes only the pods it affects. Epochs a pod sees still only
//! grow, which is all the consumer contract needs.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use crate::codec::Changes;
use crate::crds::assignment::ViewError;
use crate::crds::assignment::{ASSIGNMENT_API_VERSION, ASSIGNMENT_KIND};
use crate::crds::{AssignmentDocument, PodAssignment, PodView, ShardPhase, ShardRecord};

use crate::observation::PodInfo;
use crate::sorted_cursor::SortedCursor;

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

/// A shard's record in the next document: its published record, kept as it
/// is (borrowed from the published document), or a new one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NextRecord<'a> {
    /// The published record, unchanged.
    Kept(&'a ShardRecord),
    /// A record built by this plan (which may still equal the published
    /// one). Boxed: a plan keeps most records, and the vector of 20,000
    /// slots each as large as a record was megabytes to fill per plan.
    New(Box<ShardRecord>),
}

impl NextRecord<'_> {
    /// The record.
    pub(crate) fn get(&self) -> &ShardRecord {
        match self {
            Self::Kept(record) => record,
            Self::New(record) => record,
        }
    }

    /// The record, owned.
    pub(crate) fn into_owned(self) -> ShardRecord {
        match self {
            Self::Kept(record) => record.clone(),
            Self::New(record) => *record,
        }
    }
}

/// The records of the next document by shard id: sorted, each id once.
pub(crate) type NextRecords<'a> = Vec<(&'a str, NextRecord<'a>)>;

/// A copy of a published document's records and pod lists, made before
/// [`next_document`] needs it, so that the next document patches it
/// instead of copying 20,000 records after the engine: the group's plan
/// memory prepares one once the document is published
/// ([`PlanMemory::prepare`](crate::PlanMemory::prepare)), and a plan
/// about to move shards without one makes it on a thread of its own while
/// the engine runs.
#[derive(Clone)]
pub(crate) struct PublishedCopy {
    shards: BTreeMap<String, ShardRecord>,
    pods: BTreeMap<String, PodAssignment>,
}

impl PublishedCopy {
    /// A copy of `doc`'s records and pod lists.
    pub(crate) fn of(doc: &AssignmentDocument) -> Self {
        Self {
            shards: doc.shards.clone(),
            pods: doc.pods.clone(),
        }
    }
}

impl std::fmt::Debug for PublishedCopy {
    /// Its size: the records themselves are the published document's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishedCopy")
            .field("shards", &self.shards.len())
            .field("pods", &self.pods.len())
            .finish()
    }
}

/// The next document: `previous` itself (borrowed: nothing to write) when the
/// content is unchanged, else the new content at `base_epoch + 1`.
///
/// `base_epoch` is the highest epoch known (the previous document's and the
/// status's), so a deleted or unreadable ConfigMap never makes the epoch go back.
///
/// The content is unchanged when `previous` has the same group, exactly
/// these records and the pod lists they index. Records kept from
/// `previous` are known equal without a comparison, so a plan that changes
/// nothing builds nothing; one that moves a few shards copies the rest of
/// `previous`'s records.
///
/// `previous_indexed` says `previous`'s pod lists are known to index its
/// records (a document this step built, or one already checked): checking
/// it walks every shard, a sixth of a plan that moves a few of 20,000.
///
/// With a new document built from `previous`'s records and pod lists, the
/// [`Changes`] to it: the shards whose records differ and the pods whose
/// lists do (an encode of it then starts from `previous`'s chunks).
///
/// `copy`, a [`PublishedCopy`] of `previous` when the caller has one, is
/// taken to build a changed document from instead of a copy made here (the
/// document is the same either way); a document that is unchanged, or
/// built anew, leaves it to the caller.
pub(crate) fn next_document<'a>(
    shard_group: String,
    shards: NextRecords<'_>,
    previous: Option<&'a AssignmentDocument>,
    previous_indexed: bool,
    base_epoch: u64,
    copy: &mut Option<PublishedCopy>,
) -> (Cow<'a, AssignmentDocument>, Option<Changes>) {
    let Some(prev) = previous else {
        return (
            Cow::Owned(build(shard_group, base_epoch + 1, collect(shards))),
            None,
        );
    };
    debug_assert!(
        !previous_indexed || indexes_its_shards(prev),
        "a document said to index its shards does not"
    );
    let indexed = std::cell::OnceCell::new();
    let indexed = || *indexed.get_or_init(|| previous_indexed || indexes_its_shards(prev));
    // Whether the ids are the published ones in order (compared even for
    // kept records: cheap, and a record kept under another id cannot pass),
    // and whether every record is the published one too.
    let aligned = shards.len() == prev.shards.len()
        && shards
            .iter()
            .zip(prev.shards.keys())
            .all(|((id, _), prev_id)| *id == prev_id.as_str());
    let same_records = aligned
        && shards
            .iter()
            .zip(prev.shards.values())
            .all(|((_, record), prev_record)| match record {
                NextRecord::Kept(kept) => std::ptr::eq(*kept, prev_record) || *kept == prev_record,
                NextRecord::New(record) => **record == *prev_record,
            });
    if same_records
        && prev.shard_group == shard_group
        && prev.api_version == ASSIGNMENT_API_VERSION
        && prev.kind == ASSIGNMENT_KIND
        && indexed()
    {
        return (Cow::Borrowed(prev), None);
    }
    if !aligned {
        return (
            Cow::Owned(build(shard_group, base_epoch + 1, collect(shards))),
            None,
        );
    }
    // The same shards, a few of them changed (a plan moves few): the
    // published records with the new ones put in their place (copying the
    // tree compares no ids), and the published pod lists with the changed
    // shards moved, when they index the published records.
    let changed: Vec<(&str, &ShardRecord, &ShardRecord)> = shards
        .iter()
        .zip(prev.shards.values())
        .filter_map(|((id, record), prev_record)| match record {
            NextRecord::Kept(kept) if std::ptr::eq(*kept, prev_record) => None,
            // Rebuilt as it was (a shard given its lineage again, say).
            _ if record.get() == prev_record => None,
            _ => Some((*id, prev_record, record.get())),
        })
        .collect();
    let (mut records, copied_pods) = match copy.take() {
        Some(PublishedCopy { shards, pods }) => (shards, Some(pods)),
        None => (prev.shards.clone(), None),
    };
    let pods = indexed().then(|| moved(copied_pods.unwrap_or_else(|| prev.pods.clone()), &changed));
    // Only what `moved` changed differs from the published pod lists (a
    // rebuilt index may differ anywhere).
    let changes = pods.is_some().then(|| {
        Changes::new(
            prev.epoch,
            changed
                .iter()
                .flat_map(|(_, before, after)| listings(before).chain(listings(after)))
                .map(|(pod, _)| pod.to_owned()),
            changed.iter().map(|(id, ..)| (*id).to_owned()),
        )
    });
    for ((slot, prev_record), (_, record)) in
        records.values_mut().zip(prev.shards.values()).zip(shards)
    {
        match record {
            NextRecord::Kept(kept) if std::ptr::eq(kept, prev_record) => {}
            NextRecord::Kept(kept) => slot.clone_from(kept),
            NextRecord::New(record) => *slot = *record,
        }
    }
    let doc = match pods {
        Some(pods) => {
            let mut doc = AssignmentDocument::new(shard_group, base_epoch + 1);
            doc.shards = records;
            doc.pods = pods;
            doc
        }
        None => build(shard_group, base_epoch + 1, records),
    };
    (Cow::Owned(doc), changes)
}

/// The pod lists `pods` (those of the published records) with each shard
/// of `changed` (id, published record, next record) taken off the lists of
/// its published record and put on those of its next one: the lists
/// [`AssignmentDocument::from_shards`] builds of the next records, pods
/// left with nothing dropped.
fn moved(
    mut pods: BTreeMap<String, PodAssignment>,
    changed: &[(&str, &ShardRecord, &ShardRecord)],
) -> BTreeMap<String, PodAssignment> {
    let position = |list: &[String], id: &str| list.binary_search_by(|at| at.as_str().cmp(id));
    for (id, before, _) in changed {
        for (pod, list) in listings(before) {
            // Listed: `pods` indexes the published records.
            if let Some(lists) = pods.get_mut(pod) {
                let list = list_of(lists, list);
                if let Ok(at) = position(list, id) {
                    list.remove(at);
                }
            }
        }
    }
    for (id, _, after) in changed {
        for (pod, list) in listings(after) {
            if !pods.contains_key(pod) {
                pods.insert(pod.to_owned(), PodAssignment::default());
            }
            let list = list_of(pods.get_mut(pod).expect("just inserted"), list);
            let (Ok(at) | Err(at)) = position(list, id);
            list.insert(at, (*id).to_owned());
        }
    }
    pods.retain(|_, p| !p.is_empty());
    pods
}

/// The pod lists a record is in (as [`AssignmentDocument::from_shards`]
/// indexes it): its owner's list for its state, and each standby's
/// `standby` list, as indices of [`list_of`].
fn listings(record: &ShardRecord) -> impl Iterator<Item = (&str, usize)> {
    let list = match record.state {
        ShardPhase::Active => Some(0),
        ShardPhase::Revoking => Some(2),
        ShardPhase::Held => Some(3),
        ShardPhase::Pending | ShardPhase::Complete => None,
    };
    let owner = list.and_then(|list| Some((record.owner.as_deref()?, list)));
    let standbys = list
        .is_some()
        .then_some(&record.standbys)
        .into_iter()
        .flatten()
        .map(|standby| (standby.as_str(), 1));
    owner.into_iter().chain(standbys)
}

/// A pod's list by index: `active`, `standby`, `revoking`, `held`.
fn list_of(lists: &mut PodAssignment, list: usize) -> &mut Vec<String> {
    match list {
        0 => &mut lists.active,
        1 => &mut lists.standby,
        2 => &mut lists.revoking,
        _ => &mut lists.held,
    }
}

/// `shards` as a map (sorted and unique: built in bulk).
fn collect(shards: NextRecords<'_>) -> BTreeMap<String, ShardRecord> {
    shards
        .into_iter()
        .map(|(id, record)| (id.to_owned(), record.into_owned()))
        .collect()
}

/// The document of `shards`, with the pod lists they index.
fn build(
    shard_group: String,
    epoch: u64,
    shards: BTreeMap<String, ShardRecord>,
) -> AssignmentDocument {
    let mut doc = AssignmentDocument::from_shards(shard_group, epoch, shards, std::iter::empty());
    // Pods that hold nothing are left out of the document.
    doc.pods.retain(|_, p| !p.is_empty());
    doc
}

/// Whether `doc.pods` is exactly what its shards index: what
/// [`AssignmentDocument::from_shards`] builds from them (every pod that
/// holds something, its lists in shard order), checked without building it.
fn indexes_its_shards(doc: &AssignmentDocument) -> bool {
    // Per pod: its lists and how far each was matched.
    let mut cursors: HashMap<&str, (&PodAssignment, [usize; 4])> = doc
        .pods
        .iter()
        .map(|(name, lists)| (name.as_str(), (lists, [0; 4])))
        .collect();
    let mut next = |pod: &str, list: usize, id: &str| {
        let Some((lists, at)) = cursors.get_mut(pod) else {
            return false;
        };
        let matched = lists_of(lists)[list]
            .get(at[list])
            .is_some_and(|listed| listed == id);
        at[list] += 1;
        matched
    };
    for (id, shard) in &doc.shards {
        if !listings(shard).all(|(pod, list)| next(pod, list, id)) {
            return false;
        }
    }
    cursors.values().all(|(lists, at)| {
        !lists.is_empty()
            && lists_of(lists)
                .iter()
                .zip(at)
                .all(|(list, matched)| list.len() == *matched)
    })
}

/// A pod's lists, in [`list_of`]'s order.
fn lists_of(lists: &PodAssignment) -> [&Vec<String>; 4] {
    [&lists.active, &lists.standby, &lists.revoking, &lists.held]
}

/// Adds each child's parents from the source's `lineage` to records that
/// carry none: without a lease table the engine shards have no parents (so
/// children are placed at once), but consumers still see the lineage.
pub(crate) fn add_lineage(shards: &mut NextRecords<'_>, lineage: &BTreeMap<String, Vec<String>>) {
    for (id, parents) in lineage {
        let Ok(at) = shards.binary_search_by(|(shard, _)| (*shard).cmp(id.as_str())) else {
            continue;
        };
        let record = &mut shards[at].1;
        if !record.get().parents.is_empty() {
            continue;
        }
        let mut new = std::mem::replace(record, NextRecord::New(Box::default())).into_owned();
        new.parents = parents.clone();
        *record = NextRecord::New(Box::new(new));
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
#[cfg(test)]
pub fn annotation_writes(
    doc: &AssignmentDocument,
    pods: &[PodInfo],
    key: &str,
) -> (Vec<AnnotationWrite>, Vec<Oversized>) {
    annotation_writes_with(doc, pods, key, None)
}

/// The document's lists of each pod, looked up in the order of a plan's
/// pods: when those are sorted by name (as observed pods are), one walk
/// beside the document's sorted map finds them all (a map lookup per pod
/// compared names a dozen times each, and a hash map built per plan cost
/// as much again); else each is looked up in the map.
struct ListsByName<'a> {
    doc: &'a AssignmentDocument,
    walk: Option<
        SortedCursor<
            'a,
            PodAssignment,
            std::collections::btree_map::Iter<'a, String, PodAssignment>,
        >,
    >,
}

impl<'a> ListsByName<'a> {
    fn of(doc: &'a AssignmentDocument, pods: &[PodInfo]) -> Self {
        let sorted = pods.is_sorted_by(|a, b| a.name < b.name);
        Self {
            doc,
            walk: sorted.then(|| SortedCursor::new(doc.pods.iter())),
        }
    }

    /// `pod`'s lists; with a walk, asked in increasing name order.
    fn get(&mut self, pod: &str) -> Option<&'a PodAssignment> {
        match &mut self.walk {
            Some(walk) => walk.get(pod),
            None => self.doc.pods.get(pod),
        }
    }
}

/// [`annotation_writes`], taking from `written` the annotations an earlier
/// plan found written for lists `doc` did not change, and noting there the
/// ones found written now.
pub(crate) fn annotation_writes_with(
    doc: &AssignmentDocument,
    pods: &[PodInfo],
    key: &str,
    mut written: Option<&mut written::Lookup<'_>>,
) -> (Vec<AnnotationWrite>, Vec<Oversized>) {
    let mut writes = Vec::new();
    let mut oversized = Vec::new();
    let mut lists_of = ListsByName::of(doc, pods);
    let mut canonical = Vec::new();
    for pod in pods {
        // A pod that left the pool keeps its view while it still has shards
        // to give back: it must see the revoke to stop reading them.
        let wanted = lists_of
            .get(&pod.name)
            .filter(|entry| pod.selected || !entry.revoking.is_empty());
        if let (Some(lists), Some(text)) = (wanted, pod.annotation.as_deref())
            && match written.as_mut() {
                Some(written) => {
                    written.still_written(&pod.name, text) || {
                        let found = written_for(text, lists, &mut canonical);
                        if found {
                            written.found(&pod.name, text);
                        }
                        found
                    }
                }
                None => written_for(text, lists, &mut canonical),
            }
        {
            debug_assert!(
                serde_json::from_str::<CurrentLists<'_>>(text).is_ok_and(|view| same(
                    &view.active,
                    &lists.active
                ) && same(
                    &view.standby,
                    &lists.standby
                ) && same(
                    &view.revoking,
                    &lists.revoking
                ) && same(
                    &view.held,
                    &lists.held
                )),
                "an annotation taken as written for its lists does not parse to them: {text}"
            );
            continue;
        }
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

/// Whether `text` is, byte for byte, the annotation [`PodView::to_annotation`]
/// writes for `lists` at some epoch: then it parses to exactly these lists,
/// and the pod needs no write. Most pods' annotations are, and this check
/// writes their lists' JSON into `scratch` (reused from pod to pod) where
/// parsing every pod's annotation allocated its lists (half of comparing
/// 5,000 pods). Anything else (another epoch's form, spaces, another
/// order) is parsed as before.
fn written_for(text: &str, lists: &PodAssignment, scratch: &mut Vec<u8>) -> bool {
    /// [`PodView`]'s fields after its epoch, serialized as it serializes them.
    #[derive(serde::Serialize)]
    struct Lists<'a> {
        active: &'a [String],
        standby: &'a [String],
        revoking: &'a [String],
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        held: &'a [String],
    }
    let Some(rest) = text.strip_prefix("{\"epoch\":") else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    // As serde_json writes a u64: no leading zero, and it fits.
    let epoch = &rest[..digits];
    if epoch.is_empty()
        || (epoch.len() > 1 && epoch.starts_with('0'))
        || epoch.parse::<u64>().is_err()
    {
        return false;
    }
    scratch.clear();
    let fields = Lists {
        active: &lists.active,
        standby: &lists.standby,
        revoking: &lists.revoking,
        held: &lists.held,
    };
    serde_json::to_writer(&mut *scratch, &fields).expect("lists of strings always serialize");
    // `{"active":…}` after the epoch reads `,"active":…}`.
    let after_epoch = &rest.as_bytes()[digits..];
    after_epoch.first() == Some(&b',') && after_epoch[1..] == scratch[1..]
}

fn same(current: &[Cow<'_, str>], wanted: &[String]) -> bool {
    current.len() == wanted.len() && current.iter().zip(wanted).all(|(c, w)| c == w)
}

fn uid(pod: &PodInfo) -> Option<String> {
    Some(pod.uid.clone()).filter(|u| !u.is_empty())
}

#[cfg(test)]
mod tests;
pub(crate) mod written;
#[cfg(test)]
mod written_for_tests;
