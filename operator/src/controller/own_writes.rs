//! The operator's own writes (pod annotations, the document's ConfigMap)
//! as its watches see them: the core's [`Echoes`] behind one lock shared by
//! the watches and the writes, keyed by kind, namespace and name, on the
//! operator's monotonic clock; and the [`Flight`] of each write, which
//! wakes the object's group when an event held while it was on its way
//! turns out to be someone else's change. The core's module says why
//! echoes wake nothing and how they are told from changes; the caches
//! apply an echo as any event, only the wake-up is skipped (see
//! `triggers`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use kube::{Resource, ResourceExt};
use shardring_core::echoes::{Answer, Echoes, Verdict};

/// (kind, namespace, name) of a written object.
type Key = (String, String, String);

/// The echoes of the operator's own writes still to come, and its writes
/// on their way. Cheap to clone: clones share one memory.
#[derive(Debug, Clone, Default)]
pub struct OwnWrites {
    echoes: Arc<Mutex<Echoes<Key, Instant>>>,
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
        self.end(written.and_then(answer))
    }

    /// Ends the flight: judges what it held and wakes the group when any
    /// of it was not an echo; whether it did.
    fn end(&mut self, written: Option<Answer<Instant>>) -> bool {
        let Some(wake) = self.wake.take() else {
            return false;
        };
        let changed = self.own.echoes.lock().land(&self.key, written);
        if changed {
            wake();
        }
        changed
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.end(None);
    }
}

impl OwnWrites {
    /// Remembers `written`, the object as the API server answered a write.
    pub fn record<K: Resource<DynamicType = ()>>(&self, written: &K) {
        if let (Some(key), Some(answer)) = (key_of(written), answer(written)) {
            self.echoes.lock().record(key, answer);
        }
    }

    /// Whether `object` is exactly what one of the operator's writes to it
    /// left (its echo); that write's entry, and those of the writes before
    /// it, are spent by the answer yes.
    pub(crate) fn is_echo<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let (Some(key), Some(version)) = (key_of(object), object.resource_version()) else {
            return false;
        };
        self.echoes.lock().is_echo(&key, &version)
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
        self.echoes.lock().begin(key.clone());
        Flight {
            own: self.clone(),
            key,
            wake: Some(Box::new(wake)),
        }
    }

    /// The verdict on `object`'s event that changed what the cache keeps
    /// of it ([`Echoes::judge`]): an echo is spent, an event during a
    /// write to it is held.
    pub(crate) fn judge<K: Resource<DynamicType = ()>>(&self, object: &K) -> Verdict {
        let (Some(key), Some(version)) = (key_of(object), object.resource_version()) else {
            return Verdict::Change;
        };
        self.echoes.lock().judge(&key, &version)
    }

    /// Whether `object`'s event is held for a write to it on its way (it
    /// is judged when that write lands): asked of an event that is no
    /// known echo.
    pub(crate) fn holds_while_in_flight<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let (Some(key), Some(version)) = (key_of(object), object.resource_version()) else {
            return false;
        };
        self.echoes.lock().hold(&key, &version)
    }

    /// Whether a write to the `K` named `name` in `namespace` made in the
    /// last [`ECHO_DUE`](shardring_core::echoes::ECHO_DUE) has not come
    /// back through its watch, and how long it may still be awaited
    /// ([`Echoes::awaits_echo`]).
    pub(crate) fn awaits_echo<K: Resource<DynamicType = ()>>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Duration> {
        let key = key_named::<K>(namespace, name);
        self.echoes.lock().awaits_echo(&key, Instant::now())
    }

    /// Whether a write to the `K` named `name` in `namespace` is still
    /// unspent, however old: its echo never came through the watch (or
    /// came before the write was recorded).
    pub(crate) fn unspent<K: Resource<DynamicType = ()>>(
        &self,
        namespace: &str,
        name: &str,
    ) -> bool {
        self.echoes.lock().unspent(&key_named::<K>(namespace, name))
    }

    /// Forgets the writes to `object`, deleted (not those to a successor of
    /// its name: [`Echoes::forget`]).
    pub(crate) fn forget<K: Resource<DynamicType = ()>>(&self, object: &K) {
        if let Some(key) = key_of(object) {
            let uid = object.uid().unwrap_or_default();
            self.echoes.lock().forget(&key, &uid);
        }
    }

    /// Writes whose echo has not arrived yet.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.echoes.lock().pending()
    }
}

/// `written` as the API server answered a write of it, now.
fn answer<K: Resource<DynamicType = ()>>(written: &K) -> Option<Answer<Instant>> {
    Some(Answer {
        version: written.resource_version()?,
        uid: written.uid().unwrap_or_default(),
        at: Instant::now(),
    })
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
    use shardring_core::echoes::ECHO_DUE;

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
}
