//! Tests of the observe step and the watch mappers: what a ShardGroup's
//! observation holds when built from reflector stores, and which groups a pod
//! or pool change wakes up.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::core::{DeserializeGuard, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use shardring::controller::apply::document_config_map;
use shardring::controller::observe::{ZONE_LABEL, groups_for_pod, groups_for_pool};
use shardring::controller::{CachedPod, PodRecords, Stores};
use shardring::crds::{AssignmentDocument, ShardGroup, ShardRecord};
use shardring_core::observation::{Published, PublishedVersion};

use shardring_core::fixtures::*;

fn stores(pods: &[Pod], nodes: &[(&str, &str)], cms: &[ConfigMap]) -> Stores {
    let (pools, mut pool_writer) =
        reflector::store::<DeserializeGuard<shardring::crds::ConsumerPool>>();
    pool_writer.apply_watcher_event(&watcher::Event::Apply(DeserializeGuard(Ok(pool(30)))));
    let pod_cache = PodRecords::default();
    for p in pods {
        pod_cache.apply_watcher_event(&watcher::Event::Apply(CachedPod::from(p)));
    }
    let (node_reader, mut node_writer) = reflector::store::<PartialObjectMeta<Node>>();
    for (name, zone) in nodes {
        let meta = PartialObjectMeta::<Node> {
            metadata: ObjectMeta {
                name: Some((*name).into()),
                labels: Some([(ZONE_LABEL.to_owned(), (*zone).to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        node_writer.apply_watcher_event(&watcher::Event::Apply(meta));
    }
    let (cm_reader, mut cm_writer) = reflector::store::<ConfigMap>();
    for cm in cms {
        cm_writer.apply_watcher_event(&watcher::Event::Apply(cm.clone()));
    }
    Stores {
        pools,
        pods: pod_cache,
        nodes: node_reader,
        config_maps: cm_reader,
        departed: Default::default(),
        documents: Default::default(),
        stateful_sets: reflector::store().0,
    }
}

fn on_node(mut p: Pod, node: &str) -> Pod {
    p.spec.as_mut().unwrap().node_name = Some(node.into());
    p
}

#[test]
fn observation_strips_pods_to_what_the_plan_needs() {
    let mut other_ns = pod("elsewhere", true, None);
    other_ns.metadata.namespace = Some("other".into());
    let mut stranger = pod("stranger", true, None);
    stranger.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    let mut leaving = pod(
        "leaving",
        true,
        Some("{\"epoch\":1,\"active\":[],\"standby\":[],\"revoking\":[]}"),
    );
    leaving.metadata.labels = None;
    let mut terminating = pod("consumer-2", true, None);
    terminating.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    terminating.metadata.deletion_grace_period_seconds = Some(30);
    let pods = [
        on_node(pod("consumer-1", true, None), "node-a"),
        pod("consumer-0", false, None),
        terminating,
        other_ns,
        stranger,
        leaving,
    ];
    let stores = stores(&pods, &[("node-a", "eu-west-1a")], &[]);
    let obs = stores.observe(&group(4), topology(4), now());
    let names: Vec<_> = obs.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["consumer-0", "consumer-1", "consumer-2", "leaving"],
        "sorted; strangers and other namespaces out"
    );
    let by = |n: &str| obs.pods.iter().find(|p| p.name == n).unwrap();
    assert!(!by("consumer-0").ready);
    assert!(by("consumer-1").ready && by("consumer-1").selected);
    assert_eq!(by("consumer-1").zone.as_deref(), Some("eu-west-1a"));
    assert_eq!(
        by("consumer-1").ready_since,
        Some(now() - jiff::SignedDuration::from_secs(3600))
    );
    assert_eq!(by("consumer-2").deletion_grace_seconds, Some(30));
    assert!(by("consumer-2").deletion_timestamp.is_some());
    assert!(!by("leaving").selected && by("leaving").annotation.is_some());
    assert_eq!(obs.pool.as_ref().unwrap().spec.min_ready_seconds, 30);
    assert_eq!(obs.published, Published::Missing);
    let (_, version) = stores.observe_with_version(&group(4), topology(4), now());
    assert_eq!(version, PublishedVersion::Absent, "no ConfigMap: a create");
}

#[test]
fn the_published_document_is_read_from_the_owned_config_map() {
    let g = group(2);
    let mut doc = AssignmentDocument::new("prod/orders", 9);
    doc.shards.insert(
        "orders-0".into(),
        ShardRecord {
            owner: Some("consumer-0".into()),
            ..Default::default()
        },
    );
    doc.reindex_pods();
    let mut cm = document_config_map(&g, &doc).unwrap();
    cm.metadata.resource_version = Some("417".into());
    let stores = stores(&[], &[], std::slice::from_ref(&cm));
    let (obs, version) = stores.observe_with_version(&g, topology(2), now());
    assert_eq!(obs.published, Published::from(doc));
    // The version is kept with the document it was decoded from: the next
    // document write is conditioned on it.
    assert_eq!(version, PublishedVersion::At("417".into()));
    let mut broken = cm;
    broken.data = Some([("assignment.json".to_owned(), "{".to_owned())].into());
    broken.metadata.resource_version = Some("418".into());
    let stores = stores_with_cm(broken);
    let (obs, version) = stores.observe_with_version(&g, topology(2), now());
    assert!(matches!(obs.published, Published::Unreadable(_)));
    // An unreadable ConfigMap is replaced, still conditioned on its version.
    assert_eq!(version, PublishedVersion::At("418".into()));
}

fn stores_with_cm(cm: ConfigMap) -> Stores {
    stores(&[], &[], &[cm])
}

#[test]
fn pod_changes_wake_the_groups_that_select_or_annotate_them() {
    let selected = pod("consumer-0", true, None);
    let mut annotated = pod("gone", true, Some("{}"));
    annotated.metadata.labels = None;
    let mut unrelated = pod("web", true, None);
    unrelated.metadata.labels = None;
    let stores = stores(&[], &[], &[]);
    let groups = vec![Arc::new(DeserializeGuard(Ok(group(4))))];
    let expected = vec![ObjectRef::<DeserializeGuard<ShardGroup>>::new("orders").within(NS)];
    let wakes = |pod: &Pod| groups_for_pod(&CachedPod::from(pod), &groups, &stores);
    assert_eq!(wakes(&selected), expected);
    assert_eq!(wakes(&annotated), expected);
    assert!(wakes(&unrelated).is_empty());
    assert_eq!(groups_for_pool(NS, POOL, &groups), expected);
    assert!(groups_for_pool(NS, "other-pool", &groups).is_empty());
    assert!(groups_for_pool("other", POOL, &groups).is_empty());
}
