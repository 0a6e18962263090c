//! The mock API server of the reconcile tests: the recording mock of
//! `controller_support::mock_api`, answering like the API server would for
//! the fixture group (its pods, the ShardGroup and its finalizer patch,
//! Events), and answering ConfigMap writes as a test asks ([`CmAnswer`]):
//! written, failed, or refused with a 409.

use http::Response;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use shardring::crds::ShardGroup;

use crate::controller_support::mock_api::{Requests, failure, json_response, recording_client};
use shardring_core::fixtures::*;

/// How the mock API server answers ConfigMap writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum CmAnswer {
    /// Like the API server: the object written.
    Written,
    /// Every ConfigMap write gets a 500.
    Fail,
    /// 409 Conflict on an update (the resourceVersion precondition failed)
    /// and 409 AlreadyExists on a create.
    Conflict,
}

/// Mock API server: records requests, answers like the API server would.
pub(super) fn mock_client(group: ShardGroup) -> (Client, Requests) {
    mock_client_with(group, CmAnswer::Written)
}

/// Like [`mock_client`], answering ConfigMap writes as `cm`.
pub(super) fn mock_client_with(group: ShardGroup, cm: CmAnswer) -> (Client, Requests) {
    recording_client("default", move |method, seen| {
        Some(respond(method, &seen.path, &seen.body, &group, cm))
    })
}

fn respond(
    method: &http::Method,
    path: &str,
    body: &Value,
    group: &ShardGroup,
    cm: CmAnswer,
) -> Response<Body> {
    let is_cm = path.contains("/configmaps");
    if is_cm && cm == CmAnswer::Fail {
        return failure(500, "InternalError", "etcd timeout");
    }
    if is_cm && cm == CmAnswer::Conflict {
        return if method == http::Method::POST {
            failure(
                409,
                "AlreadyExists",
                "configmaps \"orders-assignment\" already exists",
            )
        } else {
            failure(
                409,
                "Conflict",
                "Operation cannot be fulfilled on configmaps \"orders-assignment\": the object has been modified; please apply your changes to the latest version and try again",
            )
        };
    }
    let json = if path.contains("/pods/missing") {
        return failure(404, "NotFound", "pods \"missing\" not found");
    } else if is_cm || path.ends_with("/events") {
        body.clone()
    } else if let Some(name) = path.split("/pods/").nth(1) {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}})
    } else if path.contains("/shardgroups/") {
        let mut g = group.clone();
        if method == http::Method::PATCH && body.is_array() {
            g.metadata.finalizers = None;
        }
        serde_json::to_value(&g).unwrap()
    } else {
        panic!("unexpected request {method} {path}")
    };
    json_response(200, &json)
}
