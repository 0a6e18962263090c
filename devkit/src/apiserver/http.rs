//! The HTTPS front: the accept loop (TLS with rustls, HTTP/1.1 with hyper),
//! and per request the bearer-token check, delays, scripted failures, the
//! request log, and routing to the handlers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::exchange::{Body, Req, Shared, json_response};
use super::faults::{BODY_PREFIX, RequestRecord};
use super::handlers;
use super::status::ApiError;

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
    let answer_delay = shared.faults.knobs().answer_delay(&req.method, &req.path);
    let resp = match handlers::dispatch(shared, req).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    };
    if let Some(delay) = answer_delay {
        tokio::time::sleep(delay).await;
    }
    resp
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
