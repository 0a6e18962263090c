//! The memory of departed pods: a small, bounded record of the pods that
//! left the API, for each pod the watch reported deleted in the last
//! [`RETENTION`] its uid and what its final object said of its containers
//! ([`Departure`]). The plan step reads it through the observation
//! ([`Departed::departures`]) to tell a pod the kubelet stopped before
//! confirming its deletion from one that was force-deleted, or whose node
//! stopped reporting, while its process may still run (see
//! `docs/handoff.md`, evidence `pod_stopped`).
//!
//! Whoever watches pods feeds it: the operator's pod watch (its adapter
//! turns watch events into [`Departed::record`], [`Departed::relisting`] and
//! [`Departed::listed`]), the simulation's and the demo's in-process
//! clusters. What it does not know it says: [`Departures::watched_since`] is
//! the time since which every departure was seen. It is unset until the
//! watch's first list completed, unset again when a relist starts (a watch
//! that expired may have missed DELETED events: their pods simply vanish
//! from the new list), and moved forward when the memory is full and forgets
//! its oldest entry. A restarted operator starts with an empty memory; the
//! handoff step then falls back to the older rules wherever the memory would
//! have been needed.
//!
//! Bounded: at most [`CAPACITY`] entries (a few hundred kilobytes), each
//! kept for [`RETENTION`]. Time is an input: it reads no clock.

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::departures::{Departure, Departures, RETENTION, horizon};

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
        departed.memory.lock().watched_since = Some(since);
        departed
    }

    /// The pod watch started a relist (its previous watch expired): what
    /// leaves until the list completes ([`Self::listed`]) may not be seen,
    /// so nothing is known to have been seen from now on.
    pub fn relisting(&self) {
        self.memory.lock().watched_since = None;
    }

    /// A complete list of the pods was seen at `at`: every departure from
    /// then on is seen (unless a list already covers an earlier time).
    pub fn listed(&self, at: Timestamp) {
        let mut memory = self.memory.lock();
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
