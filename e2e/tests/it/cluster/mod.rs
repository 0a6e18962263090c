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
//!
//! The samples and what the checks derive from them are in `fixture`, the
//! waits on what the operator published in `waits`; `connect` checks that
//! the suite reaches an API server over TLS.

mod connect;
mod endpoint;
mod fixture;
mod load;
mod waits;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shardring_crds::{ConsumerPool, ShardGroup};
use shardring_e2e::account;
use shardring_e2e::cluster::{Cluster, cluster_or_skip};
use shardring_e2e::consumers::{SCHEDULING_GATE, ready_conditions};
use shardring_e2e::harness::{MANAGER, STEP_TIMEOUT};
use shardring_e2e::namespace::{apply_crds, create_namespace, delete_namespace, unique_namespace};
use shardring_e2e::{Operator, Probe, wait_for};

use self::fixture::{Fixture, PODS, TestResult};
use self::waits::{
    wait_for_annotations, wait_for_assignment, wait_for_no_annotations, wait_for_ready,
};

#[tokio::test]
async fn publishes_assignment_and_rebalances_on_a_real_cluster() {
    let _turn = crate::TURNS.read().await;
    let _kit_turn = shardring_e2e::kit::KitTurn::shared().await;
    let Some(client) = cluster_or_skip("cluster").await else {
        return;
    };
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

/// Applies the CRDs, creates the namespace, applies the pool and the group
/// and creates [`PODS`] Ready pods; returns their names.
async fn install(client: &Client, fx: &Fixture) -> TestResult<Vec<String>> {
    apply_fixture(client, fx).await?;
    let pods: Vec<String> = (0..PODS).map(|i| format!("consumer-{i}")).collect();
    create_ready_pods(client, fx, &pods).await?;
    Ok(pods)
}

/// Applies the CRDs, creates the namespace and applies the pool and the group.
async fn apply_fixture(client: &Client, fx: &Fixture) -> TestResult {
    apply_crds(client).await?;
    create_namespace(client, &fx.namespace).await?;
    let params = PatchParams::apply(MANAGER).force();
    Api::<ConsumerPool>::namespaced(client.clone(), &fx.namespace)
        .patch(&fx.pool.name_any(), &params, &Patch::Apply(&fx.pool))
        .await?;
    Api::<ShardGroup>::namespaced(client.clone(), &fx.namespace)
        .patch(&fx.name, &params, &Patch::Apply(&fx.group))
        .await?;
    Ok(())
}

/// The cluster as the operator of `fx` reaches it: as its ServiceAccount
/// under the install's RBAC and admission policy, unless
/// `SHARDRING_E2E_OPERATOR_IDENTITY=admin`.
async fn operator_cluster(client: &Client, fx: &Fixture) -> TestResult<Cluster> {
    let base = Cluster::from_environment(client.clone());
    Ok(account::operator_cluster(&base, client, &fx.namespace, None).await?)
}

async fn scenario(client: &Client, fx: &Fixture) -> TestResult {
    let mut pods = install(client, fx).await?;

    // Scoped to the test's namespace so it cannot touch anything else.
    let mut operator = Operator::start(
        &operator_cluster(client, fx).await?,
        &fx.namespace,
        shardring_e2e::harness::REGION,
        shardring_e2e::operator::OperatorMode::from_env()?,
    )
    .await?;
    let first = wait_for_assignment(client, fx, &pods, &mut operator).await?;
    // Started together, the pods share the first publish: no paced moves
    // from a document that missed one of them.
    if first.epoch != 1 {
        return Err(format!(
            "the first balanced document over {pods:?} is epoch {}, not the first publish",
            first.epoch
        )
        .into());
    }
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

/// Creates pods the scheduler never binds (a scheduling gate), then marks
/// them Running and Ready through the status subresource, as a kubelet
/// would, all at one moment: pods started together, which pass the pool's
/// `minReadySeconds` together and so share the group's first publish.
async fn create_ready_pods(client: &Client, fx: &Fixture, names: &[String]) -> TestResult {
    let pods = Api::<Pod>::namespaced(client.clone(), &fx.namespace);
    for name in names {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": fx.pod_labels},
            "spec": {
                "schedulingGates": [{"name": SCHEDULING_GATE}],
                "containers": [{"name": "consumer", "image": "registry.k8s.io/pause:3.10"}]
            }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = json!({"status": {"phase": "Running", "conditions": ready_conditions(&now)}});
    let (params, patch) = (PatchParams::default(), Patch::Merge(&status));
    let patches = names
        .iter()
        .map(|name| pods.patch_status(name, &params, &patch));
    for patched in futures::future::join_all(patches).await {
        patched?;
    }
    Ok(())
}
