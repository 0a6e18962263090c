//! The end-to-end scenarios against the devkit's mock Kubernetes API server
//! (TLS, kubeconfig, paged lists, watches with bookmarks and 410s,
//! finalizers, a Lease API), so they run in CI where no cluster exists. The
//! operator runs in-process and as the `shardring run` binary; the consumer
//! processes and the binary reach the mock through its kubeconfig. Nothing
//! process-wide is shared: each operator gets its own Kinesis provider (in
//! process) or the emulators' credentials in its environment (binary).
//!
//! Scenarios run one at a time (each starts its own emulators and consumer
//! processes; on two cores they would starve each other), and not beside
//! the tests on a real cluster either ([`crate::TURNS`]).

use std::path::PathBuf;

use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_e2e::cluster::Cluster;
use shardring_e2e::harness::{Harness, files_dir};
use shardring_e2e::operator::OperatorMode;
use shardring_e2e::scenarios::{self, ScenarioResult};

/// A mock API server and the kubeconfig file its child processes use.
async fn mock_cluster(scenario: &str) -> (MockApiServer, Cluster) {
    let mock = MockApiServer::start(MockOptions::default()).await;
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "shardring-e2e-mock-{scenario}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("kubeconfig directory");
    let kubeconfig = dir.join("kubeconfig");
    mock.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let cluster = Cluster {
        client: mock.client().await,
        kubeconfig: Some(kubeconfig),
        operator_namespace: None,
    };
    (mock, cluster)
}

async fn run(
    scenario: &str,
    mode: OperatorMode,
    shards: u32,
    body: impl AsyncFnOnce(&mut Harness) -> ScenarioResult,
) {
    let _turn = crate::TURNS.write().await;
    let (_mock, cluster) = mock_cluster(scenario).await;
    let kubeconfig_dir = cluster
        .kubeconfig
        .as_deref()
        .and_then(std::path::Path::parent)
        .map(PathBuf::from);
    let mut harness = Harness::start(cluster, mode, scenario, shards)
        .await
        .unwrap_or_else(|error| panic!("scenario {scenario} ({mode:?}) could not start: {error}"));
    let result = body(&mut harness).await;
    let namespace = harness.namespace.clone();
    let cleanup = harness.cleanup().await;
    if let Err(error) = result {
        panic!("scenario {scenario} ({mode:?}) failed on the mock API server: {error}");
    }
    cleanup.unwrap_or_else(|error| panic!("cleanup of {scenario} failed: {error}"));
    // The consumers' logs stay for a scenario that failed, not after a pass.
    let _ = std::fs::remove_dir_all(files_dir(&namespace));
    if let Some(dir) = kubeconfig_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Two in-process replicas elect a leader on the mock's Lease API; the
/// leader serves a scale-up (it reads Kinesis through its own provider), is
/// killed, and the survivor serves the next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_election_with_two_in_process_replicas() {
    run(
        "leader-election",
        OperatorMode::InProcess,
        4,
        scenarios::leader_election,
    )
    .await;
}

/// The binary, given the emulators' credentials in its environment, serves a
/// graceful termination.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_termination_with_the_binary() {
    run(
        "graceful-binary",
        OperatorMode::Binary,
        4,
        scenarios::graceful_termination,
    )
    .await;
}

/// The in-process operator serves a kill -9 (lease expiry is the evidence).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_in_process() {
    run("kill-9", OperatorMode::InProcess, 4, scenarios::kill_9).await;
}
