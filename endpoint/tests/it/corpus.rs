//! An adversarial HTTP/1.1 corpus against the endpoint, byte for byte over
//! TLS: ambiguous framing (duplicate `Content-Length`, `Content-Length` with
//! `Transfer-Encoding` in every order and case, `Transfer-Encoding: gzip,
//! chunked`), malformed heads (obs-fold, whitespace before the colon, bare
//! LF, invalid chunk sizes, an oversized request line), HTTP/1.0 keep-alive,
//! pipelining after a refused request, and slow heads and bodies. Each case
//! is refused, or answered as exactly the requests its bytes contain, never
//! more; every answer carries the `X-RateLimit-*` headers and a JSON body.
//! A property test then sends random streams: never more answers than
//! requests.

use std::time::Duration;

use proptest::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::support::{Endpoint, Setup};

/// How long the test endpoint waits for a head, a body, or the next request.
const TIMEOUT: Duration = Duration::from_millis(400);

async fn endpoint() -> Endpoint {
    endpoint_with(TIMEOUT).await
}

async fn endpoint_with(timeout: Duration) -> Endpoint {
    Endpoint::with(Setup {
        config: Box::new(move |c| {
            c.header_timeout = timeout;
            c.idle_timeout = timeout;
            c.ip_limit = 1_000_000;
        }),
        ..Setup::default()
    })
    .await
}

/// One answer as read off the wire.
#[derive(Debug, Clone)]
struct Wire {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Wire {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Splits what the server wrote into answers (each with a
/// `Content-Length`, as the endpoint always sends).
fn answers(mut bytes: &[u8]) -> Vec<Wire> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        let head = match response.parse(bytes) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!(
                "not an answer ({other:?}): {:?}",
                String::from_utf8_lossy(bytes)
            ),
        };
        let headers: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let status = response.code.expect("a status");
        let length: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().expect("a length"));
        let body = bytes[head..head + length].to_vec();
        bytes = &bytes[head + length..];
        if status == 100 {
            continue;
        }
        out.push(Wire {
            status,
            headers,
            body,
        });
    }
    out
}

/// Sends `chunks` (each after `pause`) on one connection and reads what
/// comes back until the server closes it.
async fn exchange(endpoint: &Endpoint, chunks: &[&[u8]], pause: Duration) -> Vec<Wire> {
    let (mut tls, _) = endpoint.client().tls().await.expect("a TLS connection");
    for chunk in chunks {
        // The server may have closed already (a refused request).
        if tls.write_all(chunk).await.is_err() || tls.flush().await.is_err() {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out))
        .await
        .expect("the server closes the connection");
    // A close without close_notify after the last answer is fine here.
    let _ = read;
    let wires = answers(&out);
    for wire in &wires {
        assert!(
            wire.header("x-ratelimit-limit").is_some()
                && wire.header("x-ratelimit-remaining").is_some()
                && wire.header("x-ratelimit-reset").is_some(),
            "an answer without the rate-limit headers: {wire:?}"
        );
        let body: serde_json::Value =
            serde_json::from_slice(&wire.body).unwrap_or_else(|e| panic!("{e}: {wire:?}"));
        if wire.status >= 400 {
            assert_eq!(body["code"], wire.status, "{wire:?}");
        }
    }
    wires
}

/// The statuses of the answers to `bytes`, sent at once.
async fn statuses(endpoint: &Endpoint, bytes: &[u8]) -> Vec<u16> {
    exchange(endpoint, &[bytes], Duration::ZERO)
        .await
        .iter()
        .map(|w| w.status)
        .collect()
}

/// A request the endpoint answers 200 without a token.
const HEALTHZ: &str = "GET /v1/healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
/// A request hidden in a body: answering it would be smuggling.
const SMUGGLED: &str = "GET /v1/smuggled HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[tokio::test]
async fn conflicting_or_duplicate_lengths_never_hide_a_request() {
    let endpoint = endpoint().await;
    let len = SMUGGLED.len();
    // Different lengths: an unrecoverable framing error (RFC 9112 §6.3).
    for (first, second) in [(len, 0), (0, len)] {
        let bytes = format!(
            "POST /v1/healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: {first}\r\n\
             Content-Length: {second}\r\n\r\n{SMUGGLED}"
        );
        assert_eq!(
            statuses(&endpoint, bytes.as_bytes()).await,
            [400],
            "{bytes}"
        );
    }
    // A list with different values in one field, and garbage lengths.
    for value in [format!("{len}, 0"), "-1".into(), "+5".into(), "5 5".into()] {
        let bytes = format!(
            "POST /v1/healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: {value}\r\n\r\n{SMUGGLED}"
        );
        assert_eq!(
            statuses(&endpoint, bytes.as_bytes()).await,
            [400],
            "{bytes}"
        );
    }
    // Equal lengths are one length: one request, its body read, then the
    // next request on the connection answered.
    let bytes = format!(
        "POST /v1/healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len}\r\n\
         Content-Length: {len}\r\n\r\n{SMUGGLED}{HEALTHZ}"
    );
    assert_eq!(statuses(&endpoint, bytes.as_bytes()).await, [200, 200]);
    endpoint.stop().await;
}

#[tokio::test]
async fn content_length_with_transfer_encoding_is_refused_in_every_order_and_case() {
    let endpoint = endpoint().await;
    let chunked_smuggle = format!("0\r\n\r\n{SMUGGLED}");
    for te in [
        "Transfer-Encoding: chunked",
        "transfer-encoding: chunked",
        "TRANSFER-ENCODING: CHUNKED",
        "Transfer-Encoding: Chunked",
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: chunked, gzip",
        "Transfer-Encoding: identity",
    ] {
        let cl = format!("Content-Length: {}", chunked_smuggle.len());
        for (a, b) in [(te, cl.as_str()), (cl.as_str(), te)] {
            let bytes = format!(
                "POST /v1/healthz HTTP/1.1\r\nHost: x\r\n{a}\r\n{b}\r\n\r\n{chunked_smuggle}"
            );
            let got = statuses(&endpoint, bytes.as_bytes()).await;
            assert!(
                got == [400] || got == [411],
                "{bytes:?} was answered {got:?}"
            );
        }
        // Without a Content-Length: refused all the same (411: send one).
        let bytes =
            format!("POST /v1/healthz HTTP/1.1\r\nHost: x\r\n{te}\r\n\r\n{chunked_smuggle}");
        let got = statuses(&endpoint, bytes.as_bytes()).await;
        assert!(
            got == [400] || got == [411],
            "{bytes:?} was answered {got:?}"
        );
    }
    // Invalid chunk sizes: the body is never read, the request refused.
    for size in ["zz", "-1", "ffffffffffffffffff", "5 5", ""] {
        let bytes = format!(
            "POST /v1/healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nhello\r\n0\r\n\r\n{HEALTHZ}"
        );
        let got = statuses(&endpoint, bytes.as_bytes()).await;
        assert!(
            got == [400] || got == [411],
            "{bytes:?} was answered {got:?}"
        );
    }
    endpoint.stop().await;
}

#[tokio::test]
async fn malformed_heads_are_refused_with_the_endpoints_answer() {
    let endpoint = endpoint().await;
    let cases: [&[u8]; 6] = [
        // obs-fold (RFC 9112 §5.2: reject).
        b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
        // Whitespace between a field name and the colon (§5.1: reject).
        b"GET /v1/healthz HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET /v1/healthz HTTP/1.1\r\nContent-Length : 5\r\n\r\nhello",
        // Not HTTP.
        b"\x01\x02 nonsense\r\n\r\n",
        b"GET /v1/healthz HTTP/9.9\r\n\r\n",
        b"GET  /v1/healthz HTTP/1.1\r\n\r\n",
    ];
    for bytes in cases {
        let wires = exchange(&endpoint, &[bytes, HEALTHZ.as_bytes()], Duration::ZERO).await;
        let got: Vec<u16> = wires.iter().map(|w| w.status).collect();
        assert_eq!(got, [400], "{:?}", String::from_utf8_lossy(bytes));
        assert_eq!(wires[0].header("connection"), Some("close"));
        let body: serde_json::Value = serde_json::from_slice(&wires[0].body).unwrap();
        assert_eq!(body["reason"], "BadRequest");
    }
    // An oversized request line or head: 431, with the endpoint's answer.
    let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(20 * 1024));
    let long_field = format!(
        "GET /v1/healthz HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(17 * 1024)
    );
    for bytes in [long_line, long_field] {
        let wires = exchange(&endpoint, &[bytes.as_bytes()], Duration::ZERO).await;
        assert_eq!(wires.len(), 1, "{wires:?}");
        assert!(matches!(wires[0].status, 431 | 414), "{wires:?}");
    }
    // Bare LF line endings: one request, answered as one (or refused).
    let got = statuses(&endpoint, b"GET /v1/healthz HTTP/1.1\nHost: x\n\n").await;
    assert!(got == [200] || got == [400], "{got:?}");
    endpoint.stop().await;
}

#[tokio::test]
async fn keep_alive_and_pipelining_answer_each_request_once_and_stop_at_a_refusal() {
    let endpoint = endpoint().await;
    // HTTP/1.0 with keep-alive: both requests, each once.
    let wires = exchange(
        &endpoint,
        &[b"GET /v1/healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /v1/healthz HTTP/1.0\r\n\r\n"],
        Duration::ZERO,
    )
    .await;
    assert_eq!(
        wires.iter().map(|w| w.status).collect::<Vec<_>>(),
        [200, 200]
    );
    // HTTP/1.0 without keep-alive: the first only.
    assert_eq!(
        statuses(
            &endpoint,
            b"GET /v1/healthz HTTP/1.0\r\n\r\nGET /v1/healthz HTTP/1.0\r\n\r\n"
        )
        .await,
        [200]
    );
    // Pipelined: three requests, three answers, in order.
    let three = format!("{HEALTHZ}GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n{HEALTHZ}");
    assert_eq!(statuses(&endpoint, three.as_bytes()).await, [200, 404, 200]);
    // After a refused request, nothing more is answered on the connection.
    let big = format!(
        "POST /v1/healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{HEALTHZ}",
        100 * 1024
    );
    assert_eq!(statuses(&endpoint, big.as_bytes()).await, [413]);
    let bad = format!("GET /v1/healthz HTTP/1.1\r\nHost : x\r\n\r\n{HEALTHZ}{HEALTHZ}");
    assert_eq!(statuses(&endpoint, bad.as_bytes()).await, [400]);
    let chunked = format!(
        "POST /v1/healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{HEALTHZ}"
    );
    assert_eq!(statuses(&endpoint, chunked.as_bytes()).await, [411]);
    endpoint.stop().await;
}

#[tokio::test]
async fn slow_heads_and_slow_bodies_are_cut_off() {
    let endpoint = endpoint().await;
    // A head trickling in slower than the header timeout: closed, never
    // answered as a request.
    let head = HEALTHZ.as_bytes();
    let trickle: Vec<&[u8]> = head.chunks(4).collect();
    let wires = exchange(&endpoint, &trickle, TIMEOUT / 4).await;
    assert!(wires.is_empty(), "{wires:?}");
    // A body slower than the body timeout: 408, closed.
    let wires = exchange(
        &endpoint,
        &[
            b"POST /v1/healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab",
            b"cd",
            b"ef",
        ],
        TIMEOUT,
    )
    .await;
    assert_eq!(wires.iter().map(|w| w.status).collect::<Vec<_>>(), [408]);
    assert_eq!(wires[0].header("connection"), Some("close"));
    endpoint.stop().await;
}

/// A refused body is answered while the client is still sending it, and the
/// client reads the answer (no reset): the server reads and drops the rest.
#[tokio::test]
async fn a_refused_body_is_answered_and_the_connection_closed_gracefully() {
    let endpoint = endpoint().await;
    let (mut tls, _) = endpoint.client().tls().await.unwrap();
    let length = 200 * 1024;
    tls.write_all(
        format!("POST /v1/healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    // Keep writing the body (well past any socket buffer) while the
    // answer is read: as a client that does not look before it sends.
    let (mut read, mut write) = tokio::io::split(tls);
    let writer = tokio::spawn(async move {
        let chunk = vec![b'x'; 8 * 1024];
        let mut sent = 0;
        while sent < length {
            if write.write_all(&chunk).await.is_err() {
                break;
            }
            sent += chunk.len();
        }
        let _ = write.flush().await;
        sent
    });
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut out))
        .await
        .expect("the server closes")
        .expect("the connection closes cleanly, not with a reset");
    let wires = answers(&out);
    assert_eq!(wires.len(), 1, "{wires:?}");
    assert_eq!(wires[0].status, 413);
    assert_eq!(wires[0].header("connection"), Some("close"));
    writer.await.unwrap();
    endpoint.stop().await;
}

/// A request whose framing is certain: how many answers it may get.
fn valid_unit() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(HEALTHZ.as_bytes().to_vec()),
        Just(b"GET /v1/none HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        // A body holding what looks like a request.
        Just(
            format!(
                "POST /v1/healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
                SMUGGLED.len()
            )
            .into_bytes()
        ),
    ]
}

/// Bytes whose framing is ambiguous or broken: at most refused.
fn broken_unit() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(
            format!(
                "POST /v1/healthz HTTP/1.1\r\nContent-Length: {}\r\nContent-Length: 0\r\n\r\n{SMUGGLED}",
                SMUGGLED.len()
            )
            .into_bytes()
        ),
        Just(
            format!("POST /v1/healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{SMUGGLED}")
                .into_bytes()
        ),
        Just(b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n".to_vec()),
        prop::collection::vec(any::<u8>(), 1..200),
    ]
}

/// How many blank lines (`\n\n` or `\n\r\n`) `bytes` has: no request head
/// can end without one.
fn blank_lines(bytes: &[u8]) -> usize {
    bytes
        .windows(2)
        .enumerate()
        .filter(|(i, w)| {
            w[0] == b'\n' && (w[1] == b'\n' || (w[1] == b'\r' && bytes.get(i + 2) == Some(&b'\n')))
        })
        .count()
}

/// Valid requests, then anything: at most one answer per valid request
/// plus one (the refusal of what follows, or a request it happens to form,
/// and the last request, which closes the connection). Purely random bytes:
/// no more answers than request heads they could hold (one refusal when
/// none).
#[test]
fn random_streams_never_get_more_answers_than_requests() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let endpoint = runtime.block_on(endpoint_with(Duration::from_millis(150)));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let streams = (
        prop::collection::vec(valid_unit(), 0..4),
        prop::option::of(broken_unit()),
        prop::collection::vec(any::<u8>(), 0..300),
    );
    let result = runner.run(&streams, |(valid, broken, random)| {
        runtime.block_on(async {
            let mut stream: Vec<u8> = valid.concat();
            stream.extend_from_slice(broken.as_deref().unwrap_or_default());
            stream.extend_from_slice(b"GET /v1/healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
            let wires = exchange(&endpoint, &[&stream], Duration::ZERO).await;
            let bound = valid.len() + usize::from(broken.is_some()) + 1;
            prop_assert!(
                wires.len() <= bound,
                "{} answers to {bound} requests: {wires:?}",
                wires.len()
            );
            let wires = exchange(&endpoint, &[&random], Duration::ZERO).await;
            prop_assert!(
                wires.len() <= blank_lines(&random).max(1),
                "{wires:?} for {random:?}"
            );
            Ok(())
        })
    });
    runtime.block_on(endpoint.stop());
    if let Err(error) = result {
        panic!("{error}");
    }
}
