//! `shardring-dev hash-keys`: prints ExplicitHashKey values (decimal, 128-bit
//! space) that spread producers evenly over shards and keep doing so as
//! shards split; the algorithm lives in `shardring_engine::hash_keys`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use shardring_engine::hash_keys::{hash_keys, parse_keys};

/// Arguments of `shardring-dev hash-keys`.
#[derive(Debug, clap::Args)]
pub struct HashKeysArgs {
    /// How many new keys to print.
    #[arg(long, short)]
    pub count: usize,
    /// File of keys already in use, one decimal key per line (`#` comments
    /// allowed); new keys fill the emptiest gaps between them first.
    #[arg(long, short)]
    pub existing: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: HashKeysArgs) -> anyhow::Result<ExitCode> {
    let existing = match &args.existing {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            parse_keys(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => Vec::new(),
    };
    let keys = hash_keys(args.count, &existing);
    if keys.len() < args.count {
        anyhow::bail!(
            "only {} free keys are left in the hash key space",
            keys.len()
        );
    }
    let mut out = String::with_capacity(keys.len() * 40);
    for key in keys {
        out.push_str(&key.to_string());
        out.push('\n');
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}
