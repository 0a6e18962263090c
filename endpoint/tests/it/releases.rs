//! The releases route: an acknowledgement of a shard the pod's view lists
//! as revoking is recorded (202) and asks the controller for a reconcile,
//! the same again is a duplicate (200); one for a shard the pod does not
//! release or at an old epoch is refused (409); a malformed body is 400 and
//! an oversized one 413.

use futures::{FutureExt, StreamExt};
use http::Method;
use shardring_crds::endpoint::{ReleaseOutcome, ReleaseResponse};
use shardring_endpoint::Requested;

use super::support::{Endpoint, group, releases_path, token};

#[tokio::test]
async fn a_release_is_accepted_once_then_a_duplicate_and_the_controller_is_asked() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 4, &[]), ("c-1", 4, &["s-1"])]);
    endpoint.revoke("s-0", "c-0", 4, 4);
    let mut requests = Box::pin(endpoint.state.requests.listen());
    let client = endpoint.client();
    let body = br#"{"shard":"s-0","epoch":4,"checkpoint":"49590338271490256608559692538361571095921575989136588898"}"#;

    let answer = client
        .send(
            Method::POST,
            &releases_path(),
            Some(&token("c-0")),
            Some(body),
        )
        .await;
    answer.expect(202);
    let response: ReleaseResponse = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(response.outcome, ReleaseOutcome::Accepted);
    assert_eq!(response.shard, "s-0");
    assert_eq!(
        requests.next().now_or_never().flatten(),
        Some(Requested::Group(group())),
        "reconcile asked"
    );
    let acks = endpoint.state.releases.observe(&group());
    assert_eq!(acks.acks["s-0"].pod, "c-0");
    assert_eq!(acks.acks["s-0"].uid, "uid-c-0");

    let again = client
        .send(
            Method::POST,
            &releases_path(),
            Some(&token("c-0")),
            Some(body),
        )
        .await;
    again.expect(200);
    let response: ReleaseResponse = serde_json::from_slice(&again.body).unwrap();
    assert_eq!(response.outcome, ReleaseOutcome::Duplicate);
    endpoint.stop().await;
}

#[tokio::test]
async fn releases_of_shards_not_revoking_or_at_an_old_epoch_are_refused() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 9, &[]), ("c-1", 9, &["s-1"])]);
    endpoint.revoke("s-0", "c-0", 7, 9);
    let client = endpoint.client();
    let post = |pod: &'static str, body: &'static str| {
        let client = client.clone();
        async move {
            client
                .send(
                    Method::POST,
                    &releases_path(),
                    Some(&token(pod)),
                    Some(body.as_bytes()),
                )
                .await
        }
    };

    let not_held = post("c-1", r#"{"shard":"s-0","epoch":9}"#).await;
    not_held.expect(409);
    assert_eq!(not_held.error().reason, "NotRevoking");
    assert_eq!(not_held.error().code, 409);

    let stale = post("c-0", r#"{"shard":"s-0","epoch":6}"#).await;
    stale.expect(409);
    assert_eq!(stale.error().reason, "StaleEpoch");
    assert!(stale.error().message.contains("epoch 7"));

    let future = post("c-0", r#"{"shard":"s-0","epoch":10}"#).await;
    future.expect(409);
    assert_eq!(future.error().reason, "FutureEpoch");
    assert!(endpoint.state.releases.observe(&group()).acks.is_empty());
    endpoint.stop().await;
}

#[tokio::test]
async fn malformed_unknown_fields_wrong_methods_and_oversized_bodies_are_refused() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 1, &[])]);
    endpoint.revoke("s-0", "c-0", 1, 1);
    let client = endpoint.client();
    let post = |body: Vec<u8>| {
        let client = client.clone();
        async move {
            client
                .send(
                    Method::POST,
                    &releases_path(),
                    Some(&token("c-0")),
                    Some(&body),
                )
                .await
        }
    };

    let malformed = post(b"{\"shard\":".to_vec()).await;
    malformed.expect(400);
    assert!(
        malformed.error().message.contains("EOF"),
        "{:?}",
        malformed.error()
    );

    let unknown = post(br#"{"shard":"s-0","epoch":1,"chekpoint":"x"}"#.to_vec()).await;
    unknown.expect(400);
    assert!(unknown.error().message.contains("chekpoint"));

    let mut big = br#"{"shard":"s-0","epoch":1,"checkpoint":""#.to_vec();
    big.extend(std::iter::repeat_n(b'9', 20 * 1024));
    big.extend(br#""}"#);
    let oversized = post(big).await;
    oversized.expect(413);
    assert_eq!(oversized.error().reason, "PayloadTooLarge");

    let get = client
        .send(Method::GET, &releases_path(), Some(&token("c-0")), None)
        .await;
    get.expect(405);
    assert_eq!(get.header("allow"), Some("POST"));

    assert!(endpoint.state.releases.observe(&group()).acks.is_empty());
    post(br#"{"shard":"s-0","epoch":1}"#.to_vec())
        .await
        .expect(202);
    endpoint.stop().await;
}
