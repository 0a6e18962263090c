//! Request bodies and the answers that close a connection. A body is read
//! whole, bounded by [`MAX_BODY_BYTES`] and the body timeout, before a
//! request is answered; one refused (announced too large, not arriving in
//! time, chunked: send a `Content-Length`) is answered with
//! `Connection: close`, so hyper stops reading the connection and the
//! connection closes lingering (`conn::linger`) rather than being reused
//! with a body's bytes still unread in it. Also the encoding of the
//! endpoint's answer that replaces one hyper made up itself (`conn`).

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Response, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Body as _, Incoming};

use super::answers::Answer;

/// Largest request body accepted (a release is a few hundred bytes).
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024;

/// The body of a request with `headers`, read whole within `timeout`, or
/// the answer refusing it (which closes the connection).
pub(crate) async fn read(
    headers: &HeaderMap,
    body: Incoming,
    timeout: Duration,
) -> Result<Bytes, Answer> {
    let too_large = || {
        Answer::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        )
        .closing()
    };
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return Err(Answer::error(
            StatusCode::LENGTH_REQUIRED,
            "LengthRequired",
            "send the body with a Content-Length header (chunked bodies are not accepted)",
        )
        .closing());
    }
    if body.is_end_stream() {
        return Ok(Bytes::new());
    }
    // hyper has checked that the lengths agree (one value, or equal ones).
    if body
        .size_hint()
        .exact()
        .is_some_and(|length| length > MAX_BODY_BYTES as u64)
    {
        return Err(too_large());
    }
    let collected = Limited::new(body, MAX_BODY_BYTES).collect();
    match tokio::time::timeout(timeout, collected).await {
        Err(_) => Err(Answer::error(
            StatusCode::REQUEST_TIMEOUT,
            "RequestTimeout",
            "the body did not arrive in time",
        )
        .closing()),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(error)) => Err(Answer::error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("the body could not be read: {error}"),
        )
        .closing()),
        Ok(Ok(body)) => Ok(body.to_bytes()),
    }
}

/// `answer` to a request whose `body` is not read: it closes the connection
/// unless there is no body.
pub(crate) fn unread(answer: Answer, body: &Incoming) -> Answer {
    if body.is_end_stream() {
        answer
    } else {
        answer.closing()
    }
}

/// `response` as HTTP/1.1 bytes, for the one answer the endpoint writes
/// itself (in place of hyper's own): a status line, the response's headers
/// (the endpoint's own values, never a client's), its length, its body.
pub(crate) fn encode(response: &Response<Full<Bytes>>) -> Bytes {
    // A `Full` body is ready at once.
    let body = futures::FutureExt::now_or_never(response.body().clone().collect())
        .and_then(Result::ok)
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let status = response.status();
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in response.headers() {
        if name == header::CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(&body);
    Bytes::from(out)
}
