//! The simulation on seeds no earlier run chose: the fixed ranges of
//! `seeds` and `load` stay the same from run to run, so a rare bug outside
//! them would never be met. Each run draws a new first seed (from the clock)
//! unless `SHARDRING_SIM_SEED_BASE` names one, prints the range, and on a
//! failure names the command that replays the failing seed exactly.

use std::time::{SystemTime, UNIX_EPOCH};

use shardring_sim::{self as sim, SimConfig, Summary};

/// Fresh seeds of each kind per run (the test profile runs about 40 count
/// seeds and 10 throughput seeds a second on one core).
const COUNT_SEEDS: u64 = 1_000;
const THROUGHPUT_SEEDS: u64 = 200;

/// The first seed of this run: `SHARDRING_SIM_SEED_BASE`, else drawn from
/// the clock above the fixed ranges the other tests run.
fn first_seed(kind: &str) -> u64 {
    let base = match std::env::var("SHARDRING_SIM_SEED_BASE") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("SHARDRING_SIM_SEED_BASE={text:?}: expected a seed (u64)")),
        Err(_) => {
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
                u64::from(d.subsec_nanos()) ^ d.as_secs().rotate_left(32)
            });
            1_000_000 + nanos % 1_000_000_000
        }
    };
    println!(
        "fresh {kind} seeds from {base} (set SHARDRING_SIM_SEED_BASE={base} to run the same range)"
    );
    base
}

/// Fails with every failing seed and the command that replays the first.
fn assert_clean(summary: &Summary, first: u64, replay: &str) {
    if let Some((seed, violation)) = summary.failures.first() {
        panic!(
            "{} of seeds {first}..{} violated an invariant: {:?}\nfirst: seed {seed}: {violation}\nreplay: cargo run --release -p shardring-dev -- simulate {replay}--seed {seed}",
            summary.failures.len(),
            first + summary.seeds,
            summary.failures.iter().map(|(s, _)| s).collect::<Vec<_>>(),
        );
    }
}

#[test]
fn fresh_seeds_keep_every_invariant() {
    let first = first_seed("count");
    let summary = sim::run_seeds(first, COUNT_SEEDS, SimConfig::default());
    assert_eq!(summary.seeds, COUNT_SEEDS);
    assert_clean(&summary, first, "");
}

#[test]
fn fresh_throughput_seeds_keep_every_invariant() {
    let first = first_seed("throughput");
    let summary = sim::run_load_seeds(first, THROUGHPUT_SEEDS, SimConfig::default());
    assert_eq!(summary.seeds, THROUGHPUT_SEEDS);
    assert_clean(&summary, first, "--throughput ");
}
