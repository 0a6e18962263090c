//! The consumer endpoint's client side against a fake endpoint
//! (`support::endpoint`): the view source long-polls with the newest epoch
//! and offers views in epoch order, picks up a rotated token, obeys 429
//! `Retry-After` and an exhausted rate-limit window, retries `NotLeader` at
//! once on a new connection, and reports a wrong CA as a TLS error; beside
//! an annotations file it loses nothing while the endpoint is down; the
//! release sender acknowledges with the view's epoch and the checkpoint,
//! re-sends after a dropped answer and after a leader change, and drops what
//! the view no longer revokes.

use std::path::PathBuf;
use std::time::Duration;

use shardring_consumer::PodView;
use shardring_consumer::view::endpoint::{
    AckState, EndpointClient, EndpointConfig, EndpointError, EndpointHandle, EndpointSource,
    ReleaseSender,
};
use shardring_consumer::view::file::{FileFormat, FileSource, write_atomically};
use shardring_consumer::view::{self, AssignmentView, Sources, ViewPublisher};
use shardring_crds::endpoint::ReleaseRequest;

use crate::support::endpoint::{FakeEndpoint, GROUP, NAMESPACE, Scripted, Seen, identity, view};
use crate::support::wait_until;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "shardring-endpoint-{name}-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A client of `fake` with its token and CA written into `dir`.
fn client(fake: &FakeEndpoint, dir: &std::path::Path, token: &str) -> EndpointClient {
    let (token_file, ca_file) = fake.write_credentials(dir, token);
    EndpointClient::new(EndpointConfig {
        token_file,
        ca_file,
        ..EndpointConfig::new(fake.url.clone())
    })
    .unwrap()
}

fn source(client: &EndpointClient, wait: Duration, publisher: ViewPublisher) -> EndpointHandle {
    EndpointSource {
        client: client.clone(),
        namespace: NAMESPACE.into(),
        group: GROUP.into(),
        wait,
    }
    .spawn(publisher)
}

async fn wait_epoch(what: &str, assignment: &AssignmentView, epoch: u64) {
    wait_until(what, async || assignment.epoch() == epoch).await;
}

#[tokio::test]
async fn views_arrive_in_epoch_order_by_long_poll_with_their_checkpoints() {
    let dir = scratch("order");
    let fake = FakeEndpoint::start("t1", view(1, &["s1"], &[])).await;
    let client = client(&fake, &dir, "t1");
    let (publisher, mut assignment) = view::channel();
    let mut seen = assignment.clone();
    let collector = tokio::spawn(async move {
        let mut epochs = Vec::new();
        while let Ok(view) = seen.changed().await {
            epochs.push(view.epoch);
            if view.epoch == 3 {
                break;
            }
        }
        epochs
    });
    let handle = source(&client, Duration::from_secs(20), publisher);
    assert_eq!(assignment.first().await.unwrap().active, vec!["s1"]);
    // The next request long-polls from epoch 1 and is answered only by a change.
    wait_until("a long-poll from epoch 1", async || {
        fake.view_requests().iter().any(|r| r.epoch == Some(1))
    })
    .await;
    fake.publish(view(2, &["s1", "s2"], &[]), &[]);
    wait_epoch("epoch 2", &assignment, 2).await;
    fake.publish(view(3, &["s2", "s3"], &["s1"]), &[("s3", "4711")]);
    wait_epoch("epoch 3", &assignment, 3).await;
    assert!(assignment.can_acquire("s3") && assignment.is_revoking("s1"));
    wait_until("the checkpoints of epoch 3", async || {
        handle.checkpoint("s3").as_deref() == Some("4711")
    })
    .await;
    let epochs = collector.await.unwrap();
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
    assert_eq!(epochs.last(), Some(&3));
    let requests = fake.view_requests();
    let asked: Vec<u64> = requests.iter().filter_map(|r| r.epoch).collect();
    assert_eq!(
        &asked[..3],
        &[0, 1, 2],
        "each poll names the newest epoch: {asked:?}"
    );
    assert!(requests.iter().all(|r| r.wait == Some(20)));
    assert!(
        requests.len() <= 5,
        "a long-poll, not a busy loop: {} requests",
        requests.len()
    );
    assert!(
        requests.iter().all(|r| r.status == 200 || r.status == 0),
        "answered 200 (or still waiting)"
    );
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_rotated_token_is_picked_up() {
    let dir = scratch("token");
    let fake = FakeEndpoint::start("old-token", view(1, &["s1"], &[])).await;
    let client = client(&fake, &dir, "old-token");
    let (publisher, assignment) = view::channel();
    let handle = source(&client, Duration::from_secs(20), publisher);
    wait_epoch("the first view", &assignment, 1).await;
    wait_until("a long-poll in flight with the old token", async || {
        fake.view_requests().iter().any(|r| r.epoch == Some(1))
    })
    .await;
    // The kubelet rotates the projected token; the old one stops working.
    write_atomically(&dir.join("token"), b"new-token\n").unwrap();
    fake.set_token("new-token");
    fake.publish(view(2, &["s2"], &[]), &[]);
    wait_epoch("epoch 2", &assignment, 2).await;
    fake.publish(view(3, &["s3"], &[]), &[]);
    wait_epoch("epoch 3, fetched with the new token", &assignment, 3).await;
    let bearers: Vec<String> = fake
        .view_requests()
        .into_iter()
        .filter_map(|r| r.bearer)
        .collect();
    assert_eq!(bearers.first().map(String::as_str), Some("old-token"));
    assert!(bearers.iter().any(|b| b == "new-token"), "{bearers:?}");
    assert!(
        !fake.view_requests().iter().any(|r| r.status == 401),
        "the new token was read before the request that needed it"
    );
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_rate_limited_request_waits_for_retry_after() {
    let dir = scratch("429");
    let fake = FakeEndpoint::start("t", view(1, &["s1"], &[])).await;
    fake.script_view(Scripted::rate_limited(1));
    let client = client(&fake, &dir, "t");
    let (publisher, assignment) = view::channel();
    let handle = source(&client, Duration::from_secs(20), publisher);
    wait_epoch("the view after the 429", &assignment, 1).await;
    let requests = fake.view_requests();
    assert_eq!(requests[0].status, 429);
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
    assert!(handle.status.borrow().last_error.is_none());
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn an_exhausted_rate_limit_window_holds_the_next_request_until_reset() {
    let dir = scratch("remaining");
    let fake = FakeEndpoint::start("t", view(1, &["s1"], &[])).await;
    fake.script_view(Scripted::WithHeaders(vec![
        ("x-ratelimit-limit", "10".into()),
        ("x-ratelimit-remaining", "0".into()),
        ("x-ratelimit-reset", "1".into()),
    ]));
    // Epoch 2 is there before the second poll: only the window holds it.
    let client = client(&fake, &dir, "t");
    let (publisher, assignment) = view::channel();
    let handle = source(&client, Duration::from_secs(20), publisher);
    wait_epoch("the first view", &assignment, 1).await;
    fake.publish(view(2, &["s2"], &[]), &[]);
    wait_epoch("epoch 2", &assignment, 2).await;
    let requests = fake.view_requests();
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_secs(1), "next request after {gap:?}");
    assert!(
        requests.iter().all(|r| r.status == 200 || r.status == 0),
        "never a 429"
    );
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

/// The fake's first view requests, checked to have got `statuses`, and the
/// time from the first to the last of them.
#[track_caller]
fn first_requests(fake: &FakeEndpoint, statuses: &[u16]) -> (Vec<Seen>, Duration) {
    let requests = fake.view_requests();
    let seen: Vec<u16> = requests
        .iter()
        .map(|r| r.status)
        .take(statuses.len())
        .collect();
    assert_eq!(seen, statuses);
    let took = requests[statuses.len() - 1].at - requests[0].at;
    (requests, took)
}

#[tokio::test]
async fn not_leader_is_retried_at_once_on_a_new_connection() {
    let dir = scratch("notleader");
    let fake = FakeEndpoint::start("t", view(1, &["s1"], &[])).await;
    for _ in 0..3 {
        fake.script_view(Scripted::not_leader());
    }
    let client = client(&fake, &dir, "t");
    let reconnects = client.reconnects();
    let (publisher, assignment) = view::channel();
    let handle = source(&client, Duration::from_secs(20), publisher);
    wait_epoch("the view from the leader", &assignment, 1).await;
    let (requests, took) = first_requests(&fake, &[503, 503, 503, 200]);
    let connections: Vec<u64> = requests.iter().take(4).map(|r| r.connection).collect();
    assert!(
        connections.windows(2).all(|w| w[0] != w[1]),
        "each retry on a new connection: {connections:?}"
    );
    // Backoff would take at least 350 ms for three retries (50 + 100 + 200).
    assert!(
        took < Duration::from_millis(300),
        "retried at once, took {took:?}"
    );
    assert!(*reconnects.borrow() >= 3, "each NotLeader is a reconnect");
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

/// A pod that just started may not be known to the operator yet (it has
/// not seen the pod, or its IP): its 403s are retried quickly, not after
/// the seconds a refusal waits.
#[tokio::test]
async fn a_new_pods_ip_mismatch_and_not_member_are_retried_quickly() {
    let dir = scratch("newpod");
    let fake = FakeEndpoint::start("t", view(1, &["s1"], &[])).await;
    for reason in ["NotMember", "IpMismatch", "IpMismatch"] {
        fake.script_view(Scripted::Error {
            status: 403,
            reason,
            headers: Vec::new(),
            close: false,
        });
    }
    let client = client(&fake, &dir, "t");
    let (publisher, assignment) = view::channel();
    let handle = source(&client, Duration::from_secs(20), publisher);
    wait_epoch("the view once the pod is known", &assignment, 1).await;
    let (_, took) = first_requests(&fake, &[403, 403, 403, 200]);
    // Quick retries: 100 + 200 + 400 ms at most; a refusal's back-off
    // would wait at least a second before the first retry.
    assert!(
        took < Duration::from_millis(900),
        "retried quickly, took {took:?}"
    );
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_wrong_ca_is_reported_as_a_tls_error() {
    let dir = scratch("wrongca");
    let fake = FakeEndpoint::start("t", view(1, &["s1"], &[])).await;
    let (token_file, ca_file) = fake.write_credentials(&dir, "t");
    let (other_ca, _) = identity();
    write_atomically(&ca_file, other_ca.as_bytes()).unwrap();
    let client = EndpointClient::new(EndpointConfig {
        token_file,
        ca_file: ca_file.clone(),
        ..EndpointConfig::new(fake.url.clone())
    })
    .unwrap();
    let error = client
        .view(NAMESPACE, GROUP, 0, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(error, EndpointError::Tls { .. }), "{error}");
    let text = error.to_string();
    assert!(text.contains("TLS handshake"), "{text}");
    assert!(text.contains(&ca_file.display().to_string()), "{text}");
    assert!(text.contains("invalid peer certificate"), "{text}");
    assert!(
        fake.requests().is_empty(),
        "nothing sent to an untrusted server"
    );
    // The source reports it, and recovers once the right CA is mounted.
    let (publisher, assignment) = view::channel();
    let handle = source(&client, Duration::from_secs(20), publisher);
    let mut status = handle.status.clone();
    let failed = status
        .wait_for(|s| s.last_error.is_some())
        .await
        .unwrap()
        .clone();
    assert!(failed.last_error.unwrap().contains("TLS handshake"));
    write_atomically(&ca_file, fake.ca_pem.as_bytes()).unwrap();
    wait_epoch("the view once the CA is right", &assignment, 1).await;
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

fn annotation(dir: &std::path::Path, view: &PodView) {
    write_atomically(&dir.join("annotation"), view.to_annotation().as_bytes()).unwrap();
}

#[tokio::test]
async fn with_the_endpoint_down_the_annotation_file_still_delivers() {
    let dir = scratch("fallback");
    let fake = FakeEndpoint::start("t", view(5, &["s5"], &[])).await;
    fake.set_down(true);
    let client = client(&fake, &dir, "t");
    annotation(&dir, &view(3, &["s3"], &[]));
    let (publisher, assignment) = view::channel();
    let mut sources = Sources::new(publisher);
    sources.start(|publisher| {
        FileSource {
            path: dir.join("annotation"),
            pod: "pod-a".into(),
            format: FileFormat::Annotations {
                shard_group: format!("{NAMESPACE}/{GROUP}"),
            },
            interval: Duration::from_millis(20),
        }
        .spawn(publisher)
    });
    let endpoint = source(
        &client,
        Duration::from_secs(20),
        sources.publisher().clone(),
    );
    let status = endpoint.status.clone();
    sources.add(endpoint.task);
    assert_eq!(sources.len(), 2);
    wait_epoch("the file's view while the endpoint is down", &assignment, 3).await;
    assert!(assignment.can_acquire("s3"));
    wait_until("the endpoint failure to be reported", async || {
        status.borrow().last_error.is_some()
    })
    .await;
    annotation(&dir, &view(4, &["s4"], &[]));
    wait_epoch("a newer file view", &assignment, 4).await;
    // The endpoint comes back ahead of the kubelet: its view wins, and the
    // file's older epoch, or its annotation vanishing, changes nothing.
    fake.set_down(false);
    wait_epoch("the endpoint's newer view", &assignment, 5).await;
    assert!(assignment.can_acquire("s5"));
    std::fs::write(dir.join("annotation"), "").unwrap();
    fake.publish(view(6, &["s6"], &[]), &[]);
    wait_epoch("epoch 6", &assignment, 6).await;
    // An absence cannot be waited for: give the file poller ten rounds to
    // (wrongly) withdraw the endpoint's newer view.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(assignment.can_acquire("s6"), "{:?}", assignment.current());
    drop(sources);
    std::fs::remove_dir_all(dir).unwrap();
}

fn request(shard: &str, epoch: u64, checkpoint: Option<&str>) -> ReleaseRequest {
    ReleaseRequest {
        shard: shard.into(),
        epoch,
        checkpoint: checkpoint.map(str::to_owned),
    }
}

fn state_of(sender: &ReleaseSender, shard: &str) -> Option<AckState> {
    sender
        .outbox()
        .into_iter()
        .find(|entry| entry.request.shard == shard)
        .map(|entry| entry.state)
}

#[tokio::test]
async fn releases_are_acknowledged_with_the_epoch_and_checkpoint() {
    let dir = scratch("ack");
    let fake = FakeEndpoint::start("t", view(4, &["s2"], &["s1"])).await;
    let client = client(&fake, &dir, "t");
    let (publisher, assignment) = view::channel();
    publisher.offer(view(4, &["s2"], &["s1", "s9"]));
    let sender = ReleaseSender::spawn(client, NAMESPACE, GROUP, assignment);
    sender.release(
        "s1",
        4,
        Some("49590338271490256608559692538361571095921575989136588898".into()),
    );
    sender.release("s9", 4, None);
    assert!(sender.flush(Duration::from_secs(20)).await, "{sender:?}");
    let expected = request(
        "s1",
        4,
        Some("49590338271490256608559692538361571095921575989136588898"),
    );
    assert!(
        fake.release_requests()
            .iter()
            .any(|r| r.release.as_ref() == Some(&expected)),
        "{:?}",
        fake.release_requests()
    );
    assert!(matches!(
        state_of(&sender, "s1"),
        Some(AckState::Acked { .. })
    ));
    // The fake does not revoke s9 from this pod: 409 NotRevoking settles it.
    assert!(matches!(
        state_of(&sender, "s9"),
        Some(AckState::Refused { .. })
    ));
    // The view moves on: the outbox forgets both.
    publisher.offer(view(5, &["s2"], &[]));
    wait_until("an empty outbox", async || sender.outbox().is_empty()).await;
    assert_eq!(
        fake.release_requests()
            .iter()
            .filter(|r| r.release.as_ref().is_some_and(|q| q.shard == "s1"))
            .count(),
        1,
        "acknowledged once"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_release_whose_answer_was_lost_is_sent_again() {
    let dir = scratch("dropped");
    let fake = FakeEndpoint::start("t", view(4, &[], &["s1"])).await;
    fake.script_release(Scripted::Drop);
    let client = client(&fake, &dir, "t");
    let (publisher, assignment) = view::channel();
    publisher.offer(view(4, &[], &["s1"]));
    let sender = ReleaseSender::spawn(client, NAMESPACE, GROUP, assignment);
    sender.release("s1", 4, Some("17".into()));
    assert!(sender.flush(Duration::from_secs(20)).await, "{sender:?}");
    let statuses: Vec<u16> = fake.release_requests().iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        vec![0, 200],
        "recorded, answer lost, sent again: a duplicate"
    );
    assert!(
        fake.release_requests()
            .iter()
            .all(|r| r.release == Some(request("s1", 4, Some("17"))))
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn acknowledged_releases_are_sent_again_after_a_leader_change() {
    let dir = scratch("leader");
    let fake = FakeEndpoint::start("t", view(4, &["s2"], &["s1"])).await;
    let client = client(&fake, &dir, "t");
    let (publisher, assignment) = view::channel();
    let handle = source(&client, Duration::from_secs(20), publisher.clone());
    wait_epoch("the view", &assignment, 4).await;
    let sender = ReleaseSender::spawn(client, NAMESPACE, GROUP, assignment.clone());
    sender.release("s1", 4, Some("17".into()));
    assert!(sender.flush(Duration::from_secs(20)).await);
    assert_eq!(fake.release_requests().len(), 1);
    // A new leader: the long-poll is told NotLeader; the new leader has not
    // seen the release, so it goes out again (a duplicate on this fake).
    fake.script_view(Scripted::not_leader());
    fake.publish(view(5, &["s2"], &["s1"]), &[]);
    wait_until("the release sent again", async || {
        fake.release_requests().len() >= 2
    })
    .await;
    let again = &fake.release_requests()[1];
    assert_eq!(again.status, 200);
    assert_eq!(again.release, Some(request("s1", 4, Some("17"))));
    // Once the view stops revoking s1 the outbox drops it.
    fake.publish(view(6, &["s2"], &[]), &[]);
    wait_until("an empty outbox", async || sender.outbox().is_empty()).await;
    handle.task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_failing_release_is_dropped_once_the_view_no_longer_revokes_it() {
    let dir = scratch("drop");
    let fake = FakeEndpoint::start("t", view(4, &[], &["s1"])).await;
    for _ in 0..100 {
        fake.script_release(Scripted::Error {
            status: 500,
            reason: "InternalError",
            headers: Vec::new(),
            close: false,
        });
    }
    let client = client(&fake, &dir, "t");
    let (publisher, assignment) = view::channel();
    publisher.offer(view(4, &[], &["s1"]));
    let sender = ReleaseSender::spawn(client, NAMESPACE, GROUP, assignment);
    sender.release("s1", 4, None);
    wait_until("retries with backoff", async || {
        fake.release_requests().len() >= 3
    })
    .await;
    assert_eq!(state_of(&sender, "s1"), Some(AckState::Pending));
    assert!(!sender.flush(Duration::from_millis(50)).await);
    publisher.offer(view(5, &[], &[]));
    assert!(sender.flush(Duration::from_secs(20)).await);
    assert!(sender.outbox().is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}
