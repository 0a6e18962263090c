//! Who serves and with what certificate: only the leader answers (others
//! say 503 NotLeader, retry at once on a new connection, and end their open
//! long-polls that way when they lose the leadership); a certificate written
//! into the mounted directory is what the next connection sees (a broken one
//! is not); without a mounted certificate, the replicas share one
//! self-signed CA through a Secret.

use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::support::{Client, Endpoint, Pki, Setup, mock, token, view_path, wait_until};

#[tokio::test]
async fn a_follower_answers_503_not_leader_and_a_lost_leadership_ends_open_polls() {
    let endpoint = Endpoint::with(Setup {
        leader: Some(false),
        ..Setup::default()
    })
    .await;
    endpoint.sync(&[("c-0", 1, &["s-0"])]);
    let client = endpoint.client();
    let answer = client.get(&view_path(0, 0), Some(&token("c-0"))).await;
    answer.expect(503);
    assert_eq!(answer.error().reason, "NotLeader");
    assert_eq!(answer.header("retry-after"), Some("0"));
    assert_eq!(answer.header("connection"), Some("close"));
    assert_eq!(
        endpoint.mock.token_review_count(),
        0,
        "a follower reviews no token"
    );
    client.get("/v1/healthz", None).await.expect(503);

    let leader = endpoint.leader.as_ref().unwrap();
    leader.send_replace(true);
    let mut ok = None;
    for _ in 0..200 {
        let answer = client.get(&view_path(0, 0), Some(&token("c-0"))).await;
        if answer.status == 200 {
            ok = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ok.is_some(), "the new leader serves");

    let poll = {
        let client = client.clone();
        tokio::spawn(async move { client.get(&view_path(1, 120), Some(&token("c-0"))).await })
    };
    wait_until("the poll to wait", Duration::from_secs(10), || {
        endpoint.metrics.open_long_polls.get() == 1
    })
    .await;
    leader.send_replace(false);
    let answer = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the poll ends at once")
        .unwrap();
    answer.expect(503);
    assert_eq!(answer.error().reason, "NotLeader");
    assert_eq!(answer.header("connection"), Some("close"));
    endpoint.stop().await;
}

/// When leadership ends the controller forgets the views at once (the
/// directory is cleared): an open poll and every request after the flip
/// get 503 NotLeader, never 404 for a group the replica no longer knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_leading_answers_not_leader_even_with_its_views_gone() {
    let endpoint = Endpoint::with(Setup {
        leader: Some(true),
        ..Setup::default()
    })
    .await;
    endpoint.sync(&[("c-0", 1, &["s-0"]), ("c-1", 1, &["s-1"])]);
    let client = endpoint.client();
    let polls: Vec<_> = ["c-0", "c-1"]
        .into_iter()
        .map(|pod| {
            let client = client.clone();
            tokio::spawn(async move { client.get(&view_path(1, 120), Some(&token(pod))).await })
        })
        .collect();
    wait_until("the polls to wait", Duration::from_secs(10), || {
        endpoint.metrics.open_long_polls.get() == 2
    })
    .await;
    endpoint.leader.as_ref().unwrap().send_replace(false);
    endpoint.state.directory.clear();
    for poll in polls {
        let answer = tokio::time::timeout(Duration::from_secs(5), poll)
            .await
            .expect("the poll ends at once")
            .unwrap();
        answer.expect(503);
        assert_eq!(answer.error().reason, "NotLeader");
    }
    let answer = client.get(&view_path(0, 0), Some(&token("c-0"))).await;
    answer.expect(503);
    assert_eq!(answer.error().reason, "NotLeader");
    endpoint.stop().await;
}

#[tokio::test]
async fn shutdown_answers_open_polls_and_stops() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 1, &["s-0"])]);
    let client = endpoint.client();
    let poll =
        tokio::spawn(async move { client.get(&view_path(1, 120), Some(&token("c-0"))).await });
    wait_until("the poll to wait", Duration::from_secs(10), || {
        endpoint.metrics.open_long_polls.get() == 1
    })
    .await;
    endpoint.stop().await;
    let answer = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("answered at shutdown")
        .unwrap();
    answer.expect(503);
    assert_eq!(answer.error().reason, "NotLeader");
}

#[tokio::test]
async fn a_rotated_certificate_is_served_to_new_connections_and_a_broken_one_is_not() {
    let endpoint = Endpoint::with(Setup {
        mounted: false,
        ..Setup::default()
    })
    .await;
    let fallback_ca = endpoint.ca.clone();
    // A certificate appears in the directory: it replaces the fallback.
    let pki = Pki::new();
    let first = pki.leaf();
    pki.write(&endpoint.tls_dir, &first);
    let client = Client::new(endpoint.addr, &pki.ca);
    let sees = |want: CertificateDer<'static>| {
        let client = client.clone();
        async move {
            for _ in 0..500 {
                if let Ok((_, leaf)) = client.tls().await
                    && leaf == want
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("the new certificate was never served");
        }
    };
    sees(first.der.clone()).await;
    assert_eq!(
        endpoint.state.ca.borrow().as_deref(),
        Some(pki.ca.as_str()),
        "the mounted ca.crt is published"
    );
    assert_ne!(fallback_ca, pki.ca);

    // An open connection keeps its certificate; a new one gets the new one.
    let mut open = client.connect().await.unwrap();
    let second = pki.leaf();
    pki.write(&endpoint.tls_dir, &second);
    sees(second.der.clone()).await;
    open.send(Method::GET, "/v1/healthz", None, None)
        .await
        .unwrap()
        .expect(200);

    // A key that does not match its certificate: the last good pair stays.
    let third = pki.leaf();
    std::fs::write(endpoint.tls_dir.join("tls.crt"), &third.cert).unwrap();
    std::fs::write(endpoint.tls_dir.join("tls.key"), &second.key).unwrap();
    // Several poll intervals (100 ms) pass; every connection gets `second`.
    for _ in 0..10 {
        let (_, leaf) = client.tls().await.unwrap();
        assert_eq!(leaf, second.der);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    endpoint.stop().await;
}

#[tokio::test]
async fn two_replicas_without_a_certificate_share_one_self_signed_ca() {
    let mock = mock().await;
    let one = Endpoint::with(Setup {
        mounted: false,
        mock: Some(mock.clone()),
        ..Setup::default()
    })
    .await;
    let two = Endpoint::with(Setup {
        mounted: false,
        mock: Some(mock.clone()),
        ..Setup::default()
    })
    .await;
    assert_eq!(one.ca, two.ca, "one CA for both replicas");
    let secret: Secret = Api::namespaced(mock.client().await, "shardring-system")
        .get("shardring-endpoint-selfsigned")
        .await
        .unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.unwrap();
    assert_eq!(String::from_utf8(data["ca.crt"].0.clone()).unwrap(), one.ca);
    assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"));
    assert!(CertificateDer::pem_slice_iter(one.ca.as_bytes()).count() == 1);
    // A client trusting that CA reaches both.
    for endpoint in [&one, &two] {
        Client::new(endpoint.addr, &one.ca)
            .get("/v1/healthz", None)
            .await
            .expect(200);
    }
    one.stop().await;
    two.stop().await;
}
