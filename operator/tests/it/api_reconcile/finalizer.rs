//! The cleanup finalizer: a new ShardGroup gets it first; a deleted one has
//! its pods' annotations removed, then the finalizer (a JSON patch that
//! tests it is still there).

use serde_json::json;
use shardring::controller::CachedPod;
use shardring::crds::FINALIZER;

use super::asserts::assert_annotation_patch;
use super::harness::{reconcile_once, settle, three_pods, world};
use shardring_core::fixtures::*;

#[tokio::test]
async fn deleting_a_shardgroup_removes_its_annotations_then_the_finalizer() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    // A pod outside the pool without the annotation is left alone.
    world.apply_pod(CachedPod::from(&pod("bystander", true, None)));
    group.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let seen = reconcile_once(&group, &world.stores).await;
    assert_eq!(seen.len(), 4, "{seen:#?}");
    for (i, s) in seen[..3].iter().enumerate() {
        let pod = format!("consumer-{i}");
        assert_eq!(assert_annotation_patch(s, &pod), None);
    }
    let last = &seen[3];
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        (
            "PATCH",
            "/apis/shardring.io/v1alpha1/namespaces/prod/shardgroups/orders"
        )
    );
    assert_eq!(last.content_type, "application/json-patch+json");
    assert_eq!(
        last.body,
        json!([{"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER}, {"op": "remove", "path": "/metadata/finalizers/0"}])
    );
}

#[tokio::test]
async fn a_new_shardgroup_first_gets_the_finalizer() {
    let mut group = group(6);
    group.metadata.finalizers = None;
    let world = world(Some(pool(0)), &three_pods());
    let seen = reconcile_once(&group, &world.stores).await;
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(
        seen[0].path,
        "/apis/shardring.io/v1alpha1/namespaces/prod/shardgroups/orders"
    );
    assert_eq!(seen[0].content_type, "application/json-patch+json");
    let ops = seen[0].body.as_array().unwrap();
    assert_eq!(ops.last().unwrap()["value"], json!([FINALIZER]));
}
