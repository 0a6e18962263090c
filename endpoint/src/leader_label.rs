//! The leader's label on its own pod (`shardring.io/endpoint-leader:
//! "true"`): the endpoint's Service selects it, so consumers reach only the
//! replica that serves. Put on when this replica starts leading, taken off
//! when it stops leading or shuts down (a merge patch either way, so the
//! rest of the pod's labels are untouched). A failed patch is retried until
//! it succeeds or the wanted state changes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use shardring_crds::endpoint::LEADER_LABEL;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// First wait before retrying a failed patch; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// How long the removal at shutdown may take.
const SHUTDOWN_PATCH: Duration = Duration::from_secs(5);

/// Patches one pod's leader label.
#[derive(Clone)]
pub(crate) struct LeaderLabel {
    pods: Api<Pod>,
    pod: String,
}

impl std::fmt::Debug for LeaderLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLabel")
            .field("pod", &self.pod)
            .finish_non_exhaustive()
    }
}

impl LeaderLabel {
    /// The label of pod `namespace/pod`.
    pub(crate) fn new(client: kube::Client, namespace: &str, pod: &str) -> Self {
        Self {
            pods: Api::namespaced(client, namespace),
            pod: pod.to_owned(),
        }
    }

    async fn set(&self, leading: bool) -> Result<(), kube::Error> {
        let value = if leading {
            Value::String("true".to_owned())
        } else {
            Value::Null
        };
        let patch = json!({ "metadata": { "labels": { LEADER_LABEL: value } } });
        self.pods
            .patch(&self.pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }

    /// Follows `serving` (whether this replica serves the endpoint) until
    /// `stop`, then takes the label off.
    pub(crate) async fn run(self, mut serving: watch::Receiver<bool>, stop: CancellationToken) {
        // What the pod carries, as far as we know: unknown at start (a
        // replica that crashed while leading left its label on).
        let mut labelled: Option<bool> = None;
        let mut retry = FIRST_RETRY;
        loop {
            let want = *serving.borrow_and_update();
            let mut failed = false;
            if labelled != Some(want) {
                match self.set(want).await {
                    Ok(()) => {
                        tracing::info!(pod = %self.pod, leading = want, "endpoint leader label updated");
                        labelled = Some(want);
                        retry = FIRST_RETRY;
                    }
                    Err(error) => {
                        tracing::warn!(%error, pod = %self.pod, leading = want, retry_in = ?retry, "cannot update the endpoint leader label");
                        failed = true;
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => break,
                changed = serving.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(retry), if failed => retry = (retry * 2).min(MAX_RETRY),
            }
        }
        if labelled != Some(false) {
            match tokio::time::timeout(SHUTDOWN_PATCH, self.set(false)).await {
                Ok(Ok(())) => tracing::info!(pod = %self.pod, "endpoint leader label removed"),
                Ok(Err(error)) => {
                    tracing::warn!(%error, pod = %self.pod, "cannot remove the endpoint leader label");
                }
                Err(_) => {
                    tracing::warn!(pod = %self.pod, "removing the endpoint leader label timed out")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use shardring_devkit::apiserver::{MockApiServer, MockOptions};
    use shardring_devkit::fixtures;

    use super::*;

    async fn label(mock: &MockApiServer) -> Option<String> {
        let pod: Pod = Api::namespaced(mock.client().await, "ops")
            .get("op-0")
            .await
            .unwrap();
        pod.metadata
            .labels
            .unwrap_or_default()
            .get(LEADER_LABEL)
            .cloned()
    }

    async fn wait_label(mock: &MockApiServer, want: Option<&str>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = label(mock).await;
            if got.as_deref() == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "label stayed {got:?}, wanted {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn the_label_follows_leadership_and_goes_at_shutdown() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mock = MockApiServer::start(MockOptions::default()).await;
        let mut pod = fixtures::ready_pod("ops", "op-0", "shardring", "2026-01-01T00:00:00Z");
        pod["metadata"]["labels"]["keep"] = json!("me");
        mock.create(pod);
        let (leader, serving) = watch::channel(false);
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            LeaderLabel::new(mock.client().await, "ops", "op-0").run(serving, stop.clone()),
        );
        leader.send_replace(true);
        wait_label(&mock, Some("true")).await;
        leader.send_replace(false);
        wait_label(&mock, None).await;
        leader.send_replace(true);
        wait_label(&mock, Some("true")).await;
        stop.cancel();
        task.await.unwrap();
        assert_eq!(label(&mock).await, None, "removed at shutdown");
        let pod: Pod = Api::namespaced(mock.client().await, "ops")
            .get("op-0")
            .await
            .unwrap();
        assert_eq!(
            pod.metadata
                .labels
                .unwrap_or_default()
                .get("keep")
                .map(String::as_str),
            Some("me"),
            "other labels are untouched"
        );
        let patches = mock.count("PATCH", "/api/v1/namespaces/ops/pods/op-0");
        assert!(patches >= 4, "{patches} patches");
    }

    #[tokio::test]
    async fn a_failed_patch_is_retried() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mock = MockApiServer::start(MockOptions::default()).await;
        mock.create(fixtures::ready_pod(
            "ops",
            "op-0",
            "shardring",
            "2026-01-01T00:00:00Z",
        ));
        mock.fail_next("PATCH", "/pods/op-0", 500, 2);
        let (_leader, serving) = watch::channel(true);
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            LeaderLabel::new(mock.client().await, "ops", "op-0").run(serving, stop.clone()),
        );
        wait_label(&mock, Some("true")).await;
        assert!(mock.count("PATCH", "/pods/op-0") >= 3);
        stop.cancel();
        task.await.unwrap();
        assert_eq!(label(&mock).await, None);
    }
}
