//! The endpoint's requests, from the head to the answer: the per-IP limit
//! (before anything costs the API server), the leader check, the bearer
//! token, the per-pod limit, and the three routes — the long-polled view,
//! the release acknowledgements and the load reports — plus an
//! unauthenticated health check.
//! Every answer carries the `X-RateLimit-*` headers of the limit that applied
//! last (the pod's once the caller is known, else its IP's), and every error
//! an [`ErrorBody`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use shardring_crds::endpoint::{
    API_PREFIX, DEFAULT_WAIT_SECONDS, HEADER_LIMIT, HEADER_REMAINING, HEADER_RESET, LoadReport,
    MAX_WAIT_SECONDS, QUERY_EPOCH, QUERY_WAIT, ReleaseOutcome, ReleaseRequest, ReleaseResponse,
};
use tokio::sync::watch;

use super::answers::{Answer, refusal};
use super::auth::{AuthError, Identity, TokenCheck};
use super::http1::Incoming;
use super::metrics::{EndpointMetrics, LimitLabel};
use super::ratelimit::{Decision, FixedWindow};
use super::{Caller, EndpointState, GroupKey, LoadRefusal, Lookup, ReleaseRejection, ServedView};

/// Largest request body accepted (a release is a few hundred bytes).
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024;

/// What the request handlers share.
pub(crate) struct App {
    pub state: EndpointState,
    pub auth: TokenCheck,
    pub ip_limit: FixedWindow<IpAddr>,
    /// Keyed by namespace and pod name.
    pub pod_limit: FixedWindow<(String, String)>,
    /// Whether this replica serves (leads and is not shutting down).
    pub serving: watch::Receiver<bool>,
    pub peer_ip_check: bool,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    pub metrics: EndpointMetrics,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("peer_ip_check", &self.peer_ip_check)
            .finish_non_exhaustive()
    }
}

/// The routes, by path.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    View(GroupKey),
    Releases(GroupKey),
    Loads(GroupKey),
    Healthz,
    Unknown,
}

impl Route {
    fn parse(path: &str) -> Self {
        let Some(rest) = path.strip_prefix(API_PREFIX) else {
            return Self::Unknown;
        };
        let segments: Vec<&str> = rest.split('/').skip(1).collect();
        match segments.as_slice() {
            ["healthz"] => Self::Healthz,
            ["namespaces", ns, "shardgroups", name, last] if !ns.is_empty() && !name.is_empty() => {
                let key = GroupKey::new(*ns, *name);
                match *last {
                    "view" => Self::View(key),
                    "releases" => Self::Releases(key),
                    "loads" => Self::Loads(key),
                    _ => Self::Unknown,
                }
            }
            _ => Self::Unknown,
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Self::View(_) => "view",
            Self::Releases(_) => "releases",
            Self::Loads(_) => "loads",
            Self::Healthz => "healthz",
            Self::Unknown => "other",
        }
    }
}

/// What an authenticated route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    View,
    Release,
    Loads,
}

/// Answers one request from `peer`.
pub(crate) async fn handle(
    app: Arc<App>,
    peer: SocketAddr,
    request: Incoming,
) -> Response<Full<Bytes>> {
    let route = Route::parse(request.uri().path());
    let label = route.label();
    let (answer, limits) = answer(&app, peer.ip(), route, request).await;
    app.metrics.request(label, answer.status.as_u16());
    let mut response = Response::new(Full::new(answer.body));
    *response.status_mut() = answer.status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(HEADER_LIMIT, HeaderValue::from(limits.limit));
    headers.insert(HEADER_REMAINING, HeaderValue::from(limits.remaining));
    headers.insert(HEADER_RESET, HeaderValue::from(limits.reset_secs));
    for (name, value) in answer.headers {
        headers.insert(name, value);
    }
    response
}

/// The answer, and the limit decision whose headers it carries.
async fn answer(app: &App, ip: IpAddr, route: Route, request: Incoming) -> (Answer, Decision) {
    let by_ip = app.ip_limit.check(&ip);
    if !by_ip.allowed {
        limited(app, "ip");
        return (Answer::rate_limited("IP address", by_ip), by_ip);
    }
    if !*app.serving.borrow() {
        return (Answer::not_leader(), by_ip);
    }
    let (group, kind) = match route {
        Route::Healthz => return (Answer::json(StatusCode::OK, r#"{"leader":true}"#), by_ip),
        Route::Unknown => {
            let message = format!("no route {}", request.uri().path());
            return (
                Answer::error(StatusCode::NOT_FOUND, "NotFound", message),
                by_ip,
            );
        }
        Route::View(group) => (group, Kind::View),
        Route::Releases(group) => (group, Kind::Release),
        Route::Loads(group) => (group, Kind::Loads),
    };
    let (allowed, allow) = if kind == Kind::View {
        (Method::GET, "GET")
    } else {
        (Method::POST, "POST")
    };
    if request.method() != allowed {
        let answer = Answer::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("use {allowed}"),
        )
        .with(header::ALLOW, HeaderValue::from_static(allow));
        return (answer, by_ip);
    }
    // Boxed: a TokenReview's future is large and a long-poll would carry
    // its room in the connection's task for as long as it waits.
    let identity = match Box::pin(authenticate(app, request.headers(), &group)).await {
        Ok(identity) => identity,
        Err(answer) => return (answer, by_ip),
    };
    let pod_key = (identity.namespace.clone(), identity.pod.clone());
    let by_pod = app.pod_limit.check(&pod_key);
    if !by_pod.allowed {
        limited(app, "pod");
        return (Answer::rate_limited("pod", by_pod), by_pod);
    }
    let caller = Caller {
        pod: &identity.pod,
        uid: &identity.uid,
        peer: app.peer_ip_check.then_some(ip),
    };
    let receiver = match app.state.directory.lookup(&group, caller) {
        Lookup::Found(receiver) => receiver,
        refused => return (refusal(&refused, &group, &identity, ip), by_pod),
    };
    let answer = match kind {
        Kind::View => {
            let query = view_query(request.uri().query());
            // The request (its headers hold the bearer token, a kilobyte or
            // more) is not kept for as long as a long-poll waits.
            drop(request);
            view_answer(app, &group, &identity, ip, receiver, query).await
        }
        Kind::Release => Box::pin(release_answer(app, &group, &identity, request)).await,
        Kind::Loads => Box::pin(loads_answer(app, &group, &identity, request)).await,
    };
    (answer, by_pod)
}

fn limited(app: &App, key: &'static str) {
    app.metrics
        .rate_limited
        .get_or_create(&LimitLabel { key })
        .inc();
}

/// The caller's pod, from its bearer token, in the group's namespace.
async fn authenticate(
    app: &App,
    headers: &HeaderMap,
    group: &GroupKey,
) -> Result<Arc<Identity>, Answer> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty());
    let result = match token {
        Some(token) => app.auth.authenticate(token).await,
        None => Err(AuthError::Missing),
    };
    let identity = result.map_err(|error| match error {
        AuthError::Missing => {
            Answer::error(StatusCode::UNAUTHORIZED, "Unauthorized", error.to_string()).with(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer realm="shardring""#),
            )
        }
        AuthError::Invalid { .. } | AuthError::NotBound(_) => {
            Answer::error(StatusCode::UNAUTHORIZED, "Unauthorized", error.to_string()).with(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer realm="shardring", error="invalid_token""#),
            )
        }
        AuthError::Unavailable(_) => Answer::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "AuthenticationUnavailable",
            error.to_string(),
        )
        .with(header::RETRY_AFTER, HeaderValue::from_static("1")),
    })?;
    if identity.namespace != group.namespace {
        return Err(Answer::error(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "the token is of namespace {}; a pod may only use ShardGroups of its own \
                 namespace, not {}",
                identity.namespace, group
            ),
        ));
    }
    Ok(identity)
}

/// `epoch` and `waitSeconds` of the view route's query.
fn view_query(query: Option<&str>) -> Result<(u64, u64), String> {
    let (mut epoch, mut wait) = (0, DEFAULT_WAIT_SECONDS);
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("query parameter {key}={value:?}: {e}"))
        };
        match key {
            QUERY_EPOCH => epoch = number()?,
            QUERY_WAIT => wait = number()?,
            _ => {}
        }
    }
    Ok((epoch, wait.min(MAX_WAIT_SECONDS)))
}

/// Counts a waiting long-poll while it lives.
struct OpenPoll<'a>(&'a EndpointMetrics);

impl<'a> OpenPoll<'a> {
    fn new(metrics: &'a EndpointMetrics) -> Self {
        metrics.open_long_polls.inc();
        Self(metrics)
    }
}

impl Drop for OpenPoll<'_> {
    fn drop(&mut self) {
        self.0.open_long_polls.dec();
    }
}

/// The caller's view: now if it is newer than the epoch it has, else when it
/// becomes newer or the wait ends.
async fn view_answer(
    app: &App,
    group: &GroupKey,
    who: &Identity,
    ip: IpAddr,
    mut receiver: watch::Receiver<Arc<ServedView>>,
    query: Result<(u64, u64), String>,
) -> Answer {
    let (since, wait) = match query {
        Ok(query) => query,
        Err(message) => return Answer::error(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    let current = receiver.borrow_and_update().clone();
    if since == 0 || current.epoch > since || wait == 0 {
        return view_body(&current);
    }
    let _open = OpenPoll::new(&app.metrics);
    let deadline = tokio::time::sleep(Duration::from_secs(wait));
    tokio::pin!(deadline);
    let mut serving = app.serving.clone();
    loop {
        tokio::select! {
            changed = receiver.changed() => {
                if changed.is_err() {
                    // The pod left the group, or the group is gone (or the
                    // directory was cleared because leadership ended).
                    if !*app.serving.borrow() {
                        return Answer::not_leader();
                    }
                    let caller = Caller { pod: &who.pod, uid: &who.uid, peer: app.peer_ip_check.then_some(ip) };
                    return match app.state.directory.lookup(group, caller) {
                        // Replaced by a new channel at once (not expected
                        // from the directory, but then its view is current).
                        Lookup::Found(receiver) => view_body(&receiver.borrow()),
                        refused => refusal(&refused, group, who, ip),
                    };
                }
                let view = receiver.borrow_and_update().clone();
                if view.epoch > since {
                    return view_body(&view);
                }
            }
            _ = serving.wait_for(|serving| !*serving) => return Answer::not_leader(),
            () = &mut deadline => return view_body(&receiver.borrow()),
        }
    }
}

fn view_body(view: &ServedView) -> Answer {
    Answer::json(StatusCode::OK, view.body.clone())
}

/// The request's body, whole, within [`MAX_BODY_BYTES`] and the body
/// timeout; or the answer that refuses it.
async fn read_body(app: &App, request: Incoming) -> Result<Bytes, Answer> {
    let too_large = || {
        Answer::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let body = Limited::new((*request).into_body(), MAX_BODY_BYTES).collect();
    match tokio::time::timeout(app.body_timeout, body).await {
        Err(_) => Err(Answer::error(
            StatusCode::REQUEST_TIMEOUT,
            "RequestTimeout",
            "the body did not arrive in time",
        )),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(error)) => Err(Answer::error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            error.to_string(),
        )),
        Ok(Ok(body)) => Ok(body.to_bytes()),
    }
}

/// Records a release acknowledgement.
async fn release_answer(app: &App, group: &GroupKey, who: &Identity, request: Incoming) -> Answer {
    let body = match read_body(app, request).await {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    let release: ReleaseRequest = match serde_json::from_slice(&body) {
        Ok(release) => release,
        Err(error) => {
            return Answer::error(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("invalid release: {error}"),
            );
        }
    };
    let submitted =
        app.state
            .releases
            .submit(group, &who.pod, &who.uid, &release, jiff::Timestamp::now());
    match submitted {
        Ok(outcome) => {
            let status = match outcome {
                ReleaseOutcome::Accepted => StatusCode::ACCEPTED,
                ReleaseOutcome::Duplicate => StatusCode::OK,
            };
            let response = ReleaseResponse {
                shard: release.shard,
                outcome,
            };
            let body = serde_json::to_vec(&response).expect("a ReleaseResponse always serializes");
            Answer::json(status, body)
        }
        Err(rejection) => {
            let status = match rejection {
                ReleaseRejection::UnknownGroup(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            Answer::error(status, rejection.reason(), rejection.to_string())
        }
    }
}

/// Records a load report: 200 with the rates recorded and those refused
/// (each with its reason), or the refusal of the whole report.
async fn loads_answer(app: &App, group: &GroupKey, who: &Identity, request: Incoming) -> Answer {
    let body = match read_body(app, request).await {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    let report: LoadReport = match serde_json::from_slice(&body) {
        Ok(report) => report,
        Err(error) => {
            return Answer::error(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("invalid load report: {error}"),
            );
        }
    };
    match app
        .state
        .loads
        .submit(group, &who.pod, &report, jiff::Timestamp::now())
    {
        Ok(response) => {
            let body =
                serde_json::to_vec(&response).expect("a LoadReportResponse always serializes");
            Answer::json(StatusCode::OK, body)
        }
        Err(refusal) => {
            let status = match refusal {
                LoadRefusal::UnknownGroup(_) => StatusCode::NOT_FOUND,
                LoadRefusal::Report(shardring_core::load::ReportRefusal::TooManyShards(_)) => {
                    StatusCode::PAYLOAD_TOO_LARGE
                }
                _ => StatusCode::CONFLICT,
            };
            Answer::error(status, refusal.reason(), refusal.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_by_path() {
        assert_eq!(
            Route::parse("/v1/namespaces/ns/shardgroups/g/view"),
            Route::View(GroupKey::new("ns", "g"))
        );
        assert_eq!(
            Route::parse("/v1/namespaces/ns/shardgroups/g/releases"),
            Route::Releases(GroupKey::new("ns", "g"))
        );
        assert_eq!(
            Route::parse("/v1/namespaces/ns/shardgroups/g/loads"),
            Route::Loads(GroupKey::new("ns", "g"))
        );
        assert_eq!(Route::parse("/v1/healthz"), Route::Healthz);
        for other in [
            "/",
            "/v1",
            "/v2/healthz",
            "/v1/namespaces//shardgroups/g/view",
            "/v1/namespaces/ns/shardgroups/g/other",
            "/v1/namespaces/ns/shardgroups/g/view/x",
        ] {
            assert_eq!(Route::parse(other), Route::Unknown, "{other}");
        }
    }

    #[test]
    fn the_query_defaults_clamps_and_refuses_garbage() {
        assert_eq!(view_query(None), Ok((0, DEFAULT_WAIT_SECONDS)));
        assert_eq!(view_query(Some("epoch=7&waitSeconds=5")), Ok((7, 5)));
        assert_eq!(
            view_query(Some("waitSeconds=100000&x=y")),
            Ok((0, MAX_WAIT_SECONDS))
        );
        let err = view_query(Some("epoch=-1")).unwrap_err();
        assert!(err.contains("epoch"), "{err}");
    }
}
