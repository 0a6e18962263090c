//! End-to-end scenarios against a real cluster reachable through KUBECONFIG
//! (kind, k3d, EKS, ...), each in its own namespace with its own local
//! kinesis-local + dynalite, the operator (in-process by default), a
//! producer, and consumer pods backed by local `shardring-reference-consumer`
//! processes that watch the assignment ConfigMap. Every scenario ends with
//! the checker (no overlapping holds, nothing lost, per-shard order,
//! children after parents, balance at the end) and prints handoff gap
//! p50/p99 and moves per shard. The operator authenticates as its
//! ServiceAccount with the install's RBAC and admission policy in force
//! (`SHARDRING_E2E_OPERATOR_IDENTITY=admin`: as the suite's user). All waits are conditions with deadlines.
//! Without a cluster every test prints `SKIPPED: ...` and passes.
//! See docs/e2e.md for how to run them.

use std::io::Write;

use kube::config::{KubeConfigOptions, Kubeconfig};
use shardring_e2e::Reachability;
use shardring_e2e::account;
use shardring_e2e::apiserver::api_server_restart;
use shardring_e2e::cluster::{Cluster, cluster_or_skip, connect_with};
use shardring_e2e::harness::{Harness, files_dir};
use shardring_e2e::kit::{Kit, KitTurn};
use shardring_e2e::operator::OperatorMode;
use shardring_e2e::proxy::CountingProxy;
use shardring_e2e::scenarios::*;

/// Cleans up after a scenario and fails the test on the scenario's error
/// or a failed cleanup.
async fn conclude(harness: Harness, scenario: &str, result: ScenarioResult) {
    let namespace = harness.namespace.clone();
    let cleanup = harness.cleanup().await;
    if let Err(error) = result {
        panic!("e2e scenario {scenario} failed in namespace {namespace}: {error}");
    }
    if let Err(error) = cleanup {
        panic!("e2e cleanup of {scenario} (namespace {namespace}) failed: {error}");
    }
    // The consumers' logs stay for a scenario that failed, not after a pass.
    let _ = std::fs::remove_dir_all(files_dir(&namespace));
}

/// Starts the harness for `scenario` on a `shards`-shard stream, or skips.
macro_rules! scenario {
    ($name:literal, $shards:expr, $body:ident) => {{
        // Turns first: the probe itself must not meet an API server that
        // another test is restarting.
        let _turn = crate::TURNS.read().await;
        let _kit_turn = KitTurn::shared().await;
        let Some(client) = cluster_or_skip($name).await else {
            return;
        };
        let mode = OperatorMode::from_env().unwrap_or_else(|e| panic!("{e}"));
        let cluster = Cluster::from_environment(client.clone());
        let operator_cluster = as_operator(&cluster, &client, $name).await;
        let mut harness =
            match Harness::start_via(cluster, operator_cluster, mode, $name, $shards).await {
                Ok(harness) => harness,
                Err(error) => panic!("e2e scenario {} could not start: {error}", $name),
            };
        let result = $body(&mut harness).await;
        conclude(harness, $name, result).await;
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn steady_state() {
    scenario!("steady", 4, steady);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_deploy_of_all_pods() {
    scenario!("rolling-deploy", 4, rolling_deploy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_termination_of_one_pod() {
    scenario!("graceful", 4, graceful_termination);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_a_consumer() {
    scenario!("kill-9", 4, kill_9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scale_3_to_6_to_2() {
    scenario!("scale", 6, scale);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_shard() {
    scenario!("split", 4, split);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn merge_shards() {
    scenario!("merge", 4, merge);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_shard_count_4_to_8() {
    scenario!("update-shard-count", 4, update_shard_count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_restarted_mid_handoff() {
    scenario!("operator-restart", 4, operator_restart);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_with_leader_election() {
    scenario!("leader-election", 4, leader_election);
}

/// kube-apiserver killed mid-churn and started again (the kit's `up`):
/// runs only on the shardring-k8s kit, alone (no other test of this suite,
/// nor of another process holding the kit's turns, runs meanwhile: they
/// would see the API server go away).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_server_restarted_mid_churn() {
    const NAME: &str = "apiserver-restart";
    let kit = match Kit::under_test() {
        Ok(kit) => kit,
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: e2e[{NAME}] kills and restarts kube-apiserver, so it runs only on the shardring-k8s kit that KUBECONFIG points at ({why})"
            );
            return;
        }
    };
    let _turn = crate::TURNS.write().await;
    let _kit_turn = KitTurn::exclusive(&kit)
        .await
        .unwrap_or_else(|e| panic!("e2e[{NAME}]: {e}"));
    let Some(client) = cluster_or_skip(NAME).await else {
        return;
    };
    let mode = OperatorMode::from_env().unwrap_or_else(|e| panic!("{e}"));
    let proxy = CountingProxy::start(kit.api_port)
        .await
        .unwrap_or_else(|e| panic!("e2e[{NAME}]: the relay did not start: {e}"));
    let operator_cluster = through(&kit, &proxy)
        .await
        .unwrap_or_else(|e| panic!("e2e[{NAME}]: {e}"));
    let operator_cluster = as_operator(&operator_cluster, &client, NAME).await;
    let cluster = Cluster::from_environment(client);
    let mut harness = match Harness::start_via(cluster, operator_cluster, mode, NAME, 4).await {
        Ok(harness) => harness,
        Err(error) => panic!("e2e scenario {NAME} could not start: {error}"),
    };
    let result = api_server_restart(&mut harness, &kit, &proxy).await;
    conclude(harness, NAME, result).await;
}

/// `cluster` as the operator of `scenario` reaches it: as its
/// ServiceAccount under the install's RBAC and admission policy, unless
/// `SHARDRING_E2E_OPERATOR_IDENTITY=admin` ([`account`]).
async fn as_operator(cluster: &Cluster, admin: &kube::Client, scenario: &str) -> Cluster {
    let tag = format!("sr-e2e-{scenario}-{}", std::process::id());
    account::operator_cluster(cluster, admin, &tag, None)
        .await
        .unwrap_or_else(|e| panic!("e2e[{scenario}]: the operator's identity: {e}"))
}

/// The kit's API server as the operator reaches it through `proxy`: a
/// kubeconfig naming the relay (for the binary) and a client built from it
/// (in-process).
async fn through(kit: &Kit, proxy: &CountingProxy) -> Result<Cluster, String> {
    let path = std::env::temp_dir().join(format!(
        "sr-e2e-apiserver-restart-{}.kubeconfig",
        std::process::id()
    ));
    kit.kubeconfig_via(&format!("https://{}", proxy.addr()), &path)?;
    let kubeconfig = Kubeconfig::read_from(&path).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    match connect_with(config).await {
        Reachability::Reachable { client, .. } => Ok(Cluster {
            client,
            kubeconfig: Some(path),
            operator_namespace: None,
        }),
        Reachability::Unreachable(why) => Err(format!("the relay to the API server: {why}")),
    }
}
