//! The KCL lease table: a consistent, paged DynamoDB Scan of a table in the
//! Kinesis Client Library's lease format, turned into per-shard snapshots
//! (owner, counter and when it last changed, checkpoint, completion). The
//! handoff logic uses them as evidence that a pod has let a shard go; the
//! Kinesis lifecycle uses them to tell when a parent shard is complete.
//! A row is parsed by the API crate's [`record`] module, the one
//! definition of the KCL lease record that consumers write with too
//! ([`shardring_crds::lease_record`]); the snapshots are the controller
//! core's ([`shardring_core::leases`]).

mod error;
pub mod reader;
pub(crate) mod snapshot;

pub use error::LeaseTableError;
pub use reader::{LeaseTableMetrics, LeaseTableReader, dynamodb_client};
pub use shardring_crds::lease_record::item as record;
pub use shardring_crds::lease_record::item::{LeaseRecord, StreamQualifier};
pub use shardring_crds::lease_record::{Checkpoint, CheckpointKind};
pub use snapshot::{LeaseSnapshot, LeaseTable};
