//! Deletion: finalizers, graceful pod deletion and the kubelet's
//! confirmation, force deletion, namespaces.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use crate::support::{code, config_map, pod, server};

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_removed() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let mut cm = config_map("held", &[]);
    cm.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();

    let deleted = api.delete("held", &DeleteParams::default()).await.unwrap();
    let pending = deleted.left().expect("still there, being deleted");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(
        api.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    let err = api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "finalizers": ["example.com/cleanup", "new/one"] } }),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 422, "no new finalizers while being deleted");

    // Other writes still work while it is held.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "k": "still-writable" } })),
    )
    .await
    .unwrap();
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .unwrap();
    assert_eq!(code(&api.get("held").await.unwrap_err()), 404);

    // Without finalizers a delete removes at once and answers a Status.
    api.create(&PostParams::default(), &config_map("free", &[]))
        .await
        .unwrap();
    let status = api
        .delete("free", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a Status");
    assert_eq!(status.details.unwrap().name, "free");
    assert_eq!(
        code(
            &api.delete("free", &DeleteParams::default())
                .await
                .unwrap_err()
        ),
        404
    );
}

#[tokio::test]
async fn pods_on_a_node_wait_for_the_kubelet() {
    let server = server().await;
    let api: Api<Pod> = Api::default_namespaced(server.client().await);
    for (name, node) in [
        ("unscheduled", None),
        ("bound", Some("n1")),
        ("forced", Some("n1")),
    ] {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(pod(name, node)).unwrap(),
        )
        .await
        .unwrap();
    }

    api.delete("unscheduled", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        api.get_opt("unscheduled").await.unwrap().is_none(),
        "no node: gone at once"
    );

    api.delete("bound", &DeleteParams::default()).await.unwrap();
    let terminating = api.get("bound").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(server.kubelet_finish_deletion("default", "bound"));
    assert!(api.get_opt("bound").await.unwrap().is_none());
    assert!(!server.kubelet_finish_deletion("default", "bound"));

    api.delete("forced", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(
        api.get_opt("forced").await.unwrap().is_none(),
        "force: gone at once"
    );

    // A terminating pod force-deleted later goes too.
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pod("later", Some("n1"))).unwrap(),
    )
    .await
    .unwrap();
    api.delete("later", &DeleteParams::default().grace_period(5))
        .await
        .unwrap();
    assert_eq!(
        api.get("later")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(5)
    );
    api.delete("later", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(api.get_opt("later").await.unwrap().is_none());
}

#[tokio::test]
async fn a_namespace_deletes_its_contents_then_goes() {
    let server = server().await;
    let client = server.client().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": "doomed" } })).unwrap();
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    maps.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "doomed");
    let mut bound = pod("p", Some("n1"));
    bound["metadata"]["namespace"] = json!("doomed");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(bound).unwrap(),
    )
    .await
    .unwrap();

    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get("doomed").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    assert!(maps.get_opt("a").await.unwrap().is_none());
    let err = maps
        .create(&PostParams::default(), &config_map("b", &[]))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403);
    // The pod waits for its kubelet; then the namespace goes.
    assert!(server.kubelet_finish_deletion("doomed", "p"));
    assert!(namespaces.get_opt("doomed").await.unwrap().is_none());
}

#[tokio::test]
async fn delete_preconditions_are_refused_not_ignored() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let created = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created.metadata.uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let err = api.delete("a", &params).await.unwrap_err();
    assert_eq!(code(&err), 400);
    assert!(err.to_string().contains("not served by the mock"), "{err}");
    assert!(api.get_opt("a").await.unwrap().is_some(), "nothing deleted");
}
