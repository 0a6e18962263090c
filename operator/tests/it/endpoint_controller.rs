//! The controller's side of the consumer endpoint, through `run_controller`
//! against the TLS mock API server, where a test needs what only the mock
//! gives: every write failing (a new Ready pod is still served from the pod
//! cache before any reconcile could publish it), and the count of the CA
//! ConfigMap's writes (losing the leadership forgets the endpoint state,
//! regaining it publishes the CA again). That an acknowledged release
//! activates the shard on its next owner at once is checked on the real
//! control plane (the e2e crate's `endpoint_release`).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use shardring::GroupKey;
use shardring::controller::{
    Context, ControllerConfig, ControllerMetrics, WatchScope, run_controller,
};
use shardring::endpoint::{Caller, EndpointState, Lookup};
use shardring_crds::endpoint::{ReleaseRequest, ViewResponse};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_devkit::fixtures;
use tokio_util::sync::CancellationToken;

const NS: &str = "shop";
const CA: &str = "-----BEGIN CERTIFICATE-----\ntest-ca\n-----END CERTIFICATE-----\n";

fn ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 1, 0, 7))
}

/// The pod's served view, read as a consumer would get it.
fn view(endpoint: &EndpointState, pod: &str, uid: &str) -> Result<ViewResponse, String> {
    let caller = Caller {
        pod,
        uid,
        peer: Some(ip()),
    };
    match endpoint.directory.lookup(&GroupKey::new(NS, "g"), caller) {
        Lookup::Found(view) => Ok(serde_json::from_slice(&view.borrow().body).unwrap()),
        other => Err(format!("{other:?}")),
    }
}

async fn wait_until<T>(what: &str, mut done: impl FnMut() -> Result<T, String>) -> T {
    let started = Instant::now();
    loop {
        match done() {
            Ok(value) => return value,
            Err(last) if started.elapsed() > Duration::from_secs(20) => {
                panic!("timed out waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn uid_of(mock: &MockApiServer, pod: &str) -> String {
    let pod = mock.get("v1", "Pod", Some(NS), pod).expect("pod");
    pod["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// A static group of 4 shards (drain timeout 60 s) over pods `a` and `b`,
/// and the controller running on it with `endpoint` (and `leader`, when
/// given); returns the mock, the pods' uids and the controller's task.
async fn start(
    endpoint: &EndpointState,
    leader: Option<tokio::sync::watch::Receiver<bool>>,
    shutdown: &CancellationToken,
) -> (MockApiServer, (String, String), tokio::task::JoinHandle<()>) {
    start_group(endpoint, leader, shutdown, |_| ()).await
}

/// [`start`], with the group changed by `customize` first.
async fn start_group(
    endpoint: &EndpointState,
    leader: Option<tokio::sync::watch::Receiver<bool>>,
    shutdown: &CancellationToken,
    customize: impl FnOnce(&mut serde_json::Value),
) -> (MockApiServer, (String, String), tokio::task::JoinHandle<()>) {
    let mock = MockApiServer::start(MockOptions::default()).await;
    mock.create_many(fixtures::crds());
    let mut group = fixtures::static_group(NS, "g", "p", 4);
    group["spec"]["handoff"]["drainTimeout"] = json!("60s");
    customize(&mut group);
    let since = "2026-01-01T00:00:00Z";
    let mut objects = vec![
        fixtures::namespace(NS),
        fixtures::pool(NS, "p", "consumer"),
        group,
    ];
    for name in ["a", "b"] {
        let mut pod = fixtures::ready_pod(NS, name, "consumer", since);
        pod["status"]["podIP"] = json!(ip().to_string());
        objects.push(pod);
    }
    mock.create_many(objects);
    let uids = (uid_of(&mock, "a"), uid_of(&mock, "b"));
    endpoint.ca.send_replace(Some(Arc::from(CA)));
    let mut context = Context::builder(mock.client().await, ControllerMetrics::default())
        .publish_events(None)
        .endpoint(endpoint.clone());
    if let Some(leader) = leader {
        context = context.leader(leader);
    }
    let run = tokio::spawn(run_controller(
        context,
        ControllerConfig {
            scope: WatchScope::of([NS.to_owned()]),
            watch_nodes: false,
            ..ControllerConfig::default()
        },
        None,
        shutdown.clone(),
    ));
    (mock, uids, run)
}

/// A pod that turns up Ready with its IP is served from the operator's pod
/// cache before any reconcile has published it: here no reconcile can (every
/// write fails), and the new pod still gets a view at the document's epoch,
/// while a pod the pool does not select is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ready_pod_is_served_from_the_pod_cache_before_a_reconcile_publishes_it() {
    let endpoint = EndpointState::default();
    let shutdown = CancellationToken::new();
    let (mock, (ua, _), run) = start(&endpoint, None, &shutdown).await;
    let first = wait_until("a's view served", || {
        let a = view(&endpoint, "a", &ua)?;
        (a.view.active.len() == 2)
            .then_some(a)
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    mock.fail_next("PATCH", "", 500, 1_000_000);
    mock.fail_next("PUT", "", 500, 1_000_000);
    let mut pod = fixtures::ready_pod(NS, "c", "consumer", "2026-01-01T00:00:00Z");
    pod["status"]["podIP"] = json!(ip().to_string());
    mock.create(pod);
    let mut stranger = fixtures::ready_pod(NS, "s", "other-app", "2026-01-01T00:00:00Z");
    stranger["status"]["podIP"] = json!(ip().to_string());
    mock.create(stranger);
    let uc = uid_of(&mock, "c");
    let c = wait_until("c's view", || view(&endpoint, "c", &uc)).await;
    assert!(c.view.epoch >= first.view.epoch, "the document's epoch");
    assert!(c.view.active.is_empty());
    let us = uid_of(&mock, "s");
    assert_eq!(view(&endpoint, "s", &us).unwrap_err(), "NotMember");
    shutdown.cancel();
    run.await.unwrap();
}

/// A replica that stops leading forgets the views and the releases (a later
/// leader starts from its own cycles); leading again reconciles every
/// group, which serves the views once a pod asks. The CA ConfigMap is kept
/// true against the cache, not a memory of writes: still true, it is not
/// written again; deleted, it is written back, owned by the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_leadership_forgets_the_endpoint_state_and_regaining_it_rebuilds_it() {
    let endpoint = EndpointState::default();
    let shutdown = CancellationToken::new();
    let (leading, leader) = tokio::sync::watch::channel(true);
    let (mock, (ua, _), run) = start(&endpoint, Some(leader), &shutdown).await;
    let served = wait_until("a's view served", || view(&endpoint, "a", &ua)).await;
    assert!(served.view.epoch > 0);
    let key = GroupKey::new(NS, "g");
    let ca_writes = || mock.count("PATCH", "/configmaps/shardring-endpoint-ca");
    wait_until("the CA published", || {
        (ca_writes() == 1)
            .then_some(())
            .ok_or_else(|| ca_writes().to_string())
    })
    .await;

    leading.send_replace(false);
    wait_until("the endpoint state forgotten", || {
        match endpoint.directory.lookup(
            &key,
            Caller {
                pod: "a",
                uid: &ua,
                peer: Some(ip()),
            },
        ) {
            Lookup::UnknownGroup => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let release = ReleaseRequest {
        shard: served.view.active[0].clone(),
        epoch: served.view.epoch,
        checkpoint: None,
    };
    let refused = endpoint
        .releases
        .submit(&key, "a", &ua, &release, jiff::Timestamp::now())
        .unwrap_err();
    assert_eq!(refused.reason(), "UnknownShardGroup", "{refused}");

    leading.send_replace(true);
    let again = wait_until("a's view served again", || view(&endpoint, "a", &ua)).await;
    assert_eq!(again.view, served.view);
    assert!(mock.delete(("v1", "ConfigMap"), Some(NS), "shardring-endpoint-ca"));
    wait_until("the deleted CA written back", || {
        (ca_writes() == 2)
            .then_some(())
            .ok_or_else(|| ca_writes().to_string())
    })
    .await;
    let written = mock
        .get("v1", "ConfigMap", Some(NS), "shardring-endpoint-ca")
        .expect("the CA ConfigMap");
    assert_eq!(written["data"]["ca.crt"], CA);
    assert_eq!(
        written["metadata"]["ownerReferences"][0]["kind"],
        "ShardGroup"
    );
    assert_eq!(written["metadata"]["ownerReferences"][0]["name"], "g");

    shutdown.cancel();
    run.await.unwrap();
}

/// A revoke is acknowledged as soon as the document that carries it is
/// written, not only once the cycle's annotations and status are written
/// too (when the endpoint serves the views): a consumer that watches the
/// ConfigMap sees the revoke at once and releases, and a `FutureEpoch`
/// answer made it back off on every handoff. Here every pod write fails, so
/// the cycle that writes the revoke never gets past its annotations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_is_acknowledged_once_its_document_is_written_before_the_annotations() {
    let endpoint = EndpointState::default();
    let shutdown = CancellationToken::new();
    let (mock, (ua, ub), run) = start_group(&endpoint, None, &shutdown, |group| {
        group["spec"]["rebalance"]["delay"] = json!("0s");
    })
    .await;
    wait_until("a's view served", || {
        let a = view(&endpoint, "a", &ua)?;
        (a.view.active.len() == 2)
            .then_some(())
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    mock.fail_next("PATCH", "/pods/", 500, 1_000_000);
    let mut pod = fixtures::ready_pod(NS, "c", "consumer", "2026-01-01T00:00:00Z");
    pod["status"]["podIP"] = json!(ip().to_string());
    mock.create(pod);
    let (document, shard, owner) = wait_until("a revoke in the written document", || {
        let cm = mock
            .get("v1", "ConfigMap", Some(NS), "g-assignment")
            .ok_or("no document")?;
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(cm).map_err(|e| e.to_string())?;
        let document = shardring_core::codec::decode(&cm).map_err(|e| e.to_string())?;
        let revoking = document
            .shards
            .iter()
            .find(|(_, r)| r.state == shardring_crds::ShardPhase::Revoking)
            .map(|(id, r)| (id.clone(), r.owner.clone().unwrap()));
        match revoking {
            Some((shard, owner)) => Ok((document, shard, owner)),
            None => Err(format!("epoch {} revokes nothing", document.epoch)),
        }
    })
    .await;
    let uid = if owner == "a" { &ua } else { &ub };
    let release = ReleaseRequest {
        shard: shard.clone(),
        epoch: document.epoch,
        checkpoint: None,
    };
    let outcome = endpoint
        .releases
        .submit(
            &GroupKey::new(NS, "g"),
            &owner,
            uid,
            &release,
            jiff::Timestamp::now(),
        )
        .unwrap_or_else(|refused| panic!("the release of {shard} by {owner}: {refused}"));
    assert_eq!(outcome, shardring_crds::endpoint::ReleaseOutcome::Accepted);
    let served = view(&endpoint, &owner, uid).unwrap();
    assert!(
        served.view.epoch < document.epoch,
        "the view waits for the annotations: served epoch {}, document epoch {}",
        served.view.epoch,
        document.epoch
    );
    shutdown.cancel();
    run.await.unwrap();
}

/// A release accepted while the cycle that revoked the shard is still
/// writing asks for the next reconcile, which grants the shard to its new
/// owner; that reconcile cannot start before the revoking one ends. So the
/// revoking cycle leaves its status to it rather than make the handoff wait
/// for a status write the next cycle makes anyway: between the document
/// that revokes and the one that grants, the group's status is not
/// written, and it is written after. Every request here is answered
/// 300 ms late, so the release arrives while the revoke's annotations are
/// being written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_the_revoking_cycle_leaves_its_status_to_the_granting_one() {
    let endpoint = EndpointState::default();
    let shutdown = CancellationToken::new();
    let (mock, (ua, ub), run) = start_group(&endpoint, None, &shutdown, |group| {
        group["spec"]["rebalance"]["delay"] = json!("0s");
    })
    .await;
    wait_until("both views served", || {
        let (a, b) = (view(&endpoint, "a", &ua)?, view(&endpoint, "b", &ub)?);
        (a.view.active.len() == 2 && b.view.active.len() == 2)
            .then_some(())
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    let slow_from = Instant::now();
    mock.set_request_delay(Duration::from_millis(300));
    let mut pod = fixtures::ready_pod(NS, "c", "consumer", "2026-01-01T00:00:00Z");
    pod["status"]["podIP"] = json!(ip().to_string());
    mock.create(pod);
    let (document, shard, owner) = wait_until("a revoke in the written document", || {
        let cm = mock
            .get("v1", "ConfigMap", Some(NS), "g-assignment")
            .ok_or("no document")?;
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(cm).map_err(|e| e.to_string())?;
        let document = shardring_core::codec::decode(&cm).map_err(|e| e.to_string())?;
        let revoking = document
            .shards
            .iter()
            .find(|(_, r)| r.state == shardring_crds::ShardPhase::Revoking)
            .map(|(id, r)| (id.clone(), r.owner.clone().unwrap()));
        match revoking {
            Some((shard, owner)) => Ok((document, shard, owner)),
            None => Err(format!("epoch {} revokes nothing", document.epoch)),
        }
    })
    .await;
    let uid = if owner == "a" { &ua } else { &ub };
    let release = ReleaseRequest {
        shard: shard.clone(),
        epoch: document.epoch,
        checkpoint: None,
    };
    // As a consumer does: a document the store has not synced yet is
    // answered `FutureEpoch`, and retried.
    let group = GroupKey::new(NS, "g");
    wait_until("the release accepted", || {
        endpoint
            .releases
            .submit(&group, &owner, uid, &release, jiff::Timestamp::now())
            .map_err(|refused| refused.to_string())
    })
    .await;
    let granted = wait_until("the shard granted to its new owner", || {
        let cm = mock
            .get("v1", "ConfigMap", Some(NS), "g-assignment")
            .ok_or("no document")?;
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(cm).map_err(|e| e.to_string())?;
        let document = shardring_core::codec::decode(&cm).map_err(|e| e.to_string())?;
        let record = &document.shards[&shard];
        (record.state == shardring_crds::ShardPhase::Active && record.owner.as_deref() == Some("c"))
            .then_some(document.epoch)
            .ok_or_else(|| format!("epoch {}: {record:?}", document.epoch))
    })
    .await;
    let epoch_of_status = || {
        let group = mock.get("shardring.io/v1alpha1", "ShardGroup", Some(NS), "g");
        group
            .and_then(|g| g["status"]["epoch"].as_u64())
            .unwrap_or(0)
    };
    wait_until("the status written at the granting epoch", || {
        let epoch = epoch_of_status();
        (epoch >= granted)
            .then_some(())
            .ok_or_else(|| format!("status epoch {epoch}"))
    })
    .await;
    let writes: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.at >= slow_from && r.method != "GET")
        .filter(|r| {
            r.path.ends_with("/configmaps/g-assignment")
                || r.path.ends_with("/shardgroups/g/status")
        })
        .map(|r| {
            let what = if r.path.ends_with("/status") {
                "status"
            } else {
                "document"
            };
            what.to_owned()
        })
        .collect();
    let documents: Vec<usize> = (0..writes.len())
        .filter(|&i| writes[i] == "document")
        .collect();
    assert!(
        documents.len() >= 2,
        "the revoke and the grant were written: {writes:?}"
    );
    assert!(
        writes[documents[0]..documents[1]]
            .iter()
            .all(|w| w == "document"),
        "no status write between the revoking document and the granting one: {writes:?}"
    );
    assert!(
        writes[documents[1]..].iter().any(|w| w == "status"),
        "the status is written after the grant: {writes:?}"
    );
    shutdown.cancel();
    run.await.unwrap();
}
