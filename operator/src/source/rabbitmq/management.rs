//! The RabbitMQ management HTTP API, read-only: the queues of one virtual
//! host (`GET /api/queues/<vhost>`, paged, only the columns needed, without
//! message statistics), over HTTP or HTTPS (rustls with the ring provider
//! and the system's roots) with basic authentication. Every failure becomes
//! a [`SourceError`] with a constant reason and a message that says what to
//! check; none of them is ever "no queues".

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;

use super::credentials::Credentials;
use super::{BROKER_UNREACHABLE, VHOST_NOT_FOUND};
use crate::source::SourceError;

/// Queues per page (the API's most).
const PAGE_SIZE: u32 = 500;
/// How long one request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Listings restarted because the queues changed between two pages before
/// the last attempt's pages are taken as they are.
const CONSISTENT_ATTEMPTS: u32 = 3;

/// One queue as the API lists it (the columns asked for).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Queue {
    /// Its name.
    pub name: String,
    /// `classic`, `quorum` or `stream`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Whether it belongs to one connection (and goes with it).
    #[serde(default)]
    pub exclusive: bool,
}

impl Queue {
    /// Whether a consumer on any connection can take it over as a
    /// partition: not exclusive to a connection, and not a stream (read
    /// with offsets, not acknowledged message by message).
    pub fn is_partition_queue(&self) -> bool {
        !self.exclusive && self.kind != "stream"
    }
}

/// One page of `GET /api/queues/<vhost>?page=N`.
#[derive(Debug, Deserialize)]
struct Page {
    items: Vec<Queue>,
    page_count: u32,
    /// Queues of the vhost in all: a change between pages means the
    /// listing is not one picture.
    total_count: u64,
}

/// A client of one broker's management API.
#[derive(Clone)]
pub struct ManagementClient {
    http: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    base: Arc<str>,
}

impl std::fmt::Debug for ManagementClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagementClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// The HTTP(S) connection pool every management client of an operator
/// shares.
pub(crate) fn http_client() -> Client<HttpsConnector<HttpConnector>, Empty<Bytes>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = HttpsConnectorBuilder::new();
    let builder = match builder.with_provider_and_native_roots(Arc::clone(&provider)) {
        Ok(builder) => builder,
        Err(error) => {
            // No system roots (a minimal image): plain HTTP still works,
            // and an https:// URL fails its handshake with a clear error.
            tracing::warn!(%error, "no system CA certificates; https:// management URLs cannot be verified");
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("the ring provider supports the default TLS versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    let connector = builder.https_or_http().enable_http1().build();
    Client::builder(TokioExecutor::new()).build(connector)
}

impl ManagementClient {
    /// A client of the API at `base` (e.g. `http://rabbitmq:15672`) over
    /// the shared pool `http`.
    pub(crate) fn new(
        http: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
        base: &str,
    ) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').into(),
        }
    }

    /// Every queue of `vhost`, sorted by name. Pages that disagree on how
    /// many queues there are (one was created or deleted meanwhile) make
    /// the listing start again, so a queue is never missed for a moment.
    pub async fn queues(
        &self,
        vhost: &str,
        credentials: &Credentials,
    ) -> Result<Vec<Queue>, SourceError> {
        let mut attempt = 1;
        loop {
            let (queues, consistent) = self.list_once(vhost, credentials).await?;
            if consistent || attempt == CONSISTENT_ATTEMPTS {
                let mut queues = queues;
                queues.sort_by(|a, b| a.name.cmp(&b.name));
                queues.dedup_by(|a, b| a.name == b.name);
                return Ok(queues);
            }
            attempt += 1;
        }
    }

    async fn list_once(
        &self,
        vhost: &str,
        credentials: &Credentials,
    ) -> Result<(Vec<Queue>, bool), SourceError> {
        let mut queues = Vec::new();
        let mut total = None;
        let mut consistent = true;
        let mut page = 1;
        loop {
            let listed = self.page(vhost, page, credentials).await?;
            consistent &= *total.get_or_insert(listed.total_count) == listed.total_count;
            queues.extend(listed.items);
            if page >= listed.page_count {
                return Ok((queues, consistent));
            }
            page += 1;
        }
    }

    async fn page(
        &self,
        vhost: &str,
        page: u32,
        credentials: &Credentials,
    ) -> Result<Page, SourceError> {
        let url = format!(
            "{}/api/queues/{}?page={page}&page_size={PAGE_SIZE}&columns=name,type,exclusive&disable_stats=true",
            self.base,
            encode_segment(vhost)
        );
        let uri: Uri = url
            .parse()
            .map_err(|e| SourceError::Invalid(format!("management URL {url}: {e}")))?;
        let authorization = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", credentials.username, credentials.password))
        );
        let request = Request::get(uri)
            .header(header::AUTHORIZATION, authorization)
            .header(header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| SourceError::Invalid(format!("management URL {url}: {e}")))?;
        let unreachable = |detail: String| SourceError::Named {
            reason: BROKER_UNREACHABLE,
            message: format!(
                "cannot reach the RabbitMQ management API at {}: {detail}; the published \
                 assignment is kept until it answers",
                self.base
            ),
        };
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| unreachable(crate::aws::chain(&e)))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, SourceError>((status, body))
        };
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {REQUEST_TIMEOUT:?}")))??;
        match status {
            StatusCode::OK => serde_json::from_slice(&body).map_err(|e| {
                SourceError::Other(format!(
                    "the management API at {} answered GET /api/queues/{vhost} with JSON that is not a queue listing: {e}",
                    self.base
                ))
            }),
            StatusCode::UNAUTHORIZED => Err(SourceError::AccessDenied(format!(
                "the management API at {} refused user {:?} (HTTP 401): check the username and password in the credentials Secret",
                self.base, credentials.username
            ))),
            StatusCode::FORBIDDEN => Err(SourceError::AccessDenied(format!(
                "user {:?} may not list the queues of vhost {vhost:?} at {} (HTTP 403): give it the monitoring tag and a permission on the vhost",
                credentials.username, self.base
            ))),
            StatusCode::NOT_FOUND => Err(SourceError::Named {
                reason: VHOST_NOT_FOUND,
                message: format!(
                    "vhost {vhost:?} does not exist at {} (HTTP 404), or the URL is not the management API's: check spec.source.rabbitmq.vhost and managementURL",
                    self.base
                ),
            }),
            other => Err(unreachable(format!(
                "HTTP {other}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))),
        }
    }
}

/// Everything but RFC 3986's unreserved characters is encoded in a path
/// segment (the default vhost `/` is `%2F`).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `text` as one URL path segment.
fn encode_segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vhosts_are_one_path_segment() {
        assert_eq!(encode_segment("/"), "%2F");
        assert_eq!(encode_segment("shop"), "shop");
        assert_eq!(encode_segment("a b/é"), "a%20b%2F%C3%A9");
    }

    #[test]
    fn only_queues_another_connection_can_take_are_partitions() {
        let queue = |kind: &str, exclusive| Queue {
            name: "q".into(),
            kind: kind.into(),
            exclusive,
        };
        assert!(queue("classic", false).is_partition_queue());
        assert!(queue("quorum", false).is_partition_queue());
        assert!(!queue("classic", true).is_partition_queue());
        assert!(!queue("stream", false).is_partition_queue());
    }

    #[test]
    fn a_page_reads_as_the_api_writes_it() {
        let page: Page = serde_json::from_str(
            r#"{"filtered_count":2,"item_count":2,"items":[{"exclusive":false,"name":"orders.0","type":"classic"},{"exclusive":false,"name":"orders.1","type":"quorum"}],"page":1,"page_count":1,"page_size":500,"total_count":2}"#,
        )
        .unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!((page.page_count, page.total_count), (1, 2));
        assert_eq!(page.items[1].kind, "quorum");
    }
}
