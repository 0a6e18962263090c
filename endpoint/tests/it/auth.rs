//! Authentication and identity: the TokenReview decides whether a token is
//! valid for the endpoint's audience and which pod it is bound to; the
//! directory decides whether that pod, at that address, may see the group.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::support::{Claims, Endpoint, Setup, claims, now_secs, token, view_path, wait_until};

const REALM: &str = r#"Bearer realm="shardring""#;
const INVALID: &str = r#"Bearer realm="shardring", error="invalid_token""#;

#[tokio::test]
async fn tokens_that_are_missing_expired_for_another_audience_or_unbound_get_401() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 1, &["s-0"])]);
    let client = endpoint.client();
    let path = view_path(0, 0);

    let missing = client.get(&path, None).await;
    missing.expect(401);
    assert_eq!(missing.header("www-authenticate"), Some(REALM));
    assert_eq!(missing.error().reason, "Unauthorized");
    assert_eq!(
        endpoint.mock.token_review_count(),
        0,
        "nothing to review without a token"
    );
    // Before authentication, the IP limit's headers (600 per window).
    assert_eq!(missing.header("x-ratelimit-limit"), Some("600"));

    let expired = Claims {
        exp: now_secs() - 10,
        ..claims("c-0")
    };
    let answer = client.get(&path, Some(&expired.token())).await;
    answer.expect(401);
    assert_eq!(answer.header("www-authenticate"), Some(INVALID));
    assert!(
        answer.error().message.contains("expired"),
        "{:?}",
        answer.error()
    );

    let elsewhere = Claims {
        audiences: vec!["https://kubernetes.default.svc".into()],
        ..claims("c-0")
    };
    let answer = client.get(&path, Some(&elsewhere.token())).await;
    answer.expect(401);
    assert_eq!(answer.header("www-authenticate"), Some(INVALID));
    assert!(answer.error().message.contains("shardring.io"));

    let unbound = Claims {
        bound: false,
        ..claims("c-0")
    };
    let answer = client.get(&path, Some(&unbound.token())).await;
    answer.expect(401);
    assert_eq!(answer.header("www-authenticate"), Some(INVALID));
    assert!(
        answer
            .error()
            .message
            .contains("projected service-account token"),
        "{:?}",
        answer.error()
    );

    assert_eq!(
        endpoint.mock.token_review_count(),
        3,
        "each invalid token reviewed once, none cached"
    );
    // Refused tokens are not cached: the same one is reviewed again.
    client.get(&path, Some(&unbound.token())).await.expect(401);
    assert_eq!(endpoint.mock.token_review_count(), 4);
    endpoint.stop().await;
}

#[tokio::test]
async fn a_deleted_pod_another_namespace_a_stranger_and_another_address_get_403() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 1, &["s-0"])]);
    let client = endpoint.client();
    let path = view_path(0, 0);

    // The token of c-0's previous incarnation.
    let old = Claims {
        uid: "uid-of-the-deleted-pod".into(),
        ..claims("c-0")
    };
    let answer = client.get(&path, Some(&old.token())).await;
    answer.expect(403);
    assert_eq!(answer.error().reason, "UidMismatch");

    let other_ns = Claims {
        namespace: "elsewhere".into(),
        ..claims("c-0")
    };
    let answer = client.get(&path, Some(&other_ns.token())).await;
    answer.expect(403);
    assert!(answer.error().message.contains("elsewhere"));

    let answer = client.get(&path, Some(&token("stranger"))).await;
    answer.expect(403);
    assert_eq!(answer.error().reason, "NotMember");

    // The pod's IP is not the caller's (127.0.0.1).
    endpoint.sync_at(
        &[("c-0", 1, &["s-0"])],
        Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))),
    );
    let answer = client.get(&path, Some(&token("c-0"))).await;
    answer.expect(403);
    let error = answer.error();
    assert_eq!(error.reason, "IpMismatch");
    assert!(
        error.message.contains("--endpoint-no-peer-ip-check") && error.message.contains("10.1.2.3"),
        "{error:?}"
    );

    let unknown = client
        .get(
            &shardring_crds::endpoint::view_path("team", "nope"),
            Some(&token("c-0")),
        )
        .await;
    unknown.expect(404);
    assert_eq!(unknown.error().reason, "UnknownShardGroup");
    endpoint.stop().await;
}

#[tokio::test]
async fn without_the_peer_ip_check_another_address_is_served() {
    let endpoint = Endpoint::with(Setup {
        config: Box::new(|c| c.peer_ip_check = false),
        ..Setup::default()
    })
    .await;
    endpoint.sync_at(
        &[("c-0", 1, &["s-0"])],
        Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))),
    );
    endpoint
        .client()
        .get(&view_path(0, 0), Some(&token("c-0")))
        .await
        .expect(200);
    endpoint.stop().await;
}

#[tokio::test]
async fn a_cached_token_is_reviewed_again_once_it_expires() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 1, &["s-0"])]);
    let client = endpoint.client();
    let exp = now_secs() + 2;
    let short = Claims {
        exp,
        ..claims("c-0")
    }
    .token();
    client.get(&view_path(0, 0), Some(&short)).await.expect(200);
    client.get(&view_path(0, 0), Some(&short)).await.expect(200);
    assert_eq!(endpoint.mock.token_review_count(), 1);
    wait_until("the token to expire", Duration::from_secs(10), || {
        now_secs() > exp
    })
    .await;
    // The cache (60 s) ends with the token: the API server is asked again,
    // and refuses it.
    client.get(&view_path(0, 0), Some(&short)).await.expect(401);
    assert_eq!(endpoint.mock.token_review_count(), 2);
    endpoint.stop().await;
}
