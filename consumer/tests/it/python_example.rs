//! The Python example of docs/consumer.md (`docs/examples/consumer.py`)
//! against kinesis-local and dynalite, sharing one lease table with the Rust
//! reference consumer: shards move between the two languages two-phase, the
//! Python pod drains on SIGTERM, and the checker proves the shared record
//! log. Runs its `--self-test` always; the AWS part needs a Python with
//! boto3 (`SHARDRING_PYTHON`, default `python3`) and says clearly when it
//! skips. Its endpoint mode (standard library only) runs against the fake
//! consumer endpoint: a 429, a NotLeader, a view, an acknowledged release,
//! a rotated token. The RabbitMQ example (`rabbitmq_consumer.py`, pika)
//! runs against a real broker and the fake endpoint (skipped, saying so,
//! without pika or rabbitmq-server).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::endpoint::{FakeEndpoint, GROUP, NAMESPACE, Scripted, view};
use crate::support::{self, Consumers, Process};

const STREAM: &str = "payments";
const TABLE: &str = "leases";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/consumer.py")
}

fn python() -> String {
    std::env::var("SHARDRING_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Whether [`python`] can import `module`; says SKIPPED with how to get it
/// when it cannot.
fn python_has(module: &str, install: &str) -> bool {
    let has = Command::new(python())
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        eprintln!(
            "SKIPPED: {} has no {module} ({install}, or set SHARDRING_PYTHON)",
            python()
        );
    }
    has
}

#[test]
fn self_test_of_the_contract_logic() {
    let Ok(output) = Command::new(python())
        .arg(example())
        .arg("--self-test")
        .output()
    else {
        eprintln!("SKIPPED: no Python interpreter ({})", python());
        return;
    };
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("self-test passed"));
}

#[test]
fn the_examples_compile() {
    // `python3 -m py_compile`, writing the bytecode to a scratch file
    // instead of a __pycache__ next to the example.
    let cfile = std::env::temp_dir().join(format!("shardring-consumer-{}.pyc", std::process::id()));
    for example in [example(), example().with_file_name("rabbitmq_consumer.py")] {
        let Ok(output) = Command::new(python())
            .args([
                "-c",
                "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
            ])
            .arg(&example)
            .arg(&cfile)
            .output()
        else {
            eprintln!("SKIPPED: no Python interpreter ({})", python());
            return;
        };
        assert!(
            output.status.success(),
            "{}: {}",
            example.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::remove_file(&cfile).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_mode_acknowledges_releases_and_obeys_the_server() {
    if Command::new(python()).arg("--version").output().is_err() {
        eprintln!("SKIPPED: no Python interpreter ({})", python());
        return;
    }
    let dir = std::env::temp_dir().join(format!(
        "shardring-python-endpoint-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = FakeEndpoint::start("py-1", view(3, &["s1"], &["s2"])).await;
    fake.script_view(Scripted::rate_limited(1));
    fake.script_view(Scripted::not_leader());
    let (token, ca) = fake.write_credentials(&dir, "py-1");
    let _py = Process(
        Command::new(python())
            .arg(example())
            .args(["--shard-group", &format!("{NAMESPACE}/{GROUP}")])
            .args(["--endpoint-url", &fake.url, "--endpoint-wait", "5"])
            .arg("--endpoint-token-file")
            .arg(&token)
            .arg("--endpoint-ca-file")
            .arg(&ca)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("py.stdout")).unwrap())
            .stderr(std::fs::File::create(dir.join("py.stderr")).unwrap())
            .spawn()
            .expect("start the Python example"),
    );
    let released = |shard: &'static str, epoch: u64| {
        let fake = &fake;
        async move || {
            fake.release_requests().iter().any(|r| {
                r.status == 202
                    && r.release
                        .as_ref()
                        .is_some_and(|q| q.shard == shard && q.epoch == epoch)
            })
        }
    };
    support::wait_until("Python to acknowledge s2 at epoch 3", released("s2", 3)).await;
    let views = fake.view_requests();
    assert_eq!(views[0].status, 429);
    assert!(
        views[1].at - views[0].at >= Duration::from_secs(1),
        "Retry-After obeyed"
    );
    assert_eq!(views[1].status, 503);
    assert_ne!(
        views[1].connection, views[2].connection,
        "NotLeader: a new connection"
    );
    assert!(
        views[2].at - views[1].at < Duration::from_secs(1),
        "NotLeader: retried at once"
    );
    // The kubelet rotates the token; the next revoke is acknowledged with it.
    shardring_consumer::view::file::write_atomically(&token, b"py-2").unwrap();
    fake.set_token("py-2");
    fake.publish(view(4, &[], &["s1"]), &[]);
    support::wait_until("Python to acknowledge s1 at epoch 4", released("s1", 4)).await;
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.bearer.as_deref() == Some("py-2"))
    );
    let stdout = std::fs::read_to_string(dir.join("py.stdout")).unwrap();
    assert!(stdout.contains("view epoch 3"), "{stdout}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_consumers_share_leases_and_hand_over() {
    if !python_has("boto3", "pip install boto3") {
        return;
    }
    let setup = support::setup(STREAM, TABLE, 2, "python").await;
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
    let (view, log) = (dir.join("assignment.json"), dir.join("records.jsonl"));
    let consumers = Consumers {
        kinesis_url: &kinesis_url,
        dynamo_url: &dynamo_url,
        stream: STREAM,
        table: TABLE,
        view: &view,
        log: &log,
    };
    support::publish(&view, "default/payments", 1, &[("py", &[s0, s1], &[])]);

    let mut py = Process(
        Command::new(python())
            .arg(example())
            .args(consumers.args("py"))
            .args([
                "--failover",
                "3",
                "--poll",
                "0.05",
                "--drain-deadline",
                "20",
            ])
            .env("AWS_ACCESS_KEY_ID", "AKIDSHARDRINGLOCAL")
            .env("AWS_SECRET_ACCESS_KEY", "shardring-local-secret")
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.join("py.stderr")).unwrap())
            .spawn()
            .expect("start the Python example"),
    );
    let mut produced = Vec::new();
    support::produce(&kinesis, STREAM, &k0, "a", 6, &mut produced).await;
    support::produce(&kinesis, STREAM, &k1, "b", 6, &mut produced).await;
    support::wait_all_read("the Python consumer to read everything", &log, &produced).await;

    // Move s1 to the Rust reference consumer, two-phase.
    support::publish(&view, "default/payments", 2, &[("py", &[s0], &[s1])]);
    support::wait_released("Python to release s1", &observer, s1).await;
    let rust = consumers.reference("rs");
    support::produce(&kinesis, STREAM, &k1, "c", 6, &mut produced).await;
    support::publish(
        &view,
        "default/payments",
        3,
        &[("py", &[s0], &[]), ("rs", &[s1], &[])],
    );
    support::produce(&kinesis, STREAM, &k0, "d", 6, &mut produced).await;
    support::wait_all_read("both to read", &log, &produced).await;

    // SIGTERM on the Python pod: it reads on until s0 is revoked, then exits.
    py.terminate();
    support::produce(&kinesis, STREAM, &k0, "e", 6, &mut produced).await;
    support::wait_all_read("Python to read on after SIGTERM", &log, &produced).await;
    assert!(py.0.try_wait().unwrap().is_none());
    support::publish(
        &view,
        "default/payments",
        4,
        &[("py", &[], &[s0]), ("rs", &[s1], &[])],
    );
    assert!(py.wait_exit(Duration::from_secs(15)).success());
    assert_eq!(observer.fetch(s0).await.unwrap().unwrap().owner, None);
    support::publish(&view, "default/payments", 5, &[("rs", &[s0, s1], &[])]);
    support::produce(&kinesis, STREAM, &k0, "f", 6, &mut produced).await;
    support::wait_all_read("Rust to take s0 over", &log, &produced).await;
    drop(rust);

    let verdict = support::report(&log, &produced);
    println!("{}", verdict.summary());
    assert!(verdict.passed(), "{}", verdict.summary());
    assert_eq!(verdict.moves, 2, "{}", verdict.summary());
    std::fs::remove_dir_all(dir).unwrap();
}

/// The Python RabbitMQ example (`docs/examples/rabbitmq_consumer.py`, pika)
/// against a real broker and the fake consumer endpoint: it consumes the
/// queues its view makes active; a revoke closes the queue's channel and is
/// acknowledged at the endpoint, with no consumer left on the queue and
/// nothing unacknowledged; activated again it goes on from the first
/// message it did not acknowledge; the queue checker passes its log with
/// no duplicate. Skipped (saying so) without pika or rabbitmq-server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_queue_consumer_hands_queues_back_in_order() {
    if !python_has("pika", "apt-get install python3-pika") {
        return;
    }
    let Some(broker) = shardring_devkit::broker::Broker::start_or_skip("python rabbitmq").await
    else {
        return;
    };
    use shardring_devkit::broker::{ADMIN_PASSWORD, ADMIN_USER};
    broker.admin().create_vhost("py").await.unwrap();
    let url = broker.amqp_url(ADMIN_USER, ADMIN_PASSWORD, "py");
    let mut produced = support::publish_to_queues(&url, &["q0", "q1"], 1..=40).await;
    let dir =
        std::env::temp_dir().join(format!("shardring-python-rabbitmq-{}", broker.ports().amqp));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("queues.jsonl");
    let fake = FakeEndpoint::start("py-q", view(1, &["q0", "q1"], &[])).await;
    let (token, ca) = fake.write_credentials(&dir, "py-q");
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/rabbitmq_consumer.py");
    let _py = Process(
        Command::new(python())
            .arg(example)
            .args(["--pod", "py-q", "--rabbitmq-url", &url, "--prefetch", "5"])
            .args(["--shard-group", &format!("{NAMESPACE}/{GROUP}")])
            .args(["--endpoint-url", &fake.url, "--endpoint-wait", "5"])
            .arg("--endpoint-token-file")
            .arg(&token)
            .arg("--endpoint-ca-file")
            .arg(&ca)
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.join("py.stderr")).unwrap())
            .spawn()
            .expect("start the Python RabbitMQ example"),
    );
    let read = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        shardring_consumer::rabbitmq::verdict::parse(&text).unwrap()
    };
    let handled = |queue: &str| read().0.iter().filter(|r| r.shard == queue).count();
    support::wait_until("Python to handle both queues", async || {
        handled("q0") == 40 && handled("q1") == 40
    })
    .await;
    // q0 is revoked: released, then acknowledged.
    fake.publish(view(2, &["q1"], &["q0"]), &[]);
    support::wait_until("Python to acknowledge q0 at epoch 2", async || {
        fake.release_requests().iter().any(|r| {
            r.status == 202
                && r.release
                    .as_ref()
                    .is_some_and(|q| q.shard == "q0" && q.epoch == 2)
        })
    })
    .await;
    let counts = broker.admin().queue_counts("py", "q0").await.unwrap();
    assert_eq!(
        (counts.consumers, counts.unacknowledged),
        (0, 0),
        "released: no consumer, nothing in flight"
    );
    // More messages while nobody holds q0; active again, it goes on.
    produced.extend(support::publish_to_queues(&url, &["q0"], 41..=60).await);
    fake.publish(view(3, &["q0", "q1"], &[]), &[]);
    support::wait_until("Python to handle q0's new messages", async || {
        handled("q0") == 60
    })
    .await;
    let (records, ends) = read();
    let verdict = shardring_consumer::rabbitmq::verdict::check(&records, &ends, &produced, 5);
    assert!(verdict.passed(), "{}", verdict.summary());
    assert_eq!(verdict.records.duplicates, 0, "{}", verdict.summary());
    assert!(
        ends.iter().any(|e| e.ended == "q0" && e.clean),
        "the revoke ended q0's hold cleanly: {ends:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
