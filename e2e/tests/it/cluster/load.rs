//! Balance by throughput on a real cluster: the sample ShardGroup
//! `shardgroup-throughput.yaml` (twelve static partitions, `balance:
//! throughput`, a scaling target) on the kit's API server, with the
//! operator (either mode) serving its endpoint on loopback. Each of three
//! pods runs the consumer crate's pieces as a consumer would — the
//! endpoint's view, the static-partition worker acknowledging releases, a
//! load reporter — with a token bound to its pod (a TokenRequest, checked by
//! a real TokenReview). The workload is skewed: two partitions of one pod
//! turn hot (ten times the bytes). The assignment rebalances by load through
//! acknowledged handoffs back into the ±10 % band; the API server's own
//! table (`kubectl get sg`) shows the spread and `recommendedReplicas`,
//! which followed the load; the committed HPA recipe is accepted by the API
//! server and would ask for exactly that many replicas; a pod deleted
//! gracefully (a scale-down) hands its partitions over on acknowledgements,
//! far inside the drain timeout; and no partition was ever processed by two
//! pods at once.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;
use shardring_consumer::partitions::{
    PartitionConfig, PartitionContext, PartitionHandler, PartitionReport, PartitionWorker,
};
use shardring_consumer::view::{
    self,
    endpoint::{EndpointClient, EndpointSource, LoadMeter, LoadReporter, ReleaseSender},
};
use shardring_crds::{AssignmentDocument, ShardGroup};
use shardring_e2e::cluster::cluster_or_skip;
use shardring_e2e::consumers::{SCHEDULING_GATE, ready_conditions};
use shardring_e2e::harness::{MANAGER, STEP_TIMEOUT};
use shardring_e2e::namespace::{delete_namespace, unique_namespace};
use shardring_e2e::{Operator, Probe, assignment_document, wait_for};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::endpoint::{ca_file, endpoint_client};
use super::fixture::Fixture;
use super::operator_cluster;
use super::{TestResult, apply_fixture};

/// Bytes per second of a partition at rest, and of a hot one.
const COLD: u64 = 64 * 1024;
const HOT: u64 = 10 * COLD;
/// The scaling target of the test (KB/s per pod): 12 cold partitions want
/// 2 pods, two of them hot 4.
const TARGET_KBPS: u64 = 512;
/// How long one batch of the simulated reader takes, in milliseconds.
const BATCH_MS: u64 = 50;
const BATCH: Duration = Duration::from_millis(BATCH_MS);
/// Keeps a deleted pod terminating until its consumer has let go.
const FINALIZER: &str = "e2e.shardring.io/consumer-running";

#[tokio::test]
async fn balances_by_load_and_recommends_replicas_on_a_real_cluster() {
    let _turn = crate::TURNS.read().await;
    let _kit_turn = shardring_e2e::kit::KitTurn::shared().await;
    let Some(client) = cluster_or_skip("cluster-load").await else {
        return;
    };
    let namespace = unique_namespace("load");
    let result = match Fixture::from_sample_group(&namespace, "shardgroup-throughput.yaml") {
        Ok(fixture) => Box::pin(scenario(&client, fixture)).await,
        Err(error) => Err(error),
    };
    // Finalizers the scenario may have left would keep the namespace.
    let _ = strip_finalizers(&client, &namespace).await;
    let cleanup = delete_namespace(&client, &namespace).await;
    if let Err(error) = result {
        panic!("e2e load scenario failed in namespace {namespace}: {error}");
    }
    if let Err(error) = cleanup {
        panic!("e2e cleanup of namespace {namespace} failed: {error}");
    }
}

/// What the simulated consumers did: which partitions are hot, and every
/// batch each pod processed (partition, pod, start, end).
#[derive(Default)]
struct Workload {
    hot: Mutex<BTreeSet<String>>,
    batches: Mutex<Vec<(String, String, Instant, Instant)>>,
}

impl Workload {
    fn rate(&self, partition: &str) -> u64 {
        let hot = self.hot.lock();
        if hot.contains(partition) { HOT } else { COLD }
    }

    /// Partitions processed by two pods at overlapping times.
    fn overlaps(&self) -> Vec<String> {
        let batches = self.batches.lock();
        let mut by_partition: BTreeMap<&str, Vec<(&str, Instant, Instant)>> = BTreeMap::new();
        for (partition, pod, start, end) in batches.iter() {
            by_partition
                .entry(partition)
                .or_default()
                .push((pod, *start, *end));
        }
        let mut out = Vec::new();
        for (partition, mut list) in by_partition {
            list.sort_by_key(|(_, start, _)| *start);
            for pair in list.windows(2) {
                let ((a, _, a_end), (b, b_start, _)) = (pair[0], pair[1]);
                if a != b && b_start < a_end {
                    out.push(format!("{partition}: {a} and {b}"));
                }
            }
        }
        out
    }
}

/// Reads a partition at its rate: each batch takes [`BATCH`] and carries
/// the bytes the partition produces meanwhile.
struct Simulated {
    pod: String,
    workload: Arc<Workload>,
    meter: LoadMeter,
}

impl PartitionHandler for Simulated {
    async fn process(
        &self,
        context: &PartitionContext,
        checkpoint: Option<&str>,
    ) -> anyhow::Result<Option<String>> {
        let start = Instant::now();
        tokio::time::sleep(BATCH).await;
        let bytes = self.workload.rate(&context.partition) * BATCH_MS / 1000;
        self.meter.record(&context.partition, bytes, 1);
        self.workload.batches.lock().push((
            context.partition.clone(),
            self.pod.clone(),
            start,
            Instant::now(),
        ));
        let next = checkpoint
            .and_then(|c| c.parse::<u64>().ok())
            .map_or(0, |n| n + 1);
        Ok(Some(next.to_string()))
    }
}

/// One pod's consumer: the endpoint's view, the worker with release
/// acknowledgements, and a load reporter every second.
fn consumer(
    client: EndpointClient,
    fx: &Fixture,
    pod: &str,
    workload: Arc<Workload>,
    shutdown: CancellationToken,
) -> JoinHandle<PartitionReport> {
    let (namespace, group, pod) = (fx.namespace.clone(), fx.name.clone(), pod.to_owned());
    tokio::spawn(async move {
        let (publisher, assignment) = view::channel();
        let source = EndpointSource {
            client: client.clone(),
            namespace: namespace.clone(),
            group: group.clone(),
            wait: Duration::from_secs(20),
        }
        .spawn(publisher);
        let meter = LoadMeter::default();
        let _reporter = LoadReporter::spawn(
            client.clone(),
            namespace.clone(),
            group.clone(),
            assignment.clone(),
            meter.clone(),
            Duration::from_secs(1),
        );
        let acks = ReleaseSender::spawn(client, namespace, group, assignment.clone());
        let handler = Arc::new(Simulated {
            pod: pod.clone(),
            workload,
            meter,
        });
        let config = PartitionConfig {
            tick: Duration::from_millis(100),
            idle: Duration::from_millis(50),
            drain_deadline: Duration::from_secs(20),
            ..PartitionConfig::new(pod)
        };
        let report = PartitionWorker::new(assignment, source.status.clone(), handler, config)
            .with_release_acks(acks)
            .run(shutdown.cancelled())
            .await;
        source.task.abort();
        report
    })
}

/// The sample, quick: eligible at once, a 2 s half-life, a 20 s damping
/// interval, no rebalance delay, the test's scaling target.
fn quick(fx: &mut Fixture) {
    fx.pool.spec.min_ready_seconds = 0;
    let spec = &mut fx.group.spec;
    let throughput = spec.throughput.get_or_insert_with(Default::default);
    throughput.half_life = "2s".into();
    throughput.damping_interval = "20s".into();
    throughput.stale_after = "30s".into();
    spec.rebalance.delay = "0s".into();
    if let Some(scaling) = spec.scaling.as_mut() {
        scaling.target_kbps_per_pod = Some(TARGET_KBPS);
        scaling.min_replicas = Some(1);
        scaling.max_replicas = Some(8);
    }
}

async fn scenario(client: &Client, mut fx: Fixture) -> TestResult {
    quick(&mut fx);
    let fx = &fx;
    apply_fixture(client, fx).await?;
    let mut pods: Vec<String> = (0..3).map(|i| format!("consumer-{i}")).collect();
    for pod in &pods {
        running_pod(client, fx, pod).await?;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut operator = Operator::start_with_endpoint(
        &operator_cluster(client, fx).await?,
        &fx.namespace,
        shardring_e2e::harness::REGION,
        shardring_e2e::operator::OperatorMode::from_env()?,
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    )
    .await?;
    let dir = std::env::temp_dir().join(format!("shardring-e2e-{}", fx.namespace));
    std::fs::create_dir_all(&dir)?;
    let ca = ca_file(client, fx, &dir).await?;
    let url = format!("https://127.0.0.1:{port}");
    let workload = Arc::new(Workload::default());
    let mut consumers = BTreeMap::new();
    for pod in &pods {
        let endpoint = endpoint_client(client, fx, &dir, &ca, &url, pod, "shardring.io").await?;
        let shutdown = CancellationToken::new();
        let task = consumer(endpoint, fx, pod, workload.clone(), shutdown.clone());
        consumers.insert(pod.clone(), (shutdown, task));
    }

    // Measured at rest: every partition, inside the band.
    let rest = wait_status(
        client,
        fx,
        &mut operator,
        "every partition measured at rest",
        |s| {
            let t = s.throughput.as_ref()?;
            (t.measured_shards == fx.shards as u64 && t.out_of_band_pods == 0 && settled_doc(s))
                .then_some(s.clone())
        },
    )
    .await?;
    let at_rest = rest.recommended_replicas.unwrap_or(0);
    eprintln!(
        "e2e[load]: at rest {} KB/s, spread {:?}, recommendedReplicas {at_rest}",
        rest.throughput.as_ref().map_or(0, |t| t.total_kbps),
        rest.throughput.as_ref().and_then(|t| t.spread.clone())
    );

    // Two partitions of consumer-0 turn hot.
    let doc = document(client, fx).await?;
    let hot: Vec<String> = doc
        .pods
        .get("consumer-0")
        .map(|p| p.active.iter().take(2).cloned().collect())
        .unwrap_or_default();
    if hot.len() < 2 {
        return Err(format!("consumer-0 holds too few partitions: {:?}", doc.pods).into());
    }
    workload.hot.lock().extend(hot.iter().cloned());
    let heated = Instant::now();
    eprintln!("e2e[load]: {} turn hot (10x)", hot.join(" and "));
    let rebalanced = wait_status(
        client,
        fx,
        &mut operator,
        "a load rebalance back inside the band",
        |s| {
            let t = s.throughput.as_ref()?;
            (t.last_rebalance.is_some()
                && t.out_of_band_pods == 0
                && t.measured_shards == fx.shards as u64
                && settled_doc(s))
            .then_some(s.clone())
        },
    )
    .await?;
    let took = heated.elapsed();
    let doc = document(client, fx).await?;
    let owners: BTreeSet<&str> = hot
        .iter()
        .filter_map(|s| doc.shards.get(s).and_then(|r| r.owner.as_deref()))
        .collect();
    let recommended = rebalanced.recommended_replicas.unwrap_or(0);
    let load = rebalanced.throughput.clone().unwrap_or_default();
    eprintln!(
        "e2e[load]: back inside the band {:.1} s after the hot keys: spread {:?}, {} KB/s, recommendedReplicas {recommended}, hot partitions on {owners:?}",
        took.as_secs_f64(),
        load.spread,
        load.total_kbps
    );
    if owners.len() != 2 {
        return Err(format!("the hot partitions share a pod: {owners:?}").into());
    }
    let expected = load
        .total_kbps
        .div_ceil(TARGET_KBPS)
        .clamp(1, fx.shards as u64);
    if u64::from(recommended) != expected || recommended <= at_rest {
        return Err(format!(
            "recommendedReplicas {recommended} (at rest {at_rest}) for {} KB/s at {TARGET_KBPS} KB/s per pod, expected {expected}",
            load.total_kbps
        )
        .into());
    }
    let rebalanced_event = events(client, fx, "LoadRebalanced").await?;
    eprintln!("e2e[load]: Event LoadRebalanced: {rebalanced_event}");

    // The API server's table: what `kubectl get sg` prints.
    let table = printed_table(client, fx).await?;
    eprintln!("e2e[load]: kubectl get sg\n{table}");
    let spread = load.spread.clone().unwrap_or_default();
    if !table.contains(&spread) || !table.contains(&format!(" {recommended} ")) {
        return Err(
            format!("the table does not show spread {spread} and {recommended}: {table}").into(),
        );
    }

    // The committed HPA recipe: accepted by the API server; with
    // AverageValue 1 it asks for ceil(metric ÷ 1) = the recommendation.
    let hpa = apply_hpa(client, fx).await?;
    eprintln!(
        "e2e[load]: HPA {hpa} accepted; it would scale to ceil({recommended} / 1) = {recommended} replicas"
    );

    // A scale-down: consumer-2 is deleted gracefully; its partitions are
    // revoked at once and handed over on its acknowledgements.
    let leaving = pods.pop().ok_or("no pods")?;
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), &fx.namespace)
        .delete(&leaving, &DeleteParams::default())
        .await?;
    wait_status(
        client,
        fx,
        &mut operator,
        "the deleted pod's partitions handed over",
        |s| {
            let doc = s.clone();
            settled_doc(&doc).then_some(())
        },
    )
    .await?;
    wait_for("the deleted pod to own nothing", STEP_TIMEOUT, || async {
        let doc = document(client, fx).await?;
        let owned = doc
            .shards
            .values()
            .filter(|r| r.owner.as_deref() == Some(leaving.as_str()))
            .count();
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(if owned == 0 {
            Probe::Done(())
        } else {
            Probe::Pending(format!("{owned} still on {leaving}"))
        })
    })
    .await?;
    let handed = deleted.elapsed();
    let drain = fx.group.spec.handoff.drain_timeout()?;
    eprintln!(
        "e2e[load]: {leaving}'s partitions handed over {:.0} ms after its deletion (drainTimeout {drain:?})",
        handed.as_secs_f64() * 1e3
    );
    if handed >= drain / 2 {
        return Err(format!(
            "the graceful scale-down took {handed:?} against a drain timeout of {drain:?}"
        )
        .into());
    }
    if let Some((shutdown, task)) = consumers.remove(&leaving) {
        shutdown.cancel();
        let _ = task.await;
    }
    release(client, fx, &leaving).await?;

    let overlaps = workload.overlaps();
    for (shutdown, task) in consumers.into_values() {
        shutdown.cancel();
        let _ = task.await;
    }
    operator.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    if !overlaps.is_empty() {
        return Err(format!("partitions processed by two pods at once: {overlaps:?}").into());
    }
    Ok(())
}

/// A Ready pod whose container runs (as a kubelet would report it), kept
/// terminating after a deletion until [`release`].
async fn running_pod(client: &Client, fx: &Fixture, name: &str) -> TestResult {
    let pods = Api::<Pod>::namespaced(client.clone(), &fx.namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": fx.pod_labels, "finalizers": [FINALIZER]},
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [{"name": "consumer", "image": "registry.k8s.io/pause:3.10"}]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = json!({"status": {
        "phase": "Running",
        "conditions": ready_conditions(&now),
        "containerStatuses": [{
            "name": "consumer", "ready": true, "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10", "imageID": "",
            "state": {"running": {"startedAt": now}}
        }]
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Drops the finalizer of `pod`: its deletion completes.
async fn release(client: &Client, fx: &Fixture, pod: &str) -> TestResult {
    let patch = json!({"metadata": {"finalizers": null}});
    Api::<Pod>::namespaced(client.clone(), &fx.namespace)
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn strip_finalizers(client: &Client, namespace: &str) -> TestResult {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let patch = json!({"metadata": {"finalizers": null}});
    for pod in pods.list(&ListParams::default()).await? {
        let _ = pods
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
    }
    Ok(())
}

async fn document(client: &Client, fx: &Fixture) -> TestResult<AssignmentDocument> {
    let map = Api::<ConfigMap>::namespaced(client.clone(), &fx.namespace)
        .get(&fx.config_map)
        .await?;
    Ok(assignment_document(&map)?)
}

/// No shard revoking or pending in the status's view of moves.
fn settled_doc(status: &shardring_crds::ShardGroupStatus) -> bool {
    status.moves_in_flight == 0 && status.shards.unassigned == 0
}

/// Waits until `check` finds what it looks for in the ShardGroup's status.
async fn wait_status<T>(
    client: &Client,
    fx: &Fixture,
    operator: &mut Operator,
    what: &str,
    check: impl Fn(&shardring_crds::ShardGroupStatus) -> Option<T>,
) -> TestResult<T> {
    let groups = Api::<ShardGroup>::namespaced(client.clone(), &fx.namespace);
    let found = wait_for(what, STEP_TIMEOUT, || {
        let alive = operator.check_running();
        let groups = groups.clone();
        let check = &check;
        async move {
            alive?;
            let group = groups.get(&fx.name).await?;
            let Some(status) = group.status.as_ref() else {
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Probe::Pending(
                    "no status".into(),
                ));
            };
            Ok(match check(status) {
                Some(found) => Probe::Done(found),
                None => Probe::Pending(format!(
                    "throughput {:?}, moves in flight {}, recommended {:?}",
                    status.throughput, status.moves_in_flight, status.recommended_replicas
                )),
            })
        }
    })
    .await?;
    Ok(found)
}

/// The newest Event of the group with `reason`, its message.
async fn events(client: &Client, fx: &Fixture, reason: &str) -> TestResult<String> {
    let api = Api::<Event>::namespaced(client.clone(), &fx.namespace);
    let found = wait_for(&format!("an Event {reason}"), STEP_TIMEOUT, || async {
        let list = api.list(&ListParams::default()).await?;
        let message = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.message.clone())
            .next_back();
        Ok::<_, kube::Error>(match message {
            Some(message) => Probe::Done(message),
            None => Probe::Pending("none yet".into()),
        })
    })
    .await?;
    Ok(found)
}

/// The ShardGroup as the API server prints it (its printer columns), the
/// table `kubectl get sg` shows.
async fn printed_table(client: &Client, fx: &Fixture) -> TestResult<String> {
    let request = http::Request::get(format!(
        "/apis/shardring.io/v1alpha1/namespaces/{}/shardgroups",
        fx.namespace
    ))
    .header(
        http::header::ACCEPT,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .body(Vec::new())?;
    let table: serde_json::Value = client.request(request).await?;
    let columns: Vec<String> = table["columnDefinitions"]
        .as_array()
        .ok_or("no columns")?
        .iter()
        .map(|c| c["name"].as_str().unwrap_or("").to_uppercase())
        .collect();
    let mut out = columns.join("  ");
    for row in table["rows"].as_array().ok_or("no rows")? {
        let cells: Vec<String> = row["cells"]
            .as_array()
            .ok_or("no cells")?
            .iter()
            .map(|c| match c {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        out.push('\n');
        out.push_str(&format!(" {} ", cells.join("  ")));
    }
    Ok(out)
}

/// Applies the committed HPA recipe in the namespace (its target named in
/// the recipe); returns its name.
async fn apply_hpa(client: &Client, fx: &Fixture) -> TestResult<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/samples/scaling/hpa.yaml");
    let text = std::fs::read_to_string(&path)?;
    let mut object: DynamicObject = serde_yaml_value(&text)?;
    object.metadata.namespace = Some(fx.namespace.clone());
    let gvk = GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler");
    let resource = ApiResource::from_gvk(&gvk);
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &fx.namespace, &resource);
    let name = object.name_any();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await?;
    let stored = api.get(&name).await?;
    let metric = &stored.data["spec"]["metrics"][0]["external"];
    if metric["metric"]["name"] != "shardring_recommended_replicas"
        || metric["target"]["type"] != "AverageValue"
    {
        return Err(format!("the stored HPA reads {metric}").into());
    }
    Ok(name)
}

fn serde_yaml_value<T: serde::de::DeserializeOwned>(text: &str) -> TestResult<T> {
    let value: serde_json::Value = serde_yaml::from_str(text)?;
    Ok(serde_json::from_value(value)?)
}
