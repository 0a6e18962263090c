//! Publishing: the first publish (ConfigMap create, then the annotations,
//! then status and an Event), a joining pod and a leaving pod (only the
//! pods whose views change are patched), a missing pool (status and a
//! warning only), and a pod deleted before its patch.

use kube::runtime::reflector;
use serde_json::json;
use shardring::controller::Stores;

use super::asserts::{
    STATUS_PATH, assert_annotation_patch, assert_configmap_create, assert_configmap_update,
    assert_event, assert_status_apply, condition, writes,
};
use super::harness::{
    SETTLED_VERSION, reconcile_once, settle, settled_with_a_joining_pod, three_pods, world,
};
use shardring_core::fixtures::*;

#[tokio::test]
async fn first_publish_creates_the_configmap_then_annotations_then_status() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let seen = reconcile_once(&group, &world.stores).await;
    assert_eq!(seen.len(), 1 + 3 + 1 + 1, "{seen:#?}");
    let doc = assert_configmap_create(&seen[0]);
    assert_eq!((doc.epoch, doc.shards.len(), doc.pods.len()), (1, 6, 3));
    for (i, s) in seen[1..4].iter().enumerate() {
        let pod = format!("consumer-{i}");
        let view = assert_annotation_patch(s, &pod).expect("a view");
        assert_eq!(view.epoch, 1);
        assert_eq!(view.active, doc.pods[&pod].active);
        assert_eq!(view.active.len(), 2);
    }
    let status = assert_status_apply(&seen[4]);
    assert_eq!(status["epoch"], 1);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["load"], "2/2");
    assert_eq!(status["shards"]["total"], 6);
    assert_eq!(status["pods"], json!({"selected": 3, "eligible": 3}));
    let ready = condition(&status, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("Published"))
    );
    assert_eq!(ready["lastTransitionTime"], "2026-11-21T12:00:00Z");
    assert_event(&seen[5], "Published");
}

#[tokio::test]
async fn a_joining_pod_writes_the_configmap_and_only_the_changed_pods() {
    let (group, world) = settled_with_a_joining_pod().await;
    let seen = reconcile_once(&group, &world.stores).await;
    let doc = assert_configmap_update(&seen[0], SETTLED_VERSION);
    assert_eq!(doc.epoch, 2);
    // First phase of the moves: revoked from the donors, not yet on the new pod.
    assert!(!doc.pods.contains_key("consumer-3"));
    let moving: usize = doc.pods.values().map(|p| p.revoking.len()).sum();
    assert!(moving >= 1);
    let pod_writes: Vec<_> = seen.iter().filter(|s| s.path.contains("/pods/")).collect();
    assert_eq!(pod_writes.len(), moving, "only the donors: {pod_writes:#?}");
    for s in &pod_writes {
        let pod = s.path.rsplit('/').next().unwrap();
        let view = assert_annotation_patch(s, pod).unwrap();
        assert_eq!(
            (view.epoch, &view.active, &view.revoking),
            (2, &doc.pods[pod].active, &doc.pods[pod].revoking)
        );
    }
    assert_eq!(assert_status_apply(&seen[seen.len() - 2])["epoch"], 2);
    assert_event(&seen[seen.len() - 1], "Published");
    assert_eq!(writes(&seen).len(), seen.len());
}

#[tokio::test]
async fn a_pod_leaving_the_pool_loses_its_annotation() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let mut leaving = world.pods["consumer-1"].clone();
    leaving.metadata.labels = Some([("app".to_owned(), "other".to_owned())].into());
    world.apply_pod(leaving);
    let seen = reconcile_once(&group, &world.stores).await;
    let doc = assert_configmap_update(&seen[0], SETTLED_VERSION);
    assert_eq!(doc.epoch, 2);
    // It keeps its annotation until it gave its two shards back: they are
    // revoked from it first (two-phase handoff), nobody else has them yet.
    assert!(doc.pods["consumer-1"].active.is_empty());
    assert_eq!(doc.pods["consumer-1"].revoking.len(), 2);
    let patch = seen
        .iter()
        .find(|s| s.path.ends_with("/pods/consumer-1"))
        .expect("revoke patch");
    let view = assert_annotation_patch(patch, "consumer-1").unwrap();
    assert_eq!(view.revoking, doc.pods["consumer-1"].revoking);
    assert_eq!(seen.iter().filter(|s| s.path.contains("/pods/")).count(), 1);
}

#[tokio::test]
async fn a_missing_pool_only_writes_status_and_a_warning() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let orphaned = Stores {
        pools: reflector::store().0,
        ..world.stores.clone()
    };
    let seen = reconcile_once(&group, &orphaned).await;
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let status = assert_status_apply(&seen[0]);
    assert_eq!(status["epoch"], 1, "the assignment stays");
    let ready = condition(&status, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PoolNotFound"))
    );
    assert_event(&seen[1], "PoolNotFound");
    assert_eq!(seen[1].body["type"], "Warning");
}

#[tokio::test]
async fn a_pod_deleted_before_its_patch_is_skipped() {
    let group = group(4);
    let world = world(
        Some(pool(0)),
        &[pod("consumer-0", true, None), pod("missing", true, None)],
    );
    let seen = reconcile_once(&group, &world.stores).await;
    assert!(seen.iter().any(|s| s.path.ends_with("/pods/missing")));
    assert!(
        seen.iter().any(|s| s.path == STATUS_PATH),
        "the reconcile went on: {seen:#?}"
    );
}
