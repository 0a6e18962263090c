//! Measures the ListShards call rate per stream at steady state with shared
//! readers, on kinesis-local, in compressed time (1 ms here = 100 ms real):
//! each ShardGroup refreshes every 30 s ±10% (300 ms here), the shared reader
//! serves a topology younger than 10 s (100 ms here) from its cache. Prints
//! calls per (real) minute for 1 and 3 groups on one stream and checks them
//! against the design bound: 2 per group per minute, at most 6 per stream.

use std::sync::Arc;
use std::time::Duration;

use shardring::source::kinesis::pacing::{jitter_interval, jitter_unit};
use shardring::source::kinesis::{ReaderOptions, ReaderRegistry, StreamId, TopologyReader};

use crate::support;

/// Real seconds per test second.
const SCALE: f64 = 100.0;

async fn run_groups(reader: Arc<TopologyReader>, groups: usize, run: Duration) -> u64 {
    let before = reader.calls();
    let deadline = tokio::time::Instant::now() + run;
    let tasks: Vec<_> = (0..groups)
        .map(|_| {
            let reader = reader.clone();
            tokio::spawn(async move {
                // Groups start at random phases, like independent reconcilers.
                tokio::time::sleep(Duration::from_millis(300).mul_f64(jitter_unit())).await;
                while tokio::time::Instant::now() < deadline {
                    reader.topology().await.expect("topology");
                    tokio::time::sleep(jitter_interval(
                        Duration::from_millis(300),
                        0.1,
                        jitter_unit(),
                    ))
                    .await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("group task");
    }
    reader.calls() - before
}

#[tokio::test]
async fn steady_state_list_shards_calls_per_minute() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "steady", 4).await;
    let options = ReaderOptions {
        page_size: None,
        min_call_interval: Duration::from_millis(1),
        min_refresh_interval: Duration::from_millis(100),
        ..ReaderOptions::default()
    };
    let endpoint = kinesis.endpoint();
    let run = Duration::from_secs(3); // five real minutes
    let minutes = run.as_secs_f64() * SCALE / 60.0;
    for groups in [1usize, 3] {
        // One reader shared by every group, as the registry hands out; a
        // fresh one per configuration so the cache starts empty.
        let registry = ReaderRegistry::new(support::sdk_config().await, options, None);
        let reader = registry.reader(
            StreamId::named("steady"),
            Some(support::REGION),
            Some(&endpoint),
        );
        let calls = run_groups(reader, groups, run).await;
        let per_minute = calls as f64 / minutes;
        println!(
            "measured: {groups} group(s) on one stream, 30 s refresh, 10 s shared cache: {calls} ListShards calls in {minutes:.0} min = {per_minute:.1} per minute"
        );
        let bound = (2.0 * groups as f64).min(6.0) * 1.25;
        assert!(
            per_minute <= bound,
            "{per_minute} calls/min exceeds {bound}"
        );
        assert!(per_minute >= 1.0, "refreshes happened");
    }
}
