//! `shardring crds` (bootstrap: the owning work replaces this file).

/// Arguments of `shardring crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {}

/// Runs the command.
pub async fn run(_args: CrdsArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("BOOTSTRAP: not built yet")
}
