//! Which groups of a pool reconcile first after a new deal: the groups the
//! deal concerns (its rows changed for them, or they hold shards on a pod
//! the deal no longer has: [`shardring_core::pool::Shared::changed`]) go
//! before the pool's other groups.
//!
//! Why: a pod event wakes every group of its pool, and kube-runtime's
//! controller runs them in an order of its own, a few at a time. On a pool
//! of 50 groups a pod that turns Ready changes about 4 documents, and those
//! 4 waited behind some 46 reconciles that decide nothing new (half a
//! millisecond of CPU each, contending with the 4 groups' writes). So
//! while a window of groups first in line is open, any other group of the
//! same balance that starts a reconcile defers it (each time it is woken:
//! a pod's deletion comes as two events): it comes back when the last
//! group first in line is done, or when the window closes ([`WINDOW`]
//! after it opened), whichever is first. Only the order changes: every
//! group woken still reconciles, a deferred one at most [`WINDOW`] later.
//!
//! Pure bookkeeping: the caller wakes the groups it returns.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::GroupKey;

/// The longest a window stays open, so the longest a group is deferred: a
/// group first in line whose reconcile never ends (stuck on a write) holds
/// nobody back longer than this.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);

/// A balance's book: its namespace and its pools joined by `+`.
pub(crate) type BookKey = (String, String);

/// The open windows, by the balance whose deal opened them.
#[derive(Debug, Default)]
pub(crate) struct Precedence {
    windows: HashMap<BookKey, Window>,
}

/// One balance's groups first in line and the groups waiting for them.
#[derive(Debug)]
struct Window {
    /// Each group first in line (`namespace/name`), with the sequence
    /// number of the deal that put it there: only a reconcile that took its
    /// share after that deal is the one it waits for.
    first: HashMap<String, u64>,
    /// The groups deferred, woken when the window closes.
    deferred: BTreeSet<GroupKey>,
    until: Instant,
}

impl Precedence {
    /// Deal `seq` of `book` concerns `groups`: they go first (a window
    /// opens at `now`, or the open one takes them in, closing when it
    /// would have).
    pub(crate) fn first_in_line(
        &mut self,
        book: &BookKey,
        groups: &[String],
        seq: u64,
        now: Instant,
    ) {
        if groups.is_empty() {
            return;
        }
        let window = self.windows.entry(book.clone()).or_insert_with(|| Window {
            first: HashMap::new(),
            deferred: BTreeSet::new(),
            until: now + WINDOW,
        });
        for group in groups {
            window.first.insert(group.clone(), seq);
        }
    }

    /// Whether `group` (of pool `pool`) defers the reconcile it starts at
    /// `now`, and for how long at most: when a window of its balance is
    /// open and it is not first in line there.
    pub(crate) fn defer(&mut self, group: &GroupKey, pool: &str, now: Instant) -> Option<Duration> {
        self.windows.retain(|_, window| window.until > now);
        let own = group.to_string();
        let window = self
            .windows
            .iter_mut()
            .find(|(key, _)| of_balance(key, &group.namespace, pool))?
            .1;
        if window.first.contains_key(&own) {
            return None;
        }
        window.deferred.insert(group.clone());
        Some(window.until - now)
    }

    /// `group`'s reconcile, which took its share at deal `seq`, is over:
    /// the groups to wake (the deferred ones, when it was the last first in
    /// line).
    pub(crate) fn done(&mut self, book: &BookKey, group: &str, seq: u64) -> Vec<GroupKey> {
        let Some(window) = self.windows.get_mut(book) else {
            return Vec::new();
        };
        if window.first.get(group).is_some_and(|&marked| seq > marked) {
            window.first.remove(group);
        }
        self.close_if_done(book)
    }

    /// `group` is deleted: it is first in line nowhere any more.
    pub(crate) fn forget(&mut self, group: &GroupKey) -> Vec<GroupKey> {
        let own = group.to_string();
        let books: Vec<BookKey> = self.windows.keys().cloned().collect();
        let mut wake = Vec::new();
        for book in books {
            if let Some(window) = self.windows.get_mut(&book) {
                window.first.remove(&own);
                window.deferred.remove(group);
            }
            wake.extend(self.close_if_done(&book));
        }
        wake
    }

    /// Closes `book`'s window once nobody is first in line: the deferred
    /// groups, to wake.
    fn close_if_done(&mut self, book: &BookKey) -> Vec<GroupKey> {
        if self.windows.get(book).is_none_or(|w| !w.first.is_empty()) {
            return Vec::new();
        }
        let window = self.windows.remove(book).expect("present");
        window.deferred.into_iter().collect()
    }
}

/// Whether the book `key` is the balance of pool `pool` in `namespace`.
fn of_balance(key: &BookKey, namespace: &str, pool: &str) -> bool {
    key.0 == namespace && key.1.split('+').any(|name| name == pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book() -> BookKey {
        ("ns".into(), "a+b".into())
    }

    fn key(name: &str) -> GroupKey {
        GroupKey::new("ns", name)
    }

    #[test]
    fn the_others_of_the_balance_defer_until_the_first_in_line_are_done() {
        let mut precedence = Precedence::default();
        let t0 = Instant::now();
        precedence.first_in_line(&book(), &["ns/g-1".into(), "ns/g-2".into()], 7, t0);
        // First in line: never deferred.
        assert_eq!(precedence.defer(&key("g-1"), "a", t0), None);
        // Another group of either pool of the balance defers, for what is
        // left of the window.
        let later = t0 + Duration::from_millis(100);
        assert_eq!(
            precedence.defer(&key("g-3"), "a", later),
            WINDOW.checked_sub(Duration::from_millis(100))
        );
        assert!(precedence.defer(&key("g-4"), "b", later).is_some());
        // Woken again meanwhile, it defers again (and is woken once).
        assert!(precedence.defer(&key("g-4"), "b", later).is_some());
        // Other pools and namespaces are not held back.
        assert_eq!(precedence.defer(&key("g-6"), "c", later), None);
        assert_eq!(
            precedence.defer(&GroupKey::new("other", "g"), "a", later),
            None
        );
        // A reconcile of g-1 that took its share before the deal that put it
        // first in line is not the one the others wait for.
        assert!(precedence.done(&book(), "ns/g-1", 6).is_empty());
        assert!(precedence.done(&book(), "ns/g-1", 8).is_empty());
        assert_eq!(
            precedence.done(&book(), "ns/g-2", 9),
            vec![key("g-3"), key("g-4")]
        );
        // The window is closed: nobody defers.
        assert_eq!(precedence.defer(&key("g-3"), "a", later), None);
    }

    #[test]
    fn a_window_closes_on_its_own_after_at_most_its_length() {
        let mut precedence = Precedence::default();
        let t0 = Instant::now();
        precedence.first_in_line(&book(), &["ns/g-1".into()], 1, t0);
        // A second deal adds to the open window without extending it.
        precedence.first_in_line(&book(), &["ns/g-2".into()], 2, t0 + WINDOW / 2);
        assert!(
            precedence
                .defer(&key("g-3"), "a", t0 + WINDOW / 2)
                .is_some()
        );
        assert_eq!(precedence.defer(&key("g-4"), "a", t0 + WINDOW), None);
    }

    #[test]
    fn a_deleted_group_first_in_line_holds_nobody_back() {
        let mut precedence = Precedence::default();
        let t0 = Instant::now();
        precedence.first_in_line(&book(), &["ns/g-1".into()], 1, t0);
        assert!(precedence.defer(&key("g-2"), "a", t0).is_some());
        assert_eq!(precedence.forget(&key("g-1")), vec![key("g-2")]);
        assert_eq!(precedence.defer(&key("g-3"), "a", t0), None);
    }
}
