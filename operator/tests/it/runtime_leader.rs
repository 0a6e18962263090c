//! Leader election against a mocked API server: every request's method, path
//! and body is asserted, for the one-shot Lease operations (create, take
//! over, respect a held Lease, renew, 409, release) and for the election
//! loop (acquire, step down on another holder or a missed renew deadline,
//! release on shutdown, exit on a fatal error).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use serde_json::{Value, json};
use shardring::clock::Clock;
use shardring::runtime::leader::{LeaderConfig, LeaderElector, LeaderMetrics};
use shardring::runtime::leader_lease::{Attempt, LeaderLease};
use tokio_util::sync::CancellationToken;
use tower_test::mock::{self, Handle, SendResponse};

const NS: &str = "shardring-system";
const NAME: &str = "shardring-leader";
const PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/shardring-system/leases/shardring-leader";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/shardring-system/leases";

/// A settable wall clock.
#[derive(Debug)]
struct TestClock(Mutex<Timestamp>);

impl TestClock {
    fn at(second: i64) -> Arc<Self> {
        Arc::new(Self(Mutex::new(Timestamp::from_second(second).unwrap())))
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        *self.0.lock()
    }
}

const NOW: i64 = 1_800_000_000;

fn ts(second: i64) -> String {
    jiff::fmt::strtime::format(
        "%Y-%m-%dT%H:%M:%S%.6fZ",
        Timestamp::from_second(second).unwrap(),
    )
    .unwrap()
}

fn lease_json(holder: Option<&str>, renew: i64, rv: &str, transitions: i32) -> Value {
    let mut spec = json!({
        "leaseDurationSeconds": 15,
        "acquireTime": ts(renew - 100),
        "renewTime": ts(renew),
        "leaseTransitions": transitions,
    });
    if let Some(holder) = holder {
        spec["holderIdentity"] = json!(holder);
    }
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS, "resourceVersion": rv},
        "spec": spec,
    })
}

fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
           "message": format!("{reason} (test)"), "reason": reason, "code": code})
}

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn mock_client() -> (kube::Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

/// Takes the next request, asserts method and path, returns its JSON body.
async fn expect(
    handle: &mut ApiHandle,
    method: Method,
    path: &str,
) -> (Value, SendResponse<Response<Body>>) {
    let (request, send) = handle.next_request().await.expect("a request");
    assert_eq!(request.method(), method, "method of {}", request.uri());
    assert_eq!(request.uri().path(), path);
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (body, send)
}

fn respond(send: SendResponse<Response<Body>>, code: u16, body: &Value) {
    let response = Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap();
    send.send_response(response);
}

/// Answers a GET of the Lease with `lease` (or 404 for `None`).
async fn serve_get(handle: &mut ApiHandle, lease: Option<Value>) {
    let (body, send) = expect(handle, Method::GET, PATH).await;
    assert_eq!(body, Value::Null);
    match lease {
        Some(lease) => respond(send, 200, &lease),
        None => respond(send, 404, &status(404, "NotFound")),
    }
}

fn lock(client: kube::Client, identity: &str) -> LeaderLease {
    LeaderLease::new(client, NS, NAME, identity, Duration::from_secs(15))
        .with_clock(TestClock::at(NOW))
}

#[tokio::test]
async fn creates_the_lease_when_absent() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    serve_get(&mut handle, None).await;
    let (body, send) = expect(&mut handle, Method::POST, COLLECTION).await;
    assert_eq!(body["metadata"]["name"], NAME);
    assert_eq!(body["spec"]["holderIdentity"], "pod-a");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(body["spec"]["acquireTime"], ts(NOW));
    assert_eq!(body["spec"]["renewTime"], ts(NOW));
    assert_eq!(body["spec"]["leaseTransitions"], 0);
    respond(send, 201, &body);
    assert_eq!(attempt.await.unwrap().unwrap(), Attempt::Acquired);
}

#[tokio::test]
async fn takes_over_an_expired_lease_with_a_guarded_replace() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    serve_get(
        &mut handle,
        Some(lease_json(Some("pod-b"), NOW - 16, "41", 3)),
    )
    .await;
    let (body, send) = expect(&mut handle, Method::PUT, PATH).await;
    assert_eq!(
        body["metadata"]["resourceVersion"], "41",
        "replace must be guarded"
    );
    assert_eq!(body["spec"]["holderIdentity"], "pod-a");
    assert_eq!(body["spec"]["acquireTime"], ts(NOW));
    assert_eq!(body["spec"]["renewTime"], ts(NOW));
    assert_eq!(body["spec"]["leaseTransitions"], 4);
    respond(send, 200, &body);
    assert_eq!(attempt.await.unwrap().unwrap(), Attempt::Acquired);
}

#[tokio::test]
async fn takes_a_released_lease_at_once() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    // Released a second ago: no holder, so no need to wait for expiry.
    serve_get(&mut handle, Some(lease_json(None, NOW - 1, "50", 4))).await;
    let (body, send) = expect(&mut handle, Method::PUT, PATH).await;
    assert_eq!(body["metadata"]["resourceVersion"], "50");
    assert_eq!(body["spec"]["holderIdentity"], "pod-a");
    respond(send, 200, &body);
    assert_eq!(attempt.await.unwrap().unwrap(), Attempt::Acquired);
}

#[tokio::test]
async fn does_not_take_a_lease_that_is_held() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    // renewTime + 15 s == now: not yet expired.
    serve_get(
        &mut handle,
        Some(lease_json(Some("pod-b"), NOW - 15, "41", 3)),
    )
    .await;
    assert_eq!(
        attempt.await.unwrap().unwrap(),
        Attempt::HeldBy("pod-b".into())
    );
    // The attempt finished after one GET: no write was sent.
    drop(handle);
}

#[tokio::test]
async fn renews_its_own_lease() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    serve_get(
        &mut handle,
        Some(lease_json(Some("pod-a"), NOW - 2, "77", 5)),
    )
    .await;
    let (body, send) = expect(&mut handle, Method::PUT, PATH).await;
    assert_eq!(body["metadata"]["resourceVersion"], "77");
    assert_eq!(body["spec"]["holderIdentity"], "pod-a");
    assert_eq!(body["spec"]["renewTime"], ts(NOW));
    assert_eq!(
        body["spec"]["acquireTime"],
        ts(NOW - 102),
        "acquireTime is kept"
    );
    assert_eq!(
        body["spec"]["leaseTransitions"], 5,
        "a renewal is no transition"
    );
    respond(send, 200, &body);
    assert_eq!(attempt.await.unwrap().unwrap(), Attempt::Renewed);
}

#[tokio::test]
async fn a_conflicting_write_means_not_leader() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    serve_get(
        &mut handle,
        Some(lease_json(Some("pod-b"), NOW - 60, "41", 3)),
    )
    .await;
    let (_, send) = expect(&mut handle, Method::PUT, PATH).await;
    respond(send, 409, &status(409, "Conflict"));
    let attempt = attempt.await.unwrap().unwrap();
    assert_eq!(attempt, Attempt::Conflict);
    assert!(!attempt.is_leader());
}

#[tokio::test]
async fn a_concurrent_create_means_not_leader() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    serve_get(&mut handle, None).await;
    let (_, send) = expect(&mut handle, Method::POST, COLLECTION).await;
    respond(send, 409, &status(409, "AlreadyExists"));
    assert_eq!(attempt.await.unwrap().unwrap(), Attempt::Conflict);
}

#[tokio::test]
async fn release_clears_the_holder() {
    let (client, mut handle) = mock_client();
    let release = tokio::spawn(async move { lock(client, "pod-a").release().await });
    serve_get(
        &mut handle,
        Some(lease_json(Some("pod-a"), NOW - 1, "90", 2)),
    )
    .await;
    let (body, send) = expect(&mut handle, Method::PUT, PATH).await;
    assert_eq!(body["metadata"]["resourceVersion"], "90");
    assert!(body["spec"].get("holderIdentity").is_none(), "{body}");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 1);
    respond(send, 200, &body);
    assert!(release.await.unwrap().unwrap());
}

#[tokio::test]
async fn release_leaves_another_holders_lease_alone() {
    let (client, mut handle) = mock_client();
    let release = tokio::spawn(async move { lock(client, "pod-a").release().await });
    serve_get(
        &mut handle,
        Some(lease_json(Some("pod-b"), NOW - 1, "90", 2)),
    )
    .await;
    assert!(!release.await.unwrap().unwrap());
}

#[tokio::test]
async fn forbidden_is_fatal() {
    let (client, mut handle) = mock_client();
    let attempt = tokio::spawn(async move { lock(client, "pod-a").try_acquire_or_renew().await });
    let (_, send) = expect(&mut handle, Method::GET, PATH).await;
    respond(send, 403, &status(403, "Forbidden"));
    let error = attempt.await.unwrap().unwrap_err();
    assert!(error.is_fatal(), "{error}");
    assert!(
        error
            .to_string()
            .contains("shardring-system/shardring-leader"),
        "{error}"
    );
}

// ---- the election loop (tokio time paused: sleeps advance instantly) ----

fn elector(client: kube::Client, metrics: LeaderMetrics) -> LeaderElector {
    LeaderElector::new(client, LeaderConfig::new(NAME, NS, "pod-a"))
        .with_clock(TestClock::at(NOW))
        .with_metrics(metrics)
}

/// Serves one successful create (first acquisition).
async fn serve_acquire(handle: &mut ApiHandle) {
    serve_get(handle, None).await;
    let (body, send) = expect(handle, Method::POST, COLLECTION).await;
    let mut created = body;
    created["metadata"]["resourceVersion"] = json!("1");
    respond(send, 201, &created);
}

#[tokio::test(start_paused = true)]
async fn loop_acquires_renews_and_releases_on_shutdown() {
    let (client, mut handle) = mock_client();
    let metrics = LeaderMetrics::default();
    let shutdown = CancellationToken::new();
    let mut lease = elector(client, metrics.clone()).spawn(shutdown.clone());
    assert!(!*lease.is_leader.borrow());

    serve_acquire(&mut handle).await;
    lease.is_leader.changed().await.unwrap();
    assert!(*lease.is_leader.borrow());
    assert_eq!(metrics.is_leader.get(), 1);

    // One retry period later: a renewal.
    serve_get(&mut handle, Some(lease_json(Some("pod-a"), NOW, "1", 0))).await;
    let (body, send) = expect(&mut handle, Method::PUT, PATH).await;
    assert_eq!(body["spec"]["holderIdentity"], "pod-a");
    respond(send, 200, &body);

    shutdown.cancel();
    // Release: read, then clear the holder.
    serve_get(&mut handle, Some(lease_json(Some("pod-a"), NOW, "2", 0))).await;
    let (body, send) = expect(&mut handle, Method::PUT, PATH).await;
    assert!(body["spec"].get("holderIdentity").is_none(), "{body}");
    respond(send, 200, &body);

    lease.task.await.unwrap().unwrap();
    assert!(!*lease.is_leader.borrow());
    assert_eq!(metrics.acquisitions.get(), 1);
    assert_eq!(metrics.losses.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn loop_steps_down_at_once_when_another_holder_is_observed() {
    let (client, mut handle) = mock_client();
    let metrics = LeaderMetrics::default();
    let shutdown = CancellationToken::new();
    let mut lease = elector(client, metrics.clone()).spawn(shutdown.clone());
    serve_acquire(&mut handle).await;
    lease.is_leader.changed().await.unwrap();
    assert!(*lease.is_leader.borrow());

    serve_get(&mut handle, Some(lease_json(Some("pod-b"), NOW, "5", 1))).await;
    lease.is_leader.changed().await.unwrap();
    assert!(!*lease.is_leader.borrow());
    assert_eq!(metrics.losses.get(), 1);

    // Not the holder: shutdown releases nothing and sends no request.
    shutdown.cancel();
    lease.task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn loop_steps_down_when_renewals_fail_past_the_deadline() {
    let (client, mut handle) = mock_client();
    let shutdown = CancellationToken::new();
    let mut lease = elector(client, LeaderMetrics::default()).spawn(shutdown.clone());
    let acquired_at = tokio::time::Instant::now();
    serve_acquire(&mut handle).await;
    lease.is_leader.changed().await.unwrap();

    // Every renewal now fails with a server error.
    let failing = tokio::spawn(async move {
        loop {
            let Some((request, send)) = handle.next_request().await else {
                return;
            };
            assert_eq!(request.method(), Method::GET);
            respond(send, 500, &status(500, "InternalError"));
        }
    });
    lease.is_leader.changed().await.unwrap();
    assert!(!*lease.is_leader.borrow());
    let elapsed = acquired_at.elapsed();
    assert!(
        elapsed >= Duration::from_secs(10) && elapsed < Duration::from_secs(12),
        "stepped down after {elapsed:?}, want the 10 s renew deadline"
    );
    shutdown.cancel();
    lease.task.await.unwrap().unwrap();
    failing.abort();
}

#[tokio::test(start_paused = true)]
async fn loop_ends_with_an_error_when_forbidden() {
    let (client, mut handle) = mock_client();
    let lease = elector(client, LeaderMetrics::default()).spawn(CancellationToken::new());
    let (_, send) = expect(&mut handle, Method::GET, PATH).await;
    respond(send, 403, &status(403, "Forbidden"));
    let error = lease.task.await.unwrap().unwrap_err();
    assert!(error.to_string().contains("Forbidden"), "{error}");
}

#[tokio::test]
async fn invalid_timing_is_rejected() {
    let mut config = LeaderConfig::new(NAME, NS, "pod-a");
    config.renew_deadline = Duration::from_secs(20);
    assert!(config.validate().is_err());
    assert!(LeaderConfig::new(NAME, NS, "").validate().is_err());
    assert!(LeaderConfig::new(NAME, NS, "pod-a").validate().is_ok());
}
