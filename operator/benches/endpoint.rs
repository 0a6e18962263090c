//! The consumer endpoint, measured: `shardring run` (the binary, as a
//! Deployment runs it) against the devkit's TLS mock API server, with
//! consumers that are the `shardring-consumer` crate's endpoint client.
//!
//!     cargo bench -p shardring --bench endpoint [-- --drain 30s] [-- --pods 5000]
//!     cargo bench -p shardring --bench endpoint -- --only load --polls-only
//!
//! (`--only deploy|load` runs one part; `--polls-only` stops the load part
//! after its RSS figures.) The operator allocates as the binary does:
//! jemalloc with `.cargo/config.toml`'s settings.
//!
//! 1. **Handoffs of a static source, with and without release acks**: 10
//!    pods over 100 partitions (no lease table, drain timeout `--drain`,
//!    30 s as in the sample, rebalance delay 0 s), a rolling deploy with
//!    maxSurge 1 (a new pod joins, then an old one is deleted: its consumer
//!    stops, and its "kubelet" reports the container terminated and removes
//!    the pod). Per moved shard, the gap from the old owner's stop to the
//!    new owner's start (both seen by the consumers, p50/p99), and the
//!    deploy's wall time; the same run without acks is the baseline.
//! 2. **Load** at `--pods` pods (5,000) over 4 shards each: the operator's
//!    RSS before any consumer asked and with every pod's long-poll open,
//!    each read once the pages the operator freed were given back
//!    (`SETTLE`), against the same figures of a plain hyper HTTPS server
//!    in a process of its own holding as many long-polls (`plain_https`)
//!    in the same run as the baseline;
//!    responses written when one pod joins (per moved shard); requests/s of
//!    immediate view requests with TokenReview cached, against a plain
//!    hyper HTTPS server (hyper's HTTP/1 over rustls, a fixed answer) in
//!    the same run as the baseline; TokenReviews
//!    caused by 10,000 requests with bad tokens from one IP.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
mod common;
mod plain_https;

use parking_lot::Mutex;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use shardring_consumer::view::endpoint::{EndpointClient, EndpointConfig};
use shardring_crds::endpoint::{ReleaseRequest, ViewResponse};
use shardring_devkit::apiserver::tokens::{Claims, bound_token_reviewer};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_devkit::fixtures;

const NS: &str = "bench";
const AUDIENCE: &str = "shardring.io";
const SINCE: &str = "2026-01-01T00:00:00Z";
/// How long RSS is left to settle before it is read: twice the operator's
/// `dirty_decay_ms`.
const SETTLE: Duration = Duration::from_secs(60);

/// `shardring run`, killed when dropped.
struct Operator {
    child: Child,
    endpoint: SocketAddr,
}

impl Drop for Operator {
    fn drop(&mut self) {
        // SIGTERM to the operator in its process group first (under a
        // wrapper, heaptrack, too), so the wrapper writes its data.
        let _ = Command::new("pkill")
            .args([
                "-TERM",
                "-g",
                &self.child.id().to_string(),
                "-x",
                "shardring",
            ])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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

impl Operator {
    fn spawn(mock: &MockApiServer, dir: &Path, extra: &[&str]) -> Self {
        let kubeconfig = dir.join("kubeconfig");
        mock.write_kubeconfig(&kubeconfig).unwrap();
        let endpoint: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut command = common::operator_command();
        command
            .args(["run", "--no-node-watch", "--metrics-addr", "127.0.0.1:0"])
            .args(["--namespace", NS, "--log-filter", "warn"])
            .args(["--endpoint-addr", &endpoint.to_string()])
            .args(extra)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAMESPACE", NS)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        Self {
            child: command.spawn().expect("spawn shardring run"),
            endpoint,
        }
    }

    /// The operator's RSS once the pages it freed were given back: its
    /// jemalloc returns freed pages within `dirty_decay_ms` (30 s,
    /// `.cargo/config.toml`), so RSS read sooner still holds some of what
    /// the last work (a publish, 5,000 TLS handshakes) allocated and freed.
    async fn settled_rss(&self) -> f64 {
        settled_rss(&self.child.id().to_string()).await
    }
}

/// Process `pid`'s RSS in MiB, read `SETTLE` from now.
async fn settled_rss(pid: &str) -> f64 {
    tokio::time::sleep(SETTLE).await;
    common::status_mib(pid, "VmRSS:")
}

/// Polls `done` every 20 ms until it holds, failing after `timeout`.
async fn wait_until<T>(what: &str, timeout: Duration, mut done: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = done() {
            return value;
        }
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod(name: &str) -> Value {
    let mut pod = fixtures::ready_pod(NS, name, "consumer", SINCE);
    pod["status"]["podIP"] = json!("127.0.0.1");
    pod
}

/// A mock holding the namespace, the pool, a static group `g` of `shards`
/// partitions (drain timeout `drain`, no rebalance delay) and `pods` pods
/// `c-<i>`, answering TokenReviews of bound test tokens.
async fn cluster(pods: usize, shards: u32, drain: &str) -> MockApiServer {
    let mock = MockApiServer::start(MockOptions {
        token_reviewer: bound_token_reviewer(),
        ..MockOptions::default()
    })
    .await;
    mock.create_many(fixtures::crds());
    let mut group = fixtures::static_group(NS, "g", "p", shards);
    group["spec"]["handoff"]["drainTimeout"] = json!(drain);
    let mut objects = vec![
        fixtures::namespace(NS),
        fixtures::pool(NS, "p", "consumer"),
        group,
    ];
    objects.extend((0..pods).map(|i| pod(&format!("c-{i}"))));
    mock.create_many(objects);
    mock
}

fn uid(mock: &MockApiServer, name: &str) -> String {
    mock.get("v1", "Pod", Some(NS), name).expect("pod")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The endpoint's CA, once the operator published it in the namespace.
async fn ca_file(mock: &MockApiServer, dir: &Path) -> PathBuf {
    let pem = wait_until("the endpoint CA ConfigMap", Duration::from_secs(60), || {
        mock.get("v1", "ConfigMap", Some(NS), "shardring-endpoint-ca")
            .and_then(|cm| cm["data"]["ca.crt"].as_str().map(str::to_owned))
    })
    .await;
    let path = dir.join("ca.crt");
    std::fs::write(&path, pem).unwrap();
    path
}

/// An endpoint client for pod `name`, with its token in a file.
fn client(
    mock: &MockApiServer,
    op: &Operator,
    dir: &Path,
    ca: &Path,
    name: &str,
) -> EndpointClient {
    let token = Claims::bound(NS, name, &uid(mock, name), AUDIENCE).token();
    let token_file = dir.join(format!("token-{name}"));
    std::fs::write(&token_file, token).unwrap();
    let mut config = EndpointConfig::new(format!("https://127.0.0.1:{}", op.endpoint.port()));
    config.token_file = token_file;
    config.ca_file = ca.to_path_buf();
    EndpointClient::new(config).expect("a client")
}

/// The view now, retrying while the endpoint warms up or starts.
async fn first_view(client: &EndpointClient) -> ViewResponse {
    let started = Instant::now();
    loop {
        match client.view(NS, "g", 0, Duration::ZERO).await {
            Ok((view, _)) => return view,
            Err(error) => {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "no view: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------- handoffs

/// What the consumers saw: when each shard was last stopped, and the gap of
/// each move (old owner's stop → new owner's start).
#[derive(Default)]
struct Seen {
    stopped: BTreeMap<String, Instant>,
    gaps: Vec<Duration>,
    active: BTreeMap<String, BTreeSet<String>>,
}

/// A consumer of pod `name`: follows its view, "reads" its active shards,
/// stops the ones that leave `active`, and acknowledges every revoked shard
/// it does not read when `acks`.
async fn consume(
    name: String,
    client: EndpointClient,
    acks: bool,
    seen: Arc<Mutex<Seen>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut epoch = 0;
    let mut reading: BTreeSet<String> = BTreeSet::new();
    let mut acked: BTreeSet<(String, u64)> = BTreeSet::new();
    while !stop.is_cancelled() {
        let answer = tokio::select! {
            answer = client.view(NS, "g", epoch, Duration::from_secs(30)) => answer,
            () = stop.cancelled() => return,
        };
        let view = match answer {
            Ok((view, _)) => view.view,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if view.epoch < epoch {
            continue;
        }
        epoch = view.epoch;
        let now = Instant::now();
        let active: BTreeSet<String> = view.active.iter().cloned().collect();
        {
            let mut seen = seen.lock();
            for shard in reading.difference(&active) {
                seen.stopped.insert(shard.clone(), now);
            }
            for shard in active.difference(&reading) {
                if let Some(stopped) = seen.stopped.remove(shard) {
                    seen.gaps.push(now.duration_since(stopped));
                }
            }
            seen.active.insert(name.clone(), active.clone());
        }
        reading = active;
        if acks {
            for shard in &view.revoking {
                if reading.contains(shard) || !acked.insert((shard.clone(), view.epoch)) {
                    continue;
                }
                let request = ReleaseRequest {
                    shard: shard.clone(),
                    epoch: view.epoch,
                    checkpoint: None,
                };
                let client = client.clone();
                tokio::spawn(async move {
                    for _ in 0..20 {
                        if client.release(NS, "g", &request).await.is_ok() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                });
            }
        }
    }
}

struct DeployResult {
    wall: Duration,
    gaps: Vec<Duration>,
}

/// A rolling deploy of `pods` pods over `shards` static partitions.
async fn rolling_deploy(pods: usize, shards: u32, drain: &str, acks: bool) -> DeployResult {
    let dir = tempdir(if acks { "deploy-acks" } else { "deploy-plain" });
    let mock = cluster(pods, shards, drain).await;
    let op = Operator::spawn(&mock, &dir, &[]);
    let ca = ca_file(&mock, &dir).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stops: Arc<Mutex<BTreeMap<String, tokio_util::sync::CancellationToken>>> = Arc::default();
    let start_consumer = |name: String| {
        let client = client(&mock, &op, &dir, &ca, &name);
        let stop = tokio_util::sync::CancellationToken::new();
        stops.lock().insert(name.clone(), stop.clone());
        tokio::spawn(consume(name, client, acks, Arc::clone(&seen), stop));
    };
    for i in 0..pods {
        start_consumer(format!("c-{i}"));
    }
    let settled = |seen: &Seen, expect: usize| {
        let total: usize = seen.active.values().map(BTreeSet::len).sum();
        (total == usize::try_from(shards).unwrap()
            && seen.active.values().filter(|a| !a.is_empty()).count() == expect)
            .then_some(())
    };
    wait_until(
        "the first assignment read",
        Duration::from_secs(120),
        || settled(&seen.lock(), pods),
    )
    .await;
    seen.lock().gaps.clear();
    let started = Instant::now();
    for i in 0..pods {
        let new = format!("n-{i}");
        mock.create(pod(&new));
        start_consumer(new.clone());
        // maxSurge 1: the new pod is Ready; the old one goes once the new
        // one reads its share.
        wait_until("the new pod reading", Duration::from_secs(600), || {
            let seen = seen.lock();
            (seen.active.get(&new).is_some_and(|a| !a.is_empty())
                && settled(&seen, pods + 1).is_some())
            .then_some(())
        })
        .await;
        let old = format!("c-{i}");
        mock.delete(("v1", "Pod"), Some(NS), &old);
        // Its consumer stops once it holds nothing; the kubelet then reports
        // the container terminated and removes the pod.
        wait_until("the old pod letting go", Duration::from_secs(600), || {
            seen.lock()
                .active
                .get(&old)
                .is_none_or(BTreeSet::is_empty)
                .then_some(())
        })
        .await;
        if let Some(stop) = stops.lock().remove(&old) {
            stop.cancel();
        }
        terminate(&mock, &old);
        seen.lock().active.remove(&old);
        wait_until(
            "every partition read again",
            Duration::from_secs(600),
            || settled(&seen.lock(), pods),
        )
        .await;
    }
    let wall = started.elapsed();
    for stop in stops.lock().values() {
        stop.cancel();
    }
    let mut gaps = std::mem::take(&mut seen.lock().gaps);
    gaps.sort();
    drop(op);
    DeployResult { wall, gaps }
}

/// What the kubelet does once a deleted pod's container exited: reports it
/// terminated, then removes the pod.
fn terminate(mock: &MockApiServer, name: &str) {
    let mut status = mock.get("v1", "Pod", Some(NS), name).expect("pod")["status"].clone();
    status["phase"] = json!("Running");
    status["conditions"][0]["status"] = json!("False");
    status["containerStatuses"][0]["ready"] = json!(false);
    status["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": SINCE, "finishedAt": SINCE}});
    mock.update_status(("v1", "Pod"), Some(NS), name, status);
    mock.kubelet_finish_deletion(NS, name);
}

// -------------------------------------------------------------------- load

struct Load {
    rss_idle: f64,
    rss_polls: f64,
    polls: usize,
    join_moves: usize,
    join_responses: u64,
    reqs_per_sec: f64,
    baseline_reqs_per_sec: f64,
    plain_polls: PlainPolls,
    bad_token_reviews: u64,
    bad_statuses: BTreeMap<u16, u64>,
}

async fn load(pods: usize) -> Load {
    let dir = tempdir("load");
    let shards = u32::try_from(pods * 4).unwrap();
    let mock = cluster(pods, shards, "30s").await;
    let limits = [
        "--endpoint-pod-limit",
        "1000000",
        "--endpoint-ip-limit",
        "1000000000",
        "--endpoint-max-connections",
        "19000",
    ];
    let op = Operator::spawn(&mock, &dir, &limits);
    let ca = ca_file(&mock, &dir).await;
    wait_until("the first publish", Duration::from_secs(120), || {
        let group = mock.get("shardring.io/v1alpha1", "ShardGroup", Some(NS), "g")?;
        (group["status"]["pods"]["eligible"] == pods).then_some(())
    })
    .await;
    let rss_idle = op.settled_rss().await;

    // Every pod's long-poll open.
    let clients: Vec<(String, EndpointClient)> = (0..pods)
        .map(|i| {
            let name = format!("c-{i}");
            let client = client(&mock, &op, &dir, &ca, &name);
            (name, client)
        })
        .collect();
    let (responses, stop) = open_long_polls(&clients).await;
    // The last request of each is in flight once the server counts it, well
    // within the settling time.
    let rss_polls = op.settled_rss().await;
    if std::env::args().any(|a| a == "--polls-only") {
        stop.cancel();
        drop((clients, op));
        let plain = plain_long_polls(&dir, pods).await;
        println!(
            "operator RSS before any request {rss_idle:.1} MiB, with {pods} long-polls open {rss_polls:.1} MiB (+{:.1} MiB)",
            rss_polls - rss_idle
        );
        println!("{}", plain.line(pods, rss_polls - rss_idle));
        std::process::exit(0);
    }

    // One pod joins: its share moves to it (revoked, then activated).
    responses.store(0, Ordering::SeqCst);
    mock.create(pod("joiner"));
    let joiner = client(&mock, &op, &dir, &ca, "joiner");
    let join_moves = wait_until(
        "the joiner's share active",
        Duration::from_secs(120),
        || {
            None::<usize>.or_else(|| {
                let cm = mock.get("v1", "ConfigMap", Some(NS), "g-assignment")?;
                let doc = shardring_core::codec::decode(&serde_json::from_value(cm).ok()?).ok()?;
                let active = doc.pods.get("joiner")?.active.len();
                let revoking: usize = doc.pods.values().map(|p| p.revoking.len()).sum();
                (active >= 3 && revoking == 0).then_some(active)
            })
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let join_responses = responses.load(Ordering::SeqCst);
    drop(joiner);
    stop.cancel();

    // Immediate view requests with the token cached, 64 at a time.
    let reqs_per_sec = throughput(&clients[..64], |client| async move {
        client.view(NS, "g", 0, Duration::ZERO).await.is_ok()
    })
    .await;
    let baseline_reqs_per_sec = baseline_throughput(&dir).await;
    drop((clients, op));
    let plain_polls = plain_long_polls(&dir, pods).await;

    // Bad tokens from one IP, default limits.
    let (bad_token_reviews, bad_statuses) = bad_tokens(&dir).await;
    Load {
        rss_idle,
        rss_polls,
        polls: pods,
        join_moves,
        join_responses,
        reqs_per_sec,
        baseline_reqs_per_sec,
        plain_polls,
        bad_token_reviews,
        bad_statuses,
    }
}

/// Opens a long-poll on every client, each following its view from the
/// one it gets at once, and returns once each has sent its first: a count
/// of the answers they get after that, and the token that stops them.
async fn open_long_polls(
    clients: &[(String, EndpointClient)],
) -> (Arc<AtomicU64>, tokio_util::sync::CancellationToken) {
    let epochs: Vec<u64> = futures::stream::iter(clients.iter())
        .map(|(_, c)| async move { first_view(c).await.view.epoch })
        .buffered(64)
        .collect()
        .await;
    let responses = Arc::new(AtomicU64::new(0));
    let open = Arc::new(AtomicU64::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    for ((_, client), epoch) in clients.iter().zip(epochs) {
        let (client, responses, open, stop) = (
            client.clone(),
            Arc::clone(&responses),
            Arc::clone(&open),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut epoch = epoch;
            open.fetch_add(1, Ordering::SeqCst);
            while !stop.is_cancelled() {
                let answer = tokio::select! {
                    answer = client.view(NS, "g", epoch, Duration::from_secs(280)) => answer,
                    () = stop.cancelled() => break,
                };
                if let Ok((view, _)) = answer {
                    responses.fetch_add(1, Ordering::SeqCst);
                    epoch = epoch.max(view.view.epoch);
                }
            }
        });
    }
    wait_until("every long-poll open", Duration::from_secs(60), || {
        (open.load(Ordering::SeqCst) == u64::try_from(clients.len()).unwrap()).then_some(())
    })
    .await;
    (responses, stop)
}

/// The RSS a plain HTTPS server ([`plain_https`]) keeps before any request
/// and with `polls` long-polls open, read as the operator's are.
struct PlainPolls {
    rss_idle: f64,
    rss_polls: f64,
}

impl PlainPolls {
    /// The baseline's line, with the operator's `added` MiB as a ratio.
    fn line(&self, polls: usize, added: f64) -> String {
        let plain = self.rss_polls - self.rss_idle;
        format!(
            "plain hyper server RSS before any request {:.1} MiB, with {polls} long-polls open {:.1} MiB (+{plain:.1} MiB); operator's added / plain's: {:.2}",
            self.rss_idle,
            self.rss_polls,
            added / plain
        )
    }
}

/// The same clients' long-polls, `polls` of them, on a plain HTTPS server
/// in a process of its own.
async fn plain_long_polls(dir: &Path, polls: usize) -> PlainPolls {
    let server = plain_https::PlainProcess::spawn(dir);
    let rss_idle = settled_rss(&server.pid()).await;
    let token = dir.join("plain-token");
    std::fs::write(&token, "t").unwrap();
    let clients: Vec<(String, EndpointClient)> = (0..polls)
        .map(|i| {
            let mut config =
                EndpointConfig::new(format!("https://127.0.0.1:{}", server.plain.addr.port()));
            config.token_file = token.clone();
            config.ca_file = server.plain.ca.clone();
            (format!("p-{i}"), EndpointClient::new(config).unwrap())
        })
        .collect();
    let (_, stop) = open_long_polls(&clients).await;
    let rss_polls = settled_rss(&server.pid()).await;
    stop.cancel();
    PlainPolls {
        rss_idle,
        rss_polls,
    }
}

/// Requests/s of `request` over `clients` (each looping) for 5 s.
async fn throughput<F, Fut>(clients: &[(String, EndpointClient)], request: F) -> f64
where
    F: Fn(EndpointClient) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(5);
    let tasks: Vec<_> = clients
        .iter()
        .map(|(_, client)| {
            let (client, done, request) = (client.clone(), Arc::clone(&done), request.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    if request(client.clone()).await {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // A count far below 2^52 converts exactly.
    #[allow(clippy::cast_precision_loss)]
    let count = done.load(Ordering::Relaxed) as f64;
    count / 5.0
}

/// The same client and request loop against the plain HTTPS server
/// ([`plain_https`], in this process), which answers each at once.
async fn baseline_throughput(dir: &Path) -> f64 {
    let (plain, server) = plain_https::start(dir).await;
    let token = dir.join("baseline-token");
    std::fs::write(&token, "t").unwrap();
    let clients: Vec<(String, EndpointClient)> = (0..64)
        .map(|i| {
            let mut config =
                EndpointConfig::new(format!("https://127.0.0.1:{}", plain.addr.port()));
            config.token_file = token.clone();
            config.ca_file = plain.ca.clone();
            (format!("b-{i}"), EndpointClient::new(config).unwrap())
        })
        .collect();
    let rate = throughput(&clients, |client| async move {
        client.view(NS, "g", 0, Duration::ZERO).await.is_ok()
    })
    .await;
    server.abort();
    rate
}

/// TokenReviews caused by 10,000 requests with distinct bad tokens from one
/// IP (default limits), and the statuses they got.
async fn bad_tokens(dir: &Path) -> (u64, BTreeMap<u16, u64>) {
    let mock = cluster(1, 4, "30s").await;
    let op = Operator::spawn(&mock, dir, &[]);
    let ca = ca_file(&mock, dir).await;
    let reviews_before = mock.token_review_count();
    let statuses: Arc<Mutex<BTreeMap<u16, u64>>> = Arc::default();
    let url = format!("https://127.0.0.1:{}", op.endpoint.port());
    futures::stream::iter(0..10_000u64)
        .for_each_concurrent(16, |i| {
            let (statuses, url, ca) = (Arc::clone(&statuses), url.clone(), ca.clone());
            let dir = dir.to_path_buf();
            async move {
                let token = dir.join(format!("bad-{i}"));
                let mut claims = Claims::bound(NS, "c-0", "uid", "another-audience");
                claims.nonce = i;
                std::fs::write(&token, claims.token()).unwrap();
                let mut config = EndpointConfig::new(url);
                config.token_file = token;
                config.ca_file = ca;
                let client = EndpointClient::new(config).unwrap();
                let status = match client.view(NS, "g", 0, Duration::ZERO).await {
                    Ok(_) => 200,
                    Err(error) => error.status().unwrap_or(0),
                };
                let _ = std::fs::remove_file(dir.join(format!("bad-{i}")));
                *statuses.lock().entry(status).or_default() += 1;
            }
        })
        .await;
    let reviews = mock.token_review_count() - reviews_before;
    drop(op);
    let statuses = statuses.lock().clone();
    (reviews, statuses)
}

fn tempdir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "shardring-bench-endpoint-{}-{what}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The binary allocates as `shardring` does (jemalloc, `.cargo/config.toml`'s
/// settings): run as the plain server, its RSS is the operator's baseline.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    shardring::runtime::tls::install_crypto_provider();
    if let Some(dir) = arg(plain_https::CHILD_ARG) {
        plain_https::run_as_child(Path::new(&dir)).await;
    }
    let drain = arg("--drain").unwrap_or_else(|| "30s".into());
    let pods: usize = arg("--pods").map_or(5000, |p| p.parse().expect("--pods N"));
    let only = arg("--only");

    if only.as_deref() != Some("load") {
        println!(
            "rolling deploy, 10 pods over 100 static partitions, drain timeout {drain}, rebalance delay 0s"
        );
        println!(
            "{:<14} {:>10} {:>12} {:>12} {:>8}",
            "", "wall (s)", "gap p50 ms", "gap p99 ms", "moves"
        );
        let mut rows = Vec::new();
        for acks in [false, true] {
            let result = rolling_deploy(10, 100, &drain, acks).await;
            println!(
                "{:<14} {:>10.1} {:>12.0} {:>12.0} {:>8}",
                if acks { "with acks" } else { "without acks" },
                result.wall.as_secs_f64(),
                ms(common::percentile(&result.gaps, 0.5)),
                ms(common::percentile(&result.gaps, 0.99)),
                result.gaps.len(),
            );
            rows.push(result);
        }
        println!(
            "wall time with acks / without: {:.3}",
            rows[1].wall.as_secs_f64() / rows[0].wall.as_secs_f64()
        );
    }
    if only.as_deref() != Some("deploy") {
        let l = load(pods).await;
        println!(
            "\nendpoint load, {pods} pods over {} static shards",
            pods * 4
        );
        println!(
            "operator RSS before any request      {:>8.1} MiB",
            l.rss_idle
        );
        println!(
            "operator RSS with {} long-polls open  {:>8.1} MiB (+{:.1} MiB)",
            l.polls,
            l.rss_polls,
            l.rss_polls - l.rss_idle
        );
        println!("{}", l.plain_polls.line(l.polls, l.rss_polls - l.rss_idle));
        // Small counts convert exactly.
        #[allow(clippy::cast_precision_loss)]
        let per_move = l.join_responses as f64 / l.join_moves.max(1) as f64;
        println!(
            "a pod joins: {} shards moved, {} responses written to the {} open polls ({per_move:.2} per moved shard)",
            l.join_moves, l.join_responses, l.polls
        );
        println!(
            "immediate view requests/s, TokenReview cached: {:.0} (plain hyper server: {:.0}, ratio {:.2})",
            l.reqs_per_sec,
            l.baseline_reqs_per_sec,
            l.reqs_per_sec / l.baseline_reqs_per_sec
        );
        println!(
            "10,000 bad-token requests from one IP: {} TokenReviews; statuses {:?}",
            l.bad_token_reviews, l.bad_statuses
        );
    }
}
