//! One shard's reader task: read from the lease's checkpoint, hand each batch
//! to the handler, checkpoint after it, and stop when told (revoke, drain) —
//! finishing the batch in hand, so the checkpoint covers everything the
//! handler processed — or at shard end (checkpoint `SHARD_END`). Before each
//! batch is handed over the lease must still be valid; a lost lease stops
//! the task at once without another write.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::running::LastCheckpoint;
use super::{RecordHandler, ShardContext};
use crate::lease::{Checkpoint, LeaseError, LeaseManager};
use crate::reader::{ReaderOptions, ShardReader};

/// How a shard task ended.
#[derive(Debug)]
pub enum ShardExit {
    /// Stopped on request; everything handled is checkpointed.
    Stopped,
    /// Read to its end; `SHARD_END` checkpointed.
    Ended {
        /// The child shards.
        children: Vec<String>,
    },
    /// The lease was lost or lapsed: stopped without writing.
    LeaseLost,
    /// Reading, handling or checkpointing failed.
    Failed(String),
}

pub(super) struct ShardTask<H> {
    pub(super) context: ShardContext,
    pub(super) client: aws_sdk_kinesis::Client,
    pub(super) stream: String,
    pub(super) leases: Arc<LeaseManager>,
    pub(super) handler: Arc<H>,
    pub(super) start: Option<Checkpoint>,
    pub(super) options: ReaderOptions,
    /// A reader already open at `start`, if any (else the task opens one).
    pub(super) reader: Option<ShardReader>,
    pub(super) stop: CancellationToken,
    /// Set after every checkpoint written (for the release acknowledgement).
    pub(super) last_checkpoint: LastCheckpoint<Checkpoint>,
}

impl<H: RecordHandler> ShardTask<H> {
    pub(super) async fn run(mut self) -> ShardExit {
        let shard = self.context.shard.clone();
        let mut reader = match self.reader.take() {
            Some(reader) => reader,
            None => {
                let opened = ShardReader::open(
                    self.client.clone(),
                    &self.stream,
                    &shard,
                    self.start.as_ref(),
                    self.options.clone(),
                );
                tokio::select! {
                    _ = self.stop.cancelled() => return ShardExit::Stopped,
                    opened = opened => match opened {
                        Ok(reader) => reader,
                        Err(error) => return ShardExit::Failed(error.to_string()),
                    },
                }
            }
        };
        if reader.is_ended() {
            return self.end(Vec::new()).await;
        }
        loop {
            let batch = tokio::select! {
                // A batch fetched but not handled is simply read again by
                // the next owner from our checkpoint.
                _ = self.stop.cancelled() => return ShardExit::Stopped,
                batch = reader.next_batch() => match batch {
                    Ok(batch) => batch,
                    Err(error) => return ShardExit::Failed(error.to_string()),
                },
            };
            if !self.leases.is_valid(&shard) {
                return ShardExit::LeaseLost;
            }
            if let Some(last) = batch.records.last() {
                if let Err(error) = self.handler.handle(&self.context, &batch.records).await {
                    return ShardExit::Failed(format!("handler: {error:#}"));
                }
                let checkpoint = Checkpoint::Sequence(last.sequence_number.clone());
                match self.leases.checkpoint(&shard, &checkpoint).await {
                    Ok(()) => self.wrote(checkpoint),
                    Err(LeaseError::Conflict { .. } | LeaseError::NotHeld(_)) => {
                        return ShardExit::LeaseLost;
                    }
                    // Transient: the next batch's checkpoint covers this one.
                    Err(error) => tracing::warn!(%error, "checkpoint failed; will retry"),
                }
            }
            if let Some(children) = batch.shard_end {
                return self.end(children).await;
            }
            if batch.records.is_empty() {
                tokio::select! {
                    _ = self.stop.cancelled() => return ShardExit::Stopped,
                    _ = reader.idle() => {}
                }
            }
        }
    }

    fn wrote(&self, checkpoint: Checkpoint) {
        *self
            .last_checkpoint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(checkpoint);
    }

    async fn end(&self, children: Vec<String>) -> ShardExit {
        match self
            .leases
            .checkpoint_shard_end(&self.context.shard, &children)
            .await
        {
            Ok(()) => {
                self.wrote(Checkpoint::ShardEnd);
                ShardExit::Ended { children }
            }
            Err(LeaseError::Conflict { .. } | LeaseError::NotHeld(_)) => ShardExit::LeaseLost,
            Err(error) => ShardExit::Failed(format!("SHARD_END checkpoint: {error}")),
        }
    }
}
