//! Lists: every item in one answer whatever the limit (paging is the real
//! server's, checked in the e2e crate's `api_semantics`), selectors,
//! metadata-only lists, scale.

use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::support::{code, config_map, pod, server};

#[tokio::test]
async fn a_limited_list_answers_every_item_at_once() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    for i in 0..5 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }
    let list = api.list(&ListParams::default().limit(2)).await.unwrap();
    let names: Vec<String> = list.items.iter().map(|c| c.name_any()).collect();
    assert_eq!(names, vec!["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    assert!(list.metadata.continue_.is_none());
    assert_eq!(
        list.metadata.resource_version,
        Some(
            server.list("v1", "ConfigMap", None)[4]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned()
        )
    );
}

#[tokio::test]
async fn list_items_carry_no_kind_like_the_real_server() {
    let server = server().await;
    let client = server.client().await;
    Api::<ConfigMap>::default_namespaced(client.clone())
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    let request = http::Request::get("/api/v1/namespaces/default/configmaps")
        .body(Vec::new())
        .unwrap();
    let list: Value = client.request(request).await.unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["apiVersion"], "v1");
    assert!(list["items"][0].get("kind").is_none());
    assert_eq!(list["items"][0]["metadata"]["name"], "a");
}

#[tokio::test]
async fn label_and_field_selectors_filter() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    for (name, labels) in [
        ("a", vec![("app", "web"), ("tier", "front")]),
        ("b", vec![("app", "api")]),
        ("c", vec![("app", "db"), ("tier", "back")]),
        ("d", vec![]),
    ] {
        api.create(&PostParams::default(), &config_map(name, &labels))
            .await
            .unwrap();
    }
    let names = |selector: &'static str| {
        let api = api.clone();
        async move {
            api.list(&ListParams::default().labels(selector))
                .await
                .unwrap()
                .items
                .iter()
                .map(|c| c.name_any())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("app=web").await, vec!["a"]);
    assert_eq!(names("app==api").await, vec!["b"]);
    assert_eq!(names("app!=web").await, vec!["b", "c", "d"]);
    assert_eq!(names("tier").await, vec!["a", "c"]);
    assert_eq!(names("!tier").await, vec!["b", "d"]);
    assert_eq!(names("app!=web,tier").await, vec!["c"]);
    // Set-based requirements are not served: a clear 400, never a wrong list.
    let err = api
        .list(&ListParams::default().labels("app in (web,db)"))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 400);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let err = api
        .list(&ListParams::default().fields("data.k=v"))
        .await
        .unwrap_err();
    assert_eq!(code(&err), 400);
}

#[tokio::test]
async fn metadata_only_lists_of_nodes() {
    let server = server().await;
    for name in ["n1", "n2"] {
        server.create(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": name, "labels": { "zone": "a" } },
            "status": { "capacity": { "cpu": "4" } },
        }));
    }
    let nodes: Api<Node> = Api::all(server.client().await);
    let list = nodes.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    assert_eq!(list.items[0].name_any(), "n1");
    assert_eq!(list.items[1].labels()["zone"], "a");
}

#[tokio::test]
async fn five_thousand_pods_list_at_once() {
    let server = server().await;
    let started = Instant::now();
    let pods: Vec<Value> = (0..5000)
        .map(|i| pod(&format!("pod-{i:05}"), Some("n1")))
        .collect();
    let rv = server.create_many(pods);
    let created = started.elapsed();
    let api: Api<Pod> = Api::default_namespaced(server.client().await);
    let started = Instant::now();
    let list = api.list(&ListParams::default().limit(500)).await.unwrap();
    assert_eq!(list.metadata.resource_version, Some(rv.to_string()));
    assert_eq!(list.items.len(), 5000);
    eprintln!(
        "5,000 pods: created in {created:?}, listed in {:?}",
        started.elapsed()
    );
}
