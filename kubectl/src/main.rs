//! `kubectl shardring` (a kubectl plugin: kubectl runs `kubectl-shardring`
//! from PATH): the command line and its four commands, each reading the
//! cluster once and writing nothing.

mod plan;
mod status;
mod table;
mod top;
mod why;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube::Client;

/// shardring at a glance, from the cluster in KUBECONFIG (read only).
#[derive(Debug, Parser)]
#[command(name = "kubectl shardring", version)]
struct Cli {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// ShardGroups and ConsumerPools: shards, pods, epoch, moves, conditions.
    Status,
    /// Where a shard is, why, and what happened to it lately.
    Why {
        /// The shard (partition) id.
        shard: String,
        /// The ShardGroup (default: every group that has the shard).
        #[arg(short, long)]
        group: Option<String>,
    },
    /// What the operator would move if a pool had N pods: the moves per
    /// group and the shards per pod afterwards (pacing lifted).
    Plan {
        /// The number of eligible pods to plan for.
        #[arg(long)]
        replicas: usize,
        /// The ConsumerPool (default: the namespace's only one).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Pods by the shards they read over all groups.
    Top,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    shardring::runtime::tls::install_crypto_provider();
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("connecting to the Kubernetes API (KUBECONFIG or in-cluster): {e}")
    })?;
    let namespace = cli
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let snapshot = shardring::controller::snapshot::Snapshot::list(
        &client,
        &namespace,
        jiff::Timestamp::now(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("listing shardring's objects in namespace {namespace}: {e}"))?;
    let out = match cli.command {
        Command::Status => status::render(&snapshot),
        Command::Why { shard, group } => why::render(&snapshot, &shard, group.as_deref())?,
        Command::Plan { replicas, pool } => plan::render(snapshot, pool.as_deref(), replicas)?,
        Command::Top => top::render(&snapshot),
    };
    print!("{out}");
    Ok(())
}
