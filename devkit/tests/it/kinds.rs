//! Kind-specific behaviour: CRDs become Established and served, Events
//! from kube's Recorder.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;

use crate::support::{code, server};

fn widgets() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

#[tokio::test]
async fn an_applied_crd_is_established_and_its_kind_served() {
    let server = server().await;
    let client = server.client().await;
    let widgets_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widgets());
    assert_eq!(
        code(&widgets_api.list(&Default::default()).await.unwrap_err()),
        404
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.example.com" },
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": { "kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList" },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
                "subresources": { "status": {} },
            }],
        },
    });
    let pp = PatchParams::apply("installer").force();
    crds.patch("widgets.example.com", &pp, &Patch::Apply(&crd))
        .await
        .unwrap();
    // A second apply (an upgrade) keeps the conditions.
    crds.patch("widgets.example.com", &pp, &Patch::Apply(&crd))
        .await
        .unwrap();
    let established = crds.get("widgets.example.com").await.unwrap();
    let conditions = established.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": { "name": "w" }, "spec": { "size": 1 },
    }))
    .unwrap();
    widgets_api
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    let with_status = widgets_api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "ok": true } })),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["ok"], true);
    assert_eq!(with_status.data["spec"]["size"], 1);
}

#[tokio::test]
async fn recorder_events_are_created_then_patched_as_a_series() {
    let server = server().await;
    let recorder = Recorder::new(
        server.client().await,
        Reporter {
            controller: "shardring".into(),
            instance: Some("test".into()),
        },
    );
    let reference = ObjectReference {
        api_version: Some("shardring.io/v1alpha1".into()),
        kind: Some("ShardGroup".into()),
        name: Some("g".into()),
        namespace: Some("default".into()),
        uid: Some("uid-1".into()),
        ..Default::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "Assigned".into(),
        note: Some("4 shards on 2 pods".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    assert_eq!(
        server.count("POST", "/apis/events.k8s.io/v1/namespaces/default/events"),
        1
    );
    assert_eq!(
        server.count("PATCH", "/apis/events.k8s.io/v1/namespaces/default/events/"),
        1
    );
    let stored: Vec<K8sEvent> = server
        .list("events.k8s.io/v1", "Event", Some("default"))
        .into_iter()
        .map(|e| serde_json::from_value(e).unwrap())
        .collect();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].series.as_ref().unwrap().count, 2);
    assert_eq!(stored[0].reason.as_deref(), Some("Assigned"));
}
