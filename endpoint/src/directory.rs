//! The views the endpoint serves and who may see them. After each reconcile
//! cycle the controller syncs a group's pods into the directory: their uid,
//! their IP and their view (the annotation the cycle left on the pod). A
//! pod's view lives in a `watch` channel, and a sync sends on it only when
//! that pod's annotation changed, so a publish wakes only the long-polls whose
//! view changed: fan-out cost grows with change, not with pods.
//!
//! The served body is built once per change (the annotation's view plus the
//! checkpoints handed over with its active shards), not once per request.
//!
//! Who may see a view is judged from the last cycle's pods, and, when they
//! refuse a caller, from the operator's freshest pod state (its pod cache,
//! [`PodCache`]): a pod that turned Ready with its IP after the last cycle
//! observed the pods (or whose IP arrived since) is served at once, a view
//! at the document's epoch like any pod holding nothing, instead of being
//! refused until the next cycle's sync.
//!
//! A group's views are kept only once one of its pods asked for one: the
//! first request finds the group known but not yet served ([`Lookup::Warming`],
//! which the server answers with a short retry), marks it wanted and asks for
//! a reconcile, whose sync fills it. Groups whose consumers do not use the
//! endpoint cost nothing but their key.

use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use shardring_crds::assignment::{AssignmentDocument, PodAssignment, PodView};
use shardring_crds::endpoint::ViewResponse;
use tokio::sync::watch;

use super::requests::ReconcileRequests;
use shardring_core::GroupKey;

/// One pod's view as served: its epoch (to answer long-polls) and the JSON
/// body of its [`ViewResponse`]. `epoch` 0 with an empty view means the pod
/// has no view that can be stated yet (see [`served`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedView {
    /// The view's epoch.
    pub epoch: u64,
    /// The serialized [`ViewResponse`].
    pub body: Bytes,
}

/// One pod as the controller saw it at the end of a cycle.
#[derive(Debug, Clone, Copy)]
pub struct PodSync<'a> {
    /// Pod name.
    pub name: &'a str,
    /// Pod uid.
    pub uid: &'a str,
    /// Pod IP, once it has one.
    pub ip: Option<IpAddr>,
    /// The group's annotation on the pod after the cycle's writes.
    pub annotation: Option<&'a str>,
}

/// Who is calling, as the authentication established it.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The pod named in the caller's bound token.
    pub pod: &'a str,
    /// The pod uid named in the token.
    pub uid: &'a str,
    /// The TCP peer address; `None` when the IP check is turned off.
    pub peer: Option<IpAddr>,
}

/// What the directory says of a caller asking for a group's view.
#[derive(Debug)]
pub enum Lookup {
    /// Allowed: the caller's view, to read now and to wait on.
    Found(watch::Receiver<Arc<ServedView>>),
    /// No such ShardGroup (or the leader has not reconciled it yet).
    UnknownGroup,
    /// The group exists but its views are not served yet: the first request
    /// for it asked for them; retry in a moment.
    Warming,
    /// The pod is not a member of the group's ConsumerPool (and holds none
    /// of its shards).
    NotMember,
    /// A pod of that name exists, but it is another incarnation (the token's
    /// pod was deleted).
    UidMismatch,
    /// The caller's address is not the pod's IP.
    IpMismatch {
        /// The pod's IP, when it has one.
        expected: Option<IpAddr>,
    },
}

/// A pod as the operator's pod cache has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreshPod {
    /// Pod uid.
    pub uid: String,
    /// Pod IP, once it has one.
    pub ip: Option<IpAddr>,
}

/// The operator's freshest pod state (its pod cache), which the directory
/// asks when the last cycle's pods refuse a caller.
pub trait PodCache: Send + Sync + std::fmt::Debug {
    /// Pod `name` of `group`'s namespace, when it is a member of the group
    /// as the cache has it now (the group's pool selects it, or it carries
    /// the group's annotation).
    fn member(&self, group: &GroupKey, name: &str) -> Option<FreshPod>;
}

#[derive(Debug)]
struct PodSlot {
    uid: String,
    ip: Option<IpAddr>,
    annotation: Option<String>,
    view: watch::Sender<Arc<ServedView>>,
    /// Admitted from the pod cache, not yet seen by a cycle: kept across
    /// syncs while the cache still has it.
    admitted: bool,
}

/// What a served group's new pods are served before a cycle sees them: the
/// published document's epoch, unless the document gives the pod shards
/// (its annotation is being written: nothing can be stated yet).
#[derive(Debug, Default)]
struct DocumentSummary {
    epoch: u64,
    holders: HashSet<String>,
}

impl DocumentSummary {
    fn of(document: Option<&AssignmentDocument>) -> Self {
        document.map_or_else(Self::default, |doc| Self {
            epoch: doc.epoch,
            holders: doc
                .pods
                .iter()
                .filter(|(_, assignment)| !assignment.is_empty())
                .map(|(pod, _)| pod.clone())
                .collect(),
        })
    }

    /// The view of a pod without an annotation, as [`served`] states it.
    fn view_of(&self, group: &GroupKey, pod: &str) -> Arc<ServedView> {
        let epoch = if self.holders.contains(pod) {
            0
        } else {
            self.epoch
        };
        served_view(
            group,
            pod,
            PodView {
                epoch,
                ..PodView::default()
            },
            BTreeMap::new(),
        )
    }
}

#[derive(Debug, Default)]
struct ServedGroup {
    pods: HashMap<String, PodSlot>,
    document: DocumentSummary,
}

#[derive(Debug, Default)]
struct Groups {
    /// Served groups: their pods' views.
    served: HashMap<GroupKey, ServedGroup>,
    /// Groups the leader reconciled.
    known: HashSet<GroupKey>,
    /// Groups a pod asked for: served from their next sync on.
    wanted: HashSet<GroupKey>,
}

/// The served views of every group the leader reconciled.
#[derive(Debug, Default)]
pub struct Directory {
    groups: RwLock<Groups>,
    /// Asks the controller to reconcile a group (to serve it); with no
    /// controller listening (a default directory) nothing hears it.
    requests: ReconcileRequests,
    /// The operator's pod cache, once the controller runs.
    pod_cache: OnceLock<Arc<dyn PodCache>>,
}

impl Directory {
    /// A directory that asks for reconciles on `requests`.
    pub fn new(requests: ReconcileRequests) -> Self {
        Self {
            groups: RwLock::default(),
            requests,
            pod_cache: OnceLock::new(),
        }
    }

    /// Judges callers the last cycle's pods refuse from `cache` too (set
    /// once, by the controller that fills the directory; later calls are
    /// ignored).
    pub fn set_pod_cache(&self, cache: Arc<dyn PodCache>) {
        let _ = self.pod_cache.set(cache);
    }

    /// Checks `caller` against `group`'s pods and, when allowed, returns its
    /// view. The first request for a known group that is not served yet
    /// marks it wanted and asks for a reconcile ([`Lookup::Warming`]). A
    /// caller the last cycle's pods refuse is judged again from the pod
    /// cache, which may know it (or its IP) already.
    pub fn lookup(&self, group: &GroupKey, caller: Caller<'_>) -> Lookup {
        let groups = self.groups.read();
        let Some(served) = groups.served.get(group) else {
            if !groups.known.contains(group) {
                return Lookup::UnknownGroup;
            }
            drop(groups);
            self.want(group);
            return Lookup::Warming;
        };
        let slot = served.pods.get(caller.pod);
        let refused = match judge(slot.map(|s| (s.uid.as_str(), s.ip)), caller) {
            None => {
                let slot = slot.expect("a caller judged allowed has a slot");
                return Lookup::Found(slot.view.subscribe());
            }
            Some(refused) => refused,
        };
        drop(groups);
        let Some(fresh) = self
            .pod_cache
            .get()
            .and_then(|cache| cache.member(group, caller.pod))
        else {
            return refused;
        };
        if let Some(refused) = judge(Some((&fresh.uid, fresh.ip.map(canonical))), caller) {
            return refused;
        }
        self.admit(group, caller.pod, fresh).unwrap_or(refused)
    }

    /// Serves pod `name` as the pod cache has it (`fresh`), keeping its
    /// slot when it is the same pod; `None` when the group is no longer
    /// served.
    fn admit(&self, group: &GroupKey, name: &str, fresh: FreshPod) -> Option<Lookup> {
        let mut groups = self.groups.write();
        let served = groups.served.get_mut(group)?;
        let ip = fresh.ip.map(canonical);
        if let Some(slot) = served.pods.get_mut(name).filter(|s| s.uid == fresh.uid) {
            slot.ip = ip;
            return Some(Lookup::Found(slot.view.subscribe()));
        }
        // New, or a new pod under an old name: a new channel, so a
        // long-poll of the old incarnation never sees its view.
        let (view, receiver) = watch::channel(served.document.view_of(group, name));
        served.pods.insert(
            name.to_owned(),
            PodSlot {
                uid: fresh.uid,
                ip,
                annotation: None,
                view,
                admitted: true,
            },
        );
        drop(groups);
        // A cycle will see the pod (its pod event asked for one); asking
        // again costs nothing when one is queued.
        self.requests.request(group);
        Some(Lookup::Found(receiver))
    }

    /// Serves `group`'s views from its next sync on, as a first request for
    /// it does, and asks the controller for that sync.
    pub fn want(&self, group: &GroupKey) {
        let mut groups = self.groups.write();
        if groups.wanted.insert(group.clone()) {
            // The controller may be gone (shutting down): the caller retries.
            self.requests.request(group);
        }
    }

    /// Whether `group`'s views are served (or asked for): only then does the
    /// controller keep what [`Self::sync_group`] needs.
    pub fn is_wanted(&self, group: &GroupKey) -> bool {
        let groups = self.groups.read();
        groups.wanted.contains(group)
    }

    /// Notes that the leader reconciled `group`, without serving its views
    /// (none of its pods asked for one).
    pub fn note_known(&self, group: &GroupKey) {
        let mut groups = self.groups.write();
        if !groups.known.contains(group) {
            groups.known.insert(group.clone());
        }
    }

    /// Replaces `group`'s pods with `pods` (the pods the cycle observed: the
    /// pool's members and the pods still holding an annotation of the
    /// group), when the group is wanted. A pod whose annotation changed gets
    /// a new view, which wakes its long-polls; a pod that is gone is dropped,
    /// which ends them. Returns how many views changed.
    pub fn sync_group<'a>(
        &self,
        group: &GroupKey,
        document: Option<&AssignmentDocument>,
        pods: impl IntoIterator<Item = PodSync<'a>>,
    ) -> usize {
        let mut groups = self.groups.write();
        if !groups.known.contains(group) {
            groups.known.insert(group.clone());
        }
        if !groups.wanted.contains(group) {
            return 0;
        }
        let previous = groups.served.remove(group).unwrap_or_default();
        let mut previous_pods = previous.pods;
        let document_summary = if document.is_some_and(|doc| doc.epoch == previous.document.epoch) {
            previous.document
        } else {
            DocumentSummary::of(document)
        };
        let mut next = HashMap::with_capacity(previous_pods.len());
        let mut changed = 0;
        for pod in pods {
            let slot = match previous_pods.remove(pod.name) {
                // The same pod object: its channel (and the long-polls
                // waiting on it) carries over.
                Some(mut slot) if slot.uid == pod.uid => {
                    slot.ip = pod.ip.map(canonical);
                    slot.admitted = false;
                    if slot.annotation.as_deref() != pod.annotation {
                        slot.annotation = pod.annotation.map(str::to_owned);
                        slot.view
                            .send_replace(served(group, pod.name, pod.annotation, document));
                        changed += 1;
                    }
                    slot
                }
                // New, or a new pod under an old name: a new channel, so a
                // long-poll of the old incarnation never sees its view.
                _ => {
                    changed += 1;
                    let (view, _) =
                        watch::channel(served(group, pod.name, pod.annotation, document));
                    PodSlot {
                        uid: pod.uid.to_owned(),
                        ip: pod.ip.map(canonical),
                        annotation: pod.annotation.map(str::to_owned),
                        view,
                        admitted: false,
                    }
                }
            };
            next.insert(pod.name.to_owned(), slot);
        }
        // Pods admitted from the pod cache that this cycle did not observe
        // yet (it read the pods before they came) stay while the cache still
        // has them.
        if let Some(cache) = self.pod_cache.get() {
            for (name, slot) in previous_pods {
                let still = slot.admitted
                    && cache
                        .member(group, &name)
                        .is_some_and(|fresh| fresh.uid == slot.uid);
                if still {
                    next.insert(name, slot);
                }
            }
        }
        groups.served.insert(
            group.clone(),
            ServedGroup {
                pods: next,
                document: document_summary,
            },
        );
        changed
    }

    /// Forgets a deleted group (its long-polls end).
    pub fn remove_group(&self, group: &GroupKey) {
        let mut groups = self.groups.write();
        groups.served.remove(group);
        groups.known.remove(group);
        groups.wanted.remove(group);
    }

    /// Forgets every group: this replica lost the leadership, and a later
    /// leadership starts from what its first cycles publish.
    pub fn clear(&self) {
        let mut groups = self.groups.write();
        *groups = Groups::default();
    }

    /// How many pods of `group` the directory holds.
    pub fn pods(&self, group: &GroupKey) -> usize {
        let groups = self.groups.read();
        groups
            .served
            .get(group)
            .map_or(0, |served| served.pods.len())
    }
}

/// Whether `caller` may see the view of a pod known as `known` (uid, IP):
/// `None` when it may, else why not.
fn judge(known: Option<(&str, Option<IpAddr>)>, caller: Caller<'_>) -> Option<Lookup> {
    let Some((uid, ip)) = known else {
        return Some(Lookup::NotMember);
    };
    if uid != caller.uid {
        return Some(Lookup::UidMismatch);
    }
    match caller.peer {
        Some(peer) if ip != Some(canonical(peer)) => Some(Lookup::IpMismatch { expected: ip }),
        _ => None,
    }
}

/// An IPv4 address in IPv6 form (`::ffff:a.b.c.d`, how a dual-stack
/// listener reports IPv4 peers) compares as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The served form of a pod's annotation: its view with the checkpoints
/// handed over with its active shards.
///
/// A pod without the annotation that the published document gives nothing
/// holds nothing as of that document: it is served an empty view at the
/// document's epoch, which its consumer can long-poll, so it hears of its
/// first shards as soon as they are published. (At epoch 0 a client cannot
/// wait, and re-asks after a pause: a pod joining a rollout took up to that
/// pause to start its shards.) The view stays as it is while the pod has no
/// annotation ([`Directory::sync_group`] sends a view only when the
/// annotation changes), so later epochs wake no such pod. An empty view at
/// epoch 0 is left for what cannot be stated: no document yet, a document
/// that lists the pod (its annotation is being written), or an annotation
/// that cannot be read (the controller rewrites it at its next cycle).
fn served(
    group: &GroupKey,
    pod: &str,
    annotation: Option<&str>,
    document: Option<&AssignmentDocument>,
) -> Arc<ServedView> {
    let view = match annotation {
        Some(annotation) => PodView::from_annotation(annotation).unwrap_or_default(),
        None => PodView {
            epoch: document
                .filter(|doc| doc.pods.get(pod).is_none_or(PodAssignment::is_empty))
                .map_or(0, |doc| doc.epoch),
            ..PodView::default()
        },
    };
    let checkpoints = document
        .map(|doc| {
            view.active
                .iter()
                .filter_map(|shard| {
                    let record = doc.shards.get(shard)?;
                    (record.owner.as_deref() == Some(pod))
                        .then_some(record.checkpoint.as_deref().map(String::as_str))
                        .flatten()
                        .map(|c| (shard.clone(), c.to_owned()))
                })
                .collect()
        })
        .unwrap_or_default();
    served_view(group, pod, view, checkpoints)
}

/// The served form of `view` with the `checkpoints` handed over.
fn served_view(
    group: &GroupKey,
    pod: &str,
    view: PodView,
    checkpoints: BTreeMap<String, String>,
) -> Arc<ServedView> {
    let response = ViewResponse {
        shard_group: group.to_string(),
        pod: pod.to_owned(),
        view,
        checkpoints,
    };
    let body = serde_json::to_vec(&response).expect("a ViewResponse always serializes");
    Arc::new(ServedView {
        epoch: response.view.epoch,
        body: Bytes::from(body),
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use futures::{FutureExt, StreamExt};

    use super::*;
    use crate::requests::Requested;

    fn view(epoch: u64, active: &[&str]) -> String {
        PodView {
            epoch,
            active: active.iter().map(|s| (*s).to_owned()).collect(),
            ..PodView::default()
        }
        .to_annotation()
    }

    fn pod<'a>(name: &'a str, uid: &'a str, annotation: Option<&'a str>) -> PodSync<'a> {
        PodSync {
            name,
            uid,
            ip: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
            annotation,
        }
    }

    fn caller<'a>(pod: &'a str, uid: &'a str) -> Caller<'a> {
        Caller {
            pod,
            uid,
            peer: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
        }
    }

    /// A directory serving `key`: known from a first sync, wanted by a
    /// first request (answered `Warming`, asking for a reconcile).
    fn serving(key: &GroupKey) -> Directory {
        let requests = ReconcileRequests::default();
        let mut asked = Box::pin(requests.listen());
        let directory = Directory::new(requests);
        assert!(matches!(
            directory.lookup(key, caller("a", "ua")),
            Lookup::UnknownGroup
        ));
        directory.sync_group(key, None, []);
        assert!(!directory.is_wanted(key));
        assert!(matches!(
            directory.lookup(key, caller("a", "ua")),
            Lookup::Warming
        ));
        assert_eq!(
            asked.next().now_or_never().flatten(),
            Some(Requested::Group(key.clone()))
        );
        assert!(directory.is_wanted(key));
        directory
    }

    fn found(lookup: Lookup) -> watch::Receiver<Arc<ServedView>> {
        match lookup {
            Lookup::Found(receiver) => receiver,
            other => panic!("expected a view, got {other:?}"),
        }
    }

    /// A pod the document gives nothing can wait for its first shards at
    /// the document's epoch, and later epochs that still give it nothing do
    /// not wake it; a pod the document lists but whose annotation is not
    /// there yet is served nothing it could act on (epoch 0).
    #[test]
    fn a_pod_holding_nothing_is_served_the_documents_epoch_and_not_woken_by_later_ones() {
        let key = GroupKey::new("ns", "g");
        let directory = serving(&key);
        let mut doc = AssignmentDocument::new("ns/g", 7);
        doc.pods.insert(
            "listed".into(),
            PodAssignment {
                active: vec!["s-0".into()],
                ..PodAssignment::default()
            },
        );
        directory.sync_group(
            &key,
            Some(&doc),
            [pod("new", "un", None), pod("listed", "ul", None)],
        );
        let mut new = found(directory.lookup(&key, caller("new", "un")));
        let listed = found(directory.lookup(&key, caller("listed", "ul")));
        assert_eq!(new.borrow_and_update().epoch, 7);
        let body: ViewResponse = serde_json::from_slice(&new.borrow().body).unwrap();
        assert_eq!((body.view.epoch, body.view.active.len()), (7, 0));
        assert_eq!(listed.borrow().epoch, 0);

        doc.epoch = 8;
        let changed = directory.sync_group(&key, Some(&doc), [pod("new", "un", None)]);
        assert_eq!(changed, 0);
        assert!(!new.has_changed().unwrap());

        let first = view(9, &["s-1"]);
        directory.sync_group(&key, Some(&doc), [pod("new", "un", Some(&first))]);
        assert!(new.has_changed().unwrap());
        assert_eq!(new.borrow().epoch, 9);
    }

    /// The pod cache as a test sets it.
    #[derive(Debug, Default)]
    struct Cache(parking_lot::Mutex<HashMap<String, FreshPod>>);

    impl Cache {
        fn put(&self, name: &str, uid: &str, ip: Option<IpAddr>) {
            let fresh = FreshPod {
                uid: uid.to_owned(),
                ip,
            };
            self.0.lock().insert(name.to_owned(), fresh);
        }
    }

    impl PodCache for Cache {
        fn member(&self, _: &GroupKey, name: &str) -> Option<FreshPod> {
            self.0.lock().get(name).cloned()
        }
    }

    /// A pod Ready with its IP in the pod cache is served before any cycle
    /// saw it, at the document's epoch; one whose IP arrived after the
    /// cycle is served from the new IP; the cache never lets in a pod it
    /// does not have, another incarnation, or another address; and an
    /// admitted pod stays across a sync that did not see it yet.
    #[test]
    fn callers_the_last_cycle_refuses_are_judged_again_from_the_pod_cache() {
        let key = GroupKey::new("ns", "g");
        let directory = serving(&key);
        let cache = Arc::new(Cache::default());
        directory.set_pod_cache(cache.clone());
        let mut doc = AssignmentDocument::new("ns/g", 5);
        doc.pods.insert(
            "a".into(),
            PodAssignment {
                active: vec!["s-0".into()],
                ..PodAssignment::default()
            },
        );
        let a = view(5, &["s-0"]);
        let no_ip = PodSync {
            ip: None,
            ..pod("late-ip", "ul", None)
        };
        directory.sync_group(&key, Some(&doc), [pod("a", "ua", Some(&a)), no_ip]);

        // Not in the cache: refused as the cycle's pods say.
        assert!(matches!(
            directory.lookup(&key, caller("new", "un")),
            Lookup::NotMember
        ));
        assert!(matches!(
            directory.lookup(&key, caller("late-ip", "ul")),
            Lookup::IpMismatch { expected: None }
        ));

        // Both in the cache with the caller's address: served at once.
        let ip = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        cache.put("new", "un", ip);
        cache.put("late-ip", "ul", ip);
        let mut new = found(directory.lookup(&key, caller("new", "un")));
        assert_eq!(new.borrow_and_update().epoch, 5, "the document's epoch");
        found(directory.lookup(&key, caller("late-ip", "ul")));

        // Another incarnation or another address is still refused.
        assert!(matches!(
            directory.lookup(&key, caller("new", "old-uid")),
            Lookup::UidMismatch
        ));
        let elsewhere = Caller {
            peer: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))),
            ..caller("new", "un")
        };
        assert!(matches!(
            directory.lookup(&key, elsewhere),
            Lookup::IpMismatch { .. }
        ));

        // A sync that did not observe "new" yet keeps it (and its polls);
        // the sync that observes it gives it its view on the same channel.
        directory.sync_group(&key, Some(&doc), [pod("a", "ua", Some(&a))]);
        assert!(!new.has_changed().unwrap());
        let first = view(6, &["s-1"]);
        directory.sync_group(
            &key,
            Some(&doc),
            [pod("a", "ua", Some(&a)), pod("new", "un", Some(&first))],
        );
        assert!(new.has_changed().unwrap());
        assert_eq!(new.borrow().epoch, 6);

        // Gone from the cache and from the cycle: dropped.
        cache.0.lock().clear();
        directory.sync_group(&key, Some(&doc), [pod("a", "ua", Some(&a))]);
        assert!(new.has_changed().is_err());
    }

    #[test]
    fn a_group_nobody_asked_for_keeps_no_views() {
        let directory = Directory::default();
        let key = GroupKey::new("ns", "g");
        let v = view(1, &["s-0"]);
        assert_eq!(
            directory.sync_group(&key, None, [pod("a", "ua", Some(&v))]),
            0
        );
        assert_eq!(directory.pods(&key), 0);
    }

    #[test]
    fn a_sync_wakes_only_the_pods_whose_view_changed() {
        let key = GroupKey::new("ns", "g");
        let directory = serving(&key);
        let (a1, b1) = (view(1, &["s-0"]), view(1, &["s-1"]));
        directory.sync_group(
            &key,
            None,
            [pod("a", "ua", Some(&a1)), pod("b", "ub", Some(&b1))],
        );
        let mut a = found(directory.lookup(&key, caller("a", "ua")));
        let mut b = found(directory.lookup(&key, caller("b", "ub")));
        a.mark_unchanged();
        b.mark_unchanged();
        let a2 = view(2, &["s-0", "s-1"]);
        let changed = directory.sync_group(
            &key,
            None,
            [pod("a", "ua", Some(&a2)), pod("b", "ub", Some(&b1))],
        );
        assert_eq!(changed, 1);
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        assert_eq!(a.borrow().epoch, 2);
        let body: ViewResponse = serde_json::from_slice(&a.borrow().body).unwrap();
        assert_eq!(body.view.active, ["s-0", "s-1"]);
        assert_eq!(body.shard_group, "ns/g");
    }

    #[test]
    fn identity_checks_refuse_strangers_other_incarnations_and_other_addresses() {
        let key = GroupKey::new("ns", "g");
        let directory = serving(&key);
        directory.sync_group(&key, None, [pod("a", "ua", None)]);
        assert!(matches!(
            directory.lookup(&GroupKey::new("ns", "other"), caller("a", "ua")),
            Lookup::UnknownGroup
        ));
        assert!(matches!(
            directory.lookup(&key, caller("x", "ux")),
            Lookup::NotMember
        ));
        assert!(matches!(
            directory.lookup(&key, caller("a", "old-uid")),
            Lookup::UidMismatch
        ));
        let elsewhere = Caller {
            peer: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))),
            ..caller("a", "ua")
        };
        assert!(matches!(
            directory.lookup(&key, elsewhere),
            Lookup::IpMismatch { .. }
        ));
        let mapped = Caller {
            peer: Some(IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped())),
            ..caller("a", "ua")
        };
        assert_eq!(found(directory.lookup(&key, mapped)).borrow().epoch, 0);
        let unchecked = Caller {
            peer: None,
            ..caller("a", "ua")
        };
        found(directory.lookup(&key, unchecked));
    }

    #[test]
    fn a_replaced_pod_gets_a_new_channel_and_a_gone_pod_ends_its_polls() {
        let key = GroupKey::new("ns", "g");
        let directory = serving(&key);
        let v = view(3, &["s-0"]);
        directory.sync_group(&key, None, [pod("a", "u1", Some(&v))]);
        let old = found(directory.lookup(&key, caller("a", "u1")));
        directory.sync_group(&key, None, [pod("a", "u2", Some(&v))]);
        assert!(
            old.has_changed().is_err(),
            "the old incarnation's channel is closed"
        );
        let new = found(directory.lookup(&key, caller("a", "u2")));
        directory.sync_group(&key, None, []);
        assert!(new.has_changed().is_err());
        assert_eq!(directory.pods(&key), 0);
    }
}
