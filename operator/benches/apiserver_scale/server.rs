//! The API server the bench runs against, chosen as a developer would
//! expect (the first that applies):
//!
//! 1. `--mock`: the devkit's mock API server, in this process;
//! 2. `SHARDRING_BENCH_KUBECONFIG=<file>`: that cluster, which must answer;
//! 3. `KUBECONFIG=<file>` naming a cluster that answers (as the e2e suite
//!    does; `~/.kube/config` is never used unasked: the bench creates
//!    thousands of pods);
//! 4. the control plane kit at `../shared/k8s`, started with its `up` (with
//!    the `SHARDRING_K8S_*` knobs of the environment) and stopped at the end
//!    when this run started it;
//! 5. otherwise the mock, said so on the first line of output.
//!
//! Whatever the server, the bench talks to it through a kube client and the
//! operator through a kubeconfig: the measurements are the same code.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};

/// How long an API server gets to answer `/version`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The server under test.
pub struct Server {
    /// A kubeconfig for it (the operator's `KUBECONFIG`).
    pub kubeconfig: PathBuf,
    /// The bench's own client.
    pub client: Client,
    /// What it is, for the report.
    pub describe: String,
    /// The mock, when that is the server.
    pub mock: Option<Arc<MockApiServer>>,
    /// The kit's `down`, when this run started the kit.
    stop_kit: Option<PathBuf>,
}

impl Server {
    /// The server the environment names (see the module header).
    pub async fn choose(force_mock: bool) -> Self {
        if force_mock {
            return Self::mock("the devkit's mock API server (--mock)").await;
        }
        if let Some(path) = std::env::var_os("SHARDRING_BENCH_KUBECONFIG") {
            let path = PathBuf::from(path);
            return match Self::real(&path, "SHARDRING_BENCH_KUBECONFIG").await {
                Ok(server) => server,
                Err(why) => panic!("SHARDRING_BENCH_KUBECONFIG: {why}"),
            };
        }
        if let Some(path) = std::env::var_os("KUBECONFIG") {
            match Self::real(Path::new(&path), "KUBECONFIG").await {
                Ok(server) => return server,
                Err(why) => eprintln!("bench: KUBECONFIG not usable ({why}); trying the kit"),
            }
        }
        let up = kit_dir().join("up");
        if up.exists() {
            return Self::start_kit(&up).await;
        }
        Self::mock(&format!(
            "the devkit's mock API server (no KUBECONFIG and no kit at {})",
            kit_dir().display()
        ))
        .await
    }

    async fn mock(describe: &str) -> Self {
        let mock = Arc::new(MockApiServer::start(MockOptions::default()).await);
        let dir = std::env::temp_dir().join(format!("shardring-scale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let kubeconfig = dir.join("kubeconfig");
        mock.write_kubeconfig(&kubeconfig)
            .expect("write the mock's kubeconfig");
        Self {
            kubeconfig,
            client: mock.client().await,
            describe: describe.to_owned(),
            mock: Some(mock),
            stop_kit: None,
        }
    }

    /// The cluster of the kubeconfig at `path`, when its API server answers.
    async fn real(path: &Path, named_by: &str) -> Result<Self, String> {
        let kubeconfig =
            Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let url = config.cluster_url.to_string();
        let client = Client::try_from(config).map_err(|e| format!("a client for {url}: {e}"))?;
        let version = match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
            Ok(Ok(info)) => info.git_version,
            Ok(Err(error)) => return Err(format!("{url} did not answer /version: {error}")),
            Err(_) => return Err(format!("{url} did not answer within {PROBE_TIMEOUT:?}")),
        };
        Ok(Self {
            kubeconfig: path.to_owned(),
            client,
            describe: format!(
                "the API server at {url} ({version}; {named_by}={})",
                path.display()
            ),
            mock: None,
            stop_kit: None,
        })
    }

    /// Runs the kit's `up` (a no-op when it already runs) and connects.
    async fn start_kit(up: &Path) -> Self {
        eprintln!("bench: starting the control plane kit ({})", up.display());
        let output = Command::new(up).output().expect("run the kit's up");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "the kit's up failed ({}):\n{stderr}",
            output.status
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let kubeconfig = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .map(|p| PathBuf::from(p.trim().trim_matches('"').trim_matches('\'')))
            .unwrap_or_else(|| panic!("the kit's up printed no KUBECONFIG: {stdout}"));
        let mut server = Self::real(&kubeconfig, "started by the bench from ../shared/k8s")
            .await
            .unwrap_or_else(|why| panic!("the kit started but {why}"));
        // `up` says "started" for each component it had to start: only then
        // is the kit this run's to stop.
        if stderr.contains("started ") {
            server.stop_kit = Some(kit_dir().join("down"));
        }
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(down) = &self.stop_kit {
            eprintln!("bench: stopping the kit this run started");
            let _ = Command::new(down).status();
        }
    }
}

/// `../shared/k8s` of the workspace.
fn kit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/k8s")
}
