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
//! Inside a window, the groups first in line also put their documents
//! before their bookkeeping: a group's status and Events wait until every
//! other group first in line whose reconcile is under way has its document
//! out ([`Precedence::documents_pending`]). Those writes meet the others'
//! document writes on the same API server otherwise (on the kit's pool of
//! 50 groups, status writes of 13–76 ms beside document PUTs of 5–49 ms).
//! Only reconciles already under way are waited for, and they wait for
//! nothing before their document, so no group waits on one that waits.
//! The annotations do not wait: they are what a consumer reads.
//!
//! Pure bookkeeping, with time an input ([`Moment`]): the caller wakes
//! the groups it returns. The operator keeps one behind a lock beside its
//! pools' books; the simulation one beside its own, and defers the same
//! reconciles.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::GroupKey;
use crate::moment::Moment;

/// The longest a window stays open, so the longest a group is deferred: a
/// group first in line whose reconcile never ends (stuck on a write) holds
/// nobody back longer than this.
pub const WINDOW: Duration = Duration::from_secs(1);

/// A balance's book: its namespace and its pools joined by `+`.
pub type BookKey = (String, String);

/// The open windows, by the balance whose deal opened them.
#[derive(Debug, Clone)]
pub struct Precedence<T> {
    windows: HashMap<BookKey, Window<T>>,
}

impl<T> Default for Precedence<T> {
    fn default() -> Self {
        Self {
            windows: HashMap::new(),
        }
    }
}

/// One balance's groups first in line and the groups waiting for them.
#[derive(Debug, Clone)]
struct Window<T> {
    /// Each group first in line (`namespace/name`), with the sequence
    /// number of the deal that put it there: only a reconcile that took its
    /// share after that deal is the one it waits for.
    first: HashMap<String, u64>,
    /// The groups deferred, woken when the window closes.
    deferred: BTreeSet<GroupKey>,
    /// Each group first in line whose reconcile (which took its share at
    /// the sequence number kept, at or after the deal that marked it) is
    /// under way and has not yet written its document (or found it has
    /// none to write).
    writing: HashMap<String, u64>,
    until: T,
}

impl<T: Moment> Precedence<T> {
    /// Deal `seq` of `book` concerns `groups`: they go first (a window
    /// opens at `now`, or the open one takes them in, closing when it
    /// would have).
    pub fn first_in_line(&mut self, book: &BookKey, groups: &[String], seq: u64, now: T) {
        if groups.is_empty() {
            return;
        }
        let window = self.windows.entry(book.clone()).or_insert_with(|| Window {
            first: HashMap::new(),
            deferred: BTreeSet::new(),
            writing: HashMap::new(),
            until: now.after(WINDOW),
        });
        for group in groups {
            window.first.insert(group.clone(), seq);
        }
    }

    /// Whether `group` (of pool `pool`) defers the reconcile it starts at
    /// `now`, and for how long at most: when a window of its balance is
    /// open and it is not first in line there.
    pub fn defer(&mut self, group: &GroupKey, pool: &str, now: T) -> Option<Duration> {
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
        Some(window.until.since(now))
    }

    /// `group` took its share at `seq` for a reconcile now under way: when
    /// it is first in line since a deal at or before `seq`, the others'
    /// bookkeeping waits for its document.
    pub fn started(&mut self, book: &BookKey, group: &str, seq: u64) {
        if let Some(window) = self.windows.get_mut(book)
            && window.first.get(group).is_some_and(|&marked| seq >= marked)
        {
            window.writing.insert(group.to_owned(), seq);
        }
    }

    /// The reconcile of `group` that took its share at `seq` wrote its
    /// document, or has none to write.
    pub fn document_out(&mut self, book: &BookKey, group: &str, seq: u64) {
        if let Some(window) = self.windows.get_mut(book)
            && window.writing.get(group) == Some(&seq)
        {
            window.writing.remove(group);
        }
    }

    /// Until when `group`'s status and Events wait at `now`: the window's
    /// end, while another group first in line in `book` is writing its
    /// document; `None` when they may go.
    pub fn documents_pending(&self, book: &BookKey, group: &str, now: T) -> Option<T> {
        let window = self.windows.get(book)?;
        (window.until > now && window.writing.keys().any(|other| other != group))
            .then_some(window.until)
    }

    /// `group`'s reconcile, which took its share at deal `seq`, is over:
    /// the groups to wake (the deferred ones, when it was the last first in
    /// line).
    pub fn done(&mut self, book: &BookKey, group: &str, seq: u64) -> Vec<GroupKey> {
        let Some(window) = self.windows.get_mut(book) else {
            return Vec::new();
        };
        if window.writing.get(group) == Some(&seq) {
            window.writing.remove(group);
        }
        if window.first.get(group).is_some_and(|&marked| seq > marked) {
            window.first.remove(group);
        }
        self.close_if_done(book)
    }

    /// `group` is deleted: it is first in line nowhere any more.
    pub fn forget(&mut self, group: &GroupKey) -> Vec<GroupKey> {
        let own = group.to_string();
        let books: Vec<BookKey> = self.windows.keys().cloned().collect();
        let mut wake = Vec::new();
        for book in books {
            if let Some(window) = self.windows.get_mut(&book) {
                window.first.remove(&own);
                window.writing.remove(&own);
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
    use std::time::Instant;

    use super::*;

    fn book() -> BookKey {
        ("ns".into(), "a+b".into())
    }

    fn key(name: &str) -> GroupKey {
        GroupKey::new("ns", name)
    }

    #[test]
    fn the_others_of_the_balance_defer_until_the_first_in_line_are_done() {
        let mut precedence = Precedence::<Instant>::default();
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
        let mut precedence = Precedence::<Instant>::default();
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
    fn bookkeeping_waits_for_the_documents_of_the_groups_under_way() {
        let mut precedence = Precedence::<Instant>::default();
        let t0 = Instant::now();
        precedence.first_in_line(
            &book(),
            &["ns/g-1".into(), "ns/g-2".into(), "ns/g-3".into()],
            5,
            t0,
        );
        // Nobody under way: nothing to wait for (g-3 may never start
        // while the others hold the controller's slots).
        assert_eq!(precedence.documents_pending(&book(), "ns/g-1", t0), None);
        // g-1 and g-2 start; a reconcile that took its share before the
        // deal is not one the others wait for.
        precedence.started(&book(), "ns/g-1", 5);
        precedence.started(&book(), "ns/g-2", 6);
        precedence.started(&book(), "ns/g-3", 4);
        let until = t0 + WINDOW;
        assert_eq!(
            precedence.documents_pending(&book(), "ns/g-1", t0),
            Some(until)
        );
        // g-2's document is out: g-1 waits for nobody but itself.
        precedence.document_out(&book(), "ns/g-2", 6);
        assert_eq!(precedence.documents_pending(&book(), "ns/g-1", t0), None);
        assert_eq!(
            precedence.documents_pending(&book(), "ns/g-2", t0),
            Some(until)
        );
        // A reconcile that ends without writing (a failed write) counts as
        // out; an older reconcile of the same group does not.
        precedence.document_out(&book(), "ns/g-1", 4);
        assert!(
            precedence
                .documents_pending(&book(), "ns/g-2", t0)
                .is_some()
        );
        precedence.done(&book(), "ns/g-1", 5);
        assert_eq!(precedence.documents_pending(&book(), "ns/g-2", t0), None);
        // Never past the window's end.
        precedence.started(&book(), "ns/g-2", 7);
        assert_eq!(precedence.documents_pending(&book(), "ns/g-1", until), None);
    }

    #[test]
    fn a_deleted_group_first_in_line_holds_nobody_back() {
        let mut precedence = Precedence::<Instant>::default();
        let t0 = Instant::now();
        precedence.first_in_line(&book(), &["ns/g-1".into()], 1, t0);
        assert!(precedence.defer(&key("g-2"), "a", t0).is_some());
        assert_eq!(precedence.forget(&key("g-1")), vec![key("g-2")]);
        assert_eq!(precedence.defer(&key("g-3"), "a", t0), None);
    }
}
