//! Shard sources: where a ShardGroup's shards come from. A source reads the
//! current topology (shard ids, hash key ranges, parents, open/closed) and
//! reports failures with constant reasons; it never turns a failed read into
//! "no shards". The controller keeps the last good topology when a read fails.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use shardring_core::leases::LeaseTable;

pub use shardring_core::topology::{SourceError, Topology};

use crate::crds::ShardGroupSpec;

pub mod kinesis;
pub mod static_source;

pub use static_source::StaticSource;

/// Builds the source a ShardGroup spec names. A `kinesis` spec gets the
/// shared source of its stream and lease table from `kinesis` (the operator
/// instance's provider, which loads the AWS configuration on first use).
pub(crate) async fn for_spec(
    spec: &ShardGroupSpec,
    kinesis: &kinesis::KinesisProvider,
) -> Result<Box<dyn ShardSource>, SourceError> {
    match (&spec.source.kinesis, &spec.source.static_source) {
        (None, Some(fixed)) => Ok(Box::new(StaticSource::new(fixed.clone()))),
        (Some(_), _) => Ok(Box::new(kinesis.source_for(spec).await?)),
        (None, None) => Err(SourceError::Invalid(
            "set exactly one of source.kinesis or source.static".into(),
        )),
    }
}

/// A boxed future returned by [`ShardSource::read`], so sources can be stored
/// as trait objects.
pub(crate) type ReadFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Topology, SourceError>> + Send + 'a>>;

/// A source of shards for one ShardGroup.
pub trait ShardSource: Send + Sync {
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
    /// controller use its fixed schedule.
    fn next_refresh(&self) -> Option<Duration> {
        None
    }
}
