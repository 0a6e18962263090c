//! Per-connection timeouts of the endpoint, told apart by watching the
//! connection's bytes (a slow client and an idle keep-alive connection look
//! the same to a plain read timeout):
//!
//! - a request started (bytes arrived) but its head is not complete within
//!   the header timeout: a slow or stalled client, closed;
//! - nothing arrives for the idle timeout after the last answer: an idle
//!   keep-alive connection, closed;
//! - while a request is being answered (a long-poll may wait minutes),
//!   neither applies.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug)]
struct State {
    /// Requests being answered.
    in_flight: usize,
    /// When the connection last became idle (opened, or answered).
    idle_since: Instant,
    /// When the first byte of a request head arrived on an idle connection.
    head_started: Option<Instant>,
}

/// What a connection is doing, shared by its reader and its service.
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
                idle_since: Instant::now(),
                head_started: None,
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn on_read(&self) {
        let mut state = self.lock();
        if state.in_flight == 0 && state.head_started.is_none() {
            state.head_started = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    /// A request's head was read: until the guard drops, no timeout runs.
    pub(crate) fn start_request(self: &Arc<Self>) -> RequestGuard {
        let mut state = self.lock();
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
                let state = self.lock();
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
/// abandoned because the connection closed).
#[derive(Debug)]
pub(crate) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
        drop(state);
        self.0.changed.notify_one();
    }
}

/// An I/O stream that reports reads to its connection's [`Activity`].
#[derive(Debug)]
pub(crate) struct TrackedIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> TrackedIo<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
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

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
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
}
