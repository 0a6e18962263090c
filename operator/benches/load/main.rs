//! Load-aware balance side by side: count balance, a KCL 3.x-style greedy
//! reassigner (`kcl.rs`, from its published rule) and shardring's
//! `balance: throughput`, on the same Zipf-skewed shard loads (s = 1.1) and
//! the same readings (±5 % uniform noise, one reading per shard every 10 s).
//! Every strategy starts from the same count-balanced assignment. Moves are
//! instant here (the two-phase handoff is the simulation's business).
//!
//! Printed, per size (1,000 shards on 50 pods, 64 on 10):
//! 1. after one hour: max/mean and max/fair of the true loads (fair: the
//!    water-filled share, a pod holding a shard heavier than the mean can do
//!    no better than that shard), the moves and the shards moved more than
//!    once;
//! 2. the next 24 hours of noise alone: moves;
//! 3. one shard's load doubles (each of the 16 heaviest in turn, from the
//!    state after 2): moves against the lower bound (pods over the band or
//!    under it, whichever are more: each must give or take a shard), and how
//!    long until every pod is back inside the band;
//! 4. a slow drift (every shard's load × 1 ± 50 % over a 6-hour period, in
//!    its own phase) for 12 hours: moves per hour, shards moved more than
//!    once, the time-averaged and worst max/fair, and the time every pod was
//!    inside the band.
//!
//! Run: `cargo bench -p shardring --bench load` (the figures do not depend
//! on the build: `cargo test -p shardring --bench load` prints the same).

mod kcl;
mod strategies;
mod world;

use strategies::{Count, Strategy, Throughput, count_start};
use world::{BAND, Judgement, Loads, STEP_SECONDS, best_max_over_mean, judge, zipf};

const HOUR: u64 = 3600;

/// The damping interval of shardring's default spec: the deadline of a
/// return into the band.
const DAMPING: u64 = 300;

/// Moves made while running.
#[derive(Clone, Default)]
struct Moves {
    per_shard: Vec<u32>,
}

impl Moves {
    fn new(n: usize) -> Self {
        Self {
            per_shard: vec![0; n],
        }
    }
    fn total(&self) -> u64 {
        self.per_shard.iter().map(|&m| u64::from(m)).sum()
    }
    fn more_than_once(&self) -> usize {
        self.per_shard.iter().filter(|&&m| m > 1).count()
    }
}

/// Steps `strategy` from second `from` (inclusive) to `to` (exclusive),
/// counting moves and calling `look` after every step.
fn run(
    strategy: &mut dyn Strategy,
    loads: &Loads,
    from: u64,
    to: u64,
    moves: &mut Moves,
    mut look: impl FnMut(u64, &[usize]),
) {
    let mut t = from;
    while t < to {
        let before = strategy.owners().to_vec();
        strategy.step(t, loads);
        for (s, (a, b)) in before.iter().zip(strategy.owners()).enumerate() {
            if a != b {
                moves.per_shard[s] += 1;
            }
        }
        look(t, strategy.owners());
        t += STEP_SECONDS;
    }
}

fn strategies(start: &[usize], p: usize) -> Vec<Box<dyn Strategy>> {
    vec![
        Box::new(Count(start.to_vec())),
        Box::new(kcl::Kcl::new(start.to_vec(), p)),
        Box::new(Throughput::new(start.to_vec(), p)),
    ]
}

fn main() {
    println!(
        "Zipf s = 1.1, readings ±{:.0} %, band ±{:.0} %\n",
        world::NOISE * 100.0,
        BAND * 100.0
    );
    for (n, p) in [(1000, 50), (64, 10)] {
        size(n, p);
    }
}

fn size(n: usize, p: usize) {
    let base = zipf(n, 1.1, n as f64 * 512.0 * 1024.0);
    let loads = Loads::new(base.clone());
    let start = count_start(n, p);
    println!(
        "== {n} shards on {p} pods (heaviest shard {:.2}x the mean pod load: max/mean can be no lower) ==",
        best_max_over_mean(&base, p)
    );
    println!(
        "{:<14} {:>9} {:>9} {:>9} {:>10} {:>12} {:>10}",
        "strategy", "max/mean", "max/fair", "min/fair", "moves 1h", "moved twice", "moves 24h"
    );
    let mut settled: Vec<Box<dyn Strategy>> = Vec::new();
    for mut strategy in strategies(&start, p) {
        let mut first = Moves::new(n);
        run(strategy.as_mut(), &loads, 0, HOUR, &mut first, |_, _| {});
        let j = judge(strategy.owners(), p, &loads.all(HOUR));
        let mut noise = Moves::new(n);
        run(
            strategy.as_mut(),
            &loads,
            HOUR,
            25 * HOUR,
            &mut noise,
            |_, _| {},
        );
        println!(
            "{:<14} {:>9.3} {:>9.3} {:>9.3} {:>10} {:>12} {:>10}",
            strategy.name(),
            j.max_over_mean,
            j.max_over_fair,
            j.min_over_fair,
            first.total(),
            first.more_than_once(),
            noise.total()
        );
        settled.push(strategy);
    }
    shifts(n, p, &base, &settled);
    drift(n, p, &base, &start);
    println!();
}

/// Doubles each of the 16 heaviest shards in turn, from the settled state.
fn shifts(n: usize, p: usize, base: &[f64], settled: &[Box<dyn Strategy>]) {
    let mut heaviest: Vec<usize> = (0..n).collect();
    heaviest.sort_by(|&a, &b| base[b].total_cmp(&base[a]));
    heaviest.truncate(16);
    println!(
        "\n2x load on one shard (each of the 16 heaviest in turn), {} min after:",
        15
    );
    println!(
        "{:<14} {:>6} {:>6} {:>6} {:>13} {:>8} {:>13} {:>8}",
        "strategy", "left", "moves", "bound", "back in band", "slowest", "none over", "slowest"
    );
    let t0 = 25 * HOUR;
    for original in settled {
        let (mut left, mut moves, mut bound, mut back, mut slowest) = (0, 0, 0, 0, 0u64);
        let (mut over_back, mut over_slowest) = (0, 0u64);
        for &s in &heaviest {
            let mut strategy = original.boxed();
            let before = judge(strategy.owners(), p, base);
            let mut loads = Loads::new(base.to_vec());
            loads.factor[s] = 2.0;
            // The band, or as far outside it as the assignment already was
            // before the shift (a pod the strategy left at 1.12 is not the
            // shift's doing).
            let (low, high) = (
                before.min_over_fair.min(1.0 - BAND),
                before.max_over_fair.max(1.0 + BAND),
            );
            let at_shift: Judgement = judge(strategy.owners(), p, &loads.all(t0));
            let (over, under) = at_shift.outside(low, high);
            if over + under == 0 {
                continue;
            }
            left += 1;
            bound += at_shift.lower_bound(strategy.owners(), &loads.all(t0), low, high);
            let mut made = Moves::new(n);
            let (mut last_out, mut last_over) = (t0, t0);
            run(
                strategy.as_mut(),
                &loads,
                t0,
                t0 + 15 * 60,
                &mut made,
                |t, owners| {
                    let (over, under) = judge(owners, p, &loads.all(t)).outside(low, high);
                    if over + under > 0 {
                        last_out = t + STEP_SECONDS;
                    }
                    if over > 0 {
                        last_over = t + STEP_SECONDS;
                    }
                },
            );
            if last_over < t0 + 15 * 60 {
                over_back += 1;
                over_slowest = over_slowest.max(last_over - t0);
            }
            moves += made.total();
            if std::env::var_os("LOAD_BENCH_VERBOSE").is_some() {
                let end = judge(strategy.owners(), p, &loads.all(t0 + 15 * 60));
                println!(
                    "  {} shard {s}: at shift {:.3}..{:.3} (over {over}, under {under}, band {low:.3}..{high:.3}), after {:.3}..{:.3}, moves {}, last out {}s",
                    original.name(),
                    at_shift.min_over_fair,
                    at_shift.max_over_fair,
                    end.min_over_fair,
                    end.max_over_fair,
                    made.total(),
                    last_out - t0
                );
            }
            if last_out < t0 + 15 * 60 {
                back += 1;
                slowest = slowest.max(last_out - t0);
            }
        }
        println!(
            "{:<14} {:>6} {:>6} {:>6} {:>13} {:>7}s {:>13} {:>7}s",
            original.name(),
            left,
            moves,
            bound,
            format!("{back} of {left}"),
            slowest,
            format!("{over_back} of {left}"),
            over_slowest
        );
    }
    println!(
        "(left: doublings that took a pod outside the band (or further outside than before); bound: the sum of their lower bounds; back in band: every pod inside again within 15 min, and the slowest of those returns; none over: no pod above the band any more; the damping interval is {DAMPING}s)"
    );
}

/// A slow drift for 12 hours after a 1-hour start.
fn drift(n: usize, p: usize, base: &[f64], start: &[usize]) {
    let mut loads = Loads::new(base.to_vec());
    loads.drift = Some((0.5, 6.0 * HOUR as f64));
    println!("\nslow drift (±50 % over 6 h per shard, own phase), 12 h after a 1 h start:");
    println!(
        "{:<14} {:>10} {:>12} {:>13} {:>14} {:>9} {:>9}",
        "strategy",
        "moves/h",
        "moved twice",
        "avg max/fair",
        "worst max/fair",
        "in band",
        "≤ ±15 %"
    );
    for mut strategy in strategies(start, p) {
        let mut warmup = Moves::new(n);
        run(strategy.as_mut(), &loads, 0, HOUR, &mut warmup, |_, _| {});
        let mut moves = Moves::new(n);
        let (mut sum, mut worst, mut inside, mut near, mut looks) = (0.0, 0.0f64, 0u64, 0u64, 0u64);
        run(
            strategy.as_mut(),
            &loads,
            HOUR,
            13 * HOUR,
            &mut moves,
            |t, owners| {
                let j = judge(owners, p, &loads.all(t));
                sum += j.max_over_fair;
                worst = worst.max(j.max_over_fair);
                inside += u64::from(j.in_band());
                let (over, under) = j.outside(0.85, 1.15);
                near += u64::from(over + under == 0);
                looks += 1;
            },
        );
        println!(
            "{:<14} {:>10.1} {:>12} {:>13.3} {:>14.3} {:>8.1}% {:>8.1}%",
            strategy.name(),
            moves.total() as f64 / 12.0,
            moves.more_than_once(),
            sum / looks as f64,
            worst,
            100.0 * inside as f64 / looks as f64,
            100.0 * near as f64 / looks as f64
        );
    }
}
