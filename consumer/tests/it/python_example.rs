//! The Python example of docs/consumer.md (`docs/examples/consumer.py`)
//! against kinesis-local and dynalite, sharing one lease table with the Rust
//! reference consumer: shards move between the two languages two-phase, the
//! Python pod drains on SIGTERM, and the checker proves the shared record
//! log. Runs its `--self-test` always; the AWS part needs a Python with
//! boto3 (`SHARDRING_PYTHON`, default `python3`) and says clearly when it
//! skips. Its endpoint mode (standard library only) runs against the fake
//! consumer endpoint: a 429, a NotLeader, a view, an acknowledged release,
//! a rotated token.

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
fn the_example_compiles() {
    // `python3 -m py_compile`, writing the bytecode to a scratch file
    // instead of a __pycache__ next to the example.
    let cfile = std::env::temp_dir().join(format!("shardring-consumer-{}.pyc", std::process::id()));
    let Ok(output) = Command::new(python())
        .args([
            "-c",
            "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
        ])
        .arg(example())
        .arg(&cfile)
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
    std::fs::remove_file(cfile).unwrap();
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
    let has_boto3 = Command::new(python())
        .args(["-c", "import boto3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_boto3 {
        eprintln!(
            "SKIPPED: {} has no boto3 (pip install boto3, or set SHARDRING_PYTHON)",
            python()
        );
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
