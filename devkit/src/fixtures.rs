//! Objects the tests and benchmarks put on a mock API server, as JSON the
//! API server would store: namespaces, the shardring CRDs (established on
//! create), ConsumerPools, static ShardGroups and Ready consumer pods with a
//! running container, in bulk for scale runs.

use serde_json::{Value, json};

use crate::apiserver::MockApiServer;

/// The label every fixture pod carries and every fixture pool selects.
pub const APP_LABEL: &str = "app";

/// A namespace.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// The shardring CRDs as the API server stores them; the mock marks a
/// created CRD `Established` and starts serving its kind.
pub fn crds() -> Vec<Value> {
    shardring_crds::crd::crds()
        .into_iter()
        .map(|crd| {
            let mut value = serde_json::to_value(crd).expect("a CRD serialises");
            value["apiVersion"] = json!("apiextensions.k8s.io/v1");
            value["kind"] = json!("CustomResourceDefinition");
            value
        })
        .collect()
}

/// A ConsumerPool `name` selecting the pods labelled `app=<app>`, eligible
/// as soon as they are Ready.
pub fn pool(namespace: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "shardring.io/v1alpha1",
        "kind": "ConsumerPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {APP_LABEL: app}}, "minReadySeconds": 0},
    })
}

/// A ShardGroup `name` over `shards` static partitions `<name>-{index}`,
/// consumed by pool `pool`, with a short drain timeout and no rebalance delay.
pub fn static_group(namespace: &str, name: &str, pool: &str, shards: u32) -> Value {
    json!({
        "apiVersion": "shardring.io/v1alpha1",
        "kind": "ShardGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "poolRef": {"name": pool},
            "source": {"static": {"count": shards, "nameTemplate": format!("{name}-{{index}}")}},
            "handoff": {"drainTimeout": "2s"},
            "rebalance": {"delay": "0s"},
        },
    })
}

/// A pod `name` labelled `app=<app>`, bound to node `node-0`, Running with a
/// running container and `Ready=True` since `ready_since` (RFC 3339), as a
/// kubelet reports it.
pub fn ready_pod(namespace: &str, name: &str, app: &str, ready_since: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {APP_LABEL: app}},
        "spec": {
            "nodeName": "node-0",
            "containers": [{"name": "consumer", "image": "registry.example/consumer:1"}],
        },
        "status": ready_status(ready_since)["status"],
    })
}

/// A pod `name` labelled `app=<app>` that no scheduler binds (a scheduling
/// gate), for a real API server: there a pod bound to a node that does not
/// exist is deleted by the pod garbage collector. Mark it Ready with
/// [`ready_status`] through the status subresource, as a kubelet would.
pub fn gated_pod(namespace: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {APP_LABEL: app}},
        "spec": {
            "schedulingGates": [{"name": "shardring.io/never-schedule"}],
            "containers": [{"name": "consumer", "image": "registry.example/consumer:1"}],
        },
    })
}

/// The status a kubelet reports for a pod whose container runs and that is
/// `Ready=True` since `ready_since` (RFC 3339): the body of the status patch
/// that makes a [`gated_pod`] eligible.
pub fn ready_status(ready_since: &str) -> Value {
    json!({"status": {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": ready_since},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": ready_since},
        ],
        "containerStatuses": [{
            "name": "consumer", "ready": true, "restartCount": 0,
            "image": "registry.example/consumer:1", "imageID": "",
            "state": {"running": {"startedAt": ready_since}},
        }],
    }})
}

/// Puts `groups` namespaces `<prefix>-<i>` on `server`, each with a pool
/// `p`, `pods` Ready pods `c-<j>` and a static ShardGroup `g` of `shards`
/// partitions (CRDs included), in bulk.
pub fn populate(server: &MockApiServer, prefix: &str, groups: usize, pods: usize, shards: u32) {
    server.create_many(crds());
    let since = "2026-01-01T00:00:00Z";
    let mut objects = Vec::with_capacity(groups * (pods + 3));
    for i in 0..groups {
        let ns = format!("{prefix}-{i}");
        objects.push(namespace(&ns));
        objects.push(pool(&ns, "p", "consumer"));
        objects.push(static_group(&ns, "g", "p", shards));
        for j in 0..pods {
            objects.push(ready_pod(&ns, &format!("c-{j}"), "consumer", since));
        }
    }
    server.create_many(objects);
}
