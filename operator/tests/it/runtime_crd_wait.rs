//! Waiting for the shardring CRDs against a mocked API server: established
//! CRDs pass after one list each; missing CRDs fail after the timeout with an
//! error that names them and the install command; RBAC errors surface.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use shardring::runtime::crd_wait::{CrdWaitError, SHARDRING_CRDS, wait_for_crds_established};
use tower_test::mock::{self, Handle, SendResponse};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn mock_client() -> (kube::Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

fn crd(name: &str, established: bool) -> Value {
    let (plural, group) = name.split_once('.').unwrap();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "resourceVersion": "10"},
        "spec": {
            "group": group,
            "names": {"kind": "Thing", "plural": plural},
            "scope": "Namespaced",
            "versions": [],
        },
        "status": {
            "conditions": [{"type": "Established", "status": if established { "True" } else { "False" }}],
        },
    })
}

fn respond(send: SendResponse<Response<Body>>, code: u16, body: &Value) {
    send.send_response(
        Response::builder()
            .status(StatusCode::from_u16(code).unwrap())
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

/// Answers the watcher's initial list for `name` with `items`.
async fn serve_list(handle: &mut ApiHandle, name: &str, items: Vec<Value>) {
    let (request, send) = handle.next_request().await.expect("a list request");
    assert_eq!(request.method(), Method::GET);
    assert_eq!(request.uri().path(), CRDS);
    let query = request.uri().query().unwrap_or_default();
    assert!(
        query.contains(&format!("fieldSelector=metadata.name%3D{name}")),
        "{query}"
    );
    assert!(!query.contains("watch=true"), "{query}");
    let list = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinitionList",
        "metadata": {"resourceVersion": "100"},
        "items": items,
    });
    respond(send, 200, &list);
}

#[tokio::test]
async fn established_crds_pass() {
    let (client, mut handle) = mock_client();
    let wait = tokio::spawn(wait_for_crds_established(
        client,
        SHARDRING_CRDS,
        Duration::from_secs(30),
    ));
    for name in SHARDRING_CRDS {
        serve_list(&mut handle, name, vec![crd(name, true)]).await;
    }
    wait.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn missing_crds_fail_naming_them_and_the_install_command() {
    let (client, mut handle) = mock_client();
    let wait = tokio::spawn(wait_for_crds_established(
        client,
        SHARDRING_CRDS,
        Duration::from_secs(30),
    ));
    // The first CRD exists but is not established; the second is missing.
    serve_list(
        &mut handle,
        SHARDRING_CRDS[0],
        vec![crd(SHARDRING_CRDS[0], false)],
    )
    .await;
    // The watcher then watches; never answer, so the 30 s timeout fires.
    let (watch, _pending) = handle.next_request().await.unwrap();
    assert!(watch.uri().query().unwrap().contains("watch=true"));
    // After the timeout each remaining CRD is read once.
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(
        request.uri().path(),
        format!("{CRDS}/{}", SHARDRING_CRDS[0])
    );
    respond(send, 200, &crd(SHARDRING_CRDS[0], false));
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(
        request.uri().path(),
        format!("{CRDS}/{}", SHARDRING_CRDS[1])
    );
    respond(
        send,
        404,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "NotFound", "code": 404, "message": "not found"}),
    );

    let error = wait.await.unwrap().unwrap_err();
    assert!(matches!(&error, CrdWaitError::Missing { names } if names == &[SHARDRING_CRDS[1]]));
    let message = error.to_string();
    assert!(message.contains("consumerpools.shardring.io"), "{message}");
    assert!(
        message.contains("kubectl apply -f deploy/install.yaml"),
        "{message}"
    );
    assert!(
        message.contains("shardring crds | kubectl apply -f -"),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unestablished_crd_is_reported_as_such() {
    let (client, mut handle) = mock_client();
    let names = &SHARDRING_CRDS[..1];
    let wait = tokio::spawn(wait_for_crds_established(
        client,
        names,
        Duration::from_secs(5),
    ));
    serve_list(&mut handle, names[0], vec![crd(names[0], false)]).await;
    let (_watch, _pending) = handle.next_request().await.unwrap();
    let (_, send) = handle.next_request().await.unwrap();
    respond(send, 200, &crd(names[0], false));
    let error = wait.await.unwrap().unwrap_err();
    assert_eq!(error.metric_label(), "crd_not_established");
    assert!(
        error
            .to_string()
            .contains("kubectl describe crd shardgroups.shardring.io"),
        "{error}"
    );
}

#[tokio::test]
async fn a_forbidden_list_is_an_api_error() {
    let (client, mut handle) = mock_client();
    let wait = tokio::spawn(wait_for_crds_established(
        client,
        SHARDRING_CRDS,
        Duration::from_secs(30),
    ));
    let (_, send) = handle.next_request().await.unwrap();
    respond(
        send,
        403,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "Forbidden", "code": 403, "message": "customresourcedefinitions is forbidden"}),
    );
    let error = wait.await.unwrap().unwrap_err();
    assert_eq!(error.metric_label(), "crd_api_error");
    assert!(
        error.to_string().contains("shardgroups.shardring.io"),
        "{error}"
    );
}
