//! `shardring plan` (bootstrap: the owning work replaces this file).

/// Arguments of `shardring plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {}

/// Runs the command.
pub async fn run(_args: PlanArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("BOOTSTRAP: not built yet")
}
