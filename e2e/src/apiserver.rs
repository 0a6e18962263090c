//! The API server restart scenario (needs the shardring-k8s kit as the
//! cluster under test, see [`crate::kit`]): kube-apiserver is killed in the
//! middle of a handoff, kept down for [`OUTAGE`], and started again with the
//! kit's `up`. Checked: the operator keeps its process; it publishes nothing
//! older than what was published before (sampled all along), and no shard
//! leaves the document; it is serving again within [`SERVING_AGAIN`] of the
//! API server's return — ready, and a pod deleted once the API server is
//! back (which only its watches can tell it) has its shards revoked; while
//! the API server is down it opens at most [`MAX_CONNECTIONS_PER_SECOND`]
//! connections a second to it (counted by a relay in front of it,
//! [`crate::proxy`]), i.e. it backs off instead of spinning; and the
//! consumers' records pass the usual checker.

use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use shardring_devkit::wait::{Probe, wait_for_every};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::harness::{CONFIG_MAP, Harness, HarnessError};
use crate::kit::Kit;
use crate::proxy::CountingProxy;
use crate::published::assignment_document;
use crate::scenarios::{ScenarioResult, opening, traffic};
use crate::verdict::{VerdictError, finish};

/// How soon after the API server is back the operator must be serving
/// again.
pub const SERVING_AGAIN: Duration = Duration::from_secs(10);
/// The most connections a second the operator may open to an API server
/// that is down (its watches retry every 2–4 s, a failed reconcile backs
/// off from 2 s; a spin would be hundreds).
pub const MAX_CONNECTIONS_PER_SECOND: f64 = 5.0;
/// How long kube-apiserver stays down (then the kit's `up` takes a few
/// seconds more): long enough for retries to back off as far as they go.
pub const OUTAGE: Duration = Duration::from_secs(15);
/// How often the published document is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// One sample of the published document: when, its epoch, its shards and
/// whether `v1-1` still reads any (its shards active).
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    epoch: u64,
    shards: usize,
    v1_1_active: bool,
}

/// Samples the published document until dropped (reads that fail while
/// the API server is down are skipped).
struct Samples {
    seen: Arc<Mutex<Vec<Sample>>>,
    task: JoinHandle<()>,
}

impl Samples {
    fn start(client: Client, namespace: &str) -> Self {
        let maps = Api::<ConfigMap>::namespaced(client, namespace);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(Some(map)) = maps.get_opt(CONFIG_MAP).await
                    && let Ok(doc) = assignment_document(&map)
                {
                    let sample = Sample {
                        at: Instant::now(),
                        epoch: doc.epoch,
                        shards: doc.shards.len(),
                        v1_1_active: doc.pods.get("v1-1").is_some_and(|p| !p.active.is_empty()),
                    };
                    into.lock().push(sample);
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        });
        Self { seen, task }
    }

    fn taken(&self) -> Vec<Sample> {
        self.seen.lock().clone()
    }
}

impl Drop for Samples {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn failed(summary: String) -> VerdictError {
    VerdictError::Failed {
        scenario: "apiserver-restart".into(),
        summary,
    }
}

/// The scenario: see the module docs. `proxy` relays the operator's
/// connections to the kit's API server.
pub async fn api_server_restart(
    harness: &mut Harness,
    kit: &Kit,
    proxy: &CountingProxy,
) -> ScenarioResult {
    opening(harness).await?;
    let samples = Samples::start(harness.client.clone(), &harness.namespace);
    // Mid-churn: v1-0 leaves, and the API server dies as its revoke is out.
    harness.pods.delete_start("v1-0").await?;
    harness.wait_revoking("v1-0").await?;
    let published = harness
        .document()
        .await?
        .ok_or_else(|| failed("no document before the restart".into()))?;
    let killed = Instant::now();
    let pid = kit.kill_api_server().map_err(failed)?;
    let connections_before = proxy.connections();
    eprintln!(
        "e2e[apiserver-restart]: kube-apiserver (pid {pid}) killed at epoch {}",
        published.epoch
    );
    // Down: v1-0's consumer lets its shards go and exits; the others read on.
    harness.pods.wait_exited("v1-0").await?;
    // SIGKILL is delivered at once, but a loaded machine may take a moment
    // to tear a large process down (its /proc entry stays until then):
    // wait for it to be gone, within the outage.
    let gone = || async {
        Ok::<_, std::convert::Infallible>(if kit.api_server_gone() {
            Probe::Done(())
        } else {
            Probe::Pending("its pid still names kube-apiserver".into())
        })
    };
    wait_for_every(
        Duration::from_millis(50),
        "kube-apiserver to be gone after SIGKILL",
        OUTAGE,
        gone,
    )
    .await
    .map_err(|e| failed(format!("kube-apiserver still runs after SIGKILL: {e}")))?;
    // The outage's length is the scenario's: nothing to wait for.
    tokio::time::sleep_until(killed + OUTAGE).await;
    kit.up().await.map_err(failed)?;
    let back = Instant::now();
    let down = back - killed;
    let connections = proxy.connections() - connections_before;
    let rate = connections as f64 / down.as_secs_f64();
    eprintln!(
        "e2e[apiserver-restart]: kube-apiserver down {} ms; the operator opened {connections} connections to it meanwhile ({rate:.2}/s)",
        down.as_millis()
    );
    let operator = harness
        .operator_mut()
        .ok_or_else(|| failed("no operator".into()))?;
    operator.check_running().map_err(HarnessError::from)?;
    // Serving again: ready, and a change only its watches can tell it of is
    // acted upon (v1-1's deletion revokes its shards).
    harness.pods.delete_start("v1-1").await?;
    harness.wait_revoking("v1-1").await?;
    let ready = match harness.operator() {
        Some(operator) => operator.is_ready().await,
        None => false,
    };
    harness.pods.delete_finish("v1-0").await?;
    harness.pods.delete_finish("v1-1").await?;
    harness.wait_settled("after the API server restart").await?;
    traffic(harness, 200).await?;
    let taken = samples.taken();
    drop(samples);
    finish(harness, "apiserver-restart").await?;

    let serving = taken
        .iter()
        .find(|s| s.at > back && !s.v1_1_active)
        .map(|s| s.at - back)
        .ok_or_else(|| failed("no document without v1-1's shards was sampled".into()))?;
    eprintln!(
        "e2e[apiserver-restart]: serving again {} ms after kube-apiserver was back (ready: {ready}); {} samples of the document, epochs {}..{}",
        serving.as_millis(),
        taken.len(),
        taken.first().map_or(0, |s| s.epoch),
        taken.last().map_or(0, |s| s.epoch)
    );
    if let Some(pair) = taken.windows(2).find(|w| w[1].epoch < w[0].epoch) {
        return Err(failed(format!(
            "the published epoch went back from {} to {}",
            pair[0].epoch, pair[1].epoch
        )));
    }
    if let Some(sample) = taken.iter().find(|s| s.shards < published.shards.len()) {
        return Err(failed(format!(
            "the document lost shards: {} of {} at epoch {}",
            sample.shards,
            published.shards.len(),
            sample.epoch
        )));
    }
    if !ready || serving > SERVING_AGAIN {
        return Err(failed(format!(
            "not serving again within {SERVING_AGAIN:?} of the API server's return: a pod deleted then was revoked after {} ms, ready {ready}",
            serving.as_millis()
        )));
    }
    if rate > MAX_CONNECTIONS_PER_SECOND {
        return Err(failed(format!(
            "{rate:.1} connections a second to an API server that was down (at most {MAX_CONNECTIONS_PER_SECOND})"
        )));
    }
    Ok(())
}
