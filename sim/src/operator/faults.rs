//! The operator-side faults: their probabilities ([`Faults`]) and how often
//! each fired ([`FaultCounts`]).

/// Probabilities of the operator-side faults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// A write fails (the rest of that apply is skipped).
    pub write_fail: f64,
    /// A write times out for the client but lands later: a document write at
    /// any later time if its precondition still holds, an annotation or
    /// status write before the next reconcile.
    pub write_late: f64,
    /// The topology read fails.
    pub topology_fail: f64,
    /// The topology read returns an older snapshot.
    pub topology_stale: f64,
    /// The lease scan fails.
    pub lease_fail: f64,
    /// Another writer changes a pod while an annotation write to it is on
    /// its way (drawn from the watch's stream).
    pub foreign_write: f64,
}

/// How often each fault fired.
#[derive(Debug, Clone, Default)]
pub struct FaultCounts {
    /// Failed writes.
    pub writes_failed: u64,
    /// Late writes.
    pub writes_late: u64,
    /// Document writes refused by their precondition (409: the ConfigMap
    /// changed since the reconcile read it), late or not.
    pub writes_refused: u64,
    /// Failed topology reads.
    pub topology_failed: u64,
    /// Stale topology reads.
    pub topology_stale: u64,
    /// Failed lease scans.
    pub lease_failed: u64,
    /// Operator crashes.
    pub crashes: u64,
    /// Pod watch gaps (relists): departures in them are not seen.
    pub watch_gaps: u64,
    /// Pods changed by another writer while an annotation write to them
    /// was on its way.
    pub foreign_writes: u64,
}
