//! Request heads checked before hyper reads them: [`check`] parses a head
//! with the parser hyper uses (httparse, hyper's default configuration and
//! the endpoint's limits) and the checks hyper makes after it (method, URI,
//! header names, `Content-Length`, `Transfer-Encoding`), and says where the
//! head ends and how long its body is. A head it refuses never reaches
//! hyper, so hyper never answers one by itself; the endpoint answers it
//! ([`conn`](super::conn) holds it back from hyper and
//! [`http1`](super::http1) writes the answer once hyper is done).
//!
//! The check is at least as strict as hyper's (a head hyper would refuse is
//! refused here with the status hyper would give it): were it ever less
//! strict, hyper would still refuse the head, with its own bare answer,
//! never with more.

use http::header::{CONTENT_LENGTH, HeaderName, TRANSFER_ENCODING};
use http::{Method, StatusCode, Uri};

/// Largest request head accepted (a larger one is answered 431).
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields in a request head (more: 431).
pub(crate) const MAX_HEADERS: usize = 64;
/// Longest URI hyper accepts (its `MAX_URI_LEN`; longer: 414).
const MAX_URI_BYTES: usize = (u16::MAX - 1) as usize;
/// Largest body length hyper can frame (its `DecodedLength::MAX_LEN`).
const MAX_BODY_LENGTH: u64 = u64::MAX - 2;

/// How a request's body is framed, as hyper frames it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    /// `Content-Length` bytes (0: no body).
    Length(u64),
    /// Chunked: the endpoint refuses it (411) and closes the connection,
    /// so no head follows it that hyper would read.
    Chunked,
}

/// What [`check`] found at the start of some bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// Not a whole head yet, and not refused: more bytes are needed.
    Partial,
    /// A head hyper accepts, of `len` bytes (leading blank lines
    /// included), and its body's framing.
    Complete { len: usize, body: Body },
    /// A head to refuse, with this status (400, 414 or 431).
    Refused(StatusCode),
}

/// The head at the start of `bytes` (at most [`MAX_HEAD_BYTES`] are
/// looked at).
pub(crate) fn check(bytes: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match httparse::ParserConfig::default().parse_request(&mut request, bytes) {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD_BYTES => {
            return Head::Refused(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() >= MAX_HEAD_BYTES => {
            return Head::Refused(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Head::Refused(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        Err(_) => return Head::Refused(StatusCode::BAD_REQUEST),
    };
    match framing(&request) {
        Ok(body) => Head::Complete { len, body },
        Err(status) => Head::Refused(status),
    }
}

/// hyper's checks of a parsed head (`Server::parse` in hyper's h1 role):
/// the method, the URI, the header names, and the body's framing (RFC 9112
/// §6.3: a `Transfer-Encoding` ending in `chunked` wins over any
/// `Content-Length`, which must otherwise be digits, and equal when
/// repeated).
fn framing(request: &httparse::Request<'_, '_>) -> Result<Body, StatusCode> {
    let bad = StatusCode::BAD_REQUEST;
    let (Some(method), Some(path), Some(version)) = (request.method, request.path, request.version)
    else {
        return Err(bad);
    };
    if path.len() > MAX_URI_BYTES {
        return Err(StatusCode::URI_TOO_LONG);
    }
    Method::from_bytes(method.as_bytes()).map_err(|_| bad)?;
    Uri::try_from(path).map_err(|_| bad)?;
    let mut length: Option<u64> = None;
    let mut te = false;
    let mut te_chunked = false;
    for header in request.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| bad)?;
        if name == TRANSFER_ENCODING {
            if version == 0 {
                // HTTP/1.0 has no Transfer-Encoding.
                return Err(bad);
            }
            te = true;
            te_chunked = std::str::from_utf8(header.value).is_ok_and(|value| {
                value
                    .rsplit(',')
                    .next()
                    .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
            });
        } else if name == CONTENT_LENGTH && !te {
            let value = digits(header.value).ok_or(bad)?;
            if length.is_some_and(|previous| previous != value) {
                return Err(bad);
            }
            if value > MAX_BODY_LENGTH {
                return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            }
            length = Some(value);
        }
    }
    match (te, te_chunked) {
        (true, false) => Err(bad),
        (true, true) => Ok(Body::Chunked),
        (false, _) => Ok(Body::Length(length.unwrap_or(0))),
    }
}

/// A `Content-Length` value: decimal digits only, as hyper reads it.
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(bytes: &[u8]) -> (usize, Body) {
        match check(bytes) {
            Head::Complete { len, body } => (len, body),
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn a_head_ends_where_hyper_ends_it_and_frames_its_body_as_hyper_does() {
        let get = b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\nnext";
        assert_eq!(complete(get), (get.len() - 4, Body::Length(0)));
        let post = b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(complete(post).1, Body::Length(5));
        let chunked =
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(complete(chunked).1, Body::Chunked);
        // After a Transfer-Encoding, a Content-Length is not read at all.
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n";
        assert_eq!(complete(chunked).1, Body::Chunked);
        // Leading blank lines belong to the head; bare LF ends lines.
        assert_eq!(complete(b"\r\nGET / HTTP/1.1\n\n").0, 18);
        assert_eq!(check(b"GET / HTTP/1.1\r\nHost: x\r\n"), Head::Partial);
    }

    #[test]
    fn heads_hyper_refuses_are_refused_with_its_status() {
        let bad = Head::Refused(StatusCode::BAD_REQUEST);
        for head in [
            &b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            b"\x01\x02 nonsense\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 0\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 5, 0\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(check(head), bad, "{:?}", String::from_utf8_lossy(head));
        }
        let too_large = Head::Refused(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(check(long.as_bytes()), too_large);
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(check(many.as_bytes()), too_large);
        // Just under the limit, a head is whole.
        let fill = MAX_HEAD_BYTES - "GET / HTTP/1.1\r\nX: \r\n\r\n".len();
        let full = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(fill));
        assert_eq!(complete(full.as_bytes()).0, MAX_HEAD_BYTES);
    }
}
