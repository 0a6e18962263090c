//! What a run counts of itself: the pod and stream events it injected
//! ([`EventCounts`]) and what pool mode's checks judged and let pass
//! ([`PoolNotes`]). The system ([`crate::sim`]) keeps them as it runs; a
//! seed's outcome and the summary of many ([`crate::run`]) add them up.

/// Pod and stream events injected in a run.
#[derive(Debug, Clone, Default)]
pub struct EventCounts {
    /// Pods added.
    pub joins: u64,
    /// Graceful deletions.
    pub graceful_deletes: u64,
    /// Processes killed with SIGKILL.
    pub kills: u64,
    /// Force deletions (grace 0).
    pub force_deletes: u64,
    /// Node partitions.
    pub partitions: u64,
    /// Shard splits.
    pub splits: u64,
    /// Shard merges.
    pub merges: u64,
    /// Pods created unscheduled (bound to a node later, or never).
    pub unscheduled: u64,
    /// StatefulSet pods recreated under the name of one that was removed.
    pub recreated: u64,
    /// Shards held for a returning pod that came back for them.
    pub holds_returned: u64,
    /// Shards held for a returning pod that moved when the hold ended.
    pub holds_expired: u64,
}

/// What pool mode's checks judged, and what they let pass, of one seed or
/// summed over seeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolNotes {
    /// Seeds whose standby slots were held to one slot of each other over
    /// the pool once quiet.
    pub standby_spread_judged: u64,
    /// Groups that a plan once quiet would give other standbys (and change
    /// nothing else), where they are planned alone or a limit binds.
    pub standby_replans: u64,
    /// Groups that a new leader's plan once quiet would give other
    /// standbys (and change nothing else), where they are planned alone or
    /// a limit binds.
    pub new_leader_standby_rewrites: u64,
    /// Status writes of groups balanced by throughput in the quiet period
    /// after convergence (they report measurements: load figures, a pod
    /// noise carries across the band's edge for a moment).
    pub measured_statuses_at_rest: u64,
    /// Document writes of groups balanced by throughput in the quiet
    /// period after convergence (a pod outside the band beyond its noise
    /// for the confirmation).
    pub measured_documents_at_rest: u64,
    /// Band checks of groups balanced by throughput (in pool mode or
    /// alone; each group is checked once quiet and again after the rest
    /// period) let pass with pods outside the band because no placement
    /// of their loads meets it ([`crate::band_reachable`]).
    pub band_unreachable: u64,
    /// Reconciles deferred behind the groups a new deal concerns (the
    /// operator's precedence window).
    pub deferred: u64,
}

impl PoolNotes {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &PoolNotes) {
        self.standby_spread_judged += other.standby_spread_judged;
        self.standby_replans += other.standby_replans;
        self.new_leader_standby_rewrites += other.new_leader_standby_rewrites;
        self.measured_statuses_at_rest += other.measured_statuses_at_rest;
        self.measured_documents_at_rest += other.measured_documents_at_rest;
        self.band_unreachable += other.band_unreachable;
        self.deferred += other.deferred;
    }
}
