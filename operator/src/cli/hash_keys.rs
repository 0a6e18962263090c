//! `shardring hash_keys` (bootstrap: the owning work replaces this file).

/// Arguments of `shardring hash_keys`.
#[derive(Debug, clap::Args)]
pub struct HashKeysArgs {}

/// Runs the command.
pub async fn run(_args: HashKeysArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("BOOTSTRAP: not built yet")
}
