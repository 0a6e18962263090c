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
//!
//! The watch can beat the write's answer: the echo then arrives before its
//! version is known, and it woke a reconcile that decides nothing new (at
//! 20,000 shards a whole plan, seen after most first publishes on the real
//! API server). So a write is announced before it is sent
//! ([`OwnWrites::begin`]); an event of the object that arrives while a
//! write to it is on its way is held ([`OwnWrites::holds_while_in_flight`])
//! and judged when the write's answer is in ([`Flight::land`]): the echo
//! is spent, anything else wakes the group after all (so does a write
//! that failed, for everything it held).
//!
//! One object can have several own writes whose echoes are still to come:
//! the groups of a pool reconcile at once, and each writes its annotation
//! on the pod that joined. Every such version is remembered, not only the
//! last: when only the last was, the echo of each earlier write woke every
//! group of the pool (on 50 groups, a round of 50 reconciles that change
//! nothing per write, in the middle of the pod event's own).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use kube::{Resource, ResourceExt};

/// (kind, namespace, name) of a written object.
type Key = (String, String, String);

/// Own writes to one object whose echoes may still come, at most this
/// many (the oldest goes first): more than the groups that write one pod at
/// once, and a bound on what echoes that never come (a watch that relisted
/// past them) leave behind.
const PENDING_PER_OBJECT: usize = 16;

/// An object's writes whose echoes may still come: each one's
/// resourceVersion and when it was written, oldest first.
type Pending = VecDeque<(String, Instant)>;

/// How long after a write the cache may still be taken to lag it
/// ([`OwnWrites::awaits_echo`]): a watch delivers an echo in milliseconds,
/// and one that never comes (a relist past it) must not hide the object's
/// state for good.
const ECHO_DUE: Duration = Duration::from_secs(10);

/// The versions of each object's writes by this operator whose echoes have
/// not arrived, oldest first. An entry goes when its echo or a later one
/// arrives (a watch delivers an object's versions in order), when the
/// object is deleted, or past [`PENDING_PER_OBJECT`]. Cheap to clone:
/// clones share one memory.
#[derive(Debug, Clone, Default)]
pub struct OwnWrites {
    versions: Arc<Mutex<HashMap<Key, Pending>>>,
    /// Writes sent and not yet answered, by object.
    in_flight: Arc<Mutex<HashMap<Key, InFlight>>>,
}

/// The writes to one object on their way, and the versions of its events
/// that arrived meanwhile (held until the last of those writes lands).
#[derive(Debug, Default)]
struct InFlight {
    writes: usize,
    arrived: Vec<String>,
}

/// A write on its way ([`OwnWrites::begin`]), with what wakes the group
/// when an event it held turns out to be someone else's change. Dropped
/// without [`Flight::land`] (the write failed, or its reconcile was
/// dropped), every event it held counts as such a change.
#[must_use = "a write's flight ends with its answer (`land`)"]
pub(crate) struct Flight {
    own: OwnWrites,
    key: Key,
    wake: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Flight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flight")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Flight {
    /// The write was answered with `written` (`None`: stored otherwise
    /// than sent, so no echo of it is known). Each event of the object held
    /// while it was on its way is judged: its echo is spent, and anything
    /// else wakes the group (once). Whether it did.
    pub(crate) fn land<K: Resource<DynamicType = ()>>(mut self, written: Option<&K>) -> bool {
        if let Some(written) = written {
            self.own.record(written);
        }
        self.end()
    }

    /// Ends the flight: judges what it held and wakes the group when any
    /// of it was not an echo; whether it did.
    fn end(&mut self) -> bool {
        let Some(wake) = self.wake.take() else {
            return false;
        };
        let mut changed = false;
        for version in self.own.end_flight(&self.key) {
            changed |= !self.own.spend(&self.key, &version);
        }
        if changed {
            wake();
        }
        changed
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.end();
    }
}

impl OwnWrites {
    /// Remembers `written`, the object as the API server answered a write.
    pub fn record<K: Resource<DynamicType = ()>>(&self, written: &K) {
        if let (Some(key), Some(version)) = (key_of(written), written.resource_version()) {
            let mut versions = self.versions.lock();
            let pending = versions.entry(key).or_default();
            if pending.len() == PENDING_PER_OBJECT {
                pending.pop_front();
            }
            pending.push_back((version, Instant::now()));
        }
    }

    /// Whether `object` is exactly what one of the operator's writes to it
    /// left (its echo); that write's entry, and those of the writes before
    /// it, are spent by the answer yes.
    pub(crate) fn is_echo<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let (Some(key), Some(version)) = (key_of(object), object.resource_version()) else {
            return false;
        };
        self.spend(&key, &version)
    }

    /// [`Self::is_echo`] of `key` at `version`.
    fn spend(&self, key: &Key, version: &str) -> bool {
        let mut versions = self.versions.lock();
        let Some(pending) = versions.get_mut(key) else {
            return false;
        };
        let Some(at) = pending.iter().position(|(v, _)| v == version) else {
            return false;
        };
        pending.drain(..=at);
        if pending.is_empty() {
            versions.remove(key);
        }
        true
    }

    /// Announces a write to the `K` named `name` in `namespace`, before it
    /// is sent: its object's events are held until it lands, and `wake`
    /// wakes the group then if one of them was someone else's change.
    pub(crate) fn begin<K: Resource<DynamicType = ()>>(
        &self,
        namespace: &str,
        name: &str,
        wake: impl FnOnce() + Send + 'static,
    ) -> Flight {
        let key = key_named::<K>(namespace, name);
        self.in_flight.lock().entry(key.clone()).or_default().writes += 1;
        Flight {
            own: self.clone(),
            key,
            wake: Some(Box::new(wake)),
        }
    }

    /// Whether `object`'s event is held for a write to it on its way (it
    /// is judged when that write lands): asked of an event that is no
    /// known echo.
    pub(crate) fn holds_while_in_flight<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let (Some(key), Some(version)) = (key_of(object), object.resource_version()) else {
            return false;
        };
        match self.in_flight.lock().get_mut(&key) {
            Some(flight) => {
                flight.arrived.push(version);
                true
            }
            None => false,
        }
    }

    /// One write to `key` landed (or failed): the events held for it, when
    /// it was the last on its way.
    fn end_flight(&self, key: &Key) -> Vec<String> {
        let mut in_flight = self.in_flight.lock();
        let Some(flight) = in_flight.get_mut(key) else {
            return Vec::new();
        };
        flight.writes -= 1;
        if flight.writes > 0 {
            return Vec::new();
        }
        in_flight.remove(key).map(|f| f.arrived).unwrap_or_default()
    }

    /// Whether a write to the `K` named `name` in `namespace` made in the
    /// last [`ECHO_DUE`] has not come back through its watch: the cache
    /// does not show it yet, and a decision to write it again would be
    /// made from the state before it.
    ///
    /// `Some` is how long it may still be awaited: the caller that holds
    /// back a write for it looks again then, since the echo may have come
    /// before the write's answer was recorded (the watch can beat the
    /// response), and then nothing else says it came.
    pub(crate) fn awaits_echo<K: Resource<DynamicType = ()>>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Duration> {
        let key = key_named::<K>(namespace, name);
        self.versions
            .lock()
            .get(&key)
            .and_then(Pending::back)
            .and_then(|(_, at)| ECHO_DUE.checked_sub(at.elapsed()))
            .filter(|left| !left.is_zero())
    }

    /// Whether a write to the `K` named `name` in `namespace` is still
    /// unspent, however old: its echo never came through the watch (or
    /// came before the write was recorded).
    pub(crate) fn unspent<K: Resource<DynamicType = ()>>(
        &self,
        namespace: &str,
        name: &str,
    ) -> bool {
        let key = key_named::<K>(namespace, name);
        self.versions.lock().contains_key(&key)
    }

    /// Forgets `object` (deleted: a same-named successor starts afresh).
    pub(crate) fn forget<K: Resource<DynamicType = ()>>(&self, object: &K) {
        if let Some(key) = key_of(object) {
            self.versions.lock().remove(&key);
        }
    }

    /// Writes whose echo has not arrived yet.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.versions.lock().values().map(VecDeque::len).sum()
    }
}

fn key_named<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> Key {
    (
        K::kind(&()).into_owned(),
        namespace.to_owned(),
        name.to_owned(),
    )
}

fn key_of<K: Resource<DynamicType = ()>>(object: &K) -> Option<Key> {
    let meta = object.meta();
    Some(key_named::<K>(
        meta.namespace.as_deref()?,
        meta.name.as_deref()?,
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

    fn config_map(version: &str) -> ConfigMap {
        ConfigMap {
            metadata: meta("doc", version),
            ..Default::default()
        }
    }

    /// A write to ConfigMap `doc` begun on `own`, and how many times it
    /// woke the group.
    fn begin(own: &OwnWrites) -> (Flight, Arc<std::sync::atomic::AtomicUsize>) {
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&woken);
        let flight = own.begin::<ConfigMap>("ns", "doc", move || {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        (flight, woken)
    }

    fn times(woken: &std::sync::atomic::AtomicUsize) -> usize {
        woken.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn an_echo_that_beats_its_answer_is_held_and_spent_when_the_write_lands() {
        let own = OwnWrites::default();
        let (flight, woken) = begin(&own);
        // The watch delivers version 5 before the write's answer is in.
        assert!(!own.is_echo(&config_map("5")));
        assert!(own.holds_while_in_flight(&config_map("5")));
        // Another object's event is not held.
        assert!(!own.holds_while_in_flight(&pod("doc", "5")));
        assert!(!flight.land(Some(&config_map("5"))), "its own echo");
        assert_eq!(times(&woken), 0);
        assert_eq!(own.pending(), 0, "the echo was spent");
        assert!(
            !own.holds_while_in_flight(&config_map("6")),
            "no flight left"
        );
    }

    #[test]
    fn a_change_held_during_a_write_wakes_the_group_when_it_lands() {
        let own = OwnWrites::default();
        let (flight, woken) = begin(&own);
        // Someone else's change lands just before the write, and its echo.
        assert!(own.holds_while_in_flight(&config_map("4")));
        assert!(own.holds_while_in_flight(&config_map("5")));
        assert!(flight.land(Some(&config_map("5"))));
        assert_eq!(times(&woken), 1, "once, for all it held");
        assert_eq!(own.pending(), 0, "the echo among them was spent");
        // Stored otherwise than sent: nothing held is taken for its echo.
        let (flight, woken) = begin(&own);
        assert!(own.holds_while_in_flight(&config_map("7")));
        assert!(flight.land::<ConfigMap>(None));
        assert_eq!(times(&woken), 1);
        // Nothing held: nothing to wake for.
        let (flight, woken) = begin(&own);
        assert!(!flight.land(Some(&config_map("9"))));
        assert_eq!(times(&woken), 0);
    }

    #[test]
    fn a_failed_write_wakes_the_group_for_what_it_held_and_ends_its_flight() {
        let own = OwnWrites::default();
        let (first, first_woken) = begin(&own);
        let (second, second_woken) = begin(&own);
        assert!(own.holds_while_in_flight(&config_map("4")));
        drop(first);
        // Still held while the other write is on its way; it judges them.
        assert_eq!(times(&first_woken), 0);
        assert!(own.holds_while_in_flight(&config_map("5")));
        assert!(second.land(Some(&config_map("5"))), "4 was not its echo");
        assert_eq!(times(&second_woken), 1);
        let (failed, woken) = begin(&own);
        assert!(own.holds_while_in_flight(&config_map("8")));
        drop(failed);
        assert_eq!(times(&woken), 1, "the failed write held a change");
        assert!(
            !own.holds_while_in_flight(&config_map("9")),
            "no flight left"
        );
        assert_eq!(own.pending(), 0);
    }

    #[test]
    fn a_write_awaits_its_echo_until_it_or_a_deletion_comes() {
        let own = OwnWrites::default();
        let config_map = |version: &str| ConfigMap {
            metadata: meta("ca", version),
            ..Default::default()
        };
        assert_eq!(own.awaits_echo::<ConfigMap>("ns", "ca"), None);
        own.record(&config_map("3"));
        // Awaited for at most ECHO_DUE: the caller looks again by then.
        let left = own.awaits_echo::<ConfigMap>("ns", "ca");
        assert!(left.is_some_and(|left| left <= ECHO_DUE), "{left:?}");
        assert_eq!(own.awaits_echo::<ConfigMap>("other", "ca"), None);
        assert_eq!(own.awaits_echo::<CachedPod>("ns", "ca"), None);
        assert!(own.unspent::<ConfigMap>("ns", "ca"));
        assert!(own.is_echo(&config_map("3")));
        assert_eq!(own.awaits_echo::<ConfigMap>("ns", "ca"), None);
        assert!(!own.unspent::<ConfigMap>("ns", "ca"));
        own.record(&config_map("4"));
        own.forget(&config_map("4"));
        assert_eq!(own.awaits_echo::<ConfigMap>("ns", "ca"), None);
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
    fn each_of_several_writes_to_one_object_is_an_echo_and_a_deletion_forgets() {
        let own = OwnWrites::default();
        // Three groups annotate one pod at once; a fourth change between
        // them is somebody else's.
        own.record(&pod("a", "10"));
        own.record(&pod("a", "12"));
        own.record(&pod("a", "13"));
        assert!(own.is_echo(&pod("a", "10")));
        assert!(!own.is_echo(&pod("a", "11")));
        assert!(own.is_echo(&pod("a", "12")));
        assert_eq!(own.pending(), 1);
        own.forget(&pod("a", "13"));
        assert_eq!(own.pending(), 0);
        assert!(!own.is_echo(&pod("a", "13")));
    }

    #[test]
    fn a_later_echo_spends_the_earlier_writes_and_the_pending_are_bounded() {
        let own = OwnWrites::default();
        own.record(&pod("a", "10"));
        own.record(&pod("a", "12"));
        // The watch relisted past 10: its echo never comes, 12's does.
        assert!(own.is_echo(&pod("a", "12")));
        assert_eq!(own.pending(), 0);
        assert!(!own.is_echo(&pod("a", "10")));
        for version in 0..2 * PENDING_PER_OBJECT {
            own.record(&pod("b", &version.to_string()));
        }
        assert_eq!(own.pending(), PENDING_PER_OBJECT);
        assert!(!own.is_echo(&pod("b", "0")), "the oldest went");
        assert!(own.is_echo(&pod("b", &(2 * PENDING_PER_OBJECT - 1).to_string())));
        assert_eq!(own.pending(), 0);
    }
}
