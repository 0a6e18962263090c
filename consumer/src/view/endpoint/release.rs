//! The release sender: tells the endpoint that this pod stopped reading a
//! revoked shard (`POST .../releases`), so the operator activates the next
//! owner at once instead of waiting for other evidence. Releases go into the
//! [`Outbox`]; one task sends what is due, follows the view (an entry is
//! dropped once the newest view no longer revokes its shard) and re-sends
//! acknowledged entries after a reconnect, since a new leader has not seen
//! them. 202 and 200 settle an entry; a 409 `NotRevoking`/`StaleEpoch`
//! settles it too (logged at debug: the handoff completed another way, or
//! the view moved on); anything else is retried with backoff.

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::time::Duration;

use shardring_crds::endpoint::ReleaseRequest;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::client::EndpointClient;
use super::outbox::{AckState, Outbox, OutboxEntry};
use super::retry::{Failure, RetryPolicy};
use super::source::{error_rate_hold, log_failure};
use crate::view::AssignmentView;

/// 409 reasons after which an acknowledgement has nothing left to do at its epoch.
const SETTLING_CONFLICTS: [&str; 3] = ["NotRevoking", "StaleEpoch", "Conflict"];

struct Shared {
    outbox: Mutex<Outbox>,
    wake: Notify,
    unsettled: watch::Sender<usize>,
}

impl Shared {
    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock()
    }

    fn publish_unsettled(&self) {
        let count = self.outbox().unsettled();
        self.unsettled
            .send_if_modified(|n| std::mem::replace(n, count) != count);
    }
}

/// Sends release acknowledgements; cheap to clone (clones share one
/// outbox, so a caller can watch what a worker queued); dropping the last
/// clone stops its task.
#[derive(Clone)]
pub struct ReleaseSender {
    shared: Arc<Shared>,
    _task: Arc<AbortOnDrop>,
}

/// Aborts the sending task when the last sender goes.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for ReleaseSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseSender")
            .field("outbox", &*self.shared.outbox())
            .finish_non_exhaustive()
    }
}

impl ReleaseSender {
    /// Starts the sender for `namespace/group`, following `view` (the same
    /// view the worker reads).
    pub fn spawn(
        client: EndpointClient,
        namespace: impl Into<String>,
        group: impl Into<String>,
        view: AssignmentView,
    ) -> Self {
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Outbox::default()),
            wake: Notify::new(),
            unsettled: watch::channel(0).0,
        });
        let task = tokio::spawn(run(
            client,
            namespace.into(),
            group.into(),
            view,
            shared.clone(),
        ));
        Self {
            shared,
            _task: Arc::new(AbortOnDrop(task)),
        }
    }

    /// Queues the acknowledgement that this pod stopped reading `shard`,
    /// which the view at `epoch` listed as revoking, with the last
    /// checkpoint written for it.
    pub fn release(&self, shard: impl Into<String>, epoch: u64, checkpoint: Option<String>) {
        let request = ReleaseRequest {
            shard: shard.into(),
            epoch,
            checkpoint,
        };
        tracing::debug!(shard = %request.shard, epoch, checkpoint = ?request.checkpoint, "release queued for the endpoint");
        self.shared.outbox().add(request);
        self.shared.publish_unsettled();
        self.shared.wake.notify_one();
    }

    /// The outbox now.
    pub fn outbox(&self) -> Vec<OutboxEntry> {
        self.shared.outbox().entries()
    }

    /// Waits until every queued acknowledgement is answered (or dropped),
    /// at most `timeout`; returns whether it was. Call it before exiting.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let mut unsettled = self.shared.unsettled.subscribe();
        tokio::time::timeout(timeout, unsettled.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

async fn run(
    client: EndpointClient,
    namespace: String,
    group: String,
    mut view: AssignmentView,
    shared: Arc<Shared>,
) {
    let mut reconnects = client.reconnects();
    let mut policy = RetryPolicy::default();
    let mut view_open = true;
    // No request before this (Retry-After, an exhausted rate-limit window,
    // backoff), whatever wakes the task meanwhile.
    let mut not_before = Instant::now();
    loop {
        if let Some(current) = view.current() {
            for shard in shared.outbox().follow(&current) {
                tracing::debug!(%shard, epoch = current.epoch, "view no longer revokes the shard; release dropped from the outbox");
            }
        }
        shared.publish_unsettled();
        let generation = *reconnects.borrow_and_update();
        let due = if Instant::now() >= not_before {
            shared.outbox().due(generation)
        } else {
            Vec::new()
        };
        let mut hold = None;
        for request in due {
            let answer = client.release(&namespace, &group, &request).await;
            let generation = *client.reconnects().borrow();
            match answer {
                Ok((outcome, rate)) => {
                    policy.succeeded();
                    tracing::info!(shard = %request.shard, epoch = request.epoch, ?outcome, "release acknowledged by the endpoint");
                    shared
                        .outbox()
                        .settle(&request, AckState::Acked { generation });
                    if let Some(wait) = rate.hold() {
                        hold = Some(wait);
                        break;
                    }
                }
                Err(error)
                    if error.status() == Some(409)
                        && error
                            .reason()
                            .is_some_and(|r| SETTLING_CONFLICTS.contains(&r)) =>
                {
                    policy.succeeded();
                    tracing::debug!(shard = %request.shard, epoch = request.epoch, %error, "release not needed at this epoch");
                    shared
                        .outbox()
                        .settle(&request, AckState::Refused { generation });
                }
                Err(error) => {
                    let failure = match error.failure() {
                        // Another 409 (a release of a group the leader
                        // does not serve yet, say): retried like a failure.
                        Failure::Refused if error.status() == Some(409) => Failure::Transient,
                        failure => failure,
                    };
                    let mut wait = policy.delay(failure);
                    if let Some(rate_hold) = error_rate_hold(&error) {
                        wait = wait.max(rate_hold);
                    }
                    log_failure(&error, &client, wait);
                    hold = Some(wait);
                    break;
                }
            }
        }
        shared.publish_unsettled();
        if let Some(hold) = hold {
            if hold.is_zero() {
                continue;
            }
            not_before = Instant::now() + hold;
        }
        let waiting = Instant::now() < not_before;
        tokio::select! {
            () = shared.wake.notified() => {}
            changed = view.changed(), if view_open => view_open = changed.is_ok(),
            changed = reconnects.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(not_before), if waiting => {}
        }
    }
}
