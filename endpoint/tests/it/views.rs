//! The view route: an authenticated pod gets its own view at once or by
//! long-poll, a change wakes only the polls of the pod whose view changed,
//! a poll ends with the current view when its wait is over, and a pod that
//! leaves the group (or a group that goes) ends its polls with 403 (404).

use std::time::{Duration, Instant};

use futures::FutureExt as _;
use http::Method;
use shardring_crds::endpoint::{HEADER_LIMIT, HEADER_REMAINING, HEADER_RESET, ViewResponse};

use super::support::{Endpoint, group, token, view_path, wait_until};

#[tokio::test]
async fn a_valid_token_gets_its_own_view_and_the_next_request_uses_the_cache() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 3, &["s-0", "s-1"]), ("c-1", 3, &["s-2"])]);
    let client = endpoint.client();
    // One token for both requests: a test token's expiry is now + 1 h, so
    // tokens made in two different seconds are two tokens to the cache.
    let token = token("c-0");

    let answer = client.get(&view_path(0, 0), Some(&token)).await;
    answer.expect(200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let view: ViewResponse = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(view.pod, "c-0");
    assert_eq!(view.shard_group, "team/orders");
    assert_eq!(view.view.epoch, 3);
    assert_eq!(view.view.active, ["s-0", "s-1"]);
    // The pod limit's headers, once the caller is known (120 per window).
    assert_eq!(answer.header(HEADER_LIMIT), Some("120"));
    assert_eq!(answer.header(HEADER_REMAINING), Some("119"));
    let reset: u64 = answer.header(HEADER_RESET).unwrap().parse().unwrap();
    assert!((1..=10).contains(&reset), "{reset}");
    assert_eq!(endpoint.mock.token_review_count(), 1);

    // An older epoch than the view's: answered at once, from the cache.
    let started = Instant::now();
    let again = client.get(&view_path(2, 30), Some(&token)).await;
    again.expect(200);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(again.header(HEADER_REMAINING), Some("118"));
    assert_eq!(endpoint.mock.token_review_count(), 1, "the cache answered");
    assert_eq!(endpoint.metrics.token_cache_hits.get(), 1);
    endpoint.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_wakes_only_the_long_poll_of_the_pod_whose_view_changed() {
    const PODS: usize = 50;
    let endpoint = Endpoint::start().await;
    let names: Vec<String> = (0..PODS).map(|i| format!("c-{i}")).collect();
    let shard: Vec<String> = (0..PODS).map(|i| format!("s-{i}")).collect();
    let pods = |changed: Option<usize>| -> Vec<(&str, u64, Vec<&str>)> {
        (0..PODS)
            .map(|i| {
                let epoch = if changed == Some(i) { 5 } else { 4 };
                (names[i].as_str(), epoch, vec![shard[i].as_str()])
            })
            .collect()
    };
    let sync = |changed: Option<usize>| {
        let owned = pods(changed);
        let borrowed: Vec<(&str, u64, &[&str])> = owned
            .iter()
            .map(|(n, e, a)| (*n, *e, a.as_slice()))
            .collect();
        endpoint.sync(&borrowed)
    };
    sync(None);
    let client = endpoint.client();
    let mut polls = Vec::new();
    for name in &names {
        let mut conn = client.connect().await.unwrap();
        let token = token(name);
        polls.push(tokio::spawn(async move {
            conn.send(Method::GET, &view_path(4, 120), Some(&token), None)
                .await
                .unwrap()
        }));
    }
    wait_until("every poll to wait", Duration::from_secs(30), || {
        endpoint.metrics.open_long_polls.get() == i64::try_from(PODS).unwrap()
    })
    .await;

    assert_eq!(sync(Some(7)), 1, "one view changed");
    let (answer, index, rest) =
        tokio::time::timeout(Duration::from_secs(10), futures::future::select_all(polls))
            .await
            .expect("the changed pod's poll answers");
    assert_eq!(index, 7, "the poll of c-7 answered");
    let answer = answer.unwrap();
    answer.expect(200);
    let view: ViewResponse = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!((view.pod.as_str(), view.view.epoch), ("c-7", 5));

    // A request made after the change is answered, and still no other poll
    // has: the change reached no one else.
    client.get("/v1/healthz", None).await.expect(200);
    assert_eq!(endpoint.metrics.open_long_polls.get(), 49);
    for poll in rest {
        assert!(poll.now_or_never().is_none(), "another poll answered");
    }
    endpoint.stop().await;
}

#[tokio::test]
async fn a_long_poll_without_change_ends_with_the_current_view() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 6, &["s-0"])]);
    let started = Instant::now();
    let answer = endpoint
        .client()
        .get(&view_path(6, 1), Some(&token("c-0")))
        .await;
    answer.expect(200);
    assert!(started.elapsed() >= Duration::from_secs(1));
    let view: ViewResponse = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(
        view.view.epoch, 6,
        "the same view: the client compares epochs"
    );
    assert_eq!(endpoint.metrics.open_long_polls.get(), 0);
    endpoint.stop().await;
}

#[tokio::test]
async fn a_pod_leaving_ends_its_poll_with_403_and_a_group_going_with_404() {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 2, &["s-0"]), ("c-1", 2, &["s-1"])]);
    let client = endpoint.client();
    let poll = |pod: &'static str| {
        let client = client.clone();
        tokio::spawn(async move { client.get(&view_path(2, 60), Some(&token(pod))).await })
    };
    let leaving = poll("c-1");
    wait_until("the poll to wait", Duration::from_secs(10), || {
        endpoint.metrics.open_long_polls.get() == 1
    })
    .await;
    endpoint.sync(&[("c-0", 2, &["s-0"])]);
    let answer = leaving.await.unwrap();
    answer.expect(403);
    assert_eq!(answer.error().reason, "NotMember");

    let staying = poll("c-0");
    wait_until("the poll to wait", Duration::from_secs(10), || {
        endpoint.metrics.open_long_polls.get() == 1
    })
    .await;
    endpoint.state.directory.remove_group(&group());
    let answer = staying.await.unwrap();
    answer.expect(404);
    assert_eq!(answer.error().reason, "UnknownShardGroup");
    endpoint.stop().await;
}
