//! What the HTTPS front and the handlers exchange: the state shared by
//! every connection and the server handle, the parsed request, and the
//! response body with its JSON constructor.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::faults::Faults;
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
