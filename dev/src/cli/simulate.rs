//! `shardring-dev simulate`: runs the deterministic simulation of the handoff
//! protocol around the real controller core (see [`shardring_sim`]) over many
//! seeds, prints one line per failing seed and a summary line
//! `seeds: N, violations: V`; `--seed S` replays one seed exactly;
//! `--report` adds handoff durations, injected faults and a rolling deploy's
//! moves per shard; `--throughput` runs seeds balanced by throughput (load
//! reports with noise, load shifts, the no-flapping and band checks);
//! `--pool` runs seeds of several ShardGroups on one ConsumerPool (with
//! `--throughput`, several balanced by throughput), with the pool-wide
//! balance checks and no writes at rest.

use std::process::ExitCode;

use clap::Args;

use shardring_sim::{self as sim, SimConfig};

/// Arguments of `shardring-dev simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// How many seeds to run (starting at `--first`).
    #[arg(long, default_value_t = 1000)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    pub first: u64,
    /// Run only this seed (reproduces a failure exactly).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Steps with faults per seed (each 100–600 ms of simulated time).
    #[arg(long, default_value_t = SimConfig::default().steps)]
    pub steps: u32,
    /// Quiet steps before the final checks.
    #[arg(long, default_value_t = SimConfig::default().quiet_steps)]
    pub quiet_steps: u32,
    /// Also print handoff durations, fault counts and a rolling deploy of
    /// 10 pods over 100 shards.
    #[arg(long)]
    pub report: bool,
    /// Run seeds balanced by throughput: consumers report noisy loads,
    /// shards' loads shift, and once quiet no shard may move twice within
    /// the damping interval and every pod must be inside the band.
    #[arg(long)]
    pub throughput: bool,
    /// Run seeds of 2–6 ShardGroups on one ConsumerPool (streams and
    /// static partitions, some with standbys; with `--throughput`, at
    /// least two balanced by throughput): once quiet, every pod within one
    /// shard of its share over the count groups and one slot over the
    /// groups with standbys, its whole load within the band, and a further
    /// quiet period writes nothing.
    #[arg(long)]
    pub pool: bool,
}

/// Runs the simulation; exits with failure when any seed violated an invariant.
pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let config = SimConfig {
        steps: args.steps,
        quiet_steps: args.quiet_steps,
    };
    let (first, count) = match args.seed {
        Some(seed) => (seed, 1),
        None => (args.first, args.seeds),
    };
    let run = match (args.pool, args.throughput) {
        (false, false) => sim::run_seeds,
        (false, true) => sim::run_load_seeds,
        (true, false) => sim::run_pool_seeds,
        (true, true) => sim::run_pool_load_seeds,
    };
    let mut summary = run(first, count, config);
    for (seed, violation) in &summary.failures {
        println!("seed {seed}: {violation}");
    }
    println!(
        "seeds: {}, violations: {}",
        summary.seeds,
        summary.failures.len()
    );
    if args.report {
        report(&mut summary);
    }
    Ok(if summary.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn report(summary: &mut sim::Summary) {
    println!(
        "lease table in {} of {} seeds",
        summary.with_lease_table, summary.seeds
    );
    println!("handoffs (simulated ms):");
    println!(
        "  {:<14} {:>8} {:>8} {:>8}",
        "evidence", "count", "p50", "p99"
    );
    for (label, values) in summary.handoffs.iter_mut() {
        let n = values.len();
        let p50 = sim::percentile(values, 50.0);
        let p99 = sim::percentile(values, 99.0);
        println!("  {label:<14} {n:>8} {p50:>8} {p99:>8}");
    }
    let e = &summary.events;
    println!(
        "events: joins {}, graceful deletions {}, kill -9 {}, force deletions {}, node partitions {}, splits {}, merges {}",
        e.joins, e.graceful_deletes, e.kills, e.force_deletes, e.partitions, e.splits, e.merges
    );
    if summary.pool != sim::pool::PoolNotes::default() {
        let p = &summary.pool;
        println!(
            "pool: standby spread judged in {} seeds; let pass: {} plans and {} plans of a new leader that give other standbys only (planned alone, or where nodes or owners bind), and at rest {} document and {} status writes of throughput groups",
            p.standby_spread_judged,
            p.standby_replans,
            p.new_leader_standby_rewrites,
            p.measured_documents_at_rest,
            p.measured_statuses_at_rest
        );
        if p.deferred > 0 {
            println!(
                "pool: {} reconciles deferred behind the groups a new deal concerns",
                p.deferred
            );
        }
        if p.band_unreachable > 0 {
            println!(
                "load: {} band checks let pass with pods outside the band once quiet, where no placement of their loads meets it",
                p.band_unreachable
            );
        }
    }
    let f = &summary.faults;
    println!(
        "faults: failed writes {}, late writes {}, document writes refused by their precondition {}, failed topology reads {}, stale topology reads {}, failed lease scans {}, operator crashes {}, pods changed by another writer during an annotation write {}",
        f.writes_failed,
        f.writes_late,
        f.writes_refused,
        f.topology_failed,
        f.topology_stale,
        f.lease_failed,
        f.crashes,
        f.foreign_writes
    );
    let w = &summary.watch;
    println!(
        "watch events judged by the operator's echo bookkeeping: {} echoes of its own writes (woke nothing), {} held while a write to their object was on its way, {} changes (woke their groups)",
        w.echoes, w.held, w.changes
    );
    println!(
        "records read {}, read again after a move or crash {}",
        summary.records.0, summary.records.1
    );
    let deploy = sim::rolling_deploy(1, 10, 100);
    println!(
        "rolling deploy of {} pods over {} shards: {} moves ({:.2} per shard), handoff p50 {} ms, p99 {} ms, {} s simulated{}",
        deploy.pods,
        deploy.shards,
        deploy.moves,
        deploy.moves_per_shard(),
        deploy.handoff_percentile(50.0),
        deploy.handoff_percentile(99.0),
        deploy.duration_ms / 1000,
        deploy
            .violation
            .as_ref()
            .map(|v| format!(", VIOLATION: {v}"))
            .unwrap_or_default()
    );
}
