//! The endpoint's requests, from the head to the answer: the per-IP limit
//! (before anything costs the API server), the body (read whole, bounded,
//! before anything else), the leader check, the bearer token, the per-pod
//! limit, and the routes — the long-polled view, the release
//! acknowledgements and the load reports — plus an unauthenticated health
//! check. Every answer
//! carries the `X-RateLimit-*` headers of the limit that applied last (the
//! pod's once the caller is known, else its IP's), and every error an
//! [`ErrorBody`]; so do the answers to heads refused before hyper reads
//! them ([`unparsed`]).
//!
//! The routes are a table ([`Route::parse`]): a group-scoped route is a row
//! of [`GROUP_ROUTES`] (its last path segment and method) and an arm of
//! [`answer`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use shardring_crds::endpoint::{
    API_PREFIX, DEFAULT_WAIT_SECONDS, HEADER_LIMIT, HEADER_REMAINING, HEADER_RESET, LoadReport,
    MAX_WAIT_SECONDS, QUERY_EPOCH, QUERY_WAIT, ReleaseOutcome, ReleaseRequest, ReleaseResponse,
};
use tokio::sync::watch;

use super::answers::{Answer, refusal};
use super::auth::{AuthError, Identity, TokenCheck};
use super::head::MAX_HEAD_BYTES;
use super::metrics::{EndpointMetrics, LimitLabel};
use super::ratelimit::{Admission, FixedWindow};
use super::request_body;
use super::serving::Serving;
use super::state::EndpointState;
use super::{Caller, LoadRefusal, Lookup, ReleaseRejection, ServedView};
use shardring_core::GroupKey;

/// What the request handlers share.
pub(crate) struct App {
    pub state: EndpointState,
    pub auth: TokenCheck,
    pub ip_limit: FixedWindow<IpAddr>,
    /// Keyed by namespace and pod name.
    pub pod_limit: FixedWindow<(String, String)>,
    /// Whether this replica serves (leads and is not shutting down).
    pub serving: Serving,
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

/// The routes under a ShardGroup
/// (`/v1/namespaces/{ns}/shardgroups/{name}/{route}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupRoute {
    /// The caller's view, long-polled.
    View,
    /// Release acknowledgements.
    Releases,
    /// Measured loads of the caller's active shards.
    Loads,
}

/// Each group route's last path segment, method and metrics label.
const GROUP_ROUTES: [(&str, GroupRoute, Method, &str); 3] = [
    ("view", GroupRoute::View, Method::GET, "view"),
    ("releases", GroupRoute::Releases, Method::POST, "releases"),
    ("loads", GroupRoute::Loads, Method::POST, "loads"),
];

/// The routes, by path.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Group(GroupKey, GroupRoute),
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
                GROUP_ROUTES
                    .iter()
                    .find(|(segment, ..)| segment == last)
                    .map_or(Self::Unknown, |(_, route, ..)| {
                        Self::Group(GroupKey::new(*ns, *name), *route)
                    })
            }
            _ => Self::Unknown,
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Self::Group(_, route) => group_route(*route).3,
            Self::Healthz => "healthz",
            Self::Unknown => "other",
        }
    }
}

fn group_route(route: GroupRoute) -> &'static (&'static str, GroupRoute, Method, &'static str) {
    GROUP_ROUTES
        .iter()
        .find(|(_, r, ..)| *r == route)
        .expect("every group route has a row")
}

/// Answers one request from `peer`. The future is what an open long-poll
/// keeps for as long as it waits, so it is kept small: not an `async fn`,
/// whose future would keep room for the request it was given (a few hundred
/// bytes) to its end, and everything before a long-poll's wait (the body,
/// the token check) runs in a box of its own, freed before the wait starts.
pub(crate) fn handle(
    app: Arc<App>,
    peer: SocketAddr,
    request: hyper::Request<Incoming>,
) -> impl Future<Output = Response<Full<Bytes>>> + Send + 'static {
    let route = Route::parse(request.uri().path());
    let label = route.label();
    let checks = {
        let app = app.clone();
        Box::pin(async move { answer(&app, peer.ip(), route, request).await })
    };
    async move {
        // The reply is taken apart in a block of its own: a binding still in
        // scope would keep its room across the wait.
        let (poll, limits) = {
            let (reply, limits) = checks.await;
            match reply {
                Reply::Now(answer) => return respond(&app, label, answer, limits),
                Reply::Wait(poll) => (poll, limits),
            }
        };
        let answer = poll.wait(&app).await;
        respond(&app, label, answer, limits)
    }
}

/// A request's answer: ready, or a long-poll that waits for it.
enum Reply {
    Now(Answer),
    Wait(LongPoll),
}

impl From<Answer> for Reply {
    fn from(answer: Answer) -> Self {
        Self::Now(answer)
    }
}

/// The response of `answer`, counted, with the rate-limit headers.
fn respond(
    app: &App,
    label: &'static str,
    answer: Answer,
    limits: Admission,
) -> Response<Full<Bytes>> {
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

/// The endpoint's answer (HTTP/1.1, encoded) to a request head it refused
/// before hyper read it (`status` 400, or 431 over the head limit, or 414;
/// `head::check`): an [`ErrorBody`], the `X-RateLimit-*` headers of the
/// peer's IP (the request counts), and `Connection: close`.
pub(crate) fn unparsed(app: &App, ip: IpAddr, status: StatusCode) -> Bytes {
    let limits = app.ip_limit.check(&ip);
    let answer = match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => Answer::error(
            status,
            "HeadersTooLarge",
            format!(
                "the request head is larger than {MAX_HEAD_BYTES} bytes, or has too many fields"
            ),
        ),
        StatusCode::URI_TOO_LONG => Answer::error(status, "UriTooLong", "the URI is too long"),
        _ => Answer::error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the request is not valid HTTP/1.1",
        ),
    };
    let response = respond(app, "other", answer.closing(), limits);
    request_body::encode(&response)
}

/// The answer (or the long-poll that waits for it), and the limit
/// decision whose headers it carries.
async fn answer(
    app: &App,
    ip: IpAddr,
    route: Route,
    request: hyper::Request<Incoming>,
) -> (Reply, Admission) {
    let by_ip = app.ip_limit.check(&ip);
    let (parts, body) = request.into_parts();
    if !by_ip.allowed {
        limited(app, "ip");
        let answer = Answer::rate_limited("IP address", by_ip);
        return (request_body::unread(answer, &body).into(), by_ip);
    }
    // Read whole before anything else: an answer is never written while a
    // body is still arriving (a refused one is answered and the connection
    // closed, lingering).
    let body = match request_body::read(&parts.headers, body, app.body_timeout).await {
        Ok(body) => body,
        Err(refused) => return (refused.into(), by_ip),
    };
    if !app.serving.now() {
        return (Answer::not_leader().into(), by_ip);
    }
    let (group, route) = match route {
        Route::Healthz => {
            let answer = Answer::json(StatusCode::OK, r#"{"leader":true}"#);
            return (answer.into(), by_ip);
        }
        Route::Unknown => {
            let message = format!("no route {}", parts.uri.path());
            let answer = Answer::error(StatusCode::NOT_FOUND, "NotFound", message);
            return (answer.into(), by_ip);
        }
        Route::Group(group, route) => (group, route),
    };
    let (_, _, allowed, _) = group_route(route);
    if parts.method != *allowed {
        let answer = Answer::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("use {allowed}"),
        )
        .with(
            header::ALLOW,
            HeaderValue::from_str(allowed.as_str()).expect("a method is a header value"),
        );
        return (answer.into(), by_ip);
    }
    // Boxed: a TokenReview's future is large, and only one request in many
    // needs one (the cache answers the others).
    let identity = match Box::pin(authenticate(app, &parts.headers, &group)).await {
        Ok(identity) => identity,
        Err(answer) => return (answer.into(), by_ip),
    };
    let pod_key = (identity.namespace.clone(), identity.pod.clone());
    let by_pod = app.pod_limit.check(&pod_key);
    if !by_pod.allowed {
        limited(app, "pod");
        return (Answer::rate_limited("pod", by_pod).into(), by_pod);
    }
    let caller = Caller {
        pod: &identity.pod,
        uid: &identity.uid,
        peer: app.peer_ip_check.then_some(ip),
    };
    let receiver = match app.state.directory.lookup(&group, caller) {
        Lookup::Found(receiver) => receiver,
        refused => {
            return (refuse(app, &refused, &group, &identity, ip).into(), by_pod);
        }
    };
    let reply = match route {
        GroupRoute::View => {
            let query = view_query(parts.uri.query());
            view_reply(group, identity, ip, receiver, query)
        }
        GroupRoute::Releases => release_answer(app, &group, &identity, &body).into(),
        GroupRoute::Loads => loads_answer(app, &group, &identity, &body).into(),
    };
    (reply, by_pod)
}

/// Why the directory refused the caller — unless this replica stopped
/// leading meanwhile (the views are forgotten then): `NotLeader`.
fn refuse(app: &App, lookup: &Lookup, group: &GroupKey, who: &Identity, ip: IpAddr) -> Answer {
    if app.serving.now() {
        refusal(lookup, group, who, ip)
    } else {
        Answer::not_leader()
    }
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

/// The caller's view now if it is newer than the epoch it has (or it asked
/// not to wait), else the long-poll that waits for a newer one.
fn view_reply(
    group: GroupKey,
    who: Arc<Identity>,
    ip: IpAddr,
    mut receiver: watch::Receiver<Arc<ServedView>>,
    query: Result<(u64, u64), String>,
) -> Reply {
    let (since, wait) = match query {
        Ok(query) => query,
        Err(message) => {
            return Answer::error(StatusCode::BAD_REQUEST, "BadRequest", message).into();
        }
    };
    let current = receiver.borrow_and_update().clone();
    if since == 0 || current.epoch > since || wait == 0 {
        return view_body(&current).into();
    }
    Reply::Wait(LongPoll {
        group,
        who,
        ip,
        receiver,
        since,
        wait: Duration::from_secs(wait),
    })
}

/// A long-poll of the view route that waits: what the wait needs and
/// nothing else of its request (the head, whose headers hold the bearer
/// token, and the checks' state are freed before it starts).
struct LongPoll {
    group: GroupKey,
    who: Arc<Identity>,
    ip: IpAddr,
    receiver: watch::Receiver<Arc<ServedView>>,
    /// The epoch the caller has.
    since: u64,
    wait: Duration,
}

impl LongPoll {
    /// The caller's view once it is newer than the one it has or the wait
    /// ends; `NotLeader` once this replica stops serving; the directory's
    /// refusal once the caller is no longer in the group.
    async fn wait(mut self, app: &App) -> Answer {
        let _open = OpenPoll::new(&app.metrics);
        let deadline = tokio::time::sleep(self.wait);
        tokio::pin!(deadline);
        let ended = app.serving.ended();
        tokio::pin!(ended);
        loop {
            tokio::select! {
                changed = self.receiver.changed() => {
                    if changed.is_err() {
                        return self.gone(app);
                    }
                    let view = self.receiver.borrow_and_update().clone();
                    if view.epoch > self.since {
                        return view_body(&view);
                    }
                }
                () = &mut ended => return Answer::not_leader(),
                () = &mut deadline => return view_body(&self.receiver.borrow()),
            }
        }
    }

    /// The answer once the caller's channel closed: the pod left the group,
    /// or the group is gone (or the directory was cleared because
    /// leadership ended).
    fn gone(&self, app: &App) -> Answer {
        let caller = Caller {
            pod: &self.who.pod,
            uid: &self.who.uid,
            peer: app.peer_ip_check.then_some(self.ip),
        };
        match app.state.directory.lookup(&self.group, caller) {
            // Replaced by a new channel at once (not expected from the
            // directory, but then its view is current).
            Lookup::Found(receiver) if app.serving.now() => view_body(&receiver.borrow()),
            Lookup::Found(_) => Answer::not_leader(),
            refused => refuse(app, &refused, &self.group, &self.who, self.ip),
        }
    }
}

fn view_body(view: &ServedView) -> Answer {
    Answer::json(StatusCode::OK, view.body.clone())
}

/// Records a release acknowledgement.
fn release_answer(app: &App, group: &GroupKey, who: &Identity, body: &Bytes) -> Answer {
    let release: ReleaseRequest = match serde_json::from_slice(body) {
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
fn loads_answer(app: &App, group: &GroupKey, who: &Identity, body: &Bytes) -> Answer {
    let report: LoadReport = match serde_json::from_slice(body) {
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
            Route::Group(GroupKey::new("ns", "g"), GroupRoute::View)
        );
        assert_eq!(
            Route::parse("/v1/namespaces/ns/shardgroups/g/releases"),
            Route::Group(GroupKey::new("ns", "g"), GroupRoute::Releases)
        );
        assert_eq!(
            Route::parse("/v1/namespaces/ns/shardgroups/g/loads"),
            Route::Group(GroupKey::new("ns", "g"), GroupRoute::Loads)
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

    /// An open long-poll keeps the answer's future (boxed by the
    /// connection's service, beside its request guard) for as long as it
    /// waits: the wait's state, not the request's or the checks' before it,
    /// so the box stays within the allocator's 1 KiB size class.
    #[test]
    fn a_waiting_answer_is_small() {
        fn future_size<A, B, C, F>(_: fn(A, B, C) -> F) -> usize {
            size_of::<F>()
        }
        let size = future_size(handle);
        eprintln!("an answer's future: {size} bytes");
        assert!(size <= 1000, "an answer's future is {size} bytes");
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
