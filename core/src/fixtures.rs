//! Builders shared by the core's tests and the operator's controller tests
//! (behind the `fixtures` feature): ShardGroups, pools, pods and
//! observations with fixed names, uids and times, so assertions can be
//! exact, and [`settle`], which applies a decision as the API server would.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use shardring_crds::shard_group::StaticSource as StaticSpec;
use shardring_crds::{AssignmentDocument, ConsumerPool, FINALIZER, ShardGroup, fixtures};

use crate::observation::{Observation, PodInfo, Published, TopologyObservation};
use crate::plan::{Decision, plan};
use crate::topology::Topology;

/// Namespace of every fixture.
pub const NS: &str = "prod";
/// ShardGroup name.
pub const GROUP: &str = "orders";
/// Pool name.
pub const POOL: &str = "consumers";
/// Uid of the ShardGroup.
pub const GROUP_UID: &str = "0f9c8d1e-0000-4000-8000-000000000001";
/// Annotation key of the fixture group.
pub const KEY: &str = "assignment.shardring.io/orders";

/// A fixed "now".
pub fn now() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().unwrap()
}

/// A ShardGroup with a static source of `count` partitions `orders-{index}`.
pub fn group(count: u32) -> ShardGroup {
    let mut g = fixtures::static_group(NS, GROUP, POOL, count, "orders-{index}");
    g.metadata.uid = Some(GROUP_UID.into());
    g.metadata.resource_version = Some("100".into());
    g.metadata.finalizers = Some(vec![FINALIZER.into()]);
    g
}

/// The pool selecting `app=consumer`.
pub fn pool(min_ready_seconds: u32) -> ConsumerPool {
    fixtures::pool(NS, POOL, &[("app", "consumer")], min_ready_seconds)
}

/// A selected, ready pod (ready for an hour).
pub fn pod_info(name: &str) -> PodInfo {
    PodInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([("app".into(), "consumer".into())]),
        selected: true,
        ready: true,
        ready_since: Some(now() - jiff::SignedDuration::from_secs(3600)),
        ..Default::default()
    }
}

/// A Kubernetes pod as the (stripped) store holds it.
pub fn pod(name: &str, ready: bool, annotation: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(BTreeMap::from([("app".into(), "consumer".into())])),
            annotations: annotation.map(|a| BTreeMap::from([(KEY.to_owned(), a.to_owned())])),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(now() - jiff::SignedDuration::from_secs(3600))),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// The topology of a static source of `count` partitions.
pub fn topology(count: u32) -> TopologyObservation {
    let spec = StaticSpec {
        count,
        name_template: "orders-{index}".into(),
    };
    TopologyObservation {
        source: format!("static:{count}"),
        last_good: Some(std::sync::Arc::new(Topology::of_partitions(
            spec.partition_names(),
        ))),
        read_at: Some(now()),
        error: None,
        ..Default::default()
    }
}

/// An observation of the fixture group with `count` shards over `pods`.
pub fn observation(count: u32, pods: Vec<PodInfo>) -> Observation {
    Observation {
        group: group(count),
        pool: Some(pool(0)),
        pods,
        topology: topology(count),
        published: Published::Missing,
        leases: Default::default(),
        departed: Default::default(),
        releases: Default::default(),
        loads: Default::default(),
        now: now(),
        pool_share: Default::default(),
        stateful_sets: Default::default(),
    }
}

/// Plans `obs` and applies the decision as the API server would: the
/// document, the annotations and the status become the new current state.
pub fn settle(obs: Observation) -> Observation {
    let decision = plan(&obs);
    apply(obs, decision)
}

/// `obs` after `decision` was applied as the API server would: its
/// document published (the decision's own, shared), the annotations
/// written, the status set.
pub fn apply(mut obs: Observation, decision: Decision) -> Observation {
    if let Some(write) = decision.document_write.clone() {
        obs.published = Published::from(write.document);
    }
    for write in &decision.annotation_writes {
        let pod = obs.pods.iter_mut().find(|p| p.name == write.pod).unwrap();
        pod.annotation = write
            .view
            .as_ref()
            .map(|v| serde_json::to_string(v).unwrap());
    }
    obs.group.status = Some(decision.status.into_status());
    obs
}

/// The published document of a settled observation.
pub fn document(obs: &Observation) -> &AssignmentDocument {
    obs.published.document().expect("a published document")
}

/// Pod names `consumer-0..n`.
pub fn pods(n: usize) -> Vec<PodInfo> {
    (0..n).map(|i| pod_info(&format!("consumer-{i}"))).collect()
}
