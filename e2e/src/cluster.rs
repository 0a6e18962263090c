//! Finding the cluster under test: the kubeconfig from `KUBECONFIG` (or
//! `~/.kube/config`, or in-cluster config), and an API server that answers
//! within a few seconds. Anything else means "no cluster": the tests skip and
//! say so instead of failing on machines without one.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use kube::{Client, Config};

/// How long the API server gets to answer `/version` before the cluster
/// counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The line every skipped end-to-end test prints.
pub const SKIP_MESSAGE: &str = "SKIPPED: no Kubernetes cluster reachable through KUBECONFIG";

/// Set (to anything but empty or `0`) where a cluster was started for the
/// suite, as CI does with `../shared/k8s`: a test that finds no cluster then
/// fails instead of skipping, so a broken kubeconfig cannot pass as a skip.
pub const REQUIRE_ENV: &str = "SHARDRING_E2E_REQUIRE_CLUSTER";

/// Whether a cluster is available for end-to-end tests.
pub enum Reachability {
    /// A client for a cluster whose API server answered, with its version.
    Reachable {
        /// Client built from the inferred configuration.
        client: Client,
        /// `major.minor` and git version reported by the API server.
        version: String,
    },
    /// No usable cluster, and why (printed after [`SKIP_MESSAGE`]).
    Unreachable(String),
}

/// The cluster under test for `test`, or `None` after printing
/// [`SKIP_MESSAGE`] and why; panics instead of skipping when [`REQUIRE_ENV`]
/// is set.
pub async fn cluster_or_skip(test: &str) -> Option<Client> {
    match connect().await {
        Reachability::Reachable { client, version } => {
            eprintln!("e2e[{test}]: cluster reachable, Kubernetes {version}");
            Some(client)
        }
        Reachability::Unreachable(reason) => {
            if std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
                panic!("e2e[{test}]: {REQUIRE_ENV} is set but {reason}");
            }
            // Straight to stderr, not `eprintln!`, so the line shows although
            // the test harness captures the output of passing tests.
            let _ = writeln!(std::io::stderr(), "{SKIP_MESSAGE} ({reason})");
            None
        }
    }
}

/// Infers the client configuration and asks the API server for its version,
/// giving up after [`PROBE_TIMEOUT`].
pub async fn connect() -> Reachability {
    match Config::infer().await {
        Ok(config) => connect_with(config).await,
        Err(error) => Reachability::Unreachable(format!("no kubeconfig: {error}")),
    }
}

/// Builds a client for `config` (over TLS, as every real cluster is) and asks
/// the API server for its version, giving up after [`PROBE_TIMEOUT`].
pub async fn connect_with(config: Config) -> Reachability {
    shardring::runtime::tls::install_crypto_provider();
    let server = config.cluster_url.to_string();
    let client = match Client::try_from(config) {
        Ok(client) => client,
        Err(error) => {
            return Reachability::Unreachable(format!(
                "cannot build a client for {server}: {error}"
            ));
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(info)) => Reachability::Reachable {
            client,
            version: info.git_version,
        },
        Ok(Err(error)) => {
            Reachability::Unreachable(format!("{server} did not answer /version: {error}"))
        }
        Err(_) => {
            Reachability::Unreachable(format!("{server} did not answer within {PROBE_TIMEOUT:?}"))
        }
    }
}

/// The cluster under test as the suite and the processes it starts reach it.
#[derive(Clone)]
pub struct Cluster {
    /// The suite's own client.
    pub client: Client,
    /// The kubeconfig the processes the suite starts (the operator binary,
    /// the consumers) are given; `None`: they inherit the environment
    /// (`KUBECONFIG`, `~/.kube/config` or in-cluster config), as the suite
    /// found it.
    pub kubeconfig: Option<PathBuf>,
    /// The namespace an operator reaching the cluster this way calls its
    /// own (`POD_NAMESPACE`: its Lease and the endpoint's Secret); `None`:
    /// the test's namespace ([`crate::account`] sets the account's).
    pub operator_namespace: Option<String>,
}

impl Cluster {
    /// The cluster the environment names, reached through `client`.
    pub fn from_environment(client: Client) -> Self {
        Self {
            client,
            kubeconfig: None,
            operator_namespace: None,
        }
    }

    /// Sets `KUBECONFIG` on `command` when the cluster has its own kubeconfig.
    pub fn configure(&self, command: &mut tokio::process::Command) {
        if let Some(path) = &self.kubeconfig {
            command.env("KUBECONFIG", path);
        }
    }
}
