//! Scale on the API server, not only in the plan: the `shardring run` binary
//! against the devkit's mock API server (TLS, paged lists, watches), at
//! 1,000 pods / 4,000 static shards and 5,000 pods / 20,000 shards, with a
//! plain client's throughput against the same server as the baseline,
//! measured in the same run.
//!
//!     cargo bench -p shardring --bench apiserver_scale
//!
//! Per size it prints: the baseline's time to patch every pod once (16
//! concurrent requests, as a plain 16-thread client) and the operator's time
//! from start to every annotation written; pod event → published document
//! (when the write of the changed document reaches the API server)
//! p50/p99 over joins and leaves; writes per churn event; and
//! the operator's peak RSS (VmHWM) after the first publish and after churn,
//! run as the Deployment runs it (`MALLOC_ARENA_MAX=1`).
//! Then start-up with 200 groups of 25 pods and 20 shards each, all created
//! before the operator starts: the time until every group is Ready.

mod common;

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_devkit::fixtures;

const NS: &str = "scale";
/// Pod joins and leaves per size: enough that the p99 is not simply the
/// slowest event (with 40 it was their maximum).
const CHURN_EVENTS: usize = 100;
const ANNOTATION: &str = "assignment.shardring.io/g";

struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Operator {
    /// `shardring run` against `mock`, watching `namespace` (all when `None`).
    fn spawn(mock: &MockApiServer, namespace: Option<&str>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "shardring-scale-{}-{}",
            std::process::id(),
            mock.resource_version()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        mock.write_kubeconfig(&kubeconfig).unwrap();
        let mut command = common::operator_command();
        command.args(["run", "--no-node-watch", "--metrics-addr", "127.0.0.1:0"]);
        if let Some(namespace) = namespace {
            command.args(["--namespace", namespace]);
        }
        // SHARDRING_BENCH_LOG=<file>: the operator's debug log (each
        // reconcile's phase timings) goes there, to see where time goes;
        // SHARDRING_BENCH_LOG_FILTER replaces its filter (e.g. add
        // `kube_runtime::controller=debug` to see what woke each reconcile).
        let log_filter = std::env::var("SHARDRING_BENCH_LOG_FILTER")
            .unwrap_or_else(|_| "warn,shardring::controller=debug".into());
        let (filter, stdout) = match std::env::var_os("SHARDRING_BENCH_LOG") {
            Some(path) => (
                log_filter.as_str(),
                Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .expect("open the log file"),
                ),
            ),
            None => ("warn", Stdio::null()),
        };
        Operator(
            command
                .args(["--log-filter", filter])
                .env("KUBECONFIG", &kubeconfig)
                .stdin(Stdio::null())
                .stdout(stdout)
                .spawn()
                .expect("spawn shardring run"),
        )
    }

    fn peak_rss_mib(&self) -> f64 {
        common::status_mib(&self.0.id().to_string(), "VmHWM:")
    }
}

struct Row {
    size: String,
    baseline: Duration,
    first_publish: Duration,
    annotations: Duration,
    p50: Duration,
    p99: Duration,
    writes_per_event: f64,
    rss_first: f64,
    rss_churn: f64,
}

/// The published ConfigMap's resourceVersion and, decoded, its epoch.
fn epoch_of(mock: &MockApiServer) -> Option<u64> {
    published(mock, None).and_then(|(_, epoch)| epoch)
}

/// The published ConfigMap's resourceVersion, and its epoch unless the
/// ConfigMap is still at `known_rv` (decoding 20,000 shards costs the mock's
/// process CPU that the operator's writes need).
fn published(mock: &MockApiServer, known_rv: Option<&str>) -> Option<(String, Option<u64>)> {
    let cm = mock.get("v1", "ConfigMap", Some(NS), "g-assignment")?;
    let rv = cm["metadata"]["resourceVersion"].as_str()?.to_owned();
    if known_rv == Some(rv.as_str()) {
        return Some((rv, None));
    }
    let doc = shardring_core::codec::decode(&serde_json::from_value(cm).ok()?).ok()?;
    Some((rv, Some(doc.epoch)))
}

/// How long after `t0` the first successful write of the assignment
/// ConfigMap arrived (the writes of one event are logged since `t0`).
fn first_document_write(mock: &MockApiServer, t0: Instant) -> Option<Duration> {
    mock.requests()
        .iter()
        .filter(|r| {
            matches!(r.method.as_str(), "PUT" | "PATCH" | "POST")
                && r.path.contains("/configmaps")
                && r.status < 300
                && r.at >= t0
        })
        .map(|r| r.at.duration_since(t0))
        .min()
}

/// Waits until the published epoch differs from `epoch`, decoding the
/// document only when the ConfigMap changed.
async fn next_epoch(mock: &MockApiServer, epoch: u64, deadline: Duration) -> Option<u64> {
    let started = Instant::now();
    let mut seen_rv = 0;
    let mut seen_cm: Option<String> = None;
    while started.elapsed() < deadline {
        let rv = mock.resource_version();
        if rv != seen_rv {
            seen_rv = rv;
            if let Some((cm_rv, decoded)) = published(mock, seen_cm.as_deref()) {
                seen_cm = Some(cm_rv);
                if let Some(now) = decoded.filter(|e| *e != epoch) {
                    return Some(now);
                }
            }
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    None
}

async fn baseline(client: &kube::Client, pods: usize) -> Duration {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    futures::stream::iter(0..pods)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                let patch =
                    json!({"metadata": {"annotations": {"bench.example/plain": i.to_string()}}});
                api.patch(
                    &format!("c-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .expect("baseline patch");
            }
        })
        .await;
    started.elapsed()
}

fn annotated_at(mock: &MockApiServer, epoch: u64) -> usize {
    mock.list("v1", "Pod", Some(NS))
        .iter()
        .filter(|p| {
            p["metadata"]["annotations"][ANNOTATION]
                .as_str()
                .and_then(|a| serde_json::from_str::<Value>(a).ok())
                .is_some_and(|v| v["epoch"] == epoch)
        })
        .count()
}

async fn run(pods: usize, shards: u32) -> Row {
    let mock = Arc::new(MockApiServer::start(MockOptions::default()).await);
    mock.create_many(fixtures::crds());
    let since = "2026-01-01T00:00:00Z";
    let mut objects = vec![fixtures::namespace(NS), fixtures::pool(NS, "p", "consumer")];
    objects
        .extend((0..pods).map(|i| fixtures::ready_pod(NS, &format!("c-{i}"), "consumer", since)));
    mock.create_many(objects);
    let client = mock.client().await;
    let baseline = baseline(&client, pods).await;

    // The group appears with the operator already running: its first
    // publish is what a new group costs.
    let operator = Operator::spawn(&mock, Some(NS));
    tokio::time::sleep(Duration::from_millis(300)).await;
    mock.clear_requests();
    let started = Instant::now();
    mock.create(fixtures::static_group(NS, "g", "p", shards));
    let epoch = next_epoch(&mock, 0, Duration::from_secs(120))
        .await
        .expect("first publish");
    let first_publish = started.elapsed();
    // Completion is read from the request log (when the last pod write
    // arrived), checked against the pods themselves once: polling by listing
    // every pod would load the mock, which shares this process, and slow the
    // very writes being measured.
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "annotations never completed"
        );
        if mock.count("PATCH", "/pods/") >= pods as u64 && annotated_at(&mock, epoch) >= pods {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last_write = mock
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/pods/") && r.status < 300)
        .map(|r| r.at)
        .max()
        .expect("pod writes were logged");
    let annotations = last_write.duration_since(started);
    let rss_first = operator.peak_rss_mib();

    let mut latencies = Vec::with_capacity(CHURN_EVENTS);
    let mut writes = 0u64;
    let mut epoch = epoch;
    for k in 0..CHURN_EVENTS {
        // Settle: nothing in flight, then count this event's writes alone.
        tokio::time::sleep(Duration::from_millis(300)).await;
        epoch = epoch_of(&mock).unwrap_or(epoch);
        mock.clear_requests();
        let t0 = Instant::now();
        if k % 2 == 0 {
            mock.create(fixtures::ready_pod(
                NS,
                &format!("j-{k}"),
                "consumer",
                since,
            ));
        } else {
            mock.force_delete(("v1", "Pod"), Some(NS), &format!("j-{}", k - 1));
        }
        if let Some(next) = next_epoch(&mock, epoch, Duration::from_secs(30)).await {
            // Published when the document write reached the API server (the
            // request log's arrival time): the bench's own wait for the
            // watch and its decode of 20,000 shards are not the operator's.
            latencies.push(first_document_write(&mock, t0).unwrap_or_else(|| t0.elapsed()));
            epoch = next;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        writes += mock.requests().iter().filter(|r| r.method != "GET").count() as u64;
    }
    latencies.sort();
    let rss_churn = operator.peak_rss_mib();
    drop(operator);
    Row {
        size: format!("{pods} pods / {shards} shards"),
        baseline,
        first_publish,
        annotations,
        p50: common::percentile(&latencies, 0.5),
        p99: common::percentile(&latencies, 0.99),
        writes_per_event: writes as f64 / CHURN_EVENTS as f64,
        rss_first,
        rss_churn,
    }
}

/// Start-up with many groups: `groups` namespaces, each with a pool of
/// `pods` Ready pods and a static group of `shards`, all created before the
/// operator starts; the time from spawning `shardring run` until every group
/// is Ready (reason Published) with all its pods eligible.
async fn startup(groups: usize, pods: usize, shards: u32) -> Duration {
    let mock = MockApiServer::start(MockOptions::default()).await;
    fixtures::populate(&mock, "team", groups, pods, shards);
    let started = Instant::now();
    let _operator = Operator::spawn(&mock, None);
    loop {
        let ready = mock
            .list("shardring.io/v1alpha1", "ShardGroup", None)
            .iter()
            .filter(|g| {
                g["status"]["pods"]["eligible"] == pods
                    && g["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter().any(|c| {
                            c["type"] == "Ready"
                                && c["status"] == "True"
                                && c["reason"] == "Published"
                        })
                    })
            })
            .count();
        if ready == groups {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {ready} of {groups} groups Ready after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    shardring::runtime::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // `--quick`: the small size only; `--large`: the large size only.
    let arg = |name: &str| std::env::args().any(|a| a == name);
    let sizes: &[(usize, u32)] = if arg("--quick") {
        &[(1_000, 4_000)]
    } else if arg("--large") {
        &[(5_000, 20_000)]
    } else {
        &[(1_000, 4_000), (5_000, 20_000)]
    };
    let rows: Vec<Row> = sizes
        .iter()
        .map(|&(p, s)| runtime.block_on(run(p, s)))
        .collect();
    let startup = runtime.block_on(startup(200, 25, 20));
    println!();
    println!(
        "start-up: 200 groups x 25 pods x 20 shards, all created before the operator: every group Ready {:.2} s after spawning `shardring run`",
        startup.as_secs_f64()
    );
    println!();
    println!(
        "| size | baseline: patch every pod (16 concurrent) | shardring: group created → first publish | → every annotation | ratio | event → publish p50 | p99 | writes per churn event | peak RSS after first publish | after churn |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.2} s | {:.2} s | {:.2} s | {:.2}x | {:.1} ms | {:.1} ms | {:.1} | {:.1} MiB | {:.1} MiB |",
            r.size,
            r.baseline.as_secs_f64(),
            r.first_publish.as_secs_f64(),
            r.annotations.as_secs_f64(),
            r.annotations.as_secs_f64() / r.baseline.as_secs_f64(),
            r.p50.as_secs_f64() * 1e3,
            r.p99.as_secs_f64() * 1e3,
            r.writes_per_event,
            r.rss_first,
            r.rss_churn,
        );
    }
}
