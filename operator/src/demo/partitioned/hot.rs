//! The demo's hot act: load-aware balance and the scaling signal on the
//! static act's machinery (in-process pods with the static-partition
//! worker, the operator's endpoint in this process). The ShardGroup
//! balances by throughput (`balance: throughput`) with a scaling target of
//! 400 KB/s per pod; each consumer counts the bytes it reads and reports
//! its rates through the endpoint every second. The story: three pods read
//! twelve partitions of equal load; two partitions of one pod turn hot
//! (messages ten times larger); after the confirmation the assignment moves
//! shards by load, through acknowledged handoffs, until every pod is back in
//! the ±10 % band; the recommended replicas rise, and the act scales to
//! them as an HPA would; the hot keys cool down, the recommendation falls,
//! and the extra pods are deleted gracefully, their partitions handed over
//! on acknowledgements without waiting for the drain timeout. The ledger
//! then shows every message processed exactly once and in order.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::{Act, ActSpec, DemoConfig, DemoError, pause};
use crate::crds::ShardGroup;
use crate::crds::shard_group::{BalanceMode, ScalingSpec, ThroughputSpec};
use crate::demo::controller::Shared;
use crate::demo::stage::{lock, wait_on};

/// The act's ShardGroup.
const GROUP: &str = "hot";
/// Partitions of the group.
pub const PARTITIONS: u32 = 12;
/// Bytes per message of a partition at rest, and of a hot one.
const COLD_BYTES: u64 = 1024;
const HOT_BYTES: u64 = 10 * 1024;
/// The scaling target.
const TARGET_KBPS: u64 = 400;

/// What the hot act showed.
#[derive(Debug, Clone)]
pub struct HotFigures {
    /// The ledger's tally and the handoffs, as for the static act.
    pub partitions: super::ledger::PartitionFigures,
    /// What the story measured.
    pub story: HotStory,
}

/// What the hot act's story measured.
#[derive(Debug, Clone, Default)]
pub struct HotStory {
    /// Load ÷ fair share (least/most) when the hot keys had been measured,
    /// before the rebalance, and after it.
    pub spread: (String, String),
    /// Shards moved for load in the rebalance.
    pub moved_for_load: u64,
    /// From the hot keys' start to every pod back inside the band.
    pub rebalanced_after: Duration,
    /// The recommended replicas at rest, when hot, and after cooling down.
    pub recommended: (u32, u32, u32),
    /// The status line `kubectl get sg` shows once rebalanced.
    pub get_sg: String,
}

impl HotFigures {
    /// Whether every promise held: the static act's (exactly once, in
    /// order, no overlap, gaps under the drain timeout), a rebalance that
    /// moved shards and ended inside the band, and a recommendation that
    /// followed the load.
    pub fn passed(&self) -> bool {
        let story = &self.story;
        self.partitions.passed()
            && story.moved_for_load > 0
            && band_held(&story.spread.1)
            && story.recommended.1 > story.recommended.0
            && story.recommended.2 < story.recommended.1
    }

    /// The verdict's lines of the hot act.
    pub fn render(&self) -> String {
        let story = &self.story;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "  hot act                  load ÷ fair share {} with two hot partitions, {} after {} shards moved for load in {:.1} s",
            story.spread.0,
            story.spread.1,
            story.moved_for_load,
            story.rebalanced_after.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "  recommended replicas     {} at rest, {} hot, {} cooled down (target {TARGET_KBPS} KB/s per pod)",
            story.recommended.0, story.recommended.1, story.recommended.2
        );
        let _ = writeln!(out, "  kubectl get sg           {}", story.get_sg);
        out.push_str(&self.partitions.render().replace("static act", "hot act"));
        out
    }
}

/// Whether a `min/max` spread is inside ±10 % (as the status prints it).
fn band_held(spread: &str) -> bool {
    spread.split_once('/').is_some_and(|(min, max)| {
        min.parse::<f64>().is_ok_and(|m| m >= 0.895) && max.parse::<f64>().is_ok_and(|m| m <= 1.105)
    })
}

fn configure(group: &mut ShardGroup, config: &DemoConfig) {
    let spec = &mut group.spec;
    spec.balance = BalanceMode::Throughput;
    let damping = config.scaled(Duration::from_secs(10), Duration::from_secs(3));
    spec.throughput = Some(ThroughputSpec {
        half_life: "1s".into(),
        damping_interval: format!("{}ms", damping.as_millis()),
        stale_after: "30s".into(),
        ..ThroughputSpec::default()
    });
    spec.scaling = Some(ScalingSpec {
        target_kbps_per_pod: Some(TARGET_KBPS),
        min_replicas: Some(1),
        ..ScalingSpec::default()
    });
}

/// Runs the act with its files under `dir`; `started` is the demo's clock.
pub async fn run(
    config: &DemoConfig,
    dir: &Path,
    started: Instant,
) -> Result<HotFigures, DemoError> {
    let spec = ActSpec {
        group: GROUP,
        template: "hot-{index}",
        partitions: PARTITIONS,
        sizes: Some(vec![COLD_BYTES; PARTITIONS as usize]),
        load_report: Some(Duration::from_secs(1)),
        configure,
    };
    let act = Act::start(config, &dir.join("hot"), started, spec).await?;
    let result = story(&act, config).await;
    let partitions = act.finish().await;
    result.map(|story| HotFigures { partitions, story })
}

/// The status's throughput view and recommendation.
fn load_status(
    state: &Shared,
) -> Option<(&crate::crds::shard_group::ThroughputStatus, Option<u32>)> {
    let status = state.cluster.group.status.as_ref()?;
    Some((status.throughput.as_ref()?, status.recommended_replicas))
}

/// Every partition measured, nothing in flight, every pod inside the band.
fn balanced(state: &Shared) -> bool {
    state.settled()
        && load_status(state).is_some_and(|(t, _)| {
            t.unmeasured_shards == 0 && t.out_of_band_pods == 0 && t.spread.is_some()
        })
}

async fn story(act: &Act, config: &DemoConfig) -> Result<HotStory, DemoError> {
    act.phase(
        "hot start",
        &format!(
            "9. hot act: ShardGroup {GROUP} balances {PARTITIONS} partitions by throughput (±10 % band, scaling target {TARGET_KBPS} KB/s per pod); 3 pods report their load through the endpoint each second"
        ),
    );
    let names: Vec<String> = (0..3).map(|i| format!("hot-v1-{i}")).collect();
    act.start_pods(&names)?;
    wait_on(
        &act.shared,
        "every partition measured and in the band",
        balanced,
    )
    .await?;
    let at_rest = recommended(act);
    print_loads(act, "at rest");
    pause(config).await;

    // Two partitions of the first pod turn hot.
    let hot: Vec<String> = lock(&act.shared)
        .cluster
        .published
        .as_ref()
        .and_then(|doc| doc.pods.get("hot-v1-0"))
        .map(|p| p.active.iter().take(2).cloned().collect())
        .unwrap_or_default();
    act.phase(
        "hot keys",
        &format!(
            "10. hot act: the producer's hot keys land on {} (messages 10x larger): hot-v1-0 leaves the band; shards move by load once it stayed out for three half-lives",
            hot.join(" and ")
        ),
    );
    let last_before = rebalanced_at(act);
    let hot_since = Instant::now();
    for partition in &hot {
        act.queue.set_message_bytes(partition, HOT_BYTES);
    }
    let before = wait_on(&act.shared, "the hot keys measured outside the band", |s| {
        load_status(s).is_some_and(|(t, _)| t.out_of_band_pods > 0)
    })
    .await
    .map(|()| spread(act))?;
    wait_on(&act.shared, "a load rebalance back inside the band", |s| {
        balanced(s) && load_status(s).and_then(|(t, _)| t.last_rebalance) != last_before
    })
    .await?;
    let rebalanced_after = hot_since.elapsed();
    let after = spread(act);
    let moved_for_load = lock(&act.shared).revokes_in("hot keys");
    let hot_recommended = recommended(act);
    print_loads(act, "rebalanced");
    let get_sg = get_sg(act);
    println!(
        "  $ kubectl get sg {GROUP}\n  {}\n  {get_sg}",
        get_sg_header()
    );
    pause(config).await;

    act.phase(
        "hot scale up",
        &format!("11. hot act: recommendedReplicas is {hot_recommended}: scale to it, as an HPA on shardring_recommended_replicas would"),
    );
    let live = lock(&act.shared).cluster.pods.len();
    let more: Vec<String> = (live..hot_recommended as usize)
        .map(|i| format!("hot-v1-{i}"))
        .collect();
    act.start_pods(&more)?;
    wait_on(&act.shared, "the new pods balanced by load", balanced).await?;
    print_loads(act, "scaled up");
    pause(config).await;

    act.phase(
        "hot scale down",
        "12. hot act: the hot keys cool down; the recommendation falls and the extra pods are deleted gracefully: their partitions are handed over on acknowledgements, not after the drain timeout",
    );
    for partition in &hot {
        act.queue.set_message_bytes(partition, COLD_BYTES);
    }
    wait_on(&act.shared, "the recommendation to fall", |s| {
        load_status(s)
            .and_then(|(_, r)| r)
            .is_some_and(|r| r < hot_recommended)
    })
    .await?;
    let cooled = recommended(act);
    let pods: Vec<String> = lock(&act.shared).cluster.pods.keys().cloned().collect();
    for pod in pods.iter().skip(cooled as usize) {
        act.delete_pod(pod);
    }
    wait_on(
        &act.shared,
        "the extra pods gone and the rest balanced",
        |s| s.cluster.pods.len() == cooled as usize && balanced(s),
    )
    .await?;
    print_loads(act, "scaled down");
    Ok(HotStory {
        spread: (before, after),
        moved_for_load,
        rebalanced_after,
        recommended: (at_rest, hot_recommended, cooled),
        get_sg,
    })
}

fn recommended(act: &Act) -> u32 {
    load_status(&lock(&act.shared))
        .and_then(|(_, r)| r)
        .unwrap_or(0)
}

fn rebalanced_at(act: &Act) -> Option<Timestamp> {
    load_status(&lock(&act.shared)).and_then(|(t, _)| t.last_rebalance)
}

fn spread(act: &Act) -> String {
    load_status(&lock(&act.shared))
        .and_then(|(t, _)| t.spread.clone())
        .unwrap_or_else(|| "-".into())
}

fn get_sg_header() -> String {
    format!(
        "{:<6} {:<10} {:>6} {:>4} {:>5} {:>5} {:>9} {:>11} {:>5}",
        "NAME", "SOURCE", "SHARDS", "PODS", "LOAD", "MOVES", "SPREAD", "RECOMMENDED", "READY"
    )
}

/// The group's line as `kubectl get sg` prints it (the CRD's printer
/// columns over the status).
fn get_sg(act: &Act) -> String {
    let state = lock(&act.shared);
    let Some(status) = state.cluster.group.status.as_ref() else {
        return String::new();
    };
    let ready = shardring_core::conditions::find(&status.conditions, "Ready")
        .map_or("-", |c| c.status.as_str());
    format!(
        "{:<6} {:<10} {:>6} {:>4} {:>5} {:>5} {:>9} {:>11} {:>5}",
        GROUP,
        status.source.as_deref().unwrap_or("-"),
        status.shards.total,
        status.pods.eligible,
        status.load.as_deref().unwrap_or("-"),
        status.moves_in_flight,
        status
            .throughput
            .as_ref()
            .and_then(|t| t.spread.as_deref())
            .unwrap_or("-"),
        status
            .recommended_replicas
            .map_or("-".to_owned(), |r| r.to_string()),
        ready
    )
}

/// Prints the measured load: each pod's partitions and its share.
fn print_loads(act: &Act, when: &str) {
    let state = lock(&act.shared);
    let Some((load, recommended)) = load_status(&state) else {
        return;
    };
    println!(
        "  [{when}] {} KB/s in all, load ÷ fair share {}, {} pods outside the band, recommendedReplicas {}",
        load.total_kbps,
        load.spread.as_deref().unwrap_or("-"),
        load.out_of_band_pods,
        recommended.map_or("-".to_owned(), |r| r.to_string())
    );
    if let Some(doc) = &state.cluster.published {
        for (pod, view) in &doc.pods {
            println!("    {pod:<10} {}", view.active.join(" "));
        }
    }
}
