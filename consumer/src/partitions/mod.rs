//! The static-partition worker: for sources without a lease table (SQS,
//! RabbitMQ, any partitioned queue), driven by the consumer endpoint's view
//! ([`crate::view::endpoint`]). There is no lease to fence a reader, so the
//! view is the only permission and the release acknowledgement is how the
//! next owner learns where to start. On every tick or view change it
//!
//! 1. stops the readers of partitions no longer `active` at the newest
//!    epoch (revoked or gone), each after the batch in hand;
//! 2. acknowledges, through the [`ReleaseSender`], every partition the view
//!    lists as revoking that this worker read and no longer reads, with the
//!    last checkpoint — only after its reader has returned;
//! 3. starts a reader for every `active` partition it does not read yet,
//!    from the checkpoint the view handed over
//!    ([`EndpointStatus::checkpoints`], the previous owner's last), else
//!    from the handler's own start; a reader that failed starts again from
//!    its own last checkpoint;
//! 4. after the shutdown signal stops taking partitions and keeps reading
//!    until the operator revoked them all or the drain deadline passes,
//!    then stops, acknowledges and returns.
//!
//! The user's [`PartitionHandler`] reads and processes one batch at a time
//! and says which checkpoint covers it; the worker keeps the checkpoints
//! (the operator carries them from owner to owner).

mod handler;
mod reader;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use handler::{PartitionContext, PartitionHandler};
pub use reader::PartitionExit;

use crate::view::AssignmentView;
use crate::view::endpoint::{EndpointStatus, ReleaseSender};
use crate::worker::running::{Drain, Running, finished, flush_acks};

/// Worker settings.
#[derive(Debug, Clone)]
pub struct PartitionConfig {
    /// This worker's id (the pod name).
    pub worker_id: String,
    /// How often to look at the view and the readers (a view change wakes
    /// it too).
    pub tick: Duration,
    /// How long a reader waits after an empty batch.
    pub idle: Duration,
    /// After the shutdown signal, how long to keep reading while waiting
    /// for the operator to revoke this pod's partitions.
    pub drain_deadline: Duration,
    /// How long a stopping reader may take to finish its batch; also how
    /// long the acknowledgements may take to be answered at exit.
    pub stop_timeout: Duration,
}

impl PartitionConfig {
    /// Defaults for worker `worker_id`.
    pub fn new(worker_id: impl Into<String>) -> Self {
        Self {
            worker_id: worker_id.into(),
            tick: Duration::from_millis(200),
            idle: Duration::from_millis(100),
            drain_deadline: Duration::from_secs(25),
            stop_timeout: Duration::from_secs(10),
        }
    }
}

/// What a worker did, returned when it exits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionReport {
    /// Readers started.
    pub started: u64,
    /// Readers that stopped (their partition revoked or gone, or at exit).
    pub stopped: u64,
    /// Releases acknowledged to the endpoint (queued in the outbox).
    pub acked: u64,
    /// Readers whose handler failed.
    pub failed: u64,
    /// Whether the drain deadline passed before everything was revoked.
    pub drain_deadline_passed: bool,
}

/// Reads the partitions this pod is assigned.
pub struct PartitionWorker<H> {
    view: AssignmentView,
    handover: watch::Receiver<EndpointStatus>,
    handler: Arc<H>,
    config: PartitionConfig,
    running: HashMap<String, Running<PartitionExit, String>>,
    /// Partitions this worker read and does not read now, with the last
    /// checkpoint: acknowledged once the view revokes them, resumed from
    /// after a failure while still active.
    released: HashMap<String, Option<String>>,
    release_acks: Option<ReleaseSender>,
    report: PartitionReport,
}

impl<H: PartitionHandler> PartitionWorker<H> {
    /// A worker following `view` (fed by the endpoint source), starting
    /// partitions from the checkpoints in `handover` (the source's status,
    /// [`EndpointHandle::status`](crate::view::endpoint::EndpointHandle)),
    /// handing batches to `handler`.
    pub fn new(
        view: AssignmentView,
        handover: watch::Receiver<EndpointStatus>,
        handler: Arc<H>,
        config: PartitionConfig,
    ) -> Self {
        Self {
            view,
            handover,
            handler,
            config,
            running: HashMap::new(),
            released: HashMap::new(),
            release_acks: None,
            report: PartitionReport::default(),
        }
    }

    /// Acknowledges every revoked partition's release through `sender`;
    /// without it the operator waits for other evidence (the drain timeout).
    #[must_use]
    pub fn with_release_acks(mut self, sender: ReleaseSender) -> Self {
        self.release_acks = Some(sender);
        self
    }

    /// Partitions being read now, sorted.
    pub fn reading(&self) -> Vec<String> {
        let partitions: BTreeSet<&String> = self.running.keys().collect();
        partitions.into_iter().cloned().collect()
    }

    /// Runs until `shutdown` resolves and the drain finishes (see the
    /// module docs), or the view source goes away.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> PartitionReport {
        let mut view = self.view.clone();
        tokio::pin!(shutdown);
        let mut drain = Drain::new(self.config.drain_deadline);
        loop {
            self.reap().await;
            self.stop_unassigned().await;
            self.acknowledge();
            if !drain.draining() {
                self.start_active();
            } else if let Some(passed) = drain.over(self.running.is_empty(), &self.reading()) {
                self.report.drain_deadline_passed = passed;
                break;
            }
            let reading = self.reading();
            if !drain
                .wait(shutdown.as_mut(), &mut view, self.config.tick, &reading)
                .await
            {
                break;
            }
        }
        let partitions: Vec<String> = self.running.keys().cloned().collect();
        self.stop(partitions).await;
        self.acknowledge();
        flush_acks(self.release_acks.as_ref(), self.config.stop_timeout).await;
        self.report
    }

    /// Collects readers that ended on their own (a handler failure, or a
    /// view change the reader saw first).
    async fn reap(&mut self) {
        for partition in finished(&self.running) {
            if let Some(running) = self.running.remove(&partition) {
                let (exit, last) = running.join().await;
                self.after_exit(&partition, exit.unwrap_or_else(PartitionExit::Failed), last);
            }
        }
    }

    fn after_exit(&mut self, partition: &str, exit: PartitionExit, last: Option<String>) {
        match &exit {
            PartitionExit::Stopped => self.report.stopped += 1,
            PartitionExit::Failed(error) => {
                tracing::warn!(partition, %error, "partition reader failed; starting again from its last checkpoint");
                self.report.failed += 1;
            }
        }
        self.released.insert(partition.to_owned(), last);
    }

    /// Stops the readers of `partitions`, each after its batch in hand
    /// (aborted after `stop_timeout`), all at once: a pod that loses several
    /// partitions lets go of each without waiting for the others.
    async fn stop(&mut self, partitions: Vec<String>) {
        let timeout = self.config.stop_timeout;
        let stopping = partitions.into_iter().filter_map(|partition| {
            let running = self.running.remove(&partition)?;
            Some(async move {
                let (exit, last) = running.stop(timeout).await;
                (partition, exit, last)
            })
        });
        for (partition, exit, last) in futures::future::join_all(stopping).await {
            self.after_exit(&partition, exit.unwrap_or_else(PartitionExit::Failed), last);
        }
    }

    async fn stop_unassigned(&mut self) {
        let revoked: Vec<String> = self
            .running
            .keys()
            .filter(|partition| !self.view.can_acquire(partition))
            .cloned()
            .collect();
        for partition in &revoked {
            tracing::info!(%partition, epoch = self.view.epoch(), "no longer active: stopping after the batch in hand");
        }
        self.stop(revoked).await;
    }

    /// Acknowledges the partitions the newest view revokes that no reader
    /// reads any more; forgets those it no longer lists at all.
    fn acknowledge(&mut self) {
        let Some(view) = self.view.current() else {
            return;
        };
        let listed = |p: &String| view.active.contains(p) || view.revoking.contains(p);
        self.released.retain(|partition, _| listed(partition));
        let due: Vec<String> = view
            .revoking
            .iter()
            .filter(|p| self.released.contains_key(*p))
            .cloned()
            .collect();
        for partition in due {
            let checkpoint = self.released.remove(&partition).flatten();
            if let Some(acks) = &self.release_acks {
                tracing::info!(%partition, epoch = view.epoch, ?checkpoint, "released: acknowledging");
                acks.release(partition, view.epoch, checkpoint);
                self.report.acked += 1;
            }
        }
    }

    fn start_active(&mut self) {
        let Some(view) = self.view.current() else {
            return;
        };
        for partition in view.active {
            if self.running.contains_key(&partition) || !self.view.can_acquire(&partition) {
                continue;
            }
            // Our own last checkpoint (a failed reader) is newer than the
            // one handed over when this hold began.
            let start = match self.released.remove(&partition) {
                Some(last) => last,
                None => self.handover.borrow().checkpoints.get(&partition).cloned(),
            };
            tracing::info!(%partition, checkpoint = ?start, epoch = view.epoch, "active: reading");
            let context = PartitionContext {
                partition: partition.clone(),
                worker_id: self.config.worker_id.clone(),
                epoch: view.epoch,
            };
            let (handler, idle) = (self.handler.clone(), self.config.idle);
            let assignment = self.view.clone();
            let running = Running::spawn(start, |stop, last_checkpoint| {
                reader::PartitionTask {
                    context,
                    handler,
                    view: assignment,
                    idle,
                    stop,
                    last_checkpoint,
                }
                .run()
            });
            self.running.insert(partition, running);
            self.report.started += 1;
        }
    }
}
