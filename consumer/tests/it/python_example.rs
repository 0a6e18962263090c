//! The Python example of docs/consumer.md (`docs/examples/consumer.py`)
//! against kinesis-local and dynalite, sharing one lease table with the Rust
//! reference consumer: shards move between the two languages two-phase, the
//! Python pod drains on SIGTERM, and the checker proves the shared record
//! log. Runs its `--self-test` always; the AWS part needs a Python with
//! boto3 (`SHARDRING_PYTHON`, default `python3`) and says clearly when it
//! skips.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

const STREAM: &str = "payments";
const TABLE: &str = "leases";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/consumer.py")
}

fn python() -> String {
    std::env::var("SHARDRING_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "process did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
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
    support::publish(&view, "default/payments", 1, &[("py", &[s0, s1], &[])]);

    let mut py = Process(
        Command::new(python())
            .arg(example())
            .args(["--pod", "py", "--stream", STREAM, "--lease-table", TABLE])
            .args([
                "--kinesis-endpoint",
                &kinesis_url,
                "--dynamodb-endpoint",
                &dynamo_url,
            ])
            .arg("--view-file")
            .arg(&view)
            .arg("--log")
            .arg(&log)
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
    support::wait_until("the Python consumer to read everything", async || {
        support::report(&log, &produced).lost.is_empty()
    })
    .await;

    // Move s1 to the Rust reference consumer, two-phase.
    support::publish(&view, "default/payments", 2, &[("py", &[s0], &[s1])]);
    support::wait_until("Python to release s1", async || {
        observer
            .fetch(s1)
            .await
            .unwrap()
            .is_some_and(|l| l.owner.is_none())
    })
    .await;
    let mut rust = Process(
        Command::new(env!("CARGO_BIN_EXE_shardring-reference-consumer"))
            .args(["--pod", "rs", "--stream", STREAM, "--lease-table", TABLE])
            .args([
                "--kinesis-endpoint",
                &kinesis_url,
                "--dynamodb-endpoint",
                &dynamo_url,
            ])
            .arg("--view-file")
            .arg(&view)
            .arg("--log")
            .arg(&log)
            .args([
                "--poll-ms",
                "50",
                "--idle-ms",
                "50",
                "--failover-ms",
                "3000",
            ])
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.join("rs.stderr")).unwrap())
            .spawn()
            .expect("start the reference consumer"),
    );
    support::produce(&kinesis, STREAM, &k1, "c", 6, &mut produced).await;
    support::publish(
        &view,
        "default/payments",
        3,
        &[("py", &[s0], &[]), ("rs", &[s1], &[])],
    );
    support::produce(&kinesis, STREAM, &k0, "d", 6, &mut produced).await;
    support::wait_until("both to read", async || {
        support::report(&log, &produced).lost.is_empty()
    })
    .await;

    // SIGTERM on the Python pod: it reads on until s0 is revoked, then exits.
    let killed = Command::new("kill")
        .args(["-TERM", &py.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    support::produce(&kinesis, STREAM, &k0, "e", 6, &mut produced).await;
    support::wait_until("Python to read on after SIGTERM", async || {
        support::report(&log, &produced).lost.is_empty()
    })
    .await;
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
    support::wait_until("Rust to take s0 over", async || {
        support::report(&log, &produced).lost.is_empty()
    })
    .await;
    let _ = rust.0.kill();
    let _ = rust.0.wait();

    let verdict = support::report(&log, &produced);
    println!("{}", verdict.summary());
    assert!(verdict.passed(), "{}", verdict.summary());
    assert_eq!(verdict.moves, 2, "{}", verdict.summary());
    std::fs::remove_dir_all(dir).unwrap();
}
