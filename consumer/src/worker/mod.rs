//! The worker: ties the assignment view, the lease manager and shard readers
//! together. On every tick or view change it
//!
//! 1. stops the readers of shards no longer `active` at the newest epoch
//!    (revoked or gone), waits for them to finish the batch in hand and
//!    checkpoint, then releases their leases at once and, with a
//!    [`ReleaseSender`] (the consumer endpoint), acknowledges the release
//!    of each shard the view lists as revoking, with its last checkpoint;
//! 2. stops readers whose lease was lost or lapsed (renewal failing for too long);
//! 3. renews held leases every `renew_interval`;
//! 4. takes the leases of `active` shards it does not read yet (free or
//!    expired only) and starts a reader from each checkpoint (its shard
//!    iterator asked for while the lease is written);
//! 5. after the shutdown signal (SIGTERM) stops taking shards and keeps
//!    reading until the operator has revoked them all or the drain deadline
//!    passes, then stops, checkpoints, releases and returns.

mod handler;
pub(crate) mod running;
mod shard;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use handler::{RecordHandler, ShardContext};
pub use shard::ShardExit;

use crate::lease::{Checkpoint, LeaseError, LeaseManager, TakeOutcome};
use crate::reader::{ReaderOptions, ShardReader};
use crate::view::AssignmentView;
use crate::view::endpoint::ReleaseSender;
use running::{Drain, Running, finished, flush_acks};

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Stream name or ARN.
    pub stream: String,
    /// How often to look at the view, readers and leases (a view change wakes it too).
    pub tick: Duration,
    /// How often to renew held leases (well below the lease failover time).
    pub renew_interval: Duration,
    /// After the shutdown signal, how long to keep reading while waiting for
    /// the operator to revoke this pod's shards.
    pub drain_deadline: Duration,
    /// How long a stopping reader may take to finish its batch and checkpoint.
    pub stop_timeout: Duration,
    /// GetRecords pacing.
    pub reader: ReaderOptions,
}

impl WorkerConfig {
    /// Defaults for `stream` with lease failover `failover`.
    pub fn new(stream: impl Into<String>, failover: Duration) -> Self {
        Self {
            stream: stream.into(),
            tick: Duration::from_millis(200),
            renew_interval: failover / 3,
            drain_deadline: Duration::from_secs(25),
            stop_timeout: Duration::from_secs(10),
            reader: ReaderOptions::default(),
        }
    }
}

/// What a worker did, returned when it exits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Shards read to their end.
    pub completed: BTreeSet<String>,
    /// Shards handed back on revoke.
    pub released: u64,
    /// Leases lost to another worker or lapsed.
    pub lost: u64,
    /// Whether the drain deadline passed before everything was revoked.
    pub drain_deadline_passed: bool,
}

/// Reads the shards this pod is assigned.
pub struct Worker<H> {
    kinesis: aws_sdk_kinesis::Client,
    leases: Arc<LeaseManager>,
    view: AssignmentView,
    handler: Arc<H>,
    config: WorkerConfig,
    running: HashMap<String, Running<ShardExit, Checkpoint>>,
    report: WorkerReport,
    release_acks: Option<ReleaseSender>,
}

impl<H: RecordHandler> Worker<H> {
    /// A worker reading with `kinesis`, holding leases through `leases`,
    /// following `view`, handing records to `handler`.
    pub fn new(
        kinesis: aws_sdk_kinesis::Client,
        leases: Arc<LeaseManager>,
        view: AssignmentView,
        handler: Arc<H>,
        config: WorkerConfig,
    ) -> Self {
        Self {
            kinesis,
            leases,
            view,
            handler,
            config,
            running: HashMap::new(),
            report: WorkerReport::default(),
            release_acks: None,
        }
    }

    /// Acknowledges every revoked shard's release to the consumer endpoint
    /// through `sender` (epoch: the view's that lists it as revoking;
    /// checkpoint: the last one written for it); before returning, [`Self::run`]
    /// waits up to `stop_timeout` for the acknowledgements to be answered.
    #[must_use]
    pub fn with_release_acks(mut self, sender: ReleaseSender) -> Self {
        self.release_acks = Some(sender);
        self
    }

    /// Shards being read now, sorted.
    pub fn reading(&self) -> Vec<String> {
        let mut shards: Vec<String> = self.running.keys().cloned().collect();
        shards.sort();
        shards
    }

    /// Runs until `shutdown` resolves and the drain finishes (see the module
    /// docs), or the view source goes away.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> WorkerReport {
        let mut view = self.view.clone();
        let mut last_renew = Instant::now();
        tokio::pin!(shutdown);
        let mut drain = Drain::new(self.config.drain_deadline);
        loop {
            self.reap().await;
            self.stop_unassigned().await;
            self.stop_lapsed().await;
            if last_renew.elapsed() >= self.config.renew_interval {
                last_renew = Instant::now();
                self.renew().await;
            }
            if !drain.draining() {
                self.acquire().await;
            } else {
                let drained = self.running.is_empty() && self.leases.held().is_empty();
                if let Some(passed) = drain.over(drained, &self.reading()) {
                    self.report.drain_deadline_passed = passed;
                    break;
                }
            }
            let reading = self.reading();
            if !drain
                .wait(shutdown.as_mut(), &mut view, self.config.tick, &reading)
                .await
            {
                break;
            }
        }
        let shards: Vec<String> = self.running.keys().cloned().collect();
        for shard in shards {
            self.stop(&shard).await;
        }
        for shard in self.leases.held() {
            if let Err(error) = self.leases.release(&shard).await {
                tracing::warn!(%error, "release at exit failed");
            }
        }
        flush_acks(self.release_acks.as_ref(), self.config.stop_timeout).await;
        self.report
    }

    /// Collects readers that finished on their own (shard end, lost lease, failure).
    async fn reap(&mut self) {
        for shard in finished(&self.running) {
            if let Some(running) = self.running.remove(&shard) {
                let (exit, _) = running.join().await;
                self.after_exit(&shard, exit.unwrap_or_else(ShardExit::Failed))
                    .await;
            }
        }
    }

    async fn after_exit(&mut self, shard: &str, exit: ShardExit) {
        match exit {
            ShardExit::Ended { children } => {
                tracing::info!(shard, ?children, "shard end reached and checkpointed");
                self.report.completed.insert(shard.to_owned());
            }
            ShardExit::LeaseLost => {
                tracing::warn!(shard, "lease lost; stopped reading");
                self.report.lost += 1;
            }
            ShardExit::Failed(error) => {
                tracing::warn!(shard, %error, "shard reader failed; releasing");
            }
            ShardExit::Stopped => {}
        }
        if let Err(error) = self.leases.release(shard).await {
            tracing::warn!(shard, %error, "release failed");
        }
    }

    /// Stops a reader: it finishes its batch and checkpoint, or is aborted
    /// after `stop_timeout` (its lease is then released unchanged). Returns
    /// the last checkpoint written for the shard.
    async fn stop(&mut self, shard: &str) -> Option<Checkpoint> {
        let running = self.running.remove(shard)?;
        let (exit, checkpoint) = running.stop(self.config.stop_timeout).await;
        self.after_exit(shard, exit.unwrap_or_else(ShardExit::Failed))
            .await;
        checkpoint
    }

    async fn stop_unassigned(&mut self) {
        let revoked: Vec<String> = self
            .running
            .keys()
            .filter(|shard| !self.view.can_acquire(shard))
            .cloned()
            .collect();
        for shard in revoked {
            let epoch = self.view.epoch();
            let revoking = self.view.is_revoking(&shard);
            tracing::info!(%shard, epoch, "revoked: stopping, checkpointing and releasing");
            let checkpoint = self.stop(&shard).await;
            self.report.released += 1;
            if revoking && let Some(acks) = &self.release_acks {
                acks.release(
                    shard,
                    epoch,
                    checkpoint.map(|checkpoint| checkpoint.as_str().to_owned()),
                );
            }
        }
        // Leases held without a reader (e.g. a reader that failed to stop).
        self.leases.release_unassigned(&self.view).await;
    }

    async fn stop_lapsed(&mut self) {
        let lapsed: Vec<String> = self
            .running
            .keys()
            .filter(|shard| !self.leases.is_valid(shard))
            .cloned()
            .collect();
        for shard in lapsed {
            if let Some(running) = self.running.remove(&shard) {
                // No checkpoint: the lease may already be someone else's.
                running.abort();
                self.report.lost += 1;
                tracing::warn!(%shard, "lease lapsed; reader aborted");
                if let Err(error) = self.leases.release(&shard).await {
                    tracing::debug!(%shard, %error, "release of a lapsed lease failed");
                }
            }
        }
    }

    async fn renew(&mut self) {
        for shard in self.leases.held() {
            match self.leases.renew(&shard).await {
                Ok(()) => {}
                Err(LeaseError::Conflict { .. } | LeaseError::NotHeld(_)) => {
                    if let Some(running) = self.running.remove(&shard) {
                        running.abort();
                        self.report.lost += 1;
                        tracing::warn!(%shard, "lease taken by another worker; reader aborted");
                    }
                }
                Err(error) => tracing::warn!(%error, "renewal failed; retrying"),
            }
        }
    }

    async fn acquire(&mut self) {
        let Some(view) = self.view.current() else {
            return;
        };
        for shard in view.active {
            if self.running.contains_key(&shard) || self.report.completed.contains(&shard) {
                continue;
            }
            // The shard iterator is asked for while the lease is being
            // taken (one call less between the take and the first record);
            // the shard is read only once the lease is ours.
            let (client, stream) = (self.kinesis.clone(), self.config.stream.clone());
            let (options, id) = (self.config.reader.clone(), shard.clone());
            let open = |checkpoint: Option<Checkpoint>| async move {
                let reader = ShardReader::open(client, &stream, &id, checkpoint.as_ref(), options);
                (checkpoint.clone(), reader.await)
            };
            // Boxed: the reader's opening is a large future, kept off the
            // worker's own.
            let taking = Box::pin(self.leases.take_preparing(&shard, &self.view, open));
            match taking.await {
                Ok((TakeOutcome::Taken(lease), opened)) => {
                    tracing::info!(%shard, checkpoint = ?lease.checkpoint, epoch = self.view.epoch(), "lease taken; reading");
                    // Opened from the checkpoint read before the take: used
                    // only if the taken lease still says the same.
                    let reader = opened
                        .filter(|(from, _)| *from == lease.checkpoint)
                        .and_then(|(_, reader)| reader.ok());
                    self.start(shard, lease.counter.unwrap_or(0), lease.checkpoint, reader);
                }
                Ok((TakeOutcome::Complete, _)) => {
                    self.report.completed.insert(shard);
                }
                Ok((TakeOutcome::AlreadyHeld, _)) => {
                    // Held without a reader (a reader failed to start): start
                    // one from the table's checkpoint.
                    if let Ok(Some(lease)) = self.leases.fetch(&shard).await {
                        self.start(shard, lease.counter.unwrap_or(0), lease.checkpoint, None);
                    }
                }
                Ok((TakeOutcome::HeldByOther { owner, expires_in }, _)) => {
                    tracing::debug!(%shard, %owner, ?expires_in, "lease held by another worker");
                }
                Ok((TakeOutcome::NotAssigned, _)) => {}
                Err(LeaseError::Conflict { .. }) => {
                    tracing::debug!(%shard, "lost a race for the lease");
                }
                Err(error) => tracing::warn!(%shard, %error, "cannot take the lease"),
            }
        }
    }

    /// Starts reading `shard` from `start`, with `reader` if one is open
    /// there already.
    fn start(
        &mut self,
        shard: String,
        session: u64,
        start: Option<Checkpoint>,
        reader: Option<ShardReader>,
    ) {
        let context = ShardContext {
            shard: shard.clone(),
            worker_id: self.leases.config().worker_id.clone(),
            session,
        };
        let (client, stream) = (self.kinesis.clone(), self.config.stream.clone());
        let (leases, handler) = (self.leases.clone(), self.handler.clone());
        let options = self.config.reader.clone();
        let running = Running::spawn(start.clone(), |stop, last_checkpoint| {
            shard::ShardTask {
                context,
                client,
                stream,
                leases,
                handler,
                start,
                options,
                reader,
                stop,
                last_checkpoint,
            }
            .run()
        });
        self.running.insert(shard, running);
    }
}

/// Resolves on SIGTERM or Ctrl-C: pass it to [`Worker::run`].
pub async fn termination_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
