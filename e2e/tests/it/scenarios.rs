//! End-to-end scenarios against a real cluster reachable through KUBECONFIG
//! (kind, k3d, EKS, ...), each in its own namespace with its own local
//! kinesis-local + dynalite, the operator (in-process by default), a
//! producer, and consumer pods backed by local `shardring-reference-consumer`
//! processes that watch the assignment ConfigMap. Every scenario ends with
//! the checker (no overlapping holds, nothing lost, per-shard order,
//! children after parents, balance at the end) and prints handoff gap
//! p50/p99 and moves per shard. All waits are conditions with deadlines.
//! Without a cluster every test prints `SKIPPED: ...` and passes.
//! See docs/e2e.md for how to run them.

use shardring_e2e::cluster::{Cluster, cluster_or_skip};
use shardring_e2e::harness::Harness;
use shardring_e2e::operator::OperatorMode;
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
}

/// Starts the harness for `scenario` on a `shards`-shard stream, or skips.
macro_rules! scenario {
    ($name:literal, $shards:expr, $body:ident) => {{
        let Some(client) = cluster_or_skip($name).await else {
            return;
        };
        let _turn = crate::TURNS.read().await;
        let mode = OperatorMode::from_env().unwrap_or_else(|e| panic!("{e}"));
        let cluster = Cluster::from_environment(client);
        let mut harness = match Harness::start(cluster, mode, $name, $shards).await {
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
