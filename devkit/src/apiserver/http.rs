//! The HTTPS front: the accept loop (TLS with rustls, HTTP/1.1 with hyper),
//! and per request the bearer-token check, delays, scripted failures, the
//! request log, and routing to the handlers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::faults::{BODY_PREFIX, Faults, RequestRecord};
use super::handlers;
use super::options::MockOptions;
use super::status::ApiError;
use super::store::Store;

/// Response body: a full buffer or a watch stream.
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// State shared by every connection and the server handle.
pub(crate) struct Shared {
    /// Objects, history, snapshots.
    pub store: Store,
    /// Faults, pacing and the request log.
    pub faults: Arc<Faults>,
    /// The bearer token.
    pub token: String,
    /// Start options.
    pub options: MockOptions,
    /// Cancelled when the server stops: ends open watches.
    pub shutdown: CancellationToken,
}

/// A parsed request, as handlers see it.
#[derive(Debug)]
pub(crate) struct Req {
    /// Upper-case method.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// Decoded query parameters (last value wins).
    pub query: HashMap<String, String>,
    /// `Content-Type` without parameters.
    pub content_type: String,
    /// The client asked for PartialObjectMetadata.
    pub partial: bool,
    /// `User-Agent`.
    pub user_agent: String,
    /// The body.
    pub body: Bytes,
}

impl Req {
    /// A query parameter.
    pub fn q(&self, key: &str) -> Option<&str> {
        self.query.get(key).map(String::as_str)
    }

    /// A boolean query parameter (`true` or `1`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.q(key), Some("true" | "1"))
    }

    /// The field manager: `fieldManager`, else the user agent's program.
    pub fn manager(&self) -> String {
        match self.q("fieldManager").filter(|m| !m.is_empty()) {
            Some(m) => m.to_owned(),
            None => self
                .user_agent
                .split('/')
                .next()
                .filter(|s| !s.is_empty())
                .unwrap_or("unknown")
                .to_owned(),
        }
    }

    /// The body as JSON (YAML accepted for apply patches).
    pub fn json(&self) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.body).or_else(|e| {
            serde_yaml::from_slice(&self.body)
                .map_err(|_| ApiError::bad_request(format!("the body is not valid JSON: {e}")))
        })
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a query string.
pub(crate) fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// A JSON response.
pub(crate) fn json_response(code: u16, body: Bytes) -> Response<Body> {
    let mut resp = Response::new(Full::new(body).boxed_unsync());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The Status response of a failure (429 carries `Retry-After: 1`).
pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, Bytes::from(e.to_status().to_string()));
    if e.code == 429 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let at = Instant::now();
    let (parts, body) = req.into_parts();
    let header = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let authorized = header(header::AUTHORIZATION)
        .is_some_and(|a| a.strip_prefix("Bearer ") == Some(shared.token.as_str()));
    let content_type = header(header::CONTENT_TYPE);
    let raw_query = parts.uri.query().unwrap_or_default().to_owned();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let request = Req {
        method: parts.method.as_str().to_ascii_uppercase(),
        path: parts.uri.path().to_owned(),
        query: parse_query(&raw_query),
        content_type: content_type
            .as_deref()
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned(),
        partial: header(header::ACCEPT).is_some_and(|a| a.contains("as=PartialObjectMetadata")),
        user_agent: header(header::USER_AGENT).unwrap_or_default(),
        body,
    };
    let prefix = &request.body[..request.body.len().min(BODY_PREFIX)];
    let mut record = RequestRecord {
        method: request.method.clone(),
        path: request.path.clone(),
        query: raw_query,
        content_type,
        status: 0,
        at,
        body: String::from_utf8_lossy(prefix).into_owned(),
    };
    let resp = if authorized {
        process(&shared, request).await
    } else {
        error_response(&ApiError::unauthorized())
    };
    record.status = resp.status().as_u16();
    shared.faults.record(record);
    Ok(resp)
}

async fn process(shared: &Arc<Shared>, req: Req) -> Response<Body> {
    let delay = shared.faults.knobs().request_delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(code) = shared.faults.take_failure(&req.method, &req.path) {
        return error_response(&ApiError::scripted(code));
    }
    if req.query.contains_key("dryRun") {
        // Refused rather than ignored: a dry run must never write.
        return error_response(&ApiError::bad_request(
            "dryRun is not supported by the mock API server",
        ));
    }
    match handlers::dispatch(shared, req).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

/// Accepts connections until the task is aborted; dropping the task drops
/// (and so aborts) every connection, open watches included.
pub(crate) async fn serve(listener: TcpListener, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        connections.spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = service_fn(move |req| handle(shared.clone(), req));
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .keep_alive(true)
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}
