//! The shardring-k8s kit (`../shared/k8s` next to the checkout, or where
//! `SHARDRING_K8S_KIT` says; see its README) as the cluster
//! under test, for the one scenario that needs to control the control
//! plane itself: killing kube-apiserver and starting it again. The kit
//! counts only when `KUBECONFIG` names its admin kubeconfig (state dir
//! `SHARDRING_K8S_DIR`, default `${TMPDIR:-/tmp}/shardring-k8s`), so the
//! scenario never touches a cluster it was not pointed at; everything else
//! is a reason to skip, said plainly.
//!
//! The kit records each daemon's pid in `pids/<name>.pid` with a string its
//! command line must contain in `pids/<name>.marker` (a reused pid is never
//! killed), and its `up` starts again whatever is not running.
//!
//! It also holds the kit-wide turns ([`KitTurn`]): a lock file in the state
//! dir that every test against the kit takes shared and the API server
//! restart takes exclusively, so no test of another process (the suite run
//! in the other operator mode at the same time, say) sees the restart.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The kit under test: its state dir, its scripts and its API port.
#[derive(Debug, Clone)]
pub struct Kit {
    /// The state dir (`SHARDRING_K8S_DIR`).
    pub dir: PathBuf,
    /// The kit's scripts (`up`, `down`).
    pub scripts: PathBuf,
    /// kube-apiserver's port on 127.0.0.1.
    pub api_port: u16,
}

/// The daemon this module restarts.
const API_SERVER: &str = "kube-apiserver";

impl Kit {
    /// The kit `KUBECONFIG` points at, or why there is none (the reason a
    /// test that needs it skips).
    pub fn under_test() -> Result<Self, String> {
        let dir = std::env::var_os("SHARDRING_K8S_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("shardring-k8s"));
        if !dir.join(".shardring-k8s").is_file() {
            return Err(format!(
                "{} is not a shardring-k8s state dir (set SHARDRING_K8S_DIR)",
                dir.display()
            ));
        }
        let kubeconfig = std::env::var_os("KUBECONFIG")
            .map(PathBuf::from)
            .ok_or("KUBECONFIG is not set, so the cluster under test is not the kit's")?;
        let admin = dir.join("admin.kubeconfig");
        if canonical(&kubeconfig) != canonical(&admin) {
            return Err(format!(
                "KUBECONFIG is {}, not the kit's {}",
                kubeconfig.display(),
                admin.display()
            ));
        }
        let scripts = std::env::var_os("SHARDRING_K8S_KIT").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/k8s"),
            PathBuf::from,
        );
        if !scripts.join("up").is_file() {
            return Err(format!(
                "the kit's scripts are not at {}",
                scripts.display()
            ));
        }
        let config = std::fs::read_to_string(dir.join("config.env"))
            .map_err(|e| format!("{}: {e}", dir.join("config.env").display()))?;
        let api_port = config
            .lines()
            .find_map(|line| line.strip_prefix("API_PORT="))
            .and_then(|port| port.trim().parse().ok())
            .ok_or("the kit's config.env names no API_PORT")?;
        Ok(Self {
            dir,
            scripts,
            api_port,
        })
    }

    /// kube-apiserver's pid, when the kit's record of it names a running
    /// kube-apiserver.
    pub fn api_server_pid(&self) -> Option<u32> {
        let pids = self.dir.join("pids");
        let pid: u32 = std::fs::read_to_string(pids.join(format!("{API_SERVER}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let marker = std::fs::read_to_string(pids.join(format!("{API_SERVER}.marker"))).ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        cmdline.contains(marker.trim()).then_some(pid)
    }

    /// Kills kube-apiserver (SIGKILL, by its recorded pid: no graceful
    /// shutdown, as a crash or an OOM kill).
    pub fn kill_api_server(&self) -> Result<u32, String> {
        let pid = self
            .api_server_pid()
            .ok_or("the kit's kube-apiserver is not running")?;
        let killed = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .map_err(|e| format!("kill: {e}"))?;
        if !killed.success() {
            return Err(format!("kill -KILL {pid} failed ({killed})"));
        }
        Ok(pid)
    }

    /// Whether kube-apiserver is gone (its recorded pid no longer names it).
    pub fn api_server_gone(&self) -> bool {
        self.api_server_pid().is_none()
    }

    /// Runs the kit's `up`, which starts what is not running (here
    /// kube-apiserver) and returns once its `/readyz` is ok.
    pub async fn up(&self) -> Result<(), String> {
        let up = self.scripts.join("up");
        let dir = self.dir.clone();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(up).env("SHARDRING_K8S_DIR", dir).output()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("up: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "up failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// The kit's admin kubeconfig with its server replaced by `server`
    /// (e.g. a proxy in front of the API server; the serving certificate
    /// holds `127.0.0.1`, so TLS still verifies on another loopback port),
    /// written to `path`.
    pub fn kubeconfig_via(&self, server: &str, path: &Path) -> Result<(), String> {
        let admin = self.dir.join("admin.kubeconfig");
        let text =
            std::fs::read_to_string(&admin).map_err(|e| format!("{}: {e}", admin.display()))?;
        let direct = format!("https://127.0.0.1:{}", self.api_port);
        if !text.contains(&direct) {
            return Err(format!("{} does not name {direct}", admin.display()));
        }
        std::fs::write(path, text.replace(&direct, server))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The kit-wide turns' lock file.
    fn turns(&self) -> PathBuf {
        self.dir.join("e2e-turns.lock")
    }
}

/// A turn on the kit: held shared by every test against it, exclusively by
/// the one that restarts its API server. Released when dropped.
pub struct KitTurn {
    _file: File,
}

impl KitTurn {
    /// A shared turn on the kit `KUBECONFIG` points at, if it is the kit
    /// (`None` otherwise: no restart can happen on another cluster).
    pub async fn shared() -> Option<Self> {
        let kit = Kit::under_test().ok()?;
        Self::take(&kit, false).await.ok()
    }

    /// The exclusive turn: waits until no other test holds the kit.
    pub async fn exclusive(kit: &Kit) -> Result<Self, String> {
        Self::take(kit, true).await
    }

    async fn take(kit: &Kit, exclusive: bool) -> Result<Self, String> {
        let path = kit.turns();
        tokio::task::spawn_blocking(move || {
            let file = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if exclusive {
                file.lock()
            } else {
                file.lock_shared()
            }
            .map_err(|e| format!("locking {}: {e}", path.display()))?;
            Ok(Self { _file: file })
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// How long `up` may take to bring kube-apiserver back (the kit's own waits
/// are bounded by `SHARDRING_K8S_TIMEOUT`, 180 s by default).
pub const UP_TIMEOUT: Duration = Duration::from_secs(200);
