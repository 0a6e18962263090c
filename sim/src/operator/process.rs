//! The operator process's state ([`Operator`]): the API objects of its
//! pool and groups, its faults, and its memory (departed pods, a relisting
//! pod watch, the pool's balance and which groups go first), which a crash
//! loses. What the process does with it (crashes, wake-ups, the reconcile and its halves, the
//! pool's balance) builds on this file, which imports only `group`,
//! `faults` and `watch`.

use super::faults::{FaultCounts, Faults};
use super::group::Group;
use super::watch::Watch;
use crate::crds::ConsumerPool;
use crate::world::Ms;
use jiff::Timestamp;
use shardring_core::departures::DepartureMemory;
use shardring_core::pool::PoolBook;
use shardring_core::pool::precedence::Precedence;

/// The API server's objects plus the operator process.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The pool every group references.
    pub pool: ConsumerPool,
    /// The ShardGroups (by index): their objects and the operator's memory
    /// of each.
    pub groups: Vec<Group>,
    /// Not running until then (crashed, a new leader takes over).
    pub down_until: Ms,
    /// Fault probabilities.
    pub faults: Faults,
    /// Fault counts.
    pub fired: FaultCounts,
    /// The memory of departed pods (lost in a crash): one pod watch serves
    /// every group.
    pub departed: DepartureMemory,
    /// The pod watch is relisting until then: departures are not seen.
    pub(super) watch_gap_until: Option<Ms>,
    /// The pool's balance (pool mode; lost in a crash).
    pub(super) book: PoolBook,
    /// Which groups of the pool reconcile first after a new deal, the
    /// operator's own bookkeeping (pool mode; lost in a crash).
    pub(super) precedence: Precedence<Timestamp>,
    /// How many shares of the balance were taken: the sequence number of
    /// each (lost in a crash, as the operator's counter).
    pub(super) shares_taken: u64,
    /// The sequence number of the share the reconcile under way took.
    pub(super) ticket: Option<u64>,
    /// Its watches of pods and documents, and the echo bookkeeping that
    /// judges their events (lost in a crash).
    pub watch: Watch,
}
