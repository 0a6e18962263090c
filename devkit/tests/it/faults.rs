//! Faults and pacing: scripted failures (a 429 with Retry-After), delays,
//! the request log.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};

use crate::support::{code, config_map, no_retry_client, reason, server};

#[tokio::test]
async fn a_scripted_429_carries_retry_after_which_kube_honours() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(no_retry_client(&server).await);
    server.fail_next("POST", "/configmaps", 429, 1);
    let err = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap_err();
    assert_eq!(
        (code(&err), reason(&err).as_str()),
        (429, "TooManyRequests")
    );

    // kube's default client honours Retry-After (1 s) and gets through.
    let retrying: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    server.fail_next("POST", "/configmaps", 429, 1);
    let started = Instant::now();
    retrying
        .create(&PostParams::default(), &config_map("b", &[]))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for Retry-After"
    );
    assert_eq!(
        server.requests().iter().filter(|r| r.status == 429).count(),
        2
    );
}

#[tokio::test]
async fn scripted_failures_then_recovery_and_the_request_log() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(no_retry_client(&server).await);
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    server.fail_next("GET", "/configmaps/a", 503, 2);
    for _ in 0..2 {
        let err = api.get("a").await.unwrap_err();
        assert_eq!(code(&err), 503);
    }
    api.get("a").await.unwrap();
    assert_eq!(server.count("GET", "/configmaps/a"), 3);
    assert_eq!(server.count("POST", "/configmaps"), 1);

    let post = server
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .unwrap();
    assert_eq!(post.status, 201);
    assert_eq!(post.content_type.as_deref(), Some("application/json"));
    assert!(post.body.contains("\"name\":\"a\""));
}

#[tokio::test]
async fn list_delay_slows_lists_only() {
    let server = MockApiServer::start(MockOptions {
        list_delay: Duration::from_millis(500),
        ..MockOptions::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    server.create(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a", "namespace": "default" },
    }));
    let started = Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(500));
    let started = Instant::now();
    api.get("a").await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "gets are not lists"
    );
}

#[tokio::test]
async fn large_bodies_are_logged_truncated() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let mut cm = config_map("big", &[]);
    cm.data = Some([("doc".to_owned(), "x".repeat(100_000))].into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    let post = server
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .unwrap();
    assert_eq!(post.body.len(), 4096);
    assert_eq!(
        api.get("big").await.unwrap().data.unwrap()["doc"].len(),
        100_000
    );
}
