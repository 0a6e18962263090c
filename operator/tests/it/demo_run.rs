//! `shardring demo` end to end, in-process: kinesis-local and dynalite, the
//! real plan step on the in-process cluster, reference-consumer processes,
//! the producer, the whole story (start, scale up, rolling deploy, split),
//! then the checker over every record log; then the static act (static
//! partitions through the consumer endpoint, acknowledged handoffs) and the
//! hot act (balance by throughput, the scaling signal). Runs
//! at half the demo's pace (about 20 s plus emulator start-up).
//!
//! Needs Node.js (the emulators are installed with npm into `e2e/` when
//! missing) and the reference consumer binary, which `cargo test --workspace`
//! builds; on its own run `cargo build -p shardring -p shardring-consumer
//! --bin shardring-reference-consumer` first.

use shardring::demo::{self, DemoConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_story_passes_the_checker() {
    // Not beside an embedded scenario, which runs the same stage.
    let _stage = crate::STAGE.lock().await;
    let config = DemoConfig {
        duration_scale: 0.5,
        ..DemoConfig::default()
    };
    let verdict = demo::run(config.clone())
        .await
        .expect("the demo runs to its verdict");
    println!("{}", verdict.render());
    let check = &verdict.check;
    assert!(check.produced > 0, "the producer wrote nothing");
    assert!(check.overlaps.is_empty(), "overlaps: {:?}", check.overlaps);
    assert!(check.lost.is_empty(), "{} records lost", check.lost.len());
    assert!(
        check.order_violations.is_empty(),
        "order violations: {:?}",
        check.order_violations
    );
    assert!(
        check.parent_violations.is_empty(),
        "children read before parents: {:?}",
        check.parent_violations
    );
    assert!(
        verdict.problems.is_empty(),
        "problems: {:?}",
        verdict.problems
    );
    // The split's two children were read too.
    assert_eq!(check.shards, config.shards as usize + 2);
    // Every pod was replaced, so every shard changed hands at least once.
    let rolling = verdict
        .handoffs_by_phase
        .get("rolling deploy")
        .copied()
        .unwrap_or(0);
    assert!(
        rolling >= verdict.rolling_shards,
        "{rolling} handoffs for {} shards in the rolling deploy",
        verdict.rolling_shards
    );
    // The static act: each partition's messages exactly once and in order
    // across owners (the acknowledged checkpoints carried them over), never
    // two pods at once, and handoffs far inside the drain timeout.
    let partitions = verdict.partitions.as_ref().expect("the static act ran");
    let tally = &partitions.tally;
    assert_eq!(tally.partitions, demo::partitioned::PARTITIONS as usize);
    assert!(tally.produced > 0, "the queue producer wrote nothing");
    assert_eq!(tally.processed, tally.produced, "each message once");
    assert_eq!((tally.duplicates, tally.missing), (0, 0));
    assert_eq!(tally.order_violations, 0);
    assert_eq!(tally.overlaps, 0);
    // A tenth of the drain timeout is 500 ms at this pace, the goal for a
    // planned move with acknowledgements; a new pod long-polls from the
    // start, so it is p99 10-20 ms on an idle machine.
    let p99 = tally.gap_quantile(0.99).expect("handoffs were seen");
    assert!(
        p99 < partitions.drain_timeout / 10,
        "p99 gap {p99:?} against drainTimeout {:?}",
        partitions.drain_timeout
    );
    assert!(
        partitions.acked() * 2 > tally.gaps.len(),
        "most handoffs completed on an acknowledgement: {:?}",
        partitions.evidence
    );
    assert!(partitions.passed(), "{}", partitions.render());
    // The hot act: two hot partitions are rebalanced by load into the band
    // through acknowledged handoffs, the recommendation rises with the
    // load and falls with it, and the scale-down drains on acknowledgements.
    let hot = verdict.hot.as_ref().expect("the hot act ran");
    let tally = &hot.partitions.tally;
    assert_eq!(tally.processed, tally.produced, "each message once");
    assert_eq!((tally.duplicates, tally.missing, tally.overlaps), (0, 0, 0));
    assert_eq!(tally.order_violations, 0);
    assert!(hot.story.moved_for_load > 0, "{}", hot.render());
    assert!(
        hot.story.recommended.1 > hot.story.recommended.0
            && hot.story.recommended.2 < hot.story.recommended.1,
        "{}",
        hot.render()
    );
    assert!(
        !hot.partitions.evidence.contains_key("drain_timeout"),
        "no handoff waited for the drain timeout: {:?}",
        hot.partitions.evidence
    );
    assert!(hot.passed(), "{}", hot.render());
    assert!(verdict.passed());
}
