//! `shardring run` (the binary) with leader election on a real Lease (moved
//! here from the operator's tests against the mock API server: it needs no
//! fault): two replicas on one static group both turn ready (`/readyz`),
//! the leader and the follower alike; one of them holds the Lease and the
//! group's document is published; a single replica without leader election
//! turns ready too. Build the binary first (`cargo build -p shardring --bin
//! shardring`; `./scripts/test.sh` builds it with the tests). Without a
//! cluster it prints `SKIPPED: ...` and passes.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use crate::kit_group::{
    GROUP, Running, TestResult, free_port, in_fresh_namespace, install, lease_of, shardring_run,
    wait_until,
};

const WAIT: Duration = Duration::from_secs(60);

/// A `shardring run` replica and the port of its `/readyz`.
struct Replica {
    _process: Running,
    metrics_port: u16,
}

/// Starts `shardring run` for `namespace` as replica `identity`.
async fn start(
    client: &Client,
    namespace: &str,
    identity: &str,
    extra: &[&str],
) -> TestResult<Replica> {
    let metrics_port = free_port()?;
    let child = shardring_run(client, namespace, identity, None)
        .await?
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        // Two replicas on one host: each its own endpoint port.
        .args(["--endpoint-addr", "127.0.0.1:0"])
        .args(extra)
        .spawn()?;
    Ok(Replica {
        _process: Running(child),
        metrics_port,
    })
}

/// `GET path` on the replica's HTTP port: the status code, or `None` when
/// it does not answer (yet).
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

async fn wait_ready(name: &str, replica: &Replica) -> TestResult {
    wait_until(&format!("{name}'s /readyz to answer 200"), WAIT, || async {
        match http_status(replica.metrics_port, "/readyz") {
            Some(200) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardring_run_turns_ready_as_leader_and_as_follower() {
    in_fresh_namespace("leader-readiness", "leader", scenario).await;
}

async fn scenario(client: &Client, namespace: &str) -> TestResult {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 8));
    install(client, namespace, 6, "2s", &["c-0", "c-1", "c-2"], ip).await?;
    let election = ["--leader-election"];
    let a = start(client, namespace, "replica-a", &election).await?;
    let b = start(client, namespace, "replica-b", &election).await?;
    for (name, replica) in [("replica-a", &a), ("replica-b", &b)] {
        assert_eq!(
            http_status(replica.metrics_port, "/healthz").unwrap_or(200),
            200
        );
        wait_ready(name, replica).await?;
    }
    // One of them leads and publishes.
    let (lease, home) = lease_of(namespace)?;
    let leases = Api::<Lease>::namespaced(client.clone(), &home);
    let holder = wait_until("a Lease holder", WAIT, || async {
        leases
            .get_opt(&lease)
            .await
            .map_err(|e| e.to_string())?
            .and_then(|lease| lease.spec?.holder_identity)
            .ok_or_else(|| "no holder".to_owned())
    })
    .await?;
    assert!(
        ["replica-a", "replica-b"].contains(&holder.as_str()),
        "the Lease is held by {holder}"
    );
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let document = format!("{GROUP}-assignment");
    wait_until("the group's document", WAIT, || async {
        config_maps
            .get_opt(&document)
            .await
            .map_err(|e| e.to_string())?
            .map(drop)
            .ok_or_else(|| "no ConfigMap".to_owned())
    })
    .await?;
    // Without leader election: ready too.
    drop((a, b));
    // The Lease outlives the test's namespace where it is the operator's.
    leases.delete(&lease, &Default::default()).await?;
    let single = start(client, namespace, "replica-c", &[]).await?;
    wait_ready("the single replica", &single).await
}
