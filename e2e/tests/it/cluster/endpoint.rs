//! The consumer endpoint against a real cluster: the operator (in either
//! mode) serves HTTPS on a loopback port; a consumer presents a projected
//! service-account token bound to its pod (a TokenRequest, as the kubelet
//! makes for a projected volume) and gets its own view, checked by a real
//! TokenReview; a token for another audience gets 401; and a pod that turns
//! NotReady hands its shards over as soon as it acknowledges their release,
//! long before the sample's 30 s drain timeout. The peer IP check is off: the
//! suite's consumers run outside the pods (which are never scheduled).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use shardring_consumer::view::endpoint::{EndpointClient, EndpointConfig};
use shardring_crds::endpoint::{DEFAULT_AUDIENCE, ReleaseRequest, ViewResponse};
use shardring_e2e::harness::STEP_TIMEOUT;
use shardring_e2e::namespace::{delete_namespace, unique_namespace};
use shardring_e2e::{Operator, Probe, wait_for};

use super::fixture::Fixture;
use super::operator_cluster;
use super::waits::wait_for_assignment;
use super::{TestResult, install};
use shardring_e2e::cluster::cluster_or_skip;

#[tokio::test]
async fn endpoint_serves_views_and_takes_release_acks_on_a_real_cluster() {
    let _turn = crate::TURNS.read().await;
    let _kit_turn = shardring_e2e::kit::KitTurn::shared().await;
    let Some(client) = cluster_or_skip("cluster-endpoint").await else {
        return;
    };
    let namespace = unique_namespace("endpoint");
    let result = match Fixture::from_samples(&namespace) {
        Ok(fixture) => scenario(&client, &fixture).await,
        Err(error) => Err(error),
    };
    let cleanup = delete_namespace(&client, &namespace).await;
    if let Err(error) = result {
        panic!("e2e endpoint scenario failed in namespace {namespace}: {error}");
    }
    if let Err(error) = cleanup {
        panic!("e2e cleanup of namespace {namespace} failed: {error}");
    }
}

async fn scenario(client: &Client, fx: &Fixture) -> TestResult {
    let mut pods = install(client, fx).await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut operator = Operator::start_with_endpoint(
        &operator_cluster(client, fx).await?,
        &fx.namespace,
        shardring_e2e::harness::REGION,
        shardring_e2e::operator::OperatorMode::from_env()?,
        addr,
    )
    .await?;
    let first = wait_for_assignment(client, fx, &pods, &mut operator).await?;
    let dir = std::env::temp_dir().join(format!("shardring-e2e-{}", fx.namespace));
    std::fs::create_dir_all(&dir)?;
    let ca = ca_file(client, fx, &dir).await?;
    let url = format!("https://127.0.0.1:{port}");

    // Its own view, with a token bound to the pod.
    let owner = pods[0].clone();
    let consumer = endpoint_client(client, fx, &dir, &ca, &url, &owner, DEFAULT_AUDIENCE).await?;
    let view = view_at_least(&consumer, fx, first.epoch).await?;
    let expected = first
        .pods
        .get(&owner)
        .map(|p| p.active.clone())
        .unwrap_or_default();
    if view.pod != owner || view.view.active != expected {
        return Err(
            format!("{owner}'s endpoint view {view:?} is not its share {expected:?}").into(),
        );
    }

    // A token for another audience is refused.
    let stranger = endpoint_client(client, fx, &dir, &ca, &url, &owner, "another-audience").await?;
    match stranger
        .view(&fx.namespace, &fx.name, 0, Duration::ZERO)
        .await
    {
        Err(error) if error.status() == Some(401) => {}
        other => return Err(format!("a token for another audience got {other:?}").into()),
    }

    // The last pod turns NotReady: its shards are revoked, it acknowledges
    // their release, and they move at once.
    let leaving = pods.pop().ok_or("no pods")?;
    let leaver = endpoint_client(client, fx, &dir, &ca, &url, &leaving, DEFAULT_AUDIENCE).await?;
    let before = view_at_least(&leaver, fx, first.epoch).await?;
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    Api::<Pod>::namespaced(client.clone(), &fx.namespace)
        .patch_status(
            &leaving,
            &PatchParams::default(),
            &Patch::Strategic(&status),
        )
        .await?;
    let revoked = wait_for(
        "the leaving pod's view to revoke its shards",
        STEP_TIMEOUT,
        || {
            let leaver = leaver.clone();
            let epoch = before.view.epoch;
            async move {
                let (view, _) = leaver
                    .view(&fx.namespace, &fx.name, epoch, Duration::from_secs(5))
                    .await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                    if view.view.revoking.is_empty() {
                        Probe::Pending(format!("{:?}", view.view))
                    } else {
                        Probe::Done(view)
                    },
                )
            }
        },
    )
    .await?;
    let acked = Instant::now();
    for shard in &revoked.view.revoking {
        let request = ReleaseRequest {
            shard: shard.clone(),
            epoch: revoked.view.epoch,
            checkpoint: None,
        };
        leaver.release(&fx.namespace, &fx.name, &request).await?;
    }
    wait_for_assignment(client, fx, &pods, &mut operator).await?;
    let handed_over = acked.elapsed();
    eprintln!(
        "e2e: {} acknowledged shards of {leaving} active elsewhere {:.0} ms after the acks",
        revoked.view.revoking.len(),
        handed_over.as_secs_f64() * 1e3
    );
    if handed_over >= Duration::from_secs(20) {
        return Err(format!(
            "the acknowledged handoff took {handed_over:?}: as long as the 30 s drain timeout"
        )
        .into());
    }
    operator.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The endpoint's CA, once the operator published it in the namespace.
pub(super) async fn ca_file(client: &Client, fx: &Fixture, dir: &Path) -> TestResult<PathBuf> {
    Ok(shardring_e2e::tokens::endpoint_ca(client, &fx.namespace, dir).await?)
}

/// An endpoint client of `pod` with a token of the namespace's `default`
/// service account bound to the pod, for `audience`.
pub(super) async fn endpoint_client(
    client: &Client,
    fx: &Fixture,
    dir: &Path,
    ca: &Path,
    url: &str,
    pod: &str,
    audience: &str,
) -> TestResult<EndpointClient> {
    let token = shardring_e2e::tokens::pod_token(client, &fx.namespace, pod, audience).await?;
    let token_file = dir.join(format!("token-{pod}-{audience}"));
    std::fs::write(&token_file, token)?;
    let mut config = EndpointConfig::new(url);
    config.token_file = token_file;
    config.ca_file = ca.to_path_buf();
    Ok(EndpointClient::new(config)?)
}

/// The view at `epoch` or later (the first request for the group is
/// answered `Warming` while the leader prepares its views).
async fn view_at_least(
    client: &EndpointClient,
    fx: &Fixture,
    epoch: u64,
) -> TestResult<ViewResponse> {
    wait_for("an endpoint view", STEP_TIMEOUT, || {
        let client = client.clone();
        async move {
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                match client
                    .view(&fx.namespace, &fx.name, 0, Duration::ZERO)
                    .await
                {
                    Ok((view, _)) if view.view.epoch >= epoch => Probe::Done(view),
                    Ok((view, _)) => Probe::Pending(format!("epoch {}", view.view.epoch)),
                    Err(error) => Probe::Pending(error.to_string()),
                },
            )
        }
    })
    .await
    .map_err(Into::into)
}
