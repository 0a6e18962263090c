//! What the endpoint keeps per connection around hyper's HTTP/1 server:
//!
//! - **Timeouts**, told apart by watching the connection's bytes (a slow
//!   client and an idle keep-alive connection look the same to a plain read
//!   timeout, and hyper's own header timeout also cuts idle keep-alive
//!   connections): a request started (bytes arrived) whose head is not
//!   complete within the header timeout is closed, and so is a connection
//!   idle for the idle timeout after its last answer; while a request is
//!   being answered (a long-poll may wait minutes), neither applies.
//! - **hyper's own answers replaced by ours.** hyper answers a request head
//!   it cannot parse (400), one over the size limit (431) or a URI too long
//!   (414) by itself, with a bare status line: no JSON error body and no
//!   `X-RateLimit-*` headers, which every answer of the endpoint carries.
//!   hyper parses a head only when the connection is idle (no request being
//!   answered and the last answer flushed), so bytes written while no
//!   request is in flight and no answer is owed are hyper's own answer:
//!   [`ConnIo`] swallows them and writes the endpoint's answer for the same
//!   status instead (hyper closes the connection after it either way).
//! - **Lingering close** ([`linger`]): after the last answer, the write side
//!   is shut and whatever the client still sends is read and dropped, up to
//!   a bound and a deadline, so a client still writing a body it was refused
//!   reads its answer instead of a reset (RFC 9112 §9.6).

use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Longest a closing connection reads (and drops) what its client still
/// sends.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// Most bytes a closing connection reads and drops.
const LINGER_BYTES: usize = 256 * 1024;

#[derive(Debug)]
struct State {
    /// Requests being answered (handed to the routes, no answer yet).
    in_flight: usize,
    /// An answer was handed to hyper and is not flushed yet.
    answer_owed: bool,
    /// When the connection last became idle (opened, or answered).
    idle_since: Instant,
    /// When the first byte of a request head arrived on an idle connection.
    head_started: Option<Instant>,
}

/// What a connection is doing, shared by its I/O and its service.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
    changed: Notify,
}

/// Why a connection is closed by [`Activity::expired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// A request head did not arrive in time.
    Header,
    /// No request for the idle timeout.
    Idle,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                in_flight: 0,
                answer_owed: false,
                idle_since: Instant::now(),
                head_started: None,
            }),
            changed: Notify::new(),
        })
    }

    fn on_read(&self) {
        let mut state = self.state.lock();
        if state.in_flight == 0 && state.head_started.is_none() {
            state.head_started = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    /// Whether bytes written now belong to an answer of the routes (or its
    /// `100 Continue`), rather than to an answer hyper makes up itself.
    fn answering(&self) -> bool {
        let state = self.state.lock();
        state.in_flight > 0 || state.answer_owed
    }

    /// hyper flushed the connection: an answer handed over before is out.
    fn on_flushed(&self) {
        let mut state = self.state.lock();
        if state.in_flight == 0 {
            state.answer_owed = false;
        }
    }

    /// A request's head was read: until the guard drops, no timeout runs.
    pub(crate) fn start_request(self: &Arc<Self>) -> RequestGuard {
        let mut state = self.state.lock();
        state.in_flight += 1;
        state.head_started = None;
        drop(state);
        self.changed.notify_one();
        RequestGuard(self.clone())
    }

    /// Resolves when the connection has waited too long for a request head,
    /// or been idle too long.
    pub(crate) async fn expired(&self, header: Duration, idle: Duration) -> Expiry {
        loop {
            let deadline = {
                let state = self.state.lock();
                if state.in_flight > 0 {
                    None
                } else if let Some(started) = state.head_started {
                    Some((started + header, Expiry::Header))
                } else {
                    Some((state.idle_since + idle, Expiry::Idle))
                }
            };
            match deadline {
                None => self.changed.notified().await,
                Some((at, why)) if at <= Instant::now() => return why,
                Some((at, _)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.changed.notified() => {}
                    }
                }
            }
        }
    }
}

/// Ends a request's exemption from the timeouts when dropped (answered, or
/// abandoned because the connection closed); its answer is then owed until
/// hyper flushes it.
#[derive(Debug)]
pub(crate) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
            state.answer_owed = true;
        }
        drop(state);
        self.0.changed.notify_one();
    }
}

/// A connection's I/O under hyper: reports reads to its [`Activity`] and
/// replaces the answers hyper makes up itself with the endpoint's
/// (`answer_for` builds those: a complete HTTP/1.1 answer for a status).
pub(crate) struct ConnIo<T, F> {
    inner: T,
    activity: Arc<Activity>,
    answer_for: F,
    /// The endpoint's answer in place of hyper's, still to be written.
    replacement: Option<Bytes>,
}

impl<T, F> ConnIo<T, F> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>, answer_for: F) -> Self {
        Self {
            inner,
            activity,
            answer_for,
            replacement: None,
        }
    }
}

impl<T, F> std::fmt::Debug for ConnIo<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnIo")
            .field("replacing", &self.replacement.is_some())
            .finish_non_exhaustive()
    }
}

/// The status of the answer hyper starts writing in `first` (`HTTP/1.1 431
/// ...`); 400 if it cannot be read.
fn status_of(first: &[u8]) -> StatusCode {
    first
        .get(9..12)
        .and_then(|code| StatusCode::from_bytes(code).ok())
        .unwrap_or(StatusCode::BAD_REQUEST)
}

impl<T, F> ConnIo<T, F>
where
    T: AsyncWrite + Unpin,
    F: Fn(StatusCode) -> Bytes + Unpin,
{
    /// Takes the bytes hyper writes when they are its own answer (the
    /// endpoint's goes out instead); `None`: they are to be written.
    fn swallow(&mut self, first: &[u8], len: usize) -> Option<usize> {
        if self.replacement.is_none() {
            if self.activity.answering() || len == 0 {
                return None;
            }
            self.replacement = Some((self.answer_for)(status_of(first)));
        }
        Some(len)
    }

    /// Writes what is left of the replacement answer.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some(rest) = self.replacement.as_mut().filter(|r| r.has_remaining()) {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            rest.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin, F: Unpin> AsyncRead for ConnIo<T, F> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read();
        }
        result
    }
}

impl<T, F> AsyncWrite for ConnIo<T, F>
where
    T: AsyncWrite + Unpin,
    F: Fn(StatusCode) -> Bytes + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(n) = self.swallow(buf, buf.len()) {
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| b);
        if let Some(n) = self.swallow(first, len) {
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.activity.on_flushed();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Closes a connection whose last answer is written: flushes it, shuts the
/// write side (TLS `close_notify`, then FIN), and reads and drops what the
/// client still sends until it closes, for at most [`LINGER_BYTES`] and
/// [`LINGER_TIME`].
pub(crate) async fn linger<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO) {
    let _ = tokio::time::timeout(LINGER_TIME, async {
        if io.flush().await.is_err() || io.shutdown().await.is_err() {
            return;
        }
        // On the heap: a buffer in the future would be carried by every
        // connection's task for its whole life.
        let mut buf = vec![0u8; 4096];
        let mut dropped = 0;
        while dropped < LINGER_BYTES {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => dropped += n,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use tokio::io::duplex;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_header_and_in_flight_are_told_apart() {
        let (header, idle) = (Duration::from_secs(10), Duration::from_secs(90));
        let activity = Activity::new();
        let started = Instant::now();
        assert_eq!(activity.expired(header, idle).await, Expiry::Idle);
        assert_eq!(started.elapsed(), idle);

        let activity = Activity::new();
        activity.on_read();
        let started = Instant::now();
        assert_eq!(activity.expired(header, idle).await, Expiry::Header);
        assert_eq!(started.elapsed(), header);

        // A request in flight (a long-poll) holds off both; once answered,
        // the idle timeout counts from the answer.
        let activity = Activity::new();
        let guard = activity.start_request();
        let watcher = {
            let activity = activity.clone();
            tokio::spawn(async move { activity.expired(header, idle).await })
        };
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!watcher.is_finished());
        drop(guard);
        let answered = Instant::now();
        assert_eq!(watcher.await.unwrap(), Expiry::Idle);
        assert_eq!(answered.elapsed(), idle);
    }

    /// Bytes of an answer to a request pass; bytes written with no request
    /// in flight and no answer owed are replaced, once, by the endpoint's.
    #[tokio::test]
    async fn only_answers_made_up_by_hyper_are_replaced() {
        let (client, server) = duplex(4096);
        let activity = Activity::new();
        let mut io = ConnIo::new(server, activity.clone(), |status: StatusCode| {
            Bytes::from(format!("ours {}", status.as_u16()))
        });
        let guard = activity.start_request();
        io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .unwrap();
        drop(guard);
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        io.flush().await.unwrap();
        io.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
            .await
            .unwrap();
        io.write_all(b"content-length: 0\r\n\r\n").await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        let mut out = String::new();
        let mut client = client;
        client.read_to_string(&mut out).await.unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nours 431"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn lingering_reads_what_the_client_still_sends_then_gives_up() {
        let (mut client, server) = duplex(64);
        let lingering = tokio::spawn(linger(server));
        // The client keeps writing past the server's shutdown: its bytes are
        // read (the pipe never fills), until the deadline.
        let mut sent = 0;
        let writer = async {
            while client.write_all(&[b'x'; 32]).await.is_ok() {
                sent += 32;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let started = Instant::now();
        tokio::select! {
            () = writer => panic!("the server closed before its deadline"),
            done = lingering => done.unwrap(),
        }
        assert_eq!(started.elapsed(), LINGER_TIME);
        assert!(sent > 64, "only {sent} bytes were read");
    }
}
