//! `shardring topology` (bootstrap: the owning work replaces this file).

/// Arguments of `shardring topology`.
#[derive(Debug, clap::Args)]
pub struct TopologyArgs {}

/// Runs the command.
pub async fn run(_args: TopologyArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("BOOTSTRAP: not built yet")
}
