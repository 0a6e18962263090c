//! The departed pods: for each pod the watch reported deleted in the last
//! [`RETENTION`], its uid and what its final object said of its containers
//! ([`Departure`]). [`DepartureMemory`] records them, bounded; the plan step
//! reads one namespace's of them at one moment as plain data
//! ([`Departures`], through the observation), to tell a pod the kubelet
//! stopped before confirming its deletion from one that was force-deleted,
//! or whose node stopped reporting, while its process may still run (see
//! `docs/handoff.md`, evidence `pod_stopped`).
//!
//! Whoever watches pods feeds the memory: the operator's pod watch (its
//! adapter turns watch events into [`DepartureMemory::record`],
//! [`DepartureMemory::relisting`] and [`DepartureMemory::listed`]), the
//! simulation's and the demo's in-process clusters. What it does not know it
//! says: [`Departures::watched_since`] is the time since which every
//! departure was seen. It is unset until the watch's first list completed,
//! unset again when a relist starts (a watch that expired may have missed
//! DELETED events: their pods simply vanish from the new list), and moved
//! forward when the memory is full and forgets its oldest entry. A restarted
//! operator starts with an empty memory; the handoff step then falls back to
//! the older rules wherever the memory would have been needed.
//!
//! Bounded: at most [`CAPACITY`] entries (a few hundred kilobytes), each
//! kept for [`RETENTION`]. Time is an input: it reads no clock.

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::observation::Containers;

/// How long a departure is remembered. A process that outlived its pod
/// object (a force deletion) by more than this is assumed gone: longer than
/// any sensible `terminationGracePeriodSeconds` or `handoff.drainTimeout`.
pub const RETENTION: Duration = Duration::from_secs(600);

/// One pod that left the API, as its final object showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure {
    /// Its uid (a pod of the same name created later has another).
    pub uid: String,
    /// When the watch reported it gone.
    pub at: Timestamp,
    /// What its final status said of its containers.
    pub containers: Containers,
    /// Whether it was bound to a node (`spec.nodeName`).
    pub scheduled: bool,
    /// Its creation timestamp.
    pub created: Option<Timestamp>,
    /// Whether the API server generated its name (`metadata.generateName`).
    pub generated_name: bool,
}

/// What the memory knows about one namespace's departed pods at one moment:
/// the plain data the (pure) plan step reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departures {
    /// Since when every departure was seen; `None`: no memory (nothing
    /// listed yet, a relist in progress, or a caller without a watch).
    pub watched_since: Option<Timestamp>,
    /// Whether a relist of the pod watch runs (then `watched_since` is
    /// `None` too): pods leave unseen now, and a pod absent from the API
    /// may have left a moment ago. `false` with `watched_since` `None`: no
    /// memory at all (a caller without a pod watch).
    pub relisting: bool,
    /// How long departures are kept: one older than this may be forgotten.
    pub retention: Duration,
    /// Per pod name, the remembered departures, oldest first.
    pub pods: BTreeMap<String, Vec<Departure>>,
}

impl Default for Departures {
    fn default() -> Self {
        Self {
            watched_since: None,
            relisting: false,
            retention: RETENTION,
            pods: BTreeMap::new(),
        }
    }
}

impl Departures {
    /// Whether no earlier pod of the same name as one created at `created`
    /// can have left unseen and still run: either the memory saw every
    /// departure of the last [`Self::retention`], or the pod was created
    /// longer ago than that (an earlier pod of its name left before it was
    /// created, so longer ago than the retention: assumed gone).
    pub fn covers(&self, created: Option<Timestamp>, now: Timestamp) -> bool {
        let horizon = horizon(now, self.retention);
        self.watched_since.is_some_and(|w| w <= horizon) || created.is_some_and(|c| c <= horizon)
    }
}

/// The time `retention` before `now`: what is older may be forgotten
/// (`Timestamp::MIN` when that lies before the representable range).
pub fn horizon(now: Timestamp, retention: Duration) -> Timestamp {
    SignedDuration::try_from(retention)
        .ok()
        .and_then(|d| now.checked_sub(d).ok())
        .unwrap_or(Timestamp::MIN)
}

/// Most departures remembered at once (the oldest is forgotten first).
pub const CAPACITY: usize = 4096;

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
    relisting: bool,
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
pub struct DepartureMemory {
    memory: Arc<Mutex<Memory>>,
}

impl Default for DepartureMemory {
    /// An empty memory that has seen nothing yet (no list completed).
    fn default() -> Self {
        Self::with_limits(RETENTION, CAPACITY)
    }
}

impl DepartureMemory {
    /// An empty memory keeping at most `capacity` departures for `retention`.
    pub fn with_limits(retention: Duration, capacity: usize) -> Self {
        Self {
            memory: Arc::new(Mutex::new(Memory {
                entries: VecDeque::new(),
                watched_since: None,
                relisting: false,
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
        departed.memory.lock().watched_since = Some(since);
        departed
    }

    /// The pod watch started a relist (its previous watch expired): what
    /// leaves until the list completes ([`Self::listed`]) may not be seen,
    /// so nothing is known to have been seen from now on.
    pub fn relisting(&self) {
        let mut memory = self.memory.lock();
        memory.watched_since = None;
        memory.relisting = true;
    }

    /// A complete list of the pods was seen at `at`: every departure from
    /// then on is seen (unless a list already covers an earlier time).
    pub fn listed(&self, at: Timestamp) {
        let mut memory = self.memory.lock();
        memory.relisting = false;
        if memory.watched_since.is_none() {
            memory.watched_since = Some(at);
        }
    }

    /// Remembers that pod `namespace/name` left.
    pub fn record(&self, namespace: &str, name: &str, departure: Departure) {
        let mut memory = self.memory.lock();
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
        let mut memory = self.memory.lock();
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
            relisting: memory.relisting,
            retention: memory.retention,
            pods,
        }
    }

    /// How many departures are remembered.
    pub fn len(&self) -> usize {
        self.memory.lock().entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn coverage_needs_the_whole_retention_or_an_old_pod() {
        let now = t(10_000);
        let mut seen = Departures {
            watched_since: Some(now - RETENTION),
            ..Default::default()
        };
        assert!(seen.covers(None, now));
        seen.watched_since = Some(now - RETENTION + Duration::from_secs(1));
        assert!(!seen.covers(Some(now - Duration::from_secs(5)), now));
        assert!(seen.covers(Some(now - RETENTION), now));
        seen.watched_since = None;
        assert!(!seen.covers(None, now));
        assert_eq!(horizon(Timestamp::MIN, RETENTION), Timestamp::MIN);
    }
}
