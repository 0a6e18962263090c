//! `shardring crds`: prints the ShardGroup and ConsumerPool CRDs as one
//! multi-document YAML stream (ConsumerPool first), ready for
//! `shardring crds | kubectl apply --server-side -f -`; with `--write DIR` it
//! writes one `<group>_<plural>.yaml` file per CRD instead. The YAML comes from
//! `shardring_crds::crd` so the committed copies, checked for drift by the API
//! crate's tests, are byte-identical to what this prints.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Arguments of `shardring crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory (created if missing) instead
    /// of printing to stdout.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: CrdsArgs) -> anyhow::Result<ExitCode> {
    match args.write {
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(crate::crds::crd_yaml().as_bytes())
                .context("writing the CRDs to stdout")?;
            stdout.flush().context("writing the CRDs to stdout")?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in crate::crds::crd_files() {
                let path = dir.join(name);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_creates_one_file_per_crd() {
        let dir = std::env::temp_dir().join(format!("shardring-crds-test-{}", std::process::id()));
        let code = run(CrdsArgs {
            write: Some(dir.clone()),
        })
        .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        for (name, yaml) in crate::crds::crd_files() {
            assert_eq!(
                std::fs::read_to_string(dir.join(&name)).unwrap(),
                yaml,
                "{name}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
