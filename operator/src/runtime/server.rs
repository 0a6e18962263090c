//! The operator's HTTP endpoint: `/metrics` (OpenMetrics text from the shared
//! registry), `/healthz` (liveness) and `/readyz` (503 until [`Health`] is
//! ready), bound to a configurable address and stopped by a shutdown future.
//! Served by hyper's HTTP/1 server connection by connection, the HTTP stack
//! the consumer endpoint runs on too.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::health::Health;
use super::metrics;

/// Content type of the plain-text answers.
const TEXT: &str = "text/plain; charset=utf-8";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address is taken or not permitted.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The requested address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What the handlers read.
struct AppState {
    registry: Arc<Registry>,
    health: Health,
}

/// A bound, not yet serving, HTTP server. Binding first lets the caller learn
/// the real port (tests bind port 0) and fail fast on a taken address.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: Arc<AppState>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `addr`. The registry must be complete: every module registers
    /// its metrics before it is wrapped in the `Arc`.
    pub async fn bind(
        addr: SocketAddr,
        registry: Arc<Registry>,
        health: Health,
    ) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ServerError::Bind { addr, source })?;
        Ok(Self {
            listener,
            local_addr,
            state: Arc::new(AppState { registry, health }),
        })
    }

    /// The address actually bound (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` resolves, then stops accepting, lets
    /// in-flight requests finish and closes idle connections. Accept errors
    /// are logged and retried, so this ends only at `shutdown`. Pass
    /// `token.clone().cancelled_owned()` for a shared
    /// [`CancellationToken`](super::shutdown::CancellationToken).
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        tracing::info!(addr = %self.local_addr, "serving /metrics, /healthz and /readyz");
        let stop = CancellationToken::new();
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(connection(stream, self.state.clone(), stop.clone()));
                    }
                    // A connection reset before it was accepted is the
                    // client's; anything else (out of descriptors) passes:
                    // keep accepting after a pause, as axum did.
                    Err(error) if is_connection_error(&error) => {
                        tracing::debug!(%error, "metrics/health connection not accepted");
                    }
                    Err(error) => {
                        tracing::error!(%error, "metrics/health server cannot accept; retrying in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(self.listener);
        stop.cancel();
        while connections.join_next().await.is_some() {}
        Ok(())
    }
}

/// Whether an `accept` error concerns one connection, not the listener.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
    )
}

/// Serves one connection until the client closes it or `stop` is
/// cancelled (then after the request in flight, if any).
async fn connection(stream: tokio::net::TcpStream, state: Arc<AppState>, stop: CancellationToken) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let response = answer(&state, &request);
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "metrics/health connection ended with an error");
    }
}

/// The answer to `request`: the route of its path for GET and HEAD (hyper
/// leaves a HEAD answer's body out), 405 for another method, 404 for
/// another path.
fn answer(state: &AppState, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let route = match request.uri().path() {
        "/metrics" => metrics_answer,
        "/healthz" => healthz,
        "/readyz" => readyz,
        _ => return plain(StatusCode::NOT_FOUND, String::new()),
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, String::new());
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
        return response;
    }
    route(state, request)
}

/// `body` as `text/plain` with `status`.
fn plain(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    with_type(status, TEXT, body)
}

fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn metrics_answer(state: &AppState, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    match metrics::encode(&state.registry) {
        Ok(text) if metrics::wants_openmetrics(accept) => {
            with_type(StatusCode::OK, metrics::CONTENT_TYPE, text)
        }
        Ok(text) => with_type(
            StatusCode::OK,
            metrics::PROMETHEUS_TEXT_CONTENT_TYPE,
            metrics::to_prometheus_text(&text),
        ),
        Err(error) => {
            tracing::error!(%error, "cannot encode metrics");
            plain(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
        }
    }
}

fn healthz(state: &AppState, _: &Request<Incoming>) -> Response<Full<Bytes>> {
    if state.health.is_live() {
        plain(StatusCode::OK, "ok\n".to_owned())
    } else {
        plain(StatusCode::SERVICE_UNAVAILABLE, "not live\n".to_owned())
    }
}

fn readyz(state: &AppState, _: &Request<Incoming>) -> Response<Full<Bytes>> {
    let pending = state.health.pending();
    if pending.is_empty() {
        return plain(StatusCode::OK, "ok\n".to_owned());
    }
    let mut body = String::from("not ready:\n");
    for check in pending {
        body.push_str("- ");
        body.push_str(check.as_str());
        body.push('\n');
    }
    plain(StatusCode::SERVICE_UNAVAILABLE, body)
}
