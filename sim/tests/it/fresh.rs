//! The simulation on seeds no earlier run chose: the fixed ranges of
//! `seeds`, `load` and `pool` stay the same from run to run, so a rare bug
//! outside them would never be met. Each run draws a new first seed (from the clock)
//! unless `SHARDRING_SIM_SEED_BASE` names one, prints the range, and on a
//! failure names the command that replays the failing seed exactly.

use std::time::{SystemTime, UNIX_EPOCH};

use shardring_sim::{self as sim, SimConfig, Summary};

/// Fresh seeds of each kind per run (the test profile runs about 40 count
/// seeds and 10 throughput seeds a second on one core, and of pools, about
/// 8 and 3.5).
const COUNT_SEEDS: u64 = 1_000;
const THROUGHPUT_SEEDS: u64 = 200;
const POOL_SEEDS: u64 = 80;
const POOL_THROUGHPUT_SEEDS: u64 = 30;

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

/// Runs `count` seeds of `kind` from a fresh first seed with `run`, and
/// fails with every failing seed and the command that replays the first
/// (`replay`: the flags of `shardring-dev simulate` for this kind).
fn run_fresh(kind: &str, count: u64, run: fn(u64, u64, SimConfig) -> Summary, replay: &str) {
    let first = first_seed(kind);
    let summary = run(first, count, SimConfig::default());
    assert_eq!(summary.seeds, count);
    if let Some((seed, violation)) = summary.failures.first() {
        panic!(
            "{} of {kind} seeds {first}..{} violated an invariant: {:?}\nfirst: seed {seed}: {violation}\nreplay: cargo run --release -p shardring-dev -- simulate {replay}--seed {seed}",
            summary.failures.len(),
            first + count,
            summary.failures.iter().map(|(s, _)| s).collect::<Vec<_>>(),
        );
    }
}

#[test]
fn fresh_seeds_keep_every_invariant() {
    run_fresh("count", COUNT_SEEDS, sim::run_seeds, "");
}

#[test]
fn fresh_throughput_seeds_keep_every_invariant() {
    run_fresh(
        "throughput",
        THROUGHPUT_SEEDS,
        sim::run_load_seeds,
        "--throughput ",
    );
}

#[test]
fn fresh_pool_seeds_keep_every_invariant() {
    run_fresh("pool", POOL_SEEDS, sim::run_pool_seeds, "--pool ");
}

#[test]
fn fresh_pool_throughput_seeds_keep_every_invariant() {
    run_fresh(
        "pool throughput",
        POOL_THROUGHPUT_SEEDS,
        sim::run_pool_load_seeds,
        "--pool --throughput ",
    );
}
