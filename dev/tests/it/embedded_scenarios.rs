//! The e2e suite's scenarios on the embedded stage, so CI proves them
//! without a cluster: real kinesis-local and dynalite, the real Kinesis
//! source, lease reader and plan step against the in-process cluster model,
//! a producer, and real `shardring-reference-consumer` processes. Each
//! scenario ends with the checker (no two readers at once, nothing lost,
//! per-shard order, children after parents) after waiting for a settled,
//! balanced assignment, and prints its verdict (handoff gap p50/p99,
//! handoffs per phase).
//!
//! Not here: two operator replicas with leader election, which needs a
//! Lease API (covered by `runtime_leader` against a mocked API server and by
//! the e2e suite on a real cluster).
//!
//! Scenarios run one at a time, and not beside the demo ([`crate::STAGE`]):
//! each starts two emulators and several consumers on a small machine.
//! Needs Node.js (the emulators are installed with npm into `e2e/` when
//! missing) and the reference consumer binary, which `cargo test
//! --workspace` builds; on its own run `cargo build -p shardring-dev -p
//! shardring-consumer --bin shardring-reference-consumer` first.

use std::path::PathBuf;

use shardring_crds::ShardPhase;
use shardring_dev::demo::report::{MoveEvent, MoveKind, Verdict};
use shardring_dev::demo::stage::{Stage, shards_in};
use shardring_dev::demo::story::stage_config;
use shardring_dev::demo::{DemoConfig, DemoError};

/// A scenario's files: removed when it passes, kept (and named) when not.
struct Files(PathBuf);

impl Files {
    fn new(scenario: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "shardring-scenario-{scenario}-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_millisecond()
        ));
        std::fs::create_dir_all(&dir).expect("scenario dir");
        Self(dir)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("scenario files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The stage on a `shards`-shard stream at half the demo's pace.
async fn start(files: &Files, shards: u32) -> Stage {
    let config = DemoConfig {
        duration_scale: 0.5,
        shards,
        ..DemoConfig::default()
    };
    Stage::start(&stage_config(&config), &files.0)
        .await
        .expect("the stage starts")
}

/// Three pods reading a producing stream: the common opening.
async fn opening(stage: &Stage) -> Result<(), DemoError> {
    stage.phase("start", "three pods");
    for i in 0..3 {
        stage.start_pod(&format!("v1-{i}"))?;
    }
    stage.wait_settled("three pods settled").await?;
    stage.traffic(200).await
}

/// Ends the scenario: drain, checker, and the assertions every scenario
/// shares. Returns the verdict and the move log.
async fn conclude(
    scenario: &str,
    stage: Stage,
    result: Result<(), DemoError>,
) -> (Verdict, Vec<MoveEvent>) {
    if let Err(error) = result {
        panic!("scenario {scenario} failed: {error}");
    }
    let moves = stage.state().moves.clone();
    let verdict = stage
        .finish(0)
        .await
        .unwrap_or_else(|e| panic!("scenario {scenario} could not finish: {e}"));
    println!("scenario {scenario}\n{}", verdict.render());
    let check = &verdict.check;
    assert!(check.produced > 0, "{scenario}: the producer wrote nothing");
    assert!(
        check.overlaps.is_empty(),
        "{scenario}: overlaps {:?}",
        check.overlaps
    );
    assert!(
        check.lost.is_empty(),
        "{scenario}: {} records lost",
        check.lost.len()
    );
    assert!(
        check.order_violations.is_empty(),
        "{scenario}: order violations {:?}",
        check.order_violations
    );
    assert!(
        check.parent_violations.is_empty(),
        "{scenario}: children read before parents {:?}",
        check.parent_violations
    );
    assert!(
        verdict.problems.is_empty(),
        "{scenario}: {:?}",
        verdict.problems
    );
    assert!(verdict.passed(), "{scenario}: the verdict failed");
    (verdict, moves)
}

/// Evidence of the handoffs completed in `phase`.
fn evidence_in(moves: &[MoveEvent], phase: &str) -> Vec<&'static str> {
    moves
        .iter()
        .filter(|m| m.phase == phase)
        .filter_map(|m| match m.kind {
            MoveKind::HandedOver { evidence, .. } => Some(evidence),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_termination_hands_over_on_the_lease_release() {
    let _stage = crate::STAGE.lock().await;
    let files = Files::new("graceful");
    let stage = start(&files, 4).await;
    let result = async {
        opening(&stage).await?;
        stage.phase("graceful", "delete v1-0 gracefully");
        stage.delete_pod("v1-0");
        stage
            .wait_for("v1-0 to exit", |s| !s.cluster.pods.contains_key("v1-0"))
            .await?;
        stage.wait_settled("after v1-0 left").await?;
        stage.traffic(200).await
    }
    .await;
    let (_, moves) = conclude("graceful", stage, result).await;
    let evidence = evidence_in(&moves, "graceful");
    assert!(!evidence.is_empty(), "no handoff when v1-0 left");
    // The draining consumer released its leases when revoked, or exited
    // (after releasing) before the next lease scan showed it: its container
    // reported terminated, or its pod gone.
    assert!(
        evidence
            .iter()
            .all(|e| matches!(*e, "lease_released" | "pod_stopped" | "pod_gone")),
        "{evidence:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_waits_for_the_lease_to_expire() {
    let _stage = crate::STAGE.lock().await;
    let files = Files::new("kill-9");
    let stage = start(&files, 4).await;
    let result = async {
        opening(&stage).await?;
        stage.phase("kill -9", "kill -9 v1-0 and force-delete its pod");
        stage.kill_pod("v1-0")?;
        stage.wait_settled("after v1-0 was killed").await?;
        stage.traffic(200).await
    }
    .await;
    let (_, moves) = conclude("kill-9", stage, result).await;
    let evidence = evidence_in(&moves, "kill -9");
    assert!(!evidence.is_empty(), "no handoff after the kill");
    // A force-deleted pod is no proof its process stopped: only its lease
    // running out without renewal is.
    assert!(
        evidence
            .iter()
            .all(|e| *e == "lease_expired" || *e == "drain_timeout"),
        "{evidence:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_3_to_6_to_2() {
    let _stage = crate::STAGE.lock().await;
    let files = Files::new("scale");
    let stage = start(&files, 6).await;
    let result = async {
        opening(&stage).await?;
        stage.phase("scale up", "scale to six");
        for i in 3..6 {
            stage.start_pod(&format!("v1-{i}"))?;
        }
        stage.wait_settled("six pods settled").await?;
        stage.traffic(200).await?;
        stage.phase("scale down", "scale to two");
        for i in 2..6 {
            stage.delete_pod(&format!("v1-{i}"));
        }
        stage.wait_settled("two pods settled").await?;
        stage.traffic(200).await
    }
    .await;
    let (_, moves) = conclude("scale", stage, result).await;
    // Scale-up to six over six shards: three pods each give one shard away.
    assert_eq!(evidence_in(&moves, "scale up").len(), 3);
    // Scale-down to two: the four leaving pods' shards, one each, move.
    assert_eq!(evidence_in(&moves, "scale down").len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_shard() {
    let _stage = crate::STAGE.lock().await;
    let files = Files::new("split");
    let stage = start(&files, 4).await;
    let result = async {
        opening(&stage).await?;
        stage.phase("split", "SplitShard of the widest shard");
        let parent = stage.widest_open().await?;
        stage.split(&parent).await?;
        stage.wait_settled("the children of the split").await?;
        stage.traffic(300).await?;
        let complete = shards_in(&stage.state(), ShardPhase::Complete);
        assert!(complete.contains_key(&parent.id), "{complete:?}");
        Ok(())
    }
    .await;
    let (verdict, _) = conclude("split", stage, result).await;
    assert_eq!(verdict.check.shards, 4 + 2, "the children were read too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_shards() {
    let _stage = crate::STAGE.lock().await;
    let files = Files::new("merge");
    let stage = start(&files, 4).await;
    let result = async {
        opening(&stage).await?;
        stage.phase("merge", "MergeShards of two adjacent shards");
        let (a, b) = stage.merge_adjacent().await?;
        stage.wait_settled("the child of the merge").await?;
        stage.traffic(300).await?;
        let complete = shards_in(&stage.state(), ShardPhase::Complete);
        assert!(
            complete.contains_key(&a) && complete.contains_key(&b),
            "{complete:?}"
        );
        Ok(())
    }
    .await;
    let (verdict, _) = conclude("merge", stage, result).await;
    assert_eq!(verdict.check.shards, 4 + 1, "the merged child was read too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_shard_count_4_to_8() {
    let _stage = crate::STAGE.lock().await;
    let files = Files::new("update-shard-count");
    let stage = start(&files, 4).await;
    let result = async {
        opening(&stage).await?;
        stage.phase("reshard", "UpdateShardCount 4 -> 8");
        stage.update_shard_count(8).await?;
        stage.wait_settled("eight open shards").await?;
        stage.traffic(300).await?;
        let active = shards_in(&stage.state(), ShardPhase::Active);
        assert_eq!(active.len(), 8, "{active:?}");
        Ok(())
    }
    .await;
    conclude("update-shard-count", stage, result).await;
}

/// A pod whose consumer hangs (SIGSTOP) is deleted: its shards are revoked
/// but it never lets go, so the handoff lasts the drain timeout and the
/// lease failover, long enough to restart the controller in the middle of
/// it. The new controller must finish the handoff from the published state
/// alone, while the hung process still exists; kubelet kills it when its
/// grace period runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_restarted_mid_handoff() {
    let _stage = crate::STAGE.lock().await;
    let files = Files::new("controller-restart");
    let mut stage = start(&files, 4).await;
    let result = async {
        opening(&stage).await?;
        stage.phase("restart", "hang v1-0, delete it, restart mid-handoff");
        stage.hang_pod("v1-0")?;
        stage.delete_pod("v1-0");
        stage
            .wait_for("a revoke from v1-0 in flight", |s| {
                shards_in(s, ShardPhase::Revoking)
                    .values()
                    .any(|owner| owner.as_deref() == Some("v1-0"))
            })
            .await?;
        stage.restart_controller().await;
        stage
            .wait_for("v1-0 to own nothing", |s| {
                let doc = s.cluster.published.as_ref();
                doc.is_some_and(|d| {
                    d.shards.values().all(|r| {
                        r.owner.as_deref() != Some("v1-0") || r.state == ShardPhase::Complete
                    })
                })
            })
            .await?;
        // The hung process still exists: the handoff did not wait for it.
        assert!(stage.state().cluster.pods.contains_key("v1-0"));
        stage.wait_settled("after the restart").await?;
        stage
            .wait_for("kubelet to kill the hung v1-0", |s| {
                !s.cluster.pods.contains_key("v1-0")
            })
            .await?;
        stage.traffic(200).await
    }
    .await;
    let (_, moves) = conclude("controller-restart", stage, result).await;
    let evidence = evidence_in(&moves, "restart");
    assert!(!evidence.is_empty(), "no handoff from the hung pod");
    // It never released anything: its leases ran out.
    assert!(
        evidence
            .iter()
            .all(|e| *e == "lease_expired" || *e == "drain_timeout"),
        "{evidence:?}"
    );
}
