//! The operator against a mock Kubernetes API server that speaks TLS and
//! serves lists and watches as kube-apiserver does (pages with `continue`,
//! bookmarks, resourceVersions, 410 Gone), reached through a kubeconfig as a
//! user's operator reaches its cluster:
//! - `shardring run` itself (the binary, leader election on a Lease) turns
//!   ready on the leader and on the follower, and only the leader writes;
//! - a leader stopped by SIGTERM releases its Lease only after its last
//!   write (a standby taking over at once never overlaps with it);
//! - after a start with 200 ShardGroups whose pods, pools and groups all
//!   exist already, every group is published and Ready, whatever order the
//!   caches fill in.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use shardring::controller::{ControllerConfig, ControllerMetrics, Sources, run_controller};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_devkit::fixtures;
use tokio_util::sync::CancellationToken;

/// A `shardring run` child process, killed when dropped.
struct RunningOperator {
    child: Child,
    metrics_port: u16,
}

impl Drop for RunningOperator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts `shardring run` against the mock through `kubeconfig`.
fn start_operator(kubeconfig: &Path, identity: &str, extra: &[&str]) -> RunningOperator {
    let metrics_port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_shardring"))
        .args([
            "run",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .args(["--no-node-watch", "--log-filter", "info"])
        // Two replicas on one host: each its own endpoint port.
        .args(["--endpoint-addr", "127.0.0.1:0"])
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", identity)
        .env("POD_NAMESPACE", "default")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        // Its log (on stdout) shows with --nocapture.
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn shardring run");
    RunningOperator {
        child,
        metrics_port,
    }
}

/// `GET path` on the operator's HTTP port: the status code, or `None` when
/// it does not answer (yet).
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// Polls `done` every 50 ms until it holds, failing after `timeout` with
/// what was last seen.
async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> Result<T, String>,
) -> T {
    let started = Instant::now();
    loop {
        match done() {
            Ok(value) => return value,
            Err(last) if started.elapsed() > timeout => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn ready_condition(group: &Value) -> Option<(&str, &str)> {
    group["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
            )
        })
}

/// A mock whose lists answer after a delay, so that the operator's caches
/// are all waiting on their lists at once (as on a real, loaded server).
async fn slow_listing_mock() -> MockApiServer {
    MockApiServer::start(MockOptions {
        list_delay: Duration::from_millis(150),
        ..MockOptions::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardring_run_turns_ready_as_leader_and_as_follower() {
    let mock = slow_listing_mock().await;
    fixtures::populate(&mock, "app", 1, 3, 6);
    let dir = tempdir();
    let kubeconfig = dir.join("kubeconfig");
    mock.write_kubeconfig(&kubeconfig).unwrap();

    let election = ["--leader-election", "--lease-name", "shardring-test"];
    let a = start_operator(&kubeconfig, "replica-a", &election);
    let b = start_operator(&kubeconfig, "replica-b", &election);
    for (name, operator) in [("replica-a", &a), ("replica-b", &b)] {
        assert_eq!(
            http_status(operator.metrics_port, "/healthz").unwrap_or(200),
            200
        );
        wait_until(
            &format!("{name}'s /readyz to answer 200"),
            Duration::from_secs(30),
            || match http_status(operator.metrics_port, "/readyz") {
                Some(200) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    }
    // One of them leads and publishes.
    let holder = wait_until("a Lease holder", Duration::from_secs(30), || {
        mock.get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("default"),
            "shardring-test",
        )
        .and_then(|lease| lease["spec"]["holderIdentity"].as_str().map(str::to_owned))
        .ok_or_else(|| "no lease".to_owned())
    })
    .await;
    wait_until("the group's document", Duration::from_secs(30), || {
        mock.get("v1", "ConfigMap", Some("app-0"), "g-assignment")
            .map(drop)
            .ok_or_else(|| "no ConfigMap".to_owned())
    })
    .await;
    assert!(
        ["replica-a", "replica-b"].contains(&holder.as_str()),
        "the Lease is held by {holder}"
    );
    // Without leader election: ready too.
    drop((a, b));
    let single = start_operator(&kubeconfig, "replica-c", &[]);
    wait_until(
        "the single replica's /readyz",
        Duration::from_secs(30),
        || match http_status(single.metrics_port, "/readyz") {
            Some(200) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "shardring-api-server-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_is_ready_after_a_start_with_200_groups() {
    const GROUPS: usize = 200;
    let mock = slow_listing_mock().await;
    fixtures::populate(&mock, "team", GROUPS, 25, 20);
    let client = mock.client().await;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let run = tokio::spawn(run_controller(
        client,
        ControllerConfig {
            watch_nodes: false,
            ..ControllerConfig::default()
        },
        ControllerMetrics::default(),
        Sources::default(),
        None,
        shutdown.clone(),
        None,
    ));
    wait_until(
        "every ShardGroup Ready with its 25 pods",
        Duration::from_secs(90),
        || {
            let groups = mock.list("shardring.io/v1alpha1", "ShardGroup", None);
            let not_ready: Vec<String> = groups
                .iter()
                .filter(|g| {
                    ready_condition(g) != Some(("True", "Published"))
                        || g["status"]["pods"]["eligible"] != 25
                })
                .map(|g| {
                    format!(
                        "{}: {:?}",
                        g["metadata"]["namespace"].as_str().unwrap_or_default(),
                        ready_condition(g)
                    )
                })
                .collect();
            if groups.len() == GROUPS && not_ready.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} not ready, e.g. {:?}",
                    not_ready.len(),
                    not_ready.first()
                ))
            }
        },
    )
    .await;
    eprintln!(
        "200 groups x 25 pods: every group Ready {:.2} s after start",
        started.elapsed().as_secs_f64()
    );
    // No group was ever told it had no pods: nothing decided from a cache
    // that had not finished its list.
    shutdown.cancel();
    run.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_leader_releases_the_lease_only_after_its_last_write() {
    let mock = MockApiServer::start(MockOptions::default()).await;
    fixtures::populate(&mock, "app", 1, 30, 60);
    let dir = tempdir();
    let kubeconfig = dir.join("kubeconfig");
    mock.write_kubeconfig(&kubeconfig).unwrap();
    // Slow answers and two writes at a time: the first publish's 30
    // annotation writes take about two seconds, so SIGTERM lands while the
    // reconcile is still writing.
    mock.set_request_delay(Duration::from_millis(150));
    let mut leader = start_operator(
        &kubeconfig,
        "replica-a",
        &[
            "--leader-election",
            "--lease-name",
            "shardring-test",
            "--write-concurrency",
            "2",
            // Every non-Lease write must be the reconcile's: no endpoint
            // (its self-signed Secret and its leader label).
            "--no-endpoint",
        ],
    );
    wait_until(
        "the leader's first annotation writes",
        Duration::from_secs(60),
        || match mock.count("PATCH", "/pods/") {
            n if n >= 2 => Ok(()),
            n => Err(format!("{n} pod writes")),
        },
    )
    .await;
    let sigterm_at = Instant::now();
    let terminated = Command::new("kill")
        .args(["-TERM", &leader.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(terminated.success());
    let exited = wait_until("the leader to exit", Duration::from_secs(30), || {
        leader
            .child
            .try_wait()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "still running".to_owned())
    })
    .await;
    assert!(exited.success(), "exit status {exited}");

    let lease = mock
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("default"),
            "shardring-test",
        )
        .expect("the Lease exists");
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "the Lease was released: {lease}"
    );
    let requests = mock.requests();
    let released = requests
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/leases/shardring-test"))
        .map(|r| r.at)
        .max()
        .expect("the release was logged");
    let writes: Vec<_> = requests
        .iter()
        .filter(|r| !r.path.contains("/leases/") && r.method != "GET")
        .collect();
    // The test means something only if the reconcile in flight went on
    // writing after SIGTERM.
    assert!(
        writes.iter().any(|r| r.at > sigterm_at),
        "no write after SIGTERM: the reconcile had finished before it"
    );
    let late: Vec<String> = writes
        .iter()
        .filter(|r| r.at >= released)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        late.is_empty(),
        "writes sent after the Lease was released: {late:?}"
    );
}
