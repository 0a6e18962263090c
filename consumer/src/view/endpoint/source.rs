//! The endpoint view source: long-polls this pod's view
//! (`?epoch=<newest the endpoint gave>&waitSeconds=<wait>`) and offers each
//! answer to the [`ViewPublisher`] (which never goes back in epoch, so the
//! endpoint runs beside the file and watch sources: whichever is newest
//! wins). Keeps the checkpoints handed over with the newest view, and a
//! status (newest epoch, last error) for callers and tests.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::client::{EndpointClient, EndpointError};
use super::retry::{Failure, RetryPolicy};
use crate::view::ViewPublisher;

/// How the source is doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointStatus {
    /// The newest epoch the endpoint answered with (0: none yet).
    pub epoch: u64,
    /// Answers received.
    pub answers: u64,
    /// The last failure, cleared by the next answer.
    pub last_error: Option<String>,
    /// Per active shard of the newest view, the checkpoint its previous
    /// owner acknowledged with its release.
    pub checkpoints: BTreeMap<String, String>,
}

/// Long-polls one pod's view of one ShardGroup.
#[derive(Debug, Clone)]
pub struct EndpointSource {
    /// The client (shared with the [`super::ReleaseSender`]).
    pub client: EndpointClient,
    /// The ShardGroup's namespace.
    pub namespace: String,
    /// The ShardGroup's name.
    pub group: String,
    /// How long each long-poll waits for a newer view.
    pub wait: Duration,
}

/// A running endpoint source.
#[derive(Debug)]
pub struct EndpointHandle {
    /// The long-poll task (ends when every reader of the publisher is gone).
    pub task: JoinHandle<()>,
    /// Its status.
    pub status: watch::Receiver<EndpointStatus>,
}

impl EndpointHandle {
    /// The checkpoint handed over with active shard `shard`, if any.
    pub fn checkpoint(&self, shard: &str) -> Option<String> {
        self.status.borrow().checkpoints.get(shard).cloned()
    }
}

impl EndpointSource {
    /// Starts long-polling, offering every view to `publisher`.
    pub fn spawn(self, publisher: ViewPublisher) -> EndpointHandle {
        let (status, receiver) = watch::channel(EndpointStatus::default());
        let task = tokio::spawn(self.run(publisher, status));
        EndpointHandle {
            task,
            status: receiver,
        }
    }

    async fn run(self, publisher: ViewPublisher, status: watch::Sender<EndpointStatus>) {
        let mut policy = RetryPolicy::default();
        let mut epoch = 0;
        let mut hold = Duration::ZERO;
        let mut last_logged = None::<String>;
        loop {
            if publisher.is_closed() {
                return;
            }
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
            let answer = self
                .client
                .view(&self.namespace, &self.group, epoch, self.wait)
                .await;
            match answer {
                Ok((response, rate)) => {
                    policy.succeeded();
                    last_logged = None;
                    let view = response.view;
                    let newest = view.epoch >= epoch;
                    epoch = epoch.max(view.epoch);
                    status.send_modify(|status| {
                        status.epoch = epoch;
                        status.answers += 1;
                        status.last_error = None;
                        if newest {
                            status.checkpoints = response.checkpoints;
                        }
                    });
                    if publisher.offer(view.clone()) {
                        tracing::info!(
                            epoch = view.epoch, active = ?view.active, revoking = ?view.revoking,
                            "assignment view changed (endpoint)"
                        );
                    }
                    // Epoch 0 cannot be long-polled (it means "answer at
                    // once"): ask again in a second.
                    hold = rate.hold().unwrap_or(if epoch == 0 {
                        Duration::from_secs(1)
                    } else {
                        Duration::ZERO
                    });
                }
                Err(error) => {
                    hold = policy.delay(error.failure());
                    if let Some(rate_hold) = error_rate_hold(&error) {
                        hold = hold.max(rate_hold);
                    }
                    let text = error.to_string();
                    if last_logged.as_ref() != Some(&text) {
                        log_failure(&error, &self.client, hold);
                    }
                    last_logged = Some(text.clone());
                    status.send_modify(|status| status.last_error = Some(text));
                }
            }
        }
    }
}

/// `X-RateLimit-Remaining: 0` on an error answer holds the next request too.
pub(super) fn error_rate_hold(error: &EndpointError) -> Option<Duration> {
    match error {
        EndpointError::Status { rate, .. } => rate.hold(),
        _ => None,
    }
}

/// One clear line per kind of failure (repeats of the same one are not logged).
pub(super) fn log_failure(error: &EndpointError, client: &EndpointClient, retry_in: Duration) {
    match error.failure() {
        Failure::NotLeader => {
            tracing::debug!(%error, ?retry_in, "endpoint replica is not the leader; retrying on a new connection");
        }
        Failure::RateLimited(_) => {
            tracing::warn!(%error, ?retry_in, "endpoint rate limit reached; waiting as told");
        }
        Failure::Unauthorized => tracing::warn!(
            %error, ?retry_in, token_file = %client.config().token_file.display(),
            "endpoint refused the token (missing, invalid or expired); re-reading the token file and retrying"
        ),
        Failure::NotYetKnown => tracing::warn!(
            %error, ?retry_in,
            "endpoint does not know this pod (or its IP) yet; retrying (quickly while the pod is new)"
        ),
        Failure::Refused => tracing::warn!(
            %error, ?retry_in,
            "endpoint refused the request; check the ShardGroup name and this pod's ServiceAccount"
        ),
        Failure::Transient => {
            tracing::warn!(%error, ?retry_in, "endpoint unreachable or failing; the other view sources carry on");
        }
        Failure::NotYetPublished => tracing::debug!(
            %error, ?retry_in,
            "the leader has not taken in the document of this epoch yet; retrying shortly"
        ),
    }
}
