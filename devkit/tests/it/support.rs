//! Helpers shared by the integration tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, ObjectMeta};
use serde_json::{Value, json};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};

/// A server with default options.
pub async fn server() -> MockApiServer {
    MockApiServer::start(MockOptions::default()).await
}

/// A client that does not retry 429/503 (to observe them).
pub async fn no_retry_client(server: &MockApiServer) -> kube::Client {
    let _ = server.client().await;
    let mut config = server.kube_config().await;
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

/// The HTTP code of an API error.
pub fn code(error: &kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        other => panic!("not an API error: {other:?}"),
    }
}

/// The reason of an API error.
pub fn reason(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.reason.clone(),
        other => panic!("not an API error: {other:?}"),
    }
}

/// A ConfigMap with labels and one data key.
pub fn config_map(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_owned(), "v".to_owned())])),
        ..Default::default()
    }
}

/// A pod manifest, optionally bound to a node.
pub fn pod(name: &str, node: Option<&str>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": "default", "labels": { "app": "c" } },
        "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    pod
}

/// The ShardGroup resource for dynamic APIs.
pub fn shard_groups() -> ApiResource {
    ApiResource {
        group: "shardring.io".into(),
        version: "v1alpha1".into(),
        api_version: "shardring.io/v1alpha1".into(),
        kind: "ShardGroup".into(),
        plural: "shardgroups".into(),
    }
}

/// The resourceVersion of an object as a number.
pub fn rv_of(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .expect("resourceVersion")
        .parse()
        .expect("numeric resourceVersion")
}
