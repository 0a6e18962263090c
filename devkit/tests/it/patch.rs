//! Merge patches, JSON patches and the status subresource.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{code, config_map, pod, reason, server, shard_groups};

#[tokio::test]
async fn merge_patch_sets_and_deletes_with_a_version_precondition() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let mut cm = config_map("a", &[("app", "x")]);
    cm.metadata.annotations = Some([("gone".to_owned(), "soon".to_owned())].into());
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let patched = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": { "labels": { "tier": "b" }, "annotations": { "gone": null } },
            })),
        )
        .await
        .unwrap();
    let labels = patched.metadata.labels.clone().unwrap();
    assert_eq!(
        (labels["app"].as_str(), labels["tier"].as_str()),
        ("x", "b")
    );
    assert!(patched.metadata.annotations.unwrap_or_default().is_empty());

    let stale = json!({
        "metadata": { "resourceVersion": created.metadata.resource_version, "labels": { "x": "y" } },
    });
    let err = api
        .patch("a", &PatchParams::default(), &Patch::Merge(&stale))
        .await
        .unwrap_err();
    assert_eq!((code(&err), reason(&err).as_str()), (409, "Conflict"));

    // The operator's annotation write: a uid precondition on a replaced pod.
    let wrong_uid = json!({ "metadata": { "uid": "not-this-one", "labels": { "x": "y" } } });
    let err = api
        .patch("a", &PatchParams::default(), &Patch::Merge(&wrong_uid))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 409);
    let err = api
        .patch("missing", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 404);
}

#[tokio::test]
async fn json_patch_applies_and_a_failed_test_is_422() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    let add: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/data/k", "value": "v" },
        { "op": "add", "path": "/metadata/finalizers", "value": ["example.com/f"] },
        { "op": "replace", "path": "/data/k", "value": "w" },
    ]))
    .unwrap();
    let patched = api
        .patch("a", &PatchParams::default(), &Patch::<()>::Json(add))
        .await
        .unwrap();
    assert_eq!(patched.metadata.finalizers.unwrap(), vec!["example.com/f"]);
    assert_eq!(patched.data.unwrap()["k"], "w");

    let failing: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/data/k", "value": "not-w" },
        { "op": "remove", "path": "/metadata/finalizers" },
    ]))
    .unwrap();
    let err = api
        .patch("a", &PatchParams::default(), &Patch::<()>::Json(failing))
        .await
        .unwrap_err();
    assert_eq!((code(&err), reason(&err).as_str()), (422, "Invalid"));
    let now = api.get("a").await.unwrap();
    assert_eq!(now.metadata.finalizers.unwrap().len(), 1, "nothing applied");
}

#[tokio::test]
async fn status_subresource_isolates_status_from_spec() {
    let server = server().await;
    let ar = shard_groups();
    let api: Api<DynamicObject> = Api::namespaced_with(server.client().await, "default", &ar);
    let group: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "shardring.io/v1alpha1",
        "kind": "ShardGroup",
        "metadata": { "name": "g" },
        "spec": { "shards": 4 },
        "status": { "ignored": true },
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &group).await.unwrap();
    assert!(created.data.get("status").is_none(), "create drops status");
    assert_eq!(created.metadata.generation, Some(1));

    let with_status = api
        .patch_status(
            "g",
            &PatchParams::apply("shardring").force(),
            &Patch::Apply(json!({
                "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup",
                "status": { "observedGeneration": 1 },
                "spec": { "shards": 99 },
            })),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["observedGeneration"], 1);
    assert_eq!(
        with_status.data["spec"]["shards"], 4,
        "status writes ignore spec"
    );
    assert_eq!(with_status.metadata.generation, Some(1));

    let spec_write = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "shards": 8 }, "status": { "observedGeneration": 7 } }),
            ),
        )
        .await
        .unwrap();
    assert_eq!(spec_write.data["spec"]["shards"], 8);
    assert_eq!(
        spec_write.data["status"]["observedGeneration"], 1,
        "main writes ignore status"
    );
    assert_eq!(spec_write.metadata.generation, Some(2));

    // A replace of a custom resource needs a resourceVersion.
    let mut unconditional = spec_write.clone();
    unconditional.metadata.resource_version = None;
    let err = api
        .replace("g", &PostParams::default(), &unconditional)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 422);
}

#[tokio::test]
async fn pod_status_written_through_the_subresource_only() {
    let server = server().await;
    let api: Api<Pod> = Api::default_namespaced(server.client().await);
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("p", None)).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    let spec = created.spec.unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(30), "defaulted");
    let running = api
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "phase": "Running", "podIP": "10.0.0.1" } })),
        )
        .await
        .unwrap();
    assert_eq!(running.status.unwrap().phase.as_deref(), Some("Running"));
    let direct = server.update_status(
        ("v1", "Pod"),
        Some("default"),
        "p",
        json!({ "phase": "Succeeded" }),
    );
    assert_eq!(direct["status"]["phase"], "Succeeded");
    assert_eq!(direct["status"]["podIP"], "10.0.0.1");
}
