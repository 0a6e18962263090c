//! `shardring run` serves the endpoint on the real cluster (moved here from
//! the operator's tests against the mock API server: it needs no fault):
//! with no certificate mounted it creates the shared self-signed Secret,
//! serves HTTPS under that CA (`/v1/healthz`, read with the consumer crate's
//! client trusting only that CA), labels its own pod as the endpoint leader,
//! and takes the label off when SIGTERM stops it. Build the binary first
//! (`cargo build -p shardring --bin shardring`; `./scripts/test.sh` builds
//! it with the tests). Without a cluster it prints `SKIPPED: ...` and
//! passes.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use shardring_consumer::view::endpoint::{EndpointClient, EndpointConfig};
use shardring_devkit::fixtures;
use shardring_e2e::cluster::cluster_or_skip;
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_e2e::namespace::{apply_crds, create_namespace, delete_namespace, unique_namespace};
use shardring_e2e::operator::{OperatorError, binary_path};

use crate::kit_group::{TestResult, wait_until};

const POD: &str = "shardring-0";
const LEADER_LABEL: &str = "shardring.io/endpoint-leader";
const SECRET: &str = "shardring-endpoint-selfsigned";
const WAIT: Duration = Duration::from_secs(60);

/// The `shardring run` child process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardring_run_serves_the_endpoint_and_labels_its_pod_while_it_leads() {
    let _turn = crate::TURNS.read().await;
    let _kit_turn = shardring_e2e::kit::KitTurn::shared().await;
    let Some(client) = cluster_or_skip("endpoint-run").await else {
        return;
    };
    let namespace = unique_namespace("endpoint-run");
    let dir = std::env::temp_dir().join(&namespace);
    let result = scenario(&client, &namespace, &dir).await;
    let cleanup = delete_namespace(&client, &namespace).await;
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(error) = result {
        panic!("endpoint run in namespace {namespace}: {error}");
    }
    cleanup.unwrap_or_else(|error| panic!("cleanup of namespace {namespace}: {error}"));
}

async fn scenario(client: &Client, namespace: &str, dir: &std::path::Path) -> TestResult {
    apply_crds(client).await?;
    create_namespace(client, namespace).await?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(fixtures::gated_pod(namespace, POD, "shardring"))?;
    pods.create(&PostParams::default(), &pod).await?;
    std::fs::create_dir_all(dir)?;

    let path = binary_path()?;
    if !path.is_file() {
        return Err(OperatorError::MissingBinary(path).into());
    }
    let port = free_port()?;
    let no_certificate = dir.join("no-certificate");
    let child = Command::new(path)
        .args([
            "run",
            "--namespace",
            namespace,
            "--controller-class",
            CONTROLLER_CLASS,
        ])
        .args(["--no-node-watch", "--log-filter", "info"])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port()?)])
        .args(["--endpoint-addr", &format!("127.0.0.1:{port}")])
        .arg("--endpoint-tls-dir")
        .arg(&no_certificate)
        .args(["--endpoint-dns-name", "endpoint.example.com"])
        .env("POD_NAME", POD)
        .env("POD_NAMESPACE", namespace)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut running = Running(child);

    let label = async || -> Result<Option<String>, String> {
        let pod = pods.get(POD).await.map_err(|e| e.to_string())?;
        Ok(pod.labels().get(LEADER_LABEL).cloned())
    };
    wait_until("the leader label", WAIT, || async {
        match label().await? {
            Some(value) if value == "true" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(SECRET)
        .await?;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let ca = secret
        .data
        .unwrap_or_default()
        .remove("ca.crt")
        .ok_or("the Secret has no ca.crt")?;
    let (ca_file, token_file) = (dir.join("ca.crt"), dir.join("token"));
    std::fs::write(&ca_file, ca.0)?;
    // `/v1/healthz` asks for no identity; the client sends a token anyway.
    std::fs::write(&token_file, "unused")?;
    let mut config = EndpointConfig::new(format!("https://127.0.0.1:{port}"));
    config.ca_file = ca_file;
    config.token_file = token_file;
    let reply = EndpointClient::new(config)?
        .send(
            http::Method::GET,
            "/v1/healthz",
            None,
            Duration::from_secs(10),
        )
        .await?;
    assert_eq!(reply.status, 200, "{:?}", reply.body);

    let terminated = Command::new("kill")
        .args(["-TERM", &running.0.id().to_string()])
        .status()?;
    assert!(terminated.success());
    let exited = wait_until("the operator to exit", Duration::from_secs(30), || {
        let status = running.0.try_wait();
        async move {
            status
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "still running".to_owned())
        }
    })
    .await?;
    assert!(exited.success(), "exit status {exited}");
    assert_eq!(label().await?, None, "the label is gone after shutdown");
    Ok(())
}
