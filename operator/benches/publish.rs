//! Scale bench of the plan+publish path: one ShardGroup of 20,000 static
//! shards over 5,000 pods, reconciled through the real `reconcile` function
//! (observe from reflector stores → plan → apply) against an in-process mock
//! API server that answers like the real one and counts every request.
//!
//! It reports the time of the first publish, of a no-op reconcile, and of one
//! pod-churn event (a pod leaves, a pod joins) with the write requests each
//! sends, the heap the stores hold and the peak heap of each step above it
//! (counted by this binary's allocator: what the operator's own data costs,
//! whatever the allocator keeps), plus the process's peak RSS (VmHWM). Run with
//! `cargo bench -p shardring --bench publish` (add `-- --pods N --shards M`
//! to change the scale).

mod common;

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use http::{Request, Response};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::ObjectMeta;
use kube::client::Body;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use shardring::controller::{CachedPod, Context, ControllerMetrics, PodRecords, Stores, reconcile};
use shardring::crds::FINALIZER;
use shardring::crds::{ConsumerPool, ShardGroup, ShardGroupStatus};
use shardring_crds::fixtures;

/// The system allocator, counting the bytes live and their peak.
#[global_allocator]
static ALLOCATOR: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Heap live now, and the peak since the last call (then reset to now).
fn heap() -> (usize, usize) {
    let peak = ALLOCATOR.peak_usage();
    ALLOCATOR.reset_peak_usage();
    (ALLOCATOR.current_usage(), peak)
}

const NS: &str = "bench";
const KEY: &str = "assignment.shardring.io/orders";

/// One request the mock server received.
struct Seen {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// An in-process API server: answers every request at once and logs it.
fn mock_client() -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let body = body.collect_bytes().await.unwrap().to_vec();
            let path = parts.uri.path().to_owned();
            let reply = if path.contains("/pods/") {
                let name = path.rsplit('/').next().unwrap();
                serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}})).unwrap()
            } else if path.ends_with("/status") {
                let status: Value = serde_json::from_slice(&body).unwrap();
                serde_json::to_vec(&json!({"apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup", "metadata": {"name": "orders", "namespace": NS}, "spec": group(1).spec, "status": status["status"]})).unwrap()
            } else {
                body.clone()
            };
            seen.lock().push(Seen {
                method: parts.method.to_string(),
                path,
                body,
            });
            send.send_response(
                Response::builder()
                    .status(200)
                    .body(Body::from(reply))
                    .unwrap(),
            );
        }
    });
    (Client::new(service, "default"), log)
}

fn group(shards: u32) -> ShardGroup {
    let mut g = fixtures::static_group(NS, "orders", "consumers", shards, "orders-{index}");
    g.metadata.uid = Some("bench-uid".into());
    g.metadata.finalizers = Some(vec![FINALIZER.into()]);
    // Balancing moves start at once (the default waits 30 s).
    g.spec.rebalance = fixtures::rebalance("0s");
    g
}

fn pool() -> ConsumerPool {
    fixtures::pool(NS, "consumers", &[("app", "consumer")], 0)
}

/// A Ready pod as the operator's cache holds it.
fn pod(name: &str) -> CachedPod {
    CachedPod::from(&Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(BTreeMap::from([("app".into(), "consumer".into())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-1".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time("2026-01-01T00:00:00Z".parse().unwrap())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    })
}

/// The mocked cluster: reflector stores as a synced watch fills them.
struct World {
    /// The simulated clock, milliseconds since the epoch.
    clock: Arc<AtomicI64>,
    group: ShardGroup,
    stores: Stores,
    /// The pods as the watch delivered them last, by name.
    pods: BTreeMap<String, CachedPod>,
    config_maps: Writer<ConfigMap>,
    _pools: Writer<DeserializeGuard<ConsumerPool>>,
    _nodes: Writer<PartialObjectMeta<Node>>,
}

impl World {
    fn new(pods: usize, shards: u32) -> Self {
        let (pool_reader, mut pool_writer) = reflector::store();
        pool_writer.apply_watcher_event(&watcher::Event::Apply(DeserializeGuard(Ok(pool()))));
        let pod_cache = PodRecords::default();
        let mut cached = BTreeMap::new();
        for i in 0..pods {
            let pod = pod(&format!("consumer-{i:05}"));
            pod_cache.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
            cached.insert(pod.metadata.name.clone().unwrap_or_default(), pod);
        }
        let (node_reader, node_writer) = reflector::store();
        let (cm_reader, cm_writer) = reflector::store();
        let start: jiff::Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        World {
            clock: Arc::new(AtomicI64::new(start.as_millisecond())),
            group: group(shards),
            stores: Stores {
                pools: pool_reader,
                pods: pod_cache,
                nodes: node_reader,
                config_maps: cm_reader,
                departed: Default::default(),
                documents: Default::default(),
                stateful_sets: reflector::store().0,
            },
            pods: cached,
            config_maps: cm_writer,
            _pools: pool_writer,
            _nodes: node_writer,
        }
    }

    /// Delivers a pod event to the cache, as the pod watch does.
    fn deliver(&mut self, event: &watcher::Event<CachedPod>) {
        self.stores.pods.apply_watcher_event(event);
        match event {
            watcher::Event::Apply(pod) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                self.pods.insert(name, pod.clone());
            }
            watcher::Event::Delete(pod) => {
                self.pods
                    .remove(pod.metadata.name.as_deref().unwrap_or_default());
            }
            _ => {}
        }
    }

    /// Folds the writes the mock server received back into the stores, as
    /// the watches would deliver them.
    fn absorb(&mut self, seen: &[Seen]) {
        for s in seen {
            // The pool's status (also `/status`) is not the group's.
            if s.path.contains("/shardgroups/") && s.path.ends_with("/status") {
                let body: Value = serde_json::from_slice(&s.body).unwrap();
                self.group.status = Some(
                    serde_json::from_value::<ShardGroupStatus>(body["status"].clone()).unwrap(),
                );
            } else if s.path.contains("/configmaps") {
                // The first publish is a create (POST .../configmaps), later
                // ones an apply (PATCH .../configmaps/<name>).
                let mut cm: ConfigMap = serde_json::from_slice(&s.body).unwrap();
                cm.metadata.namespace = Some(NS.into());
                cm.metadata.resource_version =
                    Some(format!("{}", self.clock.load(Ordering::SeqCst)));
                self.config_maps
                    .apply_watcher_event(&watcher::Event::Apply(cm));
            } else if s.path.contains("/pods/") {
                let name = s.path.rsplit('/').next().unwrap();
                let body: Value = serde_json::from_slice(&s.body).unwrap();
                let Some(current) = self.pods.get(name) else {
                    continue;
                };
                let mut pod = current.clone();
                let annotations = pod.metadata.annotations.get_or_insert_default();
                match body["metadata"]["annotations"][KEY].as_str() {
                    Some(value) => annotations.insert(KEY.into(), value.into()),
                    None => annotations.remove(KEY),
                };
                self.deliver(&watcher::Event::Apply(pod));
            }
        }
    }

    /// Moves the simulated clock forward.
    fn advance(&self, by: Duration) {
        self.clock.fetch_add(
            i64::try_from(by.as_millis()).expect("a bench step"),
            Ordering::SeqCst,
        );
    }

    /// The simulated time.
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(self.clock.load(Ordering::SeqCst)).unwrap()
    }

    /// One reconcile through a fresh mock server, one second after the last:
    /// its duration and requests.
    async fn reconcile(&mut self) -> (Duration, Vec<Seen>) {
        self.advance(Duration::from_secs(1));
        let (client, log) = mock_client();
        let clock = self.clock.clone();
        let ctx = Arc::new(
            Context::builder(client, ControllerMetrics::default())
                .publish_events(None)
                .clock(Arc::new(move || {
                    jiff::Timestamp::from_millisecond(clock.load(Ordering::SeqCst)).unwrap()
                }))
                .build(self.stores.clone()),
        );
        let started = Instant::now();
        reconcile(Arc::new(DeserializeGuard(Ok(self.group.clone()))), ctx)
            .await
            .expect("reconcile");
        let elapsed = started.elapsed();
        let seen = std::mem::take(&mut *log.lock());
        self.absorb(&seen);
        (elapsed, seen)
    }
}

fn counts(seen: &[Seen]) -> String {
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for s in seen {
        let kind = if s.path.ends_with("/status") {
            "status"
        } else if s.path.contains("/configmaps") {
            "configmap"
        } else if s.path.contains("/pods/") {
            "pod"
        } else if s.path.ends_with("/events") {
            "event"
        } else {
            "other"
        };
        *by_kind.entry(kind).or_default() += 1;
    }
    let writes = seen.iter().filter(|s| s.method != "GET").count();
    let detail: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "{writes} ({})",
        if detail.is_empty() {
            "none".into()
        } else {
            detail.join(", ")
        }
    )
}

fn peak_rss_mib() -> f64 {
    common::status_mib("self", "VmHWM:")
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let pods = arg("--pods", 5_000);
    let shards = u32::try_from(arg("--shards", 20_000)).expect("--shards fits in a u32");
    let rounds = arg("--rounds", 5);
    let mut world = World::new(pods, shards);
    let (stores_heap, _) = heap();
    let mut peaks: Vec<(&str, usize)> = Vec::new();
    println!("plan+publish bench: {pods} pods, {shards} static shards, mocked API server");
    println!(
        "{:<30} {:>10} {:>10}  write requests",
        "step", "median", "max"
    );

    let (first, seen) = world.reconcile().await;
    peaks.push(("first publish", heap().1));
    println!(
        "{:<30} {:>10} {:>10}  {}",
        "first publish",
        ms(first),
        ms(first),
        counts(&seen)
    );
    let cm_bytes = seen
        .iter()
        .find(|s| s.path.contains("/configmaps"))
        .map_or(0, |s| s.body.len());

    let mut noop = Vec::new();
    let mut noop_writes = String::new();
    for _ in 0..rounds {
        let (t, seen) = world.reconcile().await;
        noop.push(t);
        noop_writes = counts(&seen);
    }
    peaks.push(("no-op reconcile", heap().1));
    report("no-op reconcile", &mut noop, &noop_writes);

    // One pod leaves gracefully: it gets a deletion timestamp (its shards are
    // revoked at once), then its object goes (the revoke completes: the
    // shards become active on their new owners).
    let mut steps: Vec<(&str, Vec<Duration>, String)> = vec![
        ("leave: terminating (revoke)", Vec::new(), String::new()),
        ("leave: pod gone (activate)", Vec::new(), String::new()),
        ("join: new pod (revoke)", Vec::new(), String::new()),
        ("join: drained (activate)", Vec::new(), String::new()), // all looks until published
    ];
    for round in 0..rounds {
        let name = format!("consumer-{:05}", round * 7);
        let mut terminating = world.pods[&name].clone();
        terminating.metadata.deletion_timestamp = Some(Time(world.now()));
        terminating.metadata.deletion_grace_period_seconds = Some(30);
        world.deliver(&watcher::Event::Apply(terminating.clone()));
        let (t, seen) = world.reconcile().await;
        steps[0].1.push(t);
        steps[0].2 = counts(&seen);
        world.deliver(&watcher::Event::Delete(terminating));
        let (t, seen) = world.reconcile().await;
        steps[1].1.push(t);
        steps[1].2 = counts(&seen);

        // One pod joins: balancing moves revoke shards from their owners,
        // which (without a lease table) hand over after the drain timeout.
        world.deliver(&watcher::Event::Apply(pod(&format!("joiner-{round}"))));
        let (t, seen) = world.reconcile().await;
        steps[2].1.push(t);
        steps[2].2 = counts(&seen);
        // The handoff completes once the drain timeout (60 s) has passed
        // since the drain was recorded; look every 40 s until the document
        // changes (at most 5 looks), counting every request on the way.
        let mut all = Vec::new();
        let mut total = Duration::ZERO;
        let mut looks = 0;
        while looks < 5 {
            world.advance(Duration::from_secs(40));
            let (t, seen) = world.reconcile().await;
            total += t;
            looks += 1;
            let published = seen.iter().any(|s| s.path.contains("/configmaps"));
            all.extend(seen);
            if published {
                break;
            }
        }
        steps[3].1.push(total);
        steps[3].2 = format!("{} over {looks} reconciles", counts(&all));
    }
    peaks.push(("churn (leaves and joins)", heap().1));
    for (step, times, writes) in &mut steps {
        report(step, times, writes);
    }
    println!(
        "document in the ConfigMap apply body: {} KiB",
        cm_bytes / 1024
    );
    println!(
        "heap held by the stores ({pods} pods, pool, document after the first publish: see below): {:.1} MiB before the first reconcile",
        mib(stores_heap)
    );
    for (step, peak) in peaks {
        println!(
            "peak heap during {step}: {:.1} MiB ({:.1} MiB above the stores)",
            mib(peak),
            mib(peak.saturating_sub(stores_heap))
        );
    }
    println!(
        "heap live at the end: {:.1} MiB",
        mib(ALLOCATOR.current_usage())
    );
    println!("peak RSS (VmHWM): {:.1} MiB", peak_rss_mib());
}

fn report(step: &str, times: &mut [Duration], writes: &str) {
    times.sort();
    let median = times[times.len() / 2];
    let max = *times.last().unwrap();
    println!(
        "{:<30} {:>10} {:>10}  {}",
        step,
        ms(median),
        ms(max),
        writes
    );
}
