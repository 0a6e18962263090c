//! The broker's management HTTP API as an administrator uses it in tests:
//! vhosts, users and their permissions, queues declared and deleted, a
//! queue's message counts. Plain HTTP on loopback with basic
//! authentication, through hyper's client.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use super::error::BrokerError;

/// Everything but RFC 3986's unreserved characters is encoded in a path
/// segment (the default vhost `/` is `%2F`).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `text` as one URL path segment.
pub fn encode_segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A queue's message counts, as the management API last collected them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueCounts {
    /// Ready to be delivered.
    pub ready: u64,
    /// Delivered and not yet acknowledged.
    pub unacknowledged: u64,
    /// Consumers subscribed.
    pub consumers: u64,
}

/// The management API of one broker, as one user.
#[derive(Debug, Clone)]
pub struct Admin {
    http: Client<HttpConnector, Full<Bytes>>,
    base: String,
    authorization: String,
}

impl Admin {
    /// The API at `base` (`http://127.0.0.1:<port>`) as `user`.
    pub fn new(base: &str, user: &str, password: &str) -> Self {
        let authorization = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        Self {
            http: Client::builder(TokioExecutor::new()).build_http(),
            base: base.trim_end_matches('/').to_owned(),
            authorization,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Bytes), BrokerError> {
        let url = format!("{}{path}", self.base);
        let fail = |detail: String| BrokerError::Admin(format!("{method} {url}: {detail}"));
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let request = Request::builder()
            .method(method.clone())
            .uri(&url)
            .header(header::AUTHORIZATION, &self.authorization)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| fail(e.to_string()))?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| fail(e.to_string()))?
                .to_bytes();
            Ok::<_, BrokerError>((status, bytes))
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| fail(format!("no answer within {CALL_TIMEOUT:?}")))?
    }

    async fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Bytes, BrokerError> {
        let (status, bytes) = self.call(method.clone(), path, body).await?;
        if status.is_success() {
            Ok(bytes)
        } else {
            Err(BrokerError::Admin(format!(
                "{method} {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            )))
        }
    }

    /// `GET /api/overview`: whether the API answers (the broker is up).
    pub async fn overview(&self) -> Result<Value, BrokerError> {
        let bytes = self.expect(Method::GET, "/api/overview", None).await?;
        serde_json::from_slice(&bytes).map_err(|e| BrokerError::Admin(e.to_string()))
    }

    /// Creates vhost `name` and gives the admin user every permission on it.
    pub async fn create_vhost(&self, name: &str) -> Result<(), BrokerError> {
        let vhost = encode_segment(name);
        self.expect(Method::PUT, &format!("/api/vhosts/{vhost}"), None)
            .await?;
        self.set_permissions(name, super::ADMIN_USER, ".*", ".*", ".*")
            .await
    }

    /// Creates (or updates) user `name` with `password` and `tags` (e.g.
    /// `monitoring`).
    pub async fn create_user(
        &self,
        name: &str,
        password: &str,
        tags: &str,
    ) -> Result<(), BrokerError> {
        let path = format!("/api/users/{}", encode_segment(name));
        self.expect(
            Method::PUT,
            &path,
            Some(json!({"password": password, "tags": tags})),
        )
        .await
        .map(drop)
    }

    /// Sets `user`'s permissions on `vhost` (regular expressions of the
    /// resources it may configure, write and read; `^$` is none).
    pub async fn set_permissions(
        &self,
        vhost: &str,
        user: &str,
        configure: &str,
        write: &str,
        read: &str,
    ) -> Result<(), BrokerError> {
        let path = format!(
            "/api/permissions/{}/{}",
            encode_segment(vhost),
            encode_segment(user)
        );
        let body = json!({"configure": configure, "write": write, "read": read});
        self.expect(Method::PUT, &path, Some(body)).await.map(drop)
    }

    /// Declares durable classic queue `name` in `vhost`.
    pub async fn declare_queue(&self, vhost: &str, name: &str) -> Result<(), BrokerError> {
        let path = format!(
            "/api/queues/{}/{}",
            encode_segment(vhost),
            encode_segment(name)
        );
        self.expect(
            Method::PUT,
            &path,
            Some(json!({"durable": true, "auto_delete": false})),
        )
        .await
        .map(drop)
    }

    /// Deletes queue `name` of `vhost` (and the messages in it).
    pub async fn delete_queue(&self, vhost: &str, name: &str) -> Result<(), BrokerError> {
        let path = format!(
            "/api/queues/{}/{}",
            encode_segment(vhost),
            encode_segment(name)
        );
        self.expect(Method::DELETE, &path, None).await.map(drop)
    }

    /// The message counts of queue `name` (collected every half second).
    pub async fn queue_counts(&self, vhost: &str, name: &str) -> Result<QueueCounts, BrokerError> {
        let path = format!(
            "/api/queues/{}/{}",
            encode_segment(vhost),
            encode_segment(name)
        );
        let bytes = self.expect(Method::GET, &path, None).await?;
        let queue: Value =
            serde_json::from_slice(&bytes).map_err(|e| BrokerError::Admin(e.to_string()))?;
        let count = |key: &str| queue.get(key).and_then(Value::as_u64).unwrap_or(0);
        Ok(QueueCounts {
            ready: count("messages_ready"),
            unacknowledged: count("messages_unacknowledged"),
            consumers: count("consumers"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vhosts_are_one_path_segment() {
        assert_eq!(encode_segment("/"), "%2F");
        assert_eq!(encode_segment("shop-1.a_b~"), "shop-1.a_b~");
        assert_eq!(encode_segment("a b/é"), "a%20b%2F%C3%A9");
    }
}
