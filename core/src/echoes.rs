//! Which watch events of an object are the echoes of the operator's own
//! writes to it, and which are someone else's change ([`Echoes`]).
//!
//! Why: every write comes back through a watch as a modified object, and
//! that event maps to the object's ShardGroups. At 5,000 pods a reconcile
//! costs tens of milliseconds, and the echo of a churn event's own writes
//! was a second, no-op reconcile that the next event had to wait behind. A
//! watch event whose object is at exactly the resourceVersion the API
//! server returned for the operator's write is that write: nothing else
//! changed in it (every other change has its own version, and its own
//! event, which still wakes the group). A write is remembered as soon as
//! its answer is in, because the echo can arrive while the rest of the
//! reconcile's writes are still going out.
//!
//! The watch can beat the write's answer: the echo then arrives before its
//! version is known. So a write is announced before it is sent
//! ([`Echoes::begin`]); an event of the object that arrives while a write
//! to it is on its way is held ([`Echoes::hold`]) and judged when the
//! write's answer is in ([`Echoes::land`]): the echo is spent, anything
//! else is a change after all (so is everything held by a write that
//! failed, or whose answer never came).
//!
//! One object can have several own writes whose echoes are still to come:
//! the groups of a pool reconcile at once, and each writes its annotation
//! on the pod that joined. Every such version is remembered, not only the
//! last: when only the last was, the echo of each earlier write woke every
//! group of the pool.
//!
//! Pure state, with time an input ([`Moment`]): the operator keeps one
//! behind a lock beside its watches, the simulation one beside its
//! simulated watch, which delivers echoes before and after their answers
//! and checks every verdict against what it knows each event was.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

pub use crate::moment::Moment;

/// Own writes to one object whose echoes may still come, at most this
/// many (the oldest goes first): more than the groups that write one pod
/// at once, and a bound on what echoes that never come (a watch that
/// relisted past them) leave behind.
pub const PENDING_PER_OBJECT: usize = 16;

/// How long after a write the cache may still be taken to lag it
/// ([`Echoes::awaits_echo`]): a watch delivers an echo in milliseconds,
/// and one that never comes (a relist past it) must not hide the object's
/// state for good.
pub const ECHO_DUE: Duration = Duration::from_secs(10);

/// The API server's answer to an own write: the object's resourceVersion
/// and uid as written, and when the answer came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    /// The resourceVersion the write left.
    pub version: String,
    /// The uid of the object written: a deletion forgets the writes to
    /// that object only, not those to a successor of its name written
    /// before the deletion's event arrived.
    pub uid: String,
    /// When the answer came.
    pub at: T,
}

/// What an event of an object is ([`Echoes::judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The echo of an own write whose answer is in: it wakes nothing.
    Echo,
    /// It arrived while a write to its object is on its way: judged when
    /// the last such write lands ([`Echoes::land`]).
    Held,
    /// Someone else's change (or an own write whose answer never came): it
    /// wakes the object's groups.
    Change,
}

/// The writes to one object on their way, and the versions of its events
/// that arrived meanwhile (held until the last of those writes lands).
#[derive(Debug, Clone, Default)]
struct InFlight {
    writes: usize,
    arrived: Vec<String>,
}

/// The versions of each object's own writes whose echoes have not arrived
/// (oldest first), and the writes on their way, by object key `K`. An
/// entry goes when its echo or a later one arrives (a watch delivers an
/// object's versions in order), when the object is deleted, or past
/// [`PENDING_PER_OBJECT`].
#[derive(Debug, Clone)]
pub struct Echoes<K, T> {
    versions: HashMap<K, VecDeque<Answer<T>>>,
    in_flight: HashMap<K, InFlight>,
}

impl<K, T> Default for Echoes<K, T> {
    fn default() -> Self {
        Self {
            versions: HashMap::new(),
            in_flight: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, T: Moment> Echoes<K, T> {
    /// Remembers an own write to `key`, answered with `answer`.
    pub fn record(&mut self, key: K, answer: Answer<T>) {
        let pending = self.versions.entry(key).or_default();
        if pending.len() == PENDING_PER_OBJECT {
            pending.pop_front();
        }
        pending.push_back(answer);
    }

    /// Whether the event of `key` at `version` is the echo of an own write;
    /// that write's entry, and those of the writes before it, are spent by
    /// the answer yes.
    pub fn is_echo(&mut self, key: &K, version: &str) -> bool {
        let Some(pending) = self.versions.get_mut(key) else {
            return false;
        };
        let Some(at) = pending.iter().position(|answer| answer.version == version) else {
            return false;
        };
        pending.drain(..=at);
        if pending.is_empty() {
            self.versions.remove(key);
        }
        true
    }

    /// Holds the event of `key` at `version` when a write to `key` is on
    /// its way (it is judged when that write lands); whether it did.
    /// Asked of an event that is no known echo.
    pub fn hold(&mut self, key: &K, version: &str) -> bool {
        match self.in_flight.get_mut(key) {
            Some(flight) => {
                flight.arrived.push(version.to_owned());
                true
            }
            None => false,
        }
    }

    /// The verdict on an event of `key` at `version` that changed what the
    /// caller's cache keeps of the object: an echo is spent, an event
    /// during a write to the object is held.
    pub fn judge(&mut self, key: &K, version: &str) -> Verdict {
        if self.is_echo(key, version) {
            Verdict::Echo
        } else if self.hold(key, version) {
            Verdict::Held
        } else {
            Verdict::Change
        }
    }

    /// Announces a write to `key`, before it is sent: the object's events
    /// are held until it lands.
    pub fn begin(&mut self, key: K) {
        self.in_flight.entry(key).or_default().writes += 1;
    }

    /// A write to `key` begun by [`Self::begin`] is answered: with
    /// `answer` when it succeeded as sent, `None` when it failed, was
    /// stored otherwise than sent, or its answer never came. When it was
    /// the last write to `key` on its way, each event held meanwhile is
    /// judged: its echo is spent, anything else is a change. Whether any
    /// was (the object's groups are then woken, once).
    pub fn land(&mut self, key: &K, answer: Option<Answer<T>>) -> bool {
        if let Some(answer) = answer {
            self.record(key.clone(), answer);
        }
        let held = match self.in_flight.get_mut(key) {
            Some(flight) if flight.writes > 1 => {
                flight.writes -= 1;
                return false;
            }
            Some(_) => self
                .in_flight
                .remove(key)
                .map(|flight| flight.arrived)
                .unwrap_or_default(),
            None => return false,
        };
        let mut changed = false;
        for version in held {
            changed |= !self.is_echo(key, &version);
        }
        changed
    }

    /// How long a write to `key` made in the last [`ECHO_DUE`] before
    /// `now` may still be awaited, when its echo has not come through the
    /// watch: the cache does not show it yet, and a decision to write the
    /// object again would be made from the state before it. The caller
    /// that holds such a write back looks again then, since the echo may
    /// have come before the write's answer was recorded (the watch can beat
    /// the response), and then nothing else says it came.
    pub fn awaits_echo(&self, key: &K, now: T) -> Option<Duration> {
        self.versions
            .get(key)
            .and_then(VecDeque::back)
            .and_then(|answer| ECHO_DUE.checked_sub(now.since(answer.at)))
            .filter(|left| !left.is_zero())
    }

    /// Whether a write to `key` is still unspent, however old: its echo
    /// never came through the watch (or came before it was recorded).
    pub fn unspent(&self, key: &K) -> bool {
        self.versions.contains_key(key)
    }

    /// Forgets the writes to `key`'s object of `uid`, deleted: a
    /// same-named successor starts afresh, but what was written to it
    /// before the deletion's event arrived is still awaited.
    pub fn forget(&mut self, key: &K, uid: &str) {
        if let Some(pending) = self.versions.get_mut(key) {
            pending.retain(|answer| answer.uid != uid);
            if pending.is_empty() {
                self.versions.remove(key);
            }
        }
    }

    /// Own writes whose echo has not arrived yet.
    pub fn pending(&self) -> usize {
        self.versions.values().map(VecDeque::len).sum()
    }

    /// Whether a write to `key` is on its way.
    #[cfg(test)]
    fn in_flight(&self, key: &K) -> bool {
        self.in_flight.contains_key(key)
    }
}

#[cfg(test)]
mod tests;
