//! The controller's shared [`Context`] (everything a reconcile is given)
//! and the one place it is wired: [`ContextBuilder`] takes each dependency
//! once, in any order, and [`ContextBuilder::build`] decides, exactly once,
//! everything that depends on more than one of them: the one
//! [`GroupTable`](super::GroupTable) the document cache, the sources and
//! the registry share; which books the measured loads go into; what the
//! registry forgets (the endpoint's maps, the sources' providers); and,
//! for a running controller, the pools' balance and the endpoint's pod
//! cache over the watches' stores.

use std::sync::Arc;

use kube::Client;
use kube::core::DeserializeGuard;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use super::apply::WriteLimit;
use super::endpoint_sync::StorePods;
use super::{CacheSync, ControllerMetrics, GroupRegistry, Pools, Sources, Stores};
use crate::clock::Clock;
use crate::crds::ShardGroup;
use crate::endpoint::{EndpointState, Loads};
use crate::runtime::leader::LeaderGate;

/// Everything a reconcile needs, shared by all reconciles. Built by
/// [`Context::builder`].
pub struct Context {
    /// API client.
    pub client: Client,
    /// Reflector stores the observe step reads.
    pub stores: Stores,
    /// Builds and reads the groups' sources.
    pub sources: Sources,
    /// Everything kept per group, forgotten in one place.
    pub groups: GroupRegistry,
    /// Controller metrics.
    pub metrics: ControllerMetrics,
    /// Event recorder; `None` publishes no Events.
    pub recorder: Option<Recorder>,
    /// The clock a reconcile reads `now` from (a fixed one in tests).
    pub clock: Arc<dyn Clock>,
    /// Whether this replica may write (the leader); `None`: no election,
    /// it always may.
    pub leader: LeaderGate,
    /// The bound on pod writes in flight, shared by every reconcile.
    pub writes: WriteLimit,
    /// Whether the caches hold complete lists. A context over stores its
    /// caller filled tracks no cache, so it is synced from the start.
    pub cache_sync: CacheSync,
    /// The consumer endpoint's shared state (`None`: no endpoint).
    pub(crate) endpoint: Option<EndpointState>,
    /// The measured loads (the endpoint's, when there is one: its reports
    /// and the lease table's throughput go into the same books).
    pub(crate) loads: Arc<Loads>,
    /// The pools' deals of the count-mode groups' ⌈⌉ quotas (pool-wide
    /// balance); over stores its caller filled it knows no group, so every
    /// group is planned alone.
    pub pools: Pools,
}

impl Context {
    /// The builder of the context of a controller that reaches the API
    /// server through `client` and counts in `metrics`.
    pub fn builder(client: Client, metrics: ControllerMetrics) -> ContextBuilder {
        ContextBuilder {
            client,
            metrics,
            sources: None,
            clock: None,
            reporter: None,
            leader: None,
            endpoint: None,
            loads: None,
            cache_sync: None,
            writes: None,
            shard_groups: None,
        }
    }

    pub(super) fn caches_synced(&self) -> bool {
        self.cache_sync.is_synced()
    }

    pub(super) fn may_write(&self) -> bool {
        crate::runtime::leader::may_write(&self.leader)
    }
}

/// The dependencies a [`Context`] is built from, each given once. No
/// setter reads or changes what another set, so their order does not
/// matter; what depends on several is decided in [`Self::build`]. Without
/// a setter's call the context has what its doc says.
#[must_use = "a builder does nothing until it is built or run"]
pub struct ContextBuilder {
    client: Client,
    metrics: ControllerMetrics,
    sources: Option<Sources>,
    clock: Option<Arc<dyn Clock>>,
    reporter: Option<Reporter>,
    leader: LeaderGate,
    endpoint: Option<EndpointState>,
    loads: Option<Arc<Loads>>,
    // The rest comes from the runner's watches (a context over stores its
    // caller filled has none of them).
    cache_sync: Option<CacheSync>,
    writes: Option<WriteLimit>,
    shard_groups: Option<Store<DeserializeGuard<ShardGroup>>>,
}

impl ContextBuilder {
    /// Builds the groups' sources with `sources` (without: the default
    /// providers, each kind loading its configuration when its first group
    /// is read; tests inject fixed or failing ones).
    pub fn sources(mut self, sources: Sources) -> Self {
        self.sources = Some(sources);
        self
    }

    /// Reads time from `clock` (without: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Publishes Events, reported by `instance` (the pod's name) when it is
    /// known (without: no Events).
    pub fn publish_events(mut self, instance: Option<String>) -> Self {
        self.reporter = Some(Reporter {
            controller: "shardring".into(),
            instance,
        });
        self
    }

    /// Writes only while `leader` is true (without: always).
    pub fn leader(mut self, leader: watch::Receiver<bool>) -> Self {
        self.leader = Some(leader);
        self
    }

    /// Publishes views into, and reads releases and load reports from,
    /// `endpoint` (without: no endpoint). Its own books hold the measured
    /// loads, whatever [`Self::loads`] was given.
    pub fn endpoint(mut self, endpoint: EndpointState) -> Self {
        self.endpoint = Some(endpoint);
        self
    }

    /// Keeps the measured loads in `loads` when there is no endpoint
    /// (without either: books of the context's own). `shardring run` gives
    /// the books whose metrics it registered, which are its endpoint's too.
    pub fn loads(mut self, loads: Arc<Loads>) -> Self {
        self.loads = Some(loads);
        self
    }

    /// The client the context will reach the API server through (the
    /// runner's watches use it too).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Decides only once every cache `sync` tracks has completed its first
    /// list (without: the stores are complete from the start).
    pub(crate) fn cache_sync(mut self, sync: CacheSync) -> Self {
        self.cache_sync = Some(sync);
        self
    }

    /// Writes at most `limit`'s bound of pod annotations at once, telling
    /// the watches its own writes (without: the default bound).
    pub(crate) fn write_limit(mut self, limit: WriteLimit) -> Self {
        self.writes = Some(limit);
        self
    }

    /// The watched ShardGroups (without: none known). The pools' balance
    /// deals over the groups of each pool among them, and the endpoint
    /// judges a pod of the pod cache against them ([`StorePods`]).
    pub(crate) fn shard_groups(mut self, groups: Store<DeserializeGuard<ShardGroup>>) -> Self {
        self.shard_groups = Some(groups);
        self
    }

    /// The context over `stores`, every part wired to the others once.
    pub fn build(self, stores: Stores) -> Context {
        // One table for every group's state: the document cache's (which
        // the ConfigMap watch shares), the sources' and the registry's.
        let table = stores.documents.table().clone();
        let sources = self.sources.unwrap_or_default().sharing(&table);
        // One set of books for the measured loads: an endpoint's, where its
        // connections record the pods' reports, so the lease table's
        // throughput and the reports are estimated together.
        let loads = match (&self.endpoint, self.loads) {
            (Some(endpoint), _) => Arc::clone(&endpoint.loads),
            (None, Some(loads)) => loads,
            (None, None) => Arc::default(),
        };
        let groups = GroupRegistry::new(
            table,
            self.metrics.clone(),
            sources.providers(),
            self.endpoint.clone(),
            Arc::clone(&loads),
        );
        let pools = match &self.shard_groups {
            Some(groups) => Pools::new(groups.clone()),
            None => Pools::default(),
        };
        if let (Some(endpoint), Some(groups)) = (&self.endpoint, self.shard_groups) {
            // A pod that turned up since the last cycle is judged from the
            // watches' stores, before any reconcile has published it.
            endpoint
                .directory
                .set_pod_cache(Arc::new(StorePods::new(stores.clone(), groups)));
        }
        let recorder = self
            .reporter
            .map(|reporter| Recorder::new(self.client.clone(), reporter));
        Context {
            client: self.client,
            stores,
            sources,
            groups,
            metrics: self.metrics,
            recorder,
            clock: self.clock.unwrap_or_else(crate::clock::system),
            leader: self.leader,
            writes: self.writes.unwrap_or_default(),
            cache_sync: self.cache_sync.unwrap_or_else(|| CacheSync::new(&[])),
            endpoint: self.endpoint,
            loads,
            pools,
        }
    }
}
