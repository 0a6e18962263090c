//! Running the operator under test, in one of two ways:
//! - **binary** (default; `SHARDRING_E2E_OPERATOR=binary`): `shardring run`,
//!   the path a user takes, as a child process with the test's environment
//!   (same KUBECONFIG) plus the emulators' credentials and region for the
//!   default AWS chain, from the test's target directory (`cargo build -p
//!   shardring` builds it; `cargo test --workspace` already has), killed
//!   when the handle is dropped;
//! - **in-process** (`SHARDRING_E2E_OPERATOR=in-process`, for a debugger or
//!   the operator's logs in the test's output):
//!   `shardring::controller::run_controller` on the test's own client,
//!   scoped to the test's namespace, with its own source providers: Kinesis
//!   on the emulators' static credentials, Secrets (a RabbitMQ source's
//!   credentials) read in its own namespace with its client (nothing
//!   process-wide), stopped through its cancellation token.
//!
//! The operator reaches the cluster as the [`Cluster`] it is given says
//! (the operator's ServiceAccount where [`crate::account`] made it). The
//! consumer endpoint is off in-process and on an ephemeral loopback port
//! for the binary (parallel scenarios must not share 8443), with
//! `POD_NAMESPACE` the cluster's operator namespace, else the test's (the
//! self-signed fallback's Secret is then removed with it), unless [`Operator::start_with_endpoint`] serves it on a
//! known address (without the peer IP check: the suite's consumers run
//! outside the pods).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::cluster::Cluster;
use shardring::controller::{
    Context, ControllerConfig, ControllerMetrics, Sources, run_controller,
};
use shardring::endpoint::{EndpointMetrics, EndpointServer, EndpointServerConfig, EndpointState};
use shardring::runtime::health::Health;
use shardring::source::kinesis::AwsSettings;
use shardring::source::kinesis::reader::{emulator_environment, emulator_sdk_config};
use shardring::source::rabbitmq::KubeSecrets;
use shardring::source::{Providers, SourceSettings};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Environment variable choosing how the operator runs: `in-process` or `binary`.
pub const MODE_ENV: &str = "SHARDRING_E2E_OPERATOR";

/// How the operator under test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorMode {
    /// `run_controller` on a task of the test's runtime.
    InProcess,
    /// `shardring run` as a child process.
    Binary,
}

impl OperatorMode {
    /// The mode [`MODE_ENV`] selects (default: the binary).
    pub fn from_env() -> Result<Self, OperatorError> {
        match std::env::var(MODE_ENV).as_deref() {
            Err(_) | Ok("") | Ok("binary") => Ok(Self::Binary),
            Ok("in-process") => Ok(Self::InProcess),
            Ok(other) => Err(OperatorError::Mode(other.to_owned())),
        }
    }
}

/// How long a stopping operator may take before the test gives up on it.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// How often [`Operator::wait_ready`] asks.
const READY_POLL: Duration = Duration::from_millis(20);

/// Why the operator could not be started, failed, or did not stop.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// `SHARDRING_E2E_OPERATOR` holds something else.
    #[error("{MODE_ENV} must be `in-process` or `binary`, not {0:?}")]
    Mode(String),
    /// The test executable's own path is unknown, so the target dir is too.
    #[error("cannot locate the test executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    /// The binary has not been built.
    #[error("{0} does not exist: build it first with `cargo build -p shardring --bin shardring`")]
    MissingBinary(PathBuf),
    /// Spawning the binary failed.
    #[error("cannot start {path}: {source}")]
    Spawn {
        /// The binary that was started.
        path: PathBuf,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
    /// The operator stopped although it should still be running.
    #[error("the operator stopped early: {0}")]
    Exited(String),
    /// Polling or reaping the child process failed.
    #[error("cannot poll the operator process: {0}")]
    Wait(#[source] std::io::Error),
    /// The operator did not stop within [`STOP_TIMEOUT`].
    #[error("the operator did not stop within {STOP_TIMEOUT:?}")]
    StopTimeout,
    /// The operator did not turn ready in time.
    #[error("the operator was not ready (/readyz) within {0:?}")]
    NotReady(Duration),
}

/// A running operator; stop it with [`Operator::stop`] (dropping it kills a
/// child process and cancels an in-process controller).
pub enum Operator {
    /// The controller running on a task of the test's runtime.
    InProcess {
        /// Cancels the controller, also when dropped.
        guard: DropGuard,
        /// The controller's task.
        task: JoinHandle<()>,
        /// What `/readyz` would answer from (the CRDs were applied before).
        health: Health,
    },
    /// `shardring run` as a child process.
    Binary {
        /// The process.
        child: Child,
        /// Where it serves `/metrics`, `/healthz` and `/readyz`.
        metrics: SocketAddr,
    },
}

impl Operator {
    /// Starts the operator for `namespace` on `cluster` in `mode`; it reads
    /// Kinesis and DynamoDB in `region` with the emulators' credentials.
    pub async fn start(
        cluster: &Cluster,
        namespace: &str,
        region: &str,
        mode: OperatorMode,
    ) -> Result<Self, OperatorError> {
        match mode {
            OperatorMode::InProcess => Self::in_process(cluster, namespace, region, None).await,
            OperatorMode::Binary => Self::binary(cluster, namespace, region, None),
        }
    }

    /// [`Operator::start`], serving the consumer endpoint on `endpoint`.
    pub async fn start_with_endpoint(
        cluster: &Cluster,
        namespace: &str,
        region: &str,
        mode: OperatorMode,
        endpoint: SocketAddr,
    ) -> Result<Self, OperatorError> {
        match mode {
            OperatorMode::InProcess => {
                Self::in_process(cluster, namespace, region, Some(endpoint)).await
            }
            OperatorMode::Binary => Self::binary(cluster, namespace, region, Some(endpoint)),
        }
    }

    async fn in_process(
        cluster: &Cluster,
        namespace: &str,
        region: &str,
        endpoint: Option<SocketAddr>,
    ) -> Result<Self, OperatorError> {
        // Logs of the in-process operator go to the test's stderr (shown with
        // --nocapture); a second init in the same process is harmless.
        let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        let _ = shardring::runtime::telemetry::init(
            shardring::runtime::telemetry::LogFormat::Text,
            &filter,
        );
        let mut registry = shardring::runtime::metrics::new_registry();
        let metrics = ControllerMetrics::register(&mut registry);
        let token = CancellationToken::new();
        let client = &cluster.client;
        let state = match endpoint {
            Some(addr) => {
                let state = EndpointState::default();
                let mut config = EndpointServerConfig::new(addr, home(cluster, namespace));
                config.peer_ip_check = false;
                let server = EndpointServer::bind(
                    config,
                    client.clone(),
                    state.clone(),
                    EndpointMetrics::default(),
                    None,
                )
                .await
                .map_err(|e| OperatorError::Exited(format!("the endpoint did not start: {e}")))?;
                tokio::spawn(server.serve(token.clone()));
                Some(state)
            }
            None => None,
        };
        let mut context = Context::builder(client.clone(), metrics)
            .sources(emulator_sources(region, client, home(cluster, namespace)).await)
            .publish_events(None);
        if let Some(state) = state {
            context = context.endpoint(state);
        }
        let config = ControllerConfig {
            scope: shardring::controller::WatchScope::of([namespace.to_owned()]),
            controller_class: Some(crate::settings::CONTROLLER_CLASS.to_owned()),
            ..ControllerConfig::default()
        };
        let health = Health::new();
        health.set_crds_established();
        let task = tokio::spawn(run_controller(
            context,
            config,
            Some(health.clone()),
            token.clone(),
        ));
        Ok(Self::InProcess {
            guard: token.drop_guard(),
            task,
            health,
        })
    }

    fn binary(
        cluster: &Cluster,
        namespace: &str,
        region: &str,
        endpoint: Option<SocketAddr>,
    ) -> Result<Self, OperatorError> {
        let path = binary_path()?;
        if !path.is_file() {
            return Err(OperatorError::MissingBinary(path));
        }
        // A free port of the moment for /readyz (parallel operators must
        // not share one, and the test must know it).
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|source| OperatorError::Spawn {
                path: path.clone(),
                source,
            })?;
        let own = home(cluster, namespace);
        let mut command = binary_command(&path, [namespace, own], region, metrics, endpoint);
        cluster.configure(&mut command);
        let child = command
            .spawn()
            .map_err(|source| OperatorError::Spawn { path, source })?;
        Ok(Self::Binary { child, metrics })
    }

    /// Whether the operator is ready (`/readyz`: the CRDs established and
    /// every cache synced), as a kubelet's readiness probe would see it.
    pub async fn is_ready(&self) -> bool {
        match self {
            Self::InProcess { health, .. } => health.is_ready(),
            Self::Binary { metrics, .. } => readyz(*metrics).await,
        }
    }

    /// Waits until the operator is ready; returns how long that took.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<Duration, OperatorError> {
        let started = tokio::time::Instant::now();
        while !self.is_ready().await {
            if started.elapsed() >= timeout {
                return Err(OperatorError::NotReady(timeout));
            }
            tokio::time::sleep(READY_POLL).await;
        }
        Ok(started.elapsed())
    }

    /// Fails if the operator has stopped (a crash would otherwise show up
    /// only as a timeout much later).
    pub fn check_running(&mut self) -> Result<(), OperatorError> {
        match self {
            Self::InProcess { task, .. } if task.is_finished() => {
                Err(OperatorError::Exited("the controller task returned".into()))
            }
            Self::InProcess { .. } => Ok(()),
            Self::Binary { child, .. } => match child.try_wait().map_err(OperatorError::Wait)? {
                Some(status) => Err(OperatorError::Exited(status.to_string())),
                None => Ok(()),
            },
        }
    }

    /// Stops the operator: cancels the controller (graceful) or kills the
    /// process, and waits for it.
    pub async fn stop(self) -> Result<(), OperatorError> {
        match self {
            Self::InProcess { guard, task, .. } => {
                guard.disarm().cancel();
                match tokio::time::timeout(STOP_TIMEOUT, task).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(error)) => Err(OperatorError::Exited(format!(
                        "the controller task failed: {error}"
                    ))),
                    Err(_) => Err(OperatorError::StopTimeout),
                }
            }
            Self::Binary { mut child, .. } => {
                if child.try_wait().map_err(OperatorError::Wait)?.is_none() {
                    // An "already exited" race is fine: the wait below reaps it.
                    let _ = child.start_kill();
                }
                match tokio::time::timeout(STOP_TIMEOUT, child.wait()).await {
                    Ok(result) => result.map(|_| ()).map_err(OperatorError::Wait),
                    Err(_) => Err(OperatorError::StopTimeout),
                }
            }
        }
    }
}

/// The namespace the operator calls its own: the one `cluster` names (the
/// account's), else the test's.
fn home<'a>(cluster: &'a Cluster, namespace: &'a str) -> &'a str {
    cluster.operator_namespace.as_deref().unwrap_or(namespace)
}

/// Sources of an in-process operator: its own providers, Kinesis on the
/// emulators' static credentials in `region`, credentials Secrets read
/// with `client` (the operator's) from `home`, its namespace.
pub async fn emulator_sources(region: &str, client: &kube::Client, home: &str) -> Sources {
    let config = emulator_sdk_config(region).await;
    let settings = SourceSettings::default()
        .with_aws(AwsSettings::Fixed(Box::new(config)))
        .with_secrets(std::sync::Arc::new(KubeSecrets::new(client.clone(), home)));
    Sources::for_providers(std::sync::Arc::new(Providers::new(settings, None)))
}

/// Whether `/readyz` at `addr` answers 200 (a plain HTTP/1.0 request: the
/// server is the operator's own, on loopback).
async fn readyz(addr: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(head.ends_with(b" 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), ask).await,
        Ok(Ok(true))
    )
}

/// `shardring run` for `namespace`: metrics on `metrics` and the consumer
/// endpoint on an ephemeral loopback port (parallel runs and a local 8080
/// or 8443 do not collide) unless `endpoint` names its address, `home` as
/// the operator's own namespace (`POD_NAMESPACE`), and the emulators'
/// credentials and region in the environment, which is where the binary's
/// default AWS chain finds them.
fn binary_command(
    path: &Path,
    [namespace, home]: [&str; 2],
    region: &str,
    metrics: SocketAddr,
    endpoint: Option<SocketAddr>,
) -> Command {
    let mut command = Command::new(path);
    let endpoint_addr = endpoint.map_or_else(|| "127.0.0.1:0".to_owned(), |a| a.to_string());
    command
        .args([
            "run",
            "--namespace",
            namespace,
            "--metrics-addr",
            &metrics.to_string(),
            "--controller-class",
            crate::settings::CONTROLLER_CLASS,
            "--endpoint-addr",
            &endpoint_addr,
        ])
        .env("POD_NAMESPACE", home)
        .envs(emulator_environment(region))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if endpoint.is_some() {
        command.arg("--endpoint-no-peer-ip-check");
    }
    command
}

/// `target/<profile>/shardring`, next to the `deps/` directory holding the
/// test executable.
pub fn binary_path() -> Result<PathBuf, OperatorError> {
    let exe = std::env::current_exe().map_err(OperatorError::CurrentExe)?;
    let deps = exe.parent().unwrap_or(Path::new("."));
    let profile = if deps.ends_with("deps") {
        deps.parent().unwrap_or(deps)
    } else {
        deps
    };
    Ok(profile.join(format!("shardring{}", std::env::consts::EXE_SUFFIX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binary_gets_the_emulators_credentials_and_region() {
        let metrics = SocketAddr::from(([127, 0, 0, 1], 9090));
        let command = binary_command(
            Path::new("/bin/shardring"),
            ["ns", "shardring-system"],
            "eu-west-1",
            metrics,
            None,
        );
        let env: std::collections::BTreeMap<_, _> = command
            .as_std()
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
            .collect();
        let get = |key: &str| {
            env.get(std::ffi::OsStr::new(key))
                .cloned()
                .flatten()
                .unwrap_or_else(|| panic!("{key} is not set for the binary"))
        };
        assert!(!get("AWS_ACCESS_KEY_ID").is_empty());
        assert!(!get("AWS_SECRET_ACCESS_KEY").is_empty());
        assert_eq!(get("AWS_REGION"), "eu-west-1");
        assert_eq!(get("AWS_EC2_METADATA_DISABLED"), "true");
        assert_eq!(get("POD_NAMESPACE"), "shardring-system");
        let args: Vec<_> = command.as_std().get_args().collect();
        assert_eq!(args[..3], ["run", "--namespace", "ns"]);
    }

    #[test]
    fn the_binary_sits_next_to_the_deps_directory() {
        let path = binary_path().unwrap();
        assert_eq!(path.file_stem().unwrap(), "shardring");
        assert!(
            !path.parent().unwrap().ends_with("deps"),
            "{}",
            path.display()
        );
    }
}
