//! Scale on the API server, not only in the plan: the `shardring run`
//! binary against a real API server (the control plane kit at
//! `../shared/k8s`, or the cluster `KUBECONFIG` names; see [`server`] for
//! the order) or, with `--mock`, the devkit's mock. Every figure is printed
//! beside a baseline measured in the same run on the same server.
//!
//!     cargo bench -p shardring --bench apiserver_scale -- [options]
//!
//! Options: `--quick` (1,000 pods / 4,000 shards only), `--large` (5,000 /
//! 20,000 only), `--startup GxP` (the start-up size, default `200x25`),
//! `--no-churn`, `--no-startup`, `--runs N` (each run separate, then the
//! medians), `--operator-arg ARG` (repeatable: passed to `shardring run`,
//! e.g. `--operator-arg=--write-concurrency=32`), `--verbs` (first, the
//! document's write verbs compared: [`verbs`]), `--mock`, `--policy[=PODS]`
//! (only the admission policy's cost on the annotation path, default 5,000
//! pods: [`policy`]), `--pool[=GxSxP]` (also churn on a pool of G groups of
//! S shards on P pods, default 50x20x200: [`pool_churn`]).
//!
//! Per size ([`churn`]): the plain client's time to annotate every pod and
//! the operator's from the group's creation to every pod annotated; the
//! floor's and the operator's pod event → document delivered p50/p99 over
//! joins and leaves; write requests per churn event and at steady state;
//! the operator's peak RSS (VmHWM) after the first publish and after
//! churn. Then start-up with many groups ([`startup`]): the time until every
//! group is Ready, against a plain client's time for the writes start-up
//! needs. Everything is observed through watches, as a consumer observes it.

mod churn;
#[path = "../common/mod.rs"]
mod common;
mod operator;
mod policy;
mod pool_churn;
mod populate;
mod server;
mod startup;
mod timeline;
mod verbs;

use std::time::Duration;

use churn::Row;
use startup::StartupRow;

struct Options {
    mock: bool,
    sizes: Vec<(usize, u32)>,
    startup: Option<(usize, usize)>,
    runs: usize,
    operator_args: Vec<String>,
    verbs: bool,
    policy: Option<usize>,
    pool: Option<(usize, u32, usize)>,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        let prefix = format!("{name}=");
        args.iter().enumerate().find_map(|(i, a)| {
            a.strip_prefix(&prefix)
                .map(str::to_owned)
                .or_else(|| (a == name).then(|| args.get(i + 1).cloned()).flatten())
        })
    };
    let sizes = if has("--no-churn") {
        vec![]
    } else if has("--quick") {
        vec![(1_000, 4_000)]
    } else if has("--large") {
        vec![(5_000, 20_000)]
    } else {
        vec![(1_000, 4_000), (5_000, 20_000)]
    };
    let startup = (!has("--no-startup")).then(|| {
        let size = value("--startup").unwrap_or_else(|| "200x25".into());
        let (g, p) = size.split_once('x').expect("--startup GROUPSxPODS");
        (
            g.parse().expect("--startup GROUPS"),
            p.parse().expect("--startup PODS"),
        )
    });
    let operator_args = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a.strip_prefix("--operator-arg=") {
            Some(v) => Some(v.to_owned()),
            None => (a == "--operator-arg")
                .then(|| args.get(i + 1).cloned())
                .flatten(),
        })
        .collect();
    Options {
        mock: has("--mock"),
        sizes,
        startup,
        runs: value("--runs").map_or(1, |n| n.parse().expect("--runs N")),
        operator_args,
        verbs: has("--verbs"),
        policy: has("--policy")
            .then_some(5_000)
            .or_else(|| value("--policy").map(|n| n.parse().expect("--policy=PODS"))),
        pool: has("--pool").then_some((50, 20, 200)).or_else(|| {
            let size = value("--pool")?;
            let parts: Vec<&str> = size.split('x').collect();
            let [g, s, p] = parts[..] else {
                panic!("--pool=GROUPSxSHARDSxPODS");
            };
            Some((
                g.parse().expect("--pool GROUPS"),
                s.parse().expect("--pool SHARDS"),
                p.parse().expect("--pool PODS"),
            ))
        }),
    }
}

fn main() {
    shardring::runtime::tls::install_crypto_provider();
    let options = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = server::Server::choose(options.mock).await;
        println!("server: {}", server.describe);
        if !options.operator_args.is_empty() {
            println!("shardring run {}", options.operator_args.join(" "));
        }
        populate::install_crds(&server).await;
        if let Some(pods) = options.policy {
            assert!(
                server.mock.is_none(),
                "--policy needs a real API server (the mock admits everything)"
            );
            let rows = policy::run(&server, pods, options.runs.max(3)).await;
            print_policy(&rows);
            return;
        }
        if options.verbs {
            populate::remove_namespaces(&server, "verbs").await;
            populate::create(&server.client, &populate::namespace("verbs", "verbs")).await;
            verbs::report(&server.client, "verbs").await;
            populate::remove_namespaces(&server, "verbs").await;
        }
        let mut rows: Vec<Vec<Row>> = Vec::new();
        for &(pods, shards) in &options.sizes {
            let mut runs = Vec::new();
            for n in 0..options.runs {
                let row = churn::run(&server, pods, shards, n, &options.operator_args).await;
                print_rows(std::slice::from_ref(&row), &format!("run {}", n + 1));
                runs.push(row);
            }
            rows.push(runs);
        }
        let mut startups = Vec::new();
        if let Some((groups, pods)) = options.startup {
            for n in 0..options.runs {
                let row = startup::run(&server, groups, pods, 20, &options.operator_args).await;
                print_startup(std::slice::from_ref(&row), &format!("run {}", n + 1));
                startups.push(row);
            }
            populate::remove_namespaces(&server, "startup").await;
        }
        populate::remove_namespaces(&server, "churn").await;
        let mut pools = Vec::new();
        if let Some(size) = options.pool {
            for n in 0..options.runs {
                let row = pool_churn::run(&server, size, n, &options.operator_args).await;
                print_pool(std::slice::from_ref(&row), &format!("run {}", n + 1));
                pools.push(row);
            }
            populate::remove_namespaces(&server, "poolchurn").await;
        }
        if options.runs > 1 {
            println!("\nmedians of {} runs:", options.runs);
            for runs in &rows {
                print_rows(&[median_row(runs)], "median");
            }
            if !startups.is_empty() {
                print_startup(&[median_startup(&startups)], "median");
            }
            if !pools.is_empty() {
                print_pool(&[median_pool(&pools)], "median");
            }
        }
    });
}

fn print_policy(rows: &[policy::PolicyRow]) {
    println!();
    println!(
        "| run | pods | the operator's account annotates every pod: without the policy | with it | ratio |"
    );
    println!("|---|---|---|---|---|");
    for (n, r) in rows.iter().enumerate() {
        println!(
            "| {} | {} | {:.2} s | {:.2} s | {:.2}x |",
            n + 1,
            r.pods,
            r.without.as_secs_f64(),
            r.with.as_secs_f64(),
            r.with.as_secs_f64() / r.without.as_secs_f64()
        );
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let without = median(rows.iter().map(|r| r.without).collect());
    let with = median(rows.iter().map(|r| r.with).collect());
    println!(
        "| median | {} | {:.2} s | {:.2} s | {:.2}x |",
        rows[0].pods,
        without.as_secs_f64(),
        with.as_secs_f64(),
        with.as_secs_f64() / without.as_secs_f64()
    );
}

fn print_pool(rows: &[pool_churn::PoolRow], label: &str) {
    println!();
    println!(
        "| {label} | documents per event | floor p50 / p99 | operator p50 / p99 | ratio p50 / p99 | events missed | writes per event | writes / changes at rest |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.1} | {:.0} / {:.0} ms | {:.0} / {:.0} ms | {:.2}x / {:.2}x | {} | {:.1} | {} / {} |",
            r.size,
            r.documents_per_event,
            ms(r.floor.0),
            ms(r.floor.1),
            ms(r.operator.0),
            ms(r.operator.1),
            r.operator.0.as_secs_f64() / r.floor.0.as_secs_f64(),
            r.operator.1.as_secs_f64() / r.floor.1.as_secs_f64(),
            r.missed,
            r.writes_per_event,
            r.steady.0,
            r.steady.1,
        );
    }
}

/// The median of each figure over runs (the p50s' median, the p99s' median).
fn median_pool(rows: &[pool_churn::PoolRow]) -> pool_churn::PoolRow {
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let median_f = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    pool_churn::PoolRow {
        size: rows[0].size.clone(),
        documents_per_event: median_f(rows.iter().map(|r| r.documents_per_event).collect()),
        floor: (
            median(rows.iter().map(|r| r.floor.0).collect()),
            median(rows.iter().map(|r| r.floor.1).collect()),
        ),
        operator: (
            median(rows.iter().map(|r| r.operator.0).collect()),
            median(rows.iter().map(|r| r.operator.1).collect()),
        ),
        missed: rows.iter().map(|r| r.missed).sum(),
        writes_per_event: median_f(rows.iter().map(|r| r.writes_per_event).collect()),
        steady: rows.iter().map(|r| r.steady).max().unwrap_or_default(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print_rows(rows: &[Row], label: &str) {
    println!();
    println!(
        "| {label} | plain client: annotate every pod | operator: group created → first document | → every pod annotated | ratio | floor: pod event → document p50 / p99 | operator p50 / p99 | p99 ratio | writes per churn event | at steady state (requests / changes in 20 s) | peak RSS after first publish / after churn |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let missed = if r.missed > 0 {
            format!(" ({} events without a document)", r.missed)
        } else {
            String::new()
        };
        println!(
            "| {} | {:.2} s | {:.2} s | {:.2} s | {:.2}x | {:.0} / {:.0} ms | {:.0} / {:.0} ms{missed} | {:.2}x | {:.1} | {} / {} | {:.1} / {:.1} MiB |",
            r.size,
            r.plain.as_secs_f64(),
            r.first_publish.as_secs_f64(),
            r.annotations.as_secs_f64(),
            r.annotation_ratio,
            ms(r.floor.0),
            ms(r.floor.1),
            ms(r.operator.0),
            ms(r.operator.1),
            r.p99_ratio,
            r.writes_per_event,
            r.steady.0,
            r.steady.1,
            r.rss.0,
            r.rss.1,
        );
    }
}

fn print_startup(rows: &[StartupRow], label: &str) {
    println!();
    println!(
        "| {label} | start-up | plain client: the writes needed | every group Ready after spawn | ratio | operator's write requests | peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let (groups, pods, shards) = r.size;
        println!(
            "| | {groups} groups x {pods} pods x {shards} shards | {} writes: {:.2} s | {:.2} s | {:.2}x | {} | {:.1} MiB |",
            r.writes_needed,
            r.plain.as_secs_f64(),
            r.ready.as_secs_f64(),
            r.ratio,
            r.operator_writes,
            r.rss,
        );
    }
}

/// The median of `values` (the upper one of an even count).
fn median<T: Copy + PartialOrd>(values: impl IntoIterator<Item = T>) -> T {
    let mut values: Vec<T> = values.into_iter().collect();
    values.sort_by(|a, b| a.partial_cmp(b).expect("comparable figures"));
    values[values.len() / 2]
}

/// Each column's median over the runs (a ratio's median is the median of
/// the runs' ratios, each taken within its run).
fn median_row(runs: &[Row]) -> Row {
    Row {
        size: runs[0].size.clone(),
        plain: median(runs.iter().map(|r| r.plain)),
        first_publish: median(runs.iter().map(|r| r.first_publish)),
        annotations: median(runs.iter().map(|r| r.annotations)),
        floor: (
            median(runs.iter().map(|r| r.floor.0)),
            median(runs.iter().map(|r| r.floor.1)),
        ),
        operator: (
            median(runs.iter().map(|r| r.operator.0)),
            median(runs.iter().map(|r| r.operator.1)),
        ),
        annotation_ratio: median(runs.iter().map(|r| r.annotation_ratio)),
        p99_ratio: median(runs.iter().map(|r| r.p99_ratio)),
        missed: median(runs.iter().map(|r| r.missed)),
        writes_per_event: median(runs.iter().map(|r| r.writes_per_event)),
        steady: (
            median(runs.iter().map(|r| r.steady.0)),
            median(runs.iter().map(|r| r.steady.1)),
        ),
        rss: (
            median(runs.iter().map(|r| r.rss.0)),
            median(runs.iter().map(|r| r.rss.1)),
        ),
    }
}

fn median_startup(runs: &[StartupRow]) -> StartupRow {
    StartupRow {
        size: runs[0].size,
        ready: median(runs.iter().map(|r| r.ready)),
        plain: median(runs.iter().map(|r| r.plain)),
        writes_needed: runs[0].writes_needed,
        operator_writes: median(runs.iter().map(|r| r.operator_writes)),
        rss: median(runs.iter().map(|r| r.rss)),
        ratio: median(runs.iter().map(|r| r.ratio)),
    }
}
