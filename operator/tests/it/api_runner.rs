//! The controller's watch wiring (`run_controller`) against a mocked API
//! server: it lists ShardGroups, ConsumerPools, Pods and only the ConfigMaps
//! shardring manages, in the configured namespace, skips Nodes when told to;
//! a listed ShardGroup is reconciled into a published ConfigMap and pod
//! annotations; a standby replica writes nothing until it becomes leader;
//! shutdown ends the run. Watches are left pending (no events), so what the
//! controller does comes from the initial lists alone.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use http::Response;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use shardring::controller::{
    Context, ContextBuilder, ControllerConfig, ControllerMetrics, WatchScope, run_controller,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::controller_support::mock_api::{Requests, Seen, json_response, recording_client};
use shardring_core::fixtures::*;

/// A mock API server holding one ShardGroup, its pool and three ready pods.
/// Lists answer with those; watches never answer (no events); writes echo
/// what they were sent, as the API server returns the stored object.
fn mock_api() -> (Client, Requests) {
    recording_client(NS, |method, seen| {
        if seen.query.split('&').any(|p| p == "watch=true") {
            return None;
        }
        Some(respond(method, &seen.path, &seen.body))
    })
}

fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"resourceVersion": "10"},
        "items": items,
    })
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap()
}

fn respond(method: &http::Method, path: &str, body: &Value) -> Response<Body> {
    let value = if method == http::Method::GET {
        if path.ends_with("/shardgroups") {
            let mut g = to_json(&group(4));
            g["apiVersion"] = json!("shardring.io/v1alpha1");
            g["kind"] = json!("ShardGroup");
            list("shardring.io/v1alpha1", "ShardGroupList", vec![g])
        } else if path.ends_with("/consumerpools") {
            let mut p = to_json(&pool(0));
            p["apiVersion"] = json!("shardring.io/v1alpha1");
            p["kind"] = json!("ConsumerPool");
            list("shardring.io/v1alpha1", "ConsumerPoolList", vec![p])
        } else if path.ends_with("/pods") {
            let pods = ["a", "b", "c"]
                .iter()
                .map(|n| to_json(&pod(&format!("consumer-{n}"), true, None)))
                .collect();
            list("v1", "PodList", pods)
        } else if path.ends_with("/configmaps") {
            list("v1", "ConfigMapList", Vec::new())
        } else if path.ends_with("/statefulsets") {
            list("apps/v1", "StatefulSetList", Vec::new())
        } else {
            panic!("unexpected list {path}")
        }
    } else if path.contains("/shardgroups/") {
        to_json(&group(4))
    } else if path.contains("/pods/") {
        let name = path.rsplit('/').next().unwrap();
        to_json(&pod(name, true, None))
    } else if path.contains("/configmaps") || path.ends_with("/events") {
        let mut echoed = body.clone();
        echoed["metadata"]["resourceVersion"] = json!("11");
        echoed
    } else {
        panic!("unexpected request {method} {path}")
    };
    json_response(200, &value)
}

/// The context of a controller on `client`, publishing Events as `test`.
fn context(client: Client) -> ContextBuilder {
    Context::builder(client, ControllerMetrics::default()).publish_events(Some("test".into()))
}

fn config() -> ControllerConfig {
    ControllerConfig {
        scope: WatchScope::of([NS.to_owned()]),
        watch_nodes: false,
        concurrency: 2,
        ..ControllerConfig::default()
    }
}

/// Waits (polling, at most 20 s) until `done` holds for the requests seen.
async fn wait_seen(seen: &Mutex<Vec<Seen>>, what: &str, done: impl Fn(&[Seen]) -> bool) {
    let started = Instant::now();
    loop {
        if done(&seen.lock()) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}; requests: {:#?}",
            seen.lock()
                .iter()
                .map(|s| format!("{} {}?{}", s.method, s.path, s.query))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the requests include the published document and an annotation
/// on every pod.
fn published(seen: &[Seen]) -> bool {
    let document = seen.iter().any(|s| {
        s.is_write()
            && s.path.contains(&format!("/namespaces/{NS}/configmaps"))
            && s.body.to_string().contains("orders-0")
    });
    let annotated = ["a", "b", "c"].iter().all(|n| {
        seen.iter().any(|s| {
            s.method == "PATCH"
                && s.path == format!("/api/v1/namespaces/{NS}/pods/consumer-{n}")
                && s.body["metadata"]["annotations"][KEY].is_string()
        })
    });
    document && annotated
}

#[tokio::test]
async fn listed_groups_are_reconciled_into_a_published_assignment() {
    let (client, seen) = mock_api();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(run_controller(
        context(client),
        config(),
        None,
        shutdown.clone(),
    ));
    wait_seen(&seen, "the document and three annotations", published).await;

    let requests = seen.lock().clone();
    let lists = |suffix: &str| {
        requests
            .iter()
            .filter(|s| s.method == "GET" && s.path.ends_with(suffix))
            .cloned()
            .collect::<Vec<_>>()
    };
    // Everything is namespaced to the configured namespace.
    assert!(
        !lists(&format!("/namespaces/{NS}/shardgroups")).is_empty(),
        "ShardGroups listed in {NS}"
    );
    assert!(!lists(&format!("/namespaces/{NS}/consumerpools")).is_empty());
    assert!(!lists(&format!("/namespaces/{NS}/pods")).is_empty());
    // Only the ShardGroups of its controller class (none: unlabelled ones).
    let groups = lists(&format!("/namespaces/{NS}/shardgroups"));
    assert!(
        groups.iter().all(|s| s
            .query
            .contains("labelSelector=%21shardring.io%2Fcontroller-class")),
        "{:?}",
        groups.iter().map(|s| &s.query).collect::<Vec<_>>()
    );
    // Only the ConfigMaps shardring manages are watched.
    let cms = lists(&format!("/namespaces/{NS}/configmaps"));
    assert!(!cms.is_empty());
    assert!(
        cms.iter().all(|s| s
            .query
            .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dshardring")),
        "{:?}",
        cms.iter().map(|s| &s.query).collect::<Vec<_>>()
    );
    // No cluster-wide reads, and no Nodes when zones are not wanted.
    assert!(
        requests
            .iter()
            .all(|s| s.path.contains(&format!("/namespaces/{NS}/"))),
        "{:?}",
        requests.iter().map(|s| &s.path).collect::<Vec<_>>()
    );
    // The status reports the published epoch.
    wait_seen(&seen, "a status patch", |seen| {
        seen.iter()
            .any(|s| s.method == "PATCH" && s.path.ends_with("/shardgroups/orders/status"))
    })
    .await;

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the controller stops on shutdown")
        .expect("the controller task did not panic");
}

#[tokio::test]
async fn a_standby_writes_nothing_until_it_leads() {
    let (client, seen) = mock_api();
    let shutdown = CancellationToken::new();
    let (leading, leader) = watch::channel(false);
    let run = tokio::spawn(run_controller(
        context(client).leader(leader),
        config(),
        None,
        shutdown.clone(),
    ));
    // The standby watches (its caches stay warm)...
    wait_seen(&seen, "the standby's lists", |seen| {
        ["shardgroups", "consumerpools", "pods", "configmaps"]
            .iter()
            .all(|r| {
                seen.iter()
                    .any(|s| s.method == "GET" && s.path.ends_with(r))
            })
    })
    .await;
    // ...and a reconcile runs for the listed group, but writes nothing. Give
    // it the time several reconciles take on this machine.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes: Vec<String> = seen
        .lock()
        .iter()
        .filter(|s| s.is_write())
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert!(writes.is_empty(), "a standby wrote: {writes:?}");

    leading.send(true).unwrap();
    wait_seen(&seen, "the new leader's publish", published).await;

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the controller stops on shutdown")
        .expect("the controller task did not panic");
}
