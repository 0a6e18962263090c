//! A pod update that changes nothing a decision reads wakes no reconcile,
//! through `shardring run`'s own watch on the real control plane. A static
//! group `g` of 4 partitions on two Ready pods; once it is published, ten
//! updates of the kind kubelet and other controllers make all the time
//! (another tool's annotation, a condition of a readiness gate) go to the
//! pods; changes of the group's spec, whose reconciles show in its status
//! (`observedGeneration`), open and close the window. The operator's
//! `shardring_reconciles_total` counts the reconciles in between: that one
//! and at most one timer's, where every update woke one before.
//!
//! The same count over publishes that rewrite both pods' annotations
//! (standbys switched on and off): the echoes of the operator's own
//! annotation writes wake nothing, also when the watch delivers one before
//! the write's answer.
//! Without a cluster it prints `SKIPPED: ...` and passes.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use shardring_crds::ShardGroup;

use crate::kit_group::{
    GROUP, Running, TestResult, in_fresh_namespace, install, reconciles_total, start_operator,
    wait_until,
};

const WAIT: Duration = Duration::from_secs(90);
const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const PODS: [&str; 2] = ["c-0", "c-1"];
/// Pod updates that change nothing read, sent in the window.
const UPDATES: usize = 10;

/// Publishes that rewrite every pod's annotation, in the second test.
const TOGGLES: usize = 6;

#[tokio::test]
async fn pod_updates_that_change_nothing_read_wake_no_reconcile() {
    in_fresh_namespace("pod-wakes", "pod-wakes", scenario).await;
}

#[tokio::test]
async fn the_echoes_of_a_publish_s_annotation_writes_wake_no_reconcile() {
    in_fresh_namespace("pod-echoes", "pod-echoes", echoes).await;
}

async fn echoes(client: &Client, namespace: &str) -> TestResult {
    let (_operator, metrics_port, groups, before) = open_window(client, namespace).await?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    for i in 0..TOGGLES {
        let standbys = (i + 1) % 2;
        let patch = json!({ "spec": { "standbys": standbys } });
        groups
            .patch(GROUP, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // Published, and both pods' views written.
        wait_until("both pods' views written", WAIT, || async {
            for pod in PODS {
                let pod = pods.get(pod).await.map_err(|e| e.to_string())?;
                let view = pod
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .remove(&format!("assignment.shardring.io/{GROUP}"))
                    .ok_or("no view")?;
                let view: serde_json::Value =
                    serde_json::from_str(&view).map_err(|e| e.to_string())?;
                let backs_up = view["standby"].as_array().is_some_and(|s| !s.is_empty());
                if backs_up != (standbys == 1) {
                    return Err(format!("{view}"));
                }
            }
            Ok(())
        })
        .await?;
    }
    let after = reconciled_spec(&groups, metrics_port, "33s").await?;
    let woken = after - before;
    println!(
        "pod echoes: {TOGGLES} publishes that rewrote both pods' views, {woken} reconciles (the closing spec change's included)"
    );
    assert!(
        woken <= (TOGGLES + 2) as f64,
        "{TOGGLES} publishes woke {woken} reconciles; want one each, the closing spec change's \
         and at most one timer's: the echoes of its own annotation writes woke the group"
    );
    Ok(())
}

/// Installs group `g` on [`PODS`], starts the operator and opens the
/// counting window: the operator, its metrics port, the groups' API and
/// the reconciles counted when the window opened.
async fn open_window(
    client: &Client,
    namespace: &str,
) -> TestResult<(Running, u16, Api<ShardGroup>, f64)> {
    install(client, namespace, 4, "30s", &PODS, IP).await?;
    let (operator, metrics_port) = start_operator(client, namespace).await?;
    let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    // Twice: the first spec change may be seen by the first publish's own
    // reconciles (the finalizer's, the first publish's).
    reconciled_spec(&groups, metrics_port, "31s").await?;
    let before = reconciled_spec(&groups, metrics_port, "32s").await?;
    Ok((operator, metrics_port, groups, before))
}

async fn scenario(client: &Client, namespace: &str) -> TestResult {
    let (_operator, metrics_port, groups, before) = open_window(client, namespace).await?;

    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    for i in 0..UPDATES {
        let pod = PODS[i % PODS.len()];
        if i % 2 == 0 {
            // Another tool's annotation (shardring keeps only its own).
            let patch =
                json!({ "metadata": { "annotations": { "example.com/probe": i.to_string() } } });
            pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        } else {
            // A readiness gate's condition, merged by type beside Ready.
            let status = if i % 4 == 1 { "True" } else { "False" };
            let patch = json!({ "status": { "conditions": [
                { "type": "example.com/Gate", "status": status }
            ] } });
            pods.patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
                .await?;
        }
    }

    let after = reconciled_spec(&groups, metrics_port, "33s").await?;
    let woken = after - before;
    println!(
        "pod wakes: {UPDATES} pod updates that change nothing read, {woken} reconciles (the spec change's included)"
    );
    assert!(
        woken <= 2.0,
        "{UPDATES} pod updates that change nothing a decision reads woke {woken} reconciles; \
         want the spec change's own and at most one timer's"
    );
    Ok(())
}

/// Sets the group's drain timeout to `drain` (a new generation), waits
/// until a reconcile has published its document and seen that generation
/// (its status says so), and returns the operator's reconciles so far
/// (counted as each starts: that one included).
async fn reconciled_spec(
    groups: &Api<ShardGroup>,
    metrics_port: u16,
    drain: &str,
) -> TestResult<f64> {
    let patch = json!({ "spec": { "handoff": { "drainTimeout": drain } } });
    let generation = groups
        .patch(GROUP, &PatchParams::default(), &Patch::Merge(&patch))
        .await?
        .metadata
        .generation;
    wait_until("the group's new spec reconciled", WAIT, || async {
        let group = groups.get(GROUP).await.map_err(|e| e.to_string())?;
        let status = group.status.unwrap_or_default();
        if status.observed_generation == generation && status.epoch > 0 {
            Ok(())
        } else {
            Err(format!(
                "observedGeneration {:?} of {generation:?}, epoch {}",
                status.observed_generation, status.epoch
            ))
        }
    })
    .await?;
    Ok(reconciles_total(metrics_port)?)
}
