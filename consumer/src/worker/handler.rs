//! What the user gives the lease-table worker: the [`RecordHandler`] that
//! processes each batch of records, and the [`ShardContext`] of each batch.

use std::future::Future;

use crate::reader::Record;

/// Which shard and which hold a batch belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardContext {
    /// The shard id.
    pub shard: String,
    /// This worker's id (the pod name).
    pub worker_id: String,
    /// `leaseCounter` when the lease was taken: identifies this hold.
    pub session: u64,
}

/// The user's record processing.
pub trait RecordHandler: Send + Sync + 'static {
    /// Processes one batch, in order. The batch is checkpointed after this
    /// returns `Ok`; an `Err` stops the shard (it is released and retaken,
    /// so the batch is processed again: at least once).
    fn handle(
        &self,
        context: &ShardContext,
        records: &[Record],
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}
