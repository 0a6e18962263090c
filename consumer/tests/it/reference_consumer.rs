//! The reference consumer binary as real processes: two of them read one
//! mounted-ConfigMap-style document file (each picks its own entry), the
//! test moves shards between them two-phase by rewriting the file, sends
//! SIGTERM, and the checker proves the shared record log: no overlap, no
//! loss, order held.

use std::time::{Duration, Instant};

use crate::support::{self, Consumers};

const STREAM: &str = "orders";
const TABLE: &str = "leases";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_hand_shards_over_through_the_document_file() {
    let setup = support::setup(STREAM, TABLE, 2, "reference").await;
    let support::Setup {
        kinesis_url,
        dynamo_url,
        kinesis,
        shards,
        observer,
        dir,
        ..
    } = setup;
    let (s0, s1) = (shards[0].as_str(), shards[1].as_str());
    let (k0, k1) = ("1".to_owned(), (u128::MAX / 2 + 10).to_string());
    let view = dir.join("assignment.json");
    let log = dir.join("records.jsonl");
    let consumers = Consumers {
        kinesis_url: &kinesis_url,
        dynamo_url: &dynamo_url,
        stream: STREAM,
        table: TABLE,
        view: &view,
        log: &log,
    };
    support::publish(
        &view,
        "default/orders",
        1,
        &[("pod-a", &[s0, s1], &[]), ("pod-b", &[], &[])],
    );
    let mut a = consumers.reference("pod-a");
    let mut b = consumers.reference("pod-b");

    let mut produced = Vec::new();
    support::produce(&kinesis, STREAM, &k0, "a", 8, &mut produced).await;
    support::produce(&kinesis, STREAM, &k1, "b", 8, &mut produced).await;
    support::wait_all_read("pod-a to read everything", &log, &produced).await;

    // Move s1 to pod-b: revoke, wait for the release, then activate.
    support::publish(
        &view,
        "default/orders",
        2,
        &[("pod-a", &[s0], &[s1]), ("pod-b", &[], &[])],
    );
    support::wait_released("pod-a to release s1", &observer, s1).await;
    support::produce(&kinesis, STREAM, &k1, "c", 8, &mut produced).await;
    support::publish(
        &view,
        "default/orders",
        3,
        &[("pod-a", &[s0], &[]), ("pod-b", &[s1], &[])],
    );
    support::produce(&kinesis, STREAM, &k1, "d", 8, &mut produced).await;
    support::wait_all_read("pod-b to read s1", &log, &produced).await;

    // Graceful termination of pod-a: it reads on until s0 is revoked.
    a.terminate();
    support::produce(&kinesis, STREAM, &k0, "e", 8, &mut produced).await;
    support::wait_all_read("pod-a to read on after SIGTERM", &log, &produced).await;
    assert!(
        a.0.try_wait().unwrap().is_none(),
        "pod-a exited before its revoke"
    );
    support::publish(
        &view,
        "default/orders",
        4,
        &[("pod-a", &[], &[s0]), ("pod-b", &[s1], &[])],
    );
    assert!(a.wait_exit(Duration::from_secs(15)).success());
    assert_eq!(observer.fetch(s0).await.unwrap().unwrap().owner, None);
    support::publish(&view, "default/orders", 5, &[("pod-b", &[s0, s1], &[])]);
    support::produce(&kinesis, STREAM, &k0, "f", 8, &mut produced).await;
    support::wait_all_read("pod-b to take s0 over", &log, &produced).await;

    b.terminate();
    support::publish(&view, "default/orders", 6, &[("pod-b", &[], &[s0, s1])]);
    assert!(b.wait_exit(Duration::from_secs(15)).success());

    let verdict = support::report(&log, &produced);
    println!("{}", verdict.summary());
    assert!(verdict.passed(), "{}", verdict.summary());
    assert_eq!(verdict.moves, 2, "{}", verdict.summary());
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_next_owner_waits_for_expiry_and_resumes_from_the_checkpoint() {
    let setup = support::setup(STREAM, TABLE, 1, "reference-kill").await;
    let support::Setup {
        kinesis_url,
        dynamo_url,
        kinesis,
        mut shards,
        observer,
        dir,
        ..
    } = setup;
    let s0 = shards.remove(0);
    let (view, log) = (dir.join("assignment.json"), dir.join("records.jsonl"));
    let consumers = Consumers {
        kinesis_url: &kinesis_url,
        dynamo_url: &dynamo_url,
        stream: STREAM,
        table: TABLE,
        view: &view,
        log: &log,
    };
    support::publish(&view, "default/orders", 1, &[("pod-a", &[&s0], &[])]);
    let mut a = consumers.reference("pod-a");
    let mut produced = Vec::new();
    support::produce(&kinesis, STREAM, "1", "a", 8, &mut produced).await;
    support::wait_all_read("pod-a to read", &log, &produced).await;

    // kill -9: no release. The operator would wait for the lease to expire;
    // here the shard is published on pod-b at once, and pod-b must still
    // wait out the failover time before taking the lease.
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let killed_at = Instant::now();
    assert_eq!(
        observer.fetch(&s0).await.unwrap().unwrap().owner.as_deref(),
        Some("pod-a")
    );
    support::produce(&kinesis, STREAM, "1", "b", 8, &mut produced).await;
    support::publish(&view, "default/orders", 2, &[("pod-b", &[&s0], &[])]);
    let _b = consumers.reference("pod-b");
    support::wait_until("pod-b to take over", async || {
        observer
            .fetch(&s0)
            .await
            .unwrap()
            .is_some_and(|l| l.owner.as_deref() == Some("pod-b"))
    })
    .await;
    let waited = killed_at.elapsed();
    assert!(
        waited >= Duration::from_secs(3),
        "took over after {waited:?}"
    );
    support::wait_all_read("pod-b to catch up", &log, &produced).await;
    let verdict = support::report(&log, &produced);
    println!(
        "kill -9: lease taken over after {waited:?}; {}",
        verdict.summary()
    );
    assert!(verdict.passed(), "{}", verdict.summary());
    assert_eq!(verdict.moves, 1);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The reference consumer with `--endpoint-url` beside its document file:
/// the endpoint's newer view (the file still lags at epoch 1) revokes the
/// shard, and the consumer stops, checkpoints, releases the lease and
/// acknowledges the release with that view's epoch and its last checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledges_a_release_to_the_endpoint_with_its_last_checkpoint() {
    use crate::support::endpoint::{FakeEndpoint, view as pod_view};

    let setup = support::setup(STREAM, TABLE, 1, "reference-endpoint").await;
    let support::Setup {
        kinesis_url,
        dynamo_url,
        kinesis,
        shards,
        observer,
        dir,
        ..
    } = setup;
    let s0 = shards[0].as_str();
    let (view, log) = (dir.join("assignment.json"), dir.join("records.jsonl"));
    let consumers = Consumers {
        kinesis_url: &kinesis_url,
        dynamo_url: &dynamo_url,
        stream: STREAM,
        table: TABLE,
        view: &view,
        log: &log,
    };
    let fake = FakeEndpoint::start("token-a", pod_view(1, &[s0], &[])).await;
    let (token, ca) = fake.write_credentials(&dir, "token-a");
    support::publish(&view, "prod/orders", 1, &[("pod-a", &[s0], &[])]);
    let stderr = std::fs::File::create(dir.join("pod-a.stderr")).unwrap();
    let _consumer = support::Process(
        std::process::Command::new(env!("CARGO_BIN_EXE_shardring-reference-consumer"))
            .args(consumers.args("pod-a"))
            .args(["--shard-group", "prod/orders", "--endpoint-url", &fake.url])
            .arg("--endpoint-token-file")
            .arg(&token)
            .arg("--endpoint-ca-file")
            .arg(&ca)
            .args(["--endpoint-wait", "5", "--poll-ms", "50", "--idle-ms", "50"])
            .args(["--failover-ms", "3000"])
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start the reference consumer"),
    );
    let mut produced = Vec::new();
    support::produce(&kinesis, STREAM, "1", "a", 5, &mut produced).await;
    support::wait_all_read("pod-a to read s0", &log, &produced).await;

    fake.publish(pod_view(2, &[], &[s0]), &[]);
    support::wait_until("the release acknowledged at epoch 2", async || {
        fake.release_requests()
            .iter()
            .any(|r| r.status == 202 && r.release.as_ref().is_some_and(|q| q.epoch == 2))
    })
    .await;
    let release = fake.release_requests()[0].release.clone().unwrap();
    assert_eq!(release.shard, s0);
    assert_eq!(
        release.checkpoint.as_deref(),
        Some(produced.last().unwrap().sequence_number.as_str()),
        "the last checkpoint written"
    );
    assert_eq!(
        observer.fetch(s0).await.unwrap().unwrap().owner,
        None,
        "the lease was released before the acknowledgement"
    );
    assert!(
        fake.view_requests()
            .iter()
            .all(|r| r.bearer.as_deref() == Some("token-a"))
    );
    std::fs::remove_dir_all(dir).unwrap();
}
