//! Runs the controller: builds the watches (ShardGroups and ConsumerPools
//! through `DeserializeGuard` so a malformed object cannot stall them; pods
//! as compact records in the pod cache; node metadata for zones; the ConfigMaps shardring
//! manages), maps pod, pool and ConfigMap changes to the ShardGroups they
//! concern, and drives kube's `Controller` until shutdown.
//!
//! No reconcile decides before every cache has completed its first list,
//! and every completed list reconciles every group ([`super::sync`]). The
//! operator's own status, document and annotation writes wake no reconcile
//! ([`super::triggers`]).
//!
//! Leadership: the watches run on every replica (so a standby is ready with
//! warm caches), but a reconcile writes only while this replica leads; when
//! it becomes leader every ShardGroup is reconciled at once, and when it
//! stops leading it forgets what only a leader serves
//! ([`super::groups::GroupRegistry::clear`]), in the controller's own
//! trigger stream: no task of its own changes state.

use std::future::ready;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::channel::mpsc::UnboundedReceiver;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, predicates, watcher};
use kube::{Client, Resource};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::apply::{MANAGED_BY, MANAGED_BY_LABEL};
use super::cached_pod::CachedPod;
use super::observe::departed::WatchDeparted as _;
use super::observe::documents::DocumentCache;
use super::observe::{self, Stores};
use super::own_writes::OwnWrites;
use super::pod_cache::PodRecords;
use super::scope::{WatchScope, scoped_watcher};
use super::sync::{CacheSync, cache};
// Every watch retries on the consumer's schedule: back within 4 s of an API
// server that returns, never more than once every 2-4 s while it is down.
use super::context::{Context, ContextBuilder};
use super::reconcile::{error_policy, reconcile};
use super::triggers;
use crate::crds::{ConsumerPool, ShardGroup, controller_class_selector};
use crate::endpoint::{ReconcileRequests, Requested};
use crate::runtime::health::Health;
use shardring_backoff::watch::watch_backoff;

/// How the controller runs: values only (what it runs with is given to
/// its [`ContextBuilder`]).
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// The namespaces watched (default: all).
    pub scope: WatchScope,
    /// Whether to watch Nodes for zone labels (needs cluster-wide `list`/`watch` on nodes).
    pub watch_nodes: bool,
    /// Most reconciles at once (0: unlimited).
    pub concurrency: u16,
    /// Most pod annotation writes in flight, over all reconciles.
    pub write_concurrency: usize,
    /// The controller class served: only ShardGroups labelled with it
    /// (`None`: only those without the label); see
    /// [`crate::crds::CONTROLLER_CLASS_LABEL`].
    pub controller_class: Option<String>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            scope: WatchScope::All,
            watch_nodes: true,
            concurrency: 8,
            write_concurrency: super::apply::DEFAULT_WRITE_CONCURRENCY,
            controller_class: None,
        }
    }
}

/// Runs the controller until `shutdown` is cancelled, with the context
/// `context` builds over the stores of the watches this starts (its
/// sources, leader gate, endpoint and Events are the builder's: one
/// operator instance's own, nothing process-wide). `health` is told when
/// every cache has completed its first list.
pub async fn run_controller(
    context: ContextBuilder,
    config: ControllerConfig,
    health: Option<Health>,
    shutdown: CancellationToken,
) {
    let client = context.client().clone();
    let scope = &config.scope;
    let mut caches = vec![
        cache::SHARD_GROUPS,
        cache::CONSUMER_POOLS,
        cache::PODS,
        cache::CONFIG_MAPS,
        cache::STATEFUL_SETS,
    ];
    if config.watch_nodes {
        caches.push(cache::NODES);
    }
    let sync = CacheSync::new(&caches);

    let (groups, group_writer) = reflector::store::<DeserializeGuard<ShardGroup>>();
    let class = controller_class_selector(config.controller_class.as_deref());
    let pods = PodRecords::default();
    let group_events = scoped_watcher::<DeserializeGuard<ShardGroup>>(
        &client,
        scope,
        watcher::Config::default().any_semantic().labels(&class),
    )
    .modify(without_managed_fields)
    .reflect(group_writer)
    .inspect(keep_custom_annotations(groups.clone(), pods.clone()))
    .inspect(sync.tracker(cache::SHARD_GROUPS))
    .applied_objects()
    .predicate_filter(triggers::group_change, PredicateConfig::default());
    let mut controller =
        Controller::for_stream(group_events, groups.clone()).trigger_backoff(EachWatchBacksOff);
    if config.concurrency > 0 {
        controller = controller.with_config(
            kube::runtime::controller::Config::default().concurrency(config.concurrency),
        );
    }

    let (pools, pool_writer) = reflector::store::<DeserializeGuard<ConsumerPool>>();
    let mut pool_changes = triggers::PoolChanges::default();
    let pool_events = scoped_watcher(&client, scope, watcher::Config::default())
        .modify(without_managed_fields)
        .reflect(pool_writer)
        .inspect(sync.tracker(cache::CONSUMER_POOLS))
        // The store above has every event; the groups wake for some.
        .filter(move |event| ready(pool_changes.wakes(event)))
        .touched_objects();

    let (pod_wakes, held_pods) = super::apply::PodWakes::channel();
    let write_limit = super::apply::WriteLimit::new(config.write_concurrency, pod_wakes);
    let departed = observe::departed::DepartureMemory::default();
    let pod_events = pod_watch(
        &client,
        scope,
        &sync,
        &pods,
        &departed,
        write_limit.own.clone(),
        held_pods,
    );

    let documents = DocumentCache::default();
    let (config_maps, cm_events) =
        config_map_watch(&client, scope, &sync, &documents, write_limit.own.clone());

    let (stateful_sets, stateful_set_events) = stateful_set_watch(&client, scope, &sync);

    let (nodes, node_task) = if config.watch_nodes {
        let (nodes, task) = node_watch(&client, &sync, &shutdown);
        (nodes, Some(task))
    } else {
        (reflector::store().0, None)
    };

    let stores = Stores {
        pools: pools.clone(),
        pods: pods.clone(),
        nodes,
        config_maps: config_maps.clone(),
        departed,
        documents,
        stateful_sets,
    };
    report_synced(&sync, health, &shutdown);

    let context = context
        .write_limit(write_limit)
        .cache_sync(sync.clone())
        .shard_groups(groups.clone());
    let context = Arc::new(context.build(stores.clone()));
    let leader = context.leader.clone();
    let redealt = requested_groups(context.pools.requests(), groups.clone());
    let endpoint_tasks = endpoint_streams(&context, groups.clone());

    let pod_groups = groups.clone();
    let pod_stores = stores.clone();
    let pool_groups = groups.clone();
    let set_groups = groups.clone();
    let set_stores = stores.clone();
    // Every ShardGroup is reconciled when the caches complete a list (the
    // first, and every relist) and when this replica becomes leader.
    let reconcile_all = match leader {
        Some(rx) => futures::stream::select(
            sync.lists_completed(),
            became_leader(rx, Arc::clone(&context)),
        )
        .boxed(),
        None => sync.lists_completed().boxed(),
    };
    let (released, ca_changed) = endpoint_tasks;
    let reconcile_all = futures::stream::select(reconcile_all, ca_changed).boxed();
    let pools = context.pools.clone();
    let running = controller
        .reconcile_on(released)
        .reconcile_on(redealt)
        .owns_stream(cm_events)
        .watches_stream(pod_events, move |pod: CachedPod| {
            observe::groups_for_pod(&pod, &pod_groups.state(), &pod_stores)
        })
        .watches_stream(pool_events, move |pool: DeserializeGuard<ConsumerPool>| {
            let meta = pool.meta();
            let (ns, name) = (
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            );
            observe::groups_for_pool(&ns, &name, &pool_groups.state())
        })
        .watches_stream(stateful_set_events, move |set: StatefulSet| {
            let namespace = set.metadata.namespace.unwrap_or_default();
            observe::groups_for_stateful_set(&namespace, &set_groups.state(), &set_stores)
        })
        .reconcile_all_on(reconcile_all)
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, context)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
            ready(())
        });
    tokio::select! {
        () = running => {}
        () = shutdown_before_listed(shutdown.clone(), groups.clone()) => {
            tracing::info!("shutdown before the ShardGroups were listed: nothing had started");
        }
    }
    // Held pool statuses are not written once the controller is done, and
    // one being written goes out before this returns (and a leader gives
    // its Lease up).
    pools.stop_status_writes().await;
    if let Some(task) = node_task {
        task.abort();
    }
}

/// Resolves when `shutdown` comes before `groups` has its first list, and
/// never otherwise. kube's `Controller` holds its reconciles until that
/// list, and its graceful shutdown stops the watch that would bring it: the
/// controller would wait for it forever. Nothing has been reconciled then,
/// so the controller can be dropped at once. Checked when the shutdown
/// comes, in the task that drives the controller: once the list is in,
/// reconciles may run and the graceful shutdown waits for them.
async fn shutdown_before_listed(
    shutdown: CancellationToken,
    groups: Store<DeserializeGuard<ShardGroup>>,
) {
    shutdown.cancelled().await;
    if groups.wait_until_ready().now_or_never().is_some() {
        std::future::pending::<()>().await;
    }
}

/// The pod watch: pods cached as records in `pods` (the [`PodRecords`]),
/// every event fed to the memory of departed pods, and the changed pods
/// mapped to their groups unless the event is the echo of the operator's
/// own annotation write or left the pod's record as it was. An update that
/// arrives while an annotation write to its pod is on its way is held; the
/// write sends it back through `held` when it was not the write's echo.
///
/// Why the second: kubelet writes a starting pod's status four to six
/// times (scheduled, initialized, IP, containers started, Ready), and a
/// deployment's controllers touch its metadata; most of those change
/// nothing a decision reads, and at 20,000 shards each woken reconcile is
/// a whole plan that the next event with news has to wait behind.
fn pod_watch(
    client: &Client,
    scope: &WatchScope,
    sync: &CacheSync,
    pods: &PodRecords,
    departed: &observe::departed::DepartureMemory,
    own_writes: OwnWrites,
    held: UnboundedReceiver<(String, String)>,
) -> impl Stream<Item = Result<CachedPod, watcher::Error>> + Send + 'static {
    let records = pods.clone();
    let wake_records = pods.clone();
    // Whether the event now passing changed its pod's record: set where the
    // cache applies it (before the departure memory and the sync tracker
    // see it, as they need), read by the filter below for the same event
    // (a stream hands its items through its adapters one at a time).
    let changed = Arc::new(AtomicBool::new(true));
    let changed_at_filter = changed.clone();
    // Pods are listed in pages at the latest resourceVersion, not at "0":
    // a list at "0" is served whole from the API server's watch cache,
    // whatever the limit, and thousands of full pods in one response are
    // most of the operator's peak memory.
    let watched = scoped_watcher::<CachedPod>(client, scope, watcher::Config::default())
        .inspect(move |event| {
            if let Ok(event) = event {
                changed.store(records.apply_watcher_event(event), Ordering::Relaxed);
            }
        })
        .inspect(departed.recorder())
        .inspect(sync.tracker(cache::PODS))
        .filter(move |event| {
            // Asked of every event: an echo spends its entry in `own_writes`.
            let echo = triggers::own_write_echo(&own_writes, event);
            ready(
                event.is_err()
                    || (!echo
                        && changed_at_filter.load(Ordering::Relaxed)
                        && !triggers::held_for_own_write(&own_writes, event)),
            )
        })
        .touched_objects();
    // The pods whose held events were someone else's change, as the pod
    // cache has them now: the mapping to groups reads only their
    // namespace, labels and shardring's annotations.
    let redelivered = held.filter_map(move |(namespace, name)| {
        ready(
            wake_records
                .get(&namespace, &name)
                .map(|record| Ok(record_as_pod(&namespace, record))),
        )
    });
    futures::stream::select(watched, redelivered)
}

/// A pod of the pod cache as the pod trigger's mapping to groups reads it.
fn record_as_pod(namespace: &str, record: shardring_core::group_state::PodRecord) -> CachedPod {
    CachedPod {
        metadata: kube::api::ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(record.name),
            uid: Some(record.uid).filter(|uid| !uid.is_empty()),
            labels: Some((*record.labels).clone()),
            annotations: Some(record.annotations.into_iter().collect()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The watch of the ConfigMaps shardring manages: an update whose document
/// is already known, or the echo of the operator's own write, wakes nothing.
fn config_map_watch(
    client: &Client,
    scope: &WatchScope,
    sync: &CacheSync,
    documents: &DocumentCache,
    own_writes: OwnWrites,
) -> (
    Store<ConfigMap>,
    impl Stream<Item = Result<ConfigMap, watcher::Error>> + Send + 'static,
) {
    let (config_maps, cm_writer) = reflector::store::<ConfigMap>();
    let known = documents.clone();
    let managed = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let events =
        scoped_watcher::<ConfigMap>(client, scope, watcher::Config::default().labels(&managed))
            .modify(without_managed_fields)
            .reflect(cm_writer)
            .inspect(sync.tracker(cache::CONFIG_MAPS))
            .filter(move |event| {
                ready(
                    !triggers::known_document_update(&known, event)
                        && !triggers::own_write_echo_or_held(&own_writes, event),
                )
            })
            .touched_objects();
    (config_maps, events)
}

/// The StatefulSet cache, each set stripped to its name and replicas (a
/// pod of a name returns while its ordinal is below them), and its changes
/// of spec (a scale, a rolling restart).
fn stateful_set_watch(
    client: &Client,
    scope: &WatchScope,
    sync: &CacheSync,
) -> (
    Store<StatefulSet>,
    impl Stream<Item = Result<StatefulSet, watcher::Error>> + Send + 'static,
) {
    let (sets, writer) = reflector::store::<StatefulSet>();
    let events = scoped_watcher::<StatefulSet>(client, scope, watcher::Config::default())
        .modify(|set| {
            set.metadata.managed_fields = None;
            set.metadata.annotations = None;
            set.metadata.labels = None;
            set.spec = set.spec.take().map(|spec| StatefulSetSpec {
                replicas: spec.replicas,
                ..Default::default()
            });
            set.status = None;
        })
        .reflect(writer)
        .inspect(sync.tracker(cache::STATEFUL_SETS))
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    (sets, events)
}

/// The Node metadata cache (zone labels), filled by its own task until
/// `shutdown`.
fn node_watch(
    client: &Client,
    sync: &CacheSync,
    shutdown: &CancellationToken,
) -> (Store<PartialObjectMeta<Node>>, tokio::task::JoinHandle<()>) {
    let (nodes, node_writer) = reflector::store();
    let stream = watcher(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(watch_backoff())
    .modify(without_managed_fields)
    .reflect(node_writer)
    .inspect(sync.tracker(cache::NODES))
    .for_each(|_| ready(()));
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        tokio::select! {
            () = stream => {}
            () = token.cancelled() => {}
        }
    });
    (nodes, task)
}

/// Tells `health` once every cache has completed its first list.
fn report_synced(sync: &CacheSync, health: Option<Health>, shutdown: &CancellationToken) {
    let (sync, token) = (sync.clone(), shutdown.clone());
    tokio::spawn(async move {
        tokio::select! {
            () = sync.synced() => {
                tracing::info!("caches synced");
                if let Some(health) = health {
                    health.set_caches_synced();
                }
            }
            () = token.cancelled() => {}
        }
    });
}

/// A ShardGroup watch callback: once the store has taken an event in,
/// hands the pod cache the custom annotation keys of every group
/// (`spec.output.annotationKey`), the annotations it keeps besides
/// shardring's own. Computed on group events only, not on every pod event.
fn keep_custom_annotations<E>(
    groups: Store<DeserializeGuard<ShardGroup>>,
    pods: PodRecords,
) -> impl FnMut(&Result<watcher::Event<DeserializeGuard<ShardGroup>>, E>) + Send + 'static {
    move |event| {
        // A relist's objects reach the store at its `InitDone`.
        if let Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) =
            event
        {
            let keys = groups
                .state()
                .iter()
                .filter_map(|g| {
                    g.0.as_ref()
                        .ok()
                        .and_then(|g| g.spec.output.annotation_key.clone())
                })
                .collect();
            pods.keep_annotations(keys);
        }
    }
}

/// Drops an object's `metadata.managedFields` before its store keeps it:
/// nothing in the operator reads them, and they are most of a watched
/// object's size (the field sets of every manager, the status writer's
/// included, as JSON trees).
fn without_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// The backoff of the controller's merged trigger stream: none. Each of its
/// watches backs off on its own ([`watch_backoff`]); kube's default here
/// (800 ms doubling to 30 s over all of them) held every watch back for the
/// errors of any, so after an API server outage the relists' `410 Gone`
/// stopped the operator from seeing anything for up to half a minute.
struct EachWatchBacksOff;

impl Iterator for EachWatchBacksOff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        Some(std::time::Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for EachWatchBacksOff {
    fn reset(&mut self) {}
}

/// The endpoint's inputs to the controller: the groups it asks to reconcile
/// now (a release was accepted, so the new owner is activated; a pod asked
/// for a view not served yet), every group of `groups` when it asks for
/// every group (this controller fell behind its requests), and a stream
/// that fires when the endpoint's CA changes (every group is reconciled, to
/// publish it). Without an endpoint both are empty.
fn endpoint_streams(
    context: &Arc<Context>,
    groups: Store<DeserializeGuard<ShardGroup>>,
) -> (
    futures::stream::BoxStream<'static, reflector::ObjectRef<DeserializeGuard<ShardGroup>>>,
    futures::stream::BoxStream<'static, ()>,
) {
    let Some(endpoint) = context.endpoint.clone() else {
        return (
            futures::stream::empty().boxed(),
            futures::stream::empty().boxed(),
        );
    };
    let requested = requested_groups(&endpoint.requests, groups).boxed();
    let ca_changed = futures::stream::unfold(endpoint.ca.subscribe(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
    .boxed();
    (requested, ca_changed)
}

/// The groups `requests` asks to reconcile, as the controller's triggers:
/// every group of `groups` when a listener fell behind its requests.
fn requested_groups(
    requests: &ReconcileRequests,
    groups: Store<DeserializeGuard<ShardGroup>>,
) -> impl Stream<Item = reflector::ObjectRef<DeserializeGuard<ShardGroup>>> + Send + 'static {
    requests.listen().flat_map(move |requested| {
        let keys: Vec<_> = match requested {
            Requested::Group(key) => {
                vec![reflector::ObjectRef::new(&key.name).within(&key.namespace)]
            }
            Requested::Every => groups
                .state()
                .iter()
                .map(|group| reflector::ObjectRef::from_obj(group.as_ref()))
                .collect(),
        };
        futures::stream::iter(keys)
    })
}

/// Emits `()` each time `rx` turns true. Each time it turns false, the
/// replica first forgets what only a leader serves (the views, releases and
/// published CAs: the next leadership starts from what its first cycles
/// publish) and the groups' gauges only a leader keeps current.
fn became_leader(
    rx: watch::Receiver<bool>,
    context: Arc<Context>,
) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        let leading = *rx.borrow_and_update();
        Some((leading, rx))
    })
    .filter_map(move |leading| {
        if !leading {
            context.groups.clear();
            context.metrics.forget_all_groups();
        }
        ready(leading.then_some(()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::api::ObjectMeta;

    fn with_managed_fields(name: &str) -> ShardGroup {
        let mut group = crate::crds::fixtures::static_group("ns", name, "pool", 4, "s-{index}");
        group.metadata = ObjectMeta {
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("shardring".into()),
                operation: Some("Apply".into()),
                ..Default::default()
            }]),
            ..group.metadata
        };
        group
    }

    #[tokio::test]
    async fn stores_keep_no_managed_fields() {
        let (store, writer) = reflector::store::<DeserializeGuard<ShardGroup>>();
        let events: Vec<Result<watcher::Event<DeserializeGuard<ShardGroup>>, watcher::Error>> = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(DeserializeGuard(Ok(
                with_managed_fields("a"),
            )))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(DeserializeGuard(Ok(
                with_managed_fields("b"),
            )))),
        ];
        futures::stream::iter(events)
            .modify(without_managed_fields)
            .reflect(writer)
            .for_each(|_| ready(()))
            .await;
        let kept = store.state();
        assert_eq!(kept.len(), 2);
        assert!(kept.iter().all(|g| g.meta().managed_fields.is_none()));
    }
}
