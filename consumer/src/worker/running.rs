//! What both workers (the Kinesis [`Worker`] and the static
//! [`PartitionWorker`](crate::partitions::PartitionWorker)) do alike: hold
//! a running reader task (its stop token, its handle and the last
//! checkpoint it wrote) and stop it — ask, let it finish the batch in hand
//! for at most a timeout, abort it past that, and hand back how it ended
//! with its last checkpoint (what a release acknowledgement carries); wait
//! between looks and drain after the shutdown signal ([`Drain`]); flush
//! the acknowledgements at exit.
//!
//! [`Worker`]: super::Worker

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::view::AssignmentView;
use crate::view::endpoint::ReleaseSender;

/// The last checkpoint a reader wrote, shared with its task.
pub(crate) type LastCheckpoint<C> = Arc<Mutex<Option<C>>>;

/// A reader task with exit `E` and checkpoints `C`.
pub(crate) struct Running<E, C> {
    stop: CancellationToken,
    handle: JoinHandle<E>,
    checkpoint: LastCheckpoint<C>,
}

impl<E: Send + 'static, C: Clone> Running<E, C> {
    /// Spawns the task `make` builds from its stop token and its
    /// checkpoint cell (starting at `start`).
    pub(crate) fn spawn<F>(
        start: Option<C>,
        make: impl FnOnce(CancellationToken, LastCheckpoint<C>) -> F,
    ) -> Self
    where
        F: Future<Output = E> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let checkpoint = Arc::new(Mutex::new(start));
        let handle = tokio::spawn(make(stop.clone(), checkpoint.clone()));
        Self {
            stop,
            handle,
            checkpoint,
        }
    }

    /// Whether the task ended on its own.
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Aborts the task without waiting (its checkpoint is not to be trusted).
    pub(crate) fn abort(&self) {
        self.handle.abort();
    }

    /// The last checkpoint written.
    pub(crate) fn last(&self) -> Option<C> {
        self.checkpoint.lock().clone()
    }

    /// Waits for a task that already finished; `Err` says why it did not
    /// end normally (it panicked).
    pub(crate) async fn join(self) -> (Result<E, String>, Option<C>) {
        let last = self.last();
        (self.handle.await.map_err(|e| e.to_string()), last)
    }

    /// Asks the task to stop and waits up to `timeout` for it to finish its
    /// batch; past that it is aborted (`Err`: why it did not end normally).
    pub(crate) async fn stop(mut self, timeout: Duration) -> (Result<E, String>, Option<C>) {
        self.stop.cancel();
        let exit = match tokio::time::timeout(timeout, &mut self.handle).await {
            Ok(exit) => exit.map_err(|e| e.to_string()),
            Err(_) => {
                self.handle.abort();
                Err("did not stop in time; aborted".to_owned())
            }
        };
        (exit, self.last())
    }
}

/// The readers of `running` that ended on their own.
pub(crate) fn finished<E: Send + 'static, C: Clone>(
    running: &HashMap<String, Running<E, C>>,
) -> Vec<String> {
    running
        .iter()
        .filter(|(_, running)| running.is_finished())
        .map(|(id, _)| id.clone())
        .collect()
}

/// A worker's wait between two looks, and its drain after the shutdown
/// signal: it stops taking work and reads on until everything is revoked
/// or the drain deadline passes.
#[derive(Debug)]
pub(crate) struct Drain {
    deadline: Duration,
    until: Option<Instant>,
}

impl Drain {
    /// Not draining yet; `deadline` once the signal came.
    pub(crate) fn new(deadline: Duration) -> Self {
        Self {
            deadline,
            until: None,
        }
    }

    /// Whether the shutdown signal came (take no more work).
    pub(crate) fn draining(&self) -> bool {
        self.until.is_some()
    }

    /// While draining: `Some` when the worker should stop now, because
    /// everything is revoked and released (`drained`: `Some(false)`) or the
    /// deadline passed (`Some(true)`).
    pub(crate) fn over(&self, drained: bool, reading: &[String]) -> Option<bool> {
        let until = self.until?;
        if drained {
            tracing::info!("drained: everything revoked and released");
            return Some(false);
        }
        if Instant::now() >= until {
            tracing::warn!(?reading, "drain deadline passed; stopping");
            return Some(true);
        }
        None
    }

    /// Waits for the shutdown signal (the drain starts), a view change or
    /// `tick`; `false` when the view source is gone.
    pub(crate) async fn wait<F: Future<Output = ()>>(
        &mut self,
        shutdown: Pin<&mut F>,
        view: &mut AssignmentView,
        tick: Duration,
        reading: &[String],
    ) -> bool {
        tokio::select! {
            () = shutdown, if self.until.is_none() => {
                tracing::info!(?reading, "shutdown: reading on until revoked or the drain deadline");
                self.until = Some(Instant::now() + self.deadline);
                true
            }
            changed = view.changed() => {
                if changed.is_err() {
                    tracing::warn!("the view source is gone; stopping");
                }
                changed.is_ok()
            }
            () = tokio::time::sleep(tick) => true,
        }
    }
}

/// Waits up to `timeout` for the queued acknowledgements to be answered
/// before a worker returns.
pub(crate) async fn flush_acks(acks: Option<&ReleaseSender>, timeout: Duration) {
    if let Some(acks) = acks
        && !acks.flush(timeout).await
    {
        tracing::warn!(outbox = ?acks.outbox(), "release acknowledgements not answered before exit");
    }
}
