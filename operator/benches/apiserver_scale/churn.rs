//! One size of the churn run, with its two baselines in the same run:
//!
//! * the plain client: a merge patch of one annotation (a view's size) on
//!   every pod, the operator's default `--write-concurrency`
//!   at a time ([`populate::annotate_every_pod`]), until the watch has
//!   delivered every pod with it — against the operator's time from the
//!   group's creation until the watch has delivered every pod annotated;
//! * the floor: a client that does no work. Per churn event it makes the
//!   same pod write (a create then the Ready status write; or a deletion),
//!   then PUTs a ConfigMap of the published document's size, and waits for
//!   the watch to deliver it — against the operator's time from the same
//!   pod write until the watch delivers its next document.
//!
//! Operator and floor events alternate, each after the namespace has been
//! quiet for a while and the group has no move in flight, so each document
//! is the one its event caused and neither competes with the other.
//!
//! `SHARDRING_BENCH_EVENTS=<file>` appends one line per event there: its
//! number, join or leave, the wall-clock time its pod write began (to match
//! the operator's log of `SHARDRING_BENCH_LOG`), and the operator's and the
//! floor's latency in ms.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;
use shardring_devkit::fixtures;

use crate::common;
use crate::operator::Operator;
use crate::populate::{self, pod_event};
use crate::server::Server;
use crate::timeline::Timeline;

/// Pod joins and leaves per size: enough that the p99 is not simply the
/// slowest event.
const CHURN_EVENTS: usize = 100;
/// The operator's annotation key for group `g`.
const ANNOTATION: &str = "assignment.shardring.io/g";
/// The plain client's annotation key.
const PLAIN: &str = "bench.shardring.io/plain";
/// The document's ConfigMap.
const DOCUMENT: &str = "g-assignment";
/// The floor's ConfigMap.
const FLOOR: &str = "floor";
/// How long nothing may change before the next event.
const QUIET: Duration = Duration::from_millis(300);
/// How long the steady state is watched for writes.
const STEADY: Duration = Duration::from_secs(20);
/// The longest wait for one event's document.
const EVENT_DEADLINE: Duration = Duration::from_secs(30);

/// What one run of one size measured.
#[derive(Debug, Clone)]
pub struct Row {
    /// Pods and shards.
    pub size: String,
    /// The plain client's time to annotate every pod.
    pub plain: Duration,
    /// Group created → the first document delivered.
    pub first_publish: Duration,
    /// Group created → every pod delivered annotated.
    pub annotations: Duration,
    /// The floor's event → document delivered, p50 and p99.
    pub floor: (Duration, Duration),
    /// The operator's event → document delivered, p50 and p99.
    pub operator: (Duration, Duration),
    /// Operator events with no document within [`EVENT_DEADLINE`].
    pub missed: usize,
    /// Write requests the operator counted per churn event.
    pub writes_per_event: f64,
    /// At steady state, over [`STEADY`]: write requests the operator
    /// counted, and changes the watches delivered.
    pub steady: (u64, u64),
    /// Peak RSS after the first publish and after churn, MiB.
    pub rss: (f64, f64),
    /// Every annotation written, as a multiple of the plain client's time.
    pub annotation_ratio: f64,
    /// The operator's p99 as a multiple of the floor's.
    pub p99_ratio: f64,
}

/// One run at `pods` pods and `shards` static shards; `extra` goes to
/// `shardring run`.
pub async fn run(server: &Server, pods: usize, shards: u32, run: usize, extra: &[String]) -> Row {
    populate::remove_namespaces(server, "churn").await;
    let client = &server.client;
    let ns = format!("scale-{pods}-{run}");
    populate::create(client, &populate::namespace(&ns, "churn")).await;
    populate::create(client, &fixtures::pool(&ns, "p", "consumer")).await;
    let names: Vec<String> = (0..pods).map(|i| format!("c-{i}")).collect();
    let setup = Instant::now();
    populate::ready_pods(server, &ns, &names, "consumer").await;
    eprintln!(
        "bench: {pods} Ready pods in {ns} in {:.1} s",
        setup.elapsed().as_secs_f64()
    );
    let timeline = Timeline::namespace(client, &ns, &[ANNOTATION, PLAIN]).await;
    let operator = Operator::spawn(&server.kubeconfig, Some(&ns), &ns, extra);
    operator.ready(Duration::from_secs(120)).await;

    let view = view_sized(shards as usize / pods.max(1));
    let plain = plain_client(client, &ns, &names, &view, &timeline).await;

    // The group appears with the operator running: its first publish is
    // what a new group costs.
    let started = Instant::now();
    populate::create(client, &fixtures::static_group(&ns, "g", "p", shards)).await;
    let (first, _) = timeline
        .config_map_change(DOCUMENT, started, Duration::from_secs(120))
        .await
        .expect("the first publish");
    let last = timeline
        .all_annotated(ANNOTATION, pods, Duration::from_secs(600))
        .await
        .expect("every pod annotated");
    let rss_first = operator.peak_rss_mib();

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut floor = Floor::new(client, &ns);
    let mut event_log = EventLog::from_env();
    let (mut ours, mut theirs, mut missed, mut writes) = (Vec::new(), Vec::new(), 0, 0);
    for k in 0..CHURN_EVENTS {
        let join = k % 2 == 0;
        // The operator's event.
        settle(&timeline, &ns).await;
        let before = operator.writes();
        let t0 = pod_event(
            client,
            &pods_api,
            &ns,
            "j",
            k,
            join,
            "consumer",
            async || {
                settle(&timeline, &ns).await;
            },
        )
        .await;
        let wall = wall_clock_of(t0);
        let latency = timeline
            .config_map_change(DOCUMENT, t0, EVENT_DEADLINE)
            .await
            .map(|(at, _)| at - t0);
        match latency {
            Some(latency) => ours.push(latency),
            None => missed += 1,
        }
        settle(&timeline, &ns).await;
        writes += operator.writes().saturating_sub(before);
        // The floor's.
        let t0 = pod_event(client, &pods_api, &ns, "f", k, join, "floor", async || {
            settle(&timeline, &ns).await;
        })
        .await;
        let version = floor.put(&timeline, k).await;
        let at = timeline
            .config_map_at(FLOOR, &version, EVENT_DEADLINE)
            .await
            .expect("the floor's ConfigMap delivered");
        theirs.push(at - t0);
        event_log.write(k, join, wall, latency, at - t0);
    }
    let rss_churn = operator.peak_rss_mib();

    settle(&timeline, &ns).await;
    let (writes_before, changes_before) = (operator.writes(), timeline.lock().changes);
    tokio::time::sleep(STEADY).await;
    let steady = (
        operator.writes().saturating_sub(writes_before),
        timeline.lock().changes - changes_before,
    );
    drop(operator);
    let (floor, operator) = (percentiles(theirs), percentiles(ours));
    Row {
        size: format!("{pods} pods / {shards} shards"),
        plain,
        first_publish: first - started,
        annotations: last - started,
        floor,
        operator,
        annotation_ratio: (last - started).as_secs_f64() / plain.as_secs_f64(),
        p99_ratio: operator.1.as_secs_f64() / floor.1.as_secs_f64(),
        missed,
        writes_per_event: writes as f64 / CHURN_EVENTS as f64,
        steady,
        rss: (rss_first, rss_churn),
    }
}

/// A pod annotation value of a view with `shards` shards.
fn view_sized(shards: usize) -> String {
    let active: Vec<String> = (0..shards).map(|i| format!("g-{i}")).collect();
    json!({"epoch": 1, "active": active}).to_string()
}

/// The plain client: annotates every pod once, as the operator would
/// ([`populate::annotate_every_pod`]); the time until the watch delivered
/// the last.
async fn plain_client(
    client: &kube::Client,
    ns: &str,
    names: &[String],
    view: &str,
    timeline: &Timeline,
) -> Duration {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {PLAIN: view}}});
    let started = Instant::now();
    populate::annotate_every_pod(&api, names, &patch).await;
    let last = timeline
        .all_annotated(PLAIN, names.len(), Duration::from_secs(600))
        .await
        .expect("the plain client's writes delivered");
    last - started
}

/// Waits until group `g` has no move in flight, its status is at the epoch
/// of the document the watch delivered last (the two watches deliver in no
/// particular order with each other), and nothing in the namespace changed
/// for [`QUIET`]: a minute at most, then goes on with a warning.
async fn settle(timeline: &Timeline, ns: &str) {
    let key = (ns.to_owned(), "g".to_owned());
    let started = Instant::now();
    // The epoch of the last document decoded, by its resourceVersion.
    let mut decoded: Option<(String, u64)> = None;
    loop {
        let (group, document, quiet) = {
            let s = timeline.lock();
            (
                s.groups.get(&key).cloned(),
                s.latest.get(DOCUMENT).cloned(),
                s.last_change.is_none_or(|at| at.elapsed() >= QUIET),
            )
        };
        let epoch = document.map(|cm| {
            let version = cm.metadata.resource_version.clone().unwrap_or_default();
            match &decoded {
                Some((v, epoch)) if *v == version => *epoch,
                _ => {
                    let epoch = shardring_core::codec::decode(&cm).map_or(0, |d| d.epoch);
                    decoded = Some((version, epoch));
                    epoch
                }
            }
        });
        let group_done = match (&group, epoch) {
            (Some(g), Some(epoch)) => g.moves_in_flight == 0 && g.epoch == epoch,
            // Before the group exists only quiet counts.
            (None, None) => true,
            _ => false,
        };
        if quiet && group_done {
            return;
        }
        if started.elapsed() > Duration::from_secs(60) {
            eprintln!(
                "bench: the namespace did not settle within 60 s (group {group:?}, document epoch {epoch:?}); going on"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The floor's ConfigMap: each write carries the published document's
/// current payload (its exact size) and the event's number.
struct Floor {
    api: Api<ConfigMap>,
    version: Option<String>,
}

impl Floor {
    fn new(client: &kube::Client, ns: &str) -> Self {
        Self {
            api: Api::namespaced(client.clone(), ns),
            version: None,
        }
    }

    /// Writes event `k`'s ConfigMap (a create the first time, then a PUT
    /// conditioned on the version it wrote last) and returns the new version.
    async fn put(&mut self, timeline: &Timeline, k: usize) -> String {
        let document = timeline
            .lock()
            .latest
            .get(DOCUMENT)
            .cloned()
            .expect("a published document to copy");
        let mut data: BTreeMap<String, String> = document.data.clone().unwrap_or_default();
        data.insert("event".into(), k.to_string());
        let binary_data: Option<BTreeMap<String, ByteString>> = document.binary_data.clone();
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(FLOOR.into()),
                resource_version: self.version.clone(),
                ..Default::default()
            },
            data: Some(data),
            binary_data,
            ..Default::default()
        };
        let written = match &self.version {
            None => self.api.create(&PostParams::default(), &cm).await,
            Some(_) => self.api.replace(FLOOR, &PostParams::default(), &cm).await,
        }
        .expect("the floor's ConfigMap write");
        let version = written
            .metadata
            .resource_version
            .expect("a resourceVersion");
        self.version = Some(version.clone());
        version
    }
}

/// The wall-clock time of `at` (to match an operator's log).
pub(crate) fn wall_clock_of(at: Instant) -> jiff::Timestamp {
    jiff::Timestamp::now() - jiff::SignedDuration::try_from(at.elapsed()).expect("a short time ago")
}

/// The per-event lines of `SHARDRING_BENCH_EVENTS`, when it is set.
pub(crate) struct EventLog(Option<std::fs::File>);

impl EventLog {
    pub(crate) fn from_env() -> Self {
        Self(std::env::var_os("SHARDRING_BENCH_EVENTS").map(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the SHARDRING_BENCH_EVENTS file")
        }))
    }

    pub(crate) fn write(
        &mut self,
        k: usize,
        join: bool,
        wall: jiff::Timestamp,
        operator: Option<Duration>,
        floor: Duration,
    ) {
        use std::io::Write as _;
        let Some(file) = &mut self.0 else { return };
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
        writeln!(
            file,
            "{k} {} {wall} operator {} floor {}",
            if join { "join" } else { "leave" },
            operator.map_or_else(|| "missed".into(), ms),
            ms(floor),
        )
        .expect("write the SHARDRING_BENCH_EVENTS file");
    }
}

/// The p50 and p99 of `latencies`.
pub(crate) fn percentiles(mut latencies: Vec<Duration>) -> (Duration, Duration) {
    latencies.sort();
    (
        common::percentile(&latencies, 0.5),
        common::percentile(&latencies, 0.99),
    )
}
