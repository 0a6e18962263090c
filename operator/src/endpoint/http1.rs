//! The endpoint's HTTP/1.1: requests read off a connection and answers
//! written back, keep-alive and pipelining included. Written here instead of
//! hyper's server because of what an open long-poll costs: hyper keeps an
//! 8 KiB read buffer and an 8 KiB write buffer per connection for its whole
//! life, which at 5,000 waiting consumers was two thirds of the memory the
//! endpoint added (27 KiB per connection with rustls). Here a connection
//! holds a buffer only while a request is arriving: once it is read, the
//! buffer is freed, and a long-poll waits with nothing but its TLS state.
//!
//! What it accepts is what the endpoint's API needs: a request head of at
//! most [`MAX_HEAD_BYTES`], a body announced by `Content-Length` (read when
//! it fits in [`MAX_BODY_BYTES`]; a larger one is announced to the routes,
//! which refuse it with 413, and the connection is closed), `Expect:
//! 100-continue`. A chunked body gets 411 (send a `Content-Length`), a head
//! that cannot be parsed 400, one too large 431; each closes the
//! connection. Timeouts are the caller's (`conn::Activity` watches the
//! bytes).

use std::future::Future;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::Full;
use shardring_crds::endpoint::ErrorBody;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::routes::MAX_BODY_BYTES;

/// Largest request head accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most headers in a request head.
const MAX_HEADERS: usize = 64;
/// Bytes read from the connection at a time.
const READ_CHUNK: usize = 2048;

/// A request as the handler gets it: boxed, because a future that holds a
/// request (a long-poll's, for as long as it waits) would otherwise carry
/// its 250 bytes once per async function it passes through (a moved-from
/// binding keeps its room in a future).
pub(crate) type Incoming = Box<Request<Full<Bytes>>>;

/// Serves requests on `io` with `handle` until the client closes, an answer
/// or request says `Connection: close`, the request is malformed, or `stop`
/// is cancelled (checked between requests: an answer being prepared, e.g. a
/// long-poll, is the handler's to end).
pub(crate) async fn serve<IO, H, F>(mut io: IO, handle: H, stop: CancellationToken)
where
    IO: AsyncRead + AsyncWrite + Unpin,
    H: Fn(Incoming) -> F,
    F: Future<Output = Response<Full<Bytes>>>,
{
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // Between requests a stopping server closes the connection; a
        // request already arriving is read and answered.
        let idle = buf.is_empty();
        // Matched without a binding, which would keep its room in the
        // future while the request is answered.
        let (request, keep_alive) = match tokio::select! {
            next = read_request(&mut io, &mut buf) => next,
            () = stop.cancelled(), if idle => return,
        } {
            Ok(Some(read)) => read,
            Ok(None) => return,
            Err(refusal) => {
                let _ = write_response(&mut io, &refusal.response(), false).await;
                return;
            }
        };
        // Nothing of the request stays buffered while it is answered
        // (pipelined bytes, rare, do).
        if buf.is_empty() {
            buf = Vec::new();
        }
        let response = handle(request).await;
        let close = !keep_alive
            || response
                .headers()
                .get(header::CONNECTION)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        if write_response(&mut io, &response, !close).await.is_err() || close {
            let _ = io.shutdown().await;
            return;
        }
    }
}

/// Why a request is refused before the routes see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The head could not be parsed.
    Malformed,
    /// The head is larger than [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    /// A chunked (or otherwise unsized) body.
    LengthRequired,
}

impl Refusal {
    fn response(self) -> Response<Full<Bytes>> {
        let (status, reason, message) = match self {
            Self::Malformed => (
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the request is not valid HTTP/1.1".to_owned(),
            ),
            Self::HeadTooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "HeadersTooLarge",
                format!("the request head is larger than {MAX_HEAD_BYTES} bytes"),
            ),
            Self::LengthRequired => (
                StatusCode::LENGTH_REQUIRED,
                "LengthRequired",
                "send the body with a Content-Length header (chunked bodies are not accepted)"
                    .to_owned(),
            ),
        };
        let body = ErrorBody {
            code: status.as_u16(),
            reason: reason.to_owned(),
            message,
        };
        let mut response = Response::new(Full::new(Bytes::from(
            serde_json::to_vec(&body).expect("an ErrorBody always serializes"),
        )));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// Reads one request (head and body) into `buf`, leaving in it only the
/// bytes that follow. `Ok(None)`: the client closed between requests.
/// Returns the request and whether the connection may be kept alive.
async fn read_request<IO>(
    io: &mut IO,
    buf: &mut Vec<u8>,
) -> Result<Option<(Incoming, bool)>, Refusal>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let head_end = loop {
        if let Some(end) = find_head_end(buf) {
            break end;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(Refusal::HeadTooLarge);
        }
        if !read_more(io, buf).await {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(Refusal::Malformed)
            };
        }
    };
    if head_end > MAX_HEAD_BYTES {
        return Err(Refusal::HeadTooLarge);
    }
    let Head {
        builder,
        length,
        mut keep_alive,
        expects_continue,
    } = parse_head(&buf[..head_end])?;
    buf.drain(..head_end);
    let body = if length > MAX_BODY_BYTES {
        // The routes refuse it from its Content-Length; its bytes are never
        // read, so the connection cannot be reused.
        keep_alive = false;
        Bytes::new()
    } else {
        if expects_continue && buf.len() < length {
            io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .map_err(|_| Refusal::Malformed)?;
        }
        while buf.len() < length {
            if !read_more(io, buf).await {
                return Err(Refusal::Malformed);
            }
        }
        Bytes::from(buf.drain(..length).collect::<Vec<u8>>())
    };
    let request = builder
        .body(Full::new(body))
        .map_err(|_| Refusal::Malformed)?;
    Ok(Some((Box::new(request), keep_alive)))
}

/// What a request head says, parsed.
struct Head {
    builder: http::request::Builder,
    length: usize,
    keep_alive: bool,
    expects_continue: bool,
}

/// Parses a complete request head. Not async on purpose: the parser's
/// header array (2 KiB) then lives on the stack for the call only, not in
/// every connection's future for its whole life.
fn parse_head(head: &[u8]) -> Result<Head, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) | Err(_) => return Err(Refusal::Malformed),
    }
    let mut builder = Request::builder()
        .method(parsed.method.ok_or(Refusal::Malformed)?)
        .uri(parsed.path.ok_or(Refusal::Malformed)?)
        .version(match parsed.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        });
    let mut length: usize = 0;
    let mut keep_alive = parsed.version != Some(0);
    let mut expects_continue = false;
    for h in parsed.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| Refusal::Malformed)?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| Refusal::Malformed)?;
        if name == header::CONTENT_LENGTH {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or(Refusal::Malformed)?;
        } else if name == header::TRANSFER_ENCODING {
            return Err(Refusal::LengthRequired);
        } else if name == header::CONNECTION {
            let value = value.as_bytes();
            if value.eq_ignore_ascii_case(b"close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                keep_alive = true;
            }
        } else if name == header::EXPECT && value.as_bytes().eq_ignore_ascii_case(b"100-continue") {
            expects_continue = true;
        }
        builder = builder.header(name, value);
    }
    Ok(Head {
        builder,
        length,
        keep_alive,
        expects_continue,
    })
}

/// Appends what the connection has to `buf`; `false` at its end (or on an
/// error, which ends the connection the same way). Reads into `buf`'s own
/// spare room, not a buffer on the stack: a future's stack lives in the
/// connection's task for the connection's whole life.
async fn read_more<IO: AsyncRead + Unpin>(io: &mut IO, buf: &mut Vec<u8>) -> bool {
    buf.reserve(READ_CHUNK);
    matches!(io.read_buf(buf).await, Ok(n) if n > 0)
}

/// The length of the head (through its blank line), once it is complete.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Writes `response` with its `Content-Length` (and `Connection: close`
/// unless `keep_alive`).
async fn write_response<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    response: &Response<Full<Bytes>>,
    keep_alive: bool,
) -> std::io::Result<()> {
    use http_body_util::BodyExt as _;
    let body = response
        .body()
        .clone()
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let status = response.status();
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {} {}\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        )
        .as_bytes(),
    );
    for (name, value) in response.headers() {
        if name == header::CONTENT_LENGTH || name == header::CONNECTION {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    io.write_all(&out).await?;
    io.flush().await
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;

    /// Serves one connection with a handler that echoes the method, path and
    /// body; returns everything the client got back after sending `input`
    /// and closing its side.
    async fn exchange(input: &[u8]) -> String {
        let (mut client, server) = duplex(64 * 1024);
        let task = tokio::spawn(serve(
            server,
            |request: Incoming| async move {
                use http_body_util::BodyExt as _;
                let (parts, body) = request.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                let text = format!(
                    "{} {} {}",
                    parts.method,
                    parts.uri,
                    String::from_utf8_lossy(&body)
                );
                let mut response = Response::new(Full::new(Bytes::from(text)));
                if parts.uri.path() == "/close" {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                response
            },
            CancellationToken::new(),
        ));
        client.write_all(input).await.unwrap();
        client.shutdown().await.unwrap();
        let mut out = String::new();
        client.read_to_string(&mut out).await.unwrap();
        task.await.unwrap();
        out
    }

    #[tokio::test]
    async fn keep_alive_and_pipelined_requests_are_answered_in_order() {
        let out = exchange(
            b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /c HTTP/1.1\r\n\r\n",
        )
        .await;
        let answers: Vec<&str> = out.split("HTTP/1.1 200 OK\r\n").skip(1).collect();
        assert_eq!(answers.len(), 3, "{out}");
        assert!(answers[0].ends_with("GET /a?x=1 "), "{out}");
        assert!(answers[0].contains("content-length: 11\r\n"), "{out}");
        assert!(answers[1].ends_with("POST /b hello"), "{out}");
        assert!(answers[2].ends_with("GET /c "), "{out}");
    }

    #[tokio::test]
    async fn an_answer_saying_close_ends_the_connection() {
        let out = exchange(b"GET /close HTTP/1.1\r\n\r\nGET /after HTTP/1.1\r\n\r\n").await;
        assert_eq!(out.matches("HTTP/1.1 200").count(), 1, "{out}");
        assert!(out.contains("connection: close\r\n"), "{out}");
    }

    #[tokio::test]
    async fn http_1_0_closes_after_its_answer() {
        let out = exchange(b"GET /a HTTP/1.0\r\n\r\nGET /b HTTP/1.1\r\n\r\n").await;
        assert_eq!(out.matches("HTTP/1.1 200").count(), 1, "{out}");
    }

    #[tokio::test]
    async fn bad_requests_are_refused_with_their_reason_and_the_connection_closed() {
        let chunked = exchange(
            b"POST /r HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .await;
        assert!(
            chunked.starts_with("HTTP/1.1 411 Length Required\r\n"),
            "{chunked}"
        );
        assert!(
            chunked.contains("\"reason\":\"LengthRequired\""),
            "{chunked}"
        );
        let garbage = exchange(b"\x01\x02 nonsense\r\n\r\n").await;
        assert!(
            garbage.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{garbage}"
        );
        let mut huge = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
        huge.extend_from_slice(b"\r\n\r\n");
        let too_large = exchange(&huge).await;
        assert!(too_large.starts_with("HTTP/1.1 431 "), "{too_large}");
        let cut = exchange(b"POST /r HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc").await;
        assert!(cut.starts_with("HTTP/1.1 400 "), "{cut}");
    }

    #[tokio::test]
    async fn an_oversized_body_is_announced_to_the_routes_unread_and_the_connection_closed() {
        let length = MAX_BODY_BYTES + 1;
        let input = format!("POST /big HTTP/1.1\r\nContent-Length: {length}\r\n\r\nxyz");
        let out = exchange(input.as_bytes()).await;
        assert!(out.ends_with("POST /big "), "the body is not read: {out}");
        assert!(out.contains("connection: close\r\n"), "{out}");
    }

    #[tokio::test]
    async fn expect_100_continue_is_answered_before_the_body() {
        let (mut client, server) = duplex(64 * 1024);
        let task = tokio::spawn(serve(
            server,
            |_request: Incoming| async { Response::new(Full::new(Bytes::from("ok"))) },
            CancellationToken::new(),
        ));
        client
            .write_all(b"POST /r HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 25];
        client.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
        client.write_all(b"{}").await.unwrap();
        client.shutdown().await.unwrap();
        let mut rest = String::new();
        client.read_to_string(&mut rest).await.unwrap();
        assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{rest}");
        task.await.unwrap();
    }
}
