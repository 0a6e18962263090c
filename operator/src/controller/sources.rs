//! Per-ShardGroup source state kept in memory between reconciles: the source
//! built from the spec (rebuilt when `spec.source` or `spec.leaseTable`
//! changes) and the last topology read successfully, kept by the core's
//! [`TopologyMemory`] (the simulation and the demo feed the same one): a
//! failed read keeps the last good topology and reports the error, so the
//! plan step never mistakes a failure for "no shards". This module owns the
//! I/O only: building the source and reading it. Each group's is its
//! [`GroupState::source`](super::groups::GroupState) in the controller's
//! one [`GroupTable`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jiff::Timestamp;
use shardring_core::group_state::{TopologyMemory, TopologyRead};
use shardring_core::observation::{LeaseObservation, TopologyObservation};
use shardring_core::topology::SourceError;

use super::group_source::GroupSource;
use super::groups::GroupTable;
use crate::GroupKey;
use crate::crds::{ShardGroup, ShardGroupSpec};
use crate::source::{Providers, TopologySource};

/// A source being built (one may first load its configuration).
pub(crate) type BuildFuture =
    Pin<Box<dyn Future<Output = Result<Box<dyn TopologySource>, SourceError>> + Send>>;

/// Builds a source from a spec ([`Providers::build`] over the instance's
/// providers unless replaced in tests).
pub(crate) type SourceFactory = Arc<dyn Fn(&ShardGroupSpec) -> BuildFuture + Send + Sync>;

/// Builds and reads the sources of every ShardGroup, keeping each one and
/// its last good topology in the group's state.
pub struct Sources {
    factory: SourceFactory,
    providers: Option<Arc<Providers>>,
    groups: GroupTable,
}

impl Default for Sources {
    /// Sources over the default providers (each kind loads its
    /// configuration only when the first group of that kind is read).
    fn default() -> Self {
        Self::for_providers(Arc::new(Providers::default()))
    }
}

impl Sources {
    /// Sources built by `factory`.
    pub fn new(factory: SourceFactory) -> Self {
        Self {
            factory,
            providers: None,
            groups: GroupTable::default(),
        }
    }

    /// These sources, keeping their state in `groups` (the controller's
    /// one table) instead of their own.
    pub(crate) fn sharing(self, groups: &GroupTable) -> Self {
        Self {
            groups: groups.clone(),
            ..self
        }
    }

    /// The providers the sources come from, if any.
    pub(crate) fn providers(&self) -> Option<Arc<Providers>> {
        self.providers.clone()
    }

    /// Sources built from the spec by `providers` (which share what they
    /// can between groups, such as one reader per Kinesis stream).
    pub fn for_providers(providers: Arc<Providers>) -> Self {
        let shared = providers.clone();
        let factory: SourceFactory = Arc::new(move |spec: &ShardGroupSpec| {
            let (spec, providers) = (spec.clone(), shared.clone());
            Box::pin(async move { providers.build(&spec).await })
        });
        Self {
            providers: Some(providers),
            ..Self::new(factory)
        }
    }

    /// Sources built by a synchronous `build` (tests inject fixed or failing ones).
    pub fn from_fn(
        build: impl Fn(&ShardGroupSpec) -> Result<Box<dyn TopologySource>, SourceError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self::new(Arc::new(move |spec: &ShardGroupSpec| {
            let built = build(spec);
            Box::pin(std::future::ready(built))
        }))
    }

    /// Reads `group`'s topology now, keeping the last good one on failure.
    pub async fn read(&self, group: &ShardGroup, now: Timestamp) -> TopologyObservation {
        let key = GroupKey::of(group);
        let wanted = (group.spec.source.clone(), group.spec.lease_table.clone());
        let (existing, known) = {
            let mut groups = self.groups.lock();
            let entry = groups
                .entry(key.clone())
                .or_default()
                .source
                .get_or_insert_with(|| GroupSource::new(wanted.clone()));
            if entry.spec != wanted {
                // A different source: the old topology says nothing about it.
                *entry = GroupSource::new(wanted);
            }
            (entry.source.clone(), entry.memory.is_known())
        };
        let source = match existing {
            Some(source) => Ok(source),
            None => (self.factory)(&group.spec).await.map(Arc::from),
        };
        let (describe, result, extras) = match &source {
            Ok(source) => {
                // `None`: a fixed source already read, its topology stands.
                let result = if known && source.is_fixed() {
                    Ok(None)
                } else {
                    source.read().await.map(Some)
                };
                let extras = (
                    source.ordering_enforced(),
                    source.lineage(),
                    source.next_refresh(),
                );
                (source.describe(), result, extras)
            }
            // No source to ask: the spec alone says whether ordering can be
            // enforced (shards with lineage need a lease table to see a
            // parent's completion).
            Err(error) => {
                let ordering = group
                    .spec
                    .source
                    .has_lineage()
                    .then(|| group.spec.lease_table.is_some());
                let extras = (ordering, Default::default(), None);
                (group.spec.source.summary(), Err(error.clone()), extras)
            }
        };
        let (ordering_enforced, lineage, refresh_after) = extras;
        let mut groups = self.groups.lock();
        let Some(entry) = groups.get_mut(&key).and_then(|state| state.source.as_mut()) else {
            // Forgotten while reading (the group was deleted): nothing is
            // kept of this read.
            return TopologyObservation {
                ordering_enforced,
                refresh_after,
                ..TopologyMemory::default().observation(describe, result.err())
            };
        };
        if let Ok(source) = source {
            entry.source.get_or_insert(source);
        }
        let read = match result {
            Ok(Some(topology)) => TopologyRead::Read(topology),
            Ok(None) => TopologyRead::Unchanged,
            Err(error) => TopologyRead::Failed(error),
        };
        let error = entry.memory.apply(read, now);
        TopologyObservation {
            ordering_enforced,
            lineage,
            refresh_after,
            ..entry.memory.observation(describe, error)
        }
    }

    /// What the lease table says for `group`, from the snapshot its source
    /// took during the last [`Sources::read`]: `NotConfigured` without a
    /// lease table, `Failed` (concludes nothing) before a successful scan.
    pub fn leases(&self, group: &ShardGroup) -> LeaseObservation {
        if group.spec.lease_table.is_none() {
            return LeaseObservation::NotConfigured;
        }
        let groups = self.groups.lock();
        let snapshot = groups
            .get(&GroupKey::of(group))
            .and_then(|state| state.source.as_ref())
            .and_then(|entry| entry.source.as_ref())
            .and_then(|source| source.leases());
        match snapshot {
            Some(table) => LeaseObservation::Read(table),
            None => LeaseObservation::Failed(
                "the lease table has not been scanned successfully yet".into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::crds::shard_group::{
        LeaseTableSpec, PoolRef, ShardSource as SourceSpec, StaticSource as StaticSpec,
    };
    use crate::engine::{Shard, ShardState};
    use crate::source::ReadFuture;
    use shardring_core::leases::LeaseTable;
    use shardring_core::topology::Topology;

    /// A source that fails while `failing` is set and reports a lease snapshot.
    struct Flaky {
        failing: Arc<AtomicBool>,
    }

    impl TopologySource for Flaky {
        fn describe(&self) -> String {
            "flaky".into()
        }
        fn read(&self) -> ReadFuture<'_> {
            let failing = self.failing.load(Ordering::SeqCst);
            Box::pin(async move {
                if failing {
                    Err(SourceError::Throttled("slow down".into()))
                } else {
                    Ok(Topology {
                        shards: vec![Shard {
                            id: "s-0".into(),
                            hash_key_range: None,
                            parents: vec![],
                            state: ShardState::Open,
                        }]
                        .into(),
                    })
                }
            })
        }
        fn leases(&self) -> Option<LeaseTable> {
            Some(LeaseTable {
                items: 7,
                ..Default::default()
            })
        }
    }

    fn group(lease_table: bool) -> ShardGroup {
        let mut g = ShardGroup::new(
            "g",
            ShardGroupSpec {
                pool_ref: PoolRef { name: "p".into() },
                source: SourceSpec::Static(StaticSpec {
                    count: 1,
                    name_template: "s-{index}".into(),
                }),
                lease_table: lease_table.then(|| LeaseTableSpec {
                    table_name: "app".into(),
                    region: None,
                    endpoint: None,
                }),
                consumer_name: None,
                standbys: 0,
                balance: Default::default(),
                throughput: None,
                scaling: None,
                handoff: Default::default(),
                rebalance: Default::default(),
                output: Default::default(),
            },
        );
        g.metadata.uid = Some("u".into());
        g
    }

    /// A fixed source that counts its reads.
    struct Counted {
        reads: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl TopologySource for Counted {
        fn describe(&self) -> String {
            "counted".into()
        }
        fn read(&self) -> ReadFuture<'_> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {
                Ok(Topology {
                    shards: Default::default(),
                })
            })
        }
        fn is_fixed(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn a_fixed_source_is_read_once_until_its_spec_changes() {
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = reads.clone();
        let sources = Sources::from_fn(move |_| {
            Ok(Box::new(Counted {
                reads: counter.clone(),
            }) as Box<dyn TopologySource>)
        });
        let mut g = group(false);
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let first = sources.read(&g, t0).await;
        let t1 = t0 + jiff::SignedDuration::from_secs(60);
        let later = sources.read(&g, t1).await;
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert_eq!(later.last_good, first.last_good);
        assert_eq!(later.read_at, Some(t0));
        assert_eq!(later.confirmed_at, Some(t1), "it stands, so it is fresh");
        // Another spec is another source: read again.
        if let SourceSpec::Static(fixed) = &mut g.spec.source {
            fixed.count = 2;
        }
        sources.read(&g, t1).await;
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_read_keeps_the_last_good_topology_and_its_time() {
        let failing = Arc::new(AtomicBool::new(false));
        let flag = failing.clone();
        let sources = Sources::from_fn(move |_| {
            Ok(Box::new(Flaky {
                failing: flag.clone(),
            }) as Box<dyn TopologySource>)
        });
        let g = group(false);
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let first = sources.read(&g, t0).await;
        assert!(first.error.is_none() && first.last_good.is_some());
        failing.store(true, Ordering::SeqCst);
        let later = sources
            .read(&g, t0 + jiff::SignedDuration::from_secs(60))
            .await;
        assert_eq!(
            later.error.as_ref().map(SourceError::reason),
            Some("Throttled")
        );
        assert_eq!(later.last_good, first.last_good);
        assert_eq!(later.read_at, Some(t0));
        assert_eq!(
            later.confirmed_at,
            Some(t0),
            "the age counts from the last success"
        );
        // A later success with the same content keeps `read_at` (nothing to
        // publish) but moves `confirmed_at` (the topology is fresh again).
        failing.store(false, Ordering::SeqCst);
        let t2 = t0 + jiff::SignedDuration::from_secs(120);
        let again = sources.read(&g, t2).await;
        assert_eq!(again.read_at, Some(t0));
        assert_eq!(again.confirmed_at, Some(t2));
        assert!(again.error.is_none());
        assert_eq!(again.ordering_enforced, None, "a source without lineage");
        assert!(again.lineage.is_empty() && again.refresh_after.is_none());
    }

    #[tokio::test]
    async fn an_unbuildable_kinesis_source_still_reports_ordering_from_the_spec() {
        let sources =
            Sources::from_fn(|_| Err(SourceError::Other("the endpoint cannot be reached".into())));
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        for lease_table in [false, true] {
            let mut g = group(lease_table);
            g.metadata.name = Some(format!("k-{lease_table}"));
            g.spec.source = SourceSpec::Kinesis(
                serde_json::from_value(serde_json::json!({"streamName": "orders"})).unwrap(),
            );
            let read = sources.read(&g, now).await;
            assert_eq!(
                read.error.as_ref().map(SourceError::reason),
                Some("SourceError")
            );
            assert_eq!(read.ordering_enforced, Some(lease_table));
        }
        let read = sources.read(&group(false), now).await;
        assert_eq!(read.ordering_enforced, None, "static: no lineage");
    }

    #[tokio::test]
    async fn leases_come_from_the_source_only_with_a_lease_table() {
        let sources = Sources::from_fn(|_| {
            Ok(Box::new(Flaky {
                failing: Arc::default(),
            }) as Box<dyn TopologySource>)
        });
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let without = group(false);
        sources.read(&without, now).await;
        assert_eq!(sources.leases(&without), LeaseObservation::NotConfigured);
        let mut with = group(true);
        with.metadata.name = Some("v".into());
        assert!(
            matches!(sources.leases(&with), LeaseObservation::Failed(_)),
            "not read yet"
        );
        sources.read(&with, now).await;
        assert!(matches!(sources.leases(&with), LeaseObservation::Read(t) if t.items == 7));
    }
}
