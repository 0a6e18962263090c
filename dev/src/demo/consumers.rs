//! The demo's consumer pods are real `shardring-reference-consumer`
//! processes (from the `shardring-consumer` crate): each follows its pod's
//! downward-API annotations file, takes KCL leases in dynalite, reads from
//! kinesis-local, checkpoints, and appends every processed record to its own
//! JSON-lines log. This module finds (or builds) that binary and owns the
//! processes: SIGTERM for a graceful stop, SIGKILL on drop, so no process
//! outlives the demo.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::DemoError;

/// The reference consumer's binary name.
pub(crate) const BINARY: &str = "shardring-reference-consumer";
/// Overrides where the reference consumer binary is.
pub(crate) const BINARY_ENV: &str = "SHARDRING_REFERENCE_CONSUMER";

/// The cargo command that builds the reference consumer for `release`.
/// Selecting this crate too makes cargo resolve the same dependency
/// features as `shardring-dev`'s own build, so its artifacts are reused and
/// only the consumer binary is compiled.
pub(crate) fn build_command(release: bool) -> String {
    let profile = if release { " --release" } else { "" };
    format!("cargo build{profile} -p shardring-dev -p shardring-consumer --bin {BINARY}")
}

/// Finds the reference consumer: `explicit`, else `SHARDRING_REFERENCE_CONSUMER`,
/// else next to the running executable (or one directory up, for test
/// binaries in `deps/`). When it is missing and this is a source checkout
/// with cargo at hand (and not a test binary, whose cargo holds the build
/// lock), builds it with the running executable's profile; otherwise says
/// which command builds it.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, DemoError> {
    if let Some(path) = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(BINARY_ENV).map(PathBuf::from))
    {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(DemoError::Consumer(format!(
                "the reference consumer {} does not exist",
                path.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(|e| DemoError::Consumer(e.to_string()))?;
    let candidates = candidates(&exe);
    // A test binary runs while `cargo test` holds the target directory's
    // lock: a nested cargo build would wait for it forever.
    let under_cargo_test = exe.parent().and_then(Path::file_name) == Some("deps".as_ref());
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let release = candidates
        .iter()
        .any(|p| p.parent().and_then(Path::file_name) == Some("release".as_ref()));
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let command = build_command(release);
    if under_cargo_test || !workspace.join("consumer").join("Cargo.toml").is_file() {
        return Err(DemoError::Consumer(format!(
            "{BINARY} is not next to {}; build it with `{command}` in the shardring repository, or point {BINARY_ENV} at it",
            exe.display()
        )));
    }
    println!("building the reference consumer once: {command}");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "-p", "shardring-dev", "-p", "shardring-consumer"])
        .args(["--bin", BINARY])
        .current_dir(&workspace)
        .stdin(Stdio::null());
    if release {
        build.arg("--release");
    }
    let status = build
        .status()
        .map_err(|e| DemoError::Consumer(format!("cannot run `{command}`: {e}")))?;
    if !status.success() {
        return Err(DemoError::Consumer(format!(
            "`{command}` failed ({status})"
        )));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        DemoError::Consumer(format!(
            "`{command}` succeeded but {BINARY} is not next to {} (a different CARGO_TARGET_DIR?); point {BINARY_ENV} at it",
            exe.display()
        ))
    })
}

fn candidates(exe: &Path) -> Vec<PathBuf> {
    let name = format!("{BINARY}{}", std::env::consts::EXE_SUFFIX);
    let mut out = Vec::new();
    if let Some(dir) = exe.parent() {
        out.push(dir.join(&name));
        if dir.file_name() == Some("deps".as_ref())
            && let Some(up) = dir.parent()
        {
            out.push(up.join(&name));
        }
    }
    out
}

/// Where a reference consumer reads its pod's view.
#[derive(Debug, Clone, Copy)]
pub enum ViewSource<'a> {
    /// The pod's downward-API annotations file, holding the annotation of
    /// ShardGroup `shard_group` (`<namespace>/<name>`).
    AnnotationsFile {
        /// The projected file.
        path: &'a Path,
        /// `<namespace>/<name>` of the ShardGroup.
        shard_group: &'a str,
    },
    /// ConfigMap `name` in `namespace`, watched through the Kubernetes API.
    ConfigMap {
        /// The assignment ConfigMap.
        name: &'a str,
        /// Its namespace (the pod's).
        namespace: &'a str,
    },
}

/// How every consumer process is started: the one command line of the
/// reference consumer for the demo, its scenarios and the end-to-end tests.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// The binary.
    pub binary: PathBuf,
    /// AWS region of the clients (the emulators accept any).
    pub region: String,
    /// Stream name.
    pub stream: String,
    /// Lease table.
    pub lease_table: String,
    /// kinesis-local endpoint.
    pub kinesis_endpoint: String,
    /// dynalite endpoint.
    pub dynamodb_endpoint: String,
    /// Lease failover time.
    pub failover: Duration,
    /// How long a SIGTERMed consumer waits for its revoke.
    pub drain_deadline: Duration,
    /// The kubeconfig a consumer watching a ConfigMap uses; `None`: it
    /// inherits the environment's.
    pub kubeconfig: Option<PathBuf>,
}

impl ConsumerSettings {
    /// The command line of pod `pod`'s consumer reading `view` and logging
    /// processed records to `record_log`, with fast polls (the emulators
    /// answer at once); its standard streams are not set.
    pub fn command(&self, pod: &str, view: ViewSource<'_>, record_log: &Path) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .args(["--pod", pod, "--stream", &self.stream])
            .args(["--lease-table", &self.lease_table])
            .args(["--region", &self.region])
            .args(["--kinesis-endpoint", &self.kinesis_endpoint])
            .args(["--dynamodb-endpoint", &self.dynamodb_endpoint]);
        match view {
            ViewSource::AnnotationsFile { path, shard_group } => {
                command
                    .arg("--annotations-file")
                    .arg(path)
                    .args(["--shard-group", shard_group]);
            }
            ViewSource::ConfigMap { name, namespace } => {
                command.args(["--configmap", name, "--namespace", namespace]);
            }
        }
        command
            .args(["--idle-ms", "100"])
            .args(["--failover-ms", &self.failover.as_millis().to_string()]);
        common_args(
            &mut command,
            record_log,
            self.drain_deadline,
            self.kubeconfig.as_deref(),
        );
        command
    }

    /// Starts the consumer of pod `pod` ([`Self::command`]), its own output
    /// to `stderr_log`.
    pub fn spawn(
        &self,
        pod: &str,
        view: ViewSource<'_>,
        record_log: &Path,
        stderr_log: &Path,
    ) -> Result<ConsumerProcess, DemoError> {
        start(pod, self.command(pod, view, record_log), stderr_log)
    }
}

/// What every reference consumer's command line has: its log, a fast view
/// poll, its drain deadline, info logs, and the kubeconfig a ConfigMap
/// watch uses (`None`: the environment's).
pub(crate) fn common_args(
    command: &mut Command,
    log: &Path,
    drain_deadline: Duration,
    kubeconfig: Option<&Path>,
) {
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    command
        .arg("--log")
        .arg(log)
        .args(["--poll-ms", "50"])
        .args([
            "--drain-deadline-ms",
            &drain_deadline.as_millis().to_string(),
        ])
        .env("RUST_LOG", "info");
}

/// Starts pod `pod`'s consumer `command` with no input, its output to
/// `stderr_log`.
pub(crate) fn start(
    pod: &str,
    mut command: Command,
    stderr_log: &Path,
) -> Result<ConsumerProcess, DemoError> {
    let fail = |e: std::io::Error| DemoError::Consumer(format!("starting {pod}: {e}"));
    let stderr = std::fs::File::create(stderr_log).map_err(fail)?;
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(fail)?;
    Ok(ConsumerProcess { child })
}

/// A running consumer process; dropping it kills it.
#[derive(Debug)]
pub struct ConsumerProcess {
    child: Child,
}

impl ConsumerProcess {
    /// Adopts a started process (tests stand in other programs).
    #[cfg(test)]
    pub(crate) fn from_child(child: Child) -> Self {
        Self { child }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM (a graceful stop: it drains until revoked).
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends signal `name` (`TERM`, `STOP`, `CONT`, ...).
    pub fn signal(&self, name: &str) {
        // std can only SIGKILL; `kill` is in every POSIX userland.
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Err(error) = sent {
            tracing::warn!(pid = self.child.id(), %error, "cannot send SIG{name}");
        }
    }

    /// Sends SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Its exit status, once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for it to exit.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait()
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_next_to_the_executable_and_above_deps() {
        let found = candidates(Path::new("/t/debug/deps/demo_run-123"));
        assert_eq!(
            found,
            vec![
                PathBuf::from(format!("/t/debug/deps/{BINARY}")),
                PathBuf::from(format!("/t/debug/{BINARY}")),
            ]
        );
        assert_eq!(candidates(Path::new("/t/release/shardring")).len(), 1);
        assert!(build_command(true).contains("--release"));
    }
}
