//! The end-to-end scenarios, each a function of a started [`Harness`]:
//! steady state, rolling deploy, graceful termination, kill -9, scale
//! 3 → 6 → 2, split, merge, UpdateShardCount, an operator restart mid-handoff
//! and leader election with two replicas. They run against a real cluster
//! (`tests/it/scenarios.rs`) and against the devkit's mock API server
//! (`tests/it/mock_scenarios.rs`), with the operator in-process or as the
//! binary. Every scenario ends with the checker's verdict.

use crate::harness::{Harness, STEP_TIMEOUT};
use crate::replicas::{Replica, wait_single_leader};
use crate::verdict::{VerdictError, finish};
use crate::{Probe, wait_for};

/// What a scenario returns.
pub type ScenarioResult = Result<(), VerdictError>;

/// Lets traffic flow until `records` more records have been processed (a
/// condition, not a pause: the scenario acts while records are in flight).
pub async fn traffic(harness: &Harness, records: usize) -> ScenarioResult {
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

/// Adds pods `<prefix>-<i>` for `i` in `range`, together.
async fn add_pods(
    harness: &mut Harness,
    prefix: &str,
    range: std::ops::Range<usize>,
) -> ScenarioResult {
    let names: Vec<String> = range.map(|i| format!("{prefix}-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    harness.add_pods(&names).await?;
    Ok(())
}

/// Three pods reading a producing stream: the common opening.
pub(crate) async fn opening(harness: &mut Harness) -> ScenarioResult {
    harness.start_producer();
    add_pods(harness, "v1", 0..3).await?;
    harness.wait_settled("three pods").await?;
    traffic(harness, 200).await
}

pub async fn steady(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    traffic(harness, 1000).await?;
    finish(harness, "steady").await.map(drop)
}

pub async fn rolling_deploy(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    for i in 0..3 {
        harness.add_pods(&[&format!("v2-{i}")]).await?;
        harness.pods.delete_gracefully(&format!("v1-{i}")).await?;
        harness.wait_settled(&format!("rolled v1-{i}")).await?;
        traffic(harness, 100).await?;
    }
    finish(harness, "rolling-deploy").await.map(drop)
}

pub async fn graceful_termination(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.pods.delete_gracefully("v1-0").await?;
    harness.wait_settled("v1-0 terminated").await?;
    traffic(harness, 200).await?;
    finish(harness, "graceful-termination").await.map(drop)
}

pub async fn kill_9(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.pods.kill_and_force_delete("v1-0").await?;
    harness.wait_settled("v1-0 killed").await?;
    traffic(harness, 200).await?;
    finish(harness, "kill-9").await.map(drop)
}

pub async fn scale(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    add_pods(harness, "v1", 3..6).await?;
    harness.wait_settled("scaled to six").await?;
    traffic(harness, 200).await?;
    // A scale-down deletes its pods at once.
    harness
        .pods
        .delete_gracefully_together(&["v1-2", "v1-3", "v1-4", "v1-5"])
        .await?;
    harness.wait_settled("scaled to two").await?;
    traffic(harness, 200).await?;
    finish(harness, "scale").await.map(drop)
}

pub async fn split(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    let parent = harness.split_widest().await?;
    eprintln!("e2e[split]: SplitShard {parent}");
    harness.wait_settled("children of the split").await?;
    traffic(harness, 300).await?;
    finish(harness, "split").await.map(drop)
}

pub async fn merge(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    let (a, b) = harness.merge_adjacent().await?;
    eprintln!("e2e[merge]: MergeShards {a} + {b}");
    harness.wait_settled("child of the merge").await?;
    traffic(harness, 300).await?;
    finish(harness, "merge").await.map(drop)
}

pub async fn update_shard_count(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.update_shard_count(8).await?;
    eprintln!("e2e[update-shard-count]: UpdateShardCount 4 -> 8");
    harness.wait_settled("eight open shards").await?;
    traffic(harness, 300).await?;
    finish(harness, "update-shard-count").await.map(drop)
}

/// The operator restarts in the middle of a handoff. A pod's consumer
/// hangs (SIGSTOP) and the pod is deleted, so its shards are revoked but not
/// released; the moment the revoke is published the operator is stopped.
/// While it is down the consumer comes back (SIGCONT), stops reading the
/// revoked shards, releases their leases and exits, and the pod goes. The
/// new operator must complete the handoff from the published document and
/// the lease table as soon as it is ready: the document that hands the
/// shards on must appear within [`RESTART_SLACK`] of its readiness.
///
/// The handoff's gap (the old owner's last read to the new owner's first)
/// is printed beside the restart but not bounded here: past the operator's
/// document it is the new owner's pickup, which the other scenarios bound
/// and which, on a loaded machine, varies by more than the operator's part.
pub async fn operator_restart(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.pods.hang_and_delete("v1-0").await?;
    harness.wait_revoking("v1-0").await?;
    let stopped = tokio::time::Instant::now();
    harness.stop_operator().await?;
    eprintln!("e2e[operator-restart]: handoff in flight; operator stopped");
    harness.pods.resume_and_drain("v1-0").await?;
    let start_to_ready = harness.start_operator().await?;
    let restart = stopped.elapsed();
    eprintln!(
        "e2e[operator-restart]: operator down {} ms (its start to ready {} ms)",
        restart.as_millis(),
        start_to_ready.as_millis()
    );
    let handed_on = harness.wait_owns_nothing("v1-0").await?;
    eprintln!(
        "e2e[operator-restart]: the handoff's document {} ms after the operator was ready (bound {} ms)",
        handed_on.as_millis(),
        RESTART_SLACK.as_millis()
    );
    harness.wait_settled("after the operator restart").await?;
    traffic(harness, 200).await?;
    let report = finish(harness, "operator-restart").await?;
    let gap = report
        .handoff_gaps
        .iter()
        .max()
        .copied()
        .unwrap_or_default();
    eprintln!(
        "e2e[operator-restart]: the restarted handoff's gap {} ms: the restart {} ms, then the document {} ms, then the new owner's pickup",
        gap.as_millis(),
        restart.as_millis(),
        handed_on.as_millis(),
    );
    if handed_on > RESTART_SLACK {
        return Err(VerdictError::Failed {
            scenario: "operator-restart".into(),
            summary: format!(
                "the restarted operator published the handoff {} ms after it was ready, more than {} ms",
                handed_on.as_millis(),
                RESTART_SLACK.as_millis()
            ),
        });
    }
    Ok(())
}

/// How long after the restarted operator is ready the document that
/// completes the handoff may appear: its first reconciles (the lease table
/// read and one document write), with room for a loaded machine.
pub const RESTART_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

/// The harness's operator hands over to two replicas with leader election;
/// the leader serves a scale-up, is killed, and the other replica takes over
/// and serves the next change.
pub async fn leader_election(harness: &mut Harness) -> ScenarioResult {
    opening(harness).await?;
    harness.stop_operator().await?;
    let mut replicas = vec![
        Replica::start(harness.operator_cluster(), &harness.namespace, "replica-a").await,
        Replica::start(harness.operator_cluster(), &harness.namespace, "replica-b").await,
    ];
    let result = leader_election_steps(harness, &mut replicas).await;
    for replica in replicas {
        replica.stop().await;
    }
    // A Lease in the operator's namespace outlives the test's namespace.
    let (lease, home) = crate::replicas::lease_of(harness.operator_cluster(), &harness.namespace);
    if home != harness.namespace {
        let leases = kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            harness.client.clone(),
            home,
        );
        if let Err(error) = leases.delete(&lease, &Default::default()).await {
            eprintln!("e2e[leader-election]: could not delete Lease {home}/{lease}: {error}");
        }
    }
    result
}

async fn leader_election_steps(
    harness: &mut Harness,
    replicas: &mut Vec<Replica>,
) -> ScenarioResult {
    let leader = wait_single_leader(replicas).await?;
    eprintln!("e2e[leader-election]: {} leads", replicas[leader].identity);
    harness.add_pods(&["v1-3"]).await?;
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
