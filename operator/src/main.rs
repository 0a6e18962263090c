//! The `shardring` binary: parses the command line and hands each subcommand
//! to its module in `shardring::cli`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shardring::cli;

/// jemalloc, set up in `.cargo/config.toml` to keep one arena whose freed
/// pages a background thread gives back within about thirty seconds. A reconcile
/// of a large group allocates and frees several MiB; with glibc's malloc the
/// resident set kept that peak and grew with churn (docs/deploy.md, Memory;
/// the figures are in docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// shardring assigns the shards of Kinesis streams and partition queues to the
/// pods of a consumer workload: balanced, sticky, and never two readers.
#[derive(Debug, Parser)]
#[command(name = "shardring", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator against the cluster in KUBECONFIG or in-cluster config.
    // Boxed: the endpoint's flags make it several times the other variants.
    Run(Box<cli::run::RunArgs>),
    /// Print the CRD YAML of ShardGroup and ConsumerPool.
    Crds(cli::crds::CrdsArgs),
    /// Print the shard tree of a Kinesis stream (and its lease table).
    Topology(cli::topology::TopologyArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    shardring::runtime::tls::install_crypto_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cli::run::run(*args).await,
        Command::Crds(args) => cli::crds::run(args),
        Command::Topology(args) => cli::topology::run(args).await,
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
