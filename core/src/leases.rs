//! What a lease table in the KCL's format said at one scan, per shard
//! ([`LeaseSnapshot`]: owner, counter and when it last changed, checkpoint,
//! completion), as the handoff step reads it: evidence that a pod has let a
//! shard go. The operator's lease reader scans the table and builds these;
//! here they are plain data, and whether a lease has expired is a function
//! of an injected `now`.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use shardring_crds::lease_record::CheckpointKind;

/// What the lease table says about one shard.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseSnapshot {
    /// The shard id.
    pub shard_id: String,
    /// Current owner, `None` when the lease is released.
    pub owner: Option<String>,
    /// Lease counter (0 when absent).
    pub counter: u64,
    /// When this reader first saw the current counter (or owner). On the
    /// first scan it is the scan time: earlier history is unknown.
    pub counter_changed_at: Timestamp,
    /// The checkpoint's kind.
    pub checkpoint: Option<CheckpointKind>,
    /// The checkpoint's sequence number, when it is one.
    pub sequence_number: Option<String>,
    /// Read to its end (`SHARD_END`).
    pub complete: bool,
    /// Parent shard ids recorded in the lease.
    pub parents: Vec<String>,
    /// Child shard ids recorded in the lease.
    pub children: Vec<String>,
    /// The worker a graceful handoff is giving the shard to.
    pub checkpoint_owner: Option<String>,
    /// The shard's measured throughput in KB/s, as a KCL 3.x worker writes
    /// it with every renewal (`throughputKBps`).
    pub throughput_kbps: Option<f64>,
}

impl LeaseSnapshot {
    /// Whether the owner has not renewed for `failover` as of `now`: KCL
    /// workers may then take the lease, so the owner must have let go.
    pub fn is_expired(&self, now: Timestamp, failover: Duration) -> bool {
        let idle = now.duration_since(self.counter_changed_at);
        idle >= jiff::SignedDuration::try_from(failover).unwrap_or(jiff::SignedDuration::MAX)
    }
}

/// All leases of one scan, keyed by shard id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeaseTable {
    /// Shard id -> snapshot.
    pub leases: BTreeMap<String, LeaseSnapshot>,
    /// When the scan finished.
    pub scanned_at: Option<Timestamp>,
    /// Items scanned (including ones for other streams or unparsable).
    pub items: usize,
}

impl LeaseTable {
    /// The lease of `shard_id`.
    pub fn get(&self, shard_id: &str) -> Option<&LeaseSnapshot> {
        self.leases.get(shard_id)
    }
}
