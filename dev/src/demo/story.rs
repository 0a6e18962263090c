//! The demo's story, step by step, on the embedded [`Stage`]: three
//! consumer pods start; scale up to five; roll a deploy (surge one new pod,
//! then delete an old one gracefully, pod by pod); restart one of the new
//! pods under its name with the pool holding for it (stable identity); split a shard while its
//! reader lags, so the children are seen waiting for their parent; stop the
//! producer, wait until every record was processed, and run the checker;
//! then the static act ([`super::partitioned`]): static partitions through
//! the consumer endpoint, scaled up and rolled.
//! Every wait is on a condition with a deadline; the pauses between steps
//! only let traffic flow so the tables have something to show.

use std::path::Path;
use std::time::Duration;

use super::cluster::GroupTiming;
use super::controller::Shared;
use super::report::Verdict;
use super::stage::{Stage, StageConfig, every_owner_reading, shards_in};
use super::{DemoConfig, DemoError};
use shardring_crds::ShardPhase;

/// Lets traffic flow for a while (not a correctness wait).
async fn pause(config: &DemoConfig, base: Duration) {
    tokio::time::sleep(config.scaled(base, Duration::from_millis(300))).await;
}

/// The stage settings of the demo at `config`'s pace.
pub fn stage_config(config: &DemoConfig) -> StageConfig {
    StageConfig {
        shards: config.shards,
        timing: GroupTiming {
            drain_timeout: config.scaled(Duration::from_secs(10), Duration::from_secs(2)),
            lease_failover: config.scaled(Duration::from_secs(4), Duration::from_secs(1)),
            rebalance_delay: config.scaled(Duration::from_secs(3), Duration::from_millis(500)),
        },
        drain_deadline: config.scaled(Duration::from_secs(10), Duration::from_secs(2)),
        consumer_binary: config.consumer_binary.clone(),
    }
}

/// Runs the whole story with its files under `dir` and returns the verdict.
pub async fn run(config: &DemoConfig, dir: &Path) -> Result<Verdict, DemoError> {
    let settings = stage_config(config);
    let timing = settings.timing;
    let stage = Stage::start(&settings, dir).await?;

    let initial = config.consumers.max(1);
    stage.phase(
        "start",
        &format!(
            "1. start: {initial} consumer pods read {} shards",
            config.shards
        ),
    );
    for i in 0..initial {
        stage.start_pod(&format!("orders-v1-{i}"))?;
    }
    stage
        .wait_settled("every shard active, leased by its owner, and read")
        .await?;
    pause(config, Duration::from_secs(3)).await;

    let scaled = initial + 2;
    stage.phase(
        "scale up",
        &format!(
            "2. scale up to {scaled} pods (optional moves wait for rebalance.delay = {} ms)",
            timing.rebalance_delay.as_millis()
        ),
    );
    for i in initial..scaled {
        stage.start_pod(&format!("orders-v1-{i}"))?;
    }
    stage
        .wait_settled("the scale-up to be balanced and settled")
        .await?;
    pause(config, Duration::from_secs(3)).await;

    stage.phase(
        "rolling deploy",
        "3. rolling deploy: surge one new pod, then delete one old pod gracefully, pod by pod",
    );
    let rolling_shards = stage.readable_shards();
    for i in 0..scaled {
        let old = format!("orders-v1-{i}");
        stage.start_pod(&format!("orders-v2-{i}"))?;
        stage.delete_pod(&old);
        stage
            .wait_for(&format!("{old} to hand its shards over and exit"), |s| {
                !s.cluster.pods.contains_key(&old) && s.settled()
            })
            .await?;
    }
    stage
        .wait_settled("the new pods to be balanced and settled")
        .await?;
    pause(config, Duration::from_secs(2)).await;

    restart_in_place(&stage, scaled).await?;
    pause(config, Duration::from_secs(2)).await;

    stage.phase(
        "split",
        "4. SplitShard while the parent's reader lags (its consumer is paused): the children wait until the parent is read to its end",
    );
    let parent = stage.widest_open().await?;
    let reader = stage
        .owner_of(&parent.id)
        .ok_or_else(|| DemoError::Consumer(format!("{} has no reader", parent.id)))?;
    stage.hang_pod(&reader)?;
    stage.split(&parent).await?;
    let waited = stage
        .wait_for("the split's children to be published pending", |s| {
            children_in(s, &parent.id, ShardPhase::Pending)
        })
        .await;
    // Resume whatever happened: a paused consumer must not outlive a failure.
    stage.resume_pod(&reader)?;
    waited?;
    stage
        .wait_for("the split's children to be active and read", |s| {
            children_in(s, &parent.id, ShardPhase::Active)
                && parent_complete(s, &parent.id)
                && s.settled()
                && every_owner_reading(s)
        })
        .await?;
    pause(config, Duration::from_secs(3)).await;

    stage.phase(
        "drain",
        "5. stop the producer; wait until every record is processed",
    );
    let started = stage.started;
    let mut verdict = stage.finish(rolling_shards).await?;
    let figures = super::partitioned::run(config, dir, started).await?;
    verdict.partitions = Some(figures);
    verdict.hot = Some(super::partitioned::hot::run(config, dir, started).await?);
    verdict.rabbitmq = super::queues::act::run(config, dir, started).await?;
    verdict.elapsed = started.elapsed();
    Ok(verdict)
}

/// Step 3b: the pool holds a returning pod's shards (`identity.stable`)
/// and the new pods are a StatefulSet's; one restarts under its name
/// (deleted gracefully, created again): its shards are held, unread, and
/// active on it again, and no shard moves to another pod.
async fn restart_in_place(stage: &Stage, pods: usize) -> Result<(), DemoError> {
    let restarted = "orders-v2-1";
    stage.phase(
        "restart",
        &format!(
            "3b. stable identity (ConsumerPool identity.stable): {restarted} restarts under its name, as a StatefulSet's pod does; its shards wait for it"
        ),
    );
    let before = shards_in(&stage.state(), ShardPhase::Active);
    stage.state().cluster.hold_for_returning(
        "orders-v2",
        u32::try_from(pods).unwrap_or(u32::MAX),
        Duration::from_secs(120),
    );
    let started = std::time::Instant::now();
    stage.delete_pod(restarted);
    stage
        .wait_for(
            &format!("{restarted} to let go and exit, its shards held"),
            |s| {
                !s.cluster.pods.contains_key(restarted)
                    && held_by(s, restarted, ShardPhase::Held) > 0
            },
        )
        .await?;
    let held = held_by(&stage.state(), restarted, ShardPhase::Held);
    stage.start_pod(restarted)?;
    stage
        .wait_for(&format!("{restarted} to read its shards again"), |s| {
            s.settled() && every_owner_reading(s)
        })
        .await?;
    let after = shards_in(&stage.state(), ShardPhase::Active);
    let moved = before
        .iter()
        .filter(|(shard, owner)| after.get(*shard) != Some(*owner))
        .count();
    println!(
        "  = {restarted} back after {:.1} s: {held} shards were held for it, {moved} of {} shards moved",
        started.elapsed().as_secs_f64(),
        before.len()
    );
    if moved > 0 {
        stage.state().problems.push(format!(
            "{moved} shards moved when {restarted} restarted under its name with identity.stable"
        ));
    }
    Ok(())
}

/// How many shards of `pod` are published in `phase`.
fn held_by(state: &Shared, pod: &str, phase: ShardPhase) -> usize {
    shards_in(state, phase)
        .values()
        .filter(|owner| owner.as_deref() == Some(pod))
        .count()
}

/// Whether both children of `parent` are published in `phase`.
fn children_in(state: &Shared, parent: &str, phase: ShardPhase) -> bool {
    let Some(doc) = &state.cluster.published else {
        return false;
    };
    let children: Vec<_> = doc
        .shards
        .values()
        .filter(|r| r.parents.iter().any(|p| p == parent))
        .collect();
    children.len() == 2 && children.iter().all(|r| r.state == phase)
}

/// Whether `parent` is published complete (read to its end).
fn parent_complete(state: &Shared, parent: &str) -> bool {
    state.cluster.published.as_ref().is_some_and(|doc| {
        doc.shards
            .get(parent)
            .is_some_and(|r| r.state == ShardPhase::Complete)
    })
}
