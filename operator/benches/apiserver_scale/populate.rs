//! What the bench puts on the API server, through the API as any client
//! would (in bulk on the mock, where the setup is not what is measured):
//! the CRDs (waiting until they are Established), namespaces, pools,
//! groups, and consumer pods made Ready the way a kubelet does it, by a
//! status write after the create. On a real API server the pods are never
//! scheduled (see [`fixtures::gated_pod`]).

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::Value;
use shardring::crds::ShardGroup;
use shardring_devkit::fixtures;

use crate::server::Server;

/// The label of the namespaces the bench creates, so a later run finds and
/// removes what an interrupted one left.
pub const BENCH_LABEL: &str = "shardring.io/bench";
/// Requests in flight while populating.
const SETUP_CONCURRENCY: usize = 32;

/// Installs the shardring CRDs and waits until they are Established.
pub async fn install_crds(server: &Server) {
    if let Some(mock) = &server.mock {
        mock.create_many(fixtures::crds());
        return;
    }
    let api: Api<CustomResourceDefinition> = Api::all(server.client.clone());
    for crd in shardring_crds::crd::crds() {
        api.patch(
            &crd.name_any(),
            &PatchParams::apply("shardring-bench").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("apply a shardring CRD");
    }
    let started = Instant::now();
    for crd in shardring_crds::crd::crds() {
        loop {
            let stored = api.get(&crd.name_any()).await.expect("read a CRD back");
            let established = stored.status.and_then(|s| s.conditions).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "CRDs not Established after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Creates `objects` (fixture JSON, each with its namespace) through the
/// API, `SETUP_CONCURRENCY` at a time.
pub async fn create_all(client: &Client, objects: Vec<Value>) {
    futures::stream::iter(objects)
        .for_each_concurrent(SETUP_CONCURRENCY, |object| async move {
            create(client, &object).await;
        })
        .await;
}

/// Creates one fixture object through the API.
pub async fn create(client: &Client, object: &Value) {
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("a fixture object");
    let types = object
        .types
        .clone()
        .expect("a fixture has apiVersion and kind");
    let gvk = GroupVersionKind::try_from(&types).expect("a fixture's apiVersion");
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = match object.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {} {}: {e}", gvk.kind, object.name_any()));
}

/// A namespace labelled as the bench's, of `kind` (`churn`, `startup`).
pub fn namespace(name: &str, kind: &str) -> Value {
    let mut ns = fixtures::namespace(name);
    ns["metadata"]["labels"] = serde_json::json!({ BENCH_LABEL: kind });
    ns
}

/// Now, as a condition's `lastTransitionTime`.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Puts Ready pods `names` labelled `app=<app>` in `namespace`: on the mock
/// in bulk, on a real API server a create and a status write each.
pub async fn ready_pods(server: &Server, namespace: &str, names: &[String], app: &str) {
    let since = now_rfc3339();
    if let Some(mock) = &server.mock {
        mock.create_many(
            names
                .iter()
                .map(|n| fixtures::ready_pod(namespace, n, app, &since))
                .collect(),
        );
        return;
    }
    default_service_account(&server.client, namespace).await;
    let api: Api<Pod> = Api::namespaced(server.client.clone(), namespace);
    futures::stream::iter(names)
        .for_each_concurrent(SETUP_CONCURRENCY, |name| {
            let api = api.clone();
            let since = since.clone();
            async move {
                create(&server.client, &fixtures::gated_pod(namespace, name, app)).await;
                mark_ready(&api, name, &since).await;
            }
        })
        .await;
}

/// Creates the `default` ServiceAccount of `namespace` unless the
/// controller-manager already did: the API server admits no pod without it,
/// and on a loaded machine the controller-manager lags behind hundreds of
/// new namespaces.
async fn default_service_account(client: &Client, namespace: &str) {
    let account: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "default", "namespace": namespace}
    }))
    .expect("a ServiceAccount");
    match Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &account)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("create the default ServiceAccount of {namespace}: {error}"),
    }
}

/// The pod of a join, not yet Ready ([`mark_ready`] makes it so).
pub async fn create_pod(client: &Client, namespace: &str, name: &str, app: &str) {
    create(client, &fixtures::gated_pod(namespace, name, app)).await;
}

/// Marks pod `name` Ready since `since`, as its kubelet would.
pub async fn mark_ready(api: &Api<Pod>, name: &str, since: &str) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&fixtures::ready_status(since)),
    )
    .await
    .unwrap_or_else(|e| panic!("mark pod {name} Ready: {e}"));
}

/// Deletes pod `name` at once (grace period 0), as a lost node's pod is.
pub async fn force_delete(api: &Api<Pod>, name: &str) {
    api.delete(name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|e| panic!("delete pod {name}: {e}"));
}

/// Deletes every namespace the bench labelled `kind` and waits until they
/// are gone (their pods with them), so a run starts on a quiet server.
pub async fn remove_namespaces(server: &Server, kind: &str) {
    if server.mock.is_some() {
        // Each run on the mock has namespaces of its own, in memory.
        return;
    }
    let api: Api<Namespace> = Api::all(server.client.clone());
    let selector = ListParams::default().labels(&format!("{BENCH_LABEL}={kind}"));
    let names: Vec<String> = api
        .list_metadata(&selector)
        .await
        .expect("list the bench's namespaces")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    if names.is_empty() {
        return;
    }
    let started = Instant::now();
    eprintln!(
        "bench: removing {} namespace(s) of earlier runs",
        names.len()
    );
    futures::stream::iter(&names)
        .for_each_concurrent(SETUP_CONCURRENCY, |name| {
            let api = api.clone();
            async move {
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(e) => panic!("delete namespace {name}: {e}"),
                }
            }
        })
        .await;
    // The operator is stopped by now: its cleanup finalizer would keep the
    // groups, and so their namespaces, for good.
    let groups: Api<ShardGroup> = Api::all(server.client.clone());
    let held: Vec<_> = groups
        .list_metadata(&ListParams::default())
        .await
        .expect("list groups")
        .items
        .into_iter()
        .filter(|g| {
            names.contains(&g.namespace().unwrap_or_default()) && !g.finalizers().is_empty()
        })
        .collect();
    futures::stream::iter(&held)
        .for_each_concurrent(SETUP_CONCURRENCY, |group| async move {
            let patch = serde_json::json!({"metadata": {"finalizers": null}});
            Api::<ShardGroup>::namespaced(
                server.client.clone(),
                &group.namespace().unwrap_or_default(),
            )
            .patch(
                &group.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .expect("remove a group's finalizer");
        })
        .await;
    loop {
        let left = api
            .list_metadata(&selector)
            .await
            .expect("list namespaces")
            .items
            .len();
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "{left} namespaces still terminating after 30 min"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("bench: removed in {:.1} s", started.elapsed().as_secs_f64());
}

/// Merge-patches `patch` onto every pod of `names` through `api`, the
/// operator's default `--write-concurrency` at a time, as a first publish
/// writes annotations; returns when every request has been answered.
pub async fn annotate_every_pod(api: &Api<Pod>, names: &[String], patch: &Value) {
    futures::stream::iter(names)
        .for_each_concurrent(
            shardring::controller::apply::DEFAULT_WRITE_CONCURRENCY,
            |name| async move {
                api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .unwrap_or_else(|e| panic!("the annotation of pod {name}: {e}"));
            },
        )
        .await;
}

/// Event `k` of one side of a churn run: a join creates pod `<prefix>-k`
/// labelled `app`, waits for `settled` (the namespace quiet, the groups
/// caught up) and marks it Ready; a leave deletes the pod of the join
/// before it. Returns when the event's write began (the Ready write or the
/// deletion).
#[allow(clippy::too_many_arguments)]
pub async fn pod_event(
    client: &Client,
    pods: &Api<Pod>,
    ns: &str,
    prefix: &str,
    k: usize,
    join: bool,
    app: &str,
    settled: impl AsyncFnOnce(),
) -> Instant {
    if join {
        let name = format!("{prefix}-{k}");
        create_pod(client, ns, &name, app).await;
        settled().await;
        let t0 = Instant::now();
        mark_ready(pods, &name, &now_rfc3339()).await;
        t0
    } else {
        let t0 = Instant::now();
        force_delete(pods, &format!("{prefix}-{}", k - 1)).await;
        t0
    }
}
