//! The object store: one collection per served resource (objects sorted by
//! namespace and name), one global resourceVersion counter, a bounded watch
//! history per collection, and the broadcast channel that fans every write
//! out to open watches. Every write goes through [`State::commit`], which
//! stamps the new resourceVersion, serializes the object once, records the
//! history and broadcasts, all under the store's lock so watches and lists
//! see one order.

mod create;
pub(super) mod delete;
pub(super) mod read;
pub(super) mod write;

use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::applied::Applied;
use super::resources::{Registry, ResourceType};
use super::selector::FilterKey;

/// Namespace and name of a stored object (namespace empty when
/// cluster-scoped).
pub(crate) type ObjKey = (String, String);

/// The result of a successful write.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    /// The object as stored (or as it was when removed).
    pub obj: Arc<Value>,
    /// Its serialization.
    pub bytes: Bytes,
    /// The write created the object (201).
    pub created: bool,
}

/// A stored object.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The object, with `apiVersion`, `kind` and its resourceVersion.
    pub obj: Arc<Value>,
    /// `obj` serialized, shared by responses and watch events.
    pub bytes: Bytes,
    /// What selectors look at.
    pub filter: Arc<FilterKey>,
    /// What each field manager applied last.
    pub applied: Applied,
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The `type` of the event on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as history keeps it and the broadcast carries it.
#[derive(Debug)]
pub(crate) struct WatchEvent {
    /// The resourceVersion of the write.
    pub rv: u64,
    /// Storage key of the collection ([`ResourceType::key`]).
    pub resource: Arc<str>,
    /// What happened.
    pub kind: EventType,
    /// The object after the write (before removal, for DELETED), serialized.
    pub object: Bytes,
    /// Selectable parts of the object after the write.
    pub filter: Arc<FilterKey>,
    /// Selectable parts before the write (MODIFIED only).
    pub prev_filter: Option<Arc<FilterKey>>,
    partial: OnceLock<Bytes>,
}

impl WatchEvent {
    /// The object as `meta.k8s.io/v1` PartialObjectMetadata, computed once.
    pub fn partial(&self) -> Bytes {
        self.partial
            .get_or_init(|| partial_metadata(&self.object))
            .clone()
    }
}

/// `bytes` (a serialized object) as a serialized PartialObjectMetadata.
pub(crate) fn partial_metadata(bytes: &[u8]) -> Bytes {
    let obj: Value = serde_json::from_slice(bytes).unwrap_or_default();
    Bytes::from(serde_json::to_vec(&partial_value(&obj)).expect("JSON values serialize"))
}

/// The PartialObjectMetadata of `obj`.
pub(crate) fn partial_value(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    })
}

/// What the broadcast carries for each write: enough to skip other
/// resources and advance bookmarks, and a weak reference to the event. The
/// history holds the event itself, so memory stays bounded by the history
/// limits however many notices the channel buffers; a watch that reaches a
/// notice whose event the history already dropped has fallen too far
/// behind and gets 410 Gone.
#[derive(Debug, Clone)]
pub(crate) struct Notice {
    /// The resourceVersion of the write.
    pub rv: u64,
    /// Storage key of the collection written.
    pub resource: Arc<str>,
    /// The event, while the history keeps it.
    pub event: Weak<WatchEvent>,
}

/// Limits of each collection's watch history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HistoryLimits {
    /// Events kept.
    pub events: usize,
    /// Serialized bytes kept.
    pub bytes: usize,
}

#[derive(Debug, Default)]
struct History {
    events: VecDeque<Arc<WatchEvent>>,
    bytes: usize,
    /// The highest resourceVersion evicted: a watch from an older one is
    /// answered 410 Gone.
    compacted: u64,
}

/// The objects of one resource and their recent history.
#[derive(Debug)]
pub(crate) struct Collection {
    pub rt: Arc<ResourceType>,
    pub objects: BTreeMap<ObjKey, Entry>,
    history: History,
}

/// What a commit does to the stored object.
pub(crate) enum Change {
    /// Create or replace with this object and ownership.
    Upsert(Value, Applied),
    /// Remove; the value is the object's final state.
    Remove(Value),
}

/// Everything behind the store's lock.
#[derive(Debug)]
pub(crate) struct State {
    rv: u64,
    collections: HashMap<Arc<str>, Collection>,
    tx: broadcast::Sender<Notice>,
    limits: HistoryLimits,
    registry: Arc<Registry>,
}

impl State {
    /// The collection of `rt`, created empty on first use.
    pub fn collection(&mut self, rt: &Arc<ResourceType>) -> &mut Collection {
        self.collections
            .entry(rt.key())
            .or_insert_with(|| Collection {
                rt: rt.clone(),
                objects: BTreeMap::new(),
                history: History::default(),
            })
    }

    /// The stored entry, if any.
    pub fn entry(&self, rt: &ResourceType, key: &ObjKey) -> Option<&Entry> {
        self.collections.get(&rt.key())?.objects.get(key)
    }

    /// Applies `change` at a new resourceVersion, records and broadcasts the
    /// event. Returns the stored (or final) object and its bytes.
    pub fn commit(
        &mut self,
        rt: &Arc<ResourceType>,
        key: ObjKey,
        change: Change,
    ) -> (Arc<Value>, Bytes) {
        self.rv += 1;
        let rv = self.rv;
        let (limits, tx) = (self.limits, self.tx.clone());
        let coll = self.collection(rt);
        let (mut obj, applied) = match change {
            Change::Upsert(obj, applied) => (obj, Some(applied)),
            Change::Remove(obj) => (obj, None),
        };
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let bytes = Bytes::from(serde_json::to_vec(&obj).expect("JSON values serialize"));
        let filter = Arc::new(FilterKey::of(&obj));
        let obj = Arc::new(obj);
        let prev = coll.objects.get(&key).map(|e| e.filter.clone());
        let kind = match (&applied, &prev) {
            (None, _) => EventType::Deleted,
            (Some(_), None) => EventType::Added,
            (Some(_), Some(_)) => EventType::Modified,
        };
        match applied {
            Some(applied) => {
                coll.objects.insert(
                    key,
                    Entry {
                        obj: obj.clone(),
                        bytes: bytes.clone(),
                        filter: filter.clone(),
                        applied,
                    },
                );
            }
            None => {
                coll.objects.remove(&key);
            }
        }
        let event = Arc::new(WatchEvent {
            rv,
            resource: rt.key(),
            kind,
            object: bytes.clone(),
            filter,
            prev_filter: if kind == EventType::Modified {
                prev
            } else {
                None
            },
            partial: OnceLock::new(),
        });
        let notice = Notice {
            rv,
            resource: event.resource.clone(),
            event: Arc::downgrade(&event),
        };
        let h = &mut coll.history;
        h.bytes += event.object.len();
        h.events.push_back(event);
        while h.events.len() > limits.events.max(1)
            || (h.bytes > limits.bytes && h.events.len() > 1)
        {
            let old = h.events.pop_front().expect("history is not empty");
            h.bytes -= old.object.len();
            h.compacted = old.rv;
        }
        // No receiver is fine: nobody watches.
        let _ = tx.send(notice);
        (obj, bytes)
    }
}

/// The store shared by the HTTP service and the direct-access methods.
#[derive(Debug)]
pub(crate) struct Store {
    state: Mutex<State>,
    /// Served kinds.
    pub registry: Arc<Registry>,
}

impl Store {
    /// An empty store.
    pub fn new(registry: Arc<Registry>, limits: HistoryLimits, broadcast_capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(broadcast_capacity.max(16));
        Store {
            state: Mutex::new(State {
                rv: 0,
                collections: HashMap::new(),
                tx,
                limits,
                registry: registry.clone(),
            }),
            registry,
        }
    }

    /// Locks the state (parking_lot: a panic elsewhere does not poison it).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }
}

/// The key of `name` in `ns` for `rt` (namespace dropped when
/// cluster-scoped).
pub(crate) fn obj_key(rt: &ResourceType, ns: Option<&str>, name: &str) -> ObjKey {
    let ns = if rt.namespaced {
        ns.unwrap_or_default()
    } else {
        ""
    };
    (ns.to_owned(), name.to_owned())
}
