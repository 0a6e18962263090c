//! What the admission policy (`shardring-operator-writes`) costs on the
//! operator's write path: the operator's ServiceAccount (a token of it, the
//! install's RBAC) annotates every pod of a namespace with a view-sized
//! `assignment.shardring.io/` annotation, as a first publish does
//! ([`populate::annotate_every_pod`]), once with
//! the policy's binding removed and once with it in force, in alternating
//! order over the runs, on the same server in the same run. Reported: the
//! median time of each and their ratio.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Config};
use serde_json::json;
use shardring_devkit::access;

use super::populate;
use super::server::Server;

const NAMESPACE: &str = "bench-policy";

/// The two timings of one run.
pub struct PolicyRow {
    pub pods: usize,
    pub without: Duration,
    pub with: Duration,
}

/// Annotates `pods` pods `runs` times each way; one row per run.
pub async fn run(server: &Server, pods: usize, runs: usize) -> Vec<PolicyRow> {
    let install = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/install.yaml"),
    )
    .expect("deploy/install.yaml");
    access::apply_access(&server.client, &install, "shardring-bench")
        .await
        .expect("the install's RBAC and policy");
    populate::remove_namespaces(server, "policy").await;
    populate::create(&server.client, &populate::namespace(NAMESPACE, "policy")).await;
    let names: Vec<String> = (0..pods).map(|i| format!("p-{i}")).collect();
    populate::ready_pods(server, NAMESPACE, &names, "consumer").await;
    let token = access::operator_token(&server.client, None)
        .await
        .expect("a token of the operator's ServiceAccount");
    let config = Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&server.kubeconfig).expect("the kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("the kubeconfig's config");
    let operator = Client::try_from(access::with_token(config, &token)).expect("a client");
    let view = json!({"epoch": 1, "active": (0..4).map(|i| format!("g-{i}")).collect::<Vec<_>>()})
        .to_string();
    let mut rows = Vec::new();
    for n in 0..runs {
        let mut timings = [Duration::ZERO; 2];
        // Alternate which goes first, so neither always meets a warmer server.
        let order = if n % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for policy in order {
            set_policy(server, &install, &operator, policy).await;
            let key = format!("assignment.shardring.io/bench-{n}-{policy}");
            timings[usize::from(policy)] = annotate(&operator, &names, &key, &view).await;
        }
        rows.push(PolicyRow {
            pods,
            without: timings[0],
            with: timings[1],
        });
    }
    set_policy(server, &install, &operator, true).await;
    populate::remove_namespaces(server, "policy").await;
    rows
}

/// Puts the binding in force (or removes it) and waits until the API server
/// acts on it: the operator's write of another annotation is denied (or
/// allowed).
async fn set_policy(server: &Server, install: &str, operator: &Client, on: bool) {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(server.client.clone());
    if on {
        access::apply_access(&server.client, install, "shardring-bench")
            .await
            .expect("the binding applied");
    } else {
        let _ = bindings
            .delete(access::POLICY_BINDING, &DeleteParams::default())
            .await;
    }
    let pods: Api<Pod> = Api::namespaced(operator.clone(), NAMESPACE);
    let started = Instant::now();
    for attempt in 0u64.. {
        // A new value each time: a write that changes nothing is allowed.
        let probe =
            json!({"metadata": {"annotations": {"bench.shardring.io/probe": attempt.to_string()}}});
        let denied = pods
            .patch("p-0", &PatchParams::default(), &Patch::Merge(&probe))
            .await
            .is_err();
        if denied == on {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the policy binding did not take effect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The time until every pod's annotation `key` was written.
async fn annotate(operator: &Client, names: &[String], key: &str, view: &str) -> Duration {
    let api: Api<Pod> = Api::namespaced(operator.clone(), NAMESPACE);
    let patch = json!({"metadata": {"annotations": {key: view}}});
    let started = Instant::now();
    populate::annotate_every_pod(&api, names, &patch).await;
    started.elapsed()
}
