//! Running the operator under test as a child process: the `shardring` binary
//! that `cargo test --workspace` builds next to the test executables (built on
//! demand when missing), started with `shardring run` against the same
//! kubeconfig as the test and killed when the handle is dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};

/// Why the operator process could not be started or failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The test executable's own path is unknown, so the target dir is too.
    #[error("cannot locate the test executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    /// Building the binary with cargo failed.
    #[error("`cargo build -p shardring --bin shardring` failed ({0}); build it and retry")]
    Build(String),
    /// Spawning the binary failed.
    #[error("cannot start {path}: {source}")]
    Spawn {
        /// The binary that was started.
        path: PathBuf,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
    /// The operator exited although it should still be running.
    #[error("the operator exited early with {0}")]
    Exited(std::process::ExitStatus),
    /// Polling the child's state failed.
    #[error("cannot poll the operator process: {0}")]
    Wait(#[source] std::io::Error),
}

/// A running `shardring run` process; killed on drop.
pub struct OperatorProcess {
    child: Child,
}

impl OperatorProcess {
    /// Starts `shardring <args>` with the test's environment (so the same
    /// KUBECONFIG), logs going to the test's stderr.
    pub async fn start(args: &[&str]) -> Result<Self, OperatorError> {
        let path = binary().await?;
        let child = Command::new(&path)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| OperatorError::Spawn { path, source })?;
        Ok(Self { child })
    }

    /// Fails if the process has exited (a crash would otherwise show up only
    /// as a timeout much later).
    pub fn check_running(&mut self) -> Result<(), OperatorError> {
        match self.child.try_wait().map_err(OperatorError::Wait)? {
            Some(status) => Err(OperatorError::Exited(status)),
            None => Ok(()),
        }
    }

    /// Kills the process and reaps it.
    pub async fn stop(mut self) -> Result<(), OperatorError> {
        if self
            .child
            .try_wait()
            .map_err(OperatorError::Wait)?
            .is_none()
        {
            // Ignore "already exited" races: the wait below reaps it either way.
            let _ = self.child.start_kill();
        }
        self.child.wait().await.map_err(OperatorError::Wait)?;
        Ok(())
    }
}

/// The `shardring` binary in the test's target dir, built first if missing.
async fn binary() -> Result<PathBuf, OperatorError> {
    let dir = profile_dir()?;
    let path = dir.join(format!("shardring{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        build(&dir).await?;
    }
    Ok(path)
}

/// `target/<profile>`: test executables live in its `deps/` subdirectory.
fn profile_dir() -> Result<PathBuf, OperatorError> {
    let exe = std::env::current_exe().map_err(OperatorError::CurrentExe)?;
    let deps = exe.parent().unwrap_or(Path::new("."));
    Ok(if deps.ends_with("deps") {
        deps.parent().unwrap_or(deps).to_path_buf()
    } else {
        deps.to_path_buf()
    })
}

/// Builds the operator binary into the same target dir as the tests.
async fn build(profile_dir: &Path) -> Result<(), OperatorError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(["build", "-p", "shardring", "--bin", "shardring"]);
    if profile_dir
        .file_name()
        .is_some_and(|name| name == "release")
    {
        command.arg("--release");
    }
    if let Some(target_dir) = profile_dir.parent() {
        command.env("CARGO_TARGET_DIR", target_dir);
    }
    let status = command
        .status()
        .await
        .map_err(|error| OperatorError::Build(error.to_string()))?;
    if status.success() {
        Ok(())
    } else {
        Err(OperatorError::Build(status.to_string()))
    }
}
