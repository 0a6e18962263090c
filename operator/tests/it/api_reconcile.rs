//! API-level tests of a whole reconcile (observe from reflector stores →
//! plan → apply) against a mocked API server: every request's method, path,
//! query (field manager, force) and body is recorded and asserted, and a
//! reconcile with nothing to change must send no request at all. The
//! document write is conditioned on the ConfigMap the reconcile observed: a
//! create (POST) when there was none, else an apply carrying its
//! resourceVersion; a 409 on either stops the reconcile before anything that
//! depends on the document.

use std::sync::Arc;
use std::time::Duration;

use http::Response;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::client::Body;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use shardring::controller::apply::document_config_map;
use shardring::controller::{
    CachedPod, Context, ControllerMetrics, FINALIZER, Stores, plan, reconcile,
};
use shardring::crds::{AssignmentDocument, ConsumerPool, PodView, ShardGroup};

use crate::controller_support::mock_api::{
    Requests, Seen, failure, json_response, recording_client,
};
use crate::controller_support::*;

/// How the mock API server answers ConfigMap writes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CmAnswer {
    /// Like the API server: the object written.
    Written,
    /// Every ConfigMap write gets a 500.
    Fail,
    /// 409 Conflict on an apply (the resourceVersion precondition failed)
    /// and 409 AlreadyExists on a create.
    Conflict,
    /// An apply answers with the other encoding's key still present (a key
    /// the create wrote, which the apply does not own).
    StaleKey,
}

/// Mock API server: records requests, answers like the API server would.
fn mock_client(group: ShardGroup) -> (Client, Requests) {
    mock_client_with(group, CmAnswer::Written)
}

/// Like [`mock_client`], answering ConfigMap writes as `cm`.
fn mock_client_with(group: ShardGroup, cm: CmAnswer) -> (Client, Requests) {
    recording_client("default", move |method, seen| {
        Some(respond(method, &seen.path, &seen.body, &group, cm))
    })
}

fn respond(
    method: &http::Method,
    path: &str,
    body: &Value,
    group: &ShardGroup,
    cm: CmAnswer,
) -> Response<Body> {
    let is_cm = path.contains("/configmaps");
    if is_cm && cm == CmAnswer::Fail {
        return failure(500, "InternalError", "etcd timeout");
    }
    if is_cm && cm == CmAnswer::Conflict {
        return if method == http::Method::POST {
            failure(
                409,
                "AlreadyExists",
                "configmaps \"orders-assignment\" already exists",
            )
        } else {
            failure(
                409,
                "Conflict",
                "Operation cannot be fulfilled on configmaps \"orders-assignment\": the object has been modified; please apply your changes to the latest version and try again",
            )
        };
    }
    if is_cm && cm == CmAnswer::StaleKey && is_apply(method, body) {
        let mut written = body.clone();
        written["metadata"]["resourceVersion"] = json!("43");
        written["binaryData"] = json!({"assignment.json.gz": "H4sIAAAAAAAA/wMAAAAAAAAAAAA="});
        return json_response(200, &written);
    }
    let json = if path.contains("/pods/missing") {
        return failure(404, "NotFound", "pods \"missing\" not found");
    } else if is_cm || path.ends_with("/events") {
        body.clone()
    } else if let Some(name) = path.split("/pods/").nth(1) {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}})
    } else if path.contains("/shardgroups/") {
        let mut g = group.clone();
        if method == http::Method::PATCH && body.is_array() {
            g.metadata.finalizers = None;
        }
        serde_json::to_value(&g).unwrap()
    } else {
        panic!("unexpected request {method} {path}")
    };
    json_response(200, &json)
}

/// Whether a ConfigMap request body is the apply (it carries `kind`; the
/// merge patch removing a stale key does not).
fn is_apply(method: &http::Method, body: &Value) -> bool {
    method == http::Method::PATCH && body.get("kind").is_some()
}

/// Reflector stores filled as a synced watch would fill them.
struct World {
    stores: Stores,
    pods: Writer<CachedPod>,
    config_maps: Writer<ConfigMap>,
}

fn world(pool: Option<ConsumerPool>, pods: &[Pod]) -> World {
    let (pool_reader, mut pool_writer) = reflector::store::<DeserializeGuard<ConsumerPool>>();
    if let Some(pool) = pool {
        pool_writer.apply_watcher_event(&watcher::Event::Apply(DeserializeGuard(Ok(pool))));
    }
    let (pod_reader, mut pod_writer) = reflector::store::<CachedPod>();
    for pod in pods {
        pod_writer.apply_watcher_event(&watcher::Event::Apply(CachedPod::from(pod)));
    }
    let (node_reader, _node_writer) = reflector::store::<PartialObjectMeta<Node>>();
    let (cm_reader, cm_writer) = reflector::store::<ConfigMap>();
    World {
        stores: Stores {
            pools: pool_reader,
            pods: pod_reader,
            nodes: node_reader,
            config_maps: cm_reader,
            departed: Default::default(),
            documents: Default::default(),
        },
        pods: pod_writer,
        config_maps: cm_writer,
    }
}

fn context(client: Client, stores: Stores) -> Arc<Context> {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "shardring".into(),
            instance: Some("test".into()),
        },
    );
    Arc::new(
        Context::new(client, stores, ControllerMetrics::default())
            .with_recorder(recorder)
            .with_clock(Arc::new(now)),
    )
}

/// Runs one reconcile of `group` and returns every request it sent.
async fn reconcile_once(group: &ShardGroup, stores: &Stores) -> Vec<Seen> {
    let (result, seen) = reconcile_answering(group, stores, CmAnswer::Written).await;
    result.expect("reconcile succeeded");
    seen
}

/// Runs one reconcile of `group` against a server answering ConfigMap
/// writes as `cm`; returns its result and every request it sent.
async fn reconcile_answering(
    group: &ShardGroup,
    stores: &Stores,
    cm: CmAnswer,
) -> (Result<(), shardring::controller::Error>, Vec<Seen>) {
    let (client, seen) = mock_client_with(group.clone(), cm);
    let ctx = context(client, stores.clone());
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(DeserializeGuard(Ok(group.clone()))), ctx),
    )
    .await
    .expect("reconcile finished")
    .map(|_action| ());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let seen = seen.lock().unwrap().clone();
    (result, seen)
}

/// Brings the stores and group to what the API server holds after the
/// controller has published for them (the plan applied without a server).
async fn settle(group: &mut ShardGroup, world: &mut World) {
    let ctx = context(mock_client(group.clone()).0, world.stores.clone());
    let topology = ctx.sources.read(group, now()).await;
    let decision = plan(&world.stores.observe(group, topology, now()));
    if let Some(doc) = &decision.document_write {
        let mut cm = document_config_map(group, doc).unwrap();
        cm.metadata.resource_version = Some(SETTLED_VERSION.into());
        world
            .config_maps
            .apply_watcher_event(&watcher::Event::Apply(cm));
    }
    for write in &decision.annotation_writes {
        let mut pod = (*world
            .stores
            .pods
            .state()
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(&write.pod))
            .unwrap())
        .clone();
        let annotations = pod.metadata.annotations.get_or_insert_default();
        match &write.view {
            Some(view) => annotations.insert(KEY.into(), serde_json::to_string(view).unwrap()),
            None => annotations.remove(KEY),
        };
        world.pods.apply_watcher_event(&watcher::Event::Apply(pod));
    }
    group.status = Some(decision.status);
}

fn writes(seen: &[Seen]) -> Vec<&Seen> {
    seen.iter().filter(|s| s.method != "GET").collect()
}

fn published(seen: &Seen) -> AssignmentDocument {
    serde_json::from_str(seen.body["data"]["assignment.json"].as_str().unwrap()).unwrap()
}

fn three_pods() -> Vec<Pod> {
    (0..3)
        .map(|i| pod(&format!("consumer-{i}"), true, None))
        .collect()
}

const CM_PATH: &str = "/api/v1/namespaces/prod/configmaps/orders-assignment";
const CMS_PATH: &str = "/api/v1/namespaces/prod/configmaps";
/// The resourceVersion of the ConfigMap [`settle`] leaves in the store.
const SETTLED_VERSION: &str = "42";
const STATUS_PATH: &str = "/apis/shardring.io/v1alpha1/namespaces/prod/shardgroups/orders/status";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/prod/events";

/// An apply of the document conditioned on the observed `version`.
fn assert_configmap_apply(s: &Seen, version: &str) -> AssignmentDocument {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("PATCH", CM_PATH));
    assert_eq!(s.query, "fieldManager=shardring&force=true");
    assert_eq!(s.content_type, "application/apply-patch+yaml");
    assert_eq!(
        s.body["metadata"]["resourceVersion"], version,
        "the apply carries the observed resourceVersion as its precondition"
    );
    assert_configmap_body(s)
}

/// A create of the document (no ConfigMap was observed).
fn assert_configmap_create(s: &Seen) -> AssignmentDocument {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", CMS_PATH));
    assert_eq!(s.query, "fieldManager=shardring");
    assert_eq!(s.content_type, "application/json");
    assert_eq!(s.body["metadata"]["name"], "orders-assignment");
    assert!(s.body["metadata"].get("resourceVersion").is_none());
    assert_configmap_body(s)
}

fn assert_configmap_body(s: &Seen) -> AssignmentDocument {
    assert_eq!(s.body["apiVersion"], "v1");
    assert_eq!(s.body["kind"], "ConfigMap");
    assert_eq!(
        s.body["metadata"]["labels"],
        json!({"app.kubernetes.io/managed-by": "shardring", "shardring.io/shard-group": "orders"})
    );
    assert_eq!(
        s.body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup", "name": "orders", "uid": GROUP_UID, "controller": true, "blockOwnerDeletion": true}])
    );
    published(s)
}

fn assert_annotation_patch(s: &Seen, pod: &str) -> Option<PodView> {
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        (
            "PATCH",
            format!("/api/v1/namespaces/prod/pods/{pod}").as_str()
        )
    );
    assert_eq!(s.query, "fieldManager=shardring");
    assert_eq!(s.content_type, "application/merge-patch+json");
    let metadata = s.body["metadata"].as_object().unwrap();
    assert_eq!(
        metadata.keys().collect::<Vec<_>>(),
        ["annotations", "uid"],
        "only the annotation and the uid precondition"
    );
    assert_eq!(metadata["uid"], format!("uid-{pod}"));
    let annotations = metadata["annotations"].as_object().unwrap();
    assert_eq!(annotations.len(), 1);
    annotations[KEY]
        .as_str()
        .map(|v| serde_json::from_str(v).unwrap())
}

fn assert_status_apply(s: &Seen) -> Value {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("PATCH", STATUS_PATH));
    assert_eq!(s.query, "fieldManager=shardring&force=true");
    assert_eq!(s.content_type, "application/apply-patch+yaml");
    assert_eq!(s.body["apiVersion"], "shardring.io/v1alpha1");
    assert_eq!(s.body["kind"], "ShardGroup");
    s.body["status"].clone()
}

fn assert_event(s: &Seen, reason: &str) {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", EVENTS_PATH));
    assert_eq!(s.body["reason"], reason);
    assert_eq!(s.body["regarding"]["name"], "orders");
}

#[tokio::test]
async fn first_publish_creates_the_configmap_then_annotations_then_status() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let seen = reconcile_once(&group, &world.stores).await;
    assert_eq!(seen.len(), 1 + 3 + 1 + 1, "{seen:#?}");
    let doc = assert_configmap_create(&seen[0]);
    assert_eq!((doc.epoch, doc.shards.len(), doc.pods.len()), (1, 6, 3));
    for (i, s) in seen[1..4].iter().enumerate() {
        let pod = format!("consumer-{i}");
        let view = assert_annotation_patch(s, &pod).expect("a view");
        assert_eq!(view.epoch, 1);
        assert_eq!(view.active, doc.pods[&pod].active);
        assert_eq!(view.active.len(), 2);
    }
    let status = assert_status_apply(&seen[4]);
    assert_eq!(status["epoch"], 1);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["load"], "2/2");
    assert_eq!(status["shards"]["total"], 6);
    assert_eq!(status["pods"], json!({"selected": 3, "eligible": 3}));
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("Published"))
    );
    assert_eq!(ready["lastTransitionTime"], "2026-11-21T12:00:00Z");
    assert_event(&seen[5], "Published");
}

#[tokio::test]
async fn a_reconcile_with_nothing_to_change_sends_no_request() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let seen = reconcile_once(&group, &world.stores).await;
    assert!(seen.is_empty(), "no-op reconcile sent {seen:#?}");
}

#[tokio::test]
async fn a_joining_pod_writes_the_configmap_and_only_the_changed_pods() {
    let mut group = group(6);
    group.spec.rebalance.delay = "0s".into();
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    world
        .pods
        .apply_watcher_event(&watcher::Event::Apply(CachedPod::from(&pod(
            "consumer-3",
            true,
            None,
        ))));
    let seen = reconcile_once(&group, &world.stores).await;
    let doc = assert_configmap_apply(&seen[0], SETTLED_VERSION);
    assert_eq!(doc.epoch, 2);
    // First phase of the moves: revoked from the donors, not yet on the new pod.
    assert!(!doc.pods.contains_key("consumer-3"));
    let moving: usize = doc.pods.values().map(|p| p.revoking.len()).sum();
    assert!(moving >= 1);
    let pod_writes: Vec<_> = seen.iter().filter(|s| s.path.contains("/pods/")).collect();
    assert_eq!(pod_writes.len(), moving, "only the donors: {pod_writes:#?}");
    for s in &pod_writes {
        let pod = s.path.rsplit('/').next().unwrap();
        let view = assert_annotation_patch(s, pod).unwrap();
        assert_eq!(
            (view.epoch, &view.active, &view.revoking),
            (2, &doc.pods[pod].active, &doc.pods[pod].revoking)
        );
    }
    assert_eq!(assert_status_apply(&seen[seen.len() - 2])["epoch"], 2);
    assert_event(&seen[seen.len() - 1], "Published");
    assert_eq!(writes(&seen).len(), seen.len());
}

#[tokio::test]
async fn a_pod_leaving_the_pool_loses_its_annotation() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let mut leaving = (*world
        .stores
        .pods
        .state()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("consumer-1"))
        .unwrap())
    .clone();
    leaving.metadata.labels = Some([("app".to_owned(), "other".to_owned())].into());
    world
        .pods
        .apply_watcher_event(&watcher::Event::Apply(leaving));
    let seen = reconcile_once(&group, &world.stores).await;
    let doc = assert_configmap_apply(&seen[0], SETTLED_VERSION);
    assert_eq!(doc.epoch, 2);
    // It keeps its annotation until it gave its two shards back: they are
    // revoked from it first (two-phase handoff), nobody else has them yet.
    assert!(doc.pods["consumer-1"].active.is_empty());
    assert_eq!(doc.pods["consumer-1"].revoking.len(), 2);
    let patch = seen
        .iter()
        .find(|s| s.path.ends_with("/pods/consumer-1"))
        .expect("revoke patch");
    let view = assert_annotation_patch(patch, "consumer-1").unwrap();
    assert_eq!(view.revoking, doc.pods["consumer-1"].revoking);
    assert_eq!(seen.iter().filter(|s| s.path.contains("/pods/")).count(), 1);
}

#[tokio::test]
async fn a_missing_pool_only_writes_status_and_a_warning() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let orphaned = Stores {
        pools: reflector::store().0,
        ..world.stores.clone()
    };
    let seen = reconcile_once(&group, &orphaned).await;
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let status = assert_status_apply(&seen[0]);
    assert_eq!(status["epoch"], 1, "the assignment stays");
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PoolNotFound"))
    );
    assert_event(&seen[1], "PoolNotFound");
    assert_eq!(seen[1].body["type"], "Warning");
}

#[tokio::test]
async fn deleting_a_shardgroup_removes_its_annotations_then_the_finalizer() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    // A pod outside the pool without the annotation is left alone.
    world
        .pods
        .apply_watcher_event(&watcher::Event::Apply(CachedPod::from(&pod(
            "bystander",
            true,
            None,
        ))));
    group.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let seen = reconcile_once(&group, &world.stores).await;
    assert_eq!(seen.len(), 4, "{seen:#?}");
    for (i, s) in seen[..3].iter().enumerate() {
        let pod = format!("consumer-{i}");
        assert_eq!(assert_annotation_patch(s, &pod), None);
    }
    let last = &seen[3];
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        (
            "PATCH",
            "/apis/shardring.io/v1alpha1/namespaces/prod/shardgroups/orders"
        )
    );
    assert_eq!(last.content_type, "application/json-patch+json");
    assert_eq!(
        last.body,
        json!([{"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER}, {"op": "remove", "path": "/metadata/finalizers/0"}])
    );
}

#[tokio::test]
async fn a_new_shardgroup_first_gets_the_finalizer() {
    let mut group = group(6);
    group.metadata.finalizers = None;
    let world = world(Some(pool(0)), &three_pods());
    let seen = reconcile_once(&group, &world.stores).await;
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(
        seen[0].path,
        "/apis/shardring.io/v1alpha1/namespaces/prod/shardgroups/orders"
    );
    assert_eq!(seen[0].content_type, "application/json-patch+json");
    let ops = seen[0].body.as_array().unwrap();
    assert_eq!(ops.last().unwrap()["value"], json!([FINALIZER]));
}

#[tokio::test]
async fn a_pod_deleted_before_its_patch_is_skipped() {
    let group = group(4);
    let world = world(
        Some(pool(0)),
        &[pod("consumer-0", true, None), pod("missing", true, None)],
    );
    let seen = reconcile_once(&group, &world.stores).await;
    assert!(seen.iter().any(|s| s.path.ends_with("/pods/missing")));
    assert!(
        seen.iter().any(|s| s.path == STATUS_PATH),
        "the reconcile went on: {seen:#?}"
    );
}

#[tokio::test]
async fn a_standby_replica_never_writes() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let (client, seen) = mock_client(group.clone());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(
        Context::new(client, world.stores.clone(), ControllerMetrics::default()).with_leader(rx),
    );
    reconcile(Arc::new(DeserializeGuard(Ok(group))), ctx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn time_passing_alone_writes_nothing() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let (client, seen) = mock_client(group.clone());
    let later = now() + jiff::SignedDuration::from_secs(3600);
    let ctx = Arc::new(
        Context::new(client, world.stores.clone(), ControllerMetrics::default())
            .with_clock(Arc::new(move || later)),
    );
    reconcile(Arc::new(DeserializeGuard(Ok(group))), ctx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.is_empty(),
        "an hour later with nothing changed: {seen:#?}"
    );
}

#[tokio::test]
async fn a_failed_write_is_retried_with_backoff_and_reported_once() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let (client, seen) = mock_client_with(group.clone(), CmAnswer::Fail);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "shardring".into(),
            instance: None,
        },
    );
    let ctx = Arc::new(
        Context::new(client, world.stores.clone(), ControllerMetrics::default())
            .with_recorder(recorder)
            .with_clock(Arc::new(now)),
    );
    let obj = Arc::new(DeserializeGuard(Ok(group)));
    let error = reconcile(obj.clone(), ctx.clone())
        .await
        .expect_err("the ConfigMap write fails");
    assert_eq!(error.metric_label(), "ConfigMapWrite");
    let first = shardring::controller::error_policy(obj.clone(), &error, ctx.clone());
    let second = shardring::controller::error_policy(obj.clone(), &error, ctx.clone());
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(2))
    );
    assert_eq!(
        second,
        kube::runtime::controller::Action::requeue(Duration::from_secs(4))
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let seen = seen.lock().unwrap().clone();
    // The failed apply stopped the reconcile: no annotation or status write.
    assert_eq!(
        seen.iter()
            .filter(|s| s.path.contains("/configmaps"))
            .count(),
        1
    );
    assert!(
        !seen
            .iter()
            .any(|s| s.path.contains("/pods/") || s.path == STATUS_PATH),
        "{seen:#?}"
    );
    let events: Vec<_> = seen.iter().filter(|s| s.path == EVENTS_PATH).collect();
    assert_eq!(events.len(), 1, "one Warning for the streak: {events:#?}");
    assert_eq!(events[0].body["type"], "Warning");
    assert_eq!(events[0].body["reason"], "ConfigMapWrite");
}

/// A settled group whose pool gains a pod: the next reconcile writes the
/// document (first phase of the moves) and the donors' annotations.
async fn settled_with_a_joining_pod() -> (ShardGroup, World) {
    let mut group = group(6);
    group.spec.rebalance.delay = "0s".into();
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    world
        .pods
        .apply_watcher_event(&watcher::Event::Apply(CachedPod::from(&pod(
            "consumer-3",
            true,
            None,
        ))));
    (group, world)
}

#[tokio::test]
async fn a_conflict_on_the_apply_stops_the_reconcile_before_anything_depending_on_it() {
    let (group, world) = settled_with_a_joining_pod().await;
    let (result, seen) = reconcile_answering(&group, &world.stores, CmAnswer::Conflict).await;
    let error = result.expect_err("the apply's precondition failed");
    assert_eq!(error.metric_label(), "ConfigMapConflict");
    let message = error.to_string();
    assert!(
        message.contains("orders-assignment")
            && message.contains("resourceVersion 42")
            && message.contains("409 Conflict"),
        "{message}"
    );
    // Only the refused apply: no annotation (the revokes must not run ahead
    // of the document), no status, no Event from the reconcile itself.
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_configmap_apply(&seen[0], SETTLED_VERSION);
}

#[tokio::test]
async fn a_conflict_on_the_first_create_stops_the_reconcile() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let (result, seen) = reconcile_answering(&group, &world.stores, CmAnswer::Conflict).await;
    let error = result.expect_err("another write created the ConfigMap");
    assert_eq!(error.metric_label(), "ConfigMapConflict");
    assert!(error.to_string().contains("409 AlreadyExists"), "{error}");
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_configmap_create(&seen[0]);
}

#[tokio::test]
async fn conflicts_are_retried_quietly_then_with_backoff_and_one_warning() {
    let (group, world) = settled_with_a_joining_pod().await;
    let (client, seen) = mock_client_with(group.clone(), CmAnswer::Conflict);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "shardring".into(),
            instance: None,
        },
    );
    let metrics = ControllerMetrics::default();
    let ctx = Arc::new(
        Context::new(client, world.stores.clone(), metrics)
            .with_recorder(recorder)
            .with_clock(Arc::new(now)),
    );
    let obj = Arc::new(DeserializeGuard(Ok(group)));
    let error = reconcile(obj.clone(), ctx.clone()).await.unwrap_err();
    let delays: Vec<_> = (0..5)
        .map(|_| shardring::controller::error_policy(obj.clone(), &error, ctx.clone()))
        .collect();
    let requeue = kube::runtime::controller::Action::requeue;
    // A stale cache: three quick, quiet retries; then a real streak.
    assert_eq!(
        delays,
        [
            requeue(Duration::from_millis(500)),
            requeue(Duration::from_millis(500)),
            requeue(Duration::from_millis(500)),
            requeue(Duration::from_secs(2)),
            requeue(Duration::from_secs(4)),
        ]
    );
    let label = shardring::controller::metrics::ReasonLabel {
        reason: "ConfigMapConflict",
    };
    assert_eq!(ctx.metrics.errors.get_or_create(&label).get(), 5);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let events: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.path == EVENTS_PATH)
        .cloned()
        .collect();
    assert_eq!(
        events.len(),
        1,
        "one Warning, past the quiet retries: {events:#?}"
    );
    assert_eq!(events[0].body["reason"], "ConfigMapConflict");
}

#[tokio::test]
async fn a_lost_configmap_is_recreated_from_the_annotations_with_a_create() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let before: Vec<PodView> = world
        .stores
        .pods
        .state()
        .iter()
        .map(|p| serde_json::from_str(&p.metadata.annotations.as_ref().unwrap()[KEY]).unwrap())
        .collect();
    let cm = (*world.stores.config_maps.state()[0]).clone();
    world
        .config_maps
        .apply_watcher_event(&watcher::Event::Delete(cm));
    let seen = reconcile_once(&group, &world.stores).await;
    let doc = assert_configmap_create(&seen[0]);
    assert!(doc.epoch > 1, "the epoch continues: {}", doc.epoch);
    for view in before {
        assert!(
            doc.pods.values().any(|p| p.active == view.active),
            "every pod keeps its shards: {view:?} in {doc:#?}"
        );
    }
}

#[tokio::test]
async fn an_encoding_key_left_by_the_create_is_removed_after_the_apply() {
    let (group, world) = settled_with_a_joining_pod().await;
    let (result, seen) = reconcile_answering(&group, &world.stores, CmAnswer::StaleKey).await;
    result.expect("reconcile succeeded");
    assert_configmap_apply(&seen[0], SETTLED_VERSION);
    let cleanup = &seen[1];
    assert_eq!(
        (cleanup.method.as_str(), cleanup.path.as_str()),
        ("PATCH", CM_PATH)
    );
    assert_eq!(cleanup.query, "fieldManager=shardring");
    assert_eq!(cleanup.content_type, "application/merge-patch+json");
    assert_eq!(
        cleanup.body,
        json!({"metadata": {"resourceVersion": "43"}, "binaryData": {"assignment.json.gz": null}}),
        "only the stale key, conditioned on the version just written"
    );
    assert!(
        seen[2].path.contains("/pods/"),
        "then the annotations: {seen:#?}"
    );
}
