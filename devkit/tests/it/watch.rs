//! Watches: kube's watcher over a list, live events, 410 Gone and the
//! relist, bookmarks, selectors, server-side closes and resumption.

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt as _;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use shardring_devkit::apiserver::{MockApiServer, MockOptions};

use crate::support::{config_map, server};

const WAIT: Duration = Duration::from_secs(10);

async fn next<S, T>(stream: &mut S) -> T
where
    S: futures::Stream<Item = T> + Unpin,
{
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
}

fn direct_cm(name: &str) -> serde_json::Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name }, "data": { "k": "v" } })
}

#[tokio::test]
async fn watcher_lists_then_follows_live_events() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    for i in 0..5 {
        server.create(direct_cm(&format!("cm-{i}")));
    }
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default().page_size(2)).boxed();
    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    let mut listed = Vec::new();
    loop {
        match next(&mut stream).await.unwrap() {
            Event::InitApply(cm) => listed.push(cm.name_any()),
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(listed, vec!["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    // The mock answers a limited list whole (no continue token).
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/configmaps") && r.query.contains("limit=2"))
        .count();
    assert_eq!(lists, 1);

    api.create(&PostParams::default(), &config_map("live", &[]))
        .await
        .unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Apply(cm) => assert_eq!(cm.name_any(), "live"),
        other => panic!("unexpected {other:?}"),
    }
    api.patch(
        "live",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "k": "w" } })),
    )
    .await
    .unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Apply(cm) => assert_eq!(cm.data.unwrap()["k"], "w"),
        other => panic!("unexpected {other:?}"),
    }
    api.delete("live", &Default::default()).await.unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Delete(cm) => assert_eq!(cm.name_any(), "live"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_an_expired_version_gets_410_and_the_watcher_relists() {
    let server = MockApiServer::start(MockOptions {
        watch_history: 3,
        ..MockOptions::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    server.create(direct_cm("first"));
    let listed = api.list(&Default::default()).await.unwrap();
    let old = listed.metadata.resource_version.unwrap();

    let mut stream =
        watcher::watcher(api.clone(), watcher::Config::default().disable_bookmarks()).boxed();
    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    assert!(matches!(
        next(&mut stream).await.unwrap(),
        Event::InitApply(_)
    ));
    assert!(matches!(next(&mut stream).await.unwrap(), Event::InitDone));
    // Not polled now: its watch from the listed version starts only later,
    // once the history no longer reaches back to it.
    for i in 0..10 {
        server.create(direct_cm(&format!("later-{i}")));
    }

    let raw = api
        .watch(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    let events: Vec<_> = tokio::time::timeout(WAIT, raw.try_collect())
        .await
        .expect("the server closes the expired watch")
        .unwrap();
    match events.as_slice() {
        [WatchEvent::Error(status)] => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected one 410 ERROR, got {other:?}"),
    }

    match next(&mut stream).await {
        Err(watcher::Error::WatchError(status)) => assert_eq!(status.code, 410),
        other => panic!("expected the 410, got {other:?}"),
    }
    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    let mut relisted = 0;
    loop {
        match next(&mut stream).await.unwrap() {
            Event::InitApply(_) => relisted += 1,
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(relisted, 11);
    api.create(&PostParams::default(), &config_map("after", &[]))
        .await
        .unwrap();
    assert!(
        matches!(next(&mut stream).await.unwrap(), Event::Apply(cm) if cm.name_any() == "after")
    );
}

#[tokio::test]
async fn bookmarks_carry_the_current_version() {
    let server = MockApiServer::start(MockOptions {
        bookmark_interval: Duration::from_millis(100),
        ..MockOptions::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    server.create(direct_cm("a"));
    let mut raw = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        next(&mut raw).await.unwrap(),
        WatchEvent::Added(_)
    ));
    // A write elsewhere moves the version; the bookmark follows it.
    let lease = server.create(json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": { "name": "l" } }));
    let current = lease["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    loop {
        match next(&mut raw).await.unwrap() {
            WatchEvent::Bookmark(b) if b.metadata.resource_version == current => break,
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_label_selector_turns_leaving_into_deleted_and_joining_into_added() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let mut raw = api
        .watch(
            &WatchParams::default().labels("app=x").disable_bookmarks(),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    api.create(
        &PostParams::default(),
        &config_map("other", &[("app", "y")]),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &config_map("m", &[("app", "x")]))
        .await
        .unwrap();
    assert!(matches!(next(&mut raw).await.unwrap(), WatchEvent::Added(cm) if cm.name_any() == "m"));
    let relabel = |app: &str| Patch::Merge(json!({ "metadata": { "labels": { "app": app } } }));
    api.patch("m", &PatchParams::default(), &relabel("y"))
        .await
        .unwrap();
    assert!(
        matches!(next(&mut raw).await.unwrap(), WatchEvent::Deleted(cm) if cm.name_any() == "m")
    );
    api.patch("other", &PatchParams::default(), &relabel("x"))
        .await
        .unwrap();
    assert!(
        matches!(next(&mut raw).await.unwrap(), WatchEvent::Added(cm) if cm.name_any() == "other")
    );
    api.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "k": "2" } })),
    )
    .await
    .unwrap();
    assert!(
        matches!(next(&mut raw).await.unwrap(), WatchEvent::Modified(cm) if cm.name_any() == "other")
    );
}

#[tokio::test]
async fn server_closed_watches_resume_from_the_last_version_without_relisting() {
    let server = MockApiServer::start(MockOptions {
        max_watch: Some(Duration::from_millis(200)),
        ..MockOptions::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    assert!(matches!(next(&mut stream).await.unwrap(), Event::InitDone));
    let mut seen = Vec::new();
    for i in 0..6 {
        server.create(direct_cm(&format!("cm-{i}")));
        match next(&mut stream).await.unwrap() {
            Event::Apply(cm) => seen.push(cm.name_any()),
            other => panic!("unexpected {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    assert_eq!(seen.len(), 6);
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/configmaps") && !r.query.contains("watch"))
        .count();
    let watches = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/configmaps") && r.query.contains("watch=true"))
        .count();
    assert_eq!(lists, 1, "resumed from the last version, never relisted");
    assert!(watches >= 3, "the server closed watches ({watches})");
}

#[tokio::test]
async fn a_watch_that_falls_behind_the_history_gets_410() {
    let server = MockApiServer::start(MockOptions {
        watch_history: 5,
        ..MockOptions::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let mut raw = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    // Synchronous writes: the watch cannot keep up before the history
    // (5 events) has moved past what it still has to send.
    for i in 0..50 {
        server.create(direct_cm(&format!("cm-{i}")));
    }
    match next(&mut raw).await.unwrap() {
        WatchEvent::Error(status) => assert_eq!(status.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    let rest = tokio::time::timeout(WAIT, raw.count()).await.unwrap();
    assert_eq!(rest, 0, "the server closed the watch");
}

#[tokio::test]
async fn metadata_watches_of_nodes_carry_partial_objects() {
    let server = server().await;
    server.create(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": "n1", "labels": { "zone": "a" } },
        "spec": { "podCIDR": "10.0.0.0/24" },
    }));
    // As the operator watches nodes: metadata only.
    let client = server.client().await;
    let nodes: Api<PartialObjectMeta<Node>> = Api::all(client.clone());
    let mut stream = watcher::watcher(nodes, watcher::Config::default()).boxed();
    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    match next(&mut stream).await.unwrap() {
        Event::InitApply(node) => assert_eq!(node.labels()["zone"], "a"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(next(&mut stream).await.unwrap(), Event::InitDone));
    Api::<Node>::all(client)
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "zone": "b" } } })),
        )
        .await
        .unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Apply(node) => assert_eq!(node.labels()["zone"], "b"),
        other => panic!("unexpected {other:?}"),
    }
    let watch = server
        .requests()
        .into_iter()
        .find(|r| r.query.contains("watch=true"))
        .unwrap();
    assert_eq!(watch.path, "/api/v1/nodes");
}

#[tokio::test]
async fn streaming_lists_are_refused_not_answered_otherwise() {
    let server = server().await;
    let client = server.client().await;
    let request = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    )
    .body(Vec::new())
    .unwrap();
    let err = client
        .request::<serde_json::Value>(request)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 400, "{status:?}"),
        other => panic!("not an API error: {other:?}"),
    }
}
