//! The operator's HTTP endpoint: `/metrics` (OpenMetrics text from the shared
//! registry), `/healthz` (liveness) and `/readyz` (503 until [`Health`] is
//! ready), bound to a configurable address and stopped by a shutdown future.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use super::health::Health;
use super::metrics;

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
    /// Accepting or serving connections failed.
    #[error("the metrics/health server failed: {0}")]
    Serve(#[source] std::io::Error),
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    health: Health,
}

/// A bound, not yet serving, HTTP server. Binding first lets the caller learn
/// the real port (tests bind port 0) and fail fast on a taken address.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    router: Router,
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
            router: router(AppState { registry, health }),
        })
    }

    /// The address actually bound (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish.
    /// Pass `token.clone().cancelled_owned()` for a shared
    /// [`CancellationToken`](super::shutdown::CancellationToken).
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        tracing::info!(addr = %self.local_addr, "serving /metrics, /healthz and /readyz");
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServerError::Serve)
    }
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics_handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    match metrics::encode(&state.registry) {
        Ok(text) if metrics::wants_openmetrics(accept) => {
            ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
        }
        Ok(text) => (
            [(header::CONTENT_TYPE, metrics::PROMETHEUS_TEXT_CONTENT_TYPE)],
            metrics::to_prometheus_text(&text),
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
        }
    }
}

async fn healthz(State(state): State<AppState>) -> Response {
    if state.health.is_live() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not live\n").into_response()
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    let pending = state.health.pending();
    if pending.is_empty() {
        return (StatusCode::OK, "ok\n").into_response();
    }
    let mut body = String::from("not ready:\n");
    for check in pending {
        body.push_str("- ");
        body.push_str(check.as_str());
        body.push('\n');
    }
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}
