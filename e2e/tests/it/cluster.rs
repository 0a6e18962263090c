//! End-to-end test of the operator core against a real cluster reachable
//! through KUBECONFIG (kind, k3d, EKS, ...): the CRDs applied and Established,
//! the committed samples (`config/samples/consumerpool.yaml` and
//! `shardgroup-static.yaml`) applied in a fresh namespace, consumer pods that
//! are never scheduled (a scheduling gate) but marked Ready through their
//! status, and the operator running (in-process by default); then the
//! published ConfigMap, every pod's annotation and `Ready=True`; a deleted
//! pod's shards move to the others and nothing else moves; deleting the
//! ShardGroup strips the annotations. Without a cluster it prints
//! `SKIPPED: ...` and passes. See docs/e2e.md.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shardring_crds::assignment::CONFIGMAP_SUFFIX;
use shardring_crds::{AssignmentDocument, ConsumerPool, ShardGroup};
use shardring_e2e::cluster::SKIP_MESSAGE;
use shardring_e2e::consumers::{SCHEDULING_GATE, ready_conditions};
use shardring_e2e::harness::{MANAGER, STEP_TIMEOUT};
use shardring_e2e::namespace::{apply_crds, create_namespace, delete_namespace, unique_namespace};
use shardring_e2e::{
    Operator, Probe, Reachability, assignment_document, connect, default_annotation_key, pod_view,
    wait_for,
};

use shardring_devkit::process::in_own_process;

/// Consumer pods created for the test.
const PODS: usize = 3;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The samples under test and what the checks derive from them.
struct Fixture {
    namespace: String,
    pool: ConsumerPool,
    group: ShardGroup,
    /// The ShardGroup's name.
    name: String,
    /// Its static partition count.
    shards: usize,
    /// Labels the pool selects (its `matchLabels`).
    pod_labels: BTreeMap<String, String>,
    config_map: String,
    annotation_key: String,
}

impl Fixture {
    /// Reads the committed samples and places them in `namespace`.
    fn from_samples(namespace: &str) -> TestResult<Self> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/samples");
        let read = |file: &str| -> TestResult<String> {
            std::fs::read_to_string(dir.join(file)).map_err(|e| format!("{file}: {e}").into())
        };
        let mut pool: ConsumerPool = serde_yaml_from(&read("consumerpool.yaml")?)?;
        let mut group: ShardGroup = serde_yaml_from(&read("shardgroup-static.yaml")?)?;
        pool.metadata.namespace = Some(namespace.to_owned());
        group.metadata.namespace = Some(namespace.to_owned());
        // Served by the suite's operator only, never by one installed in the cluster.
        group.labels_mut().insert(
            shardring_crds::CONTROLLER_CLASS_LABEL.to_owned(),
            shardring_e2e::harness::CONTROLLER_CLASS.to_owned(),
        );
        let name = group.name_any();
        let shards = group
            .spec
            .source
            .static_source
            .as_ref()
            .ok_or("shardgroup-static.yaml has no static source")?
            .count as usize;
        let pod_labels = pool
            .spec
            .selector
            .match_labels
            .clone()
            .filter(|labels| !labels.is_empty())
            .ok_or("consumerpool.yaml must select pods by matchLabels")?;
        let config_map = group
            .spec
            .output
            .config_map_name
            .clone()
            .unwrap_or_else(|| format!("{name}{CONFIGMAP_SUFFIX}"));
        let annotation_key = group
            .spec
            .output
            .annotation_key
            .clone()
            .unwrap_or_else(|| default_annotation_key(&name));
        Ok(Self {
            namespace: namespace.to_owned(),
            pool,
            group,
            name,
            shards,
            pod_labels,
            config_map,
            annotation_key,
        })
    }
}

/// YAML through JSON, so the typed API structs parse exactly as from the API server.
fn serde_yaml_from<T: serde::de::DeserializeOwned>(text: &str) -> TestResult<T> {
    let value: serde_json::Value = serde_yaml::from_str(text)?;
    Ok(serde_json::from_value(value)?)
}

#[tokio::test]
async fn publishes_assignment_and_rebalances_on_a_real_cluster() {
    let client = match connect().await {
        Reachability::Reachable { client, version } => {
            eprintln!("e2e: cluster reachable, Kubernetes {version}");
            client
        }
        Reachability::Unreachable(reason) => {
            // Written to stderr directly (not `eprintln!`) so the line shows
            // even though the test harness captures output of passing tests.
            let _ = writeln!(std::io::stderr(), "{SKIP_MESSAGE} ({reason})");
            return;
        }
    };
    let _turn = crate::TURNS.read().await;
    let namespace = unique_namespace("cluster");
    let result = match Fixture::from_samples(&namespace) {
        Ok(fixture) => scenario(&client, &fixture).await,
        Err(error) => Err(error),
    };
    let cleanup = delete_namespace(&client, &namespace).await;
    if let Err(error) = result {
        panic!("e2e scenario failed in namespace {namespace}: {error}");
    }
    if let Err(error) = cleanup {
        panic!("e2e cleanup of namespace {namespace} failed: {error}");
    }
}

async fn scenario(client: &Client, fx: &Fixture) -> TestResult {
    apply_crds(client).await?;
    create_namespace(client, &fx.namespace).await?;
    let params = PatchParams::apply(MANAGER).force();
    Api::<ConsumerPool>::namespaced(client.clone(), &fx.namespace)
        .patch(&fx.pool.name_any(), &params, &Patch::Apply(&fx.pool))
        .await?;
    Api::<ShardGroup>::namespaced(client.clone(), &fx.namespace)
        .patch(&fx.name, &params, &Patch::Apply(&fx.group))
        .await?;
    let mut pods: Vec<String> = (0..PODS).map(|i| format!("consumer-{i}")).collect();
    for pod in &pods {
        create_ready_pod(client, fx, pod).await?;
    }

    // Scoped to the test's namespace so it cannot touch anything else.
    let mut operator = Operator::start(
        &shardring_e2e::cluster::Cluster::from_environment(client.clone()),
        &fx.namespace,
        shardring_e2e::harness::REGION,
        shardring_e2e::operator::OperatorMode::from_env()?,
    )
    .await?;
    let first = wait_for_assignment(client, fx, &pods, &mut operator).await?;
    wait_for_annotations(client, fx, &pods, first.epoch).await?;
    wait_for_ready(client, fx).await?;
    eprintln!(
        "e2e: epoch {} published to {} pods",
        first.epoch,
        pods.len()
    );

    // One pod leaves: its shards must move to the others, nothing else.
    let leaving = pods.pop().ok_or("no pods")?;
    let owners: BTreeMap<String, String> = first
        .shards
        .iter()
        .filter_map(|(shard, record)| record.owner.clone().map(|o| (shard.clone(), o)))
        .collect();
    Api::<Pod>::namespaced(client.clone(), &fx.namespace)
        .delete(&leaving, &DeleteParams::default())
        .await?;
    let second = wait_for_assignment(client, fx, &pods, &mut operator).await?;
    if second.epoch <= first.epoch {
        return Err(format!(
            "epoch did not increase: {} -> {}",
            first.epoch, second.epoch
        )
        .into());
    }
    for (shard, owner) in &owners {
        let now = second
            .shards
            .get(shard)
            .and_then(|record| record.owner.as_deref());
        if owner != &leaving && now != Some(owner.as_str()) {
            return Err(format!(
                "shard {shard} moved from {owner} to {now:?} although {owner} stayed"
            )
            .into());
        }
    }
    wait_for_annotations(client, fx, &pods, second.epoch).await?;
    wait_for_ready(client, fx).await?;
    eprintln!(
        "e2e: after {leaving} left, epoch {} spreads {} shards over {} pods",
        second.epoch,
        fx.shards,
        pods.len()
    );

    // Deleting the ShardGroup runs its finalizer: annotations are stripped.
    let groups = Api::<ShardGroup>::namespaced(client.clone(), &fx.namespace);
    groups.delete(&fx.name, &DeleteParams::default()).await?;
    wait_for(
        &format!("ShardGroup {} to be deleted", fx.name),
        STEP_TIMEOUT,
        || async {
            Ok::<_, kube::Error>(match groups.get_opt(&fx.name).await? {
                None => Probe::Done(()),
                Some(group) => Probe::Pending(format!("finalizers {:?}", group.finalizers())),
            })
        },
    )
    .await?;
    wait_for_no_annotations(client, fx, &pods).await?;
    operator.stop().await?;
    Ok(())
}

/// Creates a pod the scheduler never binds (a scheduling gate), then marks it
/// Running and Ready through the status subresource, as a kubelet would.
async fn create_ready_pod(client: &Client, fx: &Fixture, name: &str) -> TestResult {
    let pods = Api::<Pod>::namespaced(client.clone(), &fx.namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": fx.pod_labels},
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [{"name": "consumer", "image": "registry.k8s.io/pause:3.10"}]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = json!({"status": {"phase": "Running", "conditions": ready_conditions(&now)}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Waits until the ConfigMap holds a document in which exactly `pods` hold
/// every shard, each shard active on exactly one of them, balanced within one.
async fn wait_for_assignment(
    client: &Client,
    fx: &Fixture,
    pods: &[String],
    operator: &mut Operator,
) -> TestResult<AssignmentDocument> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &fx.namespace);
    let expected: BTreeSet<&str> = pods.iter().map(String::as_str).collect();
    let what = format!(
        "ConfigMap {} to assign {} shards to {pods:?}",
        fx.config_map, fx.shards
    );
    let doc = wait_for(&what, STEP_TIMEOUT, || {
        let alive = operator.check_running();
        let config_maps = config_maps.clone();
        let expected = expected.clone();
        async move {
            alive?;
            let Some(cm) = config_maps.get_opt(&fx.config_map).await? else {
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Probe::Pending(
                    "no ConfigMap".into(),
                ));
            };
            let doc = assignment_document(&cm)?;
            Ok(match check_document(&doc, &expected, fx.shards) {
                Ok(()) => Probe::Done(doc),
                Err(problem) => Probe::Pending(format!("epoch {}: {problem}", doc.epoch)),
            })
        }
    })
    .await?;
    Ok(doc)
}

/// Every shard active on exactly one expected pod, loads within one.
fn check_document(
    doc: &AssignmentDocument,
    expected: &BTreeSet<&str>,
    shards: usize,
) -> Result<(), String> {
    let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
    let mut loads: BTreeMap<&str, usize> = expected.iter().map(|pod| (*pod, 0)).collect();
    for (pod, assignment) in &doc.pods {
        if !assignment.active.is_empty() && !expected.contains(pod.as_str()) {
            return Err(format!(
                "pod {pod} is not in the pool but holds {:?}",
                assignment.active
            ));
        }
        if !assignment.revoking.is_empty() {
            return Err(format!(
                "pod {pod} is still revoking {:?}",
                assignment.revoking
            ));
        }
        for shard in &assignment.active {
            if let Some(other) = owners.insert(shard, pod) {
                return Err(format!("shard {shard} is active on both {other} and {pod}"));
            }
            *loads.entry(pod).or_default() += 1;
        }
    }
    if owners.len() != shards {
        return Err(format!("{} of {shards} shards active", owners.len()));
    }
    let (min, max) = (loads.values().min().copied(), loads.values().max().copied());
    match (min, max) {
        (Some(min), Some(max)) if max - min <= 1 => Ok(()),
        _ => Err(format!("unbalanced loads {loads:?}")),
    }
}

/// Waits until each pod's annotation carries at least `epoch` and, together,
/// the views cover every shard.
async fn wait_for_annotations(
    client: &Client,
    fx: &Fixture,
    pods: &[String],
    epoch: u64,
) -> TestResult {
    let api = Api::<Pod>::namespaced(client.clone(), &fx.namespace);
    wait_for(
        &format!("annotations at epoch >= {epoch} on {pods:?}"),
        STEP_TIMEOUT,
        || async {
            let mut active = BTreeSet::new();
            for name in pods {
                let pod = api.get(name).await?;
                match pod_view(&pod, &fx.annotation_key)? {
                    Some(view) if view.epoch >= epoch => active.extend(view.active),
                    Some(view) => {
                        return Ok(Probe::Pending(format!("{name} at epoch {}", view.epoch)));
                    }
                    None => return Ok(Probe::Pending(format!("{name} has no annotation"))),
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(if active.len() == fx.shards {
                Probe::Done(())
            } else {
                Probe::Pending(format!(
                    "views cover {} of {} shards",
                    active.len(),
                    fx.shards
                ))
            })
        },
    )
    .await?;
    Ok(())
}

/// Waits for the ShardGroup's `Ready` condition to be `True` for its current generation.
async fn wait_for_ready(client: &Client, fx: &Fixture) -> TestResult {
    let api = Api::<ShardGroup>::namespaced(client.clone(), &fx.namespace);
    wait_for(
        &format!("ShardGroup {} Ready=True", fx.name),
        STEP_TIMEOUT,
        || async {
            let group = api.get(&fx.name).await?;
            let status = group.status.as_ref();
            let ready = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
            let observed = status.and_then(|s| s.observed_generation);
            Ok::<_, kube::Error>(match ready {
                Some(c) if c.status == "True" && observed == group.metadata.generation => {
                    Probe::Done(())
                }
                Some(c) => {
                    Probe::Pending(format!("Ready={} ({}: {})", c.status, c.reason, c.message))
                }
                None => Probe::Pending("no Ready condition".into()),
            })
        },
    )
    .await?;
    Ok(())
}

/// Waits until none of `pods` carries the group's annotation.
async fn wait_for_no_annotations(client: &Client, fx: &Fixture, pods: &[String]) -> TestResult {
    let api = Api::<Pod>::namespaced(client.clone(), &fx.namespace);
    wait_for("annotations to be removed", STEP_TIMEOUT, || async {
        for name in pods {
            if pod_view(&api.get(name).await?, &fx.annotation_key)?.is_some() {
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Probe::Pending(format!(
                    "{name} still annotated"
                )));
            }
        }
        Ok(Probe::Done(()))
    })
    .await?;
    Ok(())
}

/// The committed samples parse and fit this test (a static source, pods
/// selected by labels): checked without a cluster, so a sample change that
/// would break the e2e test fails everywhere.
#[test]
fn samples_fit_the_e2e_test() {
    let fx = Fixture::from_samples("e2e").unwrap();
    assert!(
        fx.shards >= PODS,
        "the static sample should have at least {PODS} partitions"
    );
    assert_eq!(
        fx.group.spec.pool_ref.name,
        fx.pool.name_any(),
        "the sample ShardGroup must use the sample pool"
    );
    assert!(!fx.pod_labels.is_empty());
}

/// `connect` builds its client over TLS as it does for any real cluster: a
/// process that has not installed a rustls crypto provider must still reach
/// the API server. In a process of its own: other tests of this binary
/// install one.
#[tokio::test]
async fn connect_reaches_an_api_server_over_tls() {
    if !in_own_process(module_path!(), "connect_reaches_an_api_server_over_tls") {
        return;
    }
    let mock = shardring_devkit::apiserver::MockApiServer::start(Default::default()).await;
    match shardring_e2e::cluster::connect_with(mock.kube_config().await).await {
        Reachability::Reachable { version, .. } => {
            assert!(version.contains("shardring-mock"), "{version}")
        }
        Reachability::Unreachable(reason) => panic!("the TLS API server was not reached: {reason}"),
    }
}
