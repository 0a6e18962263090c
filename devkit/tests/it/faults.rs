//! Faults and pacing: the mutating in-flight limit (429 + Retry-After),
//! scripted failures, delays, the request log.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};

use crate::support::{code, config_map, no_retry_client, reason, server};

#[tokio::test]
async fn mutating_requests_beyond_the_limit_get_429() {
    let server = MockApiServer::start(MockOptions {
        max_mutating_in_flight: Some(1),
        request_delay: Duration::from_millis(500),
        ..MockOptions::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(no_retry_client(&server).await);
    let creates = (0..3).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
                .await
        }
    });
    let results = futures::future::join_all(creates).await;
    let rejected: Vec<&kube::Error> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert_eq!(rejected.len(), 2);
    for err in rejected {
        assert_eq!((code(err), reason(err).as_str()), (429, "TooManyRequests"));
    }
    // Reads are not limited.
    api.list(&ListParams::default()).await.unwrap();

    // kube's default client honours Retry-After and gets through.
    let retrying: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let started = Instant::now();
    let (pp, r1, r2) = (
        PostParams::default(),
        config_map("r-1", &[]),
        config_map("r-2", &[]),
    );
    let (a, b) = tokio::join!(retrying.create(&pp, &r1), retrying.create(&pp, &r2));
    a.unwrap();
    b.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for Retry-After"
    );
    assert!(server.requests().iter().filter(|r| r.status == 429).count() >= 3);

    server.set_max_mutating_in_flight(None);
    server.set_request_delay(Duration::ZERO);
    let all = (0..5).map(|i| {
        let api = api.clone();
        async move {
            api.create(
                &PostParams::default(),
                &config_map(&format!("free-{i}"), &[]),
            )
            .await
        }
    });
    assert!(
        futures::future::join_all(all)
            .await
            .iter()
            .all(Result::is_ok)
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

    server.clear_requests();
    assert!(server.requests().is_empty());
    assert_eq!(server.count("", ""), 0);

    server.set_list_delay(Duration::from_millis(500));
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
