//! A small, bounded memory of the pods that left the API: for each pod the
//! watch reported deleted in the last [`RETENTION`], its uid and what its
//! final object (the one the DELETED event carries, with the kubelet's last
//! status) said of its containers. The handoff step reads it, through the
//! observation ([`Departures`]), to tell a pod the kubelet stopped before
//! confirming its deletion from one that was force-deleted, or whose node
//! stopped reporting, while its process may still run (see
//! `docs/handoff.md`, evidence `pod_stopped`).
//!
//! The runner feeds it every event of the pod watch ([`Departed::recorder`]);
//! the observe step reads it ([`Departed::departures`]). What it does not
//! know it says: [`Departures::watched_since`] is the time since which every
//! departure was seen. It is unset until the watch's first list completed,
//! set again at every relist (a watch that expired may have missed DELETED
//! events: their pods simply vanish from the new list), and moved forward
//! when the memory is full and forgets its oldest entry. A restarted
//! operator starts with an empty memory; the handoff step then falls back to
//! the older rules wherever the memory would have been needed.
//!
//! Bounded: at most [`CAPACITY`] entries (a few hundred kilobytes), each
//! kept for [`RETENTION`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::watcher;
use shardring_core::departures::horizon;
pub use shardring_core::departures::{Departure, Departures, RETENTION};

use super::{containers_of, has_generated_name};
use crate::controller::cached_pod::CachedPod;

/// Most departures remembered at once (the oldest is forgotten first).
pub const CAPACITY: usize = 4096;

/// The departure of `pod`, reported at `at`.
fn departure_of(pod: &CachedPod, at: Timestamp) -> Departure {
    Departure {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        at,
        containers: containers_of(pod),
        scheduled: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty()),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        generated_name: has_generated_name(&pod.metadata),
    }
}

#[derive(Debug)]
struct Entry {
    namespace: String,
    name: String,
    departure: Departure,
}

#[derive(Debug)]
struct Memory {
    entries: VecDeque<Entry>,
    watched_since: Option<Timestamp>,
    retention: Duration,
    capacity: usize,
}

impl Memory {
    fn prune(&mut self, now: Timestamp) {
        let horizon = horizon(now, self.retention);
        while self
            .entries
            .front()
            .is_some_and(|e| e.departure.at < horizon)
        {
            self.entries.pop_front();
        }
    }
}

/// The memory of departed pods (clones share it). One per operator
/// instance, never process-wide.
#[derive(Debug, Clone)]
pub struct Departed {
    memory: Arc<Mutex<Memory>>,
}

impl Default for Departed {
    /// An empty memory that has seen nothing yet (no list completed).
    fn default() -> Self {
        Self::with_limits(RETENTION, CAPACITY)
    }
}

impl Departed {
    /// An empty memory keeping at most `capacity` departures for `retention`.
    pub fn with_limits(retention: Duration, capacity: usize) -> Self {
        Self {
            memory: Arc::new(Mutex::new(Memory {
                entries: VecDeque::new(),
                watched_since: None,
                retention,
                capacity: capacity.max(1),
            })),
        }
    }

    /// A memory that has seen every departure since `since`: for in-process
    /// clusters (the simulation, the demo) that report every pod removal to
    /// it, from their start (`Timestamp::MIN` when nothing existed before).
    pub fn watched_from(since: Timestamp, retention: Duration) -> Self {
        let departed = Self::with_limits(retention, CAPACITY);
        departed.lock().watched_since = Some(since);
        departed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An `inspect` callback for the pod watch stream (after the strip step,
    /// which keeps what a [`Departure`] reads), with the system clock.
    pub fn recorder(
        &self,
    ) -> impl FnMut(&Result<watcher::Event<CachedPod>, watcher::Error>) + Send + 'static {
        let departed = self.clone();
        move |event| {
            if let Ok(event) = event {
                departed.record_event(event, Timestamp::now());
            }
        }
    }

    /// Takes one watch event seen at `now`: a DELETED event is a departure;
    /// a relist starting forgets since when everything was seen, and its end
    /// sets it to `now` (departures during the gap were not seen).
    pub fn record_event(&self, event: &watcher::Event<CachedPod>, now: Timestamp) {
        match event {
            watcher::Event::Delete(pod) => {
                let namespace = pod.metadata.namespace.clone().unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap_or_default();
                self.record(&namespace, &name, departure_of(pod, now));
            }
            watcher::Event::Init => self.lock().watched_since = None,
            watcher::Event::InitDone => self.listed(now),
            watcher::Event::Apply(_) | watcher::Event::InitApply(_) => {}
        }
    }

    /// A complete list of the pods was seen at `at`: every departure from
    /// then on is seen (unless a list already covers an earlier time).
    pub fn listed(&self, at: Timestamp) {
        let mut memory = self.lock();
        if memory.watched_since.is_none() {
            memory.watched_since = Some(at);
        }
    }

    /// Remembers that pod `namespace/name` left.
    pub fn record(&self, namespace: &str, name: &str, departure: Departure) {
        let mut memory = self.lock();
        memory.prune(departure.at);
        while memory.entries.len() >= memory.capacity {
            let Some(forgotten) = memory.entries.pop_front() else {
                break;
            };
            // What left before the forgotten entry is no longer all known.
            let at = forgotten.departure.at;
            memory.watched_since = memory.watched_since.map(|w| w.max(at));
        }
        memory.entries.push_back(Entry {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            departure,
        });
    }

    /// The departures in `namespace` of the pods `wanted` selects, as of `now`.
    pub fn departures(
        &self,
        namespace: &str,
        wanted: impl Fn(&str) -> bool,
        now: Timestamp,
    ) -> Departures {
        let mut memory = self.lock();
        memory.prune(now);
        let mut pods: BTreeMap<String, Vec<Departure>> = BTreeMap::new();
        for entry in memory
            .entries
            .iter()
            .filter(|e| e.namespace == namespace && wanted(&e.name))
        {
            pods.entry(entry.name.clone())
                .or_default()
                .push(entry.departure.clone());
        }
        Departures {
            watched_since: memory.watched_since,
            retention: memory.retention,
            pods,
        }
    }

    /// How many departures are remembered.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;
    use shardring_core::observation::Containers;

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// Pod `name` as the stripped DELETED event shows it: terminating, its
    /// container terminated or not.
    fn pod(namespace: &str, name: &str, terminated: bool) -> CachedPod {
        let state = if terminated {
            ContainerState {
                terminated: Some(ContainerStateTerminated::default()),
                ..Default::default()
            }
        } else {
            ContainerState {
                running: Some(Default::default()),
                ..Default::default()
            }
        };
        CachedPod::from(&Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                uid: Some(format!("uid-{name}")),
                deletion_timestamp: Some(Time(t(0))),
                creation_timestamp: Some(Time(t(-100))),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-1".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    state: Some(state),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn deleted_events_are_remembered_with_their_final_state() {
        let departed = Departed::default();
        departed.record_event(&watcher::Event::Init, t(0));
        departed.record_event(&watcher::Event::InitApply(pod("prod", "a", false)), t(0));
        departed.record_event(&watcher::Event::InitDone, t(1));
        departed.record_event(&watcher::Event::Apply(pod("prod", "a", false)), t(2));
        departed.record_event(&watcher::Event::Delete(pod("prod", "a", true)), t(3));
        departed.record_event(&watcher::Event::Delete(pod("prod", "b", false)), t(4));
        departed.record_event(&watcher::Event::Delete(pod("other", "c", true)), t(5));
        let seen = departed.departures("prod", all, t(6));
        assert_eq!(seen.watched_since, Some(t(1)));
        assert_eq!(seen.pods.len(), 2, "only the namespace's");
        let a = &seen.pods["a"][0];
        assert_eq!(
            (a.uid.as_str(), a.at, a.containers, a.scheduled, a.created),
            ("uid-a", t(3), Containers::Stopped, true, Some(t(-100)))
        );
        assert_eq!(seen.pods["b"][0].containers, Containers::Running);
        // Only the pods asked for.
        let only_b = departed.departures("prod", |n| n == "b", t(6));
        assert_eq!(only_b.pods.keys().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn a_relist_restarts_what_was_seen_and_departures_expire() {
        let departed = Departed::default();
        assert_eq!(departed.departures("prod", all, t(0)).watched_since, None);
        departed.record_event(&watcher::Event::Init, t(0));
        departed.record_event(&watcher::Event::InitDone, t(1));
        departed.record_event(&watcher::Event::Delete(pod("prod", "a", true)), t(2));
        // The watch expired: what left during the relist is not seen.
        departed.record_event(&watcher::Event::Init, t(10));
        assert_eq!(departed.departures("prod", all, t(11)).watched_since, None);
        departed.record_event(&watcher::Event::InitDone, t(12));
        let seen = departed.departures("prod", all, t(13));
        assert_eq!(seen.watched_since, Some(t(12)));
        assert_eq!(seen.pods["a"].len(), 1, "what was seen before stays");
        // Past the retention it is forgotten (assumed long over).
        let later = t(2) + RETENTION + Duration::from_secs(1);
        assert!(departed.departures("prod", all, later).pods.is_empty());
        assert!(departed.is_empty());
    }

    #[test]
    fn a_full_memory_forgets_the_oldest_and_says_so() {
        let departed = Departed::with_limits(RETENTION, 2);
        departed.listed(t(0));
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            let at = t(10 + i64::try_from(i).expect("three names"));
            departed.record_event(&watcher::Event::Delete(pod("prod", name, true)), at);
        }
        let seen = departed.departures("prod", all, t(20));
        assert_eq!(seen.pods.keys().collect::<Vec<_>>(), ["b", "c"]);
        // Departures up to the forgotten one's are no longer all known.
        assert_eq!(seen.watched_since, Some(t(10)));
        assert_eq!(departed.len(), 2);
    }

    #[test]
    fn a_memory_watched_from_the_start_covers_everything() {
        let now = t(10_000);
        let everything = Departed::watched_from(Timestamp::MIN, RETENTION);
        assert!(everything.departures("prod", all, now).covers(None, now));
        assert!(
            !Departed::default()
                .departures("prod", all, now)
                .covers(None, now)
        );
    }
}
