//! `shardring run` (bootstrap: the owning work replaces this file).

/// Arguments of `shardring run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

/// Runs the command.
pub async fn run(_args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("BOOTSTRAP: not built yet")
}
