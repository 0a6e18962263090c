//! The `shardring-dev` binary: the developer's commands, which need a source
//! checkout or local emulators and so are not in the operator's image.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shardring_dev::cli;

/// shardring's developer tooling: the demo, the simulation, and the
/// assignment engine on its own.
#[derive(Debug, Parser)]
#[command(name = "shardring-dev", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole system locally in about a minute, no cluster needed:
    /// emulated Kinesis and DynamoDB, real consumers, scale-up, rolling deploy
    /// and a split, then the checker's verdict.
    Demo(cli::demo::DemoArgs),
    /// Plan an assignment from a YAML or JSON scenario file.
    Plan(cli::plan::PlanArgs),
    /// Print ExplicitHashKey values that spread producers evenly over shards.
    HashKeys(cli::hash_keys::HashKeysArgs),
    /// Run the deterministic simulation of the handoff protocol over many seeds.
    Simulate(cli::simulate::SimulateArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    shardring::runtime::tls::install_crypto_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => cli::demo::run(args).await,
        Command::Plan(args) => cli::plan::run(args),
        Command::HashKeys(args) => cli::hash_keys::run(args),
        Command::Simulate(args) => cli::simulate::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
