//! What the endpoint keeps per connection around hyper's HTTP/1 server:
//!
//! - **Timeouts**, told apart by watching the connection's bytes (a slow
//!   client and an idle keep-alive connection look the same to a plain read
//!   timeout, and hyper's own header timeout also cuts idle keep-alive
//!   connections): a request started (bytes arrived) whose head is not
//!   complete within the header timeout is closed, and so is a connection
//!   idle for the idle timeout after its last answer; while a request is
//!   being answered (a long-poll may wait minutes), neither applies.
//! - **Heads checked before hyper reads them** ([`ConnIo`]): hyper answers a
//!   request head it cannot parse (400), one over the size limit (431) or a
//!   URI too long (414) by itself, with a bare status line: no JSON error
//!   body and no `X-RateLimit-*` headers, which every answer of the
//!   endpoint carries. So hyper is only handed heads it accepts
//!   ([`head::check`]) and the bodies they frame; at a refused head it is
//!   given the end of the stream (after answering what came before), and
//!   the endpoint writes its own answer on the connection hyper let go.
//!   Nothing hyper writes is touched.
//! - **Lingering close** ([`linger`]): after the last answer, the write side
//!   is shut and whatever the client still sends is read and dropped, up to
//!   a bound and a deadline, so a client still writing a body it was refused
//!   reads its answer instead of a reset (RFC 9112 §9.6).

use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::head;

/// Longest a closing connection reads (and drops) what its client still
/// sends.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// Most bytes a closing connection reads and drops.
const LINGER_BYTES: usize = 256 * 1024;
/// Most bytes of a request head read at once (a head usually arrives in
/// one piece of a few hundred bytes).
const READ_BYTES: usize = 2048;

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

/// Where a connection's reading is, in the request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// At a request head (or before the first).
    Head,
    /// In a body of this many bytes still to come.
    Body(u64),
    /// Past a chunked body's head: everything goes to hyper unchecked
    /// (the endpoint refuses a chunked body and closes the connection).
    Through,
    /// At a head refused with this status: nothing more goes to hyper.
    Refused(StatusCode),
}

/// A connection's I/O under hyper: reports reads to its [`Activity`], and
/// hands hyper only request heads [`head::check`] accepted (and the bodies
/// they frame). At a refused head, hyper is given the end of the stream
/// once it has answered every request before it, so hyper ends the
/// connection without answering anything more, and [`ConnIo::refusal`]
/// says which answer the endpoint owes. Writes pass through untouched.
pub(crate) struct ConnIo<T> {
    inner: T,
    activity: Arc<Activity>,
    reading: Reading,
    /// Bytes read and not handed to hyper yet: the first `checked` of them
    /// are heads and bodies that passed, the rest the start of a head.
    /// Emptied (and its allocation freed) whenever it is all handed over.
    buffer: Vec<u8>,
    checked: usize,
    /// Whether hyper was given the end of the stream for a refused head.
    refusal_delivered: bool,
    /// hyper's task, waiting to learn of a refusal until its answers are
    /// out.
    waiting: Option<Waker>,
}

impl<T> ConnIo<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            reading: Reading::Head,
            buffer: Vec::new(),
            checked: 0,
            refusal_delivered: false,
            waiting: None,
        }
    }

    /// The status of the refused head whose end of stream hyper read (so
    /// hyper answered everything before it and nothing after): the
    /// endpoint's answer to write.
    pub(crate) fn refusal(&self) -> Option<StatusCode> {
        match self.reading {
            Reading::Refused(status) if self.refusal_delivered => Some(status),
            _ => None,
        }
    }

    /// The I/O itself.
    pub(crate) fn into_inner(self) -> T {
        self.inner
    }

    /// Moves what the buffer holds past the checked bytes along the
    /// request stream: bodies are passed, heads checked, until a head is
    /// incomplete or refused.
    fn advance(&mut self) {
        loop {
            let rest = self.buffer.len() - self.checked;
            match self.reading {
                Reading::Refused(_) => return,
                Reading::Through => {
                    self.checked = self.buffer.len();
                    return;
                }
                Reading::Body(left) => {
                    let take = usize::try_from(left).map_or(rest, |left| left.min(rest));
                    self.checked += take;
                    let left = left - take as u64;
                    if left > 0 {
                        self.reading = Reading::Body(left);
                        return;
                    }
                    self.reading = Reading::Head;
                }
                Reading::Head if rest == 0 => return,
                Reading::Head => match head::check(&self.buffer[self.checked..]) {
                    head::Head::Partial => return,
                    head::Head::Refused(status) => {
                        self.reading = Reading::Refused(status);
                        return;
                    }
                    head::Head::Complete { len, body } => {
                        self.checked += len;
                        self.reading = match body {
                            head::Body::Length(0) => Reading::Head,
                            head::Body::Length(n) => Reading::Body(n),
                            head::Body::Chunked => Reading::Through,
                        };
                    }
                },
            }
        }
    }
}

impl<T> std::fmt::Debug for ConnIo<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnIo")
            .field("reading", &self.reading)
            .field("buffered", &self.buffer.len())
            .finish_non_exhaustive()
    }
}

/// Reads from the client into `buf`, reporting the bytes to `activity`.
fn poll_client<T: AsyncRead + Unpin>(
    inner: &mut T,
    activity: &Activity,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<std::io::Result<()>> {
    let before = buf.filled().len();
    ready!(Pin::new(inner).poll_read(cx, buf))?;
    if buf.filled().len() > before {
        activity.on_read();
    }
    Poll::Ready(Ok(()))
}

impl<T: AsyncRead + Unpin> AsyncRead for ConnIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            // Checked bytes first, as hyper asks for them.
            if this.checked > 0 {
                let n = this.checked.min(buf.remaining());
                buf.put_slice(&this.buffer[..n]);
                this.buffer.drain(..n);
                this.checked -= n;
                if this.buffer.is_empty() {
                    this.buffer = Vec::new();
                }
                return Poll::Ready(Ok(()));
            }
            match this.reading {
                Reading::Refused(_) => {
                    // hyper reads while it still answers (to notice the
                    // client leaving): the end of the stream now would
                    // cut that answer off. Once it is out, hyper reads for
                    // the next head and is given the end of the stream.
                    if this.activity.answering() {
                        this.waiting = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                    this.refusal_delivered = true;
                    return Poll::Ready(Ok(()));
                }
                // A body (only as much as it has) or what follows a
                // chunked head: straight into hyper's buffer.
                Reading::Body(left) if this.buffer.is_empty() => {
                    let room = usize::try_from(left)
                        .map_or(buf.remaining(), |left| left.min(buf.remaining()));
                    let mut limited = ReadBuf::new(buf.initialize_unfilled_to(room));
                    ready!(poll_client(
                        &mut this.inner,
                        &this.activity,
                        cx,
                        &mut limited
                    ))?;
                    let n = limited.filled().len();
                    buf.advance(n);
                    let left = left - n as u64;
                    this.reading = if left == 0 {
                        Reading::Head
                    } else {
                        Reading::Body(left)
                    };
                    return Poll::Ready(Ok(()));
                }
                Reading::Through if this.buffer.is_empty() => {
                    return poll_client(&mut this.inner, &this.activity, cx, buf);
                }
                Reading::Body(_) | Reading::Through => this.advance(),
                Reading::Head => {
                    // The start of a head: read on the stack, keep what
                    // came (up to the head limit) and check it. Nothing
                    // is allocated while the connection waits.
                    let room = head::MAX_HEAD_BYTES.saturating_sub(this.buffer.len());
                    if room == 0 {
                        // A full buffer is a checked head or a refused one.
                        this.advance();
                        continue;
                    }
                    let mut stack = [0u8; READ_BYTES];
                    let mut into = ReadBuf::new(&mut stack[..room.min(READ_BYTES)]);
                    ready!(poll_client(&mut this.inner, &this.activity, cx, &mut into))?;
                    if into.filled().is_empty() {
                        // The client is done: an incomplete head is no
                        // request (hyper would not answer it either).
                        this.buffer = Vec::new();
                        return Poll::Ready(Ok(()));
                    }
                    this.buffer.extend_from_slice(into.filled());
                    this.advance();
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ConnIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
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

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.activity.on_flushed();
        if let Some(waker) = self.waiting.take() {
            waker.wake();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
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

    /// hyper reads accepted heads and the bodies they frame, in whatever
    /// pieces; at a refused head it reads the end of the stream, once no
    /// answer is owed, and the refusal is the endpoint's to answer.
    #[tokio::test]
    async fn hyper_reads_only_heads_that_passed_and_their_bodies() {
        let (mut client, server) = duplex(64 * 1024);
        let activity = Activity::new();
        let mut io = ConnIo::new(server, activity.clone());
        let good = "GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 18\r\n\r\n\
                    GET / HTTP/1.1\r\n\r\n";
        client.write_all(good.as_bytes()).await.unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost : x\r\n\r\nGET / HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut read = Vec::new();
        let mut chunk = [0u8; 7];
        let guard = activity.start_request();
        while read.len() < good.len() {
            let n = io.read(&mut chunk).await.unwrap();
            assert!(n > 0);
            read.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(String::from_utf8(read).unwrap(), good);
        // An answer is owed: the refusal waits for it to be out.
        let pending = tokio::time::timeout(Duration::from_millis(50), io.read(&mut chunk)).await;
        assert!(pending.is_err(), "{pending:?}");
        assert_eq!(io.refusal(), None);
        drop(guard);
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        io.flush().await.unwrap();
        assert_eq!(io.read(&mut chunk).await.unwrap(), 0);
        assert_eq!(io.refusal(), Some(StatusCode::BAD_REQUEST));
        let mut out = [0u8; 19];
        client.read_exact(&mut out).await.unwrap();
        assert_eq!(&out, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    /// A head over the limit is refused 431 without being read further.
    #[tokio::test]
    async fn an_oversized_head_is_refused() {
        let (mut client, server) = duplex(64 * 1024);
        let mut io = ConnIo::new(server, Activity::new());
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(20 * 1024));
        client.write_all(long.as_bytes()).await.unwrap();
        let mut chunk = [0u8; 64];
        assert_eq!(io.read(&mut chunk).await.unwrap(), 0);
        assert_eq!(
            io.refusal(),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
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
