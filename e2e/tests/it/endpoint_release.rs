//! The controller's side of the consumer endpoint on the real cluster
//! (moved here from the operator's tests against the mock API server: it
//! needs no fault): `run_controller` in-process with an endpoint state, over
//! a static group of 4 shards (drain timeout 60 s) and two Ready pods. After
//! the first reconcile both pods' views are in the endpoint's directory and
//! the endpoint's CA is published in the group's namespace; a pod turned
//! NotReady has its shards revoked; a release acknowledged at an older epoch
//! is refused, one at the revoke's epoch activates the shard on its next
//! owner at once with the checkpoint handed over, and the shard whose owner
//! did not acknowledge stays revoking. Without a cluster it prints
//! `SKIPPED: ...` and passes.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{Api, Client};
use serde_json::json;
use shardring::GroupKey;
use shardring::controller::{Context, ControllerConfig, ControllerMetrics, run_controller};
use shardring::endpoint::{Caller, EndpointState, Lookup};
use shardring_crds::endpoint::{
    CA_CONFIGMAP_KEY, CA_CONFIGMAP_NAME, ReleaseOutcome, ReleaseRequest, ViewResponse,
};
use shardring_e2e::harness::CONTROLLER_CLASS;
use tokio_util::sync::CancellationToken;

use crate::kit_group::{
    GROUP, TestResult, in_fresh_namespace, install, ready_status, set_status, wait_until,
};

const CA: &str = "-----BEGIN CERTIFICATE-----\ntest-ca\n-----END CERTIFICATE-----\n";
const WAIT: Duration = Duration::from_secs(30);

fn ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 1, 0, 7))
}

/// The pod's served view, read as a consumer would get it.
fn view(
    endpoint: &EndpointState,
    key: &GroupKey,
    pod: &str,
    uid: &str,
) -> Result<ViewResponse, String> {
    let caller = Caller {
        pod,
        uid,
        peer: Some(ip()),
    };
    match endpoint.directory.lookup(key, caller) {
        Lookup::Found(view) => {
            serde_json::from_slice(&view.borrow().body).map_err(|e| e.to_string())
        }
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_release_activates_the_next_owner_at_once() {
    in_fresh_namespace("endpoint-release", "release", scenario).await;
}

async fn scenario(client: &Client, namespace: &str) -> TestResult {
    // Cancelled when the scenario ends, also early on a failure.
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let uids = install(client, namespace, 4, "60s", &["a", "b"], ip()).await?;
    let (ua, ub) = (uids["a"].clone(), uids["b"].clone());
    let endpoint = EndpointState::default();
    endpoint.ca.send_replace(Some(Arc::from(CA)));
    let context = Context::builder(client.clone(), ControllerMetrics::default())
        .publish_events(None)
        .endpoint(endpoint.clone());
    let run = tokio::spawn(run_controller(
        context,
        ControllerConfig {
            scope: shardring::controller::WatchScope::of([namespace.to_owned()]),
            controller_class: Some(CONTROLLER_CLASS.to_owned()),
            watch_nodes: false,
            ..ControllerConfig::default()
        },
        None,
        shutdown.clone(),
    ));
    let key = GroupKey::new(namespace, GROUP);

    // Published: both pods' views are served, two shards each.
    let first = wait_until("both views served", WAIT, || async {
        let (a, b) = (
            view(&endpoint, &key, "a", &ua)?,
            view(&endpoint, &key, "b", &ub)?,
        );
        if a.view.active.len() == 2 && b.view.active.len() == 2 {
            Ok(a)
        } else {
            Err(format!("a {:?}, b {:?}", a.view, b.view))
        }
    })
    .await?;
    assert!(first.view.epoch > 0);
    assert_eq!(first.shard_group, format!("{namespace}/{GROUP}"));
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    wait_until("the CA published in the namespace", WAIT, || async {
        let cm = config_maps
            .get_opt(CA_CONFIGMAP_NAME)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no ConfigMap yet")?;
        let data = cm.data.unwrap_or_default();
        (data.get(CA_CONFIGMAP_KEY).map(String::as_str) == Some(CA))
            .then_some(())
            .ok_or_else(|| format!("{data:?}"))
    })
    .await?;

    // `a` turns NotReady: its two shards are revoked, and stay so for the
    // drain timeout unless `a` acknowledges.
    let mut status = ready_status(&jiff::Timestamp::now().to_string(), ip());
    status["conditions"][0]["status"] = json!("False");
    set_status(
        &Api::<Pod>::namespaced(client.clone(), namespace),
        "a",
        status,
    )
    .await?;
    let revoked = wait_until("a's view revokes its shards", WAIT, || async {
        let a = view(&endpoint, &key, "a", &ua)?;
        if a.view.revoking.len() == 2 && a.view.active.is_empty() {
            Ok(a)
        } else {
            Err(format!("{:?}", a.view))
        }
    })
    .await?;
    let (acked, other) = (&revoked.view.revoking[0], &revoked.view.revoking[1]);

    let stale = ReleaseRequest {
        shard: acked.clone(),
        epoch: first.view.epoch,
        checkpoint: None,
    };
    let refused = endpoint
        .releases
        .submit(&key, "a", &ua, &stale, jiff::Timestamp::now())
        .expect_err("a release at an older epoch");
    assert_eq!(refused.reason(), "StaleEpoch", "{refused}");

    let release = ReleaseRequest {
        shard: acked.clone(),
        epoch: revoked.view.epoch,
        checkpoint: Some("offset-1234".into()),
    };
    let acked_at = Instant::now();
    let outcome = endpoint
        .releases
        .submit(&key, "a", &ua, &release, jiff::Timestamp::now())?;
    assert_eq!(outcome, ReleaseOutcome::Accepted);
    let b = wait_until("the acknowledged shard active on b", WAIT, || async {
        let b = view(&endpoint, &key, "b", &ub)?;
        if b.view.active.contains(acked) {
            Ok(b)
        } else {
            Err(format!("{:?}", b.view))
        }
    })
    .await?;
    let activation = acked_at.elapsed();
    assert!(
        activation < Duration::from_secs(10),
        "activated {activation:?} after the ack, against a 60 s drain timeout"
    );
    assert_eq!(
        b.checkpoints.get(acked).map(String::as_str),
        Some("offset-1234")
    );
    assert!(
        !b.view.active.contains(other),
        "the unacknowledged shard waits"
    );
    let a = view(&endpoint, &key, "a", &ua)?;
    assert_eq!(a.view.revoking, std::slice::from_ref(other));
    // The same release again is a duplicate, also now that it completed.
    let again = endpoint
        .releases
        .submit(&key, "a", &ua, &release, jiff::Timestamp::now())?;
    assert_eq!(again, ReleaseOutcome::Duplicate);
    eprintln!(
        "endpoint-release: ack → activation on b: {:.0} ms",
        activation.as_secs_f64() * 1e3
    );

    shutdown.cancel();
    run.await?;
    Ok(())
}
