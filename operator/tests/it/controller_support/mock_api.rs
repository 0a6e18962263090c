//! The recording mock API server of the API-level controller tests (the
//! ApiServerVerifier pattern, on `tower_test`): every request's method,
//! path, query, content type and body is kept for the test to assert on,
//! and the test's `respond` function answers it, or leaves it pending (an
//! open watch that never sends an event) by answering `None`.

use parking_lot::Mutex;
use std::sync::Arc;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One request as the mock API server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `POST`, `PATCH`, ...
    pub method: String,
    /// The URI's path.
    pub path: String,
    /// Query parameters as sorted `k=v` pairs, `&`-joined.
    pub query: String,
    /// The `content-type` header, empty without one.
    pub content_type: String,
    /// The body as JSON; `null` when empty (or not JSON).
    pub body: Value,
}

impl Seen {
    /// Whether the request writes (anything but a GET).
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }
}

/// Every request seen so far, in arrival order.
pub type Requests = Arc<Mutex<Vec<Seen>>>;

/// Query parameters sorted, `&`-joined, empty pairs dropped.
fn query_pairs(query: &str) -> String {
    let mut pairs: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    pairs.sort_unstable();
    pairs.join("&")
}

/// A client of a mock API server (default namespace `namespace`) that
/// records every request and answers it with `respond`; a request answered
/// `None` stays pending for the life of the mock.
pub fn recording_client(
    namespace: &str,
    respond: impl Fn(&Method, &Seen) -> Option<Response<Body>> + Send + 'static,
) -> (Client, Requests) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Requests::default();
    let log = seen.clone();
    tokio::spawn(async move {
        // Requests left pending (open watches), kept unanswered.
        let mut pending = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            let request = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: query_pairs(parts.uri.query().unwrap_or_default()),
                content_type: parts
                    .headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let response = respond(&parts.method, &request);
            log.lock().push(request);
            match response {
                Some(response) => send.send_response(response),
                None => pending.push(send),
            }
        }
    });
    (Client::new(service, namespace), seen)
}

/// A `status` response with `value` as its JSON body.
pub fn json_response(status: u16, value: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(value).unwrap()))
        .unwrap()
}

/// A failure as the API server reports it: a `Status` object with `code`,
/// `reason` and `message`.
pub fn failure(code: u16, reason: &str, message: &str) -> Response<Body> {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "code": code, "message": message,
    });
    json_response(code, &status)
}
