//! What the user gives the static-partition worker: the [`PartitionHandler`]
//! that reads and processes a partition batch by batch, and the
//! [`PartitionContext`] of each batch.

use std::future::Future;

/// Which partition, pod and epoch a batch belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionContext {
    /// The partition (shard id in the assignment).
    pub partition: String,
    /// This worker's id (the pod name).
    pub worker_id: String,
    /// The view's epoch when the reader started: identifies this hold.
    pub epoch: u64,
}

/// The user's reading and processing of a partition.
pub trait PartitionHandler: Send + Sync + 'static {
    /// Reads the next batch of `context.partition` after `checkpoint`
    /// (`None`: from the handler's own start, e.g. the queue's head),
    /// processes it in order and returns the checkpoint that covers it;
    /// `Ok(None)` when there was nothing to read (asked again after
    /// [`PartitionConfig::idle`](super::PartitionConfig::idle)). It should return within a short time:
    /// a reader stops only between batches. An `Err` stops the reader; it
    /// is started again from the last checkpoint (at least once).
    fn process(
        &self,
        context: &PartitionContext,
        checkpoint: Option<&str>,
    ) -> impl Future<Output = anyhow::Result<Option<String>>> + Send;

    /// A reader starts at `checkpoint` (e.g. to open a queue consumer).
    fn opened(&self, _context: &PartitionContext, _checkpoint: Option<&str>) {}

    /// A reader stopped for good, after its last batch: give the partition
    /// back where that takes a round trip (a queue consumer cancelled, and
    /// the broker's word that it has every acknowledgement) before
    /// [`Self::closed`] and the release acknowledgement. Bounded by
    /// [`PartitionConfig::stop_timeout`](super::PartitionConfig::stop_timeout) with the batch in hand.
    fn release(&self, _context: &PartitionContext) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// A reader stopped for good, after its last batch, with its last
    /// checkpoint; its release is acknowledged after this.
    fn closed(&self, _context: &PartitionContext, _checkpoint: Option<&str>) {}
}
