//! `shardring-dev demo`: runs the whole system locally (see [`crate::demo`]) and
//! exits non-zero when the checker finds a violation or the story fails.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::demo::{self, DemoConfig};

/// Arguments of `shardring-dev demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Multiplies every pause and timeout of the story (0.5 runs it faster,
    /// 2 slower).
    #[arg(long, default_value_t = 1.0, env = "SHARDRING_DEMO_DURATION_SCALE")]
    pub duration_scale: f64,
    /// Keep the record logs, pod views, consumer logs and the published
    /// document in this directory (default: a temp dir, removed on success).
    #[arg(long)]
    pub keep_logs: Option<PathBuf>,
    /// Consumer pods at the start (the scale-up adds two).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub consumers: u16,
    /// Shards of the stream at the start (the split adds one).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub shards: u32,
    /// The `shardring-reference-consumer` binary (default: next to this
    /// executable, built with cargo when missing in a source checkout).
    #[arg(long, env = "SHARDRING_REFERENCE_CONSUMER")]
    pub consumer_binary: Option<PathBuf>,
}

/// Runs the demo and prints its verdict.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if !(args.duration_scale > 0.0 && args.duration_scale.is_finite()) {
        anyhow::bail!("--duration-scale must be a positive number");
    }
    let config = DemoConfig {
        duration_scale: args.duration_scale,
        keep_logs: args.keep_logs,
        consumers: usize::from(args.consumers),
        shards: args.shards,
        consumer_binary: args.consumer_binary,
    };
    let verdict = demo::run(config).await?;
    println!("\n{}", verdict.render());
    Ok(if verdict.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
