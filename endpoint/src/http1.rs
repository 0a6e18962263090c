//! One endpoint connection's HTTP/1.1, served by hyper's server
//! (`hyper::server::conn::http1`): framing, keep-alive, pipelining and
//! `Expect: 100-continue` are hyper's; what is the endpoint's is around it
//! ([`conn`](super::conn)): the header and idle timeouts, the request heads
//! checked before hyper reads them (the endpoint answers those it refuses,
//! after hyper let the connection go), and the lingering close once the
//! connection is done.
//!
//! hyper is tuned for many idle long-polls: its read buffer may grow only
//! to the head limit ([`MAX_HEAD_BYTES`]; hyper is only given heads within
//! it);
//! an answer's body is queued as it is (`writev(true)`: the served view's
//! shared bytes, never copied into hyper's write buffer, which would keep
//! the largest answer's size for the connection's life); no `Date` header
//! (the clock is not read per answer); and no header timeout of hyper's (it
//! would also cut idle keep-alive connections; [`Activity`] tells the two
//! apart). The routes drop a request before its long-poll waits.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use http::Response;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use super::conn::{Activity, ConnIo, linger};
use super::head::{MAX_HEAD_BYTES, MAX_HEADERS};
use super::routes::{self, App};

/// A connection's timeouts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// For each request's head (the TLS handshake's is the caller's).
    pub(crate) header: Duration,
    /// For a keep-alive connection's next request.
    pub(crate) idle: Duration,
}

/// The answer a service call makes: boxed, so the connection's future does
/// not carry a long-poll's room while no request is in flight (and hyper
/// needs it `Unpin` to hand the I/O back).
type Answering = Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send>>;

/// How the endpoint configures hyper for a connection.
fn builder() -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .keep_alive(true)
        .half_close(false)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .writev(true)
        .auto_date_header(false)
        .header_read_timeout(None);
    builder
}

/// Serves HTTP/1.1 on `io` (the TLS stream) from `peer` until the client
/// closes, an answer or request says `Connection: close`, a request cannot be
/// parsed, a timeout expires, or `stop` is cancelled (checked between
/// requests: an answer being prepared, e.g. a long-poll, is the routes' to
/// end). Then closes it, lingering when it ended on an answer (the
/// endpoint's own, when it ended at a refused head).
pub(crate) async fn serve<IO>(
    io: IO,
    peer: SocketAddr,
    app: Arc<App>,
    timeouts: Timeouts,
    stop: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Activity::new();
    let service = {
        let activity = activity.clone();
        let app = app.clone();
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| -> Answering {
            let guard = activity.start_request();
            // Made here, and mapped rather than awaited in an async block:
            // the block would keep room for the request, or for the answer's
            // future twice (the one it holds and the one it awaits), for as
            // long as the answer (a long-poll) waits.
            let answer = routes::handle(app.clone(), peer, request);
            Box::pin(answer.map(move |response| {
                drop(guard);
                Ok(response)
            }))
        })
    };
    let io = TokioIo::new(ConnIo::new(io, activity.clone()));
    let mut connection = builder().serve_connection(io, service);
    let mut stopping = false;
    let ended = loop {
        let done = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx));
        tokio::select! {
            result = done => break Ok(result),
            expiry = activity.expired(timeouts.header, timeouts.idle) => break Err(expiry),
            () = stop.cancelled(), if !stopping => {
                // Idle: closed at once; answering: closed after the answer.
                stopping = true;
                Pin::new(&mut connection).graceful_shutdown();
            }
        }
    };
    match ended {
        Ok(result) => {
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "endpoint connection ended with an error");
            }
            let io = connection.into_parts().io.into_inner();
            let refusal = io.refusal();
            let mut io = io.into_inner();
            if let Some(status) = refusal {
                // hyper answered every request before the refused head and
                // wrote nothing after: the refusal is the endpoint's.
                let answer = routes::unparsed(&app, peer.ip(), status);
                if io.write_all(&answer).await.is_err() {
                    return;
                }
            }
            linger(io).await;
        }
        Err(expiry) => {
            tracing::debug!(%peer, ?expiry, "endpoint connection timed out; closing");
        }
    }
}
