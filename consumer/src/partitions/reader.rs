//! One partition's reader task: hand the handler batch after batch from
//! the checkpoint it started at, keep the checkpoint each batch returns,
//! and stop when told (revoke, drain) — finishing the batch in hand, so
//! the last checkpoint covers everything the handler processed. Before
//! each batch it looks at the view again: a partition the newest view does
//! not list active for this pod is never read, even in the moment between
//! a view change and the worker's next look.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{PartitionContext, PartitionHandler};
use crate::view::AssignmentView;
use crate::worker::running::LastCheckpoint;

/// How a partition reader ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionExit {
    /// Stopped on request or because the view no longer lists the
    /// partition active; everything handled is in the last checkpoint.
    Stopped,
    /// The handler failed; the worker starts the partition again from the
    /// last checkpoint while it stays active.
    Failed(String),
}

pub(super) struct PartitionTask<H> {
    pub(super) context: PartitionContext,
    pub(super) handler: Arc<H>,
    pub(super) view: AssignmentView,
    pub(super) idle: Duration,
    pub(super) stop: CancellationToken,
    /// Starts at the handed-over checkpoint; set after every batch.
    pub(super) last_checkpoint: LastCheckpoint<String>,
}

impl<H: PartitionHandler> PartitionTask<H> {
    pub(super) async fn run(self) -> PartitionExit {
        let start = self.last();
        self.handler.opened(&self.context, start.as_deref());
        let exit = self.read().await;
        // After the last batch: the worker acknowledges the release only
        // once this task has returned, so after the handler gave the
        // partition back.
        self.handler.release(&self.context).await;
        self.handler.closed(&self.context, self.last().as_deref());
        exit
    }

    async fn read(&self) -> PartitionExit {
        loop {
            if self.stop.is_cancelled() || !self.view.can_acquire(&self.context.partition) {
                return PartitionExit::Stopped;
            }
            // Not raced with `stop`: the batch in hand is finished and its
            // checkpoint kept before the reader stops.
            let from = self.last();
            match self.handler.process(&self.context, from.as_deref()).await {
                Ok(Some(checkpoint)) => {
                    *self.last_checkpoint.lock() = Some(checkpoint);
                }
                Ok(None) => {
                    tokio::select! {
                        () = self.stop.cancelled() => return PartitionExit::Stopped,
                        () = tokio::time::sleep(self.idle) => {}
                    }
                }
                Err(error) => return PartitionExit::Failed(format!("handler: {error:#}")),
            }
        }
    }

    fn last(&self) -> Option<String> {
        self.last_checkpoint.lock().clone()
    }
}
