//! The operator against the devkit's mock Kubernetes API server (TLS,
//! watches with bookmarks and resourceVersions, reached through a
//! kubeconfig), where a test needs what only the mock gives: paced answers
//! and the log of every request.
//! - a leader stopped by SIGTERM releases its Lease only after its last
//!   write (a standby taking over at once never overlaps with it): slowed
//!   answers keep a reconcile writing when SIGTERM lands, and the request
//!   log orders its writes against the Lease's release;
//! - after a start with 200 ShardGroups whose pods, pools and groups all
//!   exist already, every group is published and Ready, whatever order the
//!   caches fill in: slowed lists keep every cache waiting on its list;
//! - a shutdown before the ShardGroups' first list stops the controller at
//!   once (kube's controller alone would wait forever for that list): a
//!   list slowed far beyond the wait is still out when it comes;
//! - with the answers to pod writes held back, so the watch delivers every
//!   annotation write's echo before its answer, the echoes wake no
//!   reconcile, and a change of a pod made while a write to it is on its
//!   way is still acted on as soon as that write lands.
//!
//! That the binary turns ready as leader and as follower on a Lease is
//! checked on the real control plane (the e2e crate's `leader_readiness`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardring::controller::{Context, ControllerConfig, ControllerMetrics, run_controller};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_devkit::fixtures;
use tokio_util::sync::CancellationToken;

/// A `shardring run` child process, killed when dropped.
struct RunningOperator {
    child: Child,
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
    RunningOperator { child }
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

/// The controller in-process against `mock` (no node watch, no leader
/// gate, no endpoint), until `shutdown`.
async fn spawn_controller(
    mock: &MockApiServer,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    spawn_controller_with(mock, shutdown, ControllerMetrics::default()).await
}

/// [`spawn_controller`], counting into `metrics`.
async fn spawn_controller_with(
    mock: &MockApiServer,
    shutdown: &CancellationToken,
    metrics: ControllerMetrics,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run_controller(
        Context::builder(mock.client().await, metrics).publish_events(None),
        ControllerConfig {
            watch_nodes: false,
            ..ControllerConfig::default()
        },
        None,
        shutdown.clone(),
    ))
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
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let run = spawn_controller(&mock, &shutdown).await;
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

/// Runs the controller against a mock whose lists take [`LIST_DELAY`],
/// cancels it `after` its start, and returns how long it took to stop.
async fn stop_while_listing(after: Duration) -> Duration {
    const LIST_DELAY: Duration = Duration::from_secs(30);
    let mock = MockApiServer::start(MockOptions {
        list_delay: LIST_DELAY,
        ..MockOptions::default()
    })
    .await;
    fixtures::populate(&mock, "team", 1, 3, 4);
    let shutdown = CancellationToken::new();
    let run = spawn_controller(&mock, &shutdown).await;
    tokio::time::sleep(after).await;
    let cancelled = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(LIST_DELAY / 2, run)
        .await
        .expect("the controller stopped before its lists were answered")
        .expect("the controller task");
    cancelled.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_the_first_lists_are_out_stops_at_once() {
    // Half a second in, the watches' lists are out (answered only after
    // 30 s); the stop must not wait for them.
    let stopped_in = stop_while_listing(Duration::from_millis(500)).await;
    assert!(
        stopped_in < Duration::from_secs(5),
        "stopped in {stopped_in:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_before_the_controller_starts_stops_at_once() {
    let stopped_in = stop_while_listing(Duration::ZERO).await;
    assert!(
        stopped_in < Duration::from_secs(5),
        "stopped in {stopped_in:?}"
    );
}

/// Each pod's view of group `g` in namespace `ns` as the mock stores it.
fn views(mock: &MockApiServer, ns: &str) -> Vec<(String, Value)> {
    mock.list("v1", "Pod", Some(ns))
        .iter()
        .map(|pod| {
            let view = pod["metadata"]["annotations"]["assignment.shardring.io/g"]
                .as_str()
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or(Value::Null);
            (
                pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                view,
            )
        })
        .collect()
}

/// Merge-patches group `g`'s spec with `spec` through the API, as a user
/// would: the new generation.
async fn patch_spec(client: &kube::Client, ns: &str, spec: Value) -> Option<i64> {
    use kube::api::{Api, Patch, PatchParams};
    let groups: Api<shardring::crds::ShardGroup> = Api::namespaced(client.clone(), ns);
    groups
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .expect("the group's spec patched")
        .metadata
        .generation
}

/// [`patch_spec`], then waits until a reconcile has seen that generation
/// (its status says so): the reconciles counted in `metrics` by then, that
/// one included (they are counted as each starts).
async fn reconciled_spec(
    client: &kube::Client,
    ns: &str,
    spec: Value,
    metrics: &ControllerMetrics,
) -> u64 {
    let generation = patch_spec(client, ns, spec).await;
    let groups: kube::Api<shardring::crds::ShardGroup> = kube::Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    loop {
        let group = groups.get("g").await.expect("the group");
        let observed = group.status.and_then(|s| s.observed_generation);
        if observed == generation {
            return metrics.reconciles.get();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "generation {generation:?} not reconciled; observed {observed:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether every pod's view has standbys (`true`) or none (`false`).
fn every_view_has_standbys(mock: &MockApiServer, ns: &str, standbys: bool) -> Result<(), String> {
    let views = views(mock, ns);
    let done = views
        .iter()
        .all(|(_, view)| view["standby"].as_array().is_some_and(|s| !s.is_empty()) == standbys);
    if done {
        Ok(())
    } else {
        Err(format!("{views:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoes_that_beat_their_answers_wake_nothing_and_a_change_meanwhile_still_does() {
    const NS: &str = "echo-0";
    const HELD: Duration = Duration::from_millis(400);
    let mock = MockApiServer::start(MockOptions::default()).await;
    fixtures::populate(&mock, "echo", 1, 3, 6);
    let shutdown = CancellationToken::new();
    let metrics = ControllerMetrics::default();
    let run = spawn_controller_with(&mock, &shutdown, metrics.clone()).await;
    let client = mock.client().await;
    wait_until("every pod's first view", Duration::from_secs(30), || {
        every_view_has_standbys(&mock, NS, false)?;
        match views(&mock, NS)
            .iter()
            .filter(|(_, v)| v.is_object())
            .count()
        {
            3 => Ok(()),
            n => Err(format!("{n} views")),
        }
    })
    .await;
    // From here every pod write's watch event goes out at once and its
    // answer HELD later: each echo arrives before its write's answer.
    mock.delay_answers("PATCH", "/pods/", HELD);
    let answered = || mock.count("PATCH", "/pods/");

    // 1. Publishes that rewrite every pod's view: one reconcile each, and
    //    none for any of their echoes. Spec changes whose reconciles show
    //    in the status open and close the window (twice to open it: the
    //    first may be seen by the first publish's own reconciles).
    let drain = |timeout: &str| json!({ "handoff": { "drainTimeout": timeout } });
    reconciled_spec(&client, NS, drain("31s"), &metrics).await;
    let before = reconciled_spec(&client, NS, drain("32s"), &metrics).await;
    for standbys in [1, 0, 1] {
        let writes = answered();
        reconciled_spec(&client, NS, json!({ "standbys": standbys }), &metrics).await;
        wait_until(
            "three views written and answered",
            Duration::from_secs(30),
            || {
                every_view_has_standbys(&mock, NS, standbys == 1)?;
                match answered() - writes {
                    n if n >= 3 => Ok(()),
                    n => Err(format!("{n} answered")),
                }
            },
        )
        .await;
    }
    let after = reconciled_spec(&client, NS, drain("33s"), &metrics).await;
    let woken = after - before;
    assert!(
        woken <= 4 + 1,
        "3 publishes that rewrote three pods' views each took {woken} reconciles with the \
         closing spec change's; want 4 and at most one timer's: their echoes woke the group"
    );

    // 2. A pod turns NotReady while the write of its view is on its way:
    //    the event is held until the answer, and then wakes the group,
    //    whose next document revokes that pod's shards. Nothing else would
    //    wake it for minutes (a static group, no move in flight).
    let c0_answers = || mock.count("PATCH", "/pods/c-0");
    let c0_answered = c0_answers();
    patch_spec(&client, NS, json!({ "standbys": 0 })).await;
    wait_until("c-0's view written", Duration::from_secs(30), || {
        let (_, view) = views(&mock, NS)
            .into_iter()
            .find(|(name, _)| name == "c-0")
            .unwrap();
        if view["standby"].as_array().is_none_or(Vec::is_empty) {
            Ok(())
        } else {
            Err(view.to_string())
        }
    })
    .await;
    mock.update_status(
        ("v1", "Pod"),
        Some(NS),
        "c-0",
        json!({ "conditions": [
            { "type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:01Z" }
        ] }),
    );
    assert_eq!(
        c0_answers(),
        c0_answered,
        "c-0 turned NotReady only after its write was answered: the test missed its window"
    );
    wait_until("c-0's shards revoked", Duration::from_secs(10), || {
        let (_, view) = views(&mock, NS)
            .into_iter()
            .find(|(name, _)| name == "c-0")
            .unwrap();
        let revoking = view["revoking"].as_array().map_or(0, Vec::len);
        if revoking > 0 && view["active"].as_array().is_none_or(Vec::is_empty) {
            Ok(())
        } else {
            Err(view.to_string())
        }
    })
    .await;
    shutdown.cancel();
    run.await.unwrap();
}
