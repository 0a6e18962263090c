//! `kubectl shardring` on the real control plane, run by the real kubectl
//! (which finds `kubectl-shardring` on PATH), against `shardring run`
//! serving a pool of three Ready pods and two static groups (12 and 6
//! partitions, drain timeout 1 s):
//! - `status` shows both groups Ready and the pool's 18 shards, 6 a pod;
//! - `plan --replicas 4` says what one more pod would move, and writes
//!   nothing (every document's resourceVersion stays);
//! - the fourth pod is then added for real: the operator makes exactly the
//!   moves the what-if predicted (counted from a watch of the documents),
//!   and the new pod reads what it said;
//! - `why` of a shard that moved names its new owner and its handoff from
//!   `status.recentHandoffs` (evidence `drain_timeout`: these pods run no
//!   consumer);
//! - `top` lists the four pods and their 18 shards.
//!
//! Without a cluster it prints `SKIPPED: ...` and passes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shardring_crds::{CONTROLLER_CLASS_LABEL, ShardGroup};
use shardring_devkit::fixtures;
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_e2e::operator::binary_path;

use crate::kit_group::{
    Running, TestResult, free_port, in_fresh_namespace, pool_of_ready_pods, ready_pod,
    shardring_run, wait_until, watch_owners_of,
};

const WAIT: Duration = Duration::from_secs(90);
const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shardring_reads_the_cluster_and_predicts_the_moves() {
    in_fresh_namespace("kubectl-plugin", "kubectl", scenario).await;
}

/// `kubectl shardring ARGS -n NAMESPACE`, with the plugin beside the
/// `shardring` binary on PATH: its output.
fn kubectl_shardring(namespace: &str, args: &[&str]) -> TestResult<String> {
    let dir = binary_path()?
        .parent()
        .map(std::path::Path::to_path_buf)
        .ok_or("no directory of the shardring binary")?;
    let plugin = dir.join("kubectl-shardring");
    if !plugin.is_file() {
        return Err(format!(
            "{} is missing: build it (cargo build -p kubectl-shardring; ./scripts/test.sh does)",
            plugin.display()
        )
        .into());
    }
    let path = std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(kubectl)
        .arg("shardring")
        .args(args)
        .args(["-n", namespace])
        .env("PATH", path)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "kubectl shardring {args:?} failed: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    println!("$ kubectl shardring {}\n{stdout}", args.join(" "));
    Ok(stdout)
}

/// Each document's resourceVersion.
async fn versions(client: &Client, namespace: &str) -> TestResult<BTreeMap<String, String>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|cm| cm.name_any().ends_with("-assignment"))
        .map(|cm| (cm.name_any(), cm.resource_version().unwrap_or_default()))
        .collect())
}

/// The number on the line of `text` that starts with `prefix`, in column
/// `column` (0: the first after the name).
fn column(text: &str, prefix: &str, column: usize) -> Option<u64> {
    text.lines()
        .find(|line| line.split_whitespace().next() == Some(prefix))?
        .split_whitespace()
        .nth(column + 1)?
        .parse()
        .ok()
}

async fn scenario(client: &Client, namespace: &str) -> TestResult {
    pool_of_ready_pods(client, namespace, 3, IP).await?;
    let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    for (name, count) in [("g-a", 12), ("g-b", 6)] {
        let mut group = fixtures::static_group(namespace, name, "p", count);
        group["metadata"]["labels"] = json!({ CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS });
        group["spec"]["handoff"]["drainTimeout"] = json!("1s");
        groups
            .create(&PostParams::default(), &serde_json::from_value(group)?)
            .await?;
    }
    let _operator = Running(
        shardring_run(client, namespace, "operator-0", None)
            .await?
            .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(["--endpoint-addr", "127.0.0.1:0"])
            .spawn()?,
    );
    let status = wait_until(
        "status: both groups Ready, 6 shards a pod",
        WAIT,
        || async {
            let text = kubectl_shardring(namespace, &["status"]).map_err(|e| e.to_string())?;
            let ready = text.matches("True Published").count() == 2;
            let stable = text.matches("False Stable").count() == 2;
            let pool = text.lines().any(|l| {
                l.split_whitespace().collect::<Vec<_>>()[..]
                    == ["p", "3", "3", "2", "18", "6-6", "True", "Serving"]
            });
            if ready && stable && pool {
                Ok(text)
            } else {
                Err(text)
            }
        },
    )
    .await?;
    assert!(status.contains("SHARDGROUP"), "{status}");

    let before = versions(client, namespace).await?;
    let plan = kubectl_shardring(namespace, &["plan", "--replicas", "4"])?;
    assert_eq!(
        versions(client, namespace).await?,
        before,
        "plan wrote a document"
    );
    assert!(plan.contains("adds what-if-0"), "{plan}");
    let predicted_moves: u64 = plan
        .lines()
        .find_map(|l| {
            l.strip_prefix("pool: ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .ok_or("no pool line")?;
    let predicted_new = column(&plan, "what-if-0", 1).ok_or("no what-if-0 row")?;
    assert_eq!(
        column(&plan, "what-if-0", 0),
        None,
        "the new pod reads nothing now: {plan}"
    );
    assert_eq!(
        predicted_moves, predicted_new,
        "every move goes to the new pod: {plan}"
    );
    assert!(
        (4..=5).contains(&predicted_new),
        "18 shards on 4 pods: {plan}"
    );

    // The same pod for real.
    let (owners, watch) = watch_owners_of(client, namespace, 18).await?;
    let since = jiff::Timestamp::now().to_string();
    ready_pod(client, namespace, "c-3", "consumer", &since, IP).await?;
    // The new pod reads what the what-if said once no handoff is in flight
    // (one group's moves can end before another's start: waiting for "some
    // shards on c-3" alone could stop between them).
    let top = wait_until("the new pod to read its predicted share", WAIT, || async {
        let text = kubectl_shardring(namespace, &["top"]).map_err(|e| e.to_string())?;
        let revoking: u64 = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
            .sum();
        if column(&text, "c-3", 0) == Some(predicted_new) && revoking == 0 {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await?;
    // The document watch counts the moves: it may deliver the last
    // documents a moment after `top` read them, so wait until it has seen
    // the new pod's share too.
    let moves = wait_until(
        "the document watch to see the new pod's share",
        WAIT,
        || async {
            let owners = owners.lock().expect("owners");
            let on_new = owners.owner.values().filter(|pod| *pod == "c-3").count();
            if u64::try_from(on_new).ok() == Some(predicted_new) {
                Ok(owners.moves)
            } else {
                Err(format!(
                    "{on_new} partitions on c-3, {} moves",
                    owners.moves
                ))
            }
        },
    )
    .await?;
    watch.abort();
    assert_eq!(
        u64::try_from(moves)?,
        predicted_moves,
        "the what-if predicted {predicted_moves} moves"
    );
    assert_eq!(column(&top, "c-3", 0), Some(predicted_new), "{top}");
    let total: u64 = ["c-0", "c-1", "c-2", "c-3"]
        .iter()
        .filter_map(|pod| column(&top, pod, 0))
        .sum();
    assert_eq!(total, 18, "{top}");

    // Why is a shard that moved on c-3?
    let moved = owners
        .lock()
        .expect("owners")
        .owner
        .iter()
        .find(|(shard, pod)| *pod == "c-3" && shard.starts_with("g-a-"))
        .map(|(shard, _)| shard.clone())
        .ok_or("no g-a shard moved to c-3")?;
    let why = kubectl_shardring(namespace, &["why", &moved])?;
    assert!(
        why.contains(&format!("shard {moved} of ShardGroup {namespace}/g-a")),
        "{why}"
    );
    assert!(why.contains("owner:     c-3"), "{why}");
    assert!(why.contains("its recent handoffs, newest first"), "{why}");
    assert!(
        why.contains("→ c-3  evidence drain_timeout"),
        "the handoff and its evidence: {why}"
    );
    Ok(())
}
