//! The pod watch's side of the memory of departed pods
//! ([`shardring_core::departures`], where the memory itself lives, pure): the
//! runner feeds it every event of the pod watch ([`WatchDeparted::recorder`]),
//! each DELETED event a departure with the final state of its pod, each
//! relist a gap in what was seen; the observe step reads it
//! ([`DepartureMemory::departures`]).

use jiff::Timestamp;
use kube::runtime::watcher;
pub use shardring_core::departures::{CAPACITY, DepartureMemory};
pub use shardring_core::departures::{Departure, Departures, RETENTION};

use crate::controller::cached_pod::CachedPod;
use crate::controller::pod_cache::PodRecord;

/// The departure of `pod`, reported at `at`: the core's, of the pod's
/// record.
fn departure_of(pod: &CachedPod, at: Timestamp) -> Departure {
    PodRecord::from(pod).departure(at)
}

/// Feeding a [`DepartureMemory`] from the pod watch.
pub trait WatchDeparted {
    /// An `inspect` callback for the pod watch stream, with the system
    /// clock.
    fn recorder(
        &self,
    ) -> impl FnMut(&Result<watcher::Event<CachedPod>, watcher::Error>) + Send + 'static;

    /// Takes one watch event seen at `now`: a DELETED event is a departure;
    /// a relist starting forgets since when everything was seen, and its end
    /// sets it to `now` (departures during the gap were not seen).
    fn record_event(&self, event: &watcher::Event<CachedPod>, now: Timestamp);
}

impl WatchDeparted for DepartureMemory {
    fn recorder(
        &self,
    ) -> impl FnMut(&Result<watcher::Event<CachedPod>, watcher::Error>) + Send + 'static {
        let departed = self.clone();
        move |event| {
            if let Ok(event) = event {
                departed.record_event(event, Timestamp::now());
            }
        }
    }

    fn record_event(&self, event: &watcher::Event<CachedPod>, now: Timestamp) {
        match event {
            watcher::Event::Delete(pod) => {
                let namespace = pod.metadata.namespace.clone().unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap_or_default();
                self.record(&namespace, &name, departure_of(pod, now));
            }
            watcher::Event::Init => self.relisting(),
            watcher::Event::InitDone => self.listed(now),
            watcher::Event::Apply(_) | watcher::Event::InitApply(_) => {}
        }
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

    use std::time::Duration;

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// Pod `name` as its DELETED event shows it: terminating, its
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
        let departed = DepartureMemory::default();
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
        let departed = DepartureMemory::default();
        assert_eq!(departed.departures("prod", all, t(0)).watched_since, None);
        departed.record_event(&watcher::Event::Init, t(0));
        departed.record_event(&watcher::Event::InitDone, t(1));
        departed.record_event(&watcher::Event::Delete(pod("prod", "a", true)), t(2));
        // The watch expired: what left during the relist is not seen.
        departed.record_event(&watcher::Event::Init, t(10));
        let relisting = departed.departures("prod", all, t(11));
        assert_eq!(relisting.watched_since, None);
        assert!(relisting.relisting, "a relist is told apart from no memory");
        departed.record_event(&watcher::Event::InitDone, t(12));
        let seen = departed.departures("prod", all, t(13));
        assert_eq!(seen.watched_since, Some(t(12)));
        assert!(!seen.relisting);
        assert_eq!(seen.pods["a"].len(), 1, "what was seen before stays");
        // Past the retention it is forgotten (assumed long over).
        let later = t(2) + RETENTION + Duration::from_secs(1);
        assert!(departed.departures("prod", all, later).pods.is_empty());
        assert!(departed.is_empty());
    }

    #[test]
    fn a_full_memory_forgets_the_oldest_and_says_so() {
        let departed = DepartureMemory::with_limits(RETENTION, 2);
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
        let everything = DepartureMemory::watched_from(Timestamp::MIN, RETENTION);
        assert!(everything.departures("prod", all, now).covers(None, now));
        assert!(
            !DepartureMemory::default()
                .departures("prod", all, now)
                .covers(None, now)
        );
    }
}
