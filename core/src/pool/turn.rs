//! The turn of a pool's throughput groups to move shards for load.
//!
//! A throughput group moves its shards for each pod's whole load over the
//! pool, counting what its peers' documents hold. Two groups deciding at
//! the same moment would each count the other's shards where they were
//! before the other's decision, and both would correct the same excess:
//! the pool would overshoot and swing back. So at most one throughput
//! group of a pool decides optional moves at a time: it takes the turn
//! when its reconcile observes and gives it back when that reconcile ends
//! (its document written, so the next peer counts its decision). A peer
//! that found the turn taken plans only required moves and is woken when
//! it is given back. A turn not given back within [`TURN_TIMEOUT`] (a
//! reconcile that never ended) is free again.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;

/// How long a turn may be held before another group may take it.
pub const TURN_TIMEOUT: Duration = Duration::from_secs(60);

/// Who holds the turn, since when, and who waits for it.
#[derive(Debug, Clone, Default)]
pub(super) struct Turn {
    holder: Option<(String, Timestamp)>,
    waiting: BTreeSet<String>,
}

impl Turn {
    /// Takes the turn for `group` at `now`: `None` when it has it, else
    /// the group that holds it (`group` then waits for it).
    pub(super) fn take(&mut self, group: &str, now: Timestamp) -> Option<String> {
        let free = match &self.holder {
            None => true,
            Some((holder, since)) => {
                holder == group || crate::pacing::add(*since, TURN_TIMEOUT) <= now
            }
        };
        if free {
            self.holder = Some((group.to_owned(), now));
            self.waiting.remove(group);
            None
        } else {
            self.waiting.insert(group.to_owned());
            self.holder.as_ref().map(|(holder, _)| holder.clone())
        }
    }

    /// Gives the turn back if `group` holds it: the groups that waited
    /// for it (to wake), else nothing.
    pub(super) fn give_back(&mut self, group: &str) -> Vec<String> {
        if self.holder.as_ref().is_some_and(|(h, _)| h == group) {
            self.holder = None;
            std::mem::take(&mut self.waiting).into_iter().collect()
        } else {
            Vec::new()
        }
    }

    /// Forgets `group` (it left the pool's throughput groups).
    pub(super) fn forget(&mut self, group: &str) -> Vec<String> {
        self.waiting.remove(group);
        self.give_back(group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("a time")
    }

    #[test]
    fn one_group_at_a_time_and_the_waiting_are_woken() {
        let mut turn = Turn::default();
        assert_eq!(turn.take("a", at(0)), None);
        assert_eq!(turn.take("a", at(1)), None);
        assert_eq!(turn.take("b", at(1)), Some("a".into()));
        assert_eq!(turn.take("c", at(2)), Some("a".into()));
        assert!(turn.give_back("b").is_empty());
        assert_eq!(turn.give_back("a"), ["b", "c"]);
        assert_eq!(turn.take("c", at(3)), None);
        // A turn held past the timeout is free again.
        assert_eq!(turn.take("b", at(62)), Some("c".into()));
        assert_eq!(turn.take("b", at(63)), None);
        // A group that leaves gives its turn back.
        assert!(turn.forget("b").is_empty());
        assert_eq!(turn.take("c", at(64)), None);
    }
}
