//! The document write and its failures: a failed write is retried with
//! backoff and reported once; a 409 on the conditioned apply or on the
//! first create stops the reconcile before anything that depends on the
//! document, and conflicts are retried quietly first; a lost ConfigMap is
//! recreated from the annotations; the update replaces the key of the other
//! encoding and keeps what others set on the ConfigMap.

use std::sync::Arc;
use std::time::Duration;

use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use shardring::controller::{Context, ControllerMetrics, reconcile};
use shardring::crds::PodView;

use super::asserts::{EVENTS_PATH, STATUS_PATH, assert_configmap_create, assert_configmap_update};
use super::harness::{
    SETTLED_VERSION, reconcile_answering, reconcile_once, settle, settled_with_a_joining_pod,
    three_pods, world,
};
use super::mock::{CmAnswer, mock_client_with};
use shardring_core::fixtures::*;

#[tokio::test]
async fn a_failed_write_is_retried_with_backoff_and_reported_once() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let (client, seen) = mock_client_with(group.clone(), CmAnswer::Fail);
    let ctx = Arc::new(
        Context::builder(client, ControllerMetrics::default())
            .publish_events(None)
            .clock(Arc::new(now))
            .build(world.stores.clone()),
    );
    let obj = Arc::new(DeserializeGuard(Ok(group)));
    let error = reconcile(obj.clone(), ctx.clone())
        .await
        .expect_err("the ConfigMap write fails");
    assert_eq!(error.metric_label(), "ConfigMapWrite");
    let first = shardring::controller::error_policy(obj.clone(), &error, ctx.clone());
    let second = shardring::controller::error_policy(obj.clone(), &error, ctx.clone());
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(2))
    );
    assert_eq!(
        second,
        kube::runtime::controller::Action::requeue(Duration::from_secs(4))
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let seen = seen.lock().clone();
    // The failed apply stopped the reconcile: no annotation or status write.
    assert_eq!(
        seen.iter()
            .filter(|s| s.path.contains("/configmaps"))
            .count(),
        1
    );
    assert!(
        !seen
            .iter()
            .any(|s| s.path.contains("/pods/") || s.path == STATUS_PATH),
        "{seen:#?}"
    );
    let events: Vec<_> = seen.iter().filter(|s| s.path == EVENTS_PATH).collect();
    assert_eq!(events.len(), 1, "one Warning for the streak: {events:#?}");
    assert_eq!(events[0].body["type"], "Warning");
    assert_eq!(events[0].body["reason"], "ConfigMapWrite");
}

#[tokio::test]
async fn a_conflict_on_the_update_stops_the_reconcile_before_anything_depending_on_it() {
    let (group, world) = settled_with_a_joining_pod().await;
    let (result, seen) = reconcile_answering(&group, &world.stores, CmAnswer::Conflict).await;
    let error = result.expect_err("the update's precondition failed");
    assert_eq!(error.metric_label(), "ConfigMapConflict");
    let message = error.to_string();
    assert!(
        message.contains("orders-assignment")
            && message.contains("resourceVersion 42")
            && message.contains("409 Conflict"),
        "{message}"
    );
    // Only the refused update: no annotation (the revokes must not run ahead
    // of the document), no status, no Event from the reconcile itself.
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_configmap_update(&seen[0], SETTLED_VERSION);
}

#[tokio::test]
async fn a_conflict_on_the_first_create_stops_the_reconcile() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let (result, seen) = reconcile_answering(&group, &world.stores, CmAnswer::Conflict).await;
    let error = result.expect_err("another write created the ConfigMap");
    assert_eq!(error.metric_label(), "ConfigMapConflict");
    assert!(error.to_string().contains("409 AlreadyExists"), "{error}");
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_configmap_create(&seen[0]);
}

#[tokio::test]
async fn conflicts_are_retried_quietly_then_with_backoff_and_one_warning() {
    let (group, world) = settled_with_a_joining_pod().await;
    let (client, seen) = mock_client_with(group.clone(), CmAnswer::Conflict);
    let metrics = ControllerMetrics::default();
    let ctx = Arc::new(
        Context::builder(client, metrics)
            .publish_events(None)
            .clock(Arc::new(now))
            .build(world.stores.clone()),
    );
    let obj = Arc::new(DeserializeGuard(Ok(group)));
    let error = reconcile(obj.clone(), ctx.clone()).await.unwrap_err();
    let delays: Vec<_> = (0..5)
        .map(|_| shardring::controller::error_policy(obj.clone(), &error, ctx.clone()))
        .collect();
    let requeue = kube::runtime::controller::Action::requeue;
    // A stale cache: three quick, quiet retries; then a real streak.
    assert_eq!(
        delays,
        [
            requeue(Duration::from_millis(500)),
            requeue(Duration::from_millis(500)),
            requeue(Duration::from_millis(500)),
            requeue(Duration::from_secs(2)),
            requeue(Duration::from_secs(4)),
        ]
    );
    let label = shardring::controller::metrics::ReasonLabel {
        reason: "ConfigMapConflict",
    };
    assert_eq!(ctx.metrics.errors.get_or_create(&label).get(), 5);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let events: Vec<_> = seen
        .lock()
        .iter()
        .filter(|s| s.path == EVENTS_PATH)
        .cloned()
        .collect();
    assert_eq!(
        events.len(),
        1,
        "one Warning, past the quiet retries: {events:#?}"
    );
    assert_eq!(events[0].body["reason"], "ConfigMapConflict");
}

#[tokio::test]
async fn a_lost_configmap_is_recreated_from_the_annotations_with_a_create() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let before: Vec<PodView> = world
        .pods
        .values()
        .map(|p| serde_json::from_str(&p.metadata.annotations.as_ref().unwrap()[KEY]).unwrap())
        .collect();
    let cm = (*world.stores.config_maps.state()[0]).clone();
    world
        .config_maps
        .apply_watcher_event(&watcher::Event::Delete(cm));
    let seen = reconcile_once(&group, &world.stores).await;
    let doc = assert_configmap_create(&seen[0]);
    assert!(doc.epoch > 1, "the epoch continues: {}", doc.epoch);
    for view in before {
        assert!(
            doc.pods.values().any(|p| p.active == view.active),
            "every pod keeps its shards: {view:?} in {doc:#?}"
        );
    }
}

#[tokio::test]
async fn the_update_replaces_the_other_encodings_key_and_keeps_what_others_set() {
    let (group, mut world) = settled_with_a_joining_pod().await;
    // The create wrote the plain key; a gzip key of an older write and
    // another writer's label and key are there too.
    let mut cm = (*world.stores.config_maps.state()[0]).clone();
    cm.binary_data = Some(
        [(
            "assignment.json.gz".to_owned(),
            k8s_openapi::ByteString(b"stale".to_vec()),
        )]
        .into(),
    );
    cm.data
        .get_or_insert_default()
        .insert("notes".into(), "kept".into());
    cm.metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "orders".into());
    world
        .config_maps
        .apply_watcher_event(&watcher::Event::Apply(cm));
    let (result, seen) = reconcile_answering(&group, &world.stores, CmAnswer::Written).await;
    result.expect("reconcile succeeded");
    let body = &seen[0].body;
    assert_eq!(seen[0].method, "PUT");
    assert_eq!(body["metadata"]["resourceVersion"], SETTLED_VERSION);
    assert!(
        body.get("binaryData").is_none(),
        "the stale key went: {body}"
    );
    assert!(body["data"]["assignment.json"].is_string());
    assert_eq!(body["data"]["notes"], "kept");
    assert_eq!(body["metadata"]["labels"]["team"], "orders");
    assert!(
        seen[1].path.contains("/pods/"),
        "one ConfigMap request, then the annotations: {seen:#?}"
    )
}
