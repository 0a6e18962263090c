//! Server-side apply as the mock serves it: create, resourceVersion
//! precondition, removal of fields a manager stops applying (conflicts and
//! managedFields are the real server's, checked in the e2e crate's
//! `api_semantics` on the real control plane).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::{code, server};

fn applied(annotations: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": "doc", "annotations": annotations },
        "data": data,
    })
}

#[tokio::test]
async fn apply_creates_then_updates_and_removes_what_it_stopped_sending() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let a = PatchParams::apply("manager-a").force();
    let created = api
        .patch(
            "doc",
            &a,
            &Patch::Apply(applied(json!({"one": "1", "two": "2"}), json!({"k": "v"}))),
        )
        .await
        .unwrap();
    assert_eq!(created.annotations().len(), 2);

    // Another manager shares "one" and owns "three".
    let b = PatchParams::apply("manager-b").force();
    api.patch(
        "doc",
        &b,
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "doc", "annotations": { "one": "1", "three": "3" } },
        })),
    )
    .await
    .unwrap();

    // manager-a stops sending "one" and "two": "two" goes (only it owned
    // it), "one" stays (manager-b owns it too), "three" was never its.
    let after = api
        .patch(
            "doc",
            &a,
            &Patch::Apply(applied(json!({}), json!({"k": "v"}))),
        )
        .await
        .unwrap();
    let annotations = after.annotations();
    assert!(!annotations.contains_key("two"), "{annotations:?}");
    assert_eq!(annotations.get("one").map(String::as_str), Some("1"));
    assert_eq!(annotations.get("three").map(String::as_str), Some("3"));
    assert_eq!(after.data.unwrap()["k"], "v");
}

#[tokio::test]
async fn apply_with_a_stale_resource_version_is_a_conflict() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let pp = PatchParams::apply("shardring").force();
    let first = api
        .patch(
            "doc",
            &pp,
            &Patch::Apply(applied(json!({}), json!({"k": "1"}))),
        )
        .await
        .unwrap();
    let observed = first.resource_version().unwrap();
    let mut body = applied(json!({}), json!({"k": "2"}));
    body["metadata"]["resourceVersion"] = json!(observed);
    let second = api.patch("doc", &pp, &Patch::Apply(&body)).await.unwrap();
    assert_ne!(second.resource_version().unwrap(), observed);

    // The same observed version again: someone (we) wrote since.
    body["data"]["k"] = json!("3");
    let err = api
        .patch("doc", &pp, &Patch::Apply(&body))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 409);
    assert_eq!(api.get("doc").await.unwrap().data.unwrap()["k"], "2");
}

#[tokio::test]
async fn apply_needs_a_field_manager() {
    let server = server().await;
    let client = server.client().await;
    let request = http::Request::patch("/api/v1/namespaces/default/configmaps/doc")
        .header("Content-Type", "application/apply-patch+yaml")
        .body(serde_json::to_vec(&applied(json!({}), json!({}))).unwrap())
        .unwrap();
    let err = client.request::<Value>(request).await.unwrap_err();
    assert_eq!(code(&err), 400);
}
