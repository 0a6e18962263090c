//! What a reconcile test runs in: reflector stores filled as a synced watch
//! fills them ([`World`]), the controller's context on a mock client, one
//! reconcile with every request it sent, and [`settle`], which brings the
//! stores and group to what the API server holds after a publish.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use shardring::controller::apply::document_config_map;
use shardring::controller::{CachedPod, Context, ControllerMetrics, PodRecords, Stores, reconcile};
use shardring::crds::{ConsumerPool, ShardGroup};
use shardring_core::plan;

use super::mock::{CmAnswer, mock_client, mock_client_with};
use crate::controller_support::mock_api::Seen;
use shardring_core::fixtures::*;

/// Reflector stores filled as a synced watch would fill them.
pub(super) struct World {
    pub(super) stores: Stores,
    /// The pods as the watch delivered them last, by name.
    pub(super) pods: BTreeMap<String, CachedPod>,
    pub(super) config_maps: Writer<ConfigMap>,
}

impl World {
    /// Delivers `pod` as a watch event would.
    pub(super) fn apply_pod(&mut self, pod: CachedPod) {
        self.stores
            .pods
            .apply_watcher_event(&watcher::Event::Apply(pod.clone()));
        self.pods
            .insert(pod.metadata.name.clone().unwrap_or_default(), pod);
    }
}

pub(super) fn world(pool: Option<ConsumerPool>, pods: &[Pod]) -> World {
    let (pool_reader, mut pool_writer) = reflector::store::<DeserializeGuard<ConsumerPool>>();
    if let Some(pool) = pool {
        pool_writer.apply_watcher_event(&watcher::Event::Apply(DeserializeGuard(Ok(pool))));
    }
    let (node_reader, _node_writer) = reflector::store::<PartialObjectMeta<Node>>();
    let (cm_reader, cm_writer) = reflector::store::<ConfigMap>();
    let mut world = World {
        stores: Stores {
            pools: pool_reader,
            pods: PodRecords::default(),
            nodes: node_reader,
            config_maps: cm_reader,
            departed: Default::default(),
            documents: Default::default(),
            stateful_sets: reflector::store().0,
        },
        pods: BTreeMap::new(),
        config_maps: cm_writer,
    };
    for pod in pods {
        world.apply_pod(CachedPod::from(pod));
    }
    world
}

fn context(client: Client, stores: Stores) -> Arc<Context> {
    Arc::new(
        Context::builder(client, ControllerMetrics::default())
            .publish_events(Some("test".into()))
            .clock(Arc::new(now))
            .build(stores),
    )
}

/// Runs one reconcile of `group` and returns every request it sent.
pub(super) async fn reconcile_once(group: &ShardGroup, stores: &Stores) -> Vec<Seen> {
    let (result, seen) = reconcile_answering(group, stores, CmAnswer::Written).await;
    result.expect("reconcile succeeded");
    seen
}

/// Runs one reconcile of `group` against a server answering ConfigMap
/// writes as `cm`; returns its result and every request it sent.
pub(super) async fn reconcile_answering(
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
    let seen = seen.lock().clone();
    (result, seen)
}

/// Brings the stores and group to what the API server holds after the
/// controller has published for them (the plan applied without a server).
pub(super) async fn settle(group: &mut ShardGroup, world: &mut World) {
    let ctx = context(mock_client(group.clone()).0, world.stores.clone());
    let topology = ctx.sources.read(group, now()).await;
    let decision = plan(&world.stores.observe(group, topology, now()));
    if let Some(write) = &decision.document_write {
        let mut cm = document_config_map(group, &write.document).unwrap();
        cm.metadata.resource_version = Some(SETTLED_VERSION.into());
        world
            .config_maps
            .apply_watcher_event(&watcher::Event::Apply(cm));
    }
    for write in &decision.annotation_writes {
        let mut pod = world.pods[&write.pod].clone();
        let annotations = pod.metadata.annotations.get_or_insert_default();
        match &write.view {
            Some(view) => annotations.insert(KEY.into(), serde_json::to_string(view).unwrap()),
            None => annotations.remove(KEY),
        };
        world.apply_pod(pod);
    }
    group.status = Some(decision.status.into_status());
}

/// A settled group whose pool gains a pod: the next reconcile writes the
/// document (first phase of the moves) and the donors' annotations.
pub(super) async fn settled_with_a_joining_pod() -> (ShardGroup, World) {
    let mut group = group(6);
    group.spec.rebalance.delay = "0s".into();
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    world.apply_pod(CachedPod::from(&pod("consumer-3", true, None)));
    (group, world)
}

pub(super) fn three_pods() -> Vec<Pod> {
    (0..3)
        .map(|i| pod(&format!("consumer-{i}"), true, None))
        .collect()
}

/// The resourceVersion of the ConfigMap [`settle`] leaves in the store.
pub(super) const SETTLED_VERSION: &str = "42";
