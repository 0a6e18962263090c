//! [`TopologySource`]: what every kind of source says about itself to the
//! controller, and the boxed future of its read ([`ReadFuture`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use shardring_core::leases::LeaseTable;
use shardring_core::topology::{SourceError, Topology};

/// A boxed future returned by [`TopologySource::read`], so sources can be stored
/// as trait objects.
pub(crate) type ReadFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Topology, SourceError>> + Send + 'a>>;

/// A source of shards for one ShardGroup.
pub trait TopologySource: Send + Sync {
    /// Short description for status and `kubectl get`, e.g. `kinesis:orders`.
    fn describe(&self) -> String;
    /// Reads the current topology.
    fn read(&self) -> ReadFuture<'_>;
    /// Whether the topology depends on the spec alone (a `static` source):
    /// then one good read stands until the spec changes, and the controller
    /// does not read it again at every reconcile (at 20,000 partitions a
    /// read builds and compares 20,000 names).
    fn is_fixed(&self) -> bool {
        false
    }
    /// The lease-table snapshot of the last successful scan, for handoff
    /// evidence; `None` when the source reads no lease table or has not
    /// scanned it successfully yet.
    fn leases(&self) -> Option<LeaseTable> {
        None
    }
    /// Whether children are held back until their parents are complete:
    /// `None` for sources without lineage (static), `Some(false)` when the
    /// source cannot observe completion (Kinesis without a lease table), so
    /// the ShardGroup shows `OrderingNotEnforced`.
    fn ordering_enforced(&self) -> Option<bool> {
        None
    }
    /// Parent ids of each child shard as of the last successful read, kept
    /// even when the engine shards carry no parents (ordering not enforced),
    /// so the published document still shows the lineage.
    fn lineage(&self) -> BTreeMap<String, Vec<String>> {
        BTreeMap::new()
    }
    /// When to read again (a jittered refresh interval); `None` lets the
    /// plan step use the interval the spec names.
    fn next_refresh(&self) -> Option<Duration> {
        None
    }
}
