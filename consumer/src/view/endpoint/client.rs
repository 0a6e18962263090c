//! The HTTPS client of the consumer endpoint: hyper 1 (HTTP/1.1) over
//! tokio-rustls with the `ring` provider named explicitly (no process-wide
//! provider needed), trusting only the CA in `ca_file`. The CA and the
//! bearer token (a projected service-account token the kubelet rotates)
//! are re-read before every request; a changed CA drops pooled connections.
//!
//! Connections are kept for reuse (one long-poll and one release at a time
//! need at most two) unless the server says `Connection: close` or answers
//! 503: a `NotLeader` answer comes from a replica that lost the lease, so
//! the retry goes out on a new connection, which the Service routes to the
//! leader. Every such drop, and every failed connection, bumps the
//! [`EndpointClient::reconnects`] generation: the release outbox re-sends
//! its acknowledgements after one (the leader keeps them in memory only).

use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use shardring_crds::endpoint::{
    LoadReport, LoadReportResponse, QUERY_EPOCH, QUERY_WAIT, ReleaseOutcome, ReleaseRequest,
    ReleaseResponse, ViewResponse, loads_path, releases_path, view_path,
};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsConnector;

pub use super::error::EndpointError;
use super::error::Reply;
use super::retry::RateLimit;
use super::tls::tls_config;

/// Default path of the projected service-account token.
pub const DEFAULT_TOKEN_FILE: &str = "/var/run/secrets/shardring.io/token";
/// Default path of the endpoint's CA certificate (PEM).
pub const DEFAULT_CA_FILE: &str = "/var/run/secrets/shardring.io/ca.crt";
/// Largest answer body read (a view of tens of thousands of shards fits).
const MAX_BODY: usize = 16 << 20;
/// Extra time a long-poll may take beyond the wait it asked for.
const LONG_POLL_MARGIN: Duration = Duration::from_secs(15);

/// Where the endpoint is and how to authenticate to it.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// `https://host[:port]`, e.g. `https://shardring-endpoint.shardring-system.svc`.
    pub url: String,
    /// The projected token (audience `shardring.io`).
    pub token_file: PathBuf,
    /// The endpoint's CA certificate (PEM): the only CA trusted.
    pub ca_file: PathBuf,
    /// Connect and TLS handshake timeout.
    pub connect_timeout: Duration,
    /// Timeout of a request that does not long-poll.
    pub request_timeout: Duration,
}

impl EndpointConfig {
    /// Defaults for `url`: the token and CA at their projected paths.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            token_file: DEFAULT_TOKEN_FILE.into(),
            ca_file: DEFAULT_CA_FILE.into(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(15),
        }
    }
}

/// A file re-read before each use, parsed again only when its content changed.
#[derive(Debug)]
struct Cached<T> {
    content: Vec<u8>,
    value: T,
}

#[derive(Debug)]
struct Inner {
    config: EndpointConfig,
    host: String,
    port: u16,
    authority: String,
    server_name: ServerName<'static>,
    token: Mutex<Option<Cached<String>>>,
    tls: Mutex<Option<Cached<Arc<rustls::ClientConfig>>>>,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
    reconnects: watch::Sender<u64>,
}

/// The endpoint's client; cheap to clone (clones share connections).
#[derive(Debug, Clone)]
pub struct EndpointClient {
    inner: Arc<Inner>,
}

impl EndpointClient {
    /// A client for `config.url`; nothing is read or connected yet.
    pub fn new(config: EndpointConfig) -> Result<Self, EndpointError> {
        let fail = |detail: &str| EndpointError::Url {
            url: config.url.clone(),
            detail: detail.to_owned(),
        };
        let uri: Uri = config.url.parse().map_err(|e| fail(&format!("{e}")))?;
        if uri.scheme_str() != Some("https") {
            return Err(fail("the endpoint is served over https only"));
        }
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(fail("give the scheme, host and port only"));
        }
        let host = uri.host().ok_or_else(|| fail("no host"))?.to_owned();
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let server_name = ServerName::try_from(bare.clone())
            .map_err(|e| fail(&format!("host is not a DNS name or IP address: {e}")))?;
        let port = uri.port_u16().unwrap_or(443);
        let authority = if port == 443 {
            host
        } else {
            format!("{host}:{port}")
        };
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                host: bare,
                port,
                authority,
                server_name,
                token: Mutex::new(None),
                tls: Mutex::new(None),
                idle: Mutex::new(Vec::new()),
                reconnects: watch::channel(0).0,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.inner.config
    }

    /// The reconnect generation: bumped whenever a connection is dropped
    /// after a failure or a `NotLeader` answer (the next request may reach
    /// a new leader).
    pub fn reconnects(&self) -> watch::Receiver<u64> {
        self.inner.reconnects.subscribe()
    }

    /// `GET` this pod's view of `namespace/group`: at once when `epoch` is
    /// 0, else as soon as the view is newer than `epoch` or after `wait`.
    pub async fn view(
        &self,
        namespace: &str,
        group: &str,
        epoch: u64,
        wait: Duration,
    ) -> Result<(ViewResponse, RateLimit), EndpointError> {
        let path = format!(
            "{}?{QUERY_EPOCH}={epoch}&{QUERY_WAIT}={}",
            view_path(namespace, group),
            wait.as_secs()
        );
        let timeout = wait + LONG_POLL_MARGIN;
        let reply = self.send(Method::GET, &path, None, timeout).await?;
        if reply.status != StatusCode::OK {
            return Err(reply.into_error());
        }
        let rate = reply.rate();
        let view = serde_json::from_slice(&reply.body)
            .map_err(|e| EndpointError::Decode(format!("view: {e}")))?;
        Ok((view, rate))
    }

    /// `POST` a release acknowledgement: `Accepted` (202) or `Duplicate` (200).
    pub async fn release(
        &self,
        namespace: &str,
        group: &str,
        request: &ReleaseRequest,
    ) -> Result<(ReleaseOutcome, RateLimit), EndpointError> {
        let body = serde_json::to_vec(request).map_err(|e| EndpointError::Decode(e.to_string()))?;
        let reply = self
            .send(
                Method::POST,
                &releases_path(namespace, group),
                Some(body),
                self.inner.config.request_timeout,
            )
            .await?;
        let rate = reply.rate();
        match reply.status {
            StatusCode::OK | StatusCode::ACCEPTED => {
                let outcome = serde_json::from_slice::<ReleaseResponse>(&reply.body)
                    .map(|response| response.outcome)
                    .unwrap_or(if reply.status == StatusCode::ACCEPTED {
                        ReleaseOutcome::Accepted
                    } else {
                        ReleaseOutcome::Duplicate
                    });
                Ok((outcome, rate))
            }
            _ => Err(reply.into_error()),
        }
    }

    /// `POST` a load report: the rates recorded and those refused (200).
    pub async fn loads(
        &self,
        namespace: &str,
        group: &str,
        report: &LoadReport,
    ) -> Result<(LoadReportResponse, RateLimit), EndpointError> {
        let body = serde_json::to_vec(report).map_err(|e| EndpointError::Decode(e.to_string()))?;
        let reply = self
            .send(
                Method::POST,
                &loads_path(namespace, group),
                Some(body),
                self.inner.config.request_timeout,
            )
            .await?;
        if reply.status != StatusCode::OK {
            return Err(reply.into_error());
        }
        let rate = reply.rate();
        let response = serde_json::from_slice(&reply.body)
            .map_err(|e| EndpointError::Decode(format!("load report answer: {e}")))?;
        Ok((response, rate))
    }

    /// Sends one request with the current token, on a pooled or new
    /// connection; a pooled connection that turns out closed is replaced
    /// once by a new one.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Reply, EndpointError> {
        let token = self.token().await?;
        let connector = self.connector().await?;
        let body = Bytes::from(body.unwrap_or_default());
        let mut pooled = self.take_idle();
        loop {
            let reused = pooled.is_some();
            let mut sender = match pooled.take() {
                Some(sender) => sender,
                None => self.connect(&connector).await?,
            };
            let mut request = Request::builder()
                .method(method.clone())
                .uri(path_and_query)
                .header(header::HOST, &self.inner.authority)
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .header(header::ACCEPT, "application/json")
                .header(header::USER_AGENT, "shardring-consumer");
            if !body.is_empty() {
                request = request.header(header::CONTENT_TYPE, "application/json");
            }
            let request = request
                .body(Full::new(body.clone()))
                .map_err(|e| EndpointError::Decode(format!("request: {e}")))?;
            match tokio::time::timeout(timeout, self.exchange(&mut sender, request)).await {
                Ok(Ok(reply)) => {
                    let close = reply
                        .headers
                        .get(header::CONNECTION)
                        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
                    if close || reply.status == StatusCode::SERVICE_UNAVAILABLE {
                        self.bump_reconnects();
                    } else {
                        self.inner.idle.lock().push(sender);
                    }
                    return Ok(reply);
                }
                Ok(Err(error)) if reused && error.is_canceled_or_closed() => {
                    tracing::debug!(error = %error.detail, "pooled endpoint connection was closed; reconnecting");
                }
                Ok(Err(error)) => {
                    self.bump_reconnects();
                    return Err(EndpointError::Io {
                        authority: self.inner.authority.clone(),
                        detail: error.detail,
                    });
                }
                Err(_) => {
                    self.bump_reconnects();
                    return Err(EndpointError::Io {
                        authority: self.inner.authority.clone(),
                        detail: format!("no answer within {timeout:?}"),
                    });
                }
            }
        }
    }

    async fn exchange(
        &self,
        sender: &mut SendRequest<Full<Bytes>>,
        request: Request<Full<Bytes>>,
    ) -> Result<Reply, ExchangeError> {
        let response = sender
            .send_request(request)
            .await
            .map_err(ExchangeError::from)?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| ExchangeError {
                detail: format!("reading the body: {e}"),
                closed: false,
            })?
            .to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    fn take_idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.inner.idle.lock();
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn bump_reconnects(&self) {
        self.inner.reconnects.send_modify(|n| *n += 1);
    }

    async fn connect(
        &self,
        connector: &TlsConnector,
    ) -> Result<SendRequest<Full<Bytes>>, EndpointError> {
        let inner = &self.inner;
        let limit = inner.config.connect_timeout;
        let connect_error = |detail: String| EndpointError::Connect {
            authority: inner.authority.clone(),
            detail,
        };
        let tcp =
            tokio::time::timeout(limit, TcpStream::connect((inner.host.as_str(), inner.port)))
                .await
                .map_err(|_| connect_error(format!("no connection within {limit:?}")))?
                .map_err(|e| connect_error(e.to_string()))?;
        tcp.set_nodelay(true).ok();
        let tls = tokio::time::timeout(limit, connector.connect(inner.server_name.clone(), tcp))
            .await
            .map_err(|_| connect_error(format!("no TLS handshake within {limit:?}")))?
            .map_err(|e| {
                // rustls reports a refused certificate (or any TLS alert) as
                // InvalidData; anything else is the connection failing.
                if e.kind() == std::io::ErrorKind::InvalidData {
                    EndpointError::Tls {
                        authority: inner.authority.clone(),
                        ca_file: inner.config.ca_file.display().to_string(),
                        detail: e.to_string(),
                    }
                } else {
                    connect_error(format!("during the TLS handshake: {e}"))
                }
            })?;
        let (sender, connection) = http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| connect_error(format!("HTTP/1.1 handshake: {e}")))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "endpoint connection ended");
            }
        });
        Ok(sender)
    }

    /// The bearer token, re-read now (the kubelet rotates it in place).
    async fn token(&self) -> Result<String, EndpointError> {
        let path = &self.inner.config.token_file;
        let fail = |detail: String| EndpointError::Token {
            path: path.display().to_string(),
            detail,
        };
        let content = tokio::fs::read(path)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let mut cached = self.inner.token.lock();
        if let Some(cached) = cached.as_ref().filter(|c| c.content == content) {
            return Ok(cached.value.clone());
        }
        let token = String::from_utf8(content.clone())
            .map_err(|_| fail("not UTF-8".to_owned()))?
            .trim()
            .to_owned();
        if token.is_empty() {
            return Err(fail("empty".to_owned()));
        }
        if cached.is_some() {
            tracing::info!(path = %path.display(), "endpoint token changed; using the new one");
        }
        *cached = Some(Cached {
            content,
            value: token.clone(),
        });
        Ok(token)
    }

    /// The TLS connector trusting only the CA file, rebuilt when the file
    /// changed (pooled connections made with the old CA are dropped).
    async fn connector(&self) -> Result<TlsConnector, EndpointError> {
        let path = &self.inner.config.ca_file;
        let content = tokio::fs::read(path).await.map_err(|e| EndpointError::Ca {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        let mut cached = self.inner.tls.lock();
        if let Some(cached) = cached.as_ref().filter(|c| c.content == content) {
            return Ok(TlsConnector::from(cached.value.clone()));
        }
        let config = tls_config(path, &content)?;
        if cached.is_some() {
            tracing::info!(path = %path.display(), "endpoint CA changed; reconnecting with it");
            self.inner.idle.lock().clear();
        }
        *cached = Some(Cached {
            content,
            value: config.clone(),
        });
        Ok(TlsConnector::from(config))
    }
}

struct ExchangeError {
    detail: String,
    /// The connection was closed before the request went out (a pooled
    /// connection the server had closed): safe to retry on a new one.
    closed: bool,
}

impl ExchangeError {
    fn is_canceled_or_closed(&self) -> bool {
        self.closed
    }
}

impl From<hyper::Error> for ExchangeError {
    fn from(error: hyper::Error) -> Self {
        Self {
            closed: error.is_canceled() || error.is_closed(),
            detail: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::retry::Failure;
    use super::*;

    #[test]
    fn only_https_urls_with_a_host() {
        let client =
            EndpointClient::new(EndpointConfig::new("https://shardring-endpoint.ns.svc")).unwrap();
        assert_eq!(client.inner.authority, "shardring-endpoint.ns.svc");
        assert_eq!(client.inner.port, 443);
        let client = EndpointClient::new(EndpointConfig::new("https://127.0.0.1:8443/")).unwrap();
        assert_eq!(client.inner.authority, "127.0.0.1:8443");
        for bad in ["http://x.svc", "x.svc", "https://x.svc/v1"] {
            let err = EndpointClient::new(EndpointConfig::new(bad)).unwrap_err();
            assert!(matches!(err, EndpointError::Url { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        let err = tls_config(Path::new("ca.crt"), b"not a certificate").unwrap_err();
        assert!(err.to_string().contains("no certificate"), "{err}");
    }

    #[test]
    fn error_answers_are_classified_for_the_retry_policy() {
        let status = |status: u16, reason: &str| EndpointError::Status {
            status,
            reason: Some(reason.to_owned()),
            message: String::new(),
            retry_after: Some(Duration::from_secs(2)),
            rate: RateLimit::default(),
        };
        assert_eq!(
            status(429, "RateLimited").failure(),
            Failure::RateLimited(Some(Duration::from_secs(2)))
        );
        assert_eq!(status(503, "NotLeader").failure(), Failure::NotLeader);
        assert_eq!(status(503, "Unavailable").failure(), Failure::Transient);
        assert_eq!(status(401, "Unauthorized").failure(), Failure::Unauthorized);
        assert_eq!(status(403, "Forbidden").failure(), Failure::Refused);
        assert_eq!(status(403, "IpMismatch").failure(), Failure::NotYetKnown);
        assert_eq!(status(403, "NotMember").failure(), Failure::NotYetKnown);
        assert_eq!(status(403, "UidMismatch").failure(), Failure::Refused);
        assert_eq!(status(404, "NotFound").failure(), Failure::Refused);
        assert_eq!(
            status(409, "FutureEpoch").failure(),
            Failure::NotYetPublished
        );
        assert_eq!(status(409, "NotRevoking").failure(), Failure::Refused);
        assert_eq!(status(409, "NotRevoking").reason(), Some("NotRevoking"));
    }
}
