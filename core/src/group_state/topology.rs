//! The last good topology of one group: the topology its source last read
//! successfully, when that content was first read, and when a read last
//! confirmed it, fed by one event per source read ([`TopologyMemory::apply`])
//! and forgotten by [`TopologyMemory::reset`] (a new source, a restarted
//! operator).
//!
//! Why it is kept: a failed read must never look like "no shards". The plan
//! step plans on the last good topology and says how old it is; the
//! document records when the topology it reflects was first read, so a
//! read of the same content (a restart, time passing) writes nothing.

use std::sync::Arc;

use jiff::Timestamp;

use crate::observation::TopologyObservation;
use crate::topology::{SourceError, Topology};

/// One read of a group's source, as an event of its [`TopologyMemory`].
#[derive(Debug, Clone, PartialEq)]
pub enum TopologyRead {
    /// The source answered with this topology.
    Read(Topology),
    /// The source answered that what it read before stands (a fixed source
    /// already read): the last good topology is confirmed.
    Unchanged,
    /// The read failed: the last good topology stays, with this error.
    Failed(SourceError),
    /// The read failed, and the source answered with the topology it read
    /// before, its shards' lifecycle derived again (a lease table scanned
    /// since may have completed a parent): that content is kept, the error
    /// reported, and nothing is confirmed.
    Stale(Topology, SourceError),
}

/// The last topology read successfully, kept across failed reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopologyMemory {
    /// Shared with every observation made from it (tens of thousands of
    /// shards are not copied per reconcile).
    last_good: Option<Arc<Topology>>,
    /// When `last_good` was first read with its current content.
    read_at: Option<Timestamp>,
    /// When a read last succeeded.
    confirmed_at: Option<Timestamp>,
}

impl TopologyMemory {
    /// Takes one read made at `now`; the read's error, when it failed.
    pub fn apply(&mut self, read: TopologyRead, now: Timestamp) -> Option<SourceError> {
        match read {
            TopologyRead::Read(topology) => {
                self.keep(topology, now);
                self.confirmed_at = Some(now);
                None
            }
            TopologyRead::Unchanged => {
                self.confirmed_at = Some(now);
                None
            }
            TopologyRead::Failed(error) => Some(error),
            TopologyRead::Stale(topology, error) => {
                self.keep(topology, now);
                Some(error)
            }
        }
    }

    /// Keeps `topology` as the last good one, read at `now` when its
    /// content is new.
    fn keep(&mut self, topology: Topology, now: Timestamp) {
        if self.last_good.as_deref() != Some(&topology) {
            self.read_at = Some(now);
            self.last_good = Some(Arc::new(topology));
        }
    }

    /// Forgets everything read.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Whether a read has succeeded since the last reset.
    pub fn is_known(&self) -> bool {
        self.last_good.is_some()
    }

    /// The last good topology, when a read has succeeded.
    pub fn last_good(&self) -> Option<&Arc<Topology>> {
        self.last_good.as_ref()
    }

    /// What the plan step sees of the topology of `source` (its short
    /// description) after a read that ended with `error` (`None`: it
    /// succeeded); what only the source knows (ordering, lineage, its next
    /// refresh) is the caller's to add.
    pub fn observation(&self, source: String, error: Option<SourceError>) -> TopologyObservation {
        TopologyObservation {
            source,
            last_good: self.last_good.clone(),
            read_at: self.read_at,
            error,
            confirmed_at: self.confirmed_at,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    fn topology(ids: &[&str]) -> Topology {
        Topology::of_partitions(ids.iter().map(|id| (*id).to_owned()))
    }

    #[test]
    fn a_failed_read_keeps_the_last_good_topology_and_its_times() {
        let mut memory = TopologyMemory::default();
        assert_eq!(
            memory.apply(TopologyRead::Read(topology(&["a"])), t(0)),
            None
        );
        let error = SourceError::Throttled("slow down".into());
        let failed = memory.apply(TopologyRead::Failed(error.clone()), t(60));
        let seen = memory.observation("src".into(), failed);
        assert_eq!(seen.error, Some(error));
        assert_eq!(seen.last_good.as_deref(), Some(&topology(&["a"])));
        assert_eq!((seen.read_at, seen.confirmed_at), (Some(t(0)), Some(t(0))));
        assert_eq!(seen.source, "src");
    }

    #[test]
    fn the_same_content_read_again_confirms_it_and_new_content_replaces_it() {
        let mut memory = TopologyMemory::default();
        memory.apply(TopologyRead::Read(topology(&["a"])), t(0));
        let first = memory.last_good().cloned().expect("read");
        memory.apply(TopologyRead::Read(topology(&["a"])), t(10));
        let again = memory.observation(String::new(), None);
        assert!(Arc::ptr_eq(&first, again.last_good.as_ref().expect("kept")));
        assert_eq!(
            (again.read_at, again.confirmed_at),
            (Some(t(0)), Some(t(10)))
        );
        memory.apply(TopologyRead::Unchanged, t(20));
        assert_eq!(
            memory.observation(String::new(), None).confirmed_at,
            Some(t(20))
        );
        memory.apply(TopologyRead::Read(topology(&["a", "b"])), t(30));
        let changed = memory.observation(String::new(), None);
        assert_eq!(
            (changed.read_at, changed.confirmed_at),
            (Some(t(30)), Some(t(30)))
        );
    }

    #[test]
    fn a_stale_answer_keeps_its_content_and_confirms_nothing() {
        let mut memory = TopologyMemory::default();
        memory.apply(TopologyRead::Read(topology(&["a"])), t(0));
        let error = SourceError::Throttled("slow down".into());
        let stale = TopologyRead::Stale(topology(&["a", "b"]), error.clone());
        assert_eq!(memory.apply(stale, t(5)), Some(error));
        let seen = memory.observation(String::new(), None);
        assert_eq!(seen.last_good.as_deref(), Some(&topology(&["a", "b"])));
        assert_eq!((seen.read_at, seen.confirmed_at), (Some(t(5)), Some(t(0))));
    }

    #[test]
    fn a_reset_forgets_everything_read() {
        let mut memory = TopologyMemory::default();
        memory.apply(TopologyRead::Read(topology(&["a"])), t(0));
        assert!(memory.is_known());
        memory.reset();
        assert!(!memory.is_known());
        assert_eq!(memory, TopologyMemory::default());
    }
}
