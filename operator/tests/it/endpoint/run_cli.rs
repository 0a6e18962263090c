//! `shardring run` serves the endpoint: with no certificate mounted it
//! creates the shared self-signed Secret, serves HTTPS under that CA, labels
//! its own pod as the endpoint leader, and takes the label off when SIGTERM
//! stops it.

use std::process::{Command, Stdio};
use std::time::Duration;

use shardring_devkit::fixtures;

use super::support::{Client, mock, tempdir, wait_until};

/// A `shardring run` child process, killed when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardring_run_serves_the_endpoint_and_labels_its_pod_while_it_leads() {
    let mock = mock().await;
    mock.create_many(fixtures::crds());
    mock.create(fixtures::ready_pod(
        "default",
        "shardring-0",
        "shardring",
        "2026-01-01T00:00:00Z",
    ));
    let dir = tempdir("run");
    let kubeconfig = dir.join("kubeconfig");
    mock.write_kubeconfig(&kubeconfig).unwrap();
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_shardring"))
        .args(["run", "--no-node-watch", "--log-filter", "info"])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--endpoint-addr", &format!("127.0.0.1:{port}")])
        .args([
            "--endpoint-tls-dir",
            dir.join("no-certificate").to_str().unwrap(),
        ])
        .args(["--endpoint-dns-name", "endpoint.example.com"])
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "shardring-0")
        .env("POD_NAMESPACE", "default")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn shardring run");
    let mut running = Running(child);

    let label = || {
        mock.get("v1", "Pod", Some("default"), "shardring-0")
            .and_then(|pod| {
                pod["metadata"]["labels"]["shardring.io/endpoint-leader"]
                    .as_str()
                    .map(str::to_owned)
            })
    };
    wait_until("the leader label", Duration::from_secs(60), || {
        label().as_deref() == Some("true")
    })
    .await;
    let secret = mock
        .get(
            "v1",
            "Secret",
            Some("default"),
            "shardring-endpoint-selfsigned",
        )
        .expect("the self-signed Secret");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let engine = base64::engine::general_purpose::STANDARD;
    let ca = base64::Engine::decode(&engine, secret["data"]["ca.crt"].as_str().unwrap()).unwrap();
    let ca = String::from_utf8(ca).unwrap();
    let client = Client::new(format!("127.0.0.1:{port}").parse().unwrap(), &ca);
    let answer = client.get("/v1/healthz", None).await;
    answer.expect(200);

    let terminated = Command::new("kill")
        .args(["-TERM", &running.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(terminated.success());
    let mut status = None;
    wait_until("the operator to exit", Duration::from_secs(30), || {
        status = running.0.try_wait().unwrap();
        status.is_some()
    })
    .await;
    assert!(status.unwrap().success(), "{status:?}");
    assert_eq!(label(), None, "the label is gone after shutdown");
}
