//! The KCL lease table: a consistent, paged DynamoDB Scan of a table in the
//! Kinesis Client Library's lease format, turned into per-shard snapshots
//! (owner, counter and when it last changed, checkpoint, completion). The
//! handoff logic uses them as evidence that a pod has let a shard go; the
//! Kinesis lifecycle uses them to tell when a parent shard is complete.
//! A row is parsed by the API crate's [`record`] module, the one
//! definition of the KCL lease record that consumers write with too
//! ([`shardring_crds::lease_record`]); the snapshots are the controller
//! core's ([`shardring_core::leases`]).

pub mod reader;
pub(crate) mod snapshot;

pub use reader::{LeaseTableMetrics, LeaseTableReader, dynamodb_client};
pub use shardring_crds::lease_record::item as record;
pub use shardring_crds::lease_record::item::{LeaseRecord, StreamQualifier};
pub use shardring_crds::lease_record::{Checkpoint, CheckpointKind};
pub use snapshot::{LeaseSnapshot, LeaseTable};

/// Why a lease table read failed. Each variant has a constant reason used in
/// status conditions, Events and metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseTableError {
    /// The table does not exist.
    #[error("lease table not found: {0}")]
    TableNotFound(String),
    /// The operator's credentials may not scan the table.
    #[error("access denied to the lease table: {0}")]
    AccessDenied(String),
    /// DynamoDB throttled the scan after every retry.
    #[error("lease table scan throttled: {0}")]
    Throttled(String),
    /// Any other failure (network, 5xx, unexpected response).
    #[error("lease table error: {0}")]
    Other(String),
}

impl LeaseTableError {
    /// Constant condition/Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            LeaseTableError::TableNotFound(_) => "TableNotFound",
            LeaseTableError::AccessDenied(_) => "AccessDenied",
            LeaseTableError::Throttled(_) => "Throttled",
            LeaseTableError::Other(_) => "LeaseTableError",
        }
    }

    /// Label for the errors-by-reason metric.
    pub fn metric_label(&self) -> &'static str {
        self.reason()
    }
}
