//! The one launcher of the local stand-ins for AWS that every crate's
//! tests start: `kinesis-local` (kinesis-mock) and `dynalite`, pinned in
//! `e2e/package.json`. Installs them once with `npm ci` when
//! `e2e/node_modules` is missing (a file lock keeps concurrent test binaries
//! from installing twice), starts each on a free loopback port, waits until
//! that port's listener is the started process's own (not another test's
//! that took the port first), and kills the process by pid when the handle
//! is dropped.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Why an emulator could not be installed or started.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmulatorError {
    /// `npm ci` failed or left the packages missing.
    #[error("installing the emulators with npm in {dir} failed: {detail}")]
    Install {
        /// The e2e directory.
        dir: String,
        /// What went wrong.
        detail: String,
    },
    /// The process exited early or never opened its port.
    #[error("{kind} did not start: {detail}")]
    Start {
        /// Which emulator.
        kind: &'static str,
        /// What went wrong (with the log's tail).
        detail: String,
    },
}

impl EmulatorError {
    /// Constant reason for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EmulatorError::Install { .. } => "EmulatorInstall",
            EmulatorError::Start { .. } => "EmulatorStart",
        }
    }
}

/// Which emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmulatorKind {
    /// kinesis-local (kinesis-mock), plain HTTP.
    Kinesis,
    /// dynalite (DynamoDB).
    DynamoDb,
}

impl EmulatorKind {
    fn name(self) -> &'static str {
        match self {
            EmulatorKind::Kinesis => "kinesis-local",
            EmulatorKind::DynamoDb => "dynalite",
        }
    }
}

/// A running emulator; dropping it kills the process.
#[derive(Debug)]
pub struct Emulator {
    kind: EmulatorKind,
    child: Child,
    port: u16,
    log: PathBuf,
}

/// The directory holding `e2e/package.json`: `SHARDRING_E2E_DIR`, else the
/// repository's `e2e/` next to this crate.
pub fn e2e_dir() -> PathBuf {
    std::env::var_os("SHARDRING_E2E_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("e2e"))
}

fn installed(dir: &Path) -> bool {
    let modules = dir.join("node_modules");
    modules.join("kinesis-local/main.js").is_file()
        && modules.join("kinesis-local/server.json").is_file()
        && modules.join("dynalite/cli.js").is_file()
        && modules.join(".package-lock.json").is_file()
}

/// Installs the pinned emulators into `e2e/node_modules` unless present.
/// Safe to call from many threads and processes at once.
pub fn ensure_installed() -> Result<PathBuf, EmulatorError> {
    static INSTALL: OnceLock<Result<PathBuf, EmulatorError>> = OnceLock::new();
    INSTALL.get_or_init(|| install(&e2e_dir())).clone()
}

fn install(dir: &Path) -> Result<PathBuf, EmulatorError> {
    let fail = |detail: String| EmulatorError::Install {
        dir: dir.display().to_string(),
        detail,
    };
    if installed(dir) {
        return Ok(dir.to_path_buf());
    }
    // Another test binary may be installing right now: take the lock, then
    // look again before running npm.
    // The lock lives outside node_modules, which `npm ci` deletes first.
    let lock_dir = dir.join(".emulators");
    std::fs::create_dir_all(&lock_dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", lock_dir.display())))?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_dir.join("install.lock"))
        .map_err(|e| fail(format!("cannot open the install lock: {e}")))?;
    lock.lock()
        .map_err(|e| fail(format!("cannot take the install lock: {e}")))?;
    if installed(dir) {
        return Ok(dir.to_path_buf());
    }
    let verb = if dir.join("package-lock.json").is_file() {
        "ci"
    } else {
        "install"
    };
    let output = Command::new("npm")
        .args([verb, "--no-audit", "--no-fund", "--prefix"])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(format!("cannot run npm (is Node.js installed?): {e}")))?;
    if !output.status.success() {
        return Err(fail(format!(
            "npm {verb} exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    if !installed(dir) {
        return Err(fail("npm finished but the packages are missing".to_owned()));
    }
    Ok(dir.to_path_buf())
}

/// The last 2,000 characters of the log at `path` (empty when unreadable),
/// for an error that says why a process did not start.
pub(crate) fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let start = text.char_indices().rev().nth(1999).map_or(0, |(at, _)| at);
    text[start..].to_owned()
}

/// A port nobody listens on right now (the OS picks it).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

impl Emulator {
    /// Starts kinesis-local with zero resharding delays on a free port.
    pub fn start_kinesis() -> Result<Self, EmulatorError> {
        Self::start(EmulatorKind::Kinesis)
    }

    /// Starts dynalite with zero table-state delays on a free port.
    pub fn start_dynamodb() -> Result<Self, EmulatorError> {
        Self::start(EmulatorKind::DynamoDb)
    }

    /// Starts `kind`, retrying on a new port if the chosen one was taken
    /// between picking and binding.
    pub fn start(kind: EmulatorKind) -> Result<Self, EmulatorError> {
        Self::start_with(kind, &[])
    }

    /// Starts `kind` with extra environment variables, which override the
    /// defaults (e.g. `UPDATE_SHARD_COUNT_DURATION=2s` to watch a stream stay
    /// UPDATING).
    pub fn start_with(kind: EmulatorKind, env: &[(&str, &str)]) -> Result<Self, EmulatorError> {
        let dir = ensure_installed()?;
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(kind, &dir, env) {
                Ok(emulator) => return Ok(emulator),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or(EmulatorError::Start {
            kind: kind.name(),
            detail: "no attempt made".to_owned(),
        }))
    }

    fn start_once(
        kind: EmulatorKind,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Result<Self, EmulatorError> {
        let fail = |detail: String| EmulatorError::Start {
            kind: kind.name(),
            detail,
        };
        let port = free_port().map_err(|e| fail(format!("no free port: {e}")))?;
        let modules = dir.join("node_modules");
        let log = std::env::temp_dir().join(format!("shardring-{}-{port}.log", kind.name()));
        let log_file = File::create(&log)
            .map_err(|e| fail(format!("cannot create {}: {e}", log.display())))?;
        let err_file = log_file.try_clone().map_err(|e| fail(e.to_string()))?;
        let mut command = Command::new("node");
        match kind {
            EmulatorKind::Kinesis => {
                let tls_port = free_port().map_err(|e| fail(format!("no free port: {e}")))?;
                let package = modules.join("kinesis-local");
                command
                    .arg(package.join("main.js"))
                    .current_dir(&package)
                    .env("KINESIS_MOCK_PLAIN_PORT", port.to_string())
                    .env("KINESIS_MOCK_TLS_PORT", tls_port.to_string())
                    .env("KINESIS_MOCK_CERT_PATH", package.join("server.json"))
                    .env("SHOULD_PERSIST_DATA", "false")
                    .env("LOAD_DATA_IF_EXISTS", "false")
                    .env("SHARD_LIMIT", "1000")
                    .env("AWS_REGION", "us-east-1")
                    .env("LOG_LEVEL", "WARN");
                for duration in [
                    "CREATE_STREAM_DURATION",
                    "DELETE_STREAM_DURATION",
                    "SPLIT_SHARD_DURATION",
                    "MERGE_SHARDS_DURATION",
                    "UPDATE_SHARD_COUNT_DURATION",
                    "UPDATE_STREAM_MODE_DURATION",
                    "REGISTER_STREAM_CONSUMER_DURATION",
                    "DEREGISTER_STREAM_CONSUMER_DURATION",
                ] {
                    command.env(duration, "0ms");
                }
            }
            EmulatorKind::DynamoDb => {
                command
                    .arg(modules.join("dynalite/cli.js"))
                    .current_dir(dir)
                    .args([
                        "--host",
                        "127.0.0.1",
                        "--port",
                        &port.to_string(),
                        "--createTableMs",
                        "0",
                        "--deleteTableMs",
                        "0",
                        "--updateTableMs",
                        "0",
                    ]);
            }
        }
        command.envs(env.iter().copied());
        let child = command
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            .spawn()
            .map_err(|e| fail(format!("cannot run node: {e}")))?;
        let mut emulator = Emulator {
            kind,
            child,
            port,
            log,
        };
        emulator.wait_ready(Duration::from_secs(60))?;
        Ok(emulator)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), EmulatorError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.failure(format!("exited with {status}")));
            }
            if self.listens() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.failure(format!("port {} not open after {timeout:?}", self.port)));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the child itself listens on its port. Where `/proc` cannot be
    /// read, an accepted connection is the best available sign.
    fn listens(&self) -> bool {
        crate::listening::process_listens_on(self.child.id(), self.port).unwrap_or_else(|_| {
            let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
            TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
        })
    }

    fn failure(&self, detail: String) -> EmulatorError {
        EmulatorError::Start {
            kind: self.kind.name(),
            detail: format!(
                "{detail}; log {}:\n{}",
                self.log.display(),
                log_tail(&self.log)
            ),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Which emulator this is.
    pub fn kind(&self) -> EmulatorKind {
        self.kind
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // Kill our own child by pid and reap it; the log stays for a test
        // that failed (it is dropped while the test panics), not after one
        // that passed.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}
