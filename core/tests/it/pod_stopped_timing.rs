//! How long the shards of a deleted pod take to move with the sample
//! settings (`config/samples`: a static source of 16 queues, no lease table,
//! `drainTimeout: 30s`, a pool with `minReadySeconds: 10`), through the real
//! plan step on a simulated clock: before (an operator that does not read
//! the kubelet's container statuses, i.e. the rules without `pod_stopped`)
//! and after. Reconciles follow the runner: one 100 ms after every event
//! the watches deliver (pod changes, and the operator's own document and
//! annotation writes), and at each decision's requeue time.
//!
//! `cargo test -p shardring --test it pod_stopped_timing:: -- --nocapture`
//! prints the table.

use jiff::{SignedDuration, Timestamp};
use shardring_core::departures::{Departure, Departures};
use shardring_core::observation::Containers;
use shardring_core::observation::{Observation, PodInfo, Published};
use shardring_core::plan::plan;
use shardring_crds::{ConsumerPool, ShardGroup, ShardPhase};

use shardring_core::fixtures::*;

/// The sample ShardGroup and ConsumerPool, as `kubectl apply -k
/// config/samples/` creates them.
fn samples() -> (ShardGroup, ConsumerPool) {
    let mut group: ShardGroup = serde_yaml::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/samples/shardgroup-static.yaml"
    )))
    .expect("the sample ShardGroup");
    group.metadata.namespace = Some(NS.into());
    group.metadata.uid = Some(GROUP_UID.into());
    group.metadata.generation = Some(1);
    let mut pool: ConsumerPool = serde_yaml::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/samples/consumerpool.yaml"
    )))
    .expect("the sample ConsumerPool");
    pool.metadata.namespace = Some(NS.into());
    assert!(group.spec.lease_table.is_none());
    assert_eq!(group.spec.handoff.drain_timeout, "30s");
    (group, pool)
}

/// How a pod leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// A Deployment's pod, deleted: its consumer stops and exits 1 s after
    /// its revoke is published; the kubelet reports the container
    /// terminated 100 ms later and removes the pod 100 ms after that.
    Graceful,
    /// A StatefulSet's pod, deleted as above, its removal confirmed with the
    /// terminated status; the StatefulSet recreates it under its name at
    /// once, and the new pod never starts (no node has room): the name's
    /// shards sit with a pod that never ran.
    NeverStarted,
    /// kill -9 and a force deletion: gone at once, status `running`.
    Forced,
}

/// Four pods holding the sample's 16 queues (4 each), settled half an hour ago;
/// `consumer` pods are a Deployment's (generated names) unless `fixed`.
fn settled(fixed: bool) -> Observation {
    let (group, pool) = samples();
    let pods: Vec<PodInfo> = (0..4)
        .map(|i| PodInfo {
            node_name: Some(format!("node-{i}")),
            containers: Containers::Running,
            created: Some(now() - SignedDuration::from_hours(2)),
            generated_name: !fixed,
            ..pod_info(&format!("consumer-{i}"))
        })
        .collect();
    let mut obs = Observation {
        group,
        pool: Some(pool),
        pods,
        topology: topology(16),
        published: Published::Missing,
        leases: Default::default(),
        departed: Departures {
            // An operator that has watched the pods for a day.
            watched_since: Some(now() - SignedDuration::from_hours(24)),
            ..Default::default()
        },
        releases: Default::default(),
        loads: Default::default(),
        now: now() - SignedDuration::from_mins(30),
        pool_share: Default::default(),
        stateful_sets: Default::default(),
    };
    obs = settle(obs);
    obs.now = now();
    assert_eq!(document(&obs).pods["consumer-3"].active.len(), 4);
    obs
}

/// Milliseconds from the deletion of `consumer-3` until its queues are
/// active on other pods, with (`kubelet`) or without the kubelet's word.
fn move_time(flow: Flow, kubelet: bool) -> i64 {
    let mut obs = settled(flow == Flow::NeverStarted);
    let start = obs.now;
    let at = |ms: i64| start + SignedDuration::from_millis(ms);
    let mut events: Vec<i64> = vec![0];
    let mut next_reconcile: Option<Timestamp> = None;
    let mut exit_at: Option<i64> = None;
    let mut gone_at: Option<i64> = None;
    // t = 0: the deletion.
    match flow {
        Flow::Graceful | Flow::NeverStarted => {
            let pod = obs
                .pods
                .iter_mut()
                .find(|p| p.name == "consumer-3")
                .unwrap();
            pod.deletion_timestamp = Some(start);
            pod.deletion_grace_seconds = Some(30);
        }
        Flow::Forced => {
            depart(&mut obs, start, Some(Containers::Running));
        }
    }
    for tick in 0..2_000 {
        let ms = tick * 100;
        obs.now = at(ms);
        // The kubelet's side of a graceful deletion.
        if exit_at == Some(ms) {
            // The consumer exited: the status says its container terminated.
            let pod = obs
                .pods
                .iter_mut()
                .find(|p| p.name == "consumer-3")
                .unwrap();
            pod.containers = Containers::Stopped;
            pod.ready = false;
            events.push(ms);
            // A StatefulSet's pod: the kubelet confirms the deletion and the
            // StatefulSet recreates the pod before the operator looks, so it
            // only ever sees the new pod (that never ran) and what the old
            // one's DELETED event said.
            gone_at = Some(if flow == Flow::NeverStarted {
                ms
            } else {
                ms + 100
            });
        }
        if gone_at == Some(ms) {
            let now = obs.now;
            depart(&mut obs, now, None);
            if flow == Flow::NeverStarted {
                obs.pods.push(PodInfo {
                    uid: "uid-consumer-3-recreated".into(),
                    ready: false,
                    ready_since: None,
                    node_name: None,
                    containers: Containers::NeverRan,
                    created: Some(obs.now),
                    annotation: None,
                    generated_name: false,
                    ..pod_info("consumer-3")
                });
                obs.pods.sort_by(|a, b| a.name.cmp(&b.name));
            }
            events.push(ms);
        }
        let woken = events.iter().any(|e| e + 100 == ms);
        let due = next_reconcile.is_some_and(|t| obs.now >= t);
        if !(woken || due) {
            continue;
        }
        // The operator's view: before, no container status and no memory.
        let mut seen = obs.clone();
        if !kubelet {
            for pod in &mut seen.pods {
                pod.containers = Containers::Running;
            }
            seen.departed = Departures::default();
        }
        let decision = plan(&seen);
        let revoked_before = revoking_on(&obs, "consumer-3");
        obs = settle_with(obs, &decision);
        next_reconcile = Some(obs.now + decision.requeue_after);
        if decision.document_write.is_some() || !decision.annotation_writes.is_empty() {
            // The watches deliver the operator's own writes: another reconcile.
            events.push(ms);
        }
        if revoked_before == 0 && revoking_on(&obs, "consumer-3") > 0 && exit_at.is_none() {
            // The consumer sees its revoke, stops, checkpoints and exits.
            if flow != Flow::Forced {
                exit_at = Some(ms + 1_000);
            }
        }
        let moved = document(&obs)
            .shards
            .values()
            .all(|r| r.owner.as_deref() != Some("consumer-3") && r.state == ShardPhase::Active);
        if moved {
            return ms;
        }
    }
    panic!("{flow:?}: consumer-3's queues never moved");
}

/// Pod `consumer-3` leaves the API at `at`; the pod watch remembers its
/// final status (`containers`, or what the pod showed last when `None`).
fn depart(obs: &mut Observation, at: Timestamp, containers: Option<Containers>) {
    let i = obs
        .pods
        .iter()
        .position(|p| p.name == "consumer-3")
        .unwrap();
    let pod = obs.pods.remove(i);
    obs.departed.pods.insert(
        pod.name.clone(),
        vec![Departure {
            uid: pod.uid.clone(),
            at,
            containers: containers.unwrap_or(pod.containers),
            scheduled: true,
            created: pod.created,
            generated_name: pod.generated_name,
        }],
    );
}

fn revoking_on(obs: &Observation, pod: &str) -> usize {
    document(obs)
        .shards
        .values()
        .filter(|r| r.state == ShardPhase::Revoking && r.owner.as_deref() == Some(pod))
        .count()
}

/// Applies `decision` as the API server would (document, annotations,
/// status).
fn settle_with(mut obs: Observation, decision: &shardring_core::plan::Decision) -> Observation {
    if let Some(doc) = decision.document_write.clone().map(|w| w.document) {
        obs.published = Published::from(doc);
    }
    for write in &decision.annotation_writes {
        if let Some(pod) = obs.pods.iter_mut().find(|p| p.name == write.pod) {
            pod.annotation = write.view.as_ref().map(|v| v.to_annotation());
        }
    }
    obs.group.status = Some(decision.status.clone().into_status());
    obs
}

#[test]
fn a_deleted_pods_queues_move_on_the_kubelets_word_with_the_sample_settings() {
    println!("move time of consumer-3's 4 queues after its deletion (sample settings):");
    println!("  {:<50} {:>9} {:>9}", "", "before", "after");
    let mut times = Vec::new();
    for (flow, what) in [
        (
            Flow::Graceful,
            "Deployment pod deleted (consumer exits at 1.1 s)",
        ),
        (
            Flow::NeverStarted,
            "StatefulSet pod deleted, recreated, never started",
        ),
        (Flow::Forced, "kill -9 + force deletion"),
    ] {
        let before = move_time(flow, false);
        let after = move_time(flow, true);
        println!(
            "  {what:<50} {:>7.1} s {:>7.1} s",
            before as f64 / 1000.0,
            after as f64 / 1000.0
        );
        times.push((flow, before, after));
    }
    for (flow, before, after) in times {
        // Before: the drain timeout (30 s) from the revoke, or from the
        // recreated pod's annotation showing it, whatever happened.
        assert!((30_000..32_000).contains(&before), "{flow:?}: {before} ms");
        match flow {
            // After: a reconcile after the kubelet's report (1.2 s after the
            // deletion at most), not the drain timeout.
            Flow::Graceful | Flow::NeverStarted => {
                assert!(after <= 1_500, "{flow:?}: {after} ms")
            }
            // A force deletion still waits.
            Flow::Forced => assert_eq!(after, before, "{flow:?}"),
        }
    }
}
