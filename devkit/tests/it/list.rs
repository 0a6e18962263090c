//! Lists: pages over a consistent snapshot, selectors, expired continue
//! tokens, metadata-only lists, scale.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};

use crate::support::{code, config_map, pod, reason, server};

#[tokio::test]
async fn pages_come_from_one_snapshot_at_one_resource_version() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    for i in 0..5 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let mut names: Vec<String> = first.items.iter().map(|c| c.name_any()).collect();

    // Writes between pages do not show in the paged list.
    api.create(&PostParams::default(), &config_map("cm-new", &[]))
        .await
        .unwrap();
    api.delete("cm-4", &Default::default()).await.unwrap();
    api.patch(
        "cm-3",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "changed"}})),
    )
    .await
    .unwrap();

    let mut token = first.metadata.continue_;
    let mut pages = 1;
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some(rv.as_str()));
        for cm in &page.items {
            if cm.name_any() == "cm-3" {
                assert_eq!(cm.data.as_ref().unwrap()["k"], "v", "as of the snapshot");
            }
        }
        names.extend(page.items.iter().map(|c| c.name_any()));
        token = page.metadata.continue_;
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(names, vec!["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);

    // The token of an exhausted snapshot is gone.
    let fresh = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(fresh.items.len(), 5, "cm-4 gone, cm-new there");
    assert!(fresh.metadata.continue_.is_none());
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
async fn an_expired_continue_token_is_410() {
    let server = MockApiServer::start(MockOptions {
        continue_ttl: Duration::from_millis(100),
        ..MockOptions::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    for i in 0..3 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }
    let first = api.list(&ListParams::default().limit(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let token = first.metadata.continue_.unwrap();
    let err = api
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap_err();
    assert_eq!((code(&err), reason(&err).as_str()), (410, "Expired"));
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
    assert_eq!(names("app in (web,db)").await, vec!["a", "c"]);
    assert_eq!(names("app notin (web),tier").await, vec!["c"]);
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

    let pods: Api<Pod> = Api::all(server.client().await);
    server.create(pod("on-1", Some("n1")));
    server.create(pod("on-2", Some("n2")));
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert_eq!(
        on_n1.items.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        vec!["on-1"]
    );
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
async fn five_thousand_pods_list_in_pages() {
    let server = server().await;
    let started = Instant::now();
    let pods: Vec<Value> = (0..5000)
        .map(|i| pod(&format!("pod-{i:05}"), Some("n1")))
        .collect();
    let rv = server.create_many(pods);
    let created = started.elapsed();
    let api: Api<Pod> = Api::default_namespaced(server.client().await);
    let started = Instant::now();
    let (mut count, mut token, mut pages) = (0, None::<String>, 0);
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        assert_eq!(page.metadata.resource_version, Some(rv.to_string()));
        count += page.items.len();
        pages += 1;
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!((count, pages), (5000, 10));
    eprintln!(
        "5,000 pods: created in {created:?}, listed in {:?}",
        started.elapsed()
    );
}
