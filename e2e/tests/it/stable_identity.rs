//! Stable identity through `shardring run` on the real control plane: a
//! real StatefulSet `web` of 3 pods (its controller creates them and
//! recreates a deleted one under its name; a scheduling gate keeps them off
//! any node and the test marks each new pod Ready, as a kubelet would) and
//! one ShardGroup of 12 static partitions, moves counted from a watch of
//! the document.
//!
//! - A rolling restart (web-2, web-1, web-0 deleted one by one, each
//!   recreated and Ready 3 s later) without `identity`: the baseline moves;
//!   with `identity: {stable: true}`: no partition moves.
//! - The same pod Ready=False, then True again (a container restart): no
//!   move.
//! - A scale 3 → 2: web-2's partitions move at once (long before the
//!   window), nothing is held.
//! - A pod that does not come back Ready: its partitions are held (status
//!   `shards.held`, `heldUntil`) and move when the window ends, with an
//!   Event `HoldExpired`.
//!
//! Without a cluster it prints `SKIPPED: ...` and passes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shardring_crds::{AssignmentDocument, CONTROLLER_CLASS_LABEL, ConsumerPool, ShardGroup};
use shardring_devkit::fixtures;
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_e2e::namespace::{apply_crds, create_namespace};
use shardring_e2e::published::assignment_document;

use crate::kit_group::{
    Running, TestResult, free_port, in_fresh_namespace, moves_up_to_now, ready_status, set_status,
    shardring_run, wait_until, watch_owners_of,
};

const SET: &str = "web";
const GROUP: &str = "g";
const POOL: &str = "p";
const APP: &str = "consumer";
const SHARDS: usize = 12;
const WINDOW_SECS: u64 = 20;
const WAIT: Duration = Duration::from_secs(90);
const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

#[tokio::test]
async fn a_stateful_sets_restarts_move_no_partition_with_stable_identity() {
    in_fresh_namespace("stable-identity", "identity", scenario).await;
}

fn member(i: usize) -> String {
    format!("{SET}-{i}")
}

async fn scenario(client: &Client, namespace: &str) -> TestResult {
    apply_crds(client).await?;
    create_namespace(client, namespace).await?;
    let pools = Api::<ConsumerPool>::namespaced(client.clone(), namespace);
    let pool: ConsumerPool = serde_json::from_value(fixtures::pool(namespace, POOL, APP))?;
    pools.create(&PostParams::default(), &pool).await?;
    let mut group = fixtures::static_group(namespace, GROUP, POOL, u32::try_from(SHARDS)?);
    group["metadata"]["labels"] = json!({ CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS });
    Api::<ShardGroup>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &serde_json::from_value(group)?)
        .await?;
    let sets = Api::<StatefulSet>::namespaced(client.clone(), namespace);
    sets.create(&PostParams::default(), &stateful_set(namespace, 3)?)
        .await?;
    let kubelet = Kubelet::start(client.clone(), namespace);
    let _operator = Running(
        shardring_run(client, namespace, "operator-0", None)
            .await?
            .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(["--endpoint-addr", "127.0.0.1:0"])
            .spawn()?,
    );
    let all: Vec<String> = (0..3).map(member).collect();
    wait_balanced(client, namespace, &all).await?;
    // From now on a recreated pod takes a moment to start: without it the
    // operator may see a pod deleted and recreated Ready in one look, and
    // nothing to do (an unscheduled pod is deleted at once).
    kubelet.set_startup(Duration::from_secs(3));
    let (owners, watch) = watch_owners_of(client, namespace, SHARDS).await?;
    let moved = || moves_up_to_now(client, namespace, &owners);

    // The baseline: a rolling restart without the setting.
    rolling_restart(client, namespace, &all).await?;
    let baseline = moved().await?;
    println!("stable identity: rolling restart without identity: {baseline} moves of {SHARDS}");
    if baseline == 0 {
        return Err("the rolling restart without identity moved nothing: no baseline".into());
    }

    pools
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"identity": {
                "stable": true, "returnWithin": format!("{WINDOW_SECS}s")
            }}})),
        )
        .await?;
    let before = moved().await?;
    let started = Instant::now();
    rolling_restart(client, namespace, &all).await?;
    let with_identity = moved().await? - before;
    println!(
        "stable identity: rolling restart with identity: {with_identity} moves of {SHARDS} ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    if with_identity != 0 {
        return Err(format!("{with_identity} moves over a rolling restart with identity").into());
    }

    // The same pod not Ready for a moment (its container restarted).
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let before = moved().await?;
    let flap = member(1);
    let since = jiff::Timestamp::now().to_string();
    set_status(&pods, &flap, not_ready_status(&since)).await?;
    wait_until(&format!("{flap}'s partitions revoked"), WAIT, || async {
        let doc = document(client, namespace).await?;
        let entry = doc.pods.get(&flap).cloned().unwrap_or_default();
        if entry.active.is_empty() && entry.revoking.len() + entry.held.len() == 4 {
            Ok(())
        } else {
            Err(format!("{entry:?}"))
        }
    })
    .await?;
    set_status(
        &pods,
        &flap,
        ready_status(&jiff::Timestamp::now().to_string(), IP),
    )
    .await?;
    wait_balanced(client, namespace, &all).await?;
    let flap_moves = moved().await? - before;
    println!("stable identity: the same pod not Ready and back: {flap_moves} moves");
    if flap_moves != 0 {
        return Err(format!("{flap_moves} moves for a pod that came back").into());
    }

    // Scaled down: web-2 will not come back.
    let before = moved().await?;
    let started = Instant::now();
    sets.patch(
        SET,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    let two: Vec<String> = (0..2).map(member).collect();
    wait_balanced(client, namespace, &two).await?;
    let took = started.elapsed();
    let scale_moves = moved().await? - before;
    println!(
        "stable identity: scale 3 -> 2: {scale_moves} moves in {:.1} s (window {WINDOW_SECS} s)",
        took.as_secs_f64()
    );
    if scale_moves != 4 || took >= Duration::from_secs(WINDOW_SECS) {
        return Err(format!(
            "scale-down: {scale_moves} moves in {took:?}: web-2's 4 partitions must move at once"
        )
        .into());
    }

    // A pod that does not come back Ready within the window.
    let gone = member(1);
    kubelet.withhold(&gone);
    let before = moved().await?;
    let started = Instant::now();
    pods.delete(&gone, &DeleteParams::default()).await?;
    let status = wait_until("web-1's partitions held", WAIT, || async {
        let status = group_status(client, namespace).await?;
        if status["shards"]["held"] == 6 && status["heldUntil"].is_string() {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    })
    .await?;
    println!(
        "stable identity: web-1 away: held {} until {}",
        status["shards"]["held"], status["heldUntil"]
    );
    wait_until(
        "web-1's partitions moved when the window ended",
        WAIT,
        || async {
            let doc = document(client, namespace).await?;
            let on = doc.pods.get(&member(0)).map_or(0, |e| e.active.len());
            if on == SHARDS {
                Ok(())
            } else {
                Err(format!("{:?}", doc.pods))
            }
        },
    )
    .await?;
    let took = started.elapsed();
    let expired_moves = moved().await? - before;
    println!(
        "stable identity: a pod that did not return: {expired_moves} moves after {:.1} s (window {WINDOW_SECS} s)",
        took.as_secs_f64()
    );
    // The window counts from the pod's deletion timestamp, which the API
    // server keeps to the second: it may start up to 1 s before `started`.
    if expired_moves != 6 || took < Duration::from_secs(WINDOW_SECS - 1) {
        return Err(format!(
            "a pod that did not return: {expired_moves} moves after {took:?}; expected 6 after the {WINDOW_SECS} s window"
        )
        .into());
    }
    // Events go out after the document.
    let events = Api::<Event>::namespaced(client.clone(), namespace);
    let expired = wait_until("an Event HoldExpired naming web-1", WAIT, || async {
        let notes: Vec<String> = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("HoldExpired"))
            .filter_map(|e| e.note.clone())
            .collect();
        if notes.iter().any(|note| note.contains("web-1")) {
            Ok(notes)
        } else {
            Err(format!("{notes:?}"))
        }
    })
    .await?;
    println!("stable identity: Events HoldExpired: {expired:?}");
    watch.abort();
    kubelet.stop();
    Ok(())
}

/// StatefulSet `web`: `replicas` gated pods labelled `app=consumer`,
/// created in parallel.
fn stateful_set(namespace: &str, replicas: i32) -> TestResult<StatefulSet> {
    let template = fixtures::gated_pod(namespace, "template", APP);
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": SET, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "serviceName": SET,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": template["spec"],
            },
        },
    }))?)
}

/// Deletes the pods `names` highest first, as a StatefulSet's rolling
/// update does, each time waiting until its successor is Ready and the
/// assignment is balanced over `names` again.
async fn rolling_restart(client: &Client, namespace: &str, names: &[String]) -> TestResult {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    for name in names.iter().rev() {
        let old = pods.get(name).await?.uid().unwrap_or_default();
        let epoch = document(client, namespace).await?.epoch;
        pods.delete(name, &DeleteParams::default()).await?;
        // The operator saw it go (its shards revoked, held or moved).
        wait_until(&format!("a document after {name} went"), WAIT, || async {
            let doc = document(client, namespace).await?;
            let entry = doc.pods.get(name).cloned().unwrap_or_default();
            if doc.epoch > epoch && entry.active.len() < SHARDS / names.len() {
                Ok(())
            } else {
                Err(format!("epoch {}: {entry:?}", doc.epoch))
            }
        })
        .await?;
        wait_until(&format!("{name} recreated and Ready"), WAIT, || async {
            match pods.get_opt(name).await.map_err(|e| e.to_string())? {
                Some(pod) if pod.uid().unwrap_or_default() != old && ready(&pod) => Ok(()),
                _ => Err("not yet".into()),
            }
        })
        .await?;
        wait_balanced(client, namespace, names).await?;
    }
    Ok(())
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The status of a pod whose container is restarting: not Ready.
fn not_ready_status(since: &str) -> serde_json::Value {
    json!({
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": since},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": since},
        ],
    })
}

async fn document(client: &Client, namespace: &str) -> Result<AssignmentDocument, String> {
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(&format!("{GROUP}-assignment"))
        .await
        .map_err(|e| e.to_string())?;
    assignment_document(&map).map_err(|e| e.to_string())
}

async fn group_status(client: &Client, namespace: &str) -> Result<serde_json::Value, String> {
    let group = Api::<ShardGroup>::namespaced(client.clone(), namespace)
        .get(GROUP)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::to_value(group.status).map_err(|e| e.to_string())
}

/// Waits until the document has every partition active, evenly over
/// `pods`, nothing revoking or held.
async fn wait_balanced(client: &Client, namespace: &str, pods: &[String]) -> TestResult {
    let per_pod = SHARDS / pods.len();
    wait_until(
        &format!("{SHARDS} partitions {per_pod} each on {pods:?}"),
        WAIT,
        || async {
            let doc = document(client, namespace).await?;
            let counts: BTreeMap<&String, usize> = pods
                .iter()
                .map(|p| (p, doc.pods.get(p).map_or(0, |e| e.active.len())))
                .collect();
            let settled = doc
                .pods
                .values()
                .all(|e| e.revoking.is_empty() && e.held.is_empty());
            if settled && counts.values().all(|&n| n == per_pod) {
                Ok(())
            } else {
                Err(format!("{:?}", doc.pods))
            }
        },
    )
    .await?;
    Ok(())
}

/// What a kubelet would do for the StatefulSet's gated pods: every new pod
/// is marked Running and Ready, except those withheld (a pod that does not
/// come back).
struct Kubelet {
    withheld: Arc<Mutex<BTreeSet<String>>>,
    startup: Arc<Mutex<Duration>>,
    task: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    fn start(client: Client, namespace: &str) -> Self {
        let withheld = Arc::new(Mutex::new(BTreeSet::new()));
        let startup = Arc::new(Mutex::new(Duration::ZERO));
        let skip = Arc::clone(&withheld);
        let takes = Arc::clone(&startup);
        let pods = Api::<Pod>::namespaced(client, namespace);
        let task = tokio::spawn(async move {
            let mut marked: BTreeSet<String> = BTreeSet::new();
            let mut first_seen: BTreeMap<String, Instant> = BTreeMap::new();
            loop {
                if let Ok(list) = pods
                    .list(&ListParams::default().labels("app=consumer"))
                    .await
                {
                    for pod in list.items {
                        let (name, uid) = (pod.name_any(), pod.uid().unwrap_or_default());
                        let withheld = skip.lock().expect("withheld").contains(&name);
                        let seen = *first_seen.entry(uid.clone()).or_insert_with(Instant::now);
                        let starting = seen.elapsed() < *takes.lock().expect("startup");
                        if pod.metadata.deletion_timestamp.is_some()
                            || withheld
                            || starting
                            || marked.contains(&uid)
                        {
                            continue;
                        }
                        let since = jiff::Timestamp::now().to_string();
                        if set_status(&pods, &name, ready_status(&since, IP))
                            .await
                            .is_ok()
                        {
                            marked.insert(uid);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self {
            withheld,
            startup,
            task,
        }
    }

    /// New pods are marked Ready `startup` after they were first seen (a
    /// container starting), so the operator sees each restarted pod away.
    fn set_startup(&self, startup: Duration) {
        *self.startup.lock().expect("startup") = startup;
    }

    /// `pod`'s next incarnations are never marked Ready.
    fn withhold(&self, pod: &str) {
        self.withheld
            .lock()
            .expect("withheld")
            .insert(pod.to_owned());
    }

    fn stop(self) {
        self.task.abort();
    }
}
