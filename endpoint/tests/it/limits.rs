//! Protection of the operator and the API server: the per-pod and per-IP
//! rate limits (the IP's before any TokenReview), the header timeout against
//! slow clients (which idle keep-alive connections do not hit), and the
//! bound on connections that leaves open long-polls working.

use std::time::Duration;

use http::Method;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::support::{Claims, Endpoint, Setup, claims, token, view_path, wait_until};

/// Sends `total` requests with `token_of(i)` over `connections` keep-alive
/// connections at once; returns the answers.
async fn burst(
    endpoint: &Endpoint,
    total: usize,
    connections: usize,
    token_of: impl Fn(usize) -> String + Send + Sync + 'static,
) -> Vec<super::support::Answer> {
    let token_of = std::sync::Arc::new(token_of);
    let client = endpoint.client();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let (client, token_of) = (client.clone(), token_of.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = client.connect().await.unwrap();
            let mut answers = Vec::new();
            for i in (c..total).step_by(connections) {
                let answer = conn
                    .send(Method::GET, &view_path(0, 0), Some(&token_of(i)), None)
                    .await
                    .unwrap();
                answers.push(answer);
            }
            answers
        }));
    }
    let mut all = Vec::with_capacity(total);
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_from_one_pod_passes_only_its_limit_and_costs_one_token_review() {
    let endpoint = Endpoint::with(Setup {
        config: Box::new(|c| {
            // One window for the whole burst; the IP limit out of the way.
            c.rate_window = Duration::from_secs(3600);
            c.ip_limit = 1_000_000;
        }),
        ..Setup::default()
    })
    .await;
    endpoint.sync(&[("c-0", 1, &["s-0"])]);
    let token = token("c-0");
    let answers = tokio::time::timeout(
        Duration::from_secs(300),
        burst(&endpoint, 10_000, 20, move |_| token.clone()),
    )
    .await
    .expect("the burst is answered");
    let ok = answers.iter().filter(|a| a.status == 200).count();
    let limited: Vec<_> = answers.iter().filter(|a| a.status == 429).collect();
    assert_eq!(ok, 120, "exactly the pod limit passes");
    assert_eq!(limited.len(), 10_000 - 120);
    for answer in &limited {
        let retry: u64 = answer.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=3600).contains(&retry), "{retry}");
        assert_eq!(answer.header("x-ratelimit-limit"), Some("120"));
        assert_eq!(answer.header("x-ratelimit-remaining"), Some("0"));
        assert_eq!(answer.error().reason, "RateLimited");
    }
    assert_eq!(
        endpoint.mock.token_review_count(),
        1,
        "one review, then the cache (concurrent misses share it)"
    );
    let pod_limited = endpoint
        .metrics
        .rate_limited
        .get_or_create(&shardring_endpoint::metrics::LimitLabel { key: "pod" })
        .get();
    assert_eq!(pod_limited, 9_880);
    endpoint.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_tokens_from_one_ip_costs_at_most_the_ip_limit_in_reviews() {
    let endpoint = Endpoint::with(Setup {
        config: Box::new(|c| c.rate_window = Duration::from_secs(3600)),
        ..Setup::default()
    })
    .await;
    let answers = tokio::time::timeout(
        Duration::from_secs(300),
        burst(&endpoint, 10_000, 20, |i| {
            Claims {
                audiences: vec!["someone-else".into()],
                nonce: u64::try_from(i).unwrap(),
                ..claims("intruder")
            }
            .token()
        }),
    )
    .await
    .expect("the flood is answered");
    let unauthorized = answers.iter().filter(|a| a.status == 401).count();
    let limited = answers.iter().filter(|a| a.status == 429).count();
    assert_eq!(unauthorized, 600, "the IP limit lets 600 through");
    assert_eq!(limited, 10_000 - 600);
    assert!(
        answers
            .iter()
            .filter(|a| a.status == 429)
            .all(|a| a.header("retry-after").is_some()
                && a.header("x-ratelimit-limit") == Some("600"))
    );
    let reviews = endpoint.mock.token_review_count();
    assert!(reviews <= 600, "{reviews} TokenReviews");
    endpoint.stop().await;
}

#[tokio::test]
async fn a_slow_client_is_cut_off_but_an_idle_keep_alive_connection_is_not() {
    let endpoint = Endpoint::with(Setup {
        config: Box::new(|c| {
            c.header_timeout = Duration::from_millis(500);
            c.idle_timeout = Duration::from_secs(30);
        }),
        ..Setup::default()
    })
    .await;
    endpoint.sync(&[("c-0", 1, &["s-0"])]);
    let client = endpoint.client();

    // Half a request head, then nothing: closed after the header timeout.
    let (mut tls, _) = client.tls().await.unwrap();
    tls.write_all(b"GET /v1/healthz HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut buf))
        .await
        .expect("the server closes the connection");
    assert!(read.is_ok() || buf.is_empty(), "{read:?}");
    assert!(
        !String::from_utf8_lossy(&buf).contains("200 OK"),
        "the half request was not answered"
    );
    assert!(started.elapsed() >= Duration::from_millis(400));

    // Idle between requests for longer than the header timeout: still open.
    let mut conn = client.connect().await.unwrap();
    conn.send(Method::GET, "/v1/healthz", None, None)
        .await
        .unwrap()
        .expect(200);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!conn.is_closed());
    conn.send(Method::GET, &view_path(0, 0), Some(&token("c-0")), None)
        .await
        .unwrap()
        .expect(200);
    endpoint.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_bound_new_connections_close_and_open_polls_still_answer() {
    let endpoint = Endpoint::with(Setup {
        config: Box::new(|c| c.max_connections = 3),
        ..Setup::default()
    })
    .await;
    endpoint.sync(&[
        ("c-0", 1, &["s-0"]),
        ("c-1", 1, &["s-1"]),
        ("c-2", 1, &["s-2"]),
    ]);
    let client = endpoint.client();
    let mut polls = Vec::new();
    for pod in ["c-0", "c-1", "c-2"] {
        let mut conn = client.connect().await.unwrap();
        polls.push(tokio::spawn(async move {
            conn.send(Method::GET, &view_path(1, 60), Some(&token(pod)), None)
                .await
                .unwrap()
        }));
    }
    wait_until("three polls", Duration::from_secs(10), || {
        endpoint.metrics.open_long_polls.get() == 3
    })
    .await;
    assert_eq!(endpoint.metrics.connections.get(), 3);
    assert!(
        client.tls().await.is_err(),
        "a fourth connection is closed at once"
    );
    endpoint.sync(&[
        ("c-0", 2, &["s-0"]),
        ("c-1", 2, &["s-1"]),
        ("c-2", 2, &["s-2"]),
    ]);
    for poll in polls {
        let answer = tokio::time::timeout(Duration::from_secs(10), poll)
            .await
            .expect("the open polls answer")
            .unwrap();
        answer.expect(200);
        assert_eq!(answer.json()["epoch"], 2);
    }
    endpoint.stop().await;
}
