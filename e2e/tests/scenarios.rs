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

use std::io::Write;

use kube::Client;
use shardring_e2e::cluster::SKIP_MESSAGE;
use shardring_e2e::harness::{Harness, STEP_TIMEOUT};
use shardring_e2e::replicas::{Replica, wait_single_leader};
use shardring_e2e::verdict::{VerdictError, finish};
use shardring_e2e::{Probe, Reachability, connect, wait_for};

type ScenarioResult = Result<(), VerdictError>;

/// The cluster under test, or `None` after printing the skip line.
async fn cluster(scenario: &str) -> Option<Client> {
    match connect().await {
        Reachability::Reachable { client, version } => {
            eprintln!("e2e[{scenario}]: cluster reachable, Kubernetes {version}");
            Some(client)
        }
        Reachability::Unreachable(reason) => {
            // Straight to stderr so the line shows although the test
            // harness captures the output of passing tests.
            let _ = writeln!(std::io::stderr(), "{SKIP_MESSAGE} ({reason})");
            None
        }
    }
}

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
        let Some(client) = cluster($name).await else {
            return;
        };
        let mut harness = match Harness::start(client, $name, $shards).await {
            Ok(harness) => harness,
            Err(error) => panic!("e2e scenario {} could not start: {error}", $name),
        };
        let result = $body(&mut harness).await;
        conclude(harness, $name, result).await;
    }};
}

/// Lets traffic flow until `records` more records have been processed (a
/// condition, not a pause: the scenario acts while records are in flight).
async fn traffic(harness: &Harness, records: usize) -> ScenarioResult {
    let start = harness.pods.processed().map_err(VerdictError::from)?.len();
    let pods = &harness.pods;
    wait_for(
        &format!("{records} more records processed"),
        STEP_TIMEOUT,
        || {
            let result = pods.processed().map(|p| {
                let more = p.len().saturating_sub(start);
                if more >= records {
                    Probe::Done(())
                } else {
                    Probe::Pending(format!("{more} more so far"))
                }
            });
            async move { result }
        },
    )
    .await
    .map_err(|e| VerdictError::Harness(e.into()))
}

/// Adds pods `<prefix>-<i>` for `i` in `range`.
async fn add_pods(
    harness: &mut Harness,
    prefix: &str,
    range: std::ops::Range<usize>,
) -> ScenarioResult {
    for i in range {
        harness.pods.add(&format!("{prefix}-{i}")).await?;
    }
    Ok(())
}

/// Three pods reading a producing stream: the common opening.
async fn opening(harness: &mut Harness) -> ScenarioResult {
    harness.start_producer();
    add_pods(harness, "v1", 0..3).await?;
    harness.wait_settled("three pods").await?;
    traffic(harness, 200).await
}

async fn steady(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    traffic(harness, 1000).await?;
    finish(harness, "steady").await.map(drop)
}

async fn rolling_deploy(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    for i in 0..3 {
        harness.pods.add(&format!("v2-{i}")).await?;
        harness.pods.delete_gracefully(&format!("v1-{i}")).await?;
        harness.wait_settled(&format!("rolled v1-{i}")).await?;
        traffic(harness, 100).await?;
    }
    finish(harness, "rolling-deploy").await.map(drop)
}

async fn graceful_termination(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.pods.delete_gracefully("v1-0").await?;
    harness.wait_settled("v1-0 terminated").await?;
    traffic(harness, 200).await?;
    finish(harness, "graceful-termination").await.map(drop)
}

async fn kill_9(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.pods.kill_and_force_delete("v1-0").await?;
    harness.wait_settled("v1-0 killed").await?;
    traffic(harness, 200).await?;
    finish(harness, "kill-9").await.map(drop)
}

async fn scale(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    add_pods(harness, "v1", 3..6).await?;
    harness.wait_settled("scaled to six").await?;
    traffic(harness, 200).await?;
    for i in 2..6 {
        harness.pods.delete_gracefully(&format!("v1-{i}")).await?;
    }
    harness.wait_settled("scaled to two").await?;
    traffic(harness, 200).await?;
    finish(harness, "scale").await.map(drop)
}

async fn split(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    let parent = harness.split_widest().await?;
    eprintln!("e2e[split]: SplitShard {parent}");
    harness.wait_settled("children of the split").await?;
    traffic(harness, 300).await?;
    finish(harness, "split").await.map(drop)
}

async fn merge(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    let (a, b) = harness.merge_adjacent().await?;
    eprintln!("e2e[merge]: MergeShards {a} + {b}");
    harness.wait_settled("child of the merge").await?;
    traffic(harness, 300).await?;
    finish(harness, "merge").await.map(drop)
}

async fn update_shard_count(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.update_shard_count(8).await?;
    eprintln!("e2e[update-shard-count]: UpdateShardCount 4 -> 8");
    harness.wait_settled("eight open shards").await?;
    traffic(harness, 300).await?;
    finish(harness, "update-shard-count").await.map(drop)
}

/// A pod whose consumer hangs (SIGSTOP) is deleted: its shards are revoked
/// but it never lets go, so the handoff lasts the drain timeout and the
/// lease failover — long enough to restart the operator in the middle of it.
/// The restarted operator must finish that handoff from the published state
/// while the hung pod is still there; then the pod is reaped.
async fn operator_restart(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.pods.hang_and_delete("v1-0").await?;
    harness.wait_handoff_in_flight().await?;
    eprintln!("e2e[operator-restart]: handoff in flight; restarting the operator");
    harness.restart_operator().await?;
    harness.wait_owns_nothing("v1-0").await?;
    harness.pods.reap("v1-0").await?;
    harness.wait_settled("after the operator restart").await?;
    traffic(harness, 200).await?;
    finish(harness, "operator-restart").await.map(drop)
}

/// The harness's operator hands over to two replicas with leader election;
/// the leader serves a scale-up, is killed, and the other replica takes over
/// and serves the next change.
async fn leader_election(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.stop_operator().await?;
    let mut replicas = vec![
        Replica::start(&harness.client, &harness.namespace, "replica-a").await,
        Replica::start(&harness.client, &harness.namespace, "replica-b").await,
    ];
    let result = leader_election_steps(harness, &mut replicas).await;
    for replica in replicas {
        replica.stop().await;
    }
    result
}

async fn leader_election_steps(
    harness: &mut Harness,
    replicas: &mut Vec<Replica>,
) -> ScenarioResult {
    let leader = wait_single_leader(replicas).await?;
    eprintln!("e2e[leader-election]: {} leads", replicas[leader].identity);
    harness.pods.add("v1-3").await?;
    harness
        .wait_settled("scale-up served by the first leader")
        .await?;
    traffic(harness, 200).await?;
    let killed = replicas.remove(leader);
    eprintln!(
        "e2e[leader-election]: killing the leader {}",
        killed.identity
    );
    killed.kill().await;
    let survivor = wait_single_leader(replicas).await?;
    eprintln!(
        "e2e[leader-election]: {} took over",
        replicas[survivor].identity
    );
    harness.pods.delete_gracefully("v1-0").await?;
    harness
        .wait_settled("graceful deletion served by the new leader")
        .await?;
    traffic(harness, 200).await?;
    finish(harness, "leader-election").await.map(drop)
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
