//! Transport and identity: TLS with the generated CA, the bearer token,
//! `/version`, TokenReviews.

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use shardring_devkit::apiserver::{MockApiServer, MockOptions};

use crate::support::{code, reason, server};

#[tokio::test]
async fn wrong_token_gets_401_and_right_token_works() {
    let server = server().await;
    let good = server.client().await;
    Api::<ConfigMap>::default_namespaced(good)
        .list(&ListParams::default())
        .await
        .expect("the kubeconfig's token is accepted");

    let yaml = server
        .kubeconfig_yaml()
        .replace(server.token(), "not-the-token");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let bad = kube::Client::try_from(config).unwrap();
    let err = Api::<ConfigMap>::default_namespaced(bad)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 401);
    assert_eq!(reason(&err), "Unauthorized");
    let last = server.requests().pop().unwrap();
    assert_eq!(last.status, 401);
}

#[tokio::test]
async fn kubeconfig_points_at_https_with_the_ca_and_namespace() {
    let server = server().await;
    let yaml = server.kubeconfig_yaml();
    assert!(yaml.contains(&format!(
        "server: https://127.0.0.1:{}",
        server.addr().port()
    )));
    assert!(yaml.contains("certificate-authority-data: "));
    assert!(yaml.contains("namespace: default"));
    let dir = std::env::temp_dir().join(format!("devkit-kubeconfig-{}", server.addr().port()));
    server.write_kubeconfig(&dir).unwrap();
    assert_eq!(std::fs::read_to_string(&dir).unwrap(), yaml);
    let _ = std::fs::remove_file(dir);

    let client = server.client().await;
    assert_eq!(client.default_namespace(), "default");
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "35")
    );
    assert_eq!(version.git_version, "v1.35.0-shardring-mock");
}

#[tokio::test]
async fn token_reviews_come_from_the_reviewer_and_are_counted() {
    let server = server().await;
    let client = server.client().await;
    let reviews: Api<TokenReview> = Api::all(client);
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: Some(vec!["shardring".into()]),
        },
        ..Default::default()
    };
    let answer = reviews
        .create(&PostParams::default(), &review("anything"))
        .await
        .unwrap();
    assert_eq!(answer.status.unwrap().authenticated, Some(false));
    assert_eq!(server.token_review_count(), 1);

    let server = MockApiServer::start(MockOptions {
        token_reviewer: Arc::new(|token, audiences| {
            json!({
                "authenticated": token == "good" && audiences.iter().any(|a| a == "shardring"),
                "user": { "username": "system:serviceaccount:default:consumer" },
                "audiences": audiences,
            })
        }),
        ..MockOptions::default()
    })
    .await;
    let reviews: Api<TokenReview> = Api::all(server.client().await);
    let answer = reviews
        .create(&PostParams::default(), &review("good"))
        .await
        .unwrap();
    let status = answer.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(
        status.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:default:consumer")
    );
    assert_eq!(server.token_review_count(), 1);
    let err = reviews.get("x").await.unwrap_err();
    assert_eq!(code(&err), 405);
}
