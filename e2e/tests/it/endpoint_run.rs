//! `shardring run` serves the endpoint on the real cluster (moved here from
//! the operator's tests against the mock API server: it needs no fault):
//! as its ServiceAccount with a token bound to its own pod (see
//! `kit_group::shardring_run`), with no certificate mounted it creates (or
//! shares) the self-signed Secret of its namespace,
//! serves HTTPS under that CA (`/v1/healthz`, read with the consumer crate's
//! client trusting only that CA), labels its own pod as the endpoint leader,
//! and takes the label off when SIGTERM stops it. Build the binary first
//! (`cargo build -p shardring --bin shardring`; `./scripts/test.sh` builds
//! it with the tests). Without a cluster it prints `SKIPPED: ...` and
//! passes.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use shardring_consumer::view::endpoint::{EndpointClient, EndpointConfig};
use shardring_e2e::namespace::{apply_crds, create_namespace};

use crate::kit_group::{
    Running, TestResult, free_port, in_fresh_namespace, operator_home, operator_pod, shardring_run,
    wait_until,
};

const POD: &str = "shardring-0";
const LEADER_LABEL: &str = "shardring.io/endpoint-leader";
const SECRET: &str = "shardring-endpoint-selfsigned";
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardring_run_serves_the_endpoint_and_labels_its_pod_while_it_leads() {
    in_fresh_namespace("endpoint-run", "endpoint-run", async |client, namespace| {
        let dir = std::env::temp_dir().join(namespace);
        let result = scenario(client, namespace, &dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        result
    })
    .await;
}

async fn scenario(client: &Client, namespace: &str, dir: &std::path::Path) -> TestResult {
    apply_crds(client).await?;
    create_namespace(client, namespace).await?;
    // The operator's own pod lives where the operator does: in the
    // account's namespace (named after the test's: tests share it), whose
    // token is bound to it as the kubelet binds one, else in the test's.
    let home = operator_home(namespace)?;
    let own = if home == namespace {
        POD.to_owned()
    } else {
        format!("{namespace}-operator")
    };
    let pods = Api::<Pod>::namespaced(client.clone(), &home);
    let pod: Pod = serde_json::from_value(operator_pod(&home, &own))?;
    let uid = pods
        .create(&PostParams::default(), &pod)
        .await?
        .uid()
        .ok_or("the operator's pod has no uid")?;
    std::fs::create_dir_all(dir)?;
    let result = serve(client, namespace, (&home, &own, &uid), dir).await;
    if home != namespace {
        pods.delete(&own, &Default::default()).await?;
    }
    result
}

/// Runs the operator as pod `own` of `home` and checks the endpoint and
/// the label.
async fn serve(
    client: &Client,
    namespace: &str,
    (home, own, uid): (&str, &str, &str),
    dir: &std::path::Path,
) -> TestResult {
    let pods = Api::<Pod>::namespaced(client.clone(), home);
    let port = free_port()?;
    let child = shardring_run(client, namespace, own, Some((own, uid)))
        .await?
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port()?)])
        .args(["--endpoint-addr", &format!("127.0.0.1:{port}")])
        .arg("--endpoint-tls-dir")
        .arg(dir.join("no-certificate"))
        .args(["--endpoint-dns-name", "endpoint.example.com"])
        .spawn()?;
    let mut running = Running(child);

    let label = async || -> Result<Option<String>, String> {
        let pod = pods.get(own).await.map_err(|e| e.to_string())?;
        Ok(pod.labels().get(LEADER_LABEL).cloned())
    };
    wait_until("the leader label", WAIT, || async {
        match label().await? {
            Some(value) if value == "true" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    let secret = Api::<Secret>::namespaced(client.clone(), home)
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
